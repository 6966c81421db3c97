"""Lesson 06 · Rows bigger than a chip: the slice statistics (shown in the lesson),
launch glue, the live measurements (``*_rows``, GPU only) and the figures (the checkers of 6.1-6.3:
``helpers.lesson06_exercises``)."""

from __future__ import annotations

import pandas as pd
import torch
import triton

from . import data, plots
from .kernels import (
    softmax_online,
    softmax_split,
    softmax_split_coop,
    softmax_split_coop_kernel,
    softmax_split_stats_kernel,
)
from .measure import DTYPES, measure_shape, providers, require_gpu
from .mode import DEVICE, ON_GPU
from .reference import slice_stats  # noqa: F401 (its cells call lesson06.slice_stats)
from .traffic import MIB, predicted_frac_answer  # noqa: F401 (its cells call lesson06.predicted_frac_answer)

#: The long-row shapes of the course's benchmark, and its held-out one (no configuration tuned on it).
LONG_SHAPES = ((1024, 65536), (256, 131072), (64, 262144), (8, 1048576))
HELD_OUT = (300, 100000)
#: The providers the lesson compares, in table order.
PROVIDERS = ["torch_softmax", "torch_compile", "online", "split", "split_coop", "softmax"]


def split_layout(n_cols: int, slices: int, block_size: int) -> tuple[int, int]:
    """(slice_len, n_slices) of ``softmax_split`` asked for ``slices``: whole blocks, so maybe fewer."""
    slice_len = triton.cdiv(triton.cdiv(n_cols, slices), block_size) * block_size
    return slice_len, triton.cdiv(n_cols, slice_len)


def launch_stats(x: torch.Tensor, slices: int, block_size: int) -> torch.Tensor:
    """Only the first launch of the two-launch split: the (rows, n_slices, 2) statistics of float32 ``x``."""
    if x.dim() != 2 or x.dtype != torch.float32:
        raise ValueError("launch_stats: x must be a 2-D float32 tensor.")
    x = x.to(DEVICE)
    slice_len, n_slices = split_layout(x.shape[1], slices, block_size)
    stats = torch.empty((x.shape[0], n_slices, 2), dtype=torch.float32, device=x.device)
    softmax_split_stats_kernel[(x.shape[0], n_slices)](
        stats, x, x.stride(0), x.stride(1), x.shape[1], slice_len, n_slices, BLOCK_SIZE=block_size
    )
    return stats


def run_coop_kernel(x: torch.Tensor, slice_cols: int, rows_per_round: int, max_spin: int, kernel=None):
    """The cooperative kernel itself (or ``kernel``, a copy with its arguments, edited in the lesson),
    spinning at most ``max_spin`` polls. Returns (y, published, gave_up): per row the slices whose pair
    was published (a word no longer 0), and the number of programs that gave up waiting."""
    M, N = x.shape
    n_slices = triton.cdiv(N, slice_cols)
    y = torch.full_like(x, float("nan"))
    ws = torch.zeros(2 * M * n_slices + 1, dtype=torch.int32, device=x.device)  # a word per slice, give-ups
    (kernel or softmax_split_coop_kernel)[(rows_per_round * n_slices,)](
        y,
        x,
        ws,
        x.stride(0),
        x.stride(1),
        y.stride(0),
        M,
        N,
        n_slices,
        rows_per_round,
        SLICE=slice_cols,
        SLICES_P2=triton.next_power_of_2(n_slices),
        MAX_SPIN=max_spin,
        **({"launch_cooperative_grid": True} if ON_GPU else {}),
    )
    words = ws[: 2 * M * n_slices].view(torch.int64).view(M, n_slices)
    return y, (words != 0).sum(dim=1), int(ws[-1])


def l2_rows(shapes=tuple((M, 65536) for M in (32, 64, 128, 256, 512, 1024)), dtype_name: str = "float32") -> list[dict]:
    """Copy, online and both split designs from 8 to 256 MiB (recorded as ``split_l2.csv``)."""
    require_gpu("l2_rows")
    provs = {"online": softmax_online, "split": softmax_split, "split_coop": softmax_split_coop}
    return [r for M, N in shapes for r in measure_shape(M, N, DTYPES[dtype_name], provs, host=False)]


