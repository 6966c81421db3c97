"""Shared plotting style and saving; lesson-specific plots live in helpers/lessonNN.py. Every plot
function returns a Figure: ``show(fig)`` displays it in a notebook (and closes it, so nothing is
printed twice), ``save(fig, name)`` writes ``figures/<name>.png`` (``make figures`` does every one).
"""

from __future__ import annotations

import base64
import io

import matplotlib

matplotlib.use("Agg") if not matplotlib.get_backend().lower().startswith(
    ("module://matplotlib_inline", "inline")
) else None
import matplotlib.pyplot as plt  # noqa: E402

from .gpu_data import FIGURES_DIR  # noqa: E402

#: One color per provider/kernel, the same in every figure of the course.
COLORS = {
    "copy": "#444444",
    "torch_naive": "#d62728",
    "naive": "#d62728",
    "torch_softmax": "#1f77b4",
    "torch_compile": "#17becf",
    "fused": "#ff7f0e",
    "three_pass": "#bcbd22",
    "online": "#2ca02c",
    "persistent": "#9467bd",
    "softmax": "#000000",
    "split": "#e377c2",
    "split_coop": "#8c564b",
    "tiled": "#7f7f7f",
    "triton_tutorial": "#e6ab02",
    "liger": "#7570b3",
}

#: How each provider is named in tables and legends, the same in every lesson.
LABELS = {
    "copy": "copy (y.copy_(x))",
    "torch_naive": "naive PyTorch (01)",
    "torch_softmax": "torch.softmax",
    "torch_compile": "torch.compile(naive)",
    "triton_tutorial": "Triton tutorial",
    "liger": "Liger-Kernel",
    "fused": "fused (03)",
    "three_pass": "three-pass (04)",
    "online": "online (04)",
    "persistent": "persistent (05)",
    "tiled": "tiled (05)",
    "softmax": "helpers.softmax",
    "split": "split, two launches (06)",
    "split_coop": "split, cooperative (06)",
}


def label(provider: str) -> str:
    """The display name of a provider (its own name when unknown)."""
    return LABELS.get(provider, provider)


def color(provider: str) -> str:
    """The provider's color, the same in every figure (grey when unknown)."""
    return COLORS.get(provider, "#7f7f7f")


def n_label(n: int) -> str:
    """256, 1K, 12.4K, 1M: a column count for an axis."""
    if n >= 2**20 and n % 2**20 == 0:
        return f"{n // 2**20}M"
    if n >= 1024:
        return f"{n // 1024}K" if n % 1024 == 0 else f"{n / 1024:.1f}K"
    return str(n)


def set_n_axis(ax, ns, label_text: str = "N (columns per row)") -> None:
    """A log2 x axis ticked at the given column counts."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(ns))
    pow2 = [n for n in ns if n & (n - 1) == 0]
    # label powers of two only when they are most of the ticks (12672 would crowd 16384)
    ax.set_xticklabels([n_label(n) if (n in pow2 or len(pow2) < len(ns) / 2) else "" for n in ns])
    ax.minorticks_off()
    ax.set_xlabel(label_text)


STYLE = {
    "figure.dpi": 100,
    "savefig.dpi": 120,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "font.size": 10,
    "svg.hashsalt": "softmax-course",
}
plt.rcParams.update(STYLE)


def new_figure(width: float = 7.0, height: float = 3.6, ncols: int = 1):
    """A figure and its axes in the course style."""
    fig, axes = plt.subplots(1, ncols, figsize=(width, height), constrained_layout=True)
    return fig, axes


def save(fig, name: str):
    """Write ``figures/<name>.png`` (deterministic metadata) and return its path."""
    FIGURES_DIR.mkdir(parents=True, exist_ok=True)
    path = FIGURES_DIR / f"{name}.png"
    fig.savefig(path, metadata={"Software": None})
    return path


def png_bytes(fig) -> bytes:
    """The figure as PNG bytes, with no software/version metadata (stable across machines)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def show(fig):
    """Display a figure in a notebook as a PNG only (no "<Figure ...>" text), and close it.
    Works under any matplotlib backend, Agg included."""
    try:
        from IPython.display import display

        display({"image/png": base64.b64encode(png_bytes(fig)).decode("ascii")}, raw=True)
    finally:
        plt.close(fig)


def rescale_bars(
    ax,
    blocks,
    old,
    alpha,
    added,
    first,
    name: str,
    factor: str = "×",
    ticks=None,
    rescaled_label: str | None = None,
    added_label: str = "+ this block's sum",
    headroom: float = 1.25,
):
    """The online update of a running sum, one group of bars per block (lessons 04 and 07): the sum
    before the block (hatched), the same sum times the rescale factor, and the block's own sum on top.
    ``first`` marks blocks with no rescale to print (the first finite maximum)."""
    rescaled = [o * a for o, a in zip(old, alpha)]
    new = [r + a for r, a in zip(rescaled, added)]
    ax.bar(
        [i - 0.2 for i in blocks],
        old,
        width=0.35,
        color="white",
        edgecolor="#888888",
        hatch="//",
        label=f"{name} before the block",
    )
    ax.bar(
        [i + 0.2 for i in blocks],
        rescaled,
        width=0.35,
        color="#c7e9c0",
        edgecolor="#555555",
        label=rescaled_label or f"{name} {factor} rescale",
    )
    ax.bar(
        [i + 0.2 for i in blocks],
        added,
        width=0.35,
        bottom=rescaled,
        color=COLORS["online"],
        edgecolor="#555555",
        label=added_label,
    )
    top = max(max(new), max(old))
    for i, o, a, n, f in zip(blocks, old, alpha, new, first):
        ax.text(i + 0.2, n + top * 0.03, f"{name} = {n:.3f}", ha="center", fontsize=8.5)
        if not f:
            ax.text(i - 0.2, o + top * 0.03, f"{factor} {a:.3f}", ha="center", fontsize=8.5, color="#555555")
    ax.set_xticks(blocks)
    if ticks is not None:
        ax.set_xticklabels(ticks)
    ax.set_ylim(0, top * headroom)
