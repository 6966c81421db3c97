"""Lesson 05 · A persistent softmax sized from the compiled kernel, and where the time goes. Only what a learner
need not read: live GPU measurements (``*_rows``, also recorded by ``python tools/bench.py``; ``live`` makes them
the DataFrames the lesson loads on the CPU), the figures, and the checkers of exercises 5.1 to 5.4."""

from __future__ import annotations

import itertools
import math

import pandas as pd
import torch
import triton

from . import data, plots
from . import kernels as K
from .device import api_occupancy, gpu_props, occupancy
from .exercises import Wrong, call_attempt, check, guarded, guards_intact, launch_learner_kernel, require_kernel
from .gpu_data import device_props, provenance
from .kernels import persistent_plan, softmax_persistent, softmax_persistent_kernel
from .launch import Rows, acc_dtype
from .measure import DTYPES, device_facts, eager_ms, gpu_ms, host_us, require_gpu
from .plots import label, set_n_axis
from .triton_compat import raw_launcher, raw_stream

LIMIT_NAMES = ("registers", "shared memory", "threads", "blocks")
PEERS = ("torch_softmax", "torch_compile", "triton_tutorial", "liger")


def warp_registers(n_regs: int, warp_size: int = 32) -> int:
    """The registers a warp is granted: ``n_regs`` for each thread, rounded up to a multiple of 256."""
    return -(-n_regs * warp_size // 256) * 256


def registers_by_partition(n_regs: int, num_warps: int, props: dict, partitions: int = 4) -> int:
    """Programs per SM by registers if each warp's come from one of ``partitions`` parts (warp schedulers)."""
    return (props["regs_per_sm"] // partitions) // warp_registers(n_regs, props["warp_size"]) * partitions // num_warps


# Live measurements (GPU only): what tools/bench.py records and the lesson measures on a GPU
def device_props_rows() -> list[dict]:
    """The GPU's limits (``helpers.gpu_props``) and the copy's bandwidth on a 1 GiB tensor."""
    return [{k: round(v, 1) if isinstance(v, float) else v for k, v in device_facts().items()}]


def occupancy_check_rows(
    checks=(
        (1024, 1, 4),
        (1024, 4, 2),
        (2048, 2, 3),
        (4096, 1, 3),
        (4096, 8, 2),
        (16384, 16, 1),
        (256, 1, 1),
        (1024, 8, 4),
        (8192, 4, 2),
        (32768, 32, 1),
    ),
) -> list[dict]:
    """The occupancy formula with and without the driver's reserve, and the driver's own count."""
    require_gpu("occupancy_check_rows")
    props, rows = gpu_props(), []
    for N, w, s in checks:
        c = softmax_persistent_kernel.warmup(
            torch.float32,
            torch.float32,
            N,
            1,
            N,
            4096,
            N,
            BLOCK_SIZE=N,
            ACC=acc_dtype(torch.float32),
            NUM_STAGES=s,
            num_warps=w,
            grid=(1,),
        )
        c._init_handles()
        occ, no_reserve = (
            occupancy(c.n_regs, c.metadata.shared, w, {**props, **extra})
            for extra in ({}, {"reserved_shared_per_block": 0})
        )
        rows.append(
            dict(
                N=N,
                num_warps=w,
                num_stages=s,
                n_regs=c.n_regs,
                shared=c.metadata.shared,
                reserved_shared=props["reserved_shared_per_block"],
                course=occ["programs_per_sm"],
                limited_by=occ["limited_by"],
                without_reserved=no_reserve["programs_per_sm"],
                cuda_api=api_occupancy(c, w),
            )
        )
    return rows


def programs_rows(N: int = 1024, M: int = 65536, dtype_name: str = "float32") -> list[dict]:
    """The persistent kernel's fraction of copy against its number of programs, one timing each."""
    require_gpu("programs_rows")
    sms = gpu_props()["sm_count"]
    x = torch.randn(M, N, device="cuda", dtype=DTYPES[dtype_name])
    y, nbytes = torch.empty_like(x), 2 * x.numel() * x.element_size()
    copy_g, copy_e = gpu_ms(lambda: y.copy_(x)), eager_ms(lambda: y.copy_(x))
    occ = persistent_plan(Rows.of(x)).info["programs"]
    counts = sorted(
        {max(1, int(sms * f)) for f in (0.25, 0.5, 0.75, 1, 1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32)}
        | {sms - 1, sms + 1, 2 * sms + 1, occ, M}
    )
    rows = []
    for p in counts:
        g, e = gpu_ms(lambda: softmax_persistent(x, p)), eager_ms(lambda: softmax_persistent(x, p))
        rows.append(
            dict(
                dtype=dtype_name,
                M=M,
                N=N,
                num_programs=p,
                programs_per_sm=round(p / sms, 3),
                occupancy_programs=occ,
                graph_ms=g,
                ms=e,
                graph_gbps=nbytes / g / 1e6,
                graph_frac=copy_g / g,
                frac_of_copy=copy_e / e,
            )
        )
    return rows


def tuning_rows(shapes=((16384, 1024), (4096, 4096), (4096, 16384)), dtype_name: str = "float32") -> list[dict]:
    """The persistent kernel over num_warps x num_stages, one timing each, with the compiler's numbers."""
    require_gpu("tuning_rows")
    keys, rows = (
        ("n_regs", "n_spills", "shared", "programs_per_sm", "api_programs_per_sm", "limited_by", "programs"),
        [],
    )
    for M, N in shapes:
        x = torch.randn(M, N, device="cuda", dtype=DTYPES[dtype_name])
        y, ref = torch.empty_like(x), torch.softmax(x.double(), -1)
        copy_g, copy_e = gpu_ms(lambda: y.copy_(x)), eager_ms(lambda: y.copy_(x))
        for w, s in itertools.product((1, 2, 4, 8, 16, 32), (1, 2, 3, 4)):
            row = dict(dtype=dtype_name, M=M, N=N, num_warps=w, num_stages=s)
            try:
                info = persistent_plan(Rows.of(x), None, w, s).info
                f = lambda: softmax_persistent(x, None, w, s)  # noqa: E731
                if not (err := (f().double() - ref).abs().max().item()) < 1e-5:
                    raise AssertionError(f"max abs error {err:.1e}")
                g, e = gpu_ms(f), eager_ms(f)
                row.update(
                    {k: info[k] for k in keys},
                    graph_ms=g,
                    ms=e,
                    graph_frac=copy_g / g,
                    frac_of_copy=copy_e / e,
                    status="ok",
                )
            except Exception as ex:
                msg = (str(ex).strip().splitlines() or [type(ex).__name__])[0][:100].replace(",", ";")
                row.update(
                    {k: "" for k in keys + ("graph_ms", "ms", "graph_frac", "frac_of_copy")},
                    status=f"failed: {type(ex).__name__}: {msg}",
                )
            rows.append(row)
    return rows


def final_rows(
    shapes=((4096, 1024), (4096, 4096), (4096, 16384), (1000, 700)), dtypes=("float32", "bfloat16")
) -> list[dict]:
    """The benchmark's providers that lesson 05 has met (not lesson 06's split kernels) at a few shapes (about a
    minute, most of it torch.compile)."""
    require_gpu("final_rows")
    from .measure import measure_shape, providers

    met = {k: f for k, f in providers().items() if not k.startswith("split")}
    return [r for d in dtypes for M, N in shapes for r in measure_shape(M, N, DTYPES[d], met, quick=True)]


def launch_cost_rows(M: int = 4096, N: int = 256, rounds: int = 7) -> list[dict]:
    """Host µs per call of each way to launch the fused kernel, and of every wrapper (with its GPU µs)."""
    require_gpu("launch_cost_rows")
    from .peers import liger_softmax, tutorial_softmax

    x = torch.randn(M, N, device="cuda")
    o, stream = torch.empty_like(x), raw_stream(torch.cuda.current_device())
    kw = dict(BLOCK_SIZE=triton.next_power_of_2(N), ACC=acc_dtype(x.dtype), num_warps=4)
    args, rest = (
        (o, x, x.stride(0), x.stride(1), o.stride(0), N),
        (x.stride(0), x.stride(1), o.stride(0), N, kw["BLOCK_SIZE"], None),
    )
    (c := K.softmax_fused_kernel.warmup(*args, grid=(M,), **kw))._init_handles()
    run, raw = c.run, raw_launcher(c)  # (raw_launcher: the launcher's arguments differ between Triton versions)
    cases = {
        "torch.empty_like(x)": ("allocation", lambda: torch.empty_like(x)),
        "kernel[grid](...) (Triton's JIT)": ("launch", lambda: K.softmax_fused_kernel[(M,)](*args, **kw)),
        "compiled[grid](...)": ("launch", lambda: c[(M, 1, 1)](*args[:2], *rest)),
        "compiled.run(..., tensors)": (
            "launch",
            lambda: run(M, 1, 1, stream, c.function, c.packed_metadata, None, None, None, o, x, *rest),
        ),
        "launcher, raw pointers": ("launch", lambda: raw(M, 1, 1, stream, o.data_ptr(), x.data_ptr(), *rest)),
    }
    wrappers = {
        "torch.softmax": lambda t: torch.softmax(t, -1),
        "Triton tutorial": tutorial_softmax,
        "Liger-Kernel": liger_softmax,
    }  # None when Liger-Kernel is not installed
    wrappers.update(
        {
            f"helpers.{n}": getattr(K, n)
            for n in (
                "softmax",
                "softmax_fused",
                "softmax_online",
                "softmax_persistent",
                "softmax_tiled",
                "softmax_split",
                "softmax_split_coop",
            )
        }
    )
    cases.update({name: ("wrapper", lambda fn=fn: fn(x)) for name, fn in wrappers.items() if fn is not None})
    # Host time moves by tens of percent between runs: interleaved rounds, compared round by round
    times = {name: [] for name in cases}
    for _ in range(rounds):
        for name, (kind, f) in cases.items():
            times[name].append(host_us(f, loops=3))
    med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
    return [
        dict(
            case=name,
            kind=kind,
            M=M,
            N=N,
            host_us=med(t),
            host_us_min=min(t),
            host_us_max=max(t),
            vs_torch_softmax=med([a / b for a, b in zip(t, times["torch.softmax"])]),
            graph_us=gpu_ms(f) * 1e3 if kind == "wrapper" else "",
        )
        for (name, (kind, f)), t in zip(cases.items(), times.values())
    ]


def live(rows_fn, *args, **kwargs) -> pd.DataFrame:
    """``rows_fn(*args, **kwargs)`` measured now, as the recording's DataFrame: "" (not measured) is NaN."""
    rows = [{k: math.nan if v == "" else v for k, v in r.items()} for r in rows_fn(*args, **kwargs)]
    return data.frame(rows, provenance(f"helpers.lesson05.{rows_fn.__name__}()"))


# Figures: each takes the lesson's DataFrame (the recording when none is given)


def _label(provider: str) -> str:
    return "y.copy_(x)" if provider == "copy" else label(provider)


def plot_programs(df: pd.DataFrame | None = None, sm_count: int | None = None):
    """Persistent kernel's fraction of copy against its grid; lines join only grids < 2x apart."""
    df = data.load("persistent_programs") if df is None else df
    sms = sm_count or device_props(live=False)[0]["sm_count"]
    rs, c = df.sort_values("num_programs"), plots.COLORS["persistent"]
    fig, ax = plots.new_figure(8.0, 4.0)
    for i, (_, run) in enumerate(rs.groupby((rs.num_programs / rs.num_programs.shift()).gt(2).cumsum())):
        ax.plot(run.num_programs, run.graph_frac, "o-", color=c, ms=4, lw=2, label=None if i else "GPU time")
        ax.plot(run.num_programs, run.frac_of_copy, ".--", color=c, ms=4, lw=1, alpha=0.6, label=None if i else "eager")
    ax.axhline(1.0, color=plots.COLORS["copy"], ls="--", lw=1.2, label=_label("copy"))
    occ, M = int(rs.occupancy_programs.iloc[0]), int(rs.M.iloc[0])
    for x, txt, col in (
        (sms, "one program per SM", "#d62728"),
        (occ, f"occupancy grid ({occ // sms} per SM)", "#2ca02c"),
        (M, "one program per row", "#555555"),
    ):
        ax.axvline(x, color=col, ls=":", lw=1.3)
        ax.annotate(
            f"{txt}\n({x:,})",
            (x, 0.05),
            xytext=(-6, 0),
            textcoords="offset points",
            fontsize=8.5,
            color=col,
            ha="right",
        )
    ax.set_xscale("log", base=2)
    ticks = sorted({int(rs.num_programs.iloc[0]), sms, 4 * sms, occ, M})
    ax.set_xticks(ticks, [f"{t:,}" for t in ticks], minor=False)
    ax.minorticks_off()
    ax.set(
        xlabel="number of programs in the grid (log scale; points are measured grids)",
        ylabel="fraction of copy bandwidth",
        ylim=(0, 1.1),
    )
    ax.set_title(
        f"Persistent kernel, {rs.dtype.iloc[0]}, {M} x {rs.N.iloc[0]}, {data.gpu(df)}, one timing per grid", fontsize=10
    )
    ax.legend(frameon=False, fontsize=8.5, loc="center right")
    return fig


def plot_tuning(df: pd.DataFrame | None = None):
    """Fraction of copy over num_warps x num_stages per shape, with programs per SM and the binding limit."""
    df = data.load("persistent_tuning") if df is None else df
    ok, shapes = df[df.status == "ok"], list(dict.fromkeys(zip(df.M, df.N)))
    fig, axes = plots.new_figure(4.0 * len(shapes) + 0.8, 4.3, ncols=len(shapes))
    axes = list(axes) if len(shapes) > 1 else [axes]
    warps, stages = sorted(set(df.num_warps)), sorted(set(df.num_stages))
    for ax, (M, N) in zip(axes, shapes):
        at = ok[(ok.M == M) & (ok.N == N)]
        grid = at.pivot(index="num_warps", columns="num_stages", values="graph_frac").reindex(
            index=warps, columns=stages
        )
        for r in at.itertuples():
            ax.text(
                stages.index(r.num_stages),
                warps.index(r.num_warps),
                f"{r.graph_frac:.2f}{'*' if r.n_spills else ''}\n{int(r.programs_per_sm)}/SM {r.limited_by[0].upper()}",
                ha="center",
                va="center",
                fontsize=7.5,
                color="white" if r.graph_frac < 0.45 else "black",
            )
        im = ax.imshow(grid.to_numpy(dtype=float), cmap="viridis", vmin=0, vmax=1, aspect="auto")
        ax.set(
            xticks=range(len(stages)),
            xticklabels=stages,
            yticks=range(len(warps)),
            yticklabels=warps,
            xlabel="num_stages",
            ylabel="num_warps",
        )
        ax.grid(False)
        ax.set_title(f"{M} x {N} float32", fontsize=10)
    fig.colorbar(im, ax=axes, shrink=0.85, label="fraction of copy (GPU time, one timing)")
    fig.suptitle(
        f"Persistent kernel, {data.gpu(df)}: programs per SM and the binding limit "
        f"(R registers, S shared memory, T threads, B blocks); * = registers spilled",
        fontsize=9,
    )
    return fig


def plot_final(df: pd.DataFrame | None = None, M: int = 4096):
    """GB/s against N at M rows: helpers.softmax, the copy and every peer of the lesson (torch.softmax,
    torch.compile, the Triton tutorial, Liger-Kernel), one panel per dtype; a shape a provider refuses is
    marked with an x on the axis, in its color. One legend for both panels, below them, clear of the data."""
    df = data.load("bench", gpu="h100") if df is None else df
    at = df[df.M == M]
    dtypes = [d for d in ("float32", "bfloat16") if d in set(at.dtype)]
    shown = ["copy", "softmax", *(p for p in PEERS if p in set(at.provider))]
    fig, axes = plots.new_figure(11.0, 5.0, ncols=len(dtypes))
    for ax, d in zip(axes if len(dtypes) > 1 else [axes], dtypes):
        rows = at[at.dtype == d]
        g = rows[rows.status == "ok"].pivot(index="N", columns="provider", values="graph_gbps")
        refused = rows[rows.status != "ok"]
        for p in shown:
            style = (
                dict(ls="--", lw=1.5)
                if p == "copy"
                else dict(marker="o", ms=5, lw=2.4)
                if p == "softmax"
                else dict(marker="s", ms=3.5, lw=1.3, ls=":")
            )
            if p in g:
                ax.plot(g[p].dropna().index, g[p].dropna().values, color=plots.color(p), label=_label(p), **style)
            if len(no := refused[refused.provider == p]):  # (an empty line would upset the layout)
                ax.plot(
                    no.N,
                    [0] * len(no),
                    "x",
                    color=plots.color(p),
                    ms=8,
                    mew=2,
                    clip_on=False,
                    zorder=5,
                    label=f"{_label(p)} refuses the shape",
                )
        set_n_axis(ax, sorted(set(rows.N)))
        ax.set(ylim=(0, None), ylabel="GB/s, GPU time")
        ax.set_title(f"{d}, M = {M}", fontsize=10)
    handles = {h.get_label(): h for ax in fig.axes for h in ax.get_lines() if not h.get_label().startswith("_")}
    fig.legend(handles.values(), handles.keys(), loc="outside lower center", ncols=4, frameon=False, fontsize=8.5)
    fig.suptitle(
        f"helpers.softmax, the copy and the lesson's peers on an {data.gpu(df)}: bytes moved per second", fontsize=10
    )
    return fig


FIGURES = {"05_programs": plot_programs, "05_tuning": plot_tuning, "05_final_comparison": plot_final}


# Exercise checkers: one line each (correct / not yet / wrong), never an exception. Learner kernels run through
# helpers.exercises on guarded rows with NaN after each, input and output rows apart by different strides.

UNWRITTEN = -7.0  # what exercise 5.1's output starts as: no softmax value is negative
LOOP = "program p takes rows p, p + P, p + 2P, ...: start at tl.program_id(0) and step by tl.num_programs(0)"


def grid_stride_cases(seed: int = 51) -> list[dict]:
    """Exercise 5.1's trials: input, programs, and input and output row strides (different, neither
    the row length, with room after a row for a block's lanes); a transposed input last."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(10, 50, generator=g) * 3
    x[3, :20] = float("-inf")
    x[7, 5] = 120.0  # exp(120) overflows float32: the max shift is needed
    strided = dict(x=x, in_stride=67, out_stride=71)
    return [
        dict(strided, programs=3),
        dict(strided, programs=1),
        dict(strided, programs=16),
        dict(strided, programs=4),
        dict(x=torch.randn(37, 12, generator=g) * 20, programs=5, in_stride=14, out_stride=70, transpose=True),
    ]


def _padded(src, stride, fill=0.0):
    t = guarded(tuple(src.shape), fill=fill, row_stride=stride)
    return t.copy_(src.to(t.device))


def _launch_5_1(kernel, P, out, x):
    M, N = x.shape
    launch_learner_kernel(
        kernel,
        (P,),
        out,
        x,
        x.stride(0),
        x.stride(1),
        out.stride(0),
        M,
        N,
        BLOCK_SIZE=triton.next_power_of_2(N),
        where=f"launched on {M} rows with {P} programs,",
    )


def _stride_hint(case, N, store: bool) -> str:
    (mine, a), (other, b) = (("output", "out"), ("input", "in"))[:: 1 if store else -1]
    return (
        f"row r of the {mine} starts at {a}_ptr + r * {a}_row_stride (here {case[a + '_stride']}); the {other}'s "
        f"rows are {b}_row_stride = {case[b + '_stride']} apart and a row has {N} columns"
    )


def _trial_5_1(kernel) -> str:
    require_kernel(kernel, "persistent_softmax_kernel")
    for case in grid_stride_cases():
        data_ = _padded(case["x"], case["in_stride"])
        x, turned = (data_.t(), True) if case.get("transpose") else (data_, False)
        (M, N), before = x.shape, data_.clone()
        where = f"on {M} rows of {N} columns{' read through a transposed view' * turned}, {case['programs']} programs"
        ref = torch.softmax(x.detach().cpu().double(), dim=-1)
        out = guarded((M, N), fill=UNWRITTEN, row_stride=case["out_stride"])
        _launch_5_1(kernel, case["programs"], out, x)
        if not (torch.equal(data_, before) and guards_intact(data_)):
            raise Wrong(f"{where}: your kernel changed its input: store into out_ptr only")
        got = out.detach().cpu().double()
        row_ok = (got - ref).abs().amax(dim=1) <= 1e-6
        nan_rows = (torch.isnan(got) & ~torch.isnan(ref)).any(dim=1)
        if turned and not row_ok.all():
            raise Wrong(
                f"{where}: rows came out wrong (use in_col_stride when loading: x[row, j] is at "
                f"in_ptr + row * in_row_stride + j * in_col_stride)"
            )
        if not guards_intact(out) and (row_ok.all() or not row_ok[0]):
            raise Wrong(
                f"{where}: your kernel wrote past the end of a row of its output: does tl.store have "
                f"mask=... for the lanes past n_cols?"
            )
        if not guards_intact(out):
            raise Wrong(
                f"{where}: row 0 is right, but other rows were stored in the wrong place "
                f"({_stride_hint(case, N, True)})"
            )
        if missed := sorted({int(r) for r in torch.nonzero(got == UNWRITTEN)[:, 0]}):
            raise Wrong(f"{where}: rows {missed[:8]} were never written ({LOOP})")
        if nan_rows[0]:
            raise Wrong(
                f"{where}: row 0 came out NaN: the lanes past n_cols read whatever lies after the row "
                f"(here NaN); load with mask=cols < n_cols and other=-float('inf')"
            )
        if nan_rows.any() and torch.equal(nan_rows, torch.isinf(torch.exp(x.detach().cpu().float())).any(dim=1)):
            raise Wrong(
                f"{where}: rows {torch.nonzero(nan_rows)[:, 0].tolist()} came out NaN: subtract the row "
                f"maximum before tl.exp (exp overflows float32 past about 88)"
            )
        if not row_ok.all() and row_ok[0]:
            raise Wrong(
                f"{where}: row 0 is right, but rows {torch.nonzero(~row_ok)[:, 0].tolist()[:8]} are not: "
                f"they were read from the wrong place ({_stride_hint(case, N, False)})"
            )
        if not row_ok.all():
            raise Wrong(
                f"{where}: max abs error {(got - ref).abs().max().item():.1e} against torch.softmax (each "
                f"row's softmax: the max shift, exp, sum, divide, with the padding lanes loaded as -inf)"
            )
        if not turned:  # in place (out is x): a row handled twice comes out as the softmax of a softmax
            _launch_5_1(kernel, case["programs"], inplace := _padded(case["x"], case["in_stride"]), inplace)
            if (twice := ~((inplace.detach().cpu().double() - ref).abs().amax(dim=1) <= 1e-5)).any():
                raise Wrong(
                    f"{where}, run in place (out is x): rows {torch.nonzero(twice)[:, 0].tolist()[:8]} were "
                    f"processed more than once. Each row belongs to exactly one program: {LOOP}"
                )
    return "every row written by exactly one program, with 1, 3, 4, 5 and 16 programs and rows 67 and 71 apart"


def check_5_1(persistent_softmax_kernel) -> None:
    """Exercise 5.1: a persistent softmax kernel whose programs walk the rows in a grid-stride loop."""
    check("5.1", "a grid-stride loop", persistent_softmax_kernel, _trial_5_1)


def _int(v, what):
    v = v.item() if isinstance(v, torch.Tensor) and v.numel() == 1 else v
    v = int(v) if isinstance(v, float) and v.is_integer() else v
    if isinstance(v, bool) or not isinstance(v, int):
        raise Wrong(f"{what} should be a whole number, got {type(v).__name__} {v!r}")
    return v


def programs_by_registers_answer(n_regs: int, num_warps: int, regs_per_sm: int = 65536, warp_size: int = 32) -> int:
    """Programs per SM the register file allows (each warp's registers rounded up to 256)."""
    return regs_per_sm // (warp_registers(n_regs, warp_size) * num_warps)


def _round_up(v: int) -> int:
    return -(-v // 256) * 256


#: A plausible mistake of exercise 5.2 (n_regs, num_warps, regs_per_sm, warp_size -> programs), and the hint that
#: names it. A learner's answers that match one of these on every trial get its hint.
MISTAKES_5_2 = [
    (
        lambda n, w, r, ws: r // (n * ws * w),
        "each warp's registers are granted in chunks of 256: round n_regs * warp_size up to a multiple of 256 before "
        "dividing. A warp that needs 1856 registers takes 2048, so counting 1856 finds room for programs the SM cannot hold",
    ),
    (
        lambda n, w, r, ws: r // (n * ws // 256 * 256 * w),
        "you rounded each warp's registers down to a multiple of 256; round up: a warp cannot run with fewer registers "
        "than its threads need, so 1856 is granted as 2048, not 1792, and rounding down counts programs that do not fit",
    ),
    (
        lambda n, w, r, ws: r // _round_up(n * ws * w),
        "round each warp's registers up, not the whole program's: every warp takes whole chunks of 256 of its own, so "
        "2 warps of 1856 registers take 2 x 2048 = 4096, not 3712 rounded up to 3840",
    ),
    (
        lambda n, w, r, ws: r // _round_up(n * ws),
        "a program has num_warps warps: divide by the registers of all of them, the rounded registers of a warp times "
        "num_warps",
    ),
    (
        lambda n, w, r, ws: r // (_round_up(n * w)),
        "a warp has warp_size threads, each with n_regs registers: a warp needs n_regs * warp_size of them",
    ),
    (
        lambda n, w, r, ws: -(-r // (_round_up(n * ws) * w)),
        "round the last division down: only whole programs can be resident, and a part of one does not run",
    ),
    (
        lambda n, w, r, ws: max(1, r // (_round_up(n * ws) * w)),
        "a program that needs more registers than the SM has cannot be resident at all: the answer is 0, not 1",
    ),
]
CASES_5_2 = [(58, 1), (23, 8), (180, 4), (255, 1), (32, 32), (128, 16), (129, 16), (25, 4), (71, 2)]


def _trial_5_2(programs_by_registers) -> str:
    answers = []
    for n_regs, w in CASES_5_2:
        got = call_attempt(programs_by_registers, n_regs, w, 65536, 32)
        if isinstance(got, float) and not got.is_integer():
            raise Wrong(
                f"n_regs = {n_regs}, num_warps = {w}: you gave {got}, a fraction of a program: divide with "
                f"// (integer division), since only whole programs can be resident"
            )
        answers.append(_int(got, "the number of programs"))
    right = [programs_by_registers_answer(n, w) for n, w in CASES_5_2]
    if answers == right:
        return "e.g. 58 registers, 1 warp: 58 x 32 = 1856 -> 2048 per warp, 65536 // 2048 = 32"
    hint = next(
        (hint for mistake, hint in MISTAKES_5_2 if answers == [mistake(n, w, 65536, 32) for n, w in CASES_5_2]),
        "count the registers of one warp (n_regs * warp_size, rounded up to a multiple of 256), times "
        "num_warps for a program, and divide the SM's registers by that",
    )
    i = next(i for i, (a, b) in enumerate(zip(answers, right)) if a != b)
    raise Wrong(
        f"n_regs = {CASES_5_2[i][0]}, num_warps = {CASES_5_2[i][1]}: you gave {answers[i]}, expected {right[i]} "
        f"({hint})"
    )


def check_5_2(programs_by_registers) -> None:
    """Exercise 5.2: ``programs_by_registers(n_regs, num_warps, regs_per_sm, warp_size)``."""
    check("5.2", "programs per SM from registers", programs_by_registers, _trial_5_2)


def waves_answer(num_programs: int, resident: int) -> tuple[int, int]:
    """(waves, programs in the last wave) when ``num_programs`` programs run ``resident`` at a time."""
    return (n := -(-num_programs // resident)), num_programs - (n - 1) * resident


def _trial_5_3(waves) -> str:
    for n, r in [(65536, 2112), (2112, 2112), (132, 2112), (4224, 2112), (4225, 2112), (1, 1), (1000, 7)]:
        got = call_attempt(waves, n, r)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise Wrong(f"return a pair (waves, programs in the last wave), got {type(got).__name__}")
        w, last = _int(got[0], "waves"), _int(got[1], "programs in the last wave")
        if (w, last) != (want := waves_answer(n, r)):
            hint = (
                " (a partial wave is still a wave: round up)"
                if w == n // r and n % r
                else " (when the programs divide evenly, the last wave is full)"
                if last == 0 and n % r == 0
                else ""
            )
            raise Wrong(f"{n} programs, {r} resident: you gave ({w}, {last}), expected {want}{hint}")
    return "65536 rows at 2112 resident: 32 waves, the last one 64 programs (3% of the GPU)"


def check_5_3(waves) -> None:
    """Exercise 5.3: ``waves(num_programs, resident)`` returns (waves, programs in the last wave)."""
    check("5.3", "waves", waves, _trial_5_3)


def _limits(n_regs, shared, w, p, *, reserve=True, rounded=True, warp_threads=True, blocks=True) -> dict:
    """The four limits in programs per SM, or the same with one plausible mistake (for the hints)."""
    per_warp = warp_registers(n_regs, p["warp_size"]) if rounded else n_regs * p["warp_size"]
    smem = shared + (p.get("reserved_shared_per_block", 0) if reserve else 0)
    return {
        "registers": p["regs_per_sm"] // (per_warp * w),
        "shared memory": p["shared_per_sm"] // smem if smem else math.inf,
        "threads": p["max_threads_per_sm"] // (w * (p["warp_size"] if warp_threads else 1)),
        "blocks": p["max_blocks_per_sm"] if blocks else math.inf,
    }


def _binding(limits: dict, pick=min) -> set:
    return {k for k, x in limits.items() if x == pick(limits.values())}


#: A plausible mistake of exercise 5.4, the answers it gives, and the hint that names it.
MISTAKES_5_4 = [
    (
        dict(reserve=False),
        min,
        "count the shared memory the driver reserves for every program, "
        "props['reserved_shared_per_block'], on top of the kernel's own",
    ),
    (dict(rounded=False), min, "round each warp's registers up to a multiple of 256 (exercise 5.2)"),
    (dict(warp_threads=False), min, "a program of num_warps warps has num_warps * props['warp_size'] threads"),
    (dict(blocks=False), min, "an SM also holds at most props['max_blocks_per_sm'] programs, however small"),
    (dict(), max, "the limit that binds is the one that allows the fewest programs: take the smallest"),
]
CASES_5_4 = [
    (72, 12288, 1),
    (23, 32, 8),
    (180, 16, 4),
    (96, 10240, 1),
    (41, 9376, 2),
    (55, 16392, 2),
    (199, 49152, 1),
    (24, 8256, 16),
    (58, 0, 1),
    (255, 196608, 2),
    (40, 1024, 2),
    (16, 16, 1),
]


def _trial_5_4(binding_limit) -> str:
    props, answers = device_props(live=False)[0], []
    for i, (n_regs, shared, w) in enumerate(CASES_5_4):
        try:
            got = call_attempt(binding_limit, n_regs, shared, w, dict(props))
        except ZeroDivisionError:
            if shared == 0 and i > 0:  # a kernel with no shared memory of its own still takes the reserve
                raise Wrong(
                    f"n_regs = {n_regs}, shared = 0, num_warps = {w}: your code divided by zero; {MISTAKES_5_4[0][2]}"
                ) from None
            raise
        if not isinstance(got, str) or got not in LIMIT_NAMES:
            raise Wrong(
                f"return the name of the limit, one of {list(LIMIT_NAMES)}; got {got!r}, which is not one of them"
            )
        answers.append(got)
    right = [_binding(_limits(*c, props)) for c in CASES_5_4]
    if all(a in ok for a, ok in zip(answers, right)):
        return f"you met {len(set(answers))} different limits: {', '.join(sorted(set(answers)))}"
    hint = next(
        (
            hint
            for kw, pick, hint in MISTAKES_5_4
            if all(a in _binding(_limits(*c, props, **kw), pick) for a, c in zip(answers, CASES_5_4))
        ),
        "compute each limit as a number of programs per SM and take the smallest",
    )
    i = next(i for i, (a, ok) in enumerate(zip(answers, right)) if a not in ok)
    (n_regs, shared, w), lim, want = CASES_5_4[i], _limits(*CASES_5_4[i], props), sorted(right[i])[0]
    raise Wrong(
        f"n_regs = {n_regs}, shared = {shared}, num_warps = {w}: you said {answers[i]!r}, which allows "
        f"{lim[answers[i]]} programs, but {want!r} allows only {lim[want]} ({hint})"
    )


def check_5_4(binding_limit) -> None:
    """Exercise 5.4: ``binding_limit(n_regs, shared, num_warps, props)`` names the limit that binds."""
    check("5.4", "which limit binds", binding_limit, _trial_5_4)
