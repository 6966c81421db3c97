"""Lesson 04 · Online softmax: the online trace (exercise 4.1's answer in plain Python, kept out of the
notebook above the exercise) and its figure, the live ``rows_grow_rows`` and its figure (the checkers of
exercises 4.1 to 4.3: ``helpers.lesson04_exercises``). Tables and numbers: the notebook."""

from __future__ import annotations

import math

import pandas as pd
import torch

from . import data, plots
from .kernels import softmax_fused, softmax_online, softmax_three_pass
from .measure import DTYPES, measure_shape, require_gpu
from .reference import NEG_INF

# ---- The online trace and its figure. The worked example: three blocks of four whose maxima are 3, 5 and 2.
TRACE_ROW = [1.0, 3.0, 0.0, 2.0, 5.0, 1.0, 4.0, 2.0, 2.0, 0.0, 1.0, -1.0]
TRACE_BLOCK = 4


def online_trace(x, block_size: int, rescale: bool = True) -> pd.DataFrame:
    """The online (max, sum) pass over a 1-D ``x`` in blocks, in float64: one row per block with the running
    max before and after, the rescale factor and the running sum (nothing to rescale or add while all seen
    is -inf, as in the kernel); ``rescale=False`` shows what goes wrong without the factor."""
    x = torch.as_tensor(x).detach().cpu().to(torch.float64)
    if (
        x.dim() != 1
        or x.numel() == 0
        or isinstance(block_size, bool)
        or not isinstance(block_size, int)
        or block_size < 1
    ):
        raise ValueError(
            f"online_trace: x must be a non-empty 1-D tensor (got shape {tuple(x.shape)}) and block_size "
            f"a positive int (got {block_size!r})."
        )
    m, d, steps = NEG_INF, 0.0, []
    for start in range(0, x.numel(), block_size):
        block = x[start : start + block_size]
        m_new = max(m, float(block.max()))
        if m_new == NEG_INF:
            alpha, block_sum = 1.0, 0.0
        else:
            alpha = math.exp(m - m_new) if rescale else 1.0
            block_sum = float(torch.exp(block - m_new).sum())
        steps.append(
            {
                "block": len(steps) + 1,
                "values": block.tolist(),
                "block_max": float(block.max()),
                "m_old": m,
                "m_new": m_new,
                "alpha": alpha,
                "d_old": d,
                "d_rescaled": d * alpha,
                "block_sum": block_sum,
                "d_new": d * alpha + block_sum,
            }
        )
        m, d = m_new, d * alpha + block_sum
    return pd.DataFrame(steps).set_index("block")


def plot_trace(trace: pd.DataFrame | None = None):
    """Left: the row's values by block, the block maxima and the running max. Right: the running
    sum per block, the old sum shrunk by the rescale factor plus the block's own sum."""
    trace = online_trace(torch.tensor(TRACE_ROW), TRACE_BLOCK) if trace is None else trace
    steps = trace.reset_index().to_dict("records")
    fig, (ax1, ax2) = plots.new_figure(10.5, 3.9, ncols=2)
    palette = ["#9ecae1", "#fdae6b", "#a1d99b", "#bcbddc", "#fc9272", "#c7e9c0"]
    pos, run_x, run_m = 0, [], []
    for i, s in enumerate(steps):
        n = len(s["values"])
        xs = list(range(pos, pos + n))
        ax1.bar(
            xs,
            [v if v != NEG_INF else 0.0 for v in s["values"]],
            color=palette[i % len(palette)],
            edgecolor="#555555",
            lw=0.5,
            label=f"block {s['block']}",
        )
        k = max(range(n), key=lambda j: s["values"][j])
        ax1.plot([xs[k]], [s["values"][k]], "v", color="#333333", ms=6)
        run_x += [pos - 0.5, pos + n - 0.5]
        run_m += [s["m_new"], s["m_new"]]
        ax1.text(
            pos + n / 2 - 0.5,
            s["m_new"] + 0.35,
            f"m = {s['m_new']:g}",
            ha="center",
            fontsize=9,
            color=plots.COLORS["online"],
        )
        if i:
            ax1.axvline(pos - 0.5, color="#aaaaaa", lw=0.8, ls=":")
        pos += n
    ax1.plot(run_x, run_m, "-", color=plots.COLORS["online"], lw=2, label="running max m")
    ax1.plot([], [], "v", color="#333333", ms=6, label="block max")
    ax1.set(xlabel="position in the row", ylabel="x")
    finite = [v for s in steps for v in s["values"] if v != NEG_INF]
    ax1.set_ylim(min(0, min(finite)) - 0.5, max(s["m_new"] for s in steps) + 2.4)
    ax1.set_title("The running max after each block", fontsize=10)
    ax1.legend(frameon=False, fontsize=8, loc="upper left", ncols=3, columnspacing=1.0, handlelength=1.5)
    plots.rescale_bars(
        ax2,
        list(range(len(steps))),
        [s["d_old"] for s in steps],
        [s["alpha"] for s in steps],
        [s["block_sum"] for s in steps],
        [s["m_old"] == NEG_INF for s in steps],
        "d",
        ticks=[f"block {s['block']}\nmax {s['block_max']:g}" for s in steps],
    )
    ax2.set(ylabel="running sum d = Σ exp(x − m)")
    ax2.set_title("The running sum: rescale, then add", fontsize=10)
    ax2.legend(frameon=False, fontsize=8, loc="upper left")
    return fig


