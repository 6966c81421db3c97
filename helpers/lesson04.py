"""Lesson 04 · Online softmax: loop over a row in blocks, with a running max and a running sum.

What lives here: the online update in plain PyTorch (float64) with a printed and drawn trace,
checked against ``kernels.softmax_online``; the hard rows (a late, far larger maximum; leading
blocks of -inf); the traffic table of the looped kernels; the "rows grow" data (GPU time and eager,
the recorded H100 run on the CPU), its L2 model and figure; the link to attention (an output
accumulator rescaled like the sum); and the checkers of exercises 4.1 (a learner-written online
kernel, run on hostile rows) to 4.3.
"""

from __future__ import annotations

import math

import torch

from . import gpu_data, plots
from .exercises import Wrong, check, fmt, guarded, launch_learner_kernel
from .gpu_data import ok as _ok, series as _series
from .kernels import softmax_fused, softmax_online, softmax_three_pass
from .measure import DTYPES, measure_shape, require_gpu
from .mode import DEVICE, ON_GPU
from .plots import label, n_label, set_n_axis


def _label(provider: str) -> str:
    """A provider's display name; the copy is named by what it is, a comparison rather than a ceiling."""
    return "y.copy_(x)" if provider == "copy" else label(provider)
from .reference import error_report, round_up_err
from .traffic import kernel_traffic

NEG_INF = float("-inf")

# --------------------------------------------------------------------------------------------
# The online update, in plain PyTorch
# --------------------------------------------------------------------------------------------


def online_step(m: float, d: float, block: torch.Tensor, rescale: bool = True) -> dict:
    """One block of the online softmax: the new running max ``m_new = max(m, max(block))`` and the
    new running sum ``d * exp(m - m_new) + sum(exp(block - m_new))``, with the pieces in between.

    While everything seen is -inf (m_new = -inf) there is nothing to rescale or add: alpha = 1 and
    the block adds 0 (the kernel does the same). ``rescale=False`` shows what goes wrong without
    the factor."""
    block = block.detach().cpu().to(torch.float64)
    block_max = float(block.max()) if block.numel() else NEG_INF
    m_new = max(m, block_max)
    if m_new == NEG_INF:
        alpha, block_sum = 1.0, 0.0
    else:
        alpha = math.exp(m - m_new) if rescale else 1.0
        block_sum = float(torch.exp(block - m_new).sum())
    return {
        "values": block.tolist(), "block_max": block_max, "m_old": m, "m_new": m_new, "alpha": alpha,
        "d_old": d, "d_rescaled": d * alpha, "block_sum": block_sum, "d_new": d * alpha + block_sum,
    }


def online_trace(x: torch.Tensor, block_size: int, rescale: bool = True) -> list[dict]:
    """Run the online (max, sum) pass over a 1-D ``x`` in blocks of ``block_size``: one dict per
    block (see :func:`online_step`)."""
    if not isinstance(x, torch.Tensor) or x.dim() != 1 or x.numel() == 0:
        raise ValueError("online_trace: x must be a non-empty 1-D tensor.")
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"online_trace: block_size must be a positive int, got {block_size!r}.")
    m, d, steps = NEG_INF, 0.0, []
    for start in range(0, x.numel(), block_size):
        s = online_step(m, d, x[start:start + block_size], rescale=rescale)
        s["block"] = len(steps)
        steps.append(s)
        m, d = s["m_new"], s["d_new"]
    return steps


def trace_softmax(x: torch.Tensor, steps: list[dict]) -> torch.Tensor:
    """The softmax of ``x`` from the final (m, d) of a trace: exp(x - m) / d (float64)."""
    m, d = steps[-1]["m_new"], steps[-1]["d_new"]
    return torch.exp(x.detach().cpu().to(torch.float64) - m) / d


#: The worked example: three blocks of four whose maxima are 3, 5 and 2.
TRACE_ROW = [1.0, 3.0, 0.0, 2.0, 5.0, 1.0, 4.0, 2.0, 2.0, 0.0, 1.0, -1.0]
TRACE_BLOCK = 4


def trace_example() -> tuple[torch.Tensor, int]:
    """The worked example's row (float32) and block size."""
    return torch.tensor(TRACE_ROW), TRACE_BLOCK


def _f(v: float, digits: int = 4) -> str:
    if v == NEG_INF:
        return "-inf"
    return f"{v:.{digits}f}"