def bench_rows(shapes=LONG_SHAPES + (HELD_OUT,), dtypes=("float32", "bfloat16")) -> list[dict]:
    """The lesson's providers at the long shapes, three rounds each (``make bench``'s method), and the
    fused kernel where the lesson shows it: float32, the benchmark's long shapes."""
    require_gpu("bench_rows")
    provs = {k: v for k, v in providers().items() if k in PROVIDERS + ["fused"]}
    no_fused = {k: v for k, v in provs.items() if k != "fused"}
    rows = []
    for d in dtypes:
        for M, N in shapes:
            shown = provs if d == "float32" and (M, N) in LONG_SHAPES else no_fused
            rows += measure_shape(M, N, DTYPES[d], shown, host=False)
    return rows


def plot_row_cut(M: int = 3, slices: int = 4):
    """M rows cut into slices, one program each, writing its (m, d) into the (M, slices, 2) tensor."""
    from matplotlib.patches import FancyArrowPatch, Rectangle

    fig, ax = plots.new_figure(10.0, 3.9)
    ax.set_axis_off()
    cmap = ["#c6dbef", "#9ecae1", "#6baed6", "#4292c6", "#2171b5", "#08519c"]
    h, gap, w, x0, cw = 0.62, 0.38, 1.55, 0.9, 0.78
    top, sx0 = (M - 1) * (h + gap), x0 + slices * w + 3.0
    for r in range(M):
        y = top - r * (h + gap)
        ax.text(x0 - 0.15, y + h / 2, f"row {r}", ha="right", va="center", fontsize=9)
        for s in range(slices):
            c = cmap[s % len(cmap)]
            ax.add_patch(Rectangle((x0 + s * w, y), w, h, facecolor=c, edgecolor="white", lw=2))
            ax.text(
                x0 + (s + 0.5) * w,
                y + h / 2,
                f"program ({r}, {s})",
                ha="center",
                va="center",
                fontsize=8,
                color="white" if s >= 3 else "black",
            )
            ax.add_patch(Rectangle((sx0 + s * cw, y), cw, h, facecolor=c, alpha=0.45, edgecolor="#333333", lw=0.8))
            ax.text(sx0 + (s + 0.5) * cw, y + h / 2, "m, d", ha="center", va="center", fontsize=8)
    for x, txt in (
        (x0 + slices * w / 2, f"one row: N columns, cut into {slices} slices of N/{slices}"),
        (sx0 + slices * cw / 2, f"statistics: ({M}, {slices}, 2) float32"),
    ):
        ax.text(x, top + h + 0.4, txt, ha="center", va="bottom", fontsize=9)
    y, mid = top - (h + gap), (x0 + slices * w + sx0) / 2
    for x, width in ((x0 + 2 * w, w), (sx0 + 2 * cw, cw)):
        ax.add_patch(Rectangle((x, y), width, h, facecolor="none", edgecolor="#d62728", lw=2))
    for a, b, yy, col, txt, va, ty in (
        (
            x0 + slices * w + 0.1,
            sx0 - 0.1,
            0.72,
            "#d62728",
            "launch 1: each program\nreduces its slice to (m, d)",
            "bottom",
            y + h + 0.05,
        ),
        (
            sx0 - 0.1,
            x0 + slices * w + 0.1,
            0.28,
            "#2ca02c",
            "launch 2: each program merges\nits row's pairs, then normalizes\nand writes its slice",
            "top",
            y - 0.05,
        ),
    ):
        ax.add_patch(
            FancyArrowPatch((a, y + h * yy), (b, y + h * yy), arrowstyle="-|>", mutation_scale=12, color=col, lw=1.4)
        )
        ax.text(mid, ty, txt, color=col, ha="center", va=va, fontsize=8)
    ax.set(xlim=(0, sx0 + slices * cw + 0.2), ylim=(-0.9, top + h + 1.2))
    ax.set_title(
        f"{M} rows x {slices} slices = {M * slices} programs, where one program per row gives {M}", fontsize=10
    )
    return fig


