"""Lesson 03 · Fused softmax in Triton: one program per row, the whole row in registers.

What lives here: a plain-PyTorch replay of one program of ``kernels.softmax_fused_kernel`` (so a
notebook can print every intermediate value), block-size and traffic tables, the correctness
sweep, the GPU's limits and copy bandwidth, the bandwidth comparison (GPU time and eager time), the
small-shape and above-1.0 explanations, the "where it stops" data (measured live on a GPU, the
recorded H100 CSVs on the CPU), their figures, and the checkers of exercises 3.1 to 3.4.
"""

from __future__ import annotations

import math

import torch
import triton

from . import gpu_data, plots
from .exercises import Wrong, call_attempt, check, fmt, guarded, launch_learner_kernel, run_learner_kernel
from .gpu_data import SPREAD_LIMIT, noisy, ok as _ok, series as _series
from .kernels import MAX_FUSED_COLS, num_warps_for, softmax_fused, softmax_fused_kernel
from .launch import acc_dtype
from .measure import DTYPES, device_facts, eager_ms, gpu_ms, measure_shape, require_gpu
from .mode import DEVICE, ON_GPU
from .plots import color as _color, label, n_label, set_n_axis


def _label(provider: str) -> str:
    """A provider's display name; the copy is named by what it is, a comparison rather than a ceiling."""
    return "y.copy_(x)" if provider == "copy" else label(provider)
from .reference import error_report, reference_softmax, round_up_err
from .traffic import kernel_traffic, min_bytes

#: Threads in a warp on NVIDIA GPUs (used for the per-thread tables).
WARP_SIZE = 32


# --------------------------------------------------------------------------------------------
# The block: next_power_of_2, padding lanes, warps
# --------------------------------------------------------------------------------------------