def print_trace(steps: list[dict], digits: int = 4) -> None:
    """Print a trace: per block, the running max before and after, the rescale factor and the
    running sum."""
    head = (f"{'block':>5}  {'values':<22} {'block max':>9}  {'m: before -> after':>18}  {'rescale e^(m-m_new)':>19}  "
            f"{'d * rescale + block sum = d':>30}")
    print(head)
    print("-" * len(head))
    for s in steps:
        vals = "[" + ", ".join(f"{v:g}" for v in s["values"]) + "]"
        m_s = f"{_f(s['m_old'], 1)} -> {_f(s['m_new'], 1)}"
        if s["m_old"] == NEG_INF:
            a_s = "(nothing yet)"
        else:
            a_s = f"e^({s['m_old']:g}-{s['m_new']:g}) = {s['alpha']:.{digits}f}"
        d_s = f"{s['d_rescaled']:.{digits}f} + {s['block_sum']:.{digits}f} = {s['d_new']:.{digits}f}"
        print(f"{s['block'] + 1:>5}  {vals:<22} {_f(s['block_max'], 1):>9}  {m_s:>18}  {a_s:>19}  {d_s:>30}")


def check_trace_against_kernel(x: torch.Tensor, block_size: int) -> float:
    """Compare the trace's final (m, d) with the row's true max and sum, and the softmax it gives
    with ``helpers.softmax_online(x, block_size)`` on the same row. Prints three lines; returns the
    max abs difference from the kernel."""
    steps = online_trace(x, block_size)
    x64 = x.detach().cpu().to(torch.float64)
    true_m = float(x64.max())
    true_d = float(torch.exp(x64 - true_m).sum())
    print(f"trace:  m = {steps[-1]['m_new']:.4f}, d = {steps[-1]['d_new']:.6f}")
    print(f"exact:  m = {true_m:.4f}, d = {true_d:.6f}  (max of the row, sum of exp(x - max))")
    kernel = softmax_online(x.to(DEVICE)[None, :], block_size=block_size)[0].cpu().to(torch.float64)
    diff = float((trace_softmax(x, steps) - kernel).abs().max())
    print(f"softmax from the trace vs helpers.softmax_online(x, block_size={block_size}): "
          f"max abs difference {round_up_err(diff)}")
    return diff


def plot_trace(steps: list[dict] | None = None):
    """Left: the row's values by block, the block maxima and the running max. Right: the running
    sum per block, the old sum shrunk by the rescale factor plus the block's own sum."""
    if steps is None:
        x, b = trace_example()
        steps = online_trace(x, b)
    fig, (ax1, ax2) = plots.new_figure(10.5, 3.9, ncols=2)
    palette = ["#9ecae1", "#fdae6b", "#a1d99b", "#bcbddc", "#fc9272", "#c7e9c0"]
    pos = 0
    run_x, run_m = [], []
    for s in steps:
        n = len(s["values"])
        xs = list(range(pos, pos + n))
        finite = [v if v != NEG_INF else 0.0 for v in s["values"]]
        ax1.bar(xs, finite, color=palette[s["block"] % len(palette)], edgecolor="#555555", lw=0.5,
                label=f"block {s['block'] + 1}")
        k = max(range(n), key=lambda i: s["values"][i])
        ax1.plot([xs[k]], [s["values"][k]], "v", color="#333333", ms=6)
        run_x += [pos - 0.5, pos + n - 0.5]
        run_m += [s["m_new"], s["m_new"]]
        ax1.text(pos + n / 2 - 0.5, s["m_new"] + 0.35, f"m = {s['m_new']:g}", ha="center", fontsize=9,
                 color=plots.COLORS["online"])
        if s["block"]:
            ax1.axvline(pos - 0.5, color="#aaaaaa", lw=0.8, ls=":")
        pos += n
    ax1.plot(run_x, run_m, "-", color=plots.COLORS["online"], lw=2, label="running max m")
    ax1.plot([], [], "v", color="#333333", ms=6, label="block max")
    ax1.set_xlabel("position in the row")
    ax1.set_ylabel("x")
    finite_vals = [v for s in steps for v in s["values"] if v != NEG_INF]
    ax1.set_ylim(min(0, min(finite_vals)) - 0.5, max(s["m_new"] for s in steps) + 2.4)
    ax1.set_title("The running max after each block", fontsize=10)
    ax1.legend(frameon=False, fontsize=8, loc="upper left", ncols=3, columnspacing=1.0, handlelength=1.5)

    idx = [s["block"] for s in steps]
    plots.rescale_bars(ax2, idx, [s["d_old"] for s in steps], [s["alpha"] for s in steps],
                       [s["block_sum"] for s in steps], [s["m_old"] == NEG_INF for s in steps], "d",
                       ticks=[f"block {i + 1}\nmax {s['block_max']:g}" for i, s in zip(idx, steps)])
    ax2.set_ylabel("running sum d = Σ exp(x − m)")
    ax2.set_title("The running sum: rescale, then add", fontsize=10)
    ax2.legend(frameon=False, fontsize=8, loc="upper left")
    return fig


