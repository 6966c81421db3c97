"""Plots of the benchmark sweep (``figures/data/bench_<gpu>.csv``, the lessons' GPU by default): GB/s
in GPU time against N with the copy ceiling drawn, and the few-long-rows shapes as fractions of
copy in GPU time. Used by ``make bench``, ``make figures`` and the README."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # helpers, from this checkout

import helpers  # noqa: E402,F401  (first: interpreter or GPU)
from helpers.gpu_data import bench, ok
from helpers.plots import COLORS, new_figure
from helpers.plots import LABELS as _LABELS

#: Providers drawn, in legend order (labels as in every figure of the course).
LABELS = {
    p: _LABELS[p]
    for p in (
        "copy",
        "torch_naive",
        "torch_softmax",
        "torch_compile",
        "triton_tutorial",
        "liger",
        "fused",
        "online",
        "persistent",
        "split",
        "split_coop",
        "softmax",
    )
}


def plot_bandwidth_vs_n(rows=None, meta=None, M: int = 4096, providers=None):
    """GB/s against N at M rows, one panel per dtype, the copy ceiling dashed."""
    if rows is None:
        rows, meta = bench()
    dtypes = [d for d in ("float32", "bfloat16", "float16") if any(r["dtype"] == d for r in rows)]
    fig, axes = new_figure(width=11, height=4.2, ncols=len(dtypes))
    axes = axes if len(dtypes) > 1 else [axes]
    providers = providers or [p for p in LABELS if any(r["provider"] == p for r in rows)]
    for ax, d in zip(axes, dtypes):
        for p in providers:
            pts = sorted(
                (r["N"], r["graph_gbps"])
                for r in rows
                if r["dtype"] == d and r["M"] == M and r["provider"] == p and ok(r, "graph_gbps")
            )
            if not pts:
                continue
            xs, ys = zip(*pts)
            style = dict(color=COLORS.get(p, None), label=LABELS.get(p, p), marker="o", ms=3, lw=1.6)
            if p == "copy":
                style.update(ls="--", marker=None, lw=2)
            if p == "softmax":
                style.update(lw=2.6)
            ax.plot(xs, ys, **style)
        ax.set_xscale("log", base=2)
        ax.set_xlabel(f"N (columns), M = {M} rows")
        ax.set_ylabel("GB/s (2·M·N·bytes / GPU time)")
        ax.set_title(d)
    axes[-1].legend(fontsize=8, loc="lower right")
    if meta:
        fig.suptitle(
            f"Forward softmax on {meta.get('gpu', '?')} (torch {meta.get('torch', '?')}, Triton {meta.get('triton', '?')})",
            fontsize=10,
        )
    return fig


def plot_long_rows(rows=None, meta=None, providers=None):
    """Fraction of copy bandwidth at the few-long-rows shapes, grouped bars per shape."""
    if rows is None:
        rows, meta = bench()
    shapes = sorted(
        {(r["M"], r["N"]) for r in rows if r["N"] > 32768 and r["M"] in (1024, 256, 64, 8)}, key=lambda s: s[1]
    )
    dtypes = [d for d in ("float32", "bfloat16") if any(r["dtype"] == d for r in rows)]
    providers = providers or [
        p for p in LABELS if p != "copy" and any(r["provider"] == p and r["N"] > 32768 and ok(r) for r in rows)
    ]
    fig, axes = new_figure(width=11, height=4.2, ncols=len(dtypes))
    axes = axes if len(dtypes) > 1 else [axes]
    width = 0.8 / max(1, len(providers))
    for ax, d in zip(axes, dtypes):
        for i, p in enumerate(providers):
            vals = []
            for M, N in shapes:
                r = next(
                    (r for r in rows if r["dtype"] == d and r["M"] == M and r["N"] == N and r["provider"] == p), None
                )
                vals.append(r["graph_frac"] if r is not None and ok(r) else 0.0)
            ax.bar(
                [j + i * width for j in range(len(shapes))], vals, width, color=COLORS.get(p), label=LABELS.get(p, p)
            )
        ax.axhline(1.0, color=COLORS["copy"], ls="--", lw=1.5)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(shapes))], [f"{M}×{N}" for M, N in shapes], fontsize=8)
        ax.set_ylabel("fraction of copy (GPU time)")
        ax.set_ylim(0, 1.15)
        ax.set_title(f"{d}: few, long rows")
    axes[-1].legend(fontsize=8, loc="upper right")
    return fig


FIGURES = {"bench_bandwidth": plot_bandwidth_vs_n, "bench_long_rows": plot_long_rows}
