"""Lesson 05 · A persistent softmax sized from the compiled kernel.

What lives here: the grid-stride row assignment, the device limits and the occupancy calculation
(live from the compiled kernel on a GPU, from recorded registers and shared memory on the CPU),
waves, the number-of-programs sweep, the num_warps x num_stages sweep, the final comparison of
every kernel of the course, the tiled kernel's configurations, their figures, and the checkers of
exercises 5.1 to 5.3.
"""

from __future__ import annotations


import torch
import triton

from . import gpu_data, plots
from .device import api_occupancy, compiled_occupancy, gpu_props, occupancy
from .exercises import Wrong, call_attempt, check
from .gpu_data import device_props, ok as _ok, series as _series
from .kernels import persistent_plan, softmax_persistent, softmax_persistent_kernel
from .launch import Rows, acc_dtype
from .measure import DTYPES, eager_ms, gpu_ms, host_us, require_gpu
from .mode import DEVICE, ON_GPU
from .plots import label, set_n_axis
from .reference import error_report, round_up_err

LIMIT_NAMES = ("registers", "shared memory", "threads", "blocks")

# --------------------------------------------------------------------------------------------
# The grid-stride loop
# --------------------------------------------------------------------------------------------


def rows_of_program(pid: int, n_rows: int, num_programs: int) -> list[int]:
    """The rows program ``pid`` handles in the grid-stride loop: pid, pid + P, pid + 2P, ..."""
    return list(range(pid, n_rows, num_programs))


def print_grid_stride(n_rows: int = 10, num_programs: int = 3) -> None:
    """Print which rows each program of a persistent grid takes."""
    print(f"{n_rows} rows, {num_programs} programs:")
    for p in range(min(num_programs, n_rows)):
        rows = rows_of_program(p, n_rows, num_programs)
        print(f"  program {p}: rows {rows}  ({len(rows)} rows)")