# --------------------------------------------------------------------------------------------
# Rows that break careless versions
# --------------------------------------------------------------------------------------------


def hard_rows(n_cols: int = 70, seed: int = 0) -> dict[str, torch.Tensor]:
    """Named float32 rows of ``n_cols`` (a 1-D tensor each) that a looped softmax must get right."""
    g = torch.Generator().manual_seed(seed)
    base = lambda: torch.randn(n_cols, generator=g) * 2  # noqa: E731
    rows = {"random": base()}
    x = base()
    x[n_cols - 3] = 200.0
    rows["late max of 200"] = x  # exp(200) overflows float32: only a rescaled sum survives it
    x = base()
    x[: n_cols // 2 + 5] = NEG_INF
    rows["first blocks all -inf"] = x
    x = base()
    x[0] = 50.0
    rows["max in the first slot"] = x
    x = base()
    x[:] = NEG_INF
    rows["all -inf (NaN expected)"] = x
    return rows


def run_hard_rows(block_size: int = 16, n_cols: int = 70) -> bool:
    """Run the three-pass and online kernels with ``block_size`` on each hard row and print their
    errors against the float64 reference (NaN must match too). Returns True if all pass."""
    rows = hard_rows(n_cols)
    print(f"rows of {n_cols} columns in blocks of {block_size} ({-(-n_cols // block_size)} blocks, the last one partial)")
    print(f"{'row':<26} {'three-pass':>12} {'online':>12}")
    all_ok = True
    for name, x in rows.items():
        cells = []
        for fn in (softmax_three_pass, softmax_online):
            y = fn(x.to(DEVICE)[None, :], block_size=block_size)
            rep = error_report(y, x[None, :])
            ok = rep.ok(atol=1e-6)
            all_ok &= ok
            if rep.nan_mismatch:
                cells.append(f"{rep.nan_mismatch} NaN wrong")
            elif torch.isnan(y).all():
                cells.append("NaN (right)")
            else:
                cells.append(round_up_err(rep.max_abs) + ("" if ok else " !"))
        print(f"{name:<26} {cells[0]:>12} {cells[1]:>12}")
    return all_ok


# --------------------------------------------------------------------------------------------
# Traffic of the three versions
# --------------------------------------------------------------------------------------------


def print_traffic_table(M: int = 1024, N: int = 65536, element_size: int = 4) -> None:
    """Reads, writes and total DRAM traffic of the looped kernels next to the fused one, and the
    fraction of copy bandwidth each can reach if every pass over x goes to DRAM."""
    print(f"M = {M}, N = {N}, {element_size}-byte elements")
    head = f"{'kernel':<16} {'reads':>8} {'writes':>8} {'total':>8} {'MB':>8}  {'best fraction of copy':>21}"
    print(head)
    print("-" * len(head))
    MN = M * N
    for k in ("three_pass", "online", "fused"):
        t = kernel_traffic(k, M, N)
        tot = t["reads"] + t["writes"]
        print(f"{_label(k):<16} {t['reads'] // MN:>6}MN {t['writes'] // MN:>6}MN {tot // MN:>6}MN "
              f"{tot * element_size / 1e6:>8.1f}  {2 * MN / tot:>21.3f}")


# --------------------------------------------------------------------------------------------
# Bandwidth as rows grow
# --------------------------------------------------------------------------------------------

ROWS_GROW_PROVIDERS = ("copy", "torch_softmax", "fused", "three_pass", "online")


def rows_grow_data(live: bool | None = None) -> tuple[list[dict], dict]:
    """(rows, provenance): every looped kernel, the fused one and torch.softmax as rows grow at a
    fixed total size. Live on a GPU (64 MiB per input), else the recorded ``rows_grow.csv``."""
    live = ON_GPU if live is None else live
    if live:
        return rows_grow_rows(total_bytes=2**26), gpu_data.provenance("helpers.lesson04.rows_grow_data()")
    return gpu_data.read_csv("rows_grow")


def rows_grow_rows(dtype_name: str = "float32", total_bytes: int = 2**28) -> list[dict]:
    """Measure torch.softmax, the fused kernel and the looped kernels as rows grow past what fits on
    chip, at a fixed total size (GPU only; ``helpers.measure`` columns)."""
    require_gpu("rows_grow_rows")
    dtype = DTYPES[dtype_name]
    provs = {"torch_softmax": lambda x: torch.softmax(x, dim=-1), "fused": softmax_fused,
             "three_pass": softmax_three_pass, "online": softmax_online}
    rows = []
    for k in range(10, 21):
        N = 2**k
        M = max(1, total_bytes // (N * dtype.itemsize))
        rows += measure_shape(M, N, dtype, provs, quick=True, host=False)
    return rows




#: A cell whose rounds differ by more than this (max - min over the median) carries no conclusion.
SPREAD_LIMIT = 0.10


def _cell(r: dict | None) -> str:
    """'0.65 (0.66)': GPU-time fraction of copy, eager in brackets; 'refused' where the fused kernel
    declines the row; '*' after a number whose rounds spread over ``SPREAD_LIMIT``."""
    if r is None:
        return "-"
    if not _ok(r):
        st = str(r.get("status"))
        return "refused" if ("ValueError" in st or st.startswith("n/a")) else "failed"
    star = lambda k: "" if not (isinstance(r.get(k), (int, float)) and r[k] > SPREAD_LIMIT) else "*"  # noqa: E731
    return f"{r['graph_frac']:.2f}{star('graph_spread')} ({r['frac_of_copy']:.2f}{star('spread')})"


def print_rows_grow_table(rows: list[dict], dtype: str = "float32") -> None:
    """Fraction of copy per provider as N grows at a fixed total size: GPU time, eager in brackets
    ('refused' where the fused kernel declines), and the best provider in GPU time."""
    provs = [p for p in ROWS_GROW_PROVIDERS[1:] if any(r["provider"] == p for r in rows)]
    total = next((r["M"] * r["N"] * DTYPES[dtype].itemsize for r in rows if r["dtype"] == dtype), 0)
    print(f"{dtype}, {total / 2**20:.0f} MiB per tensor: fraction of copy, GPU time (eager in brackets)")
    print(f"{'M':>6} {'N':>8} " + " ".join(f"{_label(p):>16}" for p in provs) + "   best (GPU time)")
    for n in sorted({r["N"] for r in rows if r["dtype"] == dtype}):
        rs = {r["provider"]: r for r in rows if r["N"] == n and r["dtype"] == dtype}
        cells = [_cell(rs.get(p)) for p in provs]
        ok = {p: rs[p]["graph_frac"] for p in provs if p in rs and _ok(rs[p])}
        best = max(ok, key=ok.get) if ok else "-"
        M = next(iter(rs.values()))["M"]
        print(f"{M:>6} {n:>8} " + " ".join(f"{c:>16}" for c in cells) + f"   {_label(best)}")


def _fracs(rows, dtype, key="graph_frac"):
    by = {}
    for r in rows:
        if r["dtype"] == dtype and _ok(r, key) and r["provider"] != "copy":
            by.setdefault(r["N"], {})[r["provider"]] = r[key]
    return by


def rows_grow_summary(rows: list[dict], dtype: str = "float32", sm_count: int | None = None) -> None:
    """Print, from the data (GPU time): the shortest rows, where each looped kernel reaches its
    traffic bound, the online kernel's lead over the three-pass one, the longest rows the fused
    kernel takes, the best provider past them, and the rows that give fewer programs than SMs."""
    by = _fracs(rows, dtype)
    eager = _fracs(rows, dtype, "frac_of_copy")
    both = sorted(n for n, v in by.items() if "online" in v and "three_pass" in v)
    if not both:
        return
    f = lambda n, p: f"{by[n][p]:.2f} ({eager[n][p]:.2f})" if p in by[n] else "-"  # noqa: E731
    short = both[0]
    print(f"shortest rows (N = {n_label(short)}): three-pass {f(short, 'three_pass')}, online {f(short, 'online')}, "
          f"fused {f(short, 'fused')} of copy (GPU time, eager in brackets)")
    for p, bound, txt in (("three_pass", 1 / 2, "1/2"), ("online", 2 / 3, "2/3")):
        at = [n for n in both if by[n][p] <= bound * 1.05]
        if at:
            print(f"{_label(p)} within 5% of its traffic bound {txt} (or below it) from N = {n_label(at[0])} on")
    ahead = [n for n in both if by[n]["online"] > by[n]["three_pass"] * 1.02]
    if ahead:
        print(f"online ahead of three-pass by more than 2% at N = {', '.join(n_label(n) for n in ahead)} "
              f"(by {min(by[n]['online'] / by[n]['three_pass'] for n in ahead):.2f}x to "
              f"{max(by[n]['online'] / by[n]['three_pass'] for n in ahead):.2f}x)")
    fused_ns = [n for n in both if "fused" in by[n]]
    if fused_ns:
        n = fused_ns[-1]
        print(f"at N = {n_label(n)}, the longest row the fused kernel takes: three-pass {f(n, 'three_pass')}, "
              f"online {f(n, 'online')}, fused {f(n, 'fused')}")
    beyond = [n for n in both if "fused" not in by[n]]
    if beyond:
        best = ", ".join(f"{n_label(n)}: {_label(max(by[n], key=by[n].get))}" for n in beyond)
        print(f"past N = {n_label(fused_ns[-1]) if fused_ns else '?'}, the best in GPU time is {best}")
    if sm_count:
        few = sorted({(r["N"], r["M"]) for r in rows if r["dtype"] == dtype and r["M"] < sm_count})
        if few:
            print("one program per row gives fewer programs than the " + f"{sm_count} SMs at "
                  + ", ".join(f"N = {n_label(n)} (M = {M})" for n, M in few))


def rows_in_flight(rows: list[dict], props: dict, dtype: str = "float32") -> list[dict]:
    """The L2 model of the looped kernels: per N, the most programs the GPU can keep resident (the
    thread limit; registers can only lower it), the bytes of their rows, and whether those fit in
    L2, next to the measured fractions of copy (GPU time)."""
    from .launch import check_block_size, num_warps_for

    by = _fracs(rows, dtype)
    es = DTYPES[dtype].itemsize
    out = []
    for n in sorted(by):
        block = check_block_size(n, None, "rows_in_flight")
        w = num_warps_for(block)
        per_sm = min(props["max_threads_per_sm"] // (props["warp_size"] * w), props["max_blocks_per_sm"])
        M = next(r["M"] for r in rows if r["N"] == n and r["dtype"] == dtype)
        resident = min(M, per_sm * props["sm_count"])
        out.append(dict(N=n, block=block, num_warps=w, resident=resident, in_flight=resident * n * es,
                        fits=resident * n * es <= props["l2_bytes"], three_pass=by[n].get("three_pass"),
                        online=by[n].get("online")))
    return out


def print_rows_in_flight(rows: list[dict], props: dict, dtype: str = "float32") -> None:
    """Print :func:`rows_in_flight`: the model's prediction (re-reads hit L2 while the rows in flight
    fit) against the measurement."""
    print(f"L2: {props['l2_bytes'] / 2**20:.0f} MiB. Resident programs: at most the thread limit allows "
          f"({props['max_threads_per_sm']} threads per SM, {props['sm_count']} SMs)")
    print(f"{'N':>8} {'warps':>5} {'programs':>8} {'rows in flight MiB':>18} {'fit in L2':>9} | "
          f"{'three-pass':>10} {'online':>7}  (GPU time; bounds 0.50 and 0.67)")
    for r in rows_in_flight(rows, props, dtype):
        tp = f"{r['three_pass']:.2f}" if r["three_pass"] is not None else "-"
        on = f"{r['online']:.2f}" if r["online"] is not None else "-"
        print(f"{r['N']:>8} {r['num_warps']:>5} {r['resident']:>8} {r['in_flight'] / 2**20:>18.1f} "
              f"{'yes' if r['fits'] else 'no':>9} | {tp:>10} {on:>7}")


def crosscheck_with_sweep(rows: list[dict], sweep: list[dict]) -> None:
    """The rows-grow recording was timed in one round (no spread); where its shapes are in the full
    benchmark sweep (three interleaved rounds), print both, GPU time and eager."""
    shared = sorted({(r["dtype"], r["M"], r["N"], r["provider"]) for r in rows if _ok(r) and r["provider"] != "copy"}
                    & {(r["dtype"], r["M"], r["N"], r["provider"]) for r in sweep if _ok(r)})
    if not shared:
        print("no shape in common with the benchmark sweep")
        return
    print(f"{'shape':>16} {'provider':<16} {'this run':>14} {'sweep':>14} {'sweep spreads':>14}")
    for d, M, N, p in shared:
        a = next(r for r in rows if (r["dtype"], r["M"], r["N"], r["provider"]) == (d, M, N, p))
        b = next(r for r in sweep if (r["dtype"], r["M"], r["N"], r["provider"]) == (d, M, N, p))
        print(f"{f'{d} {M}x{N}':>16} {_label(p):<16} {a['graph_frac']:>6.3f} ({a['frac_of_copy']:.3f}) "
              f"{b['graph_frac']:>6.3f} ({b['frac_of_copy']:.3f}) {b['graph_spread']:>6.1%} {b['spread']:>6.1%}")


def plot_rows_grow(rows: list[dict] | None = None, meta: dict | None = None, dtype: str = "float32"):
    """Fraction of copy (GPU time) against N (M·N fixed) for torch.softmax, the fused kernel and the
    looped kernels, with the bounds the looped kernels' traffic sets when every pass goes to DRAM."""
    if rows is None:
        rows, meta = rows_grow_data(live=False)
    fig, ax = plots.new_figure(8.0, 4.0)
    ns = sorted({r["N"] for r in rows if r["dtype"] == dtype})
    ax.axhline(1.0, color=plots.COLORS["copy"], ls="--", lw=1.2, label=_label("copy"))
    for frac, k, txt in ((2 / 3, "online", "online's traffic bound: 2MN / 3MN"),
                         (1 / 2, "three_pass", "three-pass bound: 2MN / 4MN")):
        ax.axhline(frac, color=plots.COLORS[k], ls=":", lw=1.2)
        ax.text(ns[0], frac + 0.015, txt, fontsize=8, color=plots.COLORS[k])
    for p in ROWS_GROW_PROVIDERS[1:]:
        xs, ys = _series(rows, p, dtype, key="graph_frac")
        if xs:
            ax.plot(xs, ys, "o-", color=plots.COLORS.get(p, "#777777"), ms=4,
                    lw=2.2 if p in ("online", "fused") else 1.5, label=_label(p))
    refused = sorted(r["N"] for r in rows if r["provider"] == "fused" and r["dtype"] == dtype and not _ok(r))
    if refused:
        ax.axvspan(refused[0] / 1.4, ns[-1] * 1.3, color="#f0f0f0", zorder=0)
        ax.text(refused[0], 1.04, "fused refuses (row too long)", fontsize=8, color="#777777")
    set_n_axis(ax, ns, "N (columns per row; M·N fixed)")
    ax.set_xlim(ns[0] / 1.3, ns[-1] * 1.3)
    ax.set_ylim(0, 1.12)
    ax.set_ylabel("fraction of copy (GPU time)")
    gpu = (meta or {}).get("gpu", "GPU")
    ax.set_title(f"Looped kernels as rows grow, {dtype}, {gpu}", fontsize=10)
    ax.legend(frameon=False, fontsize=8, loc="lower left", ncols=2)
    return fig


# --------------------------------------------------------------------------------------------
# The same trick in attention
# --------------------------------------------------------------------------------------------


def online_attention(scores: torch.Tensor, V: torch.Tensor, block_size: int, verbose: bool = False) -> torch.Tensor:
    """softmax(scores) @ V for one query, computed block by block over the keys the FlashAttention
    way: a running max m, a running sum d and a running output acc, all rescaled by
    exp(m - m_new) when the max grows. Never forms the full probability vector."""
    s = scores.detach().cpu().to(torch.float64)
    v = V.detach().cpu().to(torch.float64)
    m, d = NEG_INF, 0.0
    acc = torch.zeros(v.shape[1], dtype=torch.float64)
    for start in range(0, s.numel(), block_size):
        sb, vb = s[start:start + block_size], v[start:start + block_size]
        m_new = max(m, float(sb.max()))
        alpha = math.exp(m - m_new)
        p = torch.exp(sb - m_new)  # this block's unnormalized probabilities
        d = d * alpha + float(p.sum())
        acc = acc * alpha + p @ vb  # the output accumulator is rescaled exactly like the sum
        m = m_new
        if verbose:
            a = "first block" if start == 0 else f"{alpha:.4f}"
            print(f"keys {start}-{start + len(sb) - 1}: m = {m:g}, rescale = {a:>11}, d = {d:.4f}, "
                  f"acc = {fmt(acc)}")
    return acc / d


def attention_demo(verbose: bool = True) -> None:
    """One query, six keys, a 6 x 2 value matrix: the block-by-block result against
    softmax(scores) @ V computed the ordinary way."""
    scores = torch.tensor([0.5, 2.0, -1.0, 4.0, 1.0, 3.0], dtype=torch.float64)
    V = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, -1.0], [0.5, 0.5], [-1.0, 2.0]], dtype=torch.float64)
    print("scores =", fmt(scores))
    out = online_attention(scores, V, block_size=2, verbose=verbose)
    ref = torch.softmax(scores, dim=0) @ V
    print("blockwise    softmax(scores) @ V =", fmt(out))
    print("all at once  softmax(scores) @ V =", fmt(ref))
    print("max abs difference:", round_up_err(float((out - ref).abs().max())))


