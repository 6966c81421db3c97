"""Lesson 05 · A persistent softmax sized from the compiled kernel, and where the time goes.

What lives here: the GPU's terms and limits, the grid-stride row assignment, the occupancy
calculation (live from the compiled kernel on a GPU, from recorded registers and shared memory on
the CPU) and its check against the CUDA driver's own count, waves, the number-of-programs sweep,
the num_warps x num_stages sweep, the final comparison of every kernel of the course with its
peers (GPU time and eager, held-out shapes apart), how the tiled kernel's configuration is chosen
per GPU, host time against GPU time, their figures, and the checkers of exercises 5.1 to 5.4.
Every recorded number comes from the H100 files under figures/data/ (``gpu_data.LESSON_GPU``).
"""

from __future__ import annotations

import math

import torch
import triton

from . import gpu_data, plots
from .device import api_occupancy, gpu_props, occupancy
from .exercises import Wrong, call_attempt, check, guarded, launch_learner_kernel
from .gpu_data import SPREAD_LIMIT, device_props, noisy, ok as _ok, series as _series
from .kernels import persistent_plan, softmax_persistent, softmax_persistent_kernel
from .launch import Rows, acc_dtype
from .measure import DTYPES, eager_ms, gpu_ms, host_us, require_gpu
from .mode import DEVICE, ON_GPU
from .plots import label, n_label, set_n_axis


def _label(provider: str) -> str:
    """A provider's display name; the copy is named by what it is, a comparison rather than a ceiling."""
    return "y.copy_(x)" if provider == "copy" else label(provider)
from .reference import error_report, round_up_err

LIMIT_NAMES = ("registers", "shared memory", "threads", "blocks")

# --------------------------------------------------------------------------------------------
# The GPU's terms
# --------------------------------------------------------------------------------------------


def print_device_props(props: dict) -> None:
    """The limits one SM puts on the programs it keeps resident, and the cache they share."""
    print(f"GPU: {props['name']}")
    print(f"  streaming multiprocessors (SMs):    {props['sm_count']}")
    print(f"  registers per SM:                   {props['regs_per_sm']:,} (32-bit)")
    print(f"  shared memory per SM:               {props['shared_per_sm']:,} bytes ({props['shared_per_sm'] / 1024:.0f} KiB)")
    if "reserved_shared_per_block" in props:
        print(f"  shared memory the driver reserves:  {props['reserved_shared_per_block']:,} bytes per resident program")
    print(f"  threads per SM, at most:            {props['max_threads_per_sm']:,} "
          f"({props['max_threads_per_sm'] // props['warp_size']} warps of {props['warp_size']})")
    print(f"  programs (blocks) per SM, at most:  {props['max_blocks_per_sm']}")
    if props.get("l2_bytes"):
        print(f"  L2 cache, shared by all SMs:        {props['l2_bytes'] / 2**20:.0f} MiB")


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
# Occupancy: the course's formula, and the CUDA driver's count
# --------------------------------------------------------------------------------------------


