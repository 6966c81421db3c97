"""Lesson 05 · A persistent softmax sized from the compiled kernel, and where the time goes.

What lives here, and only this: the live measurements a GPU runs for the lesson and for
``python -m helpers.bench`` (``*_rows``: they return rows that ``helpers.data.frame`` turns into
the same DataFrames the lesson loads from ``figures/data/`` on the CPU), the lesson's figures, and
the checkers of exercises 5.1 to 5.4. The lesson reads the recordings itself, in visible pandas cells.
"""

from __future__ import annotations

import math
import re

import pandas as pd
import torch
import triton

from . import data, plots
from .device import api_occupancy, gpu_props, occupancy
from .exercises import Wrong, call_attempt, check, guarded, guards_intact, launch_learner_kernel
from .gpu_data import device_props, provenance
from .kernels import persistent_plan, softmax_persistent, softmax_persistent_kernel
from .launch import Rows, acc_dtype
from .measure import DTYPES, eager_ms, gpu_ms, host_us, require_gpu
from .plots import label, set_n_axis

LIMIT_NAMES = ("registers", "shared memory", "threads", "blocks")
#: The benchmark's shapes that no configuration of the course was tuned on.
HELD_OUT = ((1000, 700), (16384, 384), (2048, 3000), (777, 12000), (300, 100000))