#: Figures of this lesson, by the name ``helpers.plots.save`` writes them under.
FIGURES = {
    "04_online_trace": plot_trace,
    "04_rows_grow": plot_rows_grow,
}


# --------------------------------------------------------------------------------------------
# Exercise checkers: each prints one line (correct / not yet / wrong) and never raises.
# Learner kernels run through helpers.exercises.run_learner_kernel on guarded buffers, so a
# missing mask is reported as wrong and never takes the notebook down.
# --------------------------------------------------------------------------------------------


def _guarded_copy(data: torch.Tensor) -> torch.Tensor:
    t = guarded(tuple(data.shape), dtype=data.dtype, fill=0.0)
    t.copy_(data.to(t.device))
    return t


def online_kernel_cases(seed: int = 41) -> list[dict]:
    """The rows exercise 4.1's checker runs a learner's online kernel on, in order: each catches a
    mistake the ones before it let through. ``x`` is float32 (a view with a column stride of 3 in
    the last case), ``block`` the BLOCK_SIZE of the launch."""
    g = torch.Generator().manual_seed(seed)
    rnd = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    cases = []
    x = rnd(3, 70) * 2
    cases.append(dict(name="random rows of 70 columns in blocks of 16 (the last block partial)", x=x, block=16))
    x = rnd(2, 70)
    x[0, 66], x[1, 40] = 200.0, 90.0
    cases.append(dict(name="a late maximum of 200 (exp(200) overflows float32)", x=x, block=16))
    x = rnd(2, 70)
    x[:, :37] = NEG_INF
    cases.append(dict(name="rows whose first 37 columns (two whole blocks) are -inf", x=x, block=16))
    x = rnd(2, 64) * 1e4
    cases.append(dict(name="values spread over +-1e4", x=x, block=16))
    x = rnd(2, 40)
    x[0, 0], x[1, 0] = 60.0, -60.0
    cases.append(dict(name="the maximum in the first column", x=x, block=8))
    x = rnd(3, 50)
    x[1] = NEG_INF
    cases.append(dict(name="a row of only -inf between two ordinary rows (torch.softmax gives NaN)", x=x, block=16))
    cases.append(dict(name="a column stride of 3 (a strided view of a wider tensor)", x=rnd(3, 150) * 3, block=16,
                      stride=3))
    return cases