def block_layout(n_cols: int) -> dict:
    """How the fused kernel lays out a row of ``n_cols`` columns: BLOCK_SIZE (the next power of
    two), padding lanes, num_warps, threads and elements held per thread."""
    if isinstance(n_cols, bool) or not isinstance(n_cols, int) or n_cols < 1:
        raise ValueError(f"block_layout: n_cols must be a positive int, got {n_cols!r}.")
    block = triton.next_power_of_2(n_cols)
    warps = num_warps_for(block)
    threads = WARP_SIZE * warps
    return {
        "N": n_cols,
        "BLOCK_SIZE": block,
        "padding": block - n_cols,
        "wasted": (block - n_cols) / block,
        "num_warps": warps,
        "threads": threads,
        "per_thread": max(1, block // threads),
    }


def print_block_layouts(ns=(4, 78, 781, 1000, 1024, 1025, 4096, 12672, 32768, 65536)) -> None:
    """Print the block layout of the fused kernel for several row lengths."""
    head = f"{'N':>7} {'BLOCK_SIZE':>10} {'padding':>8} {'wasted':>7} {'num_warps':>9} {'threads':>7} {'elems/thread':>12}"
    print(head)
    print("-" * len(head))
    for n in ns:
        b = block_layout(n)
        print(f"{n:>7} {b['BLOCK_SIZE']:>10} {b['padding']:>8} {b['wasted']:>7.0%} {b['num_warps']:>9} "
              f"{b['threads']:>7} {b['per_thread']:>12}")


# --------------------------------------------------------------------------------------------
# One program, replayed in PyTorch
# --------------------------------------------------------------------------------------------


def replay_program(x: torch.Tensor, row: int) -> dict:
    """What program ``row`` of ``softmax_fused_kernel`` computes on a contiguous 2-D ``x``,
    replayed line by line in PyTorch (float32): a dict of every intermediate value."""
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise ValueError("replay_program: x must be a 2-D tensor (rows, columns).")
    n_rows, n_cols = x.shape
    if not 0 <= row < n_rows:
        raise ValueError(f"replay_program: row must be in [0, {n_rows}), got {row}.")
    xc = x.detach().cpu().float().contiguous()
    block = triton.next_power_of_2(n_cols)
    cols = torch.arange(block)
    mask = cols < n_cols
    flat = xc.reshape(-1)
    row_start = row * xc.stride(0)
    loaded = torch.full((block,), float("-inf"))
    loaded[mask] = flat[row_start + cols[mask]]
    row_max = loaded.max()
    numerator = torch.exp(loaded - row_max)
    denominator = numerator.sum()
    y = numerator / denominator
    return {
        "row": row, "in_row_stride": xc.stride(0), "row_start": row_start, "BLOCK_SIZE": block,
        "cols": cols, "mask": mask, "x": loaded, "row_max": row_max, "numerator": numerator,
        "denominator": denominator, "y": y, "stored": y[mask],
    }


def print_replay(x: torch.Tensor, row: int, digits: int = 4) -> dict:
    """Print :func:`replay_program` for one row, then compare the stored values with what the real
    kernel (``helpers.softmax_fused``) writes for that row. Returns the replay."""
    r = replay_program(x, row)
    n_cols = x.shape[1]
    mask_s = "[" + ", ".join("T" if m else "F" for m in r["mask"].tolist()) + "]"
    print(f"row = tl.program_id(0)             -> {r['row']}")
    print(f"row_start = in_ptr + row * stride  -> element {r['row']} * {r['in_row_stride']} = {r['row_start']}")
    print(f"BLOCK_SIZE = next_power_of_2({n_cols})   -> {r['BLOCK_SIZE']}")
    print(f"cols = tl.arange(0, BLOCK_SIZE)    -> {r['cols'].tolist()}")
    print(f"mask = cols < n_cols               -> {mask_s}")
    print(f"x = tl.load(..., other=-inf)       -> {fmt(r['x'], digits)}")
    print(f"row_max = tl.max(x, axis=0)        -> {fmt(r['row_max'], digits)}")
    print(f"numerator = tl.exp(x - row_max)    -> {fmt(r['numerator'], digits)}")
    print(f"denominator = tl.sum(numerator)    -> {fmt(r['denominator'], digits)}")
    print(f"y = numerator / denominator        -> {fmt(r['y'], digits)}")
    print(f"tl.store(..., y, mask=mask)        -> writes {fmt(r['stored'], digits)}")
    kernel_row = softmax_fused(x.to(DEVICE))[row].cpu()
    same = torch.allclose(kernel_row, r["stored"], atol=1e-6, rtol=1e-5)
    print(f"helpers.softmax_fused(x)[{row}]       -> {fmt(kernel_row, digits)}  (same: {same})")
    return r


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
            ax.add_patch(Rectangle(
                (c, y + 0.08), 0.92, 0.84,
                facecolor=palette[r % len(palette)] if inside else "#f2f2f2",
                edgecolor="#555555" if inside else "#bbbbbb", hatch=None if inside else "///", lw=0.6,
            ))
            if not inside:
                ax.text(c + 0.46, y + 0.5, "-inf", ha="center", va="center", fontsize=6.5, color="#888888")
        ax.text(-0.4, y + 0.5, f"program {r}  (row {r})", ha="right", va="center", fontsize=9)
    ax.annotate("", xy=(N - 0.04, M + 0.25), xytext=(0, M + 0.25),
                arrowprops=dict(arrowstyle="<->", color="#333333", lw=1))
    ax.text(N / 2, M + 0.38, f"n_cols = {N}: mask True", ha="center", va="bottom", fontsize=9)
    ax.annotate("", xy=(block - 0.04, M + 0.25), xytext=(N, M + 0.25),
                arrowprops=dict(arrowstyle="<->", color="#999999", lw=1))
    ax.text((N + block) / 2, M + 0.38, f"{block - N} padding lanes", ha="center", va="bottom", fontsize=9, color="#777777")
    ax.set_xlim(-6.5, block + 0.3)
    ax.set_ylim(-0.2, M + 1.1)
    ax.axis("off")
    ax.set_title(f"grid = (M,) = ({M},) programs, each with BLOCK_SIZE = next_power_of_2({N}) = {block} lanes",
                 fontsize=10)
    return fig


# --------------------------------------------------------------------------------------------
# Memory traffic
# --------------------------------------------------------------------------------------------


def print_traffic_comparison(M: int = 4096, N: int = 4096, element_size: int = 4) -> None:
    """DRAM traffic of the naive five-op softmax against the fused kernel, in elements and MB."""
    print(f"M = {M}, N = {N}, {element_size}-byte elements")
    print(f"{'version':<14} {'reads':>12} {'writes':>12} {'total MB':>9}  in units of MN")
    for name, kernel in (("naive (01)", "naive"), ("fused (03)", "fused")):
        t = kernel_traffic(kernel, M, N)
        tot = t["reads"] + t["writes"]
        print(f"{name:<14} {t['reads']:>12,} {t['writes']:>12,} {tot * element_size / 1e6:>9.1f}  {tot / (M * N):.3f} MN")
    naive = sum(kernel_traffic("naive", M, N).values())
    fused = sum(kernel_traffic("fused", M, N).values())
    print(f"the fused kernel moves {naive / fused:.2f}x fewer bytes; "
          f"its floor is 2MN = {min_bytes(M, N, element_size) / 1e6:.1f} MB")


# --------------------------------------------------------------------------------------------
# Correctness on awkward shapes
# --------------------------------------------------------------------------------------------

#: Shapes the correctness cell runs on a GPU. Under the interpreter every program (row) costs
#: about 10 ms of Python, so the CPU runs the same column counts with fewer rows.
GPU_SHAPES = [(1823, 781), (1, 4), (4, 1), (128, 256), (512, 512), (1024, 64)]
CPU_SHAPES = [(181, 78), (1, 4), (4, 1), (128, 256), (48, 512), (96, 64)]


def correctness_shapes() -> list[tuple[int, int]]:
    """The shapes of the correctness cell in this mode (full sizes on a GPU, fewer rows on the CPU)."""
    return list(GPU_SHAPES if ON_GPU else CPU_SHAPES)


def check_shapes(fn=softmax_fused, shapes=None, seed: int = 0, scale: float = 3.0) -> bool:
    """Run ``fn`` on random inputs of each shape (float32, seeded) and print its error against the
    float64 reference, rounded up to a power of ten. Returns True if every shape is within 1e-6."""
    shapes = correctness_shapes() if shapes is None else shapes
    g = torch.Generator().manual_seed(seed)
    ok_all = True
    print(f"{'shape':>12} {'max abs err':>12} {'max rel err':>12} {'rows sum to 1':>14} {'ok':>4}")
    for M, N in shapes:
        x = (torch.randn(M, N, generator=g) * scale).to(DEVICE)
        y = fn(x)
        rep = error_report(y, x)
        sums = bool(torch.allclose(y.double().sum(-1).cpu(), torch.ones(M, dtype=torch.float64), atol=1e-5))
        ok = rep.ok(atol=1e-6) and sums
        ok_all &= ok
        print(f"{f'{M} x {N}':>12} {round_up_err(rep.max_abs):>12} {round_up_err(rep.max_rel):>12} {str(sums):>14} "
              f"{'yes' if ok else 'NO':>4}")
    return ok_all


# --------------------------------------------------------------------------------------------
# Bandwidth: the fused kernel against the naive version and torch.softmax


# --------------------------------------------------------------------------------------------
# The GPU the speed figures come from
# --------------------------------------------------------------------------------------------

#: The most registers one thread can have on NVIDIA GPUs (an architectural limit, not a device
#: property the driver reports).
MAX_REGS_PER_THREAD = 255


def gpu_facts(live: bool | None = None) -> tuple[dict, dict]:
    """(props, provenance): the GPU's limits and its measured copy bandwidth. Live on a GPU (a 1 GiB
    ``y.copy_(x)`` timed both ways), else the recorded ``device_props.csv`` (the H100 every lesson
    shows)."""
    live = ON_GPU if live is None else live
    if not live:
        return gpu_data.device_props(live=False)
    return device_facts(), gpu_data.provenance("helpers.lesson03.gpu_facts()")


def print_gpu_facts(props: dict) -> None:
    """The terms the speed figures need (SM, registers, shared memory, L2, occupancy), with this GPU's
    numbers, and the copy bandwidth every fraction below is taken against."""
    warps = props["max_threads_per_sm"] // props["warp_size"]
    print(f"GPU: {props['name']}")
    print(f"  SMs (streaming multiprocessors):       {props['sm_count']}")
    print(f"  registers per SM:                      {props['regs_per_sm']:,} (32-bit), at most "
          f"{MAX_REGS_PER_THREAD} per thread")
    print(f"  shared memory per SM:                  {props['shared_per_sm']:,} bytes ({props['shared_per_sm'] / 1024:.0f} KiB)")
    print(f"  threads resident per SM, at most:      {props['max_threads_per_sm']:,} ({warps} warps of {props['warp_size']})")
    print(f"  L2 cache (shared by all SMs):          {props['l2_bytes'] / 2**20:.0f} MiB")
    peak, eager, graph = props.get("dram_peak_gbps"), props.get("copy_gbps_1GiB"), props.get("copy_graph_gbps_1GiB")
    if isinstance(peak, (int, float)) and math.isfinite(peak):
        print(f"  DRAM peak (memory clock x bus width):  {peak:,.0f} GB/s")
    if isinstance(eager, (int, float)):
        line = f"  y.copy_(x) of 1 GiB, eager:            {eager:,.0f} GB/s"
        if isinstance(peak, (int, float)) and math.isfinite(peak):
            line += f" ({eager / peak:.2f} of the DRAM peak)"
        print(line)
    if isinstance(graph, (int, float)):
        print(f"  y.copy_(x) of 1 GiB, from a CUDA graph: {graph:,.0f} GB/s")


# --------------------------------------------------------------------------------------------
# Bandwidth: the fused kernel against the naive version and torch.softmax
# --------------------------------------------------------------------------------------------

BANDWIDTH_PROVIDERS = ("copy", "torch_naive", "torch_softmax", "fused")
#: Every kernel of the benchmark written in Triton (the small-shape comparison).
TRITON_PROVIDERS = ("triton_tutorial", "liger", "fused", "online", "persistent", "softmax")
LIVE_NS = (256, 1024, 4096, 16384)


def bandwidth_data(live: bool | None = None, M: int = 4096, ns=LIVE_NS) -> tuple[list[dict], dict]:
    """(rows, provenance) of the bandwidth comparison at M = 4096: live on a GPU (a few N, quick
    timings with ``helpers.measure``), else the recorded H100 sweep ``bench_h100.csv``. Rows have the
    ``helpers.measure`` columns: graph_ms / graph_frac (GPU time), ms / frac_of_copy (eager),
    spread / graph_spread."""
    live = ON_GPU if live is None else live
    if live:
        require_gpu("bandwidth_data(live=True)")
        from .reference import naive_softmax_rowwise

        provs = {"torch_naive": naive_softmax_rowwise, "torch_softmax": lambda x: torch.softmax(x, dim=-1),
                 "fused": softmax_fused}
        rows = []
        for n in ns:
            rows += measure_shape(M, n, torch.float32, provs, quick=True)
        return rows, gpu_data.provenance("helpers.lesson03.bandwidth_data()")
    rows, meta = gpu_data.bench()
    return [r for r in rows if r["M"] == M and r["provider"] in BANDWIDTH_PROVIDERS], meta


def _row(rows, N, provider, dtype, M=None):
    return next((r for r in rows if r["N"] == N and r["provider"] == provider and r["dtype"] == dtype
                 and (M is None or r["M"] == M)), None)


def _spread_ok(r: dict, key: str) -> bool:
    return not noisy(r.get(key))


def _cell(r: dict | None) -> str:
    """'0.60 (0.92)': GPU-time fraction of copy, eager fraction in brackets; '*' after a number
    whose rounds spread over ``SPREAD_LIMIT``."""
    if r is None:
        return "-"
    if not _ok(r):
        st = str(r.get("status", ""))
        return "refused" if st.startswith("n/a") else "failed"
    g = f"{r['graph_frac']:.2f}" + ("" if _spread_ok(r, "graph_spread") else "*")
    e = f"{r['frac_of_copy']:.2f}" + ("" if _spread_ok(r, "spread") else "*") if _ok(r, "frac_of_copy") else "-"
    return f"{g} ({e})"


def print_bandwidth_table(rows: list[dict], dtype: str = "float32", providers=BANDWIDTH_PROVIDERS) -> None:
    """Per N: the tensor's size, the copy's GPU time and eager time, and each provider's fraction of
    the copy: GPU time first (the headline), eager in brackets; * marks a spread over 10%."""
    ns = sorted({r["N"] for r in rows if r["dtype"] == dtype})
    present = [p for p in providers if p != "copy" and any(r["provider"] == p and r["dtype"] == dtype for r in rows)]
    M = rows[0]["M"] if rows else "?"
    es = DTYPES[dtype].itemsize
    print(f"{dtype}, M = {M}: fraction of copy, GPU time (eager in brackets); * = rounds spread over "
          f"{SPREAD_LIMIT:.0%}")
    print(f"{'N':>6} {'MiB':>5} {'copy µs GPU':>11} {'eager':>6}  " + " ".join(f"{_label(p):>20}" for p in present))
    for n in ns:
        c = _row(rows, n, "copy", dtype)
        mib = (M * n * es / 2**20) if isinstance(M, int) else float("nan")
        head = f"{n:>6} {mib:>5.0f} {c['graph_ms'] * 1e3:>11.2f} {c['ms'] * 1e3:>6.2f}  " if c else f"{n:>6} {mib:>5.0f} {'-':>11} {'-':>6}  "
        print(head + " ".join(f"{_cell(_row(rows, n, p, dtype)):>20}" for p in present))


def _by_n(rows, dtype, key):
    by = {}
    for r in rows:
        if r["dtype"] == dtype and _ok(r, key):
            by.setdefault(r["N"], {})[r["provider"]] = r
    return by


def speedup_summary(rows: list[dict], dtype: str = "float32") -> None:
    """From the rows, in GPU time and then in eager time: the fused kernel's speed-up over the naive
    version and over torch.softmax, where it is behind torch.softmax, its fraction of copy, and the
    largest spread of the cells these lines rest on. A cell whose rounds spread over ``SPREAD_LIMIT``
    (starred in the table) is left out of the line and named: no conclusion rests on it."""
    used, left_out = [], []
    for key, ms, what, spread in (("graph_frac", "graph_ms", "GPU time", "graph_spread"),
                                  ("frac_of_copy", "ms", "eager   ", "spread")):
        by = _by_n(rows, dtype, key)
        quiet = {n: {p: r for p, r in v.items() if _spread_ok(r, spread)} for n, v in by.items()}
        for n, v in sorted(by.items()):
            for p in ("fused", "torch_naive", "torch_softmax"):
                if p in v and p not in quiet[n]:
                    left_out.append(f"{_label(p)} at N = {n} ({what.strip()}, rounds spread {v[p][spread]:.0%})")
        ns = sorted(n for n, v in quiet.items() if "fused" in v)
        if not ns:
            continue
        vs_naive = {n: quiet[n]["torch_naive"][ms] / quiet[n]["fused"][ms] for n in ns if "torch_naive" in quiet[n]}
        vs_torch = {n: quiet[n]["torch_softmax"][ms] / quiet[n]["fused"][ms] for n in ns if "torch_softmax" in quiet[n]}
        frac = [quiet[n]["fused"][key] for n in ns]
        used += [(r, spread) for n in ns for p, r in quiet[n].items() if p in ("fused", "torch_naive", "torch_softmax")]
        parts = []
        if vs_naive:
            parts.append(f"fused vs naive {min(vs_naive.values()):.1f}x to {max(vs_naive.values()):.1f}x faster")
        if vs_torch:
            behind = [n for n, v in vs_torch.items() if v < 1.0]
            parts.append(f"vs torch.softmax {min(vs_torch.values()):.2f}x to {max(vs_torch.values()):.2f}x the speed"
                         + (f" (behind at N = {', '.join(str(n) for n in behind)})" if behind else " (never behind)"))
        parts.append(f"fraction of copy {min(frac):.2f} to {max(frac):.2f}")
        from_n = next((n for i, n in enumerate(ns) if all(quiet[m]["fused"][key] >= 0.95 for m in ns[i:])), None)
        if from_n is not None:
            parts.append(f"0.95 of copy or more from N = {from_n} on")
        print(f"{what}: " + "; ".join(parts))
    worst_g = max((r[k] for r, k in used if k == "graph_spread" and _ok(r, k)), default=float("nan"))
    worst_e = max((r[k] for r, k in used if k == "spread" and _ok(r, k)), default=float("nan"))
    print(f"largest spread over the rounds of the cells these lines rest on: {worst_g:.1%} (GPU time), "
          f"{worst_e:.1%} (eager)")
    if left_out:
        print(f"left out (rounds spread over {SPREAD_LIMIT:.0%}, starred in the table): " + "; ".join(left_out))


def small_shape_rows(M: int = 4096, N: int = 256, dtype: str = "float32") -> tuple[list[dict], dict]:
    """(rows, provenance): every provider of the recorded H100 sweep at one small shape."""
    rows, meta = gpu_data.bench()
    return [r for r in rows if r["M"] == M and r["N"] == N and r["dtype"] == dtype], meta


def print_small_shape(rows: list[dict], providers=("copy", "torch_softmax") + TRITON_PROVIDERS) -> None:
    """GPU time, eager time, host time per call and fractions of copy of every provider at one shape
    (the recorded rows of :func:`small_shape_rows`); spreads: GPU time, then eager."""
    r0 = rows[0]
    es = DTYPES[r0["dtype"]].itemsize
    print(f"{r0['dtype']} {r0['M']} x {r0['N']}: {r0['M'] * r0['N'] * es / 2**20:.0f} MiB per tensor")
    print(f"{'provider':<24} {'GPU µs':>7} {'eager µs':>9} {'host µs':>8} {'GPU frac':>9} {'eager frac':>11} {'spreads':>13}")
    for p in providers:
        r = next((r for r in rows if r["provider"] == p), None)
        if r is None or not _ok(r):
            continue
        host = f"{r['host_us']:.1f}" if _ok(r, "host_us") else "-"
        print(f"{_label(p):<24} {r['graph_ms'] * 1e3:>7.2f} {r['ms'] * 1e3:>9.2f} {host:>8} {r['graph_frac']:>9.2f} "
              f"{r['frac_of_copy']:>11.2f} {r['graph_spread']:>6.1%} {r['spread']:>6.1%}")


def ncu_row(case: str = "small_fp32_256") -> tuple[dict, dict]:
    """(row, provenance) of one case of the recorded Nsight Compute summary ``ncu_h100.csv``."""
    rows, meta = gpu_data.read_csv("ncu_h100")
    return next(r for r in rows if r["case"] == case), meta


def print_ncu(row: dict, props: dict) -> None:
    """What Nsight Compute measured for one kernel, in the terms of the lesson."""
    warps = props["max_threads_per_sm"] // props["warp_size"]
    print(f"Nsight Compute, {row['kernel']} ({row['case']}): grid of {row['grid']:.0f} programs of "
          f"{row['block']:.0f} threads, {row['registers']:.0f} registers a thread")
    print(f"  duration in µs (caches flushed first): {row['duration_ns'] / 1e3:.1f}")
    print(f"  DRAM throughput:                       {row['dram_pct_of_peak']:.1f}% of its peak")
    print(f"  achieved occupancy:                    {row['achieved_occupancy_pct']:.1f}% of the {warps} warp slots "
          f"of an SM (the kernel's limits allow {row['theoretical_occupancy_pct']:.0f}%)")


def print_above_one(rows: list[dict], props: dict, dtype: str = "float32") -> None:
    """Why some fractions of copy exceed 1.0: per N, whether in and out fit in L2 together, the copy's
    GB/s in GPU time and in eager time, and the fused kernel's, against the DRAM peak."""
    peak = props.get("dram_peak_gbps", float("nan"))
    l2 = props["l2_bytes"]
    es = DTYPES[dtype].itemsize
    print(f"{dtype}; DRAM peak {peak:,.0f} GB/s; L2 {l2 / 2**20:.0f} MiB. GB/s = 2·M·N·{es} bytes / time")
    print(f"{'N':>6} {'in+out MiB':>10} {'fit in L2':>9} | {'copy GPU':>8} {'copy eager':>10} | {'fused GPU':>9} "
          f"{'fused eager':>11} | {'fused frac GPU':>14}")
    for n in sorted({r["N"] for r in rows if r["dtype"] == dtype}):
        c, f = _row(rows, n, "copy", dtype), _row(rows, n, "fused", dtype)
        if not (c and f and _ok(c) and _ok(f)):
            continue
        both = 2 * c["M"] * n * es
        print(f"{n:>6} {both / 2**20:>10.0f} {'yes' if both <= l2 else 'no':>9} | {c['graph_gbps']:>8,.0f} {c['gbps']:>10,.0f} | "
              f"{f['graph_gbps']:>9,.0f} {f['gbps']:>11,.0f} | {f['graph_frac']:>14.2f}")


def plot_bandwidth(rows: list[dict] | None = None, dtype: str = "float32", meta: dict | None = None,
                   props: dict | None = None):
    """GB/s against N at M = 4096 for the copy, the naive version, torch.softmax and the fused
    kernel: GPU time on the left (the headline), eager time on the right, with the DRAM peak."""
    if rows is None:
        rows, meta = bandwidth_data(live=False)
    if props is None:
        props = gpu_data.device_props(live=False)[0]
    fig, axes = plots.new_figure(11.0, 4.0, ncols=2)
    axes[1].sharey(axes[0])
    ns = sorted({r["N"] for r in rows if r["dtype"] == dtype})
    peak = props.get("dram_peak_gbps")
    for ax, key, title in ((axes[0], "graph_gbps", "GPU time (CUDA graph)"), (axes[1], "gbps", "eager (do_bench)")):
        for p in BANDWIDTH_PROVIDERS:
            xs, ys = _series(rows, p, dtype, key=key)
            if not xs:
                continue
            if p == "copy":
                ax.plot(xs, ys, "--", color=_color(p), lw=1.5, label=_label(p))
            else:
                ax.plot(xs, ys, "o-", color=_color(p), lw=2 if p == "fused" else 1.5, ms=4, label=_label(p))
        if isinstance(peak, (int, float)) and math.isfinite(peak):
            ax.axhline(peak, color="#999999", ls=":", lw=1)
            ax.text(ns[0], peak * 1.02, f"DRAM peak {peak:,.0f} GB/s", fontsize=8, color="#777777")
        set_n_axis(ax, ns)
        ax.set_xlabel("N (columns per row)")
        ax.set_title(title, fontsize=10)
    axes[0].set_ylabel("GB/s (2·M·N·bytes / time)")
    axes[0].set_ylim(0, None)
    axes[0].legend(frameon=False, fontsize=8.5, loc="lower right")
    gpu = (meta or {}).get("gpu", "GPU")
    fig.suptitle(f"Softmax bandwidth, {dtype}, M = {rows[0]['M'] if rows else 4096}, {gpu}", fontsize=10)
    return fig


# --------------------------------------------------------------------------------------------
# Where the fused kernel stops working
# --------------------------------------------------------------------------------------------


def limits_data(live: bool | None = None) -> tuple[list[dict], dict]:
    """(rows, provenance) of the fused kernel as rows grow at a fixed total size: compiled
    registers, spills, shared memory and speed. Live on a GPU (float32, 64 MiB total), else the
    recorded ``fused_limits.csv``."""
    live = ON_GPU if live is None else live
    if live:
        rows = limits_rows(dtypes=("float32",), total_bytes=2**26)
        return rows, gpu_data.provenance("helpers.lesson03.limits_data()")
    return gpu_data.read_csv("fused_limits")


def limits_rows(dtypes=("float32", "bfloat16"), total_bytes: int = 2**28) -> list[dict]:
    """Measure the fused kernel as rows grow at a fixed total size (GPU only): the compiled
    registers, spills and shared memory, GPU time and eager time as fractions of copy, and where it
    stops compiling. Launches the kernel itself, past ``MAX_FUSED_COLS`` too."""
    require_gpu("limits_rows")
    rows = []
    for d in dtypes:
        dtype = DTYPES[d]
        es = dtype.itemsize
        for k in range(8, 19):
            N = 2**k
            M = max(1, total_bytes // (N * es))
            row = dict(dtype=d, M=M, N=N, block=N, num_warps=num_warps_for(N))
            try:
                x = torch.randn(M, N, device="cuda", dtype=dtype)
                out = torch.empty_like(x)
                args = (out, x, x.stride(0), x.stride(1), out.stride(0), N)
                kw = dict(BLOCK_SIZE=N, ACC=acc_dtype(dtype), num_warps=row["num_warps"])
                c = softmax_fused_kernel.warmup(*args, **kw, grid=(M,))
                c._init_handles()
                run = lambda: softmax_fused_kernel[(M,)](*args, **kw)
                run()
                err = (out.double() - torch.softmax(x.double(), -1)).abs().max().item()
                y = torch.empty_like(x)
                copy_g, copy_e = gpu_ms(lambda: y.copy_(x)), eager_ms(lambda: y.copy_(x))
                g, e = gpu_ms(run), eager_ms(run)
                row.update(n_regs=c.n_regs, n_spills=c.n_spills, shared=c.metadata.shared, status="ok",
                           graph_ms=g, ms=e, graph_frac=copy_g / g, frac_of_copy=copy_e / e,
                           graph_gbps=2 * M * N * es / g / 1e6, max_err=err)
                del x, out, y
            except Exception as ex:
                msg = (str(ex).strip().splitlines() or [type(ex).__name__])[0][:100].replace(",", ";")
                row.update(n_regs="", n_spills="", shared="", status=f"failed: {type(ex).__name__}: {msg}",
                           graph_ms="", ms="", graph_frac="", frac_of_copy="", graph_gbps="", max_err="")
            torch.cuda.empty_cache()
            rows.append(row)
    return rows




def print_limits_table(rows: list[dict], dtype: str = "float32") -> None:
    """N, warps, elements per thread, registers, spills, and the fraction of the copy in GPU time
    (eager beside it)."""
    head = (f"{'N':>7} {'num_warps':>9} {'elems/thread':>12} {'n_regs':>6} {'n_spills':>8} "
            f"{'frac GPU':>8} {'frac eager':>10}")
    print(f"{dtype}:")
    print(head)
    print("-" * len(head))
    for r in sorted((r for r in rows if r["dtype"] == dtype), key=lambda r: r["N"]):
        per_thread = r["N"] // (WARP_SIZE * r["num_warps"])
        if r["status"] != "ok":
            print(f"{r['N']:>7} {r['num_warps']:>9} {per_thread:>12}  {r['status']}")
            continue
        print(f"{r['N']:>7} {r['num_warps']:>9} {per_thread:>12} {r['n_regs']:>6} {r['n_spills']:>8} "
              f"{r['graph_frac']:>8.2f} {r['frac_of_copy']:>10.2f}")


def summarize_limits(rows: list[dict]) -> None:
    """For each dtype, from the rows (GPU time, eager in brackets): the shortest rows, the longest
    row that does not spill, the first that does, and the worst."""
    f = lambda r: f"{r['graph_frac']:.2f} ({r['frac_of_copy']:.2f})"  # noqa: E731
    for dtype in sorted({r["dtype"] for r in rows}, reverse=True):
        rs = sorted((r for r in rows if r["dtype"] == dtype and r["status"] == "ok"), key=lambda r: r["N"])
        if not rs:
            continue
        clean = [r for r in rs if r["n_spills"] == 0]
        spill = [r for r in rs if r["n_spills"] > 0]
        msg = f"{dtype}: shortest rows N = {rs[0]['N']}: {f(rs[0])} of copy"
        if clean:
            best = max(clean, key=lambda r: r["graph_frac"])
            last = clean[-1]
            msg += (f"; best {f(best)} at N = {best['N']}; no spills up to N = {last['N']} "
                    f"({f(last)}, {last['n_regs']} registers a thread)")
        else:
            msg += "; spills everywhere"
        if spill:
            s = spill[0]
            worst = min(spill, key=lambda r: r["graph_frac"])
            msg += (f"; first spill at N = {s['N']}: {s['n_regs']} registers, {s['n_spills']} spilled, {f(s)}; "
                    f"worst {f(worst)} at N = {worst['N']}")
        print(msg)


def print_short_rows(rows: list[dict], upto: int = 4) -> None:
    """The shortest rows of the fused-limits recording, by bytes per row (each program's work), in
    GPU time (eager in brackets)."""
    rs = sorted((r for r in rows if r["status"] == "ok"), key=lambda r: (r["N"] * DTYPES[r["dtype"]].itemsize, r["dtype"]))
    print(f"{'bytes a row':>11} {'dtype':>9} {'N':>6} {'rows (programs)':>15} {'frac of copy':>14}")
    sizes = sorted({r["N"] * DTYPES[r["dtype"]].itemsize for r in rs})[:upto]
    for r in rs:
        b = r["N"] * DTYPES[r["dtype"]].itemsize
        if b in sizes:
            print(f"{b:>11,} {r['dtype']:>9} {r['N']:>6} {r['M']:>15,} {r['graph_frac']:>7.2f} ({r['frac_of_copy']:.2f})")


def plot_limits(rows: list[dict] | None = None, meta: dict | None = None):
    """Left: the fused kernel's fraction of copy in GPU time as rows grow (float32 and bfloat16).
    Right: the registers each thread uses and the registers spilled to memory (float32)."""
    if rows is None:
        rows, meta = limits_data(live=False)
    fig, (ax1, ax2) = plots.new_figure(10.0, 3.8, ncols=2)
    styles = {"float32": ("o-", plots.COLORS["fused"]), "bfloat16": ("s--", "#8c564b")}
    dtypes = [d for d in ("float32", "bfloat16") if any(r["dtype"] == d for r in rows)]
    for d in dtypes:
        rs = sorted((r for r in rows if r["dtype"] == d and r["status"] == "ok"), key=lambda r: r["N"])
        st, c = styles[d]
        ax1.plot([r["N"] for r in rs], [r["graph_frac"] for r in rs], st, color=c, ms=4, label=d)
        sp = [r for r in rs if r["n_spills"] > 0]
        if sp:
            ax1.plot([r["N"] for r in sp], [r["graph_frac"] for r in sp], "x", color="#d62728", ms=9, mew=2)
    ax1.plot([], [], "x", color="#d62728", ms=8, mew=2, label="registers spill")
    ax1.axhline(1.0, color=plots.COLORS["copy"], ls="--", lw=1)
    ax1.text(rows_min_n(rows), 1.02, "copy", fontsize=8, color=plots.COLORS["copy"])
    ax1.axvline(MAX_FUSED_COLS, color="#999999", ls=":", lw=1)
    ax1.text(MAX_FUSED_COLS * 1.08, 0.05, "MAX_FUSED_COLS", fontsize=8, color="#777777", rotation=90, va="bottom")
    set_n_axis(ax1, sorted({r["N"] for r in rows}), "N (columns per row; M·N fixed)")
    ax1.set_ylim(0, 1.12)
    ax1.set_ylabel("fraction of copy (GPU time)")
    ax1.set_title("The fused kernel as rows grow", fontsize=10)
    ax1.legend(frameon=False, fontsize=8.5, loc="lower left")

    rs = sorted((r for r in rows if r["dtype"] == "float32" and r["status"] == "ok"), key=lambda r: r["N"])
    ns = [r["N"] for r in rs]
    per_thread = [r["N"] / (WARP_SIZE * r["num_warps"]) for r in rs]
    sp = [(r["N"], r["n_spills"]) for r in rs if r["n_spills"] > 0]
    ax2.bar([n for n, _ in sp], [v for _, v in sp], width=[n * 0.35 for n, _ in sp], color="#d62728",
            alpha=0.5, label="registers spilled (n_spills)")
    ax2.plot(ns, [r["n_regs"] for r in rs], "o-", color="#1f77b4", ms=4, label="registers per thread (n_regs)")
    ax2.plot(ns, per_thread, "^:", color="#2ca02c", ms=4, label="row elements per thread")
    cap = register_cap()
    ax2.axhline(cap, color="#555555", ls="--", lw=1)
    ax2.text(ns[0], cap * 1.12, f"{cap} registers a thread: the most 16 warps can have on one SM",
             fontsize=8, color="#555555")
    set_n_axis(ax2, ns)
    ax2.set_yscale("log")
    ax2.set_ylim(1, 4000)
    ax2.set_title("float32: what each thread has to hold", fontsize=10)
    ax2.legend(frameon=False, fontsize=8, loc="upper left")
    gpu = (meta or {}).get("gpu")
    if gpu:
        fig.suptitle(f"{gpu}, {gpu_data_total(rows)}", fontsize=9)
    return fig


def register_cap(num_warps: int = 16) -> int:
    """Registers per thread when one program of ``num_warps`` warps has a whole SM's register file
    (from the recorded device properties)."""
    props, _ = gpu_data.read_csv("device_props")
    p = props[0]
    return p["regs_per_sm"] // (p["warp_size"] * num_warps)


def rows_min_n(rows) -> int:
    return min(r["N"] for r in rows)


def gpu_data_total(rows) -> str:
    r = rows[0]
    es = 2 if r["dtype"] in ("bfloat16", "float16") else 4
    return f"{r['M'] * r['N'] * es / 2**20:.0f} MiB per input"


#: Figures of this lesson, by the name ``helpers.plots.save`` writes them under.
FIGURES = {
    "03_program_grid": plot_program_grid,
    "03_fused_bandwidth": plot_bandwidth,
    "03_fused_limits": plot_limits,
}


# --------------------------------------------------------------------------------------------
# Exercise checkers: each prints one line (correct / not yet / wrong) and never raises.
# Learner kernels run through helpers.exercises.run_learner_kernel on guarded buffers, so a
# missing mask is reported as wrong and never takes the notebook down.
# --------------------------------------------------------------------------------------------


_call = call_attempt  # one definition, shared by every lesson's checkers


def _as_int(v, what):
    if isinstance(v, torch.Tensor) and v.numel() == 1:
        v = v.item()
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise Wrong(f"{what} should be an int, got {type(v).__name__} {v!r}")
    return v


def _trial_3_1(block_and_padding) -> str:
    for n in (1, 2, 3, 4, 78, 781, 1000, 1024, 1025, 12672, 65536):
        got = _call(block_and_padding, n)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise Wrong(f"return a pair (BLOCK_SIZE, padding), got {type(got).__name__} {got!r}")
        block, pad = _as_int(got[0], "BLOCK_SIZE"), _as_int(got[1], "padding")
        want = triton.next_power_of_2(n)
        if block != want:
            hint = " (it must be a power of two, at least N)" if block < n or block & (block - 1) else ""
            raise Wrong(f"for N = {n} you gave BLOCK_SIZE = {block}, expected {want}{hint}")
        if pad != want - n:
            raise Wrong(f"for N = {n} (BLOCK_SIZE = {want}) you gave padding = {pad}, expected {want - n}")
    return "e.g. N = 781 -> BLOCK_SIZE 1024 with 243 padding lanes"


def check_3_1(block_and_padding) -> None:
    """Exercise 3.1: ``block_and_padding(n_cols)`` returns (BLOCK_SIZE, padding lanes)."""
    check("3.1", "block size and padding", block_and_padding, _trial_3_1)


def _guarded_copy(data: torch.Tensor) -> torch.Tensor:
    """``data`` copied into a ``guarded`` allocation (so reads past it land in the guard, or are
    stopped by the bounds check)."""
    t = guarded(tuple(data.shape), dtype=data.dtype, fill=0.0)
    t.copy_(data.to(t.device))
    return t


# Exercise 3.2: softmax over dim 0 with the row kernel, through strides --------------------------


class _KernelSpy:
    """Stands in for ``softmax_fused_kernel`` in exercise 3.2: records every ``kernel[grid](...)``
    launch and runs the real kernel through ``run_learner_kernel`` (bounds-checked, guarded output)."""

    def __init__(self, kernel, outputs):
        self.kernel, self.outputs, self.launches = kernel, outputs, []
        self.fn, self.arg_names = kernel.fn, getattr(kernel, "arg_names", None)

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches.append((grid, args, kwargs))
            run_learner_kernel(self.kernel, grid, *args, outputs=self.outputs, **kwargs)
        return launch

    def __repr__(self) -> str:
        return "softmax_fused_kernel"


_FUSED_ARGS = ("out_ptr", "in_ptr", "in_row_stride", "in_col_stride", "out_row_stride", "n_cols")


def _launch_args(args, kwargs) -> dict:
    got = dict(zip(_FUSED_ARGS, args))
    got.update({k: v for k, v in kwargs.items() if k in _FUSED_ARGS or k == "BLOCK_SIZE"})
    return got


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
        return f"out_row_stride is the distance between out[c] and out[c + 1], out.stride(0) = {out.stride(0)}; you passed {ors!r}"
    b = a.get("BLOCK_SIZE")
    if isinstance(b, int) and b < M:
        return f"BLOCK_SIZE must hold a whole column: a power of two >= {M}, you passed {b}"
    return "out[c] must be the softmax of column c of x"


def _trial_3_2(softmax_dim0) -> str:
    if not callable(softmax_dim0):
        raise Wrong(f"expected a function, got {type(softmax_dim0).__name__}")
    g = torch.Generator().manual_seed(302)
    # (M, N, extra columns around x: 0 = x is contiguous; > 0 = x is a slice of a wider tensor)
    cases = [(5, 3, 0), (3, 7, 0), (13, 20, 0), (20, 13, 3), (1, 6, 0), (7, 1, 2), (40, 9, 5)]
    worst = 0.0
    for M, N, extra in cases:
        data = torch.randn(M, N + extra, generator=g) * 3
        wide = _guarded_copy(data)
        x = wide[:, 1:1 + N] if extra else wide
        before = x.clone()
        out = guarded((N, M))
        spy = _KernelSpy(softmax_fused_kernel, outputs=(out,))
        shape = f"{M} x {N}" + (f" (a slice of a {M} x {N + extra} tensor, strides {x.stride()})" if extra else "")
        try:
            softmax_dim0(x, out, spy)
        except NotImplementedError:
            raise
        except Wrong:  # from run_learner_kernel: an access outside x and out
            hint = _dim0_hint(spy.launches[-1], x, out) if spy.launches else "check the launch's arguments"
            raise Wrong(f"on x of shape {shape} the kernel reached memory outside x and out: {hint}") from None
        except Exception as e:
            if not spy.launches:
                raise
            msg = str(e).strip().splitlines()[-1][:120] if str(e).strip() else ""
            raise Wrong(f"on x of shape {shape} the launch raised {type(e).__name__}: {msg} "
                        f"({_dim0_hint(spy.launches[-1], x, out)})") from None
        if not spy.launches:
            raise Wrong("your function never launched the kernel it was given: call kernel[grid](...) once")
        if len(spy.launches) > 1:
            raise Wrong(f"launch the kernel once (one program per column), not {len(spy.launches)} times")
        a = _launch_args(spy.launches[0][1], spy.launches[0][2])
        xin, o = a.get("in_ptr"), a.get("out_ptr")
        if not isinstance(xin, torch.Tensor) or not isinstance(o, torch.Tensor):
            raise Wrong("pass out and x themselves as the kernel's first two arguments (out_ptr, in_ptr)")
        if xin.untyped_storage().data_ptr() != x.untyped_storage().data_ptr():
            raise Wrong("the kernel read a copy of x (x.t().contiguous() or similar moves the whole tensor "
                        "through memory once more): pass x itself and let the strides do the transposing")
        if xin.data_ptr() != x.data_ptr():
            raise Wrong("in_ptr must point at x's first element: pass x itself")
        if o.data_ptr() != out.data_ptr():
            raise Wrong("write into the out tensor you were given (pass it as out_ptr)")
        if not torch.equal(x, before):
            raise Wrong("x changed: the kernel must only read it")
        ref = torch.softmax(x.detach().cpu().double(), dim=0)
        got = out.detach().cpu().double().t()
        if torch.isnan(got).any():
            cols = sorted({int(c) for c in torch.nonzero(torch.isnan(got))[:, 1]})
            raise Wrong(f"on x of shape {shape}, out[c] was never (fully) written for c in {cols[:6]}: "
                        f"{_dim0_hint(spy.launches[0], x, out)}")
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


def _trial_3_3(kernel) -> str:
    if not hasattr(kernel, "__getitem__") or not hasattr(kernel, "fn"):
        raise Wrong("scaled_softmax_kernel must be a Triton kernel: decorate it with @triton.jit")
    g = torch.Generator().manual_seed(32)
    # ((M, N), scale, spread of x): each case catches a mistake the ones before let through
    cases = [
        ((3, 8), 0.5, 1.0),      # a power-of-two row: no padding
        ((5, 37), 2.0, 1.0),     # padding lanes: masks on the load and on the store
        ((2, 20), 3.0, 30.0),    # large scaled values: needs the max shift
        ((4, 13), -1.0, 1.0),    # a negative scale with padding: -inf * scale = +inf
        ((3, 16), -2.0, 40.0),   # a negative scale, no padding, a wide spread: the max of x * scale, not of x
        ((4, 70), -0.25, 200.0),  # both at once, and several rows of padding
    ]
    worst = 0.0
    for (M, N), scale, spread in cases:
        x = _guarded_copy(torch.randn(M, N, generator=g) * spread)
        before = x.clone()
        out = guarded((M, N))
        launch_learner_kernel(kernel, (M,), out, x, x.stride(0), out.stride(0), N, scale,
                              BLOCK_SIZE=triton.next_power_of_2(N), outputs=(out,), where=f"on a {M} x {N} input")
        if not torch.equal(x, before):
            raise Wrong("your kernel changed its input: store into out_ptr only")
        ref = reference_softmax(x.double() * scale)
        got = out.detach().cpu().double()
        padded = N & (N - 1) != 0
        if torch.isnan(got).any():
            if scale < 0 and padded:
                hint = (": the padding lanes load -inf, and -inf * scale is +inf when scale < 0. "
                        "Give the padding lanes -inf after scaling (tl.where with the mask)")
            elif scale < 0:
                hint = (": with scale < 0 the largest x * scale comes from the smallest x, so "
                        "exp(scale * (x - max(x))) overflows. Take the max of x * scale, after scaling")
            elif spread > 1:
                hint = ": did you subtract the row maximum before tl.exp?"
            else:
                hint = ": did you load with mask=... and store every column of the row?"
            raise Wrong(f"on a {M} x {N} input with scale = {scale} your output has NaN{hint}")
        err = (got - ref).abs().max().item()
        if not err <= 1e-5:
            raise Wrong(f"on a {M} x {N} input with scale = {scale}: max abs error {err:.1e} against "
                        f"softmax(x * scale); row 0 should start {fmt(ref[0, :3])}, got {fmt(got[0, :3])}")
        worst = max(worst, err)
    return f"max abs error {round_up_err(worst)}"


def check_3_3(scaled_softmax_kernel) -> None:
    """Exercise 3.3: a Triton kernel computing softmax(x * scale) row by row."""
    check("3.3", "a fused scaled softmax kernel", scaled_softmax_kernel, _trial_3_3)


# Exercise 3.4: predict a bandwidth-bound time ------------------------------------------------


def predicted_ms_answer(M: int, N: int, element_size: int, gbps: float) -> float:
    """Milliseconds to read M*N elements once and write them once at ``gbps`` (10**9 bytes/s)."""
    return 2 * M * N * element_size / (gbps * 1e9) * 1e3


def _trial_3_4(predicted_ms) -> str:
    cases = [(4096, 4096, 4, 4000.0), (1, 1, 4, 1.0), (65536, 1024, 2, 3350.0), (1024, 65536, 4, 2000.0)]
    for M, N, es, gb in cases:
        got = _call(predicted_ms, M, N, es, gb)
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            raise Wrong(f"return a number of milliseconds, got {type(got).__name__}")
        want = predicted_ms_answer(M, N, es, gb)
        if not math.isclose(got, want, rel_tol=1e-6):
            ratio = got / want if want else float("nan")
            hint = ""
            for factor, why in ((0.5, "count the write as well as the read"), (1e3, "milliseconds, not microseconds?"),
                                (1e-3, "milliseconds, not seconds"), (1e6, "GB/s is 10**9 bytes per second"),
                                (2**30 / 1e9, "a GB here is 10**9 bytes, not 2**30")):
                if math.isclose(ratio, factor, rel_tol=1e-3) or math.isclose(ratio, 1 / factor, rel_tol=1e-3):
                    hint = f" ({why})"
                    break
            raise Wrong(f"for M = {M}, N = {N}, {es}-byte elements at {gb:g} GB/s you gave {got:.6g} ms, "
                        f"expected {want:.6g} ms{hint}")
    return _prediction_vs_recorded()


def _prediction_vs_recorded() -> str:
    """One sentence comparing the prediction with the recorded fused kernel on the H100 (the copy's
    eager bandwidth at 1 GiB from device_props.csv; the kernel's GPU and eager time from
    fused_limits.csv) - or nothing."""
    try:
        props, _ = gpu_data.read_csv("device_props")
        rows, _ = gpu_data.read_csv("fused_limits")
        gb = props[0]["copy_gbps_1GiB"]
        r = next(r for r in rows if r["dtype"] == "float32" and r["N"] == 4096 and r["status"] == "ok")
        pred = predicted_ms_answer(r["M"], r["N"], 4, gb)
        return (f"at the H100's copy bandwidth ({gb:.0f} GB/s) a {r['M']} x {r['N']} float32 softmax needs "
                f"{pred:.3f} ms; the fused kernel took {r['graph_ms']:.3f} ms in GPU time ({r['ms']:.3f} ms eager)")
    except Exception:
        return ""


def check_3_4(predicted_ms) -> None:
    """Exercise 3.4: ``predicted_ms(M, N, element_size, gbps)``: the time of a bandwidth-bound
    kernel that reads and writes each element once."""
    check("3.4", "predict a bandwidth-bound time", predicted_ms, _trial_3_4)
