"""Lesson 03 · Fused softmax in Triton: its figures (drawn from the DataFrames the notebook shows),
its live measurements (``*_rows``, GPU only; ``helpers.bench lessons`` records ``limits_rows``) and
the checkers of exercises 3.1 to 3.4. Tables and the numbers the prose quotes live in the notebook."""

from __future__ import annotations

import math

import numpy as np
import torch
import triton

from . import data, plots
from .exercises import Wrong, call_attempt, check, fmt, guarded, guards_intact, launch_learner_kernel, run_learner_kernel
from .gpu_data import LESSON_GPU
from .kernels import MAX_FUSED_COLS, num_warps_for, softmax_fused, softmax_fused_kernel
from .launch import acc_dtype
from .measure import DTYPES, eager_ms, gpu_ms, measure_shape, require_gpu
from .reference import round_up_err

#: The providers of the bandwidth comparison, and the row lengths measured live on a GPU.
BANDWIDTH_PROVIDERS = ("copy", "torch_naive", "torch_softmax", "fused")
LIVE_NS = (256, 1024, 4096, 16384)


# Live measurements (GPU only) ----------------------------------------------------------------


def bandwidth_rows(M: int = 4096, ns=LIVE_NS) -> list[dict]:
    """The bandwidth comparison measured on this GPU (float32, quick timings with
    ``helpers.measure``): rows with the columns of bench_<gpu>.csv."""
    require_gpu("bandwidth_rows")
    from .reference import naive_softmax_rowwise

    provs = {"torch_naive": naive_softmax_rowwise, "torch_softmax": lambda x: torch.softmax(x, dim=-1),
             "fused": softmax_fused}
    return [r for n in ns for r in measure_shape(M, n, torch.float32, provs, quick=True)]