def plot_traffic():
    """DRAM traffic of each design in units of MN: read x, read it again (hatched: from L2), write y."""
    names = [
        "online (04)\none program per row",
        "split, two launches\nx larger than L2",
        "split, two launches\nx fits in L2",
        "split, cooperative\none launch",
    ]
    moved = pd.DataFrame(
        {
            "read x (DRAM)": 1,
            "read x again (DRAM)": [1, 1, 0, 0],
            "read x again (from L2: no DRAM)": [0, 0, 1, 0],
            "write y (DRAM)": 1,
        },
        index=names,
    )
    fig, ax = plots.new_figure(7.6, 3.6)
    moved.plot.bar(
        stacked=True,
        ax=ax,
        width=0.55,
        rot=0,
        color=["#7f9fc9", "#4f74a8", "white", "#e0915a"],
        ylabel="elements moved (units of MN)",
        ylim=(0, 4.1),
    )
    for bar in ax.containers[2]:  # the second read served by L2: hatched, no DRAM traffic
        bar.set(edgecolor="#4f74a8", hatch="///")
    for i, dram in enumerate(moved.sum(axis=1) - moved["read x again (from L2: no DRAM)"]):
        ax.text(i, moved.iloc[i].sum() + 0.08, f"{dram} MN from DRAM", ha="center", fontsize=9)
    ax.tick_params(axis="x", labelsize=8.5)
    ax.legend(loc="upper right", fontsize=8, frameon=False, ncols=2)
    ax.set_title("DRAM traffic of each design (the copy, the floor, moves 2 MN)", fontsize=10)
    return fig


def plot_l2_model(l2: pd.DataFrame, l2_bytes: int):
    """The model's fraction of copy against the size of x (lines) and the L2 sweep (markers; eager hollow)."""
    fig, ax = plots.new_figure(7.6, 4.3)
    size = l2.M * l2.N * 4 / MIB
    sizes, lim = sorted(size.unique()), l2_bytes / MIB
    lo, hi = sizes[0] / 1.4, sizes[-1] * 1.4
    ax.plot(
        [lo, lim, lim, hi],
        [1, 1, 2 / 3, 2 / 3],
        ls="--",
        lw=1.6,
        color=plots.color("split"),
        label="model: two launches",
    )
    ax.plot([lo, hi], [1.005, 1.005], ls=":", lw=1.8, color=plots.color("split_coop"), label="model: cooperative")
    for p, mk in (("split", "o"), ("split_coop", "s"), ("online", "^")):
        r = l2[l2.provider == p].assign(size=size).sort_values("size")
        ax.plot(r["size"], r.graph_frac, marker=mk, color=plots.color(p), lw=1.4, label=f"measured: {plots.label(p)}")
        ax.plot(
            r["size"], r.frac_of_copy, marker=mk, color=plots.color(p), lw=0.8, ls=(0, (1, 2)), markerfacecolor="white"
        )
    ax.plot(
        [], [], marker="o", color="#555555", markerfacecolor="white", ls=(0, (1, 2)), lw=0.8, label="(hollow: eager)"
    )
    ax.axvline(lim, color="#444444", lw=1)
    ax.text(lim * 0.96, 1.04, f"L2 = {lim:.0f} MiB", fontsize=8.5, ha="right")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [f"{s:.0f}" for s in sizes])
    ax.minorticks_off()
    ax.set(
        xlim=(lo, hi),
        ylim=(0, 1.1),
        xlabel="size of x (MiB), float32 rows of 65,536 columns",
        ylabel="fraction of copy",
    )
    ax.legend(loc="lower right", fontsize=7.5, frameon=False)
    ax.set_title(
        f"The all-or-nothing L2 model against the measurement, {l2.attrs['provenance'].get('gpu')}", fontsize=10
    )
    return fig


#: Figures of this lesson, by the name ``helpers.plots.save`` writes them under (from the recordings).
FIGURES = {
    "06_row_cut": lambda: plot_row_cut(),
    "06_traffic": lambda: plot_traffic(),
    "06_l2": lambda: plot_l2_model(data.load("split_l2"), int(data.load("device_props").l2_bytes.iloc[0])),
}