# ---- Bandwidth as rows grow: the live measurement and its figure
ROWS_GROW_PROVIDERS = ("copy", "torch_softmax", "fused", "three_pass", "online")


def rows_grow_rows(dtype_name: str = "float32", total_bytes: int = 2**28) -> list[dict]:
    """Measure torch.softmax, the fused kernel and the looped kernels as rows grow past what fits on
    chip, at a fixed total size (GPU only; ``helpers.measure`` columns, the copy included)."""
    require_gpu("rows_grow_rows")
    dtype = DTYPES[dtype_name]
    provs = {
        "torch_softmax": lambda x: torch.softmax(x, dim=-1),
        "fused": softmax_fused,
        "three_pass": softmax_three_pass,
        "online": softmax_online,
    }
    rows = []
    for N in (2**k for k in range(10, 21)):
        rows += measure_shape(max(1, total_bytes // (N * dtype.itemsize)), N, dtype, provs, quick=True, host=False)
    return rows


def plot_rows_grow(grow: pd.DataFrame | None = None, dtype: str = "float32"):
    """Fraction of copy (GPU time) against N (M·N fixed) for torch.softmax, the fused kernel and the
    looped kernels, with the bounds the looped kernels' traffic sets when every pass goes to DRAM."""
    grow = data.load("rows_grow") if grow is None else grow
    d = grow[grow["dtype"] == dtype]
    table = d.pivot_table(index="N", columns="provider", values="graph_frac")
    ns = sorted(d["N"].unique())
    fig, ax = plots.new_figure(8.0, 4.0)
    ax.axhline(1.0, color=plots.COLORS["copy"], ls="--", lw=1.2, label="y.copy_(x)")
    for frac, k, txt in (
        (2 / 3, "online", "online's traffic bound: 2MN / 3MN"),
        (1 / 2, "three_pass", "three-pass bound: 2MN / 4MN"),
    ):
        ax.axhline(frac, color=plots.COLORS[k], ls=":", lw=1.2)
        ax.text(ns[0], frac + 0.015, txt, fontsize=8, color=plots.COLORS[k])
    for p in ROWS_GROW_PROVIDERS[1:]:
        if p in table:
            s = table[p].dropna()
            ax.plot(
                s.index,
                s.values,
                "o-",
                color=plots.COLORS.get(p, "#777777"),
                ms=4,
                lw=2.2 if p in ("online", "fused") else 1.5,
                label=plots.label(p),
            )
    refused = sorted(d.loc[(d["provider"] == "fused") & d["graph_frac"].isna(), "N"])
    if refused:
        ax.axvspan(refused[0] / 1.4, ns[-1] * 1.3, color="#f0f0f0", zorder=0)
        ax.text(refused[0], 1.04, "fused refuses (row too long)", fontsize=8, color="#777777")
    plots.set_n_axis(ax, ns, "N (columns per row; M·N fixed)")
    ax.set(xlim=(ns[0] / 1.3, ns[-1] * 1.3), ylim=(0, 1.12), ylabel="fraction of copy (GPU time)")
    ax.set_title(f"Looped kernels as rows grow, {dtype}, {data.gpu(grow)}", fontsize=10)
    ax.legend(frameon=False, fontsize=8, loc="lower left", ncols=2)
    return fig


FIGURES = {"04_online_trace": plot_trace, "04_rows_grow": plot_rows_grow}  # by the names plots.save writes