def check_program_counts(M: int = 10, N: int = 50, counts=(1, 2, 3, 4, 10, 16), seed: int = 0) -> bool:
    """Run the persistent kernel with several grid sizes on one (M, N) input and print the error
    of each against the float64 reference. Returns True if all are within 1e-6."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(M, N, generator=g) * 3).to(DEVICE)
    ok_all = True
    print(f"x: {M} x {N}")
    for p in counts:
        y = softmax_persistent(x, num_programs=p)
        rep = error_report(y, x)
        ok_all &= rep.ok(atol=1e-6)
        grid = min(p, M)
        print(f"  num_programs = {p:>2} -> grid of {grid:>2}, up to {-(-M // grid)} rows each: "
              f"max abs err {round_up_err(rep.max_abs)}")
    return ok_all


# --------------------------------------------------------------------------------------------
# Device limits and occupancy
# --------------------------------------------------------------------------------------------


def print_device_props(props: dict) -> None:
    """The limits one SM puts on the programs it keeps resident."""
    print(f"GPU: {props['name']}")
    print(f"  streaming multiprocessors (SMs):  {props['sm_count']}")
    print(f"  registers per SM:                 {props['regs_per_sm']:,} (32-bit)")
    print(f"  shared memory per SM:             {props['shared_per_sm']:,} bytes ({props['shared_per_sm'] / 1024:.0f} KiB)")
    print(f"  threads per SM, at most:          {props['max_threads_per_sm']:,}")
    print(f"  programs (blocks) per SM, at most: {props['max_blocks_per_sm']}")
    print(f"  threads per warp:                 {props['warp_size']}")
    if props.get("l2_bytes"):
        print(f"  L2 cache:                         {props['l2_bytes'] / 2**20:.0f} MiB")


def explain_occupancy(n_regs: int, shared: int, num_warps: int, props: dict) -> dict:
    """Print the occupancy calculation step by step for one compiled kernel, and return
    ``helpers.occupancy``'s answer."""
    w = props["warp_size"]
    per_warp = -(-n_regs * w // 256) * 256
    occ = occupancy(n_regs, shared, num_warps, props)
    lim = occ["limits"]
    print(f"kernel: {n_regs} registers per thread, {shared:,} bytes of shared memory, {num_warps} warps "
          f"({num_warps * w} threads)")
    print(f"  registers: {n_regs} x {w} threads = {n_regs * w:,} per warp, rounded up to a multiple of 256 = {per_warp:,};")
    print(f"             x {num_warps} warps = {per_warp * num_warps:,} per program; "
          f"{props['regs_per_sm']:,} // {per_warp * num_warps:,} = {lim['registers']} programs")
    if shared:
        print(f"  shared:    {props['shared_per_sm']:,} // {shared:,} = {lim['shared memory']} programs")
    else:
        print("  shared:    none used, no limit from shared memory")
    print(f"  threads:   {props['max_threads_per_sm']:,} // {num_warps * w} = {lim['threads']} programs")
    print(f"  blocks:    at most {lim['blocks']} programs")
    print(f"  -> {occ['programs_per_sm']} programs per SM, limited by {occ['limited_by']}; "
          f"x {props['sm_count']} SMs = {occ['programs_per_sm'] * props['sm_count']:,} programs in the grid")
    return occ


#: (M, N, num_warps, num_stages) of the recorded tuning rows shown in the occupancy table.
OCCUPANCY_PICKS = [
    (16384, 1024, 1, 1), (16384, 1024, 1, 4), (16384, 1024, 4, 2), (16384, 1024, 8, 1),
    (4096, 4096, 1, 4), (4096, 4096, 8, 1), (4096, 16384, 4, 1), (4096, 16384, 16, 3),
]


def occupancy_data(live: bool | None = None, picks=OCCUPANCY_PICKS) -> tuple[list[dict], dict]:
    """(rows, provenance) of compiled-kernel facts for a few configurations of the persistent kernel:
    n_regs, n_spills, shared bytes (and the recorded programs_per_sm / limited_by). Live on a GPU
    (``persistent_plan`` compiles each one), else rows of ``persistent_tuning.csv``."""
    live = ON_GPU if live is None else live
    if live:
        require_gpu("occupancy_data(live=True)")
        rows = []
        for M, N, w, s in picks:
            x = torch.empty(M, N, device="cuda")
            info = persistent_plan(Rows.of(x), None, w, s).info
            rows.append(dict(dtype="float32", M=M, N=N, num_warps=w, num_stages=s, n_regs=info["n_regs"],
                             n_spills=info["n_spills"], shared=info["shared"],
                             programs_per_sm=info["programs_per_sm"], limited_by=info["limited_by"]))
        return rows, gpu_data.provenance("helpers.kernels.persistent_plan(...)")
    rows, meta = gpu_data.read_csv("persistent_tuning")
    by = {(r["M"], r["N"], r["num_warps"], r["num_stages"]): r for r in rows if r["status"] == "ok"}
    return [by[p] for p in picks if p in by], meta


def print_occupancy_table(rows: list[dict], props: dict) -> bool:
    """Recompute each configuration's occupancy with ``helpers.occupancy`` from its n_regs, shared
    memory and num_warps, show every limit, and compare with what the recorded run found. Returns
    True if every row agrees."""
    head = (f"{'shape':>11} {'warps':>5} {'stages':>6} {'n_regs':>6} {'shared':>7} | {'regs':>4} {'smem':>4} "
            f"{'thr':>4} {'blk':>4} | {'per SM':>6} {'limited by':<13} {'agrees':>6}")
    print("programs per SM allowed by each limit (regs, smem = shared memory, thr = threads, blk = blocks)")
    print(head)
    print("-" * len(head))
    all_ok = True
    for r in rows:
        occ = occupancy(r["n_regs"], r["shared"], r["num_warps"], props)
        lim = occ["limits"]
        agrees = occ["programs_per_sm"] == r.get("programs_per_sm") and occ["limited_by"] == r.get("limited_by")
        all_ok &= agrees
        print(f"{r['M']:>5}x{r['N']:<5} {r['num_warps']:>5} {r['num_stages']:>6} {r['n_regs']:>6} {r['shared']:>7} | "
              f"{lim['registers']:>4} {lim['shared memory']:>4} {lim['threads']:>4} {lim['blocks']:>4} | "
              f"{occ['programs_per_sm']:>6} {occ['limited_by']:<13} {str(agrees):>6}")
    return all_ok


# --------------------------------------------------------------------------------------------
# Waves
# --------------------------------------------------------------------------------------------


def waves_answer(num_programs: int, resident: int) -> tuple[int, int]:
    """(waves, programs in the last wave) when ``num_programs`` programs run ``resident`` at a time."""
    n = -(-num_programs // resident)
    return n, num_programs - (n - 1) * resident


def print_waves(n_rows: int, props: dict, programs_per_sm: int) -> None:
    """One program per row against a persistent grid, for ``n_rows`` rows."""
    resident = props["sm_count"] * programs_per_sm
    n, last = waves_answer(n_rows, resident)
    print(f"{n_rows:,} rows; the GPU keeps {props['sm_count']} SMs x {programs_per_sm} = {resident:,} programs resident")
    print(f"  one program per row: {n_rows:,} programs run in {n} waves; the last wave has {last:,} programs "
          f"({last / resident:.0%} of the GPU)")
    lo, hi = n_rows // resident, -(-n_rows // resident)
    print(f"  persistent grid of {resident:,} programs: one wave; each program loops over {lo} to {hi} rows")


# --------------------------------------------------------------------------------------------
# The number of programs
# --------------------------------------------------------------------------------------------


def programs_data(live: bool | None = None) -> tuple[list[dict], dict]:
    """(rows, provenance) of the persistent kernel's bandwidth against its number of programs
    (M = 65536, N = 1024, float32). Live on a GPU, else ``persistent_programs.csv``."""
    live = ON_GPU if live is None else live
    if live:
        return programs_rows(), gpu_data.provenance("helpers.lesson05.programs_data()")
    return gpu_data.read_csv("persistent_programs")


def programs_rows(N: int = 1024, M: int = 65536, dtype_name: str = "float32") -> list[dict]:
    """Measure the persistent kernel against its number of programs (GPU only): GPU time and eager
    time as fractions of copy, from a quarter of a program per SM to one program per row."""
    require_gpu("programs_rows")
    dtype = DTYPES[dtype_name]
    sms = gpu_props()["sm_count"]
    x = torch.randn(M, N, device="cuda", dtype=dtype)
    y = torch.empty_like(x)
    nbytes = 2 * x.numel() * x.element_size()
    copy_g, copy_e = gpu_ms(lambda: y.copy_(x)), eager_ms(lambda: y.copy_(x))
    occ = persistent_plan(Rows.of(x)).info["programs"]
    counts = sorted({max(1, int(sms * f)) for f in (0.25, 0.5, 0.75, 1, 1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32)}
                    | {sms - 1, sms + 1, 2 * sms + 1, occ, M})
    rows = []
    for p in counts:
        f = lambda: softmax_persistent(x, p)
        g, e = gpu_ms(f), eager_ms(f)
        rows.append(dict(dtype=dtype_name, M=M, N=N, num_programs=p, programs_per_sm=round(p / sms, 3),
                         occupancy_programs=occ, graph_ms=g, ms=e, graph_gbps=nbytes / g / 1e6,
                         graph_frac=copy_g / g, frac_of_copy=copy_e / e))
    return rows


def print_bytes_in_flight(gbps: float, sm_count: int, row_bytes: int, latency_ns: float = 500.0) -> float:
    """Little's law: to sustain ``gbps`` when each load takes ``latency_ns`` to return, this many bytes
    must be on their way at every moment. Prints it per GPU, per SM and in rows; returns rows per SM."""
    total = gbps * 1e9 * latency_ns * 1e-9
    per_sm = total / sm_count
    rows = per_sm / row_bytes
    print(f"{gbps:.0f} GB/s x {latency_ns:.0f} ns = {total / 1e6:.2f} MB in flight across the GPU")
    print(f"  / {sm_count} SMs = {per_sm / 1024:.1f} KiB per SM = {rows:.1f} rows of {row_bytes:,} bytes per SM")
    return rows


def print_programs_table(rows: list[dict], sm_count: int) -> None:
    """Programs, programs per SM, GB/s and the fraction of the copy's bandwidth."""
    r0 = rows[0]
    print(f"{r0['dtype']}, M = {r0['M']}, N = {r0['N']}; occupancy gives {r0['occupancy_programs']} programs "
          f"({r0['occupancy_programs'] / sm_count:g} per SM)")
    print(f"{'programs':>8} {'per SM':>7} {'GB/s':>7} {'frac of copy':>12}")
    for r in sorted(rows, key=lambda r: r["num_programs"]):
        mark = "  <- one per SM" if r["num_programs"] == sm_count else (
            "  <- the occupancy grid" if r["num_programs"] == r["occupancy_programs"] else (
                "  <- one per row" if r["num_programs"] == r["M"] else ""))
        print(f"{r['num_programs']:>8} {r['num_programs'] / sm_count:>7.2f} {r['gbps']:>7.0f} {r['frac_of_copy']:>12.2f}{mark}")


def plot_programs(rows: list[dict] | None = None, meta: dict | None = None, sm_count: int | None = None):
    """Fraction of copy bandwidth against the number of programs of the persistent kernel, with
    one program per SM and the occupancy-sized grid marked."""
    if rows is None:
        rows, meta = programs_data(live=False)
    if sm_count is None:
        sm_count = device_props(live=False)[0]["sm_count"] if not ON_GPU else device_props()[0]["sm_count"]
    rs = sorted(rows, key=lambda r: r["num_programs"])
    fig, ax = plots.new_figure(8.0, 4.0)
    xs, ys = [r["num_programs"] for r in rs], [r["frac_of_copy"] for r in rs]
    ax.plot(xs, ys, "o-", color=plots.COLORS["persistent"], ms=4, lw=2, label="persistent kernel")
    ax.axhline(1.0, color=plots.COLORS["copy"], ls="--", lw=1.2, label=label("copy"))
    occ = rs[0]["occupancy_programs"]
    for x, txt, c in ((sm_count, f"one program per SM\n({sm_count})", "#d62728"),
                      (occ, f"occupancy grid\n({occ} = {occ // sm_count} per SM)", "#2ca02c")):
        ax.axvline(x, color=c, ls=":", lw=1.3)
        r = min(rs, key=lambda r: abs(r["num_programs"] - x))
        ax.annotate(txt, (r["num_programs"], r["frac_of_copy"]), xytext=(8, -28 if x == sm_count else -42),
                    textcoords="offset points", fontsize=8.5, color=c)
    M = rs[0]["M"]
    one_per_row = next((r for r in rs if r["num_programs"] == M), None)
    if one_per_row:
        ax.annotate(f"one program per row\n({M:,})", (M, one_per_row["frac_of_copy"]), xytext=(-80, -42),
                    textcoords="offset points", fontsize=8.5, color="#555555",
                    arrowprops=dict(arrowstyle="-", color="#999999", lw=0.8))
    ax.set_xscale("log", base=2)
    ticks = sorted({x for x in xs if x in (xs[0], sm_count, 4 * sm_count, occ, M)})
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:,}" for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("number of programs in the grid (log scale)")
    ax.set_ylabel("fraction of copy bandwidth")
    ax.set_ylim(0, 1.1)
    sec = ax.secondary_xaxis("top", functions=(lambda p: p / sm_count, lambda s: s * sm_count))
    sec_ticks = [t for t in (0.25, 1, 4, 16, 64, 256) if xs[0] / sm_count <= t <= xs[-1] / sm_count]
    sec.set_xticks(sec_ticks)
    sec.set_xticklabels([f"{t:g}" for t in sec_ticks])
    sec.minorticks_off()
    sec.set_xlabel("programs per SM", fontsize=9)
    gpu = (meta or {}).get("gpu", "GPU")
    ax.set_title(f"{rs[0]['dtype']}, {M} x {rs[0]['N']}, {gpu}", fontsize=10, loc="left")
    ax.legend(frameon=False, fontsize=8.5, loc="lower right")
    return fig


# --------------------------------------------------------------------------------------------
# num_warps and num_stages
# --------------------------------------------------------------------------------------------

TUNING_LIVE_SHAPES = ((16384, 1024), (4096, 4096))


def tuning_data(live: bool | None = None) -> tuple[list[dict], dict]:
    """(rows, provenance) of the persistent kernel over num_warps x num_stages: registers, spills,
    shared memory, occupancy and bandwidth. Live on a GPU (two shapes), else
    ``persistent_tuning.csv`` (three shapes)."""
    live = ON_GPU if live is None else live
    if live:
        return tuning_rows(shapes=TUNING_LIVE_SHAPES), gpu_data.provenance("helpers.lesson05.tuning_data()")
    return gpu_data.read_csv("persistent_tuning")


def tuning_rows(shapes=((16384, 1024), (4096, 4096), (4096, 16384)), dtype_name: str = "float32") -> list[dict]:
    """Measure the persistent kernel over num_warps x num_stages (GPU only): registers, spills,
    shared memory, occupancy (the course's formula and the CUDA driver's), GPU and eager time."""
    require_gpu("tuning_rows")
    dtype = DTYPES[dtype_name]
    rows = []
    for M, N in shapes:
        x = torch.randn(M, N, device="cuda", dtype=dtype)
        y = torch.empty_like(x)
        ref = torch.softmax(x.double(), -1)
        copy_g, copy_e = gpu_ms(lambda: y.copy_(x)), eager_ms(lambda: y.copy_(x))
        for w in (1, 2, 4, 8, 16, 32):
            for s in (1, 2, 3, 4):
                row = dict(dtype=dtype_name, M=M, N=N, num_warps=w, num_stages=s)
                try:
                    info = persistent_plan(Rows.of(x), None, w, s).info
                    f = lambda: softmax_persistent(x, None, w, s)
                    err = (f().double() - ref).abs().max().item()
                    if not err < 1e-5:
                        raise AssertionError(f"max abs error {err:.1e}")
                    g, e = gpu_ms(f), eager_ms(f)
                    row.update(n_regs=info["n_regs"], n_spills=info["n_spills"], shared=info["shared"],
                               programs_per_sm=info["programs_per_sm"], api_programs_per_sm=info["api_programs_per_sm"],
                               limited_by=info["limited_by"], programs=info["programs"], graph_ms=g, ms=e,
                               graph_frac=copy_g / g, frac_of_copy=copy_e / e, status="ok")
                except Exception as ex:
                    msg = (str(ex).strip().splitlines() or [type(ex).__name__])[0][:100].replace(",", ";")
                    row.update(n_regs="", n_spills="", shared="", programs_per_sm="", api_programs_per_sm="",
                               limited_by="", programs="", graph_ms="", ms="", graph_frac="", frac_of_copy="",
                               status=f"failed: {type(ex).__name__}: {msg}")
                rows.append(row)
        del x, y, ref
        torch.cuda.empty_cache()
    return rows


def device_props_rows() -> list[dict]:
    """The GPU's limits (``helpers.gpu_props``) and the copy's bandwidth on a 1 GiB tensor, GPU time
    and eager time (GPU only)."""
    require_gpu("device_props_rows")
    props = gpu_props()
    x = torch.randn(2**28, device="cuda")
    y = torch.empty_like(x)
    g, e = gpu_ms(lambda: y.copy_(x)), eager_ms(lambda: y.copy_(x))
    p = torch.cuda.get_device_properties(torch.cuda.current_device())
    peak = 2 * p.memory_clock_rate * 1e3 * p.memory_bus_width / 8 / 1e9 if getattr(p, "memory_clock_rate", 0) else ""
    return [{**props, "copy_gbps_1GiB": round(2 * x.numel() * 4 / e / 1e6, 1),
             "copy_graph_gbps_1GiB": round(2 * x.numel() * 4 / g / 1e6, 1),
             "dram_peak_gbps": round(peak, 1) if peak else ""}]


#: (N, num_warps, num_stages) of the persistent kernel whose occupancy is checked against the driver.
OCCUPANCY_CHECKS = [(1024, 1, 4), (1024, 4, 2), (2048, 2, 3), (4096, 1, 3), (4096, 8, 2), (16384, 16, 1),
                    (256, 1, 1), (1024, 8, 4), (8192, 4, 2), (32768, 32, 1)]


def occupancy_check_rows(checks=OCCUPANCY_CHECKS) -> list[dict]:
    """The course's occupancy arithmetic against the CUDA driver's
    ``cuOccupancyMaxActiveBlocksPerMultiprocessor`` for compiled persistent kernels (GPU only)."""
    require_gpu("occupancy_check_rows")
    props = gpu_props()
    rows = []
    for N, w, s in checks:
        c = softmax_persistent_kernel.warmup(torch.float32, torch.float32, N, 1, N, 4096, N, BLOCK_SIZE=N,
                                             ACC=acc_dtype(torch.float32), NUM_STAGES=s, num_warps=w, grid=(1,))
        c._init_handles()
        occ = occupancy(c.n_regs, c.metadata.shared, w, props)
        no_reserve = occupancy(c.n_regs, c.metadata.shared, w, {**props, "reserved_shared_per_block": 0})
        rows.append(dict(N=N, num_warps=w, num_stages=s, n_regs=c.n_regs, shared=c.metadata.shared,
                         reserved_shared=props["reserved_shared_per_block"], course=occ["programs_per_sm"],
                         limited_by=occ["limited_by"], without_reserved=no_reserve["programs_per_sm"],
                         cuda_api=api_occupancy(c, w)))
    return rows


def launch_cost_rows(M: int = 4096, N: int = 256, rounds: int = 7) -> list[dict]:
    """Host µs per call of each way to launch one compiled kernel (the fused kernel on an M x N fp32
    tensor), of every wrapper of the course and of torch.softmax, with each one's GPU time (GPU only)."""
    require_gpu("launch_cost_rows")
    from . import kernels as K
    from .launch import _raw_stream
    from .peers import liger_softmax, tutorial_softmax

    x = torch.randn(M, N, device="cuda")
    o = torch.empty_like(x)
    kw = dict(BLOCK_SIZE=triton.next_power_of_2(N), ACC=acc_dtype(x.dtype), num_warps=4)
    args = (o, x, x.stride(0), x.stride(1), o.stride(0), N)
    c = K.softmax_fused_kernel.warmup(*args, grid=(M,), **kw)
    c._init_handles()
    run, dev = c.run, torch.cuda.current_device()
    rest = (x.stride(0), x.stride(1), o.stride(0), N, kw["BLOCK_SIZE"], None)
    ways = {
        "torch.empty_like(x)": ("allocation", lambda: torch.empty_like(x)),
        "kernel[grid](...) (Triton's JIT)": ("launch", lambda: K.softmax_fused_kernel[(M,)](*args, **kw)),
        "compiled[grid](...)": ("launch", lambda: c[(M, 1, 1)](*args[:2], *rest)),
        "compiled.run(..., tensors)": ("launch", lambda: run(M, 1, 1, _raw_stream(dev), c.function, c.packed_metadata,
                                                            None, None, None, o, x, *rest)),
        "launcher, raw pointers": ("launch", lambda: run.launch(M, 1, 1, _raw_stream(dev), c.function,
                                                               run.launch_cooperative_grid, run.launch_pdl, None, None,
                                                               c.packed_metadata, None, None, None, o.data_ptr(),
                                                               x.data_ptr(), *rest)),
    }
    wrappers = {"torch.softmax": lambda t: torch.softmax(t, -1), "Triton tutorial": tutorial_softmax}
    if liger_softmax is not None:
        wrappers["Liger-Kernel"] = liger_softmax
    wrappers.update({"helpers.softmax": K.softmax, "helpers.softmax_fused": K.softmax_fused,
                     "helpers.softmax_online": K.softmax_online, "helpers.softmax_persistent": K.softmax_persistent,
                     "helpers.softmax_tiled": K.softmax_tiled, "helpers.softmax_split": K.softmax_split,
                     "helpers.softmax_split_coop": K.softmax_split_coop})
    cases = {name: (kind, f) for name, (kind, f) in ways.items()}
    cases.update({name: ("wrapper", lambda fn=fn: fn(x)) for name, fn in wrappers.items()})
    # Host time moves by tens of percent between runs and machines (torch.softmax: 6 to 12 µs), so
    # every case is timed in each of `rounds` interleaved rounds, and compared with torch.softmax
    # round by round: the ratio is what the target is about.
    times = {name: [] for name in cases}
    for _ in range(rounds):
        for name, (kind, f) in cases.items():
            times[name].append(host_us(f, loops=3))
    med = lambda v: sorted(v)[len(v) // 2]
    torch_t = times["torch.softmax"]
    rows = []
    for name, (kind, f) in cases.items():
        t = times[name]
        rows.append(dict(case=name, kind=kind, M=M, N=N, host_us=med(t), host_us_min=min(t), host_us_max=max(t),
                         vs_torch_softmax=med([a / b for a, b in zip(t, torch_t)]),
                         graph_us=gpu_ms(f) * 1e3 if kind == "wrapper" else ""))
    return rows


def _shapes(rows):
    seen = []
    for r in rows:
        if (r["M"], r["N"]) not in seen:
            seen.append((r["M"], r["N"]))
    return seen


def print_tuning_table(rows: list[dict], M: int, N: int) -> None:
    """One shape's sweep: registers, spills, shared memory, programs per SM, the binding limit and
    the fraction of copy, best first marked."""
    rs = [r for r in rows if r["M"] == M and r["N"] == N]
    ok = [r for r in rs if r["status"] == "ok"]
    best = max(ok, key=lambda r: r["frac_of_copy"]) if ok else None
    print(f"{M} x {N} float32")
    head = (f"{'warps':>5} {'stages':>6} {'n_regs':>6} {'spills':>6} {'shared':>7} {'per SM':>6} "
            f"{'limited by':<13} {'frac of copy':>12}")
    print(head)
    print("-" * len(head))
    for r in sorted(rs, key=lambda r: (r["num_warps"], r["num_stages"])):
        if r["status"] != "ok":
            print(f"{r['num_warps']:>5} {r['num_stages']:>6}  {r['status']}")
            continue
        mark = "  <- best" if r is best else ""
        print(f"{r['num_warps']:>5} {r['num_stages']:>6} {r['n_regs']:>6} {r['n_spills']:>6} {r['shared']:>7} "
              f"{r['programs_per_sm']:>6} {r['limited_by']:<13} {r['frac_of_copy']:>12.2f}{mark}")


def tuning_summary(rows: list[dict]) -> None:
    """Per shape: the best and worst configurations, and what the worst ones have in common."""
    for M, N in _shapes(rows):
        ok = [r for r in rows if r["M"] == M and r["N"] == N and r["status"] == "ok"]
        if not ok:
            continue
        best = max(ok, key=lambda r: r["frac_of_copy"])
        worst = min(ok, key=lambda r: r["frac_of_copy"])
        spilled = [r for r in ok if r["n_spills"] > 0]
        line = (f"{M} x {N}: best {best['frac_of_copy']:.2f} of copy (num_warps={best['num_warps']}, "
                f"num_stages={best['num_stages']}, {best['programs_per_sm']}/SM); worst {worst['frac_of_copy']:.2f} "
                f"(num_warps={worst['num_warps']}, num_stages={worst['num_stages']}, {worst['n_spills']} spills, "
                f"{worst['programs_per_sm']}/SM)")
        if spilled:
            line += f"; {len(spilled)} of {len(ok)} configurations spill"
        print(line)


_LIMIT_LETTER = {"registers": "R", "shared memory": "S", "threads": "T", "blocks": "B"}


def plot_tuning(rows: list[dict] | None = None, meta: dict | None = None):
    """Heat maps of the fraction of copy over num_warps x num_stages, one per shape, each cell
    labelled with programs per SM and the limit that binds (R, S, T, B); * marks spills."""
    if rows is None:
        rows, meta = tuning_data(live=False)
    shapes = _shapes(rows)
    fig, axes = plots.new_figure(4.0 * len(shapes) + 0.8, 4.3, ncols=len(shapes))
    axes = list(axes) if len(shapes) > 1 else [axes]
    warps = sorted({r["num_warps"] for r in rows})
    stages = sorted({r["num_stages"] for r in rows})
    im = None
    for ax, (M, N) in zip(axes, shapes):
        grid = [[float("nan")] * len(stages) for _ in warps]
        for r in rows:
            if r["M"] == M and r["N"] == N and r["status"] == "ok":
                i, j = warps.index(r["num_warps"]), stages.index(r["num_stages"])
                grid[i][j] = r["frac_of_copy"]
                spill = "*" if r["n_spills"] else ""
                txt = f"{r['frac_of_copy']:.2f}{spill}\n{r['programs_per_sm']}/SM {_LIMIT_LETTER.get(r['limited_by'], '?')}"
                ax.text(j, i, txt, ha="center", va="center", fontsize=7.5,
                        color="white" if r["frac_of_copy"] < 0.45 else "black")
        im = ax.imshow(grid, cmap="viridis", vmin=0, vmax=1, aspect="auto")
        ax.set_xticks(range(len(stages)))
        ax.set_xticklabels(stages)
        ax.set_yticks(range(len(warps)))
        ax.set_yticklabels(warps)
        ax.set_xlabel("num_stages")
        ax.set_ylabel("num_warps")
        ax.grid(False)
        ax.set_title(f"{M} x {N} float32", fontsize=10)
    fig.colorbar(im, ax=axes, shrink=0.85, label="fraction of copy bandwidth")
    gpu = (meta or {}).get("gpu", "GPU")
    fig.suptitle(f"Persistent kernel, {gpu}: programs per SM and the binding limit "
                 f"(R registers, S shared memory, T threads); * = registers spilled", fontsize=9)
    return fig


# --------------------------------------------------------------------------------------------
# Every kernel of the course, side by side
# --------------------------------------------------------------------------------------------

#: Plot order; any other provider in the data is drawn after these.
FINAL_ORDER = ("torch_naive", "torch_softmax", "torch_compile", "fused", "online", "persistent", "tiled", "split",
               "split_coop", "softmax")
FINAL_LIVE_NS = (1024, 4096, 16384)


def final_data(live: bool | None = None) -> tuple[list[dict], dict]:
    """(rows, provenance) of every provider of the course at M = 4096 over N (and a few long-row
    shapes), float32 and bfloat16. Live on a GPU (three N), else the recorded ``bench.csv``."""
    live = ON_GPU if live is None else live
    if live:
        require_gpu("final_data(live=True)")
        from .measure import measure_shape, providers

        rows = []
        for d in ("float32", "bfloat16"):
            for n in FINAL_LIVE_NS:
                rows += measure_shape(4096, n, DTYPES[d], providers(), quick=True)
        return rows, gpu_data.provenance("helpers.lesson05.final_data()")
    return gpu_data.bench()


def _providers(rows) -> list[str]:
    present = {r["provider"] for r in rows} - {"copy"}
    return [p for p in FINAL_ORDER if p in present] + sorted(present - set(FINAL_ORDER))


def print_final_table(rows: list[dict], dtype: str = "float32", M: int | None = 4096) -> None:
    """Fraction of copy for every provider, one line per shape (M = 4096 rows, or the other
    shapes with ``M=None``)."""
    rs = [r for r in rows if r["dtype"] == dtype and ((r["M"] == M) if M else (r["M"] != 4096))]
    provs = _providers(rs)
    short = {"torch_naive": "naive", "torch_softmax": "torch", "torch_compile": "compile", "fused": "fused",
             "online": "online", "persistent": "persist", "softmax": "softmax", "split": "split", "split_coop": "coop",
             "three_pass": "3-pass", "tiled": "tiled"}
    print(f"{dtype}: fraction of copy bandwidth")
    print(f"{'M':>5} {'N':>8} " + " ".join(f"{short.get(p, p)[:8]:>8}" for p in provs))
    shapes = sorted({(r["M"], r["N"]) for r in rs}, key=lambda s: s[1])
    for Mi, N in shapes:
        cells = []
        for p in provs:
            r = next((r for r in rs if r["M"] == Mi and r["N"] == N and r["provider"] == p), None)
            cells.append(f"{r['frac_of_copy']:.2f}" if r is not None and _ok(r) else ("-" if r is None else "n/a"))
        print(f"{Mi:>5} {N:>8} " + " ".join(f"{c:>8}" for c in cells))


def final_summary(rows: list[dict], mine: str = "softmax", peers=("torch_softmax", "torch_compile")) -> None:
    """Per dtype, at M = 4096: where ``mine`` stands against the best of torch.softmax and
    torch.compile, computed from the rows."""
    for dtype in ("float32", "bfloat16"):
        by = {}
        for r in rows:
            if r["dtype"] == dtype and r["M"] == 4096 and _ok(r):
                by.setdefault(r["N"], {})[r["provider"]] = r["frac_of_copy"]
        ns = [n for n in sorted(by) if mine in by[n] and any(p in by[n] for p in peers)]
        if not ns:
            continue
        ratios = {n: by[n][mine] / max(by[n][p] for p in peers if p in by[n]) for n in ns}
        wins = [n for n in ns if ratios[n] >= 1.0]
        fr = [by[n][mine] for n in ns]
        print(f"{dtype}, M = 4096: {label(mine)} reaches {min(fr):.2f} to {max(fr):.2f} of copy; it matches or "
              f"beats the better of torch.softmax and torch.compile at {len(wins)} of {len(ns)} sizes "
              f"(ratio {min(ratios.values()):.2f}x to {max(ratios.values()):.2f}x)")


def plot_final(rows: list[dict] | None = None, meta: dict | None = None, M: int = 4096):
    """GB/s against N at M = 4096 for every provider, float32 and bfloat16 side by side, with the
    copy ceiling."""
    if rows is None:
        rows, meta = final_data(live=False)
    dtypes = [d for d in ("float32", "bfloat16") if any(r["dtype"] == d for r in rows)]
    fig, axes = plots.new_figure(12.0, 5.0, ncols=len(dtypes))
    axes = list(axes) if len(dtypes) > 1 else [axes]
    for ax, d in zip(axes, dtypes):
        rs = [r for r in rows if r["dtype"] == d and r["M"] == M]
        ns, gb = _series(rs, "copy", d)
        ax.plot(ns, gb, "--", color=plots.COLORS["copy"], lw=1.5, label=label("copy"))
        for p in _providers(rs):
            xs, ys = _series(rs, p, d)
            if not xs:
                continue
            bold = p in ("softmax",)
            ax.plot(xs, ys, "o-", color=plots.COLORS.get(p, "#7f7f7f"), ms=3.5 if not bold else 5,
                    lw=2.4 if bold else 1.3, label=label(p), zorder=3 if bold else 2)
        set_n_axis(ax, sorted({r["N"] for r in rs}))
        ax.set_ylim(0, None)
        ax.set_ylabel("GB/s")
        ax.set_title(f"{d}, M = {M}", fontsize=10)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(5, len(labels)), frameon=False, fontsize=8.5)
    gpu = (meta or {}).get("gpu", "GPU")
    fig.suptitle(f"Every softmax of the course on an {gpu}: bytes moved (2·M·N·size) per second", fontsize=10)
    return fig


# --------------------------------------------------------------------------------------------
# The tiled kernel behind helpers.softmax
# --------------------------------------------------------------------------------------------


def print_tiled_configs(ns=(256, 1024, 4096, 16384, 32768), dtypes=(torch.float32, torch.bfloat16)) -> None:
    """The configuration ``tiled_config`` picks for each row length: rows per tile and warps."""
    from .tuning import tiled_config

    print(f"{'dtype':<9} {'N':>6} {'rows per tile':>13} {'num_warps':>9} {'tile elements':>13}")
    for dt in dtypes:
        for n in ns:
            cfg = tiled_config(n, dt)
            bm, w = cfg[0], cfg[1]
            print(f"{str(dt).replace('torch.', ''):<9} {n:>6} {bm:>13} {w:>9} {bm * triton.next_power_of_2(n):>13}")


def tiled_tuning_summary(rows: list[dict] | None = None, dtype: str = "float32") -> None:
    """From the tiled kernel's sweep: per N, the best fraction of copy with one row per program and
    with several rows per tile (and how many)."""
    if rows is None:
        rows, _ = gpu_data.read_csv("tuning_tiled")
    print(f"{dtype}, M = {rows[0]['M'] if rows else '?'}: best fraction of copy")
    print(f"{'N':>6} {'1 row per program':>18} {'several rows per tile':>22}")
    for n in sorted({r["N"] for r in rows if r["dtype"] == dtype}):
        rs = [r for r in rows if r["dtype"] == dtype and r["N"] == n and r.get("status") == "ok"]
        one = [r for r in rs if r["block_m"] == 1]
        many = [r for r in rs if r["block_m"] > 1]
        b1 = max(one, key=lambda r: r["frac_of_copy"]) if one else None
        bm = max(many, key=lambda r: r["frac_of_copy"]) if many else None
        c1 = f"{b1['frac_of_copy']:.2f}" if b1 else "-"
        cm = f"{bm['frac_of_copy']:.2f} ({bm['block_m']} rows)" if bm else "-"
        print(f"{n:>6} {c1:>18} {cm:>22}")


#: Figures of this lesson, by the name ``helpers.plots.save`` writes them under.
FIGURES = {
    "05_programs": plot_programs,
    "05_tuning": plot_tuning,
    "05_final_comparison": plot_final,
}


# --------------------------------------------------------------------------------------------
# Exercise checkers: each prints one line (correct / not yet / wrong) and never raises.
# --------------------------------------------------------------------------------------------


_call = call_attempt  # one definition, shared by every lesson's checkers


def _int(v, what):
    if isinstance(v, torch.Tensor) and v.numel() == 1:
        v = v.item()
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise Wrong(f"{what} should be a whole number, got {type(v).__name__} {v!r}")
    return v


def programs_by_registers_answer(n_regs: int, num_warps: int, regs_per_sm: int = 65536, warp_size: int = 32) -> int:
    """Programs per SM the register file allows: each warp's registers rounded up to 256."""
    per_warp = -(-n_regs * warp_size // 256) * 256
    return regs_per_sm // (per_warp * num_warps)


def _trial_5_1(programs_by_registers) -> str:
    cases = [(58, 1), (23, 8), (180, 4), (255, 1), (32, 32), (128, 16), (129, 16), (25, 4), (71, 2)]
    for n_regs, w in cases:
        got = _int(_call(programs_by_registers, n_regs, w, 65536, 32), "the number of programs")
        want = programs_by_registers_answer(n_regs, w)
        if got != want:
            unrounded = 65536 // (n_regs * 32 * w)
            hint = ""
            if got == unrounded:
                hint = " (round each warp's registers up to a multiple of 256 first)"
            elif want == 0:
                hint = " (a program that needs more registers than the SM has cannot be resident at all: 0)"
            raise Wrong(f"n_regs = {n_regs}, num_warps = {w}: you gave {got}, expected {want}{hint}")
    return "e.g. 58 registers, 1 warp: 58 x 32 = 1856 -> 2048 per warp, 65536 // 2048 = 32"


def check_5_1(programs_by_registers) -> None:
    """Exercise 5.1: ``programs_by_registers(n_regs, num_warps, regs_per_sm, warp_size)``."""
    check("5.1", "programs per SM from registers", programs_by_registers, _trial_5_1)


def _trial_5_2(waves) -> str:
    cases = [(65536, 2112), (2112, 2112), (132, 2112), (4224, 2112), (4225, 2112), (1, 1), (1000, 7)]
    for n, r in cases:
        got = _call(waves, n, r)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise Wrong(f"return a pair (waves, programs in the last wave), got {type(got).__name__}")
        w, last = _int(got[0], "waves"), _int(got[1], "programs in the last wave")
        ww, wl = waves_answer(n, r)
        if (w, last) != (ww, wl):
            hint = ""
            if w == n // r and n % r:
                hint = " (a partial wave is still a wave: round up)"
            elif last == n % r and n % r == 0:
                hint = " (when the programs divide evenly, the last wave is full)"
            raise Wrong(f"{n} programs, {r} resident: you gave ({w}, {last}), expected ({ww}, {wl}){hint}")
    return "65536 rows at 2112 resident: 32 waves, the last one 64 programs (3% of the GPU)"


def check_5_2(waves) -> None:
    """Exercise 5.2: ``waves(num_programs, resident)`` returns (waves, programs in the last wave)."""
    check("5.2", "waves", waves, _trial_5_2)


def _trial_5_3(binding_limit) -> str:
    props, _ = device_props(live=False)
    cases = [(72, 12288, 1), (23, 32, 8), (180, 16, 4), (199, 49152, 1), (24, 8256, 16), (58, 0, 1),
             (255, 196608, 2), (40, 1024, 2), (16, 16, 1)]
    seen = set()
    for n_regs, shared, w in cases:
        got = _call(binding_limit, n_regs, shared, w, dict(props))
        if not isinstance(got, str):
            raise Wrong(f"return the name of the limit as a string, one of {list(LIMIT_NAMES)}")
        occ = occupancy(n_regs, shared, w, props)
        tied = [k for k, v in occ["limits"].items() if v == occ["programs_per_sm"]
                and not (k == "shared memory" and shared == 0)]  # no shared memory used: no limit from it
        if got not in LIMIT_NAMES:
            raise Wrong(f"{got!r} is not one of {list(LIMIT_NAMES)}")
        if got not in tied:
            lim = occ["limits"]
            raise Wrong(f"n_regs = {n_regs}, shared = {shared}, num_warps = {w}: you said {got!r} "
                        f"({lim[got]} programs), but {tied[0]!r} allows only {occ['programs_per_sm']}")
        seen.add(got)
    return f"you met {len(seen)} different limits: {', '.join(sorted(seen))}"


def check_5_3(binding_limit) -> None:
    """Exercise 5.3: ``binding_limit(n_regs, shared, num_warps, props)`` names the limit that binds."""
    check("5.3", "which limit binds", binding_limit, _trial_5_3)