def explain_occupancy(n_regs: int, shared: int, num_warps: int, props: dict) -> dict:
    """Print the occupancy calculation step by step for one compiled kernel, and return
    ``helpers.occupancy``'s answer."""
    w = props["warp_size"]
    per_warp = -(-n_regs * w // 256) * 256
    reserved = props.get("reserved_shared_per_block", 0)
    occ = occupancy(n_regs, shared, num_warps, props)
    lim = occ["limits"]
    print(f"kernel: {n_regs} registers per thread, {shared:,} bytes of shared memory, {num_warps} warps "
          f"({num_warps * w} threads)")
    print(f"  registers: {n_regs} x {w} threads = {n_regs * w:,} per warp, rounded up to a multiple of 256 = {per_warp:,};")
    print(f"             x {num_warps} warps = {per_warp * num_warps:,} per program; "
          f"{props['regs_per_sm']:,} // {per_warp * num_warps:,} = {lim['registers']} programs")
    if shared + reserved:
        print(f"  shared:    {props['shared_per_sm']:,} // ({shared:,} + {reserved:,} reserved by the driver) "
              f"= {lim['shared memory']} programs")
    else:
        print("  shared:    none used, no limit from shared memory")
    print(f"  threads:   {props['max_threads_per_sm']:,} // {num_warps * w} = {lim['threads']} programs")
    print(f"  blocks:    at most {lim['blocks']} programs")
    print(f"  -> {occ['programs_per_sm']} programs per SM, limited by {occ['limited_by']}; "
          f"x {props['sm_count']} SMs = {occ['programs_per_sm'] * props['sm_count']:,} programs resident at once")
    return occ


def occupancy_check_data(live: bool | None = None) -> tuple[list[dict], dict]:
    """(rows, provenance) of the course's occupancy arithmetic against the CUDA driver's
    ``cuOccupancyMaxActiveBlocksPerMultiprocessor`` for compiled persistent kernels, with and
    without the shared memory the driver reserves per block. Live on a GPU, else
    ``occupancy_check.csv`` (H100)."""
    live = ON_GPU if live is None else live
    if live:
        return occupancy_check_rows(), gpu_data.provenance("helpers.lesson05.occupancy_check_rows()")
    return gpu_data.read_csv("occupancy_check")


def print_occupancy_check(rows: list[dict]) -> tuple[int, int, int]:
    """The formula without the reserved shared memory, with it (the course's), and the driver's
    count, per compiled kernel. Returns (rows where the course's agrees, where the formula without
    the reserve agrees, rows compared) - rows the driver could not answer are left out."""
    print(f"{'N':>6} {'warps':>5} {'stages':>6} {'n_regs':>6} {'shared':>7} | {'without reserve':>15} "
          f"{'with 1 KiB reserve':>18} {'CUDA driver':>11} | limited by")
    n = with_ok = without_ok = 0
    for r in rows:
        api = r.get("cuda_api")
        has_api = isinstance(api, int)
        mark = lambda v: ("" if v == api else " x") if has_api else ""  # noqa: E731
        print(f"{r['N']:>6} {r['num_warps']:>5} {r['num_stages']:>6} {r['n_regs']:>6} {r['shared']:>7} | "
              f"{str(r['without_reserved']) + mark(r['without_reserved']):>15} {str(r['course']) + mark(r['course']):>18} "
              f"{api if has_api else '-':>11} | {r['limited_by']}")
        if has_api:
            n += 1
            with_ok += r["course"] == api
            without_ok += r["without_reserved"] == api
    print(f"x = differs from the driver. Agrees with the driver: without the reserve {without_ok} of {n}, "
          f"with it {with_ok} of {n}")
    return with_ok, without_ok, n


def registers_by_partition(n_regs: int, num_warps: int, props: dict, partitions: int = 4) -> int:
    """Programs per SM the register file allows when it is split into ``partitions`` equal parts
    (one per warp scheduler of the SM) and each warp's registers must come from one part."""
    per_warp = -(-n_regs * props["warp_size"] // 256) * 256
    warps = (props["regs_per_sm"] // partitions) // per_warp * partitions
    return warps // num_warps


def sweep_vs_driver(rows: list[dict], props: dict) -> list[dict]:
    """For every configuration of the recorded num_warps x num_stages sweep: the course's formula,
    the same with registers counted per quarter of the SM, and the driver's count."""
    out = []
    for r in rows:
        if r.get("status") != "ok" or not isinstance(r.get("api_programs_per_sm"), int):
            continue
        occ = occupancy(r["n_regs"], r["shared"], r["num_warps"], props)
        lim = dict(occ["limits"], registers=registers_by_partition(r["n_regs"], r["num_warps"], props))
        out.append(dict(M=r["M"], N=r["N"], num_warps=r["num_warps"], num_stages=r["num_stages"], n_regs=r["n_regs"],
                        shared=r["shared"], course=occ["programs_per_sm"], limited_by=occ["limited_by"],
                        by_partition=min(lim.values()), cuda_api=r["api_programs_per_sm"]))
    return out


def print_sweep_vs_driver(rows: list[dict], props: dict) -> None:
    """How often the course's formula agrees with the driver over the whole tuning sweep, and the
    configurations where it does not, with the count per quarter of the SM."""
    cmp = sweep_vs_driver(rows, props)
    agree = sum(c["course"] == c["cuda_api"] for c in cmp)
    agree_p = sum(c["by_partition"] == c["cuda_api"] for c in cmp)
    print(f"{len(cmp)} compiled configurations of the persistent kernel: the course's formula agrees with the "
          f"driver on {agree}; counting registers per quarter of the SM, on {agree_p}")
    bad = [c for c in cmp if c["course"] != c["cuda_api"]]
    if bad:
        print(f"{'shape':>11} {'warps':>5} {'stages':>6} {'n_regs':>6} | {'formula':>7} {'per quarter':>11} "
              f"{'driver':>6} | formula limited by")
        for c in bad:
            print(f"{c['M']:>5}x{c['N']:<5} {c['num_warps']:>5} {c['num_stages']:>6} {c['n_regs']:>6} | "
                  f"{c['course']:>7} {c['by_partition']:>11} {c['cuda_api']:>6} | {c['limited_by']}")


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


#: (M, N, num_warps, num_stages) of the recorded tuning rows used as worked examples.
OCCUPANCY_PICKS = [
    (16384, 1024, 1, 1), (16384, 1024, 1, 4), (16384, 1024, 4, 2), (16384, 1024, 8, 1),
    (4096, 4096, 1, 4), (4096, 4096, 8, 1), (4096, 16384, 4, 1), (4096, 16384, 16, 3),
]


def occupancy_data(live: bool | None = None, picks=OCCUPANCY_PICKS) -> tuple[list[dict], dict]:
    """(rows, provenance) of compiled-kernel facts for a few configurations of the persistent kernel:
    n_regs, n_spills, shared bytes, programs_per_sm / limited_by (the course's formula) and the
    driver's api_programs_per_sm. Live on a GPU (``persistent_plan`` compiles each one), else rows
    of ``persistent_tuning.csv``."""
    live = ON_GPU if live is None else live
    if live:
        require_gpu("occupancy_data(live=True)")
        rows = []
        for M, N, w, s in picks:
            x = torch.empty(M, N, device="cuda")
            info = persistent_plan(Rows.of(x), None, w, s).info
            rows.append(dict(dtype="float32", M=M, N=N, num_warps=w, num_stages=s, n_regs=info["n_regs"],
                             n_spills=info["n_spills"], shared=info["shared"],
                             programs_per_sm=info["programs_per_sm"], api_programs_per_sm=info["api_programs_per_sm"],
                             limited_by=info["limited_by"]))
        return rows, gpu_data.provenance("helpers.kernels.persistent_plan(...)")
    rows, meta = gpu_data.read_csv("persistent_tuning")
    by = {(r["M"], r["N"], r["num_warps"], r["num_stages"]): r for r in rows if r["status"] == "ok"}
    return [by[p] for p in picks if p in by], meta


def print_programs_table(rows: list[dict], sm_count: int) -> None:
    """Programs, programs per SM, GB/s and the fraction of the copy: GPU time, eager beside."""
    r0 = rows[0]
    print(f"{r0['dtype']}, M = {r0['M']}, N = {r0['N']}; occupancy gives {r0['occupancy_programs']} programs "
          f"({r0['occupancy_programs'] / sm_count:g} per SM)")
    print(f"{'programs':>8} {'per SM':>7} {'GB/s GPU':>9} {'frac GPU':>9} {'frac eager':>11}")
    for r in sorted(rows, key=lambda r: r["num_programs"]):
        mark = "  <- one per SM" if r["num_programs"] == sm_count else (
            "  <- the occupancy grid" if r["num_programs"] == r["occupancy_programs"] else (
                "  <- one per row" if r["num_programs"] == r["M"] else ""))
        print(f"{r['num_programs']:>8} {r['num_programs'] / sm_count:>7.2f} {r['graph_gbps']:>9.0f} "
              f"{r['graph_frac']:>9.2f} {r['frac_of_copy']:>11.2f}{mark}")


def littles_law_vs_measured(rows: list[dict], props: dict, latency_ns: float = 500.0) -> None:
    """Little's law's estimate of the programs per SM needed to keep memory busy (one row in flight a
    program, the copy's bandwidth at the same shape in GPU time, taken from the rows themselves, an
    assumed latency), against where the measured curve (GPU time) reaches 0.9 of the copy."""
    r0 = rows[0]
    row_bytes = r0["N"] * DTYPES[r0["dtype"]].itemsize
    copy_gbps = r0["graph_gbps"] / r0["graph_frac"]  # the copy of the same tensor, same timing
    needed = print_bytes_in_flight(copy_gbps, props["sm_count"], row_bytes, latency_ns)
    sms = props["sm_count"]
    rs = sorted(rows, key=lambda r: r["num_programs"])
    first = next((r for r in rs if r["graph_frac"] >= 0.9), None)
    near = min(rs, key=lambda r: abs(r["num_programs"] / sms - needed))
    print(f"estimate: about {needed:.1f} programs per SM; measured at {near['num_programs'] / sms:g} per SM: "
          f"{near['graph_frac']:.2f} of copy (GPU time)")
    if first:
        print(f"measured: the first grid at 0.9 of copy or more has {first['num_programs'] / sms:g} programs per SM "
              f"({first['graph_frac']:.2f})")


def plot_programs(rows: list[dict] | None = None, meta: dict | None = None, sm_count: int | None = None):
    """Fraction of copy (GPU time, and eager dashed) against the number of programs of the persistent
    kernel, with one program per SM and the occupancy-sized grid marked."""
    if rows is None:
        rows, meta = programs_data(live=False)
    if sm_count is None:
        sm_count = device_props(live=False)[0]["sm_count"] if not ON_GPU else device_props()[0]["sm_count"]
    rs = sorted(rows, key=lambda r: r["num_programs"])
    fig, ax = plots.new_figure(8.0, 4.0)
    xs = [r["num_programs"] for r in rs]
    ax.plot(xs, [r["graph_frac"] for r in rs], "o-", color=plots.COLORS["persistent"], ms=4, lw=2,
            label="persistent kernel, GPU time")
    ax.plot(xs, [r["frac_of_copy"] for r in rs], ".--", color=plots.COLORS["persistent"], ms=3, lw=1, alpha=0.6,
            label="persistent kernel, eager")
    ax.axhline(1.0, color=plots.COLORS["copy"], ls="--", lw=1.2, label=_label("copy"))
    occ = rs[0]["occupancy_programs"]
    for x, txt, c in ((sm_count, f"one program per SM\n({sm_count})", "#d62728"),
                      (occ, f"occupancy grid\n({occ} = {occ // sm_count} per SM)", "#2ca02c")):
        ax.axvline(x, color=c, ls=":", lw=1.3)
        r = min(rs, key=lambda r: abs(r["num_programs"] - x))
        ax.annotate(txt, (r["num_programs"], r["graph_frac"]), xytext=(8, -28 if x == sm_count else -42),
                    textcoords="offset points", fontsize=8.5, color=c)
    M = rs[0]["M"]
    one_per_row = next((r for r in rs if r["num_programs"] == M), None)
    if one_per_row:
        ax.annotate(f"one program per row\n({M:,})", (M, one_per_row["graph_frac"]), xytext=(-80, -42),
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
    from .measure import device_facts

    return [{k: round(v, 1) if isinstance(v, float) else v for k, v in device_facts().items()}]


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
    """One shape's sweep: registers, spills, shared memory, programs per SM (the course's formula and
    the driver's), the binding limit and the fraction of copy in GPU time (eager beside), best marked."""
    rs = [r for r in rows if r["M"] == M and r["N"] == N]
    ok = [r for r in rs if r["status"] == "ok"]
    best = max(ok, key=lambda r: r["graph_frac"]) if ok else None
    print(f"{M} x {N} float32")
    head = (f"{'warps':>5} {'stages':>6} {'n_regs':>6} {'spills':>6} {'shared':>7} {'per SM':>6} {'driver':>6} "
            f"{'limited by':<13} {'frac GPU':>8} {'eager':>6}")
    print(head)
    print("-" * len(head))
    for r in sorted(rs, key=lambda r: (r["num_warps"], r["num_stages"])):
        if r["status"] != "ok":
            print(f"{r['num_warps']:>5} {r['num_stages']:>6}  {r['status']}")
            continue
        mark = "  <- best" if r is best else ""
        print(f"{r['num_warps']:>5} {r['num_stages']:>6} {r['n_regs']:>6} {r['n_spills']:>6} {r['shared']:>7} "
              f"{r['programs_per_sm']:>6} {r.get('api_programs_per_sm', '-'):>6} {r['limited_by']:<13} "
              f"{r['graph_frac']:>8.2f} {r['frac_of_copy']:>6.2f}{mark}")


def tuning_summary(rows: list[dict]) -> None:
    """Per shape, in GPU time (eager in brackets): the best and worst configurations, how many spill,
    and how many land within 5% of the best."""
    f = lambda r: f"{r['graph_frac']:.2f} ({r['frac_of_copy']:.2f})"  # noqa: E731
    for M, N in _shapes(rows):
        ok = [r for r in rows if r["M"] == M and r["N"] == N and r["status"] == "ok"]
        if not ok:
            continue
        best = max(ok, key=lambda r: r["graph_frac"])
        worst = min(ok, key=lambda r: r["graph_frac"])
        spilled = [r for r in ok if r["n_spills"] > 0]
        near = [r for r in ok if r["graph_frac"] >= 0.95 * best["graph_frac"]]
        line = (f"{M} x {N}: best {f(best)} (num_warps={best['num_warps']}, num_stages={best['num_stages']}, "
                f"{best['programs_per_sm']}/SM); worst {f(worst)} (num_warps={worst['num_warps']}, "
                f"num_stages={worst['num_stages']}, {worst['n_spills']} spills, {worst['programs_per_sm']}/SM); "
                f"{len(near)} of {len(ok)} within 5% of the best")
        if spilled:
            line += f"; {len(spilled)} spill, the best of those {max(r['graph_frac'] for r in spilled):.2f}"
        print(line)


def stages_effect(rows: list[dict]) -> None:
    """Per shape: what going from 1 stage to the best of 2-4 stages changed, for each num_warps
    (GPU time, in hundredths of the copy)."""
    for M, N in _shapes(rows):
        ok = [r for r in rows if r["M"] == M and r["N"] == N and r["status"] == "ok"]
        deltas = {}
        for w in sorted({r["num_warps"] for r in ok}):
            one = next((r["graph_frac"] for r in ok if r["num_warps"] == w and r["num_stages"] == 1), None)
            more = [r["graph_frac"] for r in ok if r["num_warps"] == w and r["num_stages"] > 1]
            if one is not None and more:
                deltas[w] = max(more) - one
        if deltas:
            cells = ", ".join(f"{w} warps {d:+.2f}" for w, d in deltas.items())
            print(f"{M} x {N}: best of 2-4 stages minus 1 stage: {cells}")


_LIMIT_LETTER = {"registers": "R", "shared memory": "S", "threads": "T", "blocks": "B"}


def plot_tuning(rows: list[dict] | None = None, meta: dict | None = None):
    """Heat maps of the fraction of copy (GPU time) over num_warps x num_stages, one per shape, each
    cell labelled with programs per SM and the limit that binds (R, S, T, B); * marks spills."""
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
                grid[i][j] = r["graph_frac"]
                spill = "*" if r["n_spills"] else ""
                txt = f"{r['graph_frac']:.2f}{spill}\n{r['programs_per_sm']}/SM {_LIMIT_LETTER.get(r['limited_by'], '?')}"
                ax.text(j, i, txt, ha="center", va="center", fontsize=7.5,
                        color="white" if r["graph_frac"] < 0.45 else "black")
        im = ax.imshow(grid, cmap="viridis", vmin=0, vmax=1, aspect="auto")
        ax.set_xticks(range(len(stages)))
        ax.set_xticklabels(stages)
        ax.set_yticks(range(len(warps)))
        ax.set_yticklabels(warps)
        ax.set_xlabel("num_stages")
        ax.set_ylabel("num_warps")
        ax.grid(False)
        ax.set_title(f"{M} x {N} float32", fontsize=10)
    fig.colorbar(im, ax=axes, shrink=0.85, label="fraction of copy (GPU time)")
    gpu = (meta or {}).get("gpu", "GPU")
    fig.suptitle(f"Persistent kernel, {gpu}: programs per SM and the binding limit "
                 f"(R registers, S shared memory, T threads); * = registers spilled", fontsize=9)
    return fig


# --------------------------------------------------------------------------------------------
# Every kernel of the course, side by side (and its peers)
# --------------------------------------------------------------------------------------------

#: Table and plot order; any other provider in the data comes after these.
FINAL_ORDER = ("torch_naive", "torch_softmax", "torch_compile", "triton_tutorial", "liger", "fused", "online",
               "persistent", "tiled", "split", "split_coop", "softmax")
#: The implementations helpers.softmax is compared with.
PEERS = ("torch_softmax", "torch_compile", "triton_tutorial", "liger")
#: Shapes no configuration of the course was tuned on (the benchmark's held-out shapes).
HELD_OUT = ((1000, 700), (16384, 384), (2048, 3000), (777, 12000), (300, 100000))
FINAL_LIVE_NS = (1024, 4096, 16384)
#: Measured live too: one held-out shape and one long-row shape, so every table of the section has a row.
FINAL_LIVE_EXTRA = ((1000, 700), (1024, 65536))
SHORT = {"torch_naive": "naive", "torch_softmax": "torch", "torch_compile": "compile", "triton_tutorial": "tutorial",
         "liger": "liger", "fused": "fused", "online": "online", "persistent": "persist", "softmax": "softmax",
         "split": "split", "split_coop": "coop", "three_pass": "3-pass", "tiled": "tiled"}


def final_data(live: bool | None = None) -> tuple[list[dict], dict]:
    """(rows, provenance) of every provider of the benchmark (``helpers.measure.providers``): M = 4096
    over N, a few long-row shapes and the held-out shapes, float32 and bfloat16. Live on a GPU (three
    N at M = 4096, one held-out and one long-row shape: about a minute), else the recorded H100 sweep
    ``bench_h100.csv``."""
    live = ON_GPU if live is None else live
    if live:
        require_gpu("final_data(live=True)")
        from .measure import measure_shape, providers

        rows = []
        for d in ("float32", "bfloat16"):
            for M, n in [(4096, n) for n in FINAL_LIVE_NS] + list(FINAL_LIVE_EXTRA):
                rows += measure_shape(M, n, DTYPES[d], providers(), quick=True)
        return rows, gpu_data.provenance("helpers.lesson05.final_data()")
    return gpu_data.bench()


def shape_group(M: int, N: int) -> str:
    """'M=4096', 'held-out' or 'long rows': the three groups of the benchmark's shapes."""
    if (M, N) in HELD_OUT:
        return "held-out"
    return "M=4096" if M == 4096 else "long rows"


def _providers(rows) -> list[str]:
    present = {r["provider"] for r in rows} - {"copy"}
    return [p for p in FINAL_ORDER if p in present] + sorted(present - set(FINAL_ORDER))


def _frac_cell(r: dict | None, key: str) -> str:
    if r is None:
        return "-"
    if not _ok(r, key):
        return "n/a" if str(r.get("status", "")).startswith("n/a") else "failed"
    spread = r.get("graph_spread" if key == "graph_frac" else "spread")
    star = "*" if noisy(spread) else ""
    return f"{r[key]:.2f}{star}"


def print_final_table(rows: list[dict], dtype: str = "float32", group: str = "M=4096", key: str = "graph_frac") -> None:
    """Fraction of copy for every provider, one line per shape of a group ('M=4096', 'held-out',
    'long rows'), in GPU time (``key='graph_frac'``) or eager time (``'frac_of_copy'``); * marks a
    cell whose rounds spread over 10%, n/a a kernel that refuses the shape."""
    rs = [r for r in rows if r["dtype"] == dtype and shape_group(r["M"], r["N"]) == group]
    provs = _providers(rs)
    what = "GPU time" if key == "graph_frac" else "eager"
    print(f"{dtype}, {group}: fraction of copy, {what}")
    print(f"{'M':>5} {'N':>7} " + " ".join(f"{SHORT.get(p, p)[:8]:>8}" for p in provs))
    for Mi, N in sorted({(r["M"], r["N"]) for r in rs}, key=lambda s: (s[1], s[0])):
        cells = [_frac_cell(next((r for r in rs if r["M"] == Mi and r["N"] == N and r["provider"] == p), None), key)
                 for p in provs]
        print(f"{Mi:>5} {N:>7} " + " ".join(f"{c:>8}" for c in cells))


def run_to_run(changed=("softmax", "split_coop"), within: float = 0.05) -> dict:
    """How far the recorded H100 sweep and the one before it (``gpu_data.previous_bench``) agree in
    GPU time, over the cells both measured of every provider whose code and configuration did not
    change between them (``changed`` is left out: the tuning table, which configures helpers.softmax
    and split_coop, was re-recorded)."""
    a, meta_a = gpu_data.bench()
    b, meta_b = gpu_data.previous_bench()
    return dict(gpu_data.sweep_agreement(a, b, changed, within), meta_a=meta_a, meta_b=meta_b)


def print_run_to_run() -> None:
    """Print :func:`run_to_run`."""
    r = run_to_run()
    print(f"this sweep:    {gpu_data.provenance_line(r['meta_a'])}")
    print(f"earlier sweep: {gpu_data.provenance_line(r['meta_b'])}")
    print(f"GPU time of the same cell in both: within {r['limit']:.0%} in {r['within']} of {r['cells']} cells, "
          f"median difference {r['median']:.1%} (left out, their tuned configuration changed: "
          f"{'; '.join(_label(p) for p in r['changed'])})")
    for (d, M, N, p), diff in r["outside"]:
        print(f"  differs by {abs(diff):.0%}: {d} {M} x {N}, {_label(p)}")


def peer_comparison(rows: list[dict], dtype: str, group: str, mine: str = "softmax", peers=PEERS,
                    level: float = 0.02) -> list[dict]:
    """Per shape of a group: ``mine`` against the best peer in GPU time (and the same pair eager),
    and whether it is ahead, level (within ``level``) or behind."""
    out = []
    shapes = sorted({(r["M"], r["N"]) for r in rows if r["dtype"] == dtype and shape_group(r["M"], r["N"]) == group},
                    key=lambda s: (s[1], s[0]))
    for M, N in shapes:
        at = {r["provider"]: r for r in rows if r["dtype"] == dtype and r["M"] == M and r["N"] == N and _ok(r)}
        if mine not in at:
            continue
        cands = [p for p in peers if p in at]
        if not cands:
            continue
        best = max(cands, key=lambda p: at[p]["graph_frac"])
        ratio = at[mine]["graph_frac"] / at[best]["graph_frac"]
        eager = at[mine]["frac_of_copy"] / at[best]["frac_of_copy"]
        verdict = "ahead" if ratio > 1 + level else ("behind" if ratio < 1 - level else "level")
        spread = any(noisy(at[p]["graph_spread"]) for p in (mine, best))
        out.append(dict(M=M, N=N, mine=at[mine], best=best, best_row=at[best], ratio=ratio, eager_ratio=eager,
                        verdict=verdict, noisy=spread))
    return out


def print_peer_comparison(rows: list[dict], dtype: str = "float32", group: str = "M=4096") -> None:
    """helpers.softmax against the best of torch.softmax, torch.compile, the Triton tutorial and
    Liger-Kernel, per shape: GPU time (the verdict), eager beside."""
    cmp = peer_comparison(rows, dtype, group)
    print(f"{dtype}, {group}: helpers.softmax against the best peer, fraction of copy in GPU time (eager in brackets)")
    print(f"{'M':>5} {'N':>7} {'helpers.softmax':>16} {'best peer':>30} {'ratio GPU':>9} {'(eager)':>8}")
    for c in cmp:
        m, b = c["mine"], c["best_row"]
        peer = f"{_label(c['best'])} {b['graph_frac']:.2f} ({b['frac_of_copy']:.2f})"
        er = f"({c['eager_ratio']:.2f})"
        note = " (spread over 10%)" if c["noisy"] else ""
        print(f"{c['M']:>5} {c['N']:>7} {m['graph_frac']:>9.2f} ({m['frac_of_copy']:.2f}) {peer:>30} "
              f"{c['ratio']:>9.2f} {er:>8}  {c['verdict']}{note}")
    counts = {v: sum(c["verdict"] == v for c in cmp) for v in ("ahead", "level", "behind")}
    print(f"ahead at {counts['ahead']}, level (within 2%) at {counts['level']}, behind at {counts['behind']} "
          f"of {len(cmp)} shapes (GPU time)")


def print_long_rows(rows: list[dict], limits: list[dict], props: dict, dtype: str = "float32") -> None:
    """The long-row shapes: how many programs one program per row gives against the SM count, the
    fused kernel's spills at that row length (from the fused-limits recording), the online kernel
    against its 3MN traffic bound, and the split kernels of lesson 06 (GPU time)."""
    rs = [r for r in rows if r["dtype"] == dtype and shape_group(r["M"], r["N"]) == "long rows"]
    at = lambda M, N, p: next((r for r in rs if r["M"] == M and r["N"] == N and r["provider"] == p), None)  # noqa: E731
    print(f"{dtype}, long rows, fraction of copy in GPU time; {props['sm_count']} SMs")
    print(f"{'M':>5} {'N':>8} {'programs/SMs':>12} | {'fused':>6} {'spills':>6} | {'online':>6} {'bound 3MN':>9} | "
          f"{'split':>6} {'coop':>6} {'softmax':>7}")
    for M, N in sorted({(r["M"], r["N"]) for r in rs}, key=lambda s: s[1]):
        lim = next((r for r in limits if r["dtype"] == dtype and r["N"] == N and r["status"] == "ok"), None)
        sp = str(lim["n_spills"]) if lim else "-"
        cells = [_frac_cell(at(M, N, p), "graph_frac") for p in ("fused", "online", "split", "split_coop", "softmax")]
        print(f"{M:>5} {N:>8} {M / props['sm_count']:>12.2f} | {cells[0]:>6} {sp:>6} | {cells[1]:>6} {2 / 3:>9.2f} | "
              f"{cells[2]:>6} {cells[3]:>6} {cells[4]:>7}")


def plot_final(rows: list[dict] | None = None, meta: dict | None = None, M: int = 4096):
    """GB/s in GPU time against N at M = 4096 for every provider, float32 and bfloat16 side by side,
    with the copy."""
    if rows is None:
        rows, meta = final_data(live=False)
    dtypes = [d for d in ("float32", "bfloat16") if any(r["dtype"] == d for r in rows)]
    fig, axes = plots.new_figure(12.0, 5.0, ncols=len(dtypes))
    axes = list(axes) if len(dtypes) > 1 else [axes]
    for ax, d in zip(axes, dtypes):
        rs = [r for r in rows if r["dtype"] == d and r["M"] == M]
        ns, gb = _series(rs, "copy", d)
        ax.plot(ns, gb, "--", color=plots.COLORS["copy"], lw=1.5, label=_label("copy"))
        for p in _providers(rs):
            xs, ys = _series(rs, p, d)
            if not xs:
                continue
            bold = p in ("softmax",)
            ax.plot(xs, ys, "o-" if p not in PEERS else "s:", color=plots.COLORS.get(p, "#7f7f7f"),
                    ms=3.5 if not bold else 5, lw=2.4 if bold else 1.3, label=_label(p), zorder=3 if bold else 2)
        set_n_axis(ax, sorted({r["N"] for r in rs}))
        ax.set_ylim(0, None)
        ax.set_ylabel("GB/s, GPU time")
        ax.set_title(f"{d}, M = {M}", fontsize=10)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(6, len(labels)), frameon=False, fontsize=8.5)
    gpu = (meta or {}).get("gpu", "GPU")
    fig.suptitle(f"Every softmax of the course and its peers on an {gpu}: bytes moved (2·M·N·size) per second "
                 f"of GPU time", fontsize=10)
    return fig


# --------------------------------------------------------------------------------------------
# The tiled kernel behind helpers.softmax, and its configuration per GPU
# --------------------------------------------------------------------------------------------

#: The two GPUs with a recorded tuning table, by the short name of their recordings.
TUNED_GPUS = {"h100": "device_props", "h200": "device_props_h200"}


def tuning_rows_of(gpu: str = gpu_data.LESSON_GPU) -> tuple[list[dict], dict]:
    """(rows, provenance) of the tuner's recorded sweep on one GPU ('h100' or 'h200'): every
    candidate configuration of the tiled and cooperative kernels with its GPU time."""
    from .tuning import recorded_path

    name = gpu_data.read_csv(TUNED_GPUS[gpu])[0][0]["name"]
    return gpu_data.read_csv(recorded_path(name))


def tiled_tuning_summary(rows: list[dict] | None = None, dtype: str = "float32") -> None:
    """From the tiled kernel's sweep: per N, the best fraction of copy (GPU time) with one row per
    program and with several rows per tile (and how many)."""
    if rows is None:
        rows, meta = tuning_rows_of()
        print(gpu_data.provenance_line(meta))
    rs = [r for r in rows if r["kind"] == "tiled" and r["dtype"] == dtype and r.get("status") == "ok"]
    print(f"{dtype}, M = {rs[0]['M'] if rs else '?'}: best fraction of copy in GPU time, of the candidates the tuner timed")
    print(f"{'N':>6} {'1 row per program':>18} {'several rows per tile':>22}")
    for n in sorted({r["N"] for r in rs}):
        at = [r for r in rs if r["N"] == n]
        one = [r for r in at if r["block_m"] == 1]
        many = [r for r in at if r["block_m"] > 1]
        b1 = max(one, key=lambda r: r["graph_frac"]) if one else None
        bm = max(many, key=lambda r: r["graph_frac"]) if many else None
        c1 = f"{b1['graph_frac']:.2f}" if b1 else "-"
        cm = f"{bm['graph_frac']:.2f} ({bm['block_m']} rows)" if bm else "-"
        print(f"{n:>6} {c1:>18} {cm:>22}")


def _tiled_classes(rows):
    from .tuning import best_of

    return best_of(rows)[0]


def print_tiled_configs(gpu: str = gpu_data.LESSON_GPU) -> None:
    """The configuration the recorded table of a GPU gives each class (element size, block), next to
    what the rule used under the interpreter gives."""
    from .tuning import tiled_rule

    rows, meta = tuning_rows_of(gpu)
    print(gpu_data.provenance_line(meta))
    table = _tiled_classes(rows)
    timed = {}
    for r in rows:
        if r["kind"] == "tiled" and r.get("status") == "ok":
            timed.setdefault((int(r["element_size"]), int(r["N"])), {})[
                (r["block_m"], r["num_warps"], r["num_stages"], r["programs_per_sm"])] = r["graph_ms"]
    print(f"{'dtype':<9} {'N':>6} | recorded for {gpu.upper()}: {'rows/tile':>9} {'warps':>5} {'stages':>6} "
          f"{'persistent':>10} | rule: {'rows/tile':>9} {'warps':>5}")
    for (es, bn), cfg in sorted(table.items()):
        rule = tiled_rule(bn, es)
        d = "float32" if es == 4 else "bfloat16"
        pers = f"{cfg.programs_per_sm}/SM" if cfg.programs_per_sm else "no"
        print(f"{d:<9} {bn:>6} | {'':>17} {cfg.block_m:>9} {cfg.num_warps:>5} {cfg.num_stages:>6} {pers:>10} | "
              f"{'':>5} {rule.block_m:>9} {rule.num_warps:>5}")
    same = [k for k, c in table.items() if tuple(c[:4]) == tuple(tiled_rule(k[1], k[0])[:4])]
    shares = []
    for k, c in table.items():
        t = timed.get(k, {})
        rule_ms = t.get(tuple(tiled_rule(k[1], k[0])[:4]))
        if rule_ms:
            shares.append((min(t.values()) / rule_ms, k))
    line = f"the rule gives the recorded configuration in {len(same)} of {len(table)} classes"
    if shares:
        worst, (es, bn) = min(shares)
        line += (f"; where it differs, its choice reaches at worst {worst:.2f} of the best on the {gpu.upper()} "
                 f"({'float32' if es == 4 else 'bfloat16'}, N = {bn})")
    print(line)


def cross_gpu(a: str = "h100", b: str = "h200") -> list[dict]:
    """For each tiled class tuned on both GPUs: GPU a's best configuration, and what it reaches on GPU
    b as a share of b's own best (both from the recorded sweeps, GPU time)."""
    ra, _ = tuning_rows_of(a)
    rb, _ = tuning_rows_of(b)

    def by_class(rows):
        out = {}
        for r in rows:
            if r["kind"] == "tiled" and r.get("status") == "ok":
                key = (r["dtype"], r["N"])
                cfg = (r["block_m"], r["num_warps"], r["num_stages"], r["programs_per_sm"])
                out.setdefault(key, {})[cfg] = r["graph_ms"]
        return out

    A, B = by_class(ra), by_class(rb)
    out = []
    for key in sorted(set(A) & set(B)):
        best_a = min(A[key], key=A[key].get)
        best_b = min(B[key], key=B[key].get)
        on_b = B[key].get(best_a)
        out.append(dict(dtype=key[0], N=key[1], best_a=best_a, best_b=best_b,
                        share=(B[key][best_b] / on_b) if on_b else float("nan")))
    return out


def print_cross_gpu(a: str = "h100", b: str = "h200") -> None:
    """Is one GPU's best tiled configuration good on the other? Both directions, from the recordings."""
    for g in (a, b):
        print(f"{g.upper()}: {gpu_data.provenance_line(tuning_rows_of(g)[1])}")
    for x, y in ((a, b), (b, a)):
        cmp = cross_gpu(x, y)
        same = sum(c["best_a"] == c["best_b"] for c in cmp)
        worst = min(cmp, key=lambda c: c["share"])
        print(f"{x.upper()}'s choice on the {y.upper()}: the same configuration in {same} of {len(cmp)} classes; "
              f"at worst {worst['share']:.2f} of the {y.upper()}'s own best ({worst['dtype']}, N = {worst['N']})")


def check_shapes(fn, shapes, seed: int = 0, scale: float = 3.0) -> bool:
    """Run ``fn`` on random float32 inputs of each shape and print its error against the float64
    reference, rounded up to a power of ten. Returns True if every shape is within 1e-6."""
    g = torch.Generator().manual_seed(seed)
    ok_all = True
    print(f"{'shape':>12} {'max abs err':>12} {'max rel err':>12} {'ok':>4}")
    for M, N in shapes:
        x = (torch.randn(M, N, generator=g) * scale).to(DEVICE)
        rep = error_report(fn(x), x)
        ok = rep.ok(atol=1e-6)
        ok_all &= ok
        print(f"{f'{M} x {N}':>12} {round_up_err(rep.max_abs):>12} {round_up_err(rep.max_rel):>12} {'yes' if ok else 'NO':>4}")
    return ok_all


# --------------------------------------------------------------------------------------------
# Host time against GPU time
# --------------------------------------------------------------------------------------------

#: The wrappers the host-time figure follows (the benchmark's providers).
HOST_PROVIDERS = ("torch_softmax", "torch_compile", "triton_tutorial", "liger", "fused", "softmax")


def launch_data(live: bool | None = None) -> tuple[list[dict], dict]:
    """(rows, provenance) of the host cost per call of each way to launch one compiled kernel and of
    every wrapper (median of interleaved rounds, and the ratio to torch.softmax round by round), with
    each wrapper's GPU time. Live on a GPU (``launch_cost_rows``), else ``launch_h100.csv``."""
    live = ON_GPU if live is None else live
    if live:
        return launch_cost_rows(), gpu_data.provenance("helpers.lesson05.launch_cost_rows()")
    return gpu_data.read_csv(f"launch_{gpu_data.LESSON_GPU}")


def print_launch_ways(rows: list[dict]) -> None:
    """Host µs per call of allocating the output and of each way to launch the same compiled kernel."""
    r0 = rows[0]
    print(f"the fused kernel on a {r0['M']} x {r0['N']} float32 tensor; host µs per call, median of the rounds "
          f"(fastest to slowest round), and against torch.softmax in the same rounds")
    print(f"{'':<34} {'host µs':>8} {'range':>13} {'x torch.softmax':>16}")
    for r in rows:
        if r["kind"] in ("allocation", "launch"):
            rng = f"{r['host_us_min']:.1f}-{r['host_us_max']:.1f}"
            print(f"{r['case']:<34} {r['host_us']:>8.1f} {rng:>13} {r['vs_torch_softmax']:>16.2f}")


def print_wrapper_costs(rows: list[dict]) -> None:
    """Host µs per call of every wrapper against torch.softmax, with its GPU µs at the same shape."""
    print(f"{'wrapper':<28} {'host µs':>8} {'range':>13} {'x torch.softmax':>16} {'GPU µs':>7}")
    for r in rows:
        if r["kind"] == "wrapper":
            rng = f"{r['host_us_min']:.1f}-{r['host_us_max']:.1f}"
            g = f"{r['graph_us']:.1f}" if isinstance(r.get("graph_us"), (int, float)) else "-"
            print(f"{r['case']:<28} {r['host_us']:>8.1f} {rng:>13} {r['vs_torch_softmax']:>16.2f} {g:>7}")


PROBE_BEFORE = "launch_probe_h100_7d54e11.csv"


def launch_before_after(after: list[dict]) -> None:
    """Host µs per call of helpers.softmax and helpers.softmax_fused before the lean launch path
    (the recorded probe at commit 7d54e11, 3 rounds) and after it (``launch_h100.csv``), each against
    torch.softmax measured in the same run."""
    rows, meta = gpu_data.read_csv(gpu_data.DATA_DIR / "probes" / PROBE_BEFORE)
    med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
    by = {}
    for r in rows:
        by.setdefault(r["case"], {})[r["round"]] = r["host_us"]
    torch_b = by["torch_softmax"]
    aft = {r["case"]: r for r in after}
    print(f"before: {gpu_data.provenance_line(meta)}")
    print(f"{'wrapper':<24} {'before µs':>10} {'x torch.softmax':>16} | {'after µs':>9} {'x torch.softmax':>16}")
    for case, name in (("helpers_softmax_before", "helpers.softmax"), ("helpers_softmax_fused_before", "helpers.softmax_fused")):
        b = by[case]
        ratio = med([b[k] / torch_b[k] for k in b])
        a = aft.get(name)
        after_s = f"{a['host_us']:>9.1f} {a['vs_torch_softmax']:>16.2f}" if a else f"{'-':>9} {'-':>16}"
        print(f"{name:<24} {med(list(b.values())):>10.1f} {ratio:>16.2f} | {after_s}")
    print(f"{'torch.softmax':<24} {med(list(torch_b.values())):>10.1f} {1.0:>16.2f} | "
          f"{aft['torch.softmax']['host_us']:>9.1f} {1.0:>16.2f}")


def host_vs_gpu_data(live: bool | None = None, ns=(256, 1024, 4096, 16384)) -> tuple[list[dict], dict]:
    """(rows, provenance) with host µs per call and GPU time per provider at M = 4096: live on a GPU
    (``helpers.measure.measure_shape``, a few N), else the recorded ``bench_h100.csv``."""
    live = ON_GPU if live is None else live
    if live:
        require_gpu("host_vs_gpu_data(live=True)")
        from .measure import measure_shape, providers

        provs = {k: v for k, v in providers().items() if k in HOST_PROVIDERS}
        rows = []
        for n in ns:
            rows += measure_shape(4096, n, torch.float32, provs, quick=True)
        return rows, gpu_data.provenance("helpers.lesson05.host_vs_gpu_data()")
    return gpu_data.bench()


def launch_bound(rows: list[dict], dtype: str = "float32", M: int = 4096, providers=HOST_PROVIDERS) -> list[dict]:
    """Per provider at M rows: its host µs per call and GPU µs at each N, and the largest N at which
    the GPU time is shorter than the host time (a Python loop of calls is then paced by the host)."""
    out = []
    for p in providers:
        rs = sorted((r for r in rows if r["provider"] == p and r["dtype"] == dtype and r["M"] == M and _ok(r)
                     and _ok(r, "host_us")), key=lambda r: r["N"])
        if not rs:
            continue
        bound = [r["N"] for r in rs if r["graph_ms"] * 1e3 < r["host_us"]]
        out.append(dict(provider=p, points=[(r["N"], r["host_us"], r["graph_ms"] * 1e3) for r in rs],
                        host_min=min(r["host_us"] for r in rs), host_max=max(r["host_us"] for r in rs),
                        bound_to=max(bound) if bound else None))
    return out


def print_launch_bound(rows: list[dict], dtype: str = "float32", M: int = 4096) -> None:
    """Host µs against GPU µs per provider over N (M = 4096), and up to which N each is launch-bound."""
    lb = launch_bound(rows, dtype, M)
    ns = sorted({n for p in lb for n, _, _ in p["points"]})
    es = DTYPES[dtype].itemsize
    print(f"{dtype}, M = {M}: host µs per call / GPU µs per call")
    print(f"{'N':>6} {'MiB':>5} " + " ".join(f"{SHORT.get(p['provider'], p['provider']):>14}" for p in lb))
    for n in ns:
        cells = []
        for p in lb:
            pt = next(((h, g) for N, h, g in p["points"] if N == n), None)
            cells.append(f"{pt[0]:.1f}/{pt[1]:.1f}" + ("<" if pt[1] < pt[0] else " ") if pt else "-")
        print(f"{n:>6} {M * n * es / 2**20:>5.0f} " + " ".join(f"{c:>14}" for c in cells))
    print("< : the GPU time is shorter than the host time (launch-bound)")
    for p in lb:
        b = f"up to N = {p['bound_to']}" if p["bound_to"] else "at no size"
        print(f"  {_label(p['provider']):<22} host {p['host_min']:.1f} to {p['host_max']:.1f} µs a call; launch-bound {b}")


#: The GPU µs per call under which a cell counts as a short kernel in the eager-spread table.
SHORT_GPU_US = 30.0


def eager_spread_by_host(rows: list[dict], short_gpu_us: float = SHORT_GPU_US, edges=(0, 15, 25, 35, 50, 1e9)) -> list[dict]:
    """For every short cell of the sweep (GPU time under ``short_gpu_us``): how often the eager
    measurement's rounds spread over 10%, grouped by the provider's host µs per call."""
    cells = [r for r in rows if r["provider"] != "copy" and _ok(r) and _ok(r, "host_us") and _ok(r, "spread")
             and r["graph_ms"] * 1e3 < short_gpu_us]
    out = []
    for lo, hi in zip(edges, edges[1:]):
        cs = [r for r in cells if lo <= r["host_us"] < hi]
        bad = [r for r in cs if noisy(r["spread"])]
        out.append(dict(lo=lo, hi=hi, cells=len(cs), spread=len(bad), providers=sorted({r["provider"] for r in bad})))
    return out


def print_eager_spread_by_host(rows: list[dict]) -> None:
    """Print :func:`eager_spread_by_host`."""
    print(f"cells of the sweep with GPU µs per call under {SHORT_GPU_US:g}, by the provider's host µs per call:")
    print(f"{'host µs':>10} {'cells':>6} {'eager spread over 10%':>22}  which providers")
    for b in eager_spread_by_host(rows):
        rng = f"{b['lo']:.0f}-{b['hi']:.0f}" if b["hi"] < 1e9 else f">= {b['lo']:.0f}"
        print(f"{rng:>10} {b['cells']:>6} {b['spread']:>22}  {', '.join(_label(p) for p in b['providers']) or '-'}")


def plot_host_vs_gpu(rows: list[dict] | None = None, meta: dict | None = None, dtype: str = "float32", M: int = 4096):
    """Host µs per call (dashed) and GPU µs per call (solid) against N at M = 4096, per provider:
    where the solid line is below the dashed one, a Python loop of calls is paced by the host."""
    if rows is None:
        rows, meta = host_vs_gpu_data(live=False)
    fig, ax = plots.new_figure(8.5, 4.4)
    for p in launch_bound(rows, dtype, M):
        ns = [n for n, _, _ in p["points"]]
        c = plots.color(p["provider"])
        ax.plot(ns, [g for _, _, g in p["points"]], "o-", color=c, ms=3.5, lw=1.6, label=f"{_label(p['provider'])}: GPU")
        ax.plot(ns, [h for _, h, _ in p["points"]], "--", color=c, lw=1.2, alpha=0.8)
    ax.plot([], [], "k--", lw=1.2, label="dashed: host, same color")
    ax.set_yscale("log")
    set_n_axis(ax, sorted({r["N"] for r in rows if r["M"] == M and r["dtype"] == dtype}))
    ax.set_ylabel("µs per call")
    gpu = (meta or {}).get("gpu", "GPU")
    ax.set_title(f"Host time against GPU time per call, {dtype}, M = {M}, {gpu}", fontsize=10)
    ax.legend(frameon=False, fontsize=8, loc="upper left", ncols=2)
    return fig


#: Figures of this lesson, by the name ``helpers.plots.save`` writes them under.
FIGURES = {
    "05_programs": plot_programs,
    "05_tuning": plot_tuning,
    "05_final_comparison": plot_final,
    "05_host_vs_gpu": plot_host_vs_gpu,
}


# --------------------------------------------------------------------------------------------
# Exercise checkers: each prints one line (correct / not yet / wrong) and never raises.
# Learner kernels run through helpers.exercises.run_learner_kernel on guarded buffers, so a
# missing mask is reported as wrong and never takes the notebook down.
# --------------------------------------------------------------------------------------------


_call = call_attempt  # one definition, shared by every lesson's checkers


def _guarded_copy(data: torch.Tensor) -> torch.Tensor:
    t = guarded(tuple(data.shape), dtype=data.dtype, fill=0.0)
    t.copy_(data.to(t.device))
    return t


#: What exercise 5.1's checker fills the output with: no softmax value is negative.
UNWRITTEN = -7.0


def grid_stride_cases(seed: int = 51) -> list[dict]:
    """What exercise 5.1's checker launches: (name, x, number of programs). Rows of -inf entries,
    a wide spread, lengths that are not powers of two, a transposed view (column stride != 1), and
    grids of one program, a few programs and more programs than rows."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(10, 50, generator=g) * 3
    x[3, :20] = float("-inf")
    x[7, 5] = 120.0  # exp(120) overflows float32: the max shift is needed
    wide = torch.randn(37, 12, generator=g) * 20
    return [
        dict(name="10 rows of 50 columns, 3 programs", x=x, programs=3),
        dict(name="10 rows of 50 columns, 1 program", x=x, programs=1),
        dict(name="10 rows of 50 columns, 16 programs (more programs than rows)", x=x, programs=16),
        dict(name="12 rows of 37 columns read through a transposed view (column stride 12), 5 programs",
             x=wide, programs=5, transpose=True),
        dict(name="10 rows of 50 columns, 4 programs", x=x, programs=4),
    ]


def _trial_5_1(kernel) -> str:
    if not hasattr(kernel, "__getitem__") or not hasattr(kernel, "fn"):
        raise Wrong("persistent_softmax_kernel must be a Triton kernel: decorate it with @triton.jit")
    for case in grid_stride_cases():
        data = _guarded_copy(case["x"])
        x = data.t() if case.get("transpose") else data
        M, N = x.shape
        P = case["programs"]
        block = triton.next_power_of_2(N)
        ref = torch.softmax(x.detach().cpu().double(), dim=-1)
        # 1. out of place, into a guarded output filled with a value no softmax produces: every row
        #    must be written, right.
        out = guarded((M, N), fill=UNWRITTEN)
        before = x.clone()
        _launch_5_1(kernel, P, out, x, M, N, block)
        if not torch.equal(x, before):
            raise Wrong(f"on {case['name']}: your kernel changed its input: store into out_ptr only")
        got = out.detach().cpu().double()
        missed = sorted({int(r) for r in torch.nonzero(got == UNWRITTEN)[:, 0]})
        if missed:
            hint = ("program p takes rows p, p + P, p + 2P, ... with P = tl.num_programs(0): loop "
                    "`for row in range(tl.program_id(0), n_rows, tl.num_programs(0))`")
            if len(missed) == M:
                hint = "nothing was written: " + hint
            raise Wrong(f"on {case['name']}: rows {missed[:8]} were never written ({hint})")
        nan_rows = sorted({int(r) for r in torch.nonzero(torch.isnan(got) & ~torch.isnan(ref))[:, 0]})
        if nan_rows:
            raise Wrong(f"on {case['name']}: rows {nan_rows[:8]} came out NaN: subtract the row maximum before tl.exp "
                        f"(exp overflows float32 past about 88), and load the padding lanes as -inf")
        err = (got - ref).abs().max().item()
        if not err <= 1e-6:
            hint = ("use in_col_stride when loading: x[row, j] is at in_ptr + row * in_row_stride + j * in_col_stride"
                    if case.get("transpose") else "each row's softmax: the max shift, exp, sum, divide")
            raise Wrong(f"on {case['name']}: max abs error {err:.1e} against torch.softmax ({hint})")
        # 2. in place (out is x): a row that two programs (or two iterations) both handle comes out
        #    as the softmax of a softmax, which no longer matches.
        if case.get("transpose"):
            continue
        inplace = _guarded_copy(case["x"])
        _launch_5_1(kernel, P, inplace, inplace, M, N, block)
        twice = (inplace.detach().cpu().double() - ref).abs().amax(dim=1) > 1e-5
        if twice.any():
            rows = [int(r) for r in torch.nonzero(twice)[:, 0]][:8]
            raise Wrong(f"on {case['name']}, run in place (out is x): rows {rows} were processed more than once. "
                        f"Each row belongs to exactly one program: start at tl.program_id(0) and step by "
                        f"tl.num_programs(0)")
    return "every row written by exactly one program, with 1, 3, 4, 5 and 16 programs"


def _launch_5_1(kernel, P, out, x, M, N, block):
    launch_learner_kernel(kernel, (P,), out, x, x.stride(0), x.stride(1), out.stride(0), M, N,
                          BLOCK_SIZE=block, outputs=(out,), where=f"launched on {M} rows with {P} programs,")


def check_5_1(persistent_softmax_kernel) -> None:
    """Exercise 5.1: a persistent softmax kernel whose programs walk the rows in a grid-stride loop."""
    check("5.1", "a grid-stride loop", persistent_softmax_kernel, _trial_5_1)


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


def _trial_5_2(programs_by_registers) -> str:
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


def check_5_2(programs_by_registers) -> None:
    """Exercise 5.2: ``programs_by_registers(n_regs, num_warps, regs_per_sm, warp_size)``."""
    check("5.2", "programs per SM from registers", programs_by_registers, _trial_5_2)


def _trial_5_3(waves) -> str:
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


def check_5_3(waves) -> None:
    """Exercise 5.3: ``waves(num_programs, resident)`` returns (waves, programs in the last wave)."""
    check("5.3", "waves", waves, _trial_5_3)


def _trial_5_4(binding_limit) -> str:
    props, _ = device_props(live=False)
    # (n_regs, shared, num_warps); (96, 10240, 1) is bound by registers without the 1 KiB the driver
    # reserves per program, and by shared memory with it
    cases = [(72, 12288, 1), (23, 32, 8), (180, 16, 4), (96, 10240, 1), (55, 16392, 2), (199, 49152, 1),
             (24, 8256, 16), (58, 0, 1), (255, 196608, 2), (40, 1024, 2), (16, 16, 1)]
    seen = set()
    for n_regs, shared, w in cases:
        got = _call(binding_limit, n_regs, shared, w, dict(props))
        if not isinstance(got, str):
            raise Wrong(f"return the name of the limit as a string, one of {list(LIMIT_NAMES)}")
        occ = occupancy(n_regs, shared, w, props)
        tied = [k for k, v in occ["limits"].items() if v == occ["programs_per_sm"]]
        if got not in LIMIT_NAMES:
            raise Wrong(f"{got!r} is not one of {list(LIMIT_NAMES)}")
        if got not in tied:
            lim = occ["limits"]
            hint = ""
            if tied == ["shared memory"] and got == "registers":
                hint = (" (count the shared memory the driver reserves for every program, "
                        "props['reserved_shared_per_block'], on top of the kernel's own)")
            raise Wrong(f"n_regs = {n_regs}, shared = {shared}, num_warps = {w}: you said {got!r} "
                        f"({lim[got]} programs), but {tied[0]!r} allows only {occ['programs_per_sm']}{hint}")
        seen.add(got)
    return f"you met {len(seen)} different limits: {', '.join(sorted(seen))}"


def check_5_4(binding_limit) -> None:
    """Exercise 5.4: ``binding_limit(n_regs, shared, num_warps, props)`` names the limit that binds."""
    check("5.4", "which limit binds", binding_limit, _trial_5_4)