def _trial_4_1(kernel) -> str:
    if not hasattr(kernel, "__getitem__") or not hasattr(kernel, "fn"):
        raise Wrong("online_softmax_kernel must be a Triton kernel: decorate it with @triton.jit")
    worst = 0.0
    for case in online_kernel_cases():
        data, block, stride = case["x"], case["block"], case.get("stride", 1)
        wide = _guarded_copy(data)
        x = wide[:, ::stride] if stride > 1 else wide
        before = x.clone()
        M, N = x.shape
        out = guarded((M, N))
        launch_learner_kernel(kernel, (M,), out, x, x.stride(0), x.stride(1), out.stride(0), N,
                              BLOCK_SIZE=block, outputs=(out,), where=f"on {case['name']}")
        if not torch.equal(x, before):
            raise Wrong("your kernel changed its input: store into out_ptr only")
        ref = torch.softmax(x.detach().cpu().double(), dim=-1)
        got = out.detach().cpu().double()
        nan_got, nan_ref = torch.isnan(got), torch.isnan(ref)
        what = f"on {case['name']}"
        if (nan_ref & ~nan_got).any():
            raise Wrong(f"{what}: a row of only -inf has no softmax; torch.softmax gives NaN there and so must "
                        f"your kernel (with m = -inf and d = 0 at the end, exp(x - m) / d is NaN by itself: "
                        f"do not replace it with made-up values)")
        if (nan_got & ~nan_ref).any():
            if "-inf" in case["name"]:
                hint = ("while every value seen is -inf, m_new is -inf too and exp(m - m_new) and "
                        "exp(x - m_new) are exp(-inf - -inf) = NaN: nothing has been seen yet, so the "
                        "rescale factor must be 1 and the block must add 0 (tl.where)")
            else:
                hint = ("exp overflowed or met inf - inf: subtract the new maximum m_new inside tl.exp, and "
                        "rescale the old d by exp(m - m_new), which is at most 1 (0 on the first block, where "
                        "m = -inf), not by exp(m_new - m)")
            raise Wrong(f"{what} your output has NaN where torch.softmax has none: {hint}")
        ok = ~nan_ref
        err = (got[ok] - ref[ok]).abs().max().item() if ok.any() else 0.0
        if not err <= 1e-6:
            if stride > 1:
                hint = "x[row, j] is at row_start + j * in_col_stride: use the column stride in every load"
            else:
                hint = ("when the maximum grows, the sum so far is relative to the old m: multiply it by "
                        "exp(m_old - m_new) (computed before m is updated) before adding the block's sum, so "
                        "that the final (m, d) are the row's maximum and the sum of exp(x - m) over the row")
            raise Wrong(f"{what}: max abs error {err:.1e} against torch.softmax: {hint}")
        worst = max(worst, err)
    return (f"max abs error {round_up_err(worst)} on all {len(online_kernel_cases())} kinds of rows, "
            f"-inf rows and strides included")