def _timed(fn, rounds: int) -> tuple[float, float]:
    t = sorted(fn() for _ in range(rounds))  # (median, spread) over rounds
    return t[len(t) // 2], (t[-1] - t[0]) / t[len(t) // 2]


def limits_rows(dtypes=("float32", "bfloat16"), total_bytes: int = 2**28, rounds: int = 3) -> list[dict]:
    """The fused kernel as rows grow at a fixed total size (GPU only): the compiled registers, spills
    and shared memory, GPU time and eager time as fractions of copy (medians of ``rounds`` rounds,
    with their spreads), and where it stops compiling. Launches the kernel past ``MAX_FUSED_COLS``."""
    require_gpu("limits_rows")
    rows = []
    for d in dtypes:
        dtype, es = DTYPES[d], DTYPES[d].itemsize
        for N in (2**k for k in range(8, 19)):
            M = max(1, total_bytes // (N * es))
            row = dict(dtype=d, M=M, N=N, block=N, num_warps=num_warps_for(N))
            try:
                x = torch.randn(M, N, device="cuda", dtype=dtype)
                out, y = torch.empty_like(x), torch.empty_like(x)
                args = (out, x, x.stride(0), x.stride(1), out.stride(0), N)
                kw = dict(BLOCK_SIZE=N, ACC=acc_dtype(dtype), num_warps=row["num_warps"])
                c = softmax_fused_kernel.warmup(*args, **kw, grid=(M,))
                c._init_handles()
                run = lambda: softmax_fused_kernel[(M,)](*args, **kw)  # noqa: E731
                run()
                err = (out.double() - torch.softmax(x.double(), -1)).abs().max().item()
                (copy_g, _), (copy_e, _), (g, g_spread), (e, e_spread) = (
                    _timed(lambda: t(f), rounds) for f in (lambda: y.copy_(x), run) for t in (gpu_ms, eager_ms))
                row.update(n_regs=c.n_regs, n_spills=c.n_spills, shared=c.metadata.shared, status="ok",
                           graph_ms=g, ms=e, graph_frac=copy_g / g, frac_of_copy=copy_e / e,
                           graph_gbps=2 * M * N * es / g / 1e6, max_err=err, graph_spread=g_spread, spread=e_spread)
                del x, out, y
            except Exception as ex:
                msg = (str(ex).strip().splitlines() or [type(ex).__name__])[0][:100].replace(",", ";")
                row.update({k: "" for k in ("n_regs", "n_spills", "shared", "graph_ms", "ms", "graph_frac",
                                            "frac_of_copy", "graph_gbps", "max_err", "graph_spread", "spread")},
                           status=f"failed: {type(ex).__name__}: {msg}")
            torch.cuda.empty_cache()
            rows.append(row)
    return rows


# Figures --------------------------------------------------------------------------------------


def plot_program_grid(M: int = 4, N: int = 13):
    """The fused kernel's grid for an (M, N) input: one program per row, each holding a block of
    next_power_of_2(N) lanes; the lanes past N are masked and read as -inf."""
    from matplotlib.patches import Rectangle

    block = triton.next_power_of_2(N)
    fig, ax = plots.new_figure(8.0, 0.55 * M + 1.5)
    palette = ["#9ecae1", "#fdd0a2", "#a1d99b", "#dadaeb", "#fcbba1", "#c7e9c0"]
    for r in range(M):
        y = M - 1 - r
        for c in range(block):
            inside = c < N
            ax.add_patch(Rectangle((c, y + 0.08), 0.92, 0.84, facecolor=palette[r % len(palette)] if inside else "#f2f2f2",
                                   edgecolor="#555555" if inside else "#bbbbbb", hatch=None if inside else "///", lw=0.6))
            if not inside:
                ax.text(c + 0.46, y + 0.5, "-inf", ha="center", va="center", fontsize=6.5, color="#888888")
        ax.text(-0.4, y + 0.5, f"program {r}  (row {r})", ha="right", va="center", fontsize=9)
    for lo, hi, text, col in ((0, N, f"n_cols = {N}: mask True", "#333333"),
                              (N, block, f"{block - N} padding lanes", "#999999")):
        ax.annotate("", xy=(hi - 0.04, M + 0.25), xytext=(lo, M + 0.25), arrowprops=dict(arrowstyle="<->", color=col, lw=1))
        ax.text((lo + hi) / 2, M + 0.38, text, ha="center", va="bottom", fontsize=9, color=col)
    ax.set_xlim(-6.5, block + 0.3)
    ax.set_ylim(-0.2, M + 1.1)
    ax.axis("off")
    ax.set_title(f"grid = (M,) = ({M},) programs, each with BLOCK_SIZE = next_power_of_2({N}) = {block} lanes",
                 fontsize=10)
    return fig


def plot_bandwidth(bench=None, props=None, dtype: str = "float32", M: int = 4096):
    """GB/s against N for the copy, the naive version, torch.softmax and the fused kernel: GPU time
    on the left (the headline), eager time on the right, with the DRAM peak. ``bench``: a DataFrame
    with the columns of bench_<gpu>.csv; ``props``: one of device_props.csv."""
    bench = data.load("bench", gpu=LESSON_GPU) if bench is None else bench
    props = data.load("device_props") if props is None else props
    rows = bench[(bench["dtype"] == dtype) & (bench.M == M) & (bench.status == "ok")].drop_duplicates(["N", "provider"])
    fig, axes = plots.new_figure(11.0, 4.0, ncols=2)
    axes[1].sharey(axes[0])
    ns = sorted(rows.N.unique())
    peak = float(props.dram_peak_gbps.iloc[0])
    for ax, key, title in ((axes[0], "graph_gbps", "GPU time (CUDA graph)"), (axes[1], "gbps", "eager (L2 flushed)")):
        for p in BANDWIDTH_PROVIDERS:
            s = rows[rows.provider == p].sort_values("N")
            if len(s):
                name = "y.copy_(x)" if p == "copy" else plots.label(p)
                style = dict(ls="--", lw=1.5) if p == "copy" else dict(marker="o", lw=2 if p == "fused" else 1.5, ms=4)
                ax.plot(s.N, s[key], color=plots.color(p), label=name, **style)
        if math.isfinite(peak):
            ax.axhline(peak, color="#999999", ls=":", lw=1)
            ax.text(ns[0], peak * 1.02, f"DRAM peak {peak:,.0f} GB/s", fontsize=8, color="#777777")
        plots.set_n_axis(ax, ns)
        ax.set_title(title, fontsize=10)
    axes[0].set_ylabel("GB/s (2·M·N·bytes / time)")
    axes[0].set_ylim(0, None)
    axes[0].legend(frameon=False, fontsize=8.5, loc="lower right")
    gpu = bench.attrs.get("provenance", {}).get("gpu", "GPU")
    fig.suptitle(f"Softmax bandwidth, {dtype}, M = {M}, {gpu}", fontsize=10)
    return fig


def plot_limits(limits=None, props=None):
    """Left: the fused kernel's fraction of copy in GPU time as rows grow, per dtype. Right (float32):
    the registers each thread uses, the registers spilled, and the row elements each thread holds."""
    limits = data.load("fused_limits") if limits is None else limits
    props = data.load("device_props") if props is None else props
    ok = limits[limits.status == "ok"].sort_values("N")
    fig, (ax1, ax2) = plots.new_figure(10.0, 3.8, ncols=2)
    styles = {"float32": ("o-", plots.COLORS["fused"]), "bfloat16": ("s--", "#8c564b")}
    for d, (st, c) in styles.items():
        rs = ok[ok["dtype"] == d]
        if len(rs):
            ax1.plot(rs.N, rs.graph_frac, st, color=c, ms=4, label=d)
            sp = rs[rs.n_spills > 0]
            ax1.plot(sp.N, sp.graph_frac, "x", color="#d62728", ms=9, mew=2)
    ax1.plot([], [], "x", color="#d62728", ms=8, mew=2, label="registers spill")
    ax1.axhline(1.0, color=plots.COLORS["copy"], ls="--", lw=1)
    ax1.text(limits.N.min(), 1.02, "copy", fontsize=8, color=plots.COLORS["copy"])
    ax1.axvline(MAX_FUSED_COLS, color="#999999", ls=":", lw=1)
    ax1.text(MAX_FUSED_COLS * 1.08, 0.05, "MAX_FUSED_COLS", fontsize=8, color="#777777", rotation=90, va="bottom")
    plots.set_n_axis(ax1, sorted(limits.N.unique()), "N (columns per row; M·N fixed)")
    ax1.set_ylim(0, 1.12)
    ax1.set_ylabel("fraction of copy (GPU time)")
    ax1.set_title("The fused kernel as rows grow", fontsize=10)
    ax1.legend(frameon=False, fontsize=8.5, loc="lower left")

    rs = ok[ok["dtype"] == "float32"]
    sp = rs[rs.n_spills > 0]
    ax2.bar(sp.N, sp.n_spills, width=sp.N * 0.35, color="#d62728", alpha=0.5, label="registers spilled (n_spills)")
    ax2.plot(rs.N, rs.n_regs, "o-", color="#1f77b4", ms=4, label="registers per thread (n_regs)")
    ax2.plot(rs.N, rs.N / (32 * rs.num_warps), "^:", color="#2ca02c", ms=4, label="row elements per thread")
    p = props.iloc[0]
    cap = int(p.regs_per_sm // (p.warp_size * 16))
    ax2.axhline(cap, color="#555555", ls="--", lw=1)
    ax2.text(rs.N.min(), cap * 1.12, f"{cap} registers a thread: the most 16 warps can have on one SM",
             fontsize=8, color="#555555")
    plots.set_n_axis(ax2, list(rs.N))
    ax2.set_yscale("log")
    ax2.set_ylim(1, 4000)
    ax2.set_ylabel("per thread (log scale)")
    ax2.set_title("float32: what each thread has to hold", fontsize=10)
    ax2.legend(frameon=False, fontsize=8, loc="upper left")
    r = limits.iloc[0]
    mib = r.M * r.N * DTYPES[r["dtype"]].itemsize / 2**20
    fig.suptitle(f"{limits.attrs.get('provenance', {}).get('gpu', 'GPU')}, {mib:.0f} MiB per input", fontsize=9)
    return fig


#: Figures of this lesson, by the name ``helpers.plots.save`` writes them under.
FIGURES = {"03_program_grid": plot_program_grid, "03_fused_bandwidth": plot_bandwidth, "03_fused_limits": plot_limits}


# Exercise checkers: each prints one line (correct / not yet / wrong) and never raises. Learner
# kernels run through helpers.exercises on guarded buffers whose rows are further apart than their
# length, with NaN between the rows: a load past a row's end puts NaN into the output, a store
# there breaks the padding, and a stride taken from the wrong tensor puts rows in the wrong place.


def _as_int(v, what):
    v = v.item() if isinstance(v, torch.Tensor) and v.numel() == 1 else v
    if isinstance(v, bool) or not (isinstance(v, (int, np.integer)) or isinstance(v, float) and v.is_integer()):
        raise Wrong(f"{what} should be a whole number of lanes (an int), got {type(v).__name__} {v!r}")
    return int(v)


def _trial_3_1(block_and_padding) -> str:
    for n in (1, 2, 3, 4, 78, 781, 1000, 1024, 1025, 12672, 65536):
        got = call_attempt(block_and_padding, n)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise Wrong(f"return a pair (BLOCK_SIZE, padding), got {type(got).__name__} {got!r}")
        want = triton.next_power_of_2(n)
        block, pad = _as_int(got[0], "BLOCK_SIZE"), _as_int(got[1], "padding")
        if (block, pad) == (want - n, want) and block != pad:
            raise Wrong(f"for N = {n} you returned ({block}, {pad}): return (BLOCK_SIZE, padding), in that order")
        if block != want:
            hint = (f"{n} is already a power of two, so the row fills its block exactly: stop doubling once the block "
                    f"holds the row" if block == 2 * n == 2 * want else
                    "the block must hold the whole row: the smallest power of two that is at least N" if block < n else
                    "BLOCK_SIZE must be a power of two (tl.arange requires it), the smallest one that is at least N")
            raise Wrong(f"for N = {n} you gave BLOCK_SIZE = {block}, expected {want}: {hint}")
        if pad != want - n:
            raise Wrong(f"for N = {n} (BLOCK_SIZE = {want}) you gave padding = {pad}, expected {want - n}: "
                        f"the padding is the block's lanes past the row's end")
    return "e.g. N = 781 -> BLOCK_SIZE 1024 with 243 padding lanes"


def check_3_1(block_and_padding) -> None:
    """Exercise 3.1: ``block_and_padding(n_cols)`` returns (BLOCK_SIZE, padding lanes)."""
    check("3.1", "block size and padding", block_and_padding, _trial_3_1)


# Exercise 3.2: softmax over dim 0 with the row kernel, through strides --------------------------


class _KernelSpy:
    """Stands in for ``softmax_fused_kernel`` in exercise 3.2: records every ``kernel[grid](...)``
    launch and runs the real kernel through ``run_learner_kernel`` (guarded output)."""

    def __init__(self, kernel, outputs):
        self.kernel, self.outputs, self.launches, self.fn = kernel, outputs, [], kernel.fn

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches.append((grid, args, kwargs))
            run_learner_kernel(self.kernel, grid, *args, outputs=self.outputs, **kwargs)
        return launch


def _launch_args(args, kwargs) -> dict:
    names = ("out_ptr", "in_ptr", "in_row_stride", "in_col_stride", "out_row_stride", "n_cols", "BLOCK_SIZE")
    return {**dict(zip(names, args)), **{k: v for k, v in kwargs.items() if k in names}}


def _dim0_hint(launch, x: torch.Tensor, out: torch.Tensor) -> str:
    """What is wrong with the arguments of a launch, for a softmax over the columns of ``x``."""
    grid, args, kwargs = launch
    a = _launch_args(args, kwargs)
    M, N = x.shape
    g = grid(dict(BLOCK_SIZE=a.get("BLOCK_SIZE"))) if callable(grid) else grid
    g0 = g[0] if isinstance(g, (tuple, list)) and g else g
    rs, cs, ors, nc = (a.get(k) for k in ("in_row_stride", "in_col_stride", "out_row_stride", "n_cols"))
    if (rs, cs) == x.stride() and M != 1:
        return ("in_row_stride and in_col_stride are x's strides for a softmax over rows: the kernel's "
                "'row' is now a column of x, so its row stride is x.stride(1) and its column stride x.stride(0)")
    if g0 != N:
        return f"one program per column of x: the grid is (x.shape[1],) = ({N},), you launched {g!r}"
    if nc != M:
        return f"n_cols is the length of what each program reduces: a column of x has x.shape[0] = {M} elements, you passed {nc!r}"
    if rs != x.stride(1) or cs != x.stride(0):
        return (f"use x.stride(), not the shape: this x is a slice of a wider tensor, its strides are {x.stride()}; "
                f"you passed in_row_stride = {rs!r}, in_col_stride = {cs!r}")
    if ors != out.stride(0):
        return (f"out_row_stride is the distance between out[c] and out[c + 1], out.stride(0) = {out.stride(0)} "
                f"here (rows of out can be further apart than their length); you passed {ors!r}")
    b = a.get("BLOCK_SIZE")
    if isinstance(b, int) and b < M:
        return f"BLOCK_SIZE must hold a whole column: a power of two >= {M}, you passed {b}"
    return "out[c] must be the softmax of column c of x"


def _trial_3_2(softmax_dim0) -> str:
    if not callable(softmax_dim0):
        raise Wrong(f"expected a function, got {type(softmax_dim0).__name__}")
    g = torch.Generator().manual_seed(302)
    # (M, N, row stride of x: None = contiguous, else a slice of a wider tensor; row stride of out)
    cases = [(5, 3, None, None), (3, 7, None, 5), (13, 20, None, None), (20, 13, 23, 27), (1, 6, None, None),
             (7, 1, 3, 10), (40, 9, 14, 43)]
    worst = 0.0
    for M, N, xs, os_ in cases:
        x = guarded((M, N), row_stride=xs, fill=0.0)
        x.copy_(torch.randn(M, N, generator=g) * 3)
        before = x.clone()
        out = guarded((N, M), row_stride=os_)
        spy = _KernelSpy(softmax_fused_kernel, outputs=(out,))
        shape = f"{M} x {N}" + (f" (a slice of a wider tensor, strides {x.stride()})" if xs else "")
        try:
            softmax_dim0(x, out, spy)
        except Wrong:  # from run_learner_kernel: an access outside x and out
            hint = _dim0_hint(spy.launches[-1], x, out) if spy.launches else "check the launch's arguments"
            raise Wrong(f"on x of shape {shape} the kernel reached memory outside x and out: {hint}") from None
        except Exception as e:
            if not spy.launches or isinstance(e, NotImplementedError):
                raise
            msg = (str(e).strip().splitlines() or [""])[-1][:120]
            raise Wrong(f"on x of shape {shape} the launch raised {type(e).__name__}: {msg} "
                        f"({_dim0_hint(spy.launches[-1], x, out)})") from None
        if len(spy.launches) != 1:
            raise Wrong(f"launch the kernel once (one program per column), not {len(spy.launches)} times" if spy.launches
                        else "your function never launched the kernel it was given: call kernel[grid](...) once")
        a = _launch_args(spy.launches[0][1], spy.launches[0][2])
        xin, o = a.get("in_ptr"), a.get("out_ptr")
        if not isinstance(xin, torch.Tensor) or not isinstance(o, torch.Tensor):
            raise Wrong("pass out and x themselves as the kernel's first two arguments (out_ptr, in_ptr)")
        for bad, why in ((xin.untyped_storage().data_ptr() != x.untyped_storage().data_ptr(),
                          "the kernel read a copy of x (x.t().contiguous() or similar moves the whole tensor through "
                          "memory once more): pass x itself and let the strides do the transposing"),
                         (xin.data_ptr() != x.data_ptr(), "in_ptr must point at x's first element: pass x itself"),
                         (o.data_ptr() != out.data_ptr(), "write into the out tensor you were given (pass it as out_ptr)"),
                         (not torch.equal(x, before), "x changed: the kernel must only read it")):
            if bad:
                raise Wrong(why)
        ref = torch.softmax(x.detach().cpu().double(), dim=0)
        got = out.detach().cpu().double().t()
        if torch.isnan(got).any():
            cols = sorted({int(c) for c in torch.nonzero(torch.isnan(got))[:, 1]})
            raise Wrong(f"on x of shape {shape}, out[c] holds NaN (never written, or read from past a row's end) "
                        f"for c in {cols[:6]}: {_dim0_hint(spy.launches[0], x, out)}")
        err = (got - ref).abs().max().item()
        if not err <= 1e-5:
            raise Wrong(f"on x of shape {shape}: out.t() is {err:.1e} away from softmax(x, dim=0): "
                        f"{_dim0_hint(spy.launches[0], x, out)}")
        worst = max(worst, err)
    return f"max abs error {round_up_err(worst)}, and x was read in place on every shape, slices included"


def check_3_2(softmax_dim0) -> None:
    """Exercise 3.2: ``softmax_dim0(x, out, kernel)`` writes softmax(x, dim=0) into out (shape
    (N, M), out[c] = column c) with one launch of ``kernel`` on x itself."""
    check("3.2", "a column-wise softmax through strides", softmax_dim0, _trial_3_2)


# Exercise 3.3: a fused scaled softmax kernel ---------------------------------------------------


def isolated_max_rows(M: int, N: int, g, top: float = 120.0, gap: float = 100.0) -> torch.Tensor:
    """Rows whose maximum is above ``top`` and at least ``gap`` above every other element: shifting
    by anything but the maximum (nothing, the mean, the min, another element) overflows exp in
    float32, and the row's softmax is 1 at the maximum and 0 elsewhere."""
    z = top - gap - 30.0 * torch.rand(M, N, generator=g)
    z[torch.arange(M), torch.randint(0, N, (M,), generator=g)] = top + 10.0 * torch.rand(M, generator=g)
    return z


# ((M, N), scale, rows, row stride of x, row stride of out): each case catches a mistake the ones
# before it let through; every case has rows further apart than their length, differently in x and out.
_CASES_3_3 = [
    ((3, 8), 0.5, "randn", 11, 13),       # no padding: the scale, and which stride goes with which tensor
    ((5, 37), 2.0, "randn", 41, 39),      # padding lanes: masks on the load and on the store
    ((2, 20), 3.0, "isolated", 23, 21),   # only the max shift keeps exp finite
    ((4, 13), -1.0, "randn", 17, 15),     # a negative scale with padding: -inf * scale = +inf
    ((3, 16), -2.0, "isolated", 19, 21),  # negative scale, no padding: the max of x * scale, not of x
    ((4, 70), -0.25, "isolated", 75, 73),  # both at once, several rows of padding
]


def _stride_hint(x, out, scale: float) -> str:
    """Which row strides the learner's kernel used, read off where it wrote and what it computed:
    each (load stride, store stride) pair of a plausible mistake is simulated on the same buffers."""
    (M, N), rs_in, rs_out = x.shape, x.stride(0), out.stride(0)
    says = {("load", rs_out): "it loads with out_row_stride: x's rows are in_row_stride apart",
            ("load", N): "it steps from row to row of x by n_cols: x's rows are in_row_stride apart, which is "
                         "n_cols only for a contiguous x",
            ("store", rs_in): "it stores with in_row_stride: out's rows are out_row_stride apart",
            ("store", N): "it steps from row to row of out by n_cols: out's rows are out_row_stride apart, which "
                          "is n_cols only for a contiguous out"}
    span = out.untyped_storage().nbytes() // out.element_size()
    for ld in (rs_in, rs_out, N):
        read = torch.as_strided(x, (M, N), (ld, 1)).detach().cpu().double()
        want = torch.softmax(read * scale, -1)
        for st in (rs_out, rs_in, N):
            if (ld, st) == (rs_in, rs_out) or out.storage_offset() + (M - 1) * st + N > span:
                continue
            wrote = torch.as_strided(out, (M, N), (st, 1)).detach().cpu().double()
            if torch.allclose(wrote, want, atol=1e-5, equal_nan=True):
                return "; ".join(says[k, v] for k, v, right in (("load", ld, rs_in), ("store", st, rs_out)) if v != right)
    return ""


def _run_3_3(kernel, data: torch.Tensor, scale: float, rs_in: int, rs_out: int, pad: float | None):
    """The learner's kernel on ``data`` in a guarded x whose rows are ``rs_in`` apart (``pad`` between
    them, or NaN), into a guarded out whose rows are ``rs_out`` apart: (x, out, x's memory changed)."""
    M, N = data.shape
    x = guarded((M, N), row_stride=rs_in, fill=0.0)
    x.copy_(data)
    if pad is not None:
        torch.as_strided(x, (M, rs_in - N), (rs_in, 1), x.storage_offset() + N).fill_(pad)
    memory = torch.empty(0, dtype=x.dtype, device=x.device).set_(x.untyped_storage())
    before = memory.clone()
    out = guarded((M, N), row_stride=rs_out)
    with np.errstate(all="ignore"):
        launch_learner_kernel(kernel, (M,), out, x, rs_in, rs_out, N, scale, BLOCK_SIZE=triton.next_power_of_2(N),
                              where=f"on a {M} x {N} input", outputs=())
    return x, out, not torch.equal(memory.view(torch.int32), before.view(torch.int32))


def _differ(e: float, g: float) -> tuple[str, str]:
    """Two numbers printed with enough digits to tell them apart."""
    return next(((f"{e:.{d}g}", f"{g:.{d}g}") for d in (4, 6, 9) if f"{e:.{d}g}" != f"{g:.{d}g}"), (repr(e), repr(g)))


def _trial_3_3(kernel) -> str:
    if not hasattr(kernel, "__getitem__") or not hasattr(kernel, "fn"):
        raise Wrong("scaled_softmax_kernel must be a Triton kernel: decorate it with @triton.jit")
    g = torch.Generator().manual_seed(33)
    worst = 0.0
    for (M, N), scale, rows, rs_in, rs_out in _CASES_3_3:
        z = isolated_max_rows(M, N, g) if rows == "isolated" else torch.randn(M, N, generator=g)
        data = z / scale if rows == "isolated" else z
        # no padding lanes in the first case: finite values between x's rows tell which stride a load took
        x, out, changed = _run_3_3(kernel, data, scale, rs_in, rs_out, pad=-2.0 if N == 8 else None)
        on = f"on a {M} x {N} input (rows {rs_in} apart in x, {rs_out} in out) with scale = {scale}"
        if changed:
            raise Wrong(f"{on} your kernel changed its input: store into out_ptr only")
        ref = torch.softmax(data.double() * scale, -1)
        got = out.detach().cpu().double()
        bad_nan, bad_pad = bool(torch.isnan(got).any()), not guards_intact(out)
        err = (got - ref).abs().nan_to_num(float("inf")).max().item()
        if not (bad_nan or bad_pad or err > 1e-5):
            worst = max(worst, err)
            continue
        where = _stride_hint(x, out, scale)
        if where:
            raise Wrong(f"{on}: {where}")
        padded = N & (N - 1) != 0
        hints = ((bad_nan and scale < 0 and padded and rows == "randn",
                  "your output has NaN: the padding lanes load -inf, and -inf * scale is +inf when scale < 0. "
                  "Give the padding lanes -inf after scaling (tl.where with the mask)"),
                 (bad_nan and rows == "isolated" and scale < 0,
                  "your output has NaN on rows where only a shift by the maximum of x * scale keeps exp finite: with "
                  "scale < 0 the largest x * scale comes from the smallest x. Take the max of x * scale, after scaling"),
                 (bad_nan and rows == "isolated",
                  "your output has NaN on rows where only a shift by the row maximum keeps exp finite: did you "
                  "subtract the row maximum (of x * scale) before tl.exp?"),
                 (bad_nan, "your output has NaN, and every input value is finite: the checker puts NaN just past the "
                           "end of each row, so a load reached past the row's end. Does tl.load have mask=cols < n_cols?"),
                 (bad_pad, "your kernel wrote past the end of a row of out (into the padding after it): does tl.store "
                           "have mask=cols < n_cols?"))
        hint = next((h for bad, h in hints if bad), "")
        if not hint:
            r, c = divmod(int((got - ref).abs().argmax()), N)
            e, o = _differ(float(ref[r, c]), float(got[r, c]))
            hint = f"out[{r}, {c}] should be {e} (softmax(x * scale)), you wrote {o}"
        raise Wrong(f"{on}: {hint}")
    return f"max abs error {round_up_err(worst)}"


def check_3_3(scaled_softmax_kernel) -> None:
    """Exercise 3.3: a Triton kernel computing softmax(x * scale) row by row."""
    check("3.3", "a fused scaled softmax kernel", scaled_softmax_kernel, _trial_3_3)


# Exercise 3.4: predict a bandwidth-bound time ------------------------------------------------


#: A wrong answer off by the same factor on every case, and what that factor means.
_FACTORS_3_4 = ((0.5, "count the write as well as the read: 2 · M · N · element_size bytes"),
                (2.0, "each element is read once and written once: 2 · M · N · element_size bytes, not twice that"),
                (1e-3, "milliseconds, not seconds: multiply seconds by 1e3"),
                (1e3, "milliseconds, not microseconds"),
                (1e9, "gbps is in 10**9 bytes per second: divide the bytes by gbps * 1e9"),
                (1e9 / 2**30, "a GB here is 10**9 bytes, not 2**30"))


def _trial_3_4(predicted_ms) -> str:
    cases = [(4096, 4096, 4, 4000.0), (1, 1, 4, 1.0), (65536, 1024, 2, 3350.0), (1024, 65536, 4, 2000.0), (3, 5, 8, 10.0)]
    got = []
    for c in cases:
        v = call_attempt(predicted_ms, *c)
        v = v.item() if isinstance(v, torch.Tensor) and v.numel() == 1 else v
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise Wrong(f"return a number of milliseconds, got {type(v).__name__}")
        got.append(float(v))
    want = [2 * M * N * es / (gb * 1e9) * 1e3 for M, N, es, gb in cases]
    bad = [i for i, (v, w) in enumerate(zip(got, want)) if not math.isclose(v, w, rel_tol=1e-6)]
    if not bad:
        return "e.g. a 4096 x 4096 float32 softmax at 4,000 GB/s: at least 0.0336 ms"
    same = lambda rs: all(math.isclose(r, rs[0], rel_tol=1e-3) for r in rs)  # noqa: E731
    ratio = [v / w for v, w in zip(got, want)]
    per_byte = [r * c[2] for r, c in zip(ratio, cases)]  # constant when element_size was ignored
    hint, size = "", round(per_byte[0])
    if same(ratio):
        hint = next((why for f, why in _FACTORS_3_4 if math.isclose(ratio[0], f, rel_tol=1e-3)), "")
    elif same(per_byte) and size and math.isclose(per_byte[0], size, rel_tol=1e-3):
        hint = ("multiply by element_size: the bandwidth counts bytes, not elements" if size == 1 else
                f"use element_size: your answer fits a fixed {size} bytes an element")
    i = bad[0]
    (M, N, es, gb), (e, o) = cases[i], _differ(want[i], got[i])
    raise Wrong(f"for M = {M}, N = {N}, {es}-byte elements at {gb:g} GB/s you gave {o} ms, expected {e} ms"
                + (f" ({hint})" if hint else ""))


def check_3_4(predicted_ms) -> None:
    """Exercise 3.4: ``predicted_ms(M, N, element_size, gbps)``: the time of a bandwidth-bound
    kernel that reads and writes each element once."""
    check("3.4", "predict a bandwidth-bound time", predicted_ms, _trial_3_4)
