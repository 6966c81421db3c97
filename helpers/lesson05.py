"""Lesson 05 · A persistent softmax sized from the compiled kernel, and where the time goes. Only what a learner
need not read: live GPU measurements (``*_rows``, also recorded by ``python tools/bench.py``; ``live`` makes them
the DataFrames the lesson loads on the CPU) and the figures; the checkers of exercises 5.1 to 5.4 are in
``helpers.lesson05_exercises``."""

from __future__ import annotations

import itertools
import math

import pandas as pd
import torch
import triton

from . import data, plots
from . import kernels as K
from .device import api_occupancy, gpu_props, occupancy, warp_registers
from .gpu_data import device_props, provenance
from .kernels import persistent_plan, softmax_persistent, softmax_persistent_kernel
from .measure import DTYPES, device_facts, eager_ms, gpu_ms, host_us, require_gpu
from .plots import label, set_n_axis
from .rowwise import Rows, acc_dtype
from .triton_compat import raw_launcher, raw_stream

PEERS = ("torch_softmax", "torch_compile", "triton_tutorial", "liger")


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