def check_4_1(online_softmax_kernel) -> None:
    """Exercise 4.1: the online pass of a looped softmax kernel, written in Triton."""
    check("4.1", "the online pass in Triton", online_softmax_kernel, _trial_4_1)


def _pair(got, what: str):
    if got is Ellipsis:
        raise NotImplementedError
    if got is None:
        raise Wrong("your function returned None: is a `return` missing?")
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise Wrong(f"{what} should return a pair (m, d), got {type(got).__name__}")
    out = []
    for v in got:
        if isinstance(v, torch.Tensor):
            if v.numel() != 1:
                raise Wrong(f"{what} should return two numbers, got a tensor of shape {tuple(v.shape)}")
            v = v.item()
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise Wrong(f"{what} should return two numbers, got {type(v).__name__}")
        out.append(float(v))
    return out


def _same(a: float, b: float) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def merge_answer(m1: float, d1: float, m2: float, d2: float) -> tuple[float, float]:
    """The (m, d) of two blocks together, from each block's (max, sum of exp(x - max))."""
    m = max(m1, m2)
    if m == NEG_INF:
        return NEG_INF, 0.0
    return m, d1 * math.exp(m1 - m) + d2 * math.exp(m2 - m)


def _trial_4_2(merge) -> str:
    cases = [(3.0, 1.5, 5.0, 2.0), (5.0, 2.0, 3.0, 1.5), (1.0, 2.0, 1.0, 3.0), (-2.0, 1.25, 0.5, 1.0),
             (NEG_INF, 0.0, 2.0, 1.0), (2.0, 1.0, NEG_INF, 0.0), (NEG_INF, 0.0, NEG_INF, 0.0), (700.0, 1.0, -700.0, 1.0)]
    for c in cases:
        if not callable(merge):
            raise Wrong(f"expected a function, got {type(merge).__name__}")
        m, d = _pair(merge(*c), "merge")
        wm, wd = merge_answer(*c)
        if not (_same(m, wm) and _same(d, wd)):
            hint = ""
            if math.isnan(d) and NEG_INF in (c[0], c[2]):
                hint = " (an empty part has m = -inf and d = 0: exp(-inf - -inf) is NaN, so handle it)"
            elif not _same(m, wm):
                hint = " (the merged m is the larger of the two maxima)"
            else:
                hint = " (rescale each d from its own max to the merged one: d_i * exp(m_i - m))"
            args = ", ".join(f"{v:g}" for v in c)
            raise Wrong(f"merge({args}) gave ({_f(m)}, {_f(d)}), expected ({_f(wm)}, {_f(wd)}){hint}")
    return "merging is associative and commutative, so blocks can be combined in any order"


