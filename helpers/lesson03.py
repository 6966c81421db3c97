"""Lesson 03 · Fused softmax in Triton: figures (from the notebook's DataFrames), the live ``limits_rows``
(GPU only; ``tools/bench.py lessons``); the checkers of exercises 3.1 to 3.4: ``helpers.lesson03_exercises``.
Tables and numbers: the notebook."""

import math

import torch
import triton
from matplotlib.patches import Rectangle

from . import data, plots
from .gpu_data import LESSON_GPU
from .kernels import num_warps_for, softmax_fused_kernel
from .measure import DTYPES, eager_ms, gpu_ms, require_gpu
from .rowwise import acc_dtype

BANDWIDTH_PROVIDERS = ("copy", "torch_naive", "torch_softmax", "fused")  # plot_bandwidth's lines


def limits_rows(dtypes=("float32", "bfloat16"), total_bytes: int = 2**28, rounds: int = 3) -> list[dict]:
    """The fused kernel as rows grow at a fixed total size, past ``MAX_FUSED_COLS`` too: registers, spills,
    shared memory, and GPU and eager time as fractions of copy (medians of ``rounds``, with spreads)."""
    require_gpu("limits_rows")

    def timed(fn):  # (median, spread) over rounds
        t = sorted(fn() for _ in range(rounds))
        return t[len(t) // 2], (t[-1] - t[0]) / t[len(t) // 2]

    rows = []
    for d in dtypes:
        es = DTYPES[d].itemsize
        for N in (2**k for k in range(8, 19)):
            M = max(1, total_bytes // (N * es))
            row = dict(
                dtype=d,
                M=M,
                N=N,
                block=N,
                num_warps=num_warps_for(N),
                **dict.fromkeys(
                    (
                        "n_regs",
                        "n_spills",
                        "shared",
                        "status",
                        "graph_ms",
                        "ms",
                        "graph_frac",
                        "frac_of_copy",
                        "graph_gbps",
                        "max_err",
                        "graph_spread",
                        "spread",
                    ),
                    "",
                ),
            )
            try:
                x = torch.randn(M, N, device="cuda", dtype=DTYPES[d])
                out, y = torch.empty_like(x), torch.empty_like(x)
                args = (out, x, x.stride(0), x.stride(1), out.stride(0), N)
                kw = dict(BLOCK_SIZE=N, ACC=acc_dtype(x.dtype), num_warps=row["num_warps"])
                c = softmax_fused_kernel.warmup(*args, **kw, grid=(M,))
                c._init_handles()
                run = lambda: softmax_fused_kernel[(M,)](*args, **kw)  # noqa: E731
                run()
                err = (out.double() - torch.softmax(x.double(), -1)).abs().max().item()
                (copy_g, _), (copy_e, _), (g, g_spread), (e, e_spread) = (
                    timed(lambda: t(f)) for f in (lambda: y.copy_(x), run) for t in (gpu_ms, eager_ms)
                )
                row.update(
                    n_regs=c.n_regs,
                    n_spills=c.n_spills,
                    shared=c.metadata.shared,
                    status="ok",
                    graph_ms=g,
                    ms=e,
                    graph_frac=copy_g / g,
                    frac_of_copy=copy_e / e,
                    graph_gbps=2 * M * N * es / g / 1e6,
                    max_err=err,
                    graph_spread=g_spread,
                    spread=e_spread,
                )
            except Exception as ex:
                msg = (str(ex).strip().splitlines() or [type(ex).__name__])[0][:100].replace(",", ";")
                row["status"] = f"failed: {type(ex).__name__}: {msg}"
            torch.cuda.empty_cache()
            rows.append(row)
    return rows


# Figures --------------------------------------------------------------------------------------
def plot_program_grid(M: int = 4, N: int = 13):
    """One program per row, each a block of next_power_of_2(N) lanes; the lanes past N read -inf."""
    block = triton.next_power_of_2(N)
    fig, ax = plots.new_figure(8.0, 0.55 * M + 1.5)
    for r in range(M):
        y = M - 1 - r
        for c in range(block):
            inside, color = c < N, ["#9ecae1", "#fdd0a2", "#a1d99b", "#dadaeb", "#fcbba1", "#c7e9c0"][r % 6]
            ax.add_patch(
                Rectangle(
                    (c, y + 0.08),
                    0.92,
                    0.84,
                    facecolor=color if inside else "#f2f2f2",
                    edgecolor="#555555" if inside else "#bbbbbb",
                    hatch=None if inside else "///",
                    lw=0.6,
                )
            )
            if not inside:
                ax.text(c + 0.46, y + 0.5, "-inf", ha="center", va="center", fontsize=6.5, color="#888888")
        ax.text(-0.4, y + 0.5, f"program {r}  (row {r})", ha="right", va="center", fontsize=9)
    for lo, hi, text, col in (
        (0, N, f"n_cols = {N}: mask True", "#333333"),
        (N, block, f"{block - N} padding lanes", "#999999"),
    ):
        ax.annotate(
            "", xy=(hi - 0.04, M + 0.25), xytext=(lo, M + 0.25), arrowprops=dict(arrowstyle="<->", color=col, lw=1)
        )
        ax.text((lo + hi) / 2, M + 0.38, text, ha="center", va="bottom", fontsize=9, color=col)
    ax.axis("off")
    ax.set(xlim=(-6.5, block + 0.3), ylim=(-0.2, M + 1.1))
    ax.set_title(
        f"grid = (M,) = ({M},) programs, each with BLOCK_SIZE = next_power_of_2({N}) = {block} lanes", fontsize=10
    )
    return fig


def plot_bandwidth(bench=None, props=None, dtype: str = "float32", M: int = 4096):
    """GB/s against N, GPU time (left) and eager (right), from DataFrames like bench_<gpu>.csv and
    device_props.csv: the copy, the naive version, torch.softmax and the fused kernel, and the DRAM peak."""
    bench = data.load("bench", gpu=LESSON_GPU) if bench is None else bench
    peak = float((data.load("device_props") if props is None else props).dram_peak_gbps.iloc[0])
    rows = bench[(bench["dtype"] == dtype) & (bench.M == M) & (bench.status == "ok")].drop_duplicates(["N", "provider"])
    fig, axes = plots.new_figure(11.0, 4.3, ncols=2)
    axes[1].sharey(axes[0])
    ns = sorted(rows.N.unique())
    for ax, key, title in ((axes[0], "graph_gbps", "GPU time (CUDA graph)"), (axes[1], "gbps", "eager (L2 flushed)")):
        for p in BANDWIDTH_PROVIDERS:
            s = rows[rows.provider == p].sort_values("N")
            style = dict(ls="--", lw=1.5) if p == "copy" else dict(marker="o", lw=2 if p == "fused" else 1.5, ms=4)
            if len(s):
                ax.plot(s.N, s[key], color=plots.color(p), label=plots.label(p), **style)
        if math.isfinite(peak):  # labelled at the right end, above the line: clear of the copy's curve
            ax.axhline(peak, color="#999999", ls=":", lw=1)
            ax.text(
                ns[-1], peak * 1.02, f"DRAM peak {peak:,.0f} GB/s", fontsize=8, color="#777777", ha="right", va="bottom"
            )
        plots.set_n_axis(ax, ns)
        ax.set_title(title, fontsize=10)
    axes[0].set(ylabel="GB/s (2·M·N·bytes / time)", ylim=(0, None))
    handles, labels = axes[0].get_legend_handles_labels()  # one legend for both panels, below them: hides no data
    fig.legend(handles, labels, frameon=False, fontsize=8.5, loc="outside lower center", ncol=len(labels))
    fig.suptitle(
        f"Softmax bandwidth, {dtype}, M = {M}, {bench.attrs.get('provenance', {}).get('gpu', 'GPU')}", fontsize=10
    )
    return fig


def plot_limits(limits=None, props=None):
    """Fraction of copy as rows grow (left); float32's registers, spills and row elements a thread (right)."""
    limits = data.load("fused_limits") if limits is None else limits
    p = (data.load("device_props") if props is None else props).iloc[0]
    ok = limits[limits.status == "ok"].sort_values("N")
    fig, (ax1, ax2) = plots.new_figure(10.0, 3.8, ncols=2)
    for d, st, c in (("float32", "o-", plots.COLORS["fused"]), ("bfloat16", "s--", "#8c564b")):
        rs = ok[ok["dtype"] == d]
        ax1.plot(rs.N, rs.graph_frac, st, color=c, ms=4, label=d)
        ax1.plot(
            rs.N[rs.n_spills > 0],
            rs.graph_frac[rs.n_spills > 0],
            "x",
            color="#d62728",
            ms=9,
            mew=2,
            label="registers spill" if d == "bfloat16" else None,
        )
    ax1.axhline(1.0, color=plots.COLORS["copy"], ls="--", lw=1, label=plots.label("copy"))
    plots.set_n_axis(ax1, sorted(limits.N.unique()), "N (columns per row; M·N fixed)")
    ax1.set(ylim=(0, 1.12), ylabel="fraction of copy (GPU time)")
    ax1.set_title("The fused kernel as rows grow", fontsize=10)
    ax1.legend(frameon=False, fontsize=8.5, loc="lower left")
    rs = ok[ok["dtype"] == "float32"]
    sp = rs[rs.n_spills > 0]
    ax2.bar(sp.N, sp.n_spills, width=sp.N * 0.35, color="#d62728", alpha=0.5, label="registers spilled (n_spills)")
    ax2.plot(rs.N, rs.n_regs, "o-", color="#1f77b4", ms=4, label="registers per thread (n_regs)")
    ax2.plot(rs.N, rs.N / (32 * rs.num_warps), "^:", color="#2ca02c", ms=4, label="row elements per thread")
    cap = int(p.regs_per_sm // (p.warp_size * 16))
    ax2.axhline(cap, color="#555555", ls="--", lw=1)
    ax2.text(
        rs.N.min(), cap * 1.12, f"{cap} registers a thread: an SM's share for 16 warps", fontsize=8, color="#555555"
    )
    plots.set_n_axis(ax2, list(rs.N))
    ax2.set(yscale="log", ylim=(1, 4000), ylabel="per thread (log scale)")
    ax2.set_title("float32: what each thread has to hold", fontsize=10)
    ax2.legend(frameon=False, fontsize=8, loc="upper left")
    mib = limits.M.iloc[0] * limits.N.iloc[0] * DTYPES[limits["dtype"].iloc[0]].itemsize / 2**20
    fig.suptitle(f"{limits.attrs.get('provenance', {}).get('gpu', 'GPU')}, {mib:.0f} MiB per input", fontsize=9)
    return fig


FIGURES = {"03_program_grid": plot_program_grid, "03_fused_bandwidth": plot_bandwidth, "03_fused_limits": plot_limits}