def registers_by_partition(n_regs: int, num_warps: int, props: dict, partitions: int = 4) -> int:
    """Programs per SM the register file allows when it is split into ``partitions`` equal parts
    (one per warp scheduler of the SM) and each warp's registers must come from one part."""
    per_warp = -(-n_regs * props["warp_size"] // 256) * 256
    warps = (props["regs_per_sm"] // partitions) // per_warp * partitions
    return warps // num_warps


# --------------------------------------------------------------------------------------------
# Live measurements (GPU only): what helpers.bench records and the lesson measures on a GPU
# --------------------------------------------------------------------------------------------


def device_props_rows() -> list[dict]:
    """The GPU's limits (``helpers.gpu_props``) and the copy's bandwidth on a 1 GiB tensor."""
    from .measure import device_facts

    return [{k: round(v, 1) if isinstance(v, float) else v for k, v in device_facts().items()}]


#: (N, num_warps, num_stages) of the persistent kernel whose occupancy is checked against the driver.
OCCUPANCY_CHECKS = [(1024, 1, 4), (1024, 4, 2), (2048, 2, 3), (4096, 1, 3), (4096, 8, 2), (16384, 16, 1),
                    (256, 1, 1), (1024, 8, 4), (8192, 4, 2), (32768, 32, 1)]


def occupancy_check_rows(checks=OCCUPANCY_CHECKS) -> list[dict]:
    """The course's occupancy arithmetic, with and without the shared memory the driver reserves
    per program, against the driver's ``cuOccupancyMaxActiveBlocksPerMultiprocessor`` (GPU only)."""
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


def programs_rows(N: int = 1024, M: int = 65536, dtype_name: str = "float32") -> list[dict]:
    """The persistent kernel against its number of programs (GPU only), one timing each: GPU time
    and eager time as fractions of copy, from a quarter of a program per SM to one per row."""
    require_gpu("programs_rows")
    sms = gpu_props()["sm_count"]
    x = torch.randn(M, N, device="cuda", dtype=DTYPES[dtype_name])
    y = torch.empty_like(x)
    nbytes = 2 * x.numel() * x.element_size()
    copy_g, copy_e = gpu_ms(lambda: y.copy_(x)), eager_ms(lambda: y.copy_(x))
    occ = persistent_plan(Rows.of(x)).info["programs"]
    counts = sorted({max(1, int(sms * f)) for f in (0.25, 0.5, 0.75, 1, 1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32)}
                    | {sms - 1, sms + 1, 2 * sms + 1, occ, M})
    rows = []
    for p in counts:
        f = lambda: softmax_persistent(x, p)  # noqa: E731
        g, e = gpu_ms(f), eager_ms(f)
        rows.append(dict(dtype=dtype_name, M=M, N=N, num_programs=p, programs_per_sm=round(p / sms, 3),
                         occupancy_programs=occ, graph_ms=g, ms=e, graph_gbps=nbytes / g / 1e6,
                         graph_frac=copy_g / g, frac_of_copy=copy_e / e))
    return rows


#: The shapes the lesson sweeps live on a GPU (the recording has a third, 4096 x 16384).
TUNING_LIVE_SHAPES = ((16384, 1024), (4096, 4096))


def tuning_rows(shapes=((16384, 1024), (4096, 4096), (4096, 16384)), dtype_name: str = "float32") -> list[dict]:
    """The persistent kernel over num_warps x num_stages (GPU only), one timing each: registers,
    spills, shared memory, occupancy (the course's formula and the driver's), GPU and eager time."""
    require_gpu("tuning_rows")
    rows = []
    for M, N in shapes:
        x = torch.randn(M, N, device="cuda", dtype=DTYPES[dtype_name])
        y = torch.empty_like(x)
        ref = torch.softmax(x.double(), -1)
        copy_g, copy_e = gpu_ms(lambda: y.copy_(x)), eager_ms(lambda: y.copy_(x))
        for w in (1, 2, 4, 8, 16, 32):
            for s in (1, 2, 3, 4):
                row = dict(dtype=dtype_name, M=M, N=N, num_warps=w, num_stages=s)
                try:
                    info = persistent_plan(Rows.of(x), None, w, s).info
                    f = lambda: softmax_persistent(x, None, w, s)  # noqa: E731
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
                    row.update({k: "" for k in ("n_regs", "n_spills", "shared", "programs_per_sm", "api_programs_per_sm",
                                                "limited_by", "programs", "graph_ms", "ms", "graph_frac", "frac_of_copy")},
                               status=f"failed: {type(ex).__name__}: {msg}")
                rows.append(row)
        del x, y, ref
        torch.cuda.empty_cache()
    return rows


#: What the lesson measures live of the benchmark: three N at M = 4096, one held-out and one long-row shape.
FINAL_LIVE_SHAPES = ((4096, 1024), (4096, 4096), (4096, 16384), (1000, 700), (1024, 65536))


def final_rows(shapes=FINAL_LIVE_SHAPES, dtypes=("float32", "bfloat16")) -> list[dict]:
    """Every provider of the benchmark (``helpers.measure.providers``) at a few shapes, in the
    benchmark's columns (GPU only; about a minute, most of it compiling torch.compile)."""
    require_gpu("final_rows")
    from .measure import measure_shape, providers

    return [r for d in dtypes for M, N in shapes for r in measure_shape(M, N, DTYPES[d], providers(), quick=True)]


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
    cases = {
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
    cases.update({name: ("wrapper", lambda fn=fn: fn(x)) for name, fn in wrappers.items()})
    # Host time moves by tens of percent between runs, so every case is timed in interleaved rounds
    # and compared with torch.softmax round by round.
    times = {name: [] for name in cases}
    for _ in range(rounds):
        for name, (kind, f) in cases.items():
            times[name].append(host_us(f, loops=3))
    med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
    rows = []
    for name, (kind, f) in cases.items():
        t = times[name]
        rows.append(dict(case=name, kind=kind, M=M, N=N, host_us=med(t), host_us_min=min(t), host_us_max=max(t),
                         vs_torch_softmax=med([a / b for a, b in zip(t, times["torch.softmax"])]),
                         graph_us=gpu_ms(f) * 1e3 if kind == "wrapper" else ""))
    return rows


def live(rows_fn, *args, **kwargs) -> pd.DataFrame:
    """``rows_fn(*args, **kwargs)`` measured now, as a DataFrame with this machine's provenance."""
    return data.frame(rows_fn(*args, **kwargs), provenance(f"helpers.lesson05.{rows_fn.__name__}()"))


# --------------------------------------------------------------------------------------------
# Figures: each takes the lesson's DataFrame (the recording when none is given)
# --------------------------------------------------------------------------------------------


def _label(provider: str) -> str:
    return "y.copy_(x)" if provider == "copy" else label(provider)


def _gpu(df) -> str:
    return df.attrs.get("provenance", {}).get("gpu", "GPU")


def plot_programs(df: pd.DataFrame | None = None, sm_count: int | None = None):
    """Fraction of copy (GPU time; eager dashed) against the number of programs of the persistent
    kernel. Points are measured grids; a line joins only neighbours less than 2x apart, so no line
    crosses a range that was not measured."""
    df = data.load("persistent_programs") if df is None else df
    sm_count = sm_count or device_props(live=False)[0]["sm_count"]
    rs = df.sort_values("num_programs")
    fig, ax = plots.new_figure(8.0, 4.0)
    c = plots.COLORS["persistent"]
    runs = (rs.num_programs / rs.num_programs.shift()).gt(2).cumsum()  # a new run after every gap
    for i, (_, run) in enumerate(rs.groupby(runs)):
        ax.plot(run.num_programs, run.graph_frac, "o-", color=c, ms=4, lw=2, label="persistent kernel, GPU time" if i == 0 else None)
        ax.plot(run.num_programs, run.frac_of_copy, ".--", color=c, ms=4, lw=1, alpha=0.6,
                label="persistent kernel, eager" if i == 0 else None)
    ax.axhline(1.0, color=plots.COLORS["copy"], ls="--", lw=1.2, label=_label("copy"))
    occ, M = int(rs.occupancy_programs.iloc[0]), int(rs.M.iloc[0])
    for x, txt, col in ((sm_count, f"one program per SM\n({sm_count})", "#d62728"),
                        (occ, f"occupancy grid\n({occ} = {occ // sm_count} per SM)", "#2ca02c")):
        ax.axvline(x, color=col, ls=":", lw=1.3)
        near = rs.iloc[(rs.num_programs - x).abs().argmin()]
        ax.annotate(txt, (near.num_programs, near.graph_frac), xytext=(8, -28 if x == sm_count else -42),
                    textcoords="offset points", fontsize=8.5, color=col)
    last = rs[rs.num_programs == M]
    if len(last):
        ax.annotate(f"one program per row\n({M:,})", (M, last.graph_frac.iloc[0]), xytext=(-80, -42),
                    textcoords="offset points", fontsize=8.5, color="#555555",
                    arrowprops=dict(arrowstyle="-", color="#999999", lw=0.8))
    ax.set_xscale("log", base=2)
    xs = list(rs.num_programs)
    ticks = sorted({x for x in xs if x in (xs[0], sm_count, 4 * sm_count, occ, M)})
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:,}" for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("number of programs in the grid (log scale; points are measured grids)")
    ax.set_ylabel("fraction of copy bandwidth")
    ax.set_ylim(0, 1.1)
    sec = ax.secondary_xaxis("top", functions=(lambda p: p / sm_count, lambda s: s * sm_count))
    sec_ticks = [t for t in (0.25, 1, 4, 16, 64, 256) if xs[0] / sm_count <= t <= xs[-1] / sm_count]
    sec.set_xticks(sec_ticks)
    sec.set_xticklabels([f"{t:g}" for t in sec_ticks])
    sec.minorticks_off()
    sec.set_xlabel("programs per SM", fontsize=9)
    ax.set_title(f"{rs.dtype.iloc[0]}, {M} x {rs.N.iloc[0]}, {_gpu(df)}, one timing per grid", fontsize=10, loc="left")
    ax.legend(frameon=False, fontsize=8.5, loc="lower right")
    return fig


_LETTER = {"registers": "R", "shared memory": "S", "threads": "T", "blocks": "B"}


def plot_tuning(df: pd.DataFrame | None = None):
    """Heat maps of the fraction of copy (GPU time) over num_warps x num_stages, one per shape, each
    cell labelled with programs per SM and the limit that binds (R, S, T, B); * marks spills."""
    df = data.load("persistent_tuning") if df is None else df
    ok = df[df.status == "ok"]
    shapes = list(dict.fromkeys(zip(df.M, df.N)))
    fig, axes = plots.new_figure(4.0 * len(shapes) + 0.8, 4.3, ncols=len(shapes))
    axes = list(axes) if len(shapes) > 1 else [axes]
    warps, stages = sorted(set(df.num_warps)), sorted(set(df.num_stages))
    im = None
    for ax, (M, N) in zip(axes, shapes):
        at = ok[(ok.M == M) & (ok.N == N)]
        grid = at.pivot(index="num_warps", columns="num_stages", values="graph_frac").reindex(index=warps, columns=stages)
        for r in at.itertuples():
            txt = f"{r.graph_frac:.2f}{'*' if r.n_spills else ''}\n{int(r.programs_per_sm)}/SM {_LETTER.get(r.limited_by, '?')}"
            ax.text(stages.index(r.num_stages), warps.index(r.num_warps), txt, ha="center", va="center", fontsize=7.5,
                    color="white" if r.graph_frac < 0.45 else "black")
        im = ax.imshow(grid.to_numpy(dtype=float), cmap="viridis", vmin=0, vmax=1, aspect="auto")
        ax.set_xticks(range(len(stages)), stages)
        ax.set_yticks(range(len(warps)), warps)
        ax.set_xlabel("num_stages")
        ax.set_ylabel("num_warps")
        ax.grid(False)
        ax.set_title(f"{M} x {N} float32", fontsize=10)
    fig.colorbar(im, ax=axes, shrink=0.85, label="fraction of copy (GPU time, one timing)")
    fig.suptitle(f"Persistent kernel, {_gpu(df)}: programs per SM and the binding limit "
                 f"(R registers, S shared memory, T threads); * = registers spilled", fontsize=9)
    return fig


#: The peers of helpers.softmax in the benchmark.
PEERS = ("torch_softmax", "torch_compile", "triton_tutorial", "liger")


def plot_final(df: pd.DataFrame | None = None, M: int = 4096, peers: int = 2):
    """GB/s in GPU time against N at M rows: helpers.softmax, the copy, and the ``peers`` strongest
    peers of each dtype (highest median fraction of copy over N), one panel per dtype."""
    df = data.load("bench", gpu="h100") if df is None else df
    at = df[(df.M == M) & (df.status == "ok")]
    dtypes = [d for d in ("float32", "bfloat16") if d in set(at.dtype)]
    fig, axes = plots.new_figure(11.0, 4.6, ncols=len(dtypes))
    axes = list(axes) if len(dtypes) > 1 else [axes]
    for ax, d in zip(axes, dtypes):
        g = at[at.dtype == d].pivot(index="N", columns="provider", values="graph_gbps")
        strongest = g[[p for p in PEERS if p in g]].div(g["copy"], axis=0).median().nlargest(peers).index
        for p in ["copy", "softmax", *strongest]:
            s = g[p].dropna()
            style = dict(ls="--", lw=1.5) if p == "copy" else dict(marker="o", ms=5, lw=2.4) if p == "softmax" else \
                dict(marker="s", ms=3.5, lw=1.3, ls=":")
            ax.plot(s.index, s.values, color=plots.color(p), label=_label(p), **style)
        set_n_axis(ax, list(g.index))
        ax.set_ylim(0, None)
        ax.set_ylabel("GB/s, GPU time")
        ax.set_title(f"{d}, M = {M}", fontsize=10)
        ax.legend(frameon=False, fontsize=8.5, loc="lower right")
    fig.suptitle(f"helpers.softmax, the copy and the two strongest peers on an {_gpu(df)}: "
                 f"bytes moved (2·M·N·size) per second of GPU time", fontsize=10)
    return fig


#: The providers the host-time figure follows.
HOST_PROVIDERS = ("torch_softmax", "torch_compile", "triton_tutorial", "liger", "fused", "softmax")


def plot_host_vs_gpu(df: pd.DataFrame | None = None, dtype: str = "float32", M: int = 4096):
    """Host µs per call (dashed) and GPU µs per call (solid) against N at M rows, per provider:
    where the solid line is below the dashed one, a Python loop of calls is paced by the host."""
    df = data.load("bench", gpu="h100") if df is None else df
    at = df[(df.M == M) & (df.dtype == dtype) & (df.status == "ok") & df.provider.isin(HOST_PROVIDERS)]
    fig, ax = plots.new_figure(8.5, 4.4)
    for p in [p for p in HOST_PROVIDERS if p in set(at.provider)]:
        s = at[at.provider == p].sort_values("N")
        c = plots.color(p)
        ax.plot(s.N, s.graph_ms * 1e3, "o-", color=c, ms=3.5, lw=1.6, label=f"{_label(p)}: GPU")
        ax.plot(s.N, s.host_us, "--", color=c, lw=1.2, alpha=0.8)
    ax.plot([], [], "k--", lw=1.2, label="dashed: host, same color")
    ax.set_yscale("log")
    set_n_axis(ax, sorted(set(at.N)))
    ax.set_ylabel("µs per call")
    ax.set_title(f"Host time against GPU time per call, {dtype}, M = {M}, {_gpu(df)}", fontsize=10)
    ax.legend(frameon=False, fontsize=8, loc="upper left", ncols=2)
    return fig


#: Figures of this lesson, by the name ``helpers.plots.save`` writes them under.
FIGURES = {"05_programs": plot_programs, "05_tuning": plot_tuning, "05_final_comparison": plot_final,
           "05_host_vs_gpu": plot_host_vs_gpu}


# --------------------------------------------------------------------------------------------
# Exercise checkers: each prints one line (correct / not yet / wrong) and never raises. Learner
# kernels run through helpers.exercises on guarded buffers whose rows are padded with NaN, input
# and output rows a different number of elements apart, neither equal to the row length.
# --------------------------------------------------------------------------------------------

#: What exercise 5.1's checker fills the output with: no softmax value is negative.
UNWRITTEN = -7.0


def grid_stride_cases(seed: int = 51) -> list[dict]:
    """What exercise 5.1's checker launches, in order: the input, the number of programs, and the
    row strides of input and output (different, and neither the row length, with room after each row
    for a whole block's lanes); a transposed input (column stride != 1) last."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(10, 50, generator=g) * 3
    x[3, :20] = float("-inf")
    x[7, 5] = 120.0  # exp(120) overflows float32: the max shift is needed
    wide = torch.randn(37, 12, generator=g) * 20
    strided = dict(x=x, in_stride=67, out_stride=71)
    return [dict(strided, programs=3), dict(strided, programs=1), dict(strided, programs=16),
            dict(strided, programs=4), dict(x=wide, programs=5, in_stride=14, out_stride=70, transpose=True)]


def _name(case) -> str:
    M, N = case["x"].shape[::-1] if case.get("transpose") else case["x"].shape
    how = " read through a transposed view (column stride 14)" if case.get("transpose") else ""
    return f"{M} rows of {N} columns{how}, {case['programs']} programs"


def _launch_5_1(kernel, P, out, x):
    M, N = x.shape
    launch_learner_kernel(kernel, (P,), out, x, x.stride(0), x.stride(1), out.stride(0), M, N,
                          BLOCK_SIZE=triton.next_power_of_2(N), where=f"launched on {M} rows with {P} programs,")


def _stride_hint(case, side: str) -> str:
    N = case["x"].shape[0] if case.get("transpose") else case["x"].shape[1]
    if side == "store":
        return (f"row r of the output starts at out_ptr + r * out_row_stride (here {case['out_stride']}); "
                f"the input's rows are in_row_stride = {case['in_stride']} apart and a row has {N} columns")
    return (f"row r of the input starts at in_ptr + r * in_row_stride (here {case['in_stride']}); the output's "
            f"rows are out_row_stride = {case['out_stride']} apart and a row has {N} columns")


def _trial_5_1(kernel) -> str:
    if not hasattr(kernel, "__getitem__") or not hasattr(kernel, "fn"):
        raise Wrong("persistent_softmax_kernel must be a Triton kernel: decorate it with @triton.jit")
    for case in grid_stride_cases():
        src = case["x"]
        data_ = guarded(tuple(src.shape), fill=0.0, row_stride=case["in_stride"])
        data_.copy_(src.to(data_.device))
        x = data_.t() if case.get("transpose") else data_
        M, N = x.shape
        where = f"on {_name(case)}"
        ref = torch.softmax(x.detach().cpu().double(), dim=-1)
        out = guarded((M, N), fill=UNWRITTEN, row_stride=case["out_stride"])
        before = data_.clone()
        _launch_5_1(kernel, case["programs"], out, x)
        if not (torch.equal(data_, before) and guards_intact(data_)):
            raise Wrong(f"{where}: your kernel changed its input: store into out_ptr only")
        got = out.detach().cpu().double()
        row_ok = (got - ref).abs().amax(dim=1) <= 1e-6
        if case.get("transpose") and not row_ok.all():
            raise Wrong(f"{where}: rows came out wrong (use in_col_stride when loading: x[row, j] is at "
                        f"in_ptr + row * in_row_stride + j * in_col_stride)")
        if not guards_intact(out):
            if row_ok.all() or not row_ok[0]:
                raise Wrong(f"{where}: your kernel wrote past the end of a row of its output: does tl.store have "
                            f"mask=... for the lanes past n_cols?")
            raise Wrong(f"{where}: row 0 is right, but other rows were stored in the wrong place ({_stride_hint(case, 'store')})")
        missed = sorted({int(r) for r in torch.nonzero(got == UNWRITTEN)[:, 0]})
        if missed:
            hint = ("program p takes rows p, p + P, p + 2P, ... with P = tl.num_programs(0): loop "
                    "`for row in range(tl.program_id(0), n_rows, tl.num_programs(0))`")
            raise Wrong(f"{where}: rows {missed[:8]} were never written ({'nothing was written: ' if len(missed) == M else ''}{hint})")
        nan_rows = (torch.isnan(got) & ~torch.isnan(ref)).any(dim=1)
        overflow = torch.isinf(torch.exp(x.detach().cpu().float())).any(dim=1)
        if nan_rows[0]:
            raise Wrong(f"{where}: row 0 came out NaN: the lanes past n_cols read whatever lies after the row (here NaN); "
                        f"load with mask=cols < n_cols and other=-float('inf')")
        if nan_rows.any() and torch.equal(nan_rows, overflow):
            raise Wrong(f"{where}: rows {torch.nonzero(nan_rows)[:, 0].tolist()} came out NaN: subtract the row maximum "
                        f"before tl.exp (exp overflows float32 past about 88)")
        if not row_ok.all():
            if row_ok[0]:
                raise Wrong(f"{where}: row 0 is right, but rows {torch.nonzero(~row_ok)[:, 0].tolist()[:8]} are not: "
                            f"they were read from the wrong place ({_stride_hint(case, 'load')})")
            err = (got - ref).abs().max().item()
            raise Wrong(f"{where}: max abs error {err:.1e} against torch.softmax (each row's softmax: the max shift, "
                        f"exp, sum, divide, with the padding lanes loaded as -inf)")
        if case.get("transpose"):
            continue
        # In place (out is x): a row that two programs, or two iterations, both handle comes out as
        # the softmax of a softmax, which no longer matches.
        inplace = guarded(tuple(src.shape), row_stride=case["in_stride"])
        inplace.copy_(src.to(inplace.device))
        _launch_5_1(kernel, case["programs"], inplace, inplace)
        twice = ~((inplace.detach().cpu().double() - ref).abs().amax(dim=1) <= 1e-5)
        if twice.any():
            raise Wrong(f"{where}, run in place (out is x): rows {torch.nonzero(twice)[:, 0].tolist()[:8]} were "
                        f"processed more than once. Each row belongs to exactly one program: start at "
                        f"tl.program_id(0) and step by tl.num_programs(0)")
    return "every row written by exactly one program, with 1, 3, 4, 5 and 16 programs and rows 67 and 71 apart"


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
    return regs_per_sm // (-(-n_regs * warp_size // 256) * 256 * num_warps)


def _trial_5_2(programs_by_registers) -> str:
    for n_regs, w in [(58, 1), (23, 8), (180, 4), (255, 1), (32, 32), (128, 16), (129, 16), (25, 4), (71, 2)]:
        got = _int(call_attempt(programs_by_registers, n_regs, w, 65536, 32), "the number of programs")
        want = programs_by_registers_answer(n_regs, w)
        if got != want:
            hint = ""
            if got == 65536 // (n_regs * 32 * w):
                hint = " (round each warp's registers up to a multiple of 256 first)"
            elif want == 0:
                hint = " (a program that needs more registers than the SM has cannot be resident at all: 0)"
            raise Wrong(f"n_regs = {n_regs}, num_warps = {w}: you gave {got}, expected {want}{hint}")
    return "e.g. 58 registers, 1 warp: 58 x 32 = 1856 -> 2048 per warp, 65536 // 2048 = 32"


def check_5_2(programs_by_registers) -> None:
    """Exercise 5.2: ``programs_by_registers(n_regs, num_warps, regs_per_sm, warp_size)``."""
    check("5.2", "programs per SM from registers", programs_by_registers, _trial_5_2)


def waves_answer(num_programs: int, resident: int) -> tuple[int, int]:
    """(waves, programs in the last wave) when ``num_programs`` programs run ``resident`` at a time."""
    n = -(-num_programs // resident)
    return n, num_programs - (n - 1) * resident


def _trial_5_3(waves) -> str:
    for n, r in [(65536, 2112), (2112, 2112), (132, 2112), (4224, 2112), (4225, 2112), (1, 1), (1000, 7)]:
        got = call_attempt(waves, n, r)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise Wrong(f"return a pair (waves, programs in the last wave), got {type(got).__name__}")
        w, last = _int(got[0], "waves"), _int(got[1], "programs in the last wave")
        ww, wl = waves_answer(n, r)
        if (w, last) != (ww, wl):
            hint = ""
            if w == n // r and n % r:
                hint = " (a partial wave is still a wave: round up)"
            elif last == 0 and n % r == 0:
                hint = " (when the programs divide evenly, the last wave is full)"
            raise Wrong(f"{n} programs, {r} resident: you gave ({w}, {last}), expected ({ww}, {wl}){hint}")
    return "65536 rows at 2112 resident: 32 waves, the last one 64 programs (3% of the GPU)"


def check_5_3(waves) -> None:
    """Exercise 5.3: ``waves(num_programs, resident)`` returns (waves, programs in the last wave)."""
    check("5.3", "waves", waves, _trial_5_3)


def _limits(n_regs, shared, w, p, *, reserve=True, rounded=True, warp_threads=True, blocks=True) -> dict:
    """The four limits in programs per SM, or the same with one plausible mistake (for the hints)."""
    per_warp = -(-n_regs * p["warp_size"] // 256) * 256 if rounded else n_regs * p["warp_size"]
    smem = shared + (p.get("reserved_shared_per_block", 0) if reserve else 0)
    out = {"registers": p["regs_per_sm"] // (per_warp * w),
           "shared memory": p["shared_per_sm"] // smem if smem else math.inf,
           "threads": p["max_threads_per_sm"] // (w * (p["warp_size"] if warp_threads else 1)),
           "blocks": p["max_blocks_per_sm"] if blocks else math.inf}
    return out


def _binding(limits: dict, pick=min) -> set:
    v = pick(limits.values())
    return {k for k, x in limits.items() if x == v}


#: A plausible mistake of exercise 5.4, the answers it gives, and the hint that names it.
MISTAKES_5_4 = [
    (dict(reserve=False), min, "count the shared memory the driver reserves for every program, "
                               "props['reserved_shared_per_block'], on top of the kernel's own"),
    (dict(rounded=False), min, "round each warp's registers up to a multiple of 256 (exercise 5.2)"),
    (dict(warp_threads=False), min, "a program of num_warps warps has num_warps * props['warp_size'] threads"),
    (dict(blocks=False), min, "an SM also holds at most props['max_blocks_per_sm'] programs, however small"),
    (dict(), max, "the limit that binds is the one that allows the fewest programs: take the smallest"),
]
CASES_5_4 = [(72, 12288, 1), (23, 32, 8), (180, 16, 4), (96, 10240, 1), (41, 9376, 2), (55, 16392, 2),
             (199, 49152, 1), (24, 8256, 16), (58, 0, 1), (255, 196608, 2), (40, 1024, 2), (16, 16, 1)]


def _trial_5_4(binding_limit) -> str:
    props, _ = device_props(live=False)
    answers = []
    for i, (n_regs, shared, w) in enumerate(CASES_5_4):
        try:
            got = call_attempt(binding_limit, n_regs, shared, w, dict(props))
        except ZeroDivisionError:
            if shared == 0 and i > 0:  # a kernel with no shared memory of its own still takes the reserve
                raise Wrong(f"n_regs = {n_regs}, shared = 0, num_warps = {w}: your code divided by zero; "
                            f"{MISTAKES_5_4[0][2]}") from None
            raise
        if not isinstance(got, str) or got not in LIMIT_NAMES:
            raise Wrong(f"return the name of the limit, one of {list(LIMIT_NAMES)}; got {got!r}, which is not one of them")
        answers.append(got)
    right = [_binding(_limits(*c, props)) for c in CASES_5_4]
    if all(a in ok for a, ok in zip(answers, right)):
        return f"you met {len(set(answers))} different limits: {', '.join(sorted(set(answers)))}"
    for kw, pick, hint in MISTAKES_5_4:
        if all(a in _binding(_limits(*c, props, **kw), pick) for a, c in zip(answers, CASES_5_4)):
            break
    else:
        hint = "compute each limit as a number of programs per SM and take the smallest"
    i = next(i for i, (a, ok) in enumerate(zip(answers, right)) if a not in ok)
    (n_regs, shared, w), lim = CASES_5_4[i], _limits(*CASES_5_4[i], props)
    want = sorted(right[i])[0]
    raise Wrong(f"n_regs = {n_regs}, shared = {shared}, num_warps = {w}: you said {answers[i]!r}, which allows "
                f"{lim[answers[i]]} programs, but {want!r} allows only {lim[want]} ({hint})")


def check_5_4(binding_limit) -> None:
    """Exercise 5.4: ``binding_limit(n_regs, shared, num_warps, props)`` names the limit that binds."""
    check("5.4", "which limit binds", binding_limit, _trial_5_4)