def check_4_2(merge) -> None:
    """Exercise 4.2: ``merge(m1, d1, m2, d2)`` combines two (max, sum) pairs."""
    check("4.2", "merge two (m, d) pairs", merge, _trial_4_2)


def stash_traffic_answer(M: int, N: int) -> tuple[int, int]:
    """The 'stash' variant: pass 1 reads x and writes exp(x - m_block) to out; pass 2 reads out,
    rescales it and writes it back. 2MN reads, 2MN writes."""
    return 2 * M * N, 2 * M * N


def _trial_4_3(stash_traffic) -> str:
    if not callable(stash_traffic):
        raise Wrong(f"expected a function, got {type(stash_traffic).__name__}")
    for M, N in ((1, 1), (3, 5), (1024, 65536)):
        got = stash_traffic(M, N)
        if got is Ellipsis:
            raise NotImplementedError
        if got is None:
            raise Wrong("your function returned None: is a `return` missing?")
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise Wrong(f"return a pair (reads, writes), got {type(got).__name__}")
        r, w = got
        wr, ww = stash_traffic_answer(M, N)
        if (r, w) != (wr, ww):
            MN = M * N
            hint = []
            if r != wr:
                hint.append("reads: pass 1 reads x, and pass 2 reads back what pass 1 wrote")
            if w != ww:
                hint.append("writes: pass 1 writes the exponentials, and pass 2 writes the result over them")
            raise Wrong(f"for M = {M}, N = {N} (MN = {MN}) you gave (reads, writes) = ({r}, {w}); " + "; ".join(hint))
    return "4MN in all: more than the online kernel's 3MN, so re-reading x beats stashing"


def check_4_3(stash_traffic) -> None:
    """Exercise 4.3: ``stash_traffic(M, N)`` returns (reads, writes) of the stash variant."""
    check("4.3", "traffic of a stash-and-rescale variant", stash_traffic, _trial_4_3)
