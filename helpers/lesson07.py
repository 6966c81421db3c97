"""Lesson 07 · From online softmax to attention: the float64 yardstick, the figures and the live GPU
measurement (``attention_rows``); the checkers of exercises 7.1 to 7.3 are in ``helpers.lesson07_exercises``.
The tables, the tolerances and the numbers are in the notebook."""

from __future__ import annotations

import functools
import itertools
import math

import torch
import torch.nn.functional as F

from . import measure, plots
from .kernels import attention, naive_attention
from .kernels.attention import attention_call, attention_plan
from .mode import DEVICE
from .reference import NEG_INF, reference_attention  # noqa: F401 (its cells call lesson07.reference_attention)


def plot_attention_trace(steps: list[dict], V: torch.Tensor):
    """Left: the scores by block and the running max. Middle: the running sum l, rescaled, then the
    block's sum added. Right: the values v_j and o / l after each block. ``steps``: one dict per block
    with block, keys (first, last), scores, m_old, m_new, alpha, p, l_old and out (o / l)."""
    V = V.detach().cpu().to(torch.float64)
    fig, (ax1, ax2, ax3) = plots.new_figure(13.0, 4.0, ncols=3)
    palette, xs_run, m_run, online = (
        ["#9ecae1", "#fdae6b", "#a1d99b", "#bcbddc", "#fc9272"],
        [],
        [],
        plots.COLORS["online"],
    )
    for st in steps:
        (a, b), m = st["keys"], st["m_new"]
        ax1.bar(
            range(a, b + 1),
            st["scores"],
            color=palette[st["block"] % 5],
            edgecolor="#555555",
            lw=0.5,
            label=f"block {st['block'] + 1}",
        )
        xs_run, m_run = xs_run + [a - 0.5, b + 0.5], m_run + [m, m]
        ax1.text((a + b) / 2, m + 0.3, f"m = {m:g}", ha="center", fontsize=9, color=online)
    ax1.plot(xs_run, m_run, "-", color=online, lw=2, label="running max m")
    ax1.set(
        xlabel="key j",
        ylabel="score s_j = q . k_j",
        ylim=(0, max(m_run) + 1.8),
        title="Scores by block, and the running max",
    )
    ax1.legend(frameon=False, fontsize=8, loc="upper left", ncols=2)

    idx = [st["block"] for st in steps]
    plots.rescale_bars(
        ax2,
        idx,
        [st["l_old"] for st in steps],
        [st["alpha"] for st in steps],
        [float(st["p"].sum()) for st in steps],
        [st["m_old"] == NEG_INF for st in steps],
        "l",
        "x",
        ticks=[f"block {i + 1}\nm = {st['m_new']:g}" for i, st in zip(idx, steps)],
        rescaled_label="l x alpha (o x alpha too)",
        added_label="+ this block's sum of e^(s - m)",
        headroom=1.35,
    )
    ax2.set_ylabel("running sum l")
    ax2.set_title("l (and o): rescale, then add the block", fontsize=10)
    ax2.legend(frameon=False, fontsize=8, loc="upper left")

    ax3.scatter(V[:, 0], V[:, 1], s=40, color="#bbbbbb", edgecolor="#555555", zorder=2)
    for j, (x, y) in enumerate(V.tolist()):
        ax3.annotate(f"v{j}", (x, y), textcoords="offset points", xytext=(6, 4), fontsize=8.5, color="#555555")
    pts = [st["out"].tolist() for st in steps]
    ax3.plot([p[0] for p in pts], [p[1] for p in pts], "-", color=plots.COLORS["online"], lw=1.5, zorder=3)
    offsets = [(8, 6), (-30, -22), (10, -16)]
    for st, p in zip(steps, pts):
        last = st is steps[-1]
        ax3.plot(
            *p,
            "*" if last else "o",
            ms=14 if last else 7,
            color="#000000" if last else plots.COLORS["online"],
            zorder=4,
        )
        ax3.annotate(
            f"after block {st['block'] + 1}",
            p,
            textcoords="offset points",
            fontsize=8.5,
            xytext=offsets[st["block"]] if st["block"] < len(offsets) else (8, -12),
        )
    ax3.set(xlabel="output, component 1", ylabel="output, component 2")
    ax3.set_title("o / l: attention over the keys seen so far", fontsize=10)
    ax3.set_aspect("equal", adjustable="datalim")
    return fig


FULL, MASKED, SKIPPED = "no mask", "masked", "skipped"


def tile_kinds(seq_q: int, seq_k: int, block_m: int, block_n: int, causal: bool) -> list[list[str]]:
    """Per (query block, key block): FULL, MASKED or SKIPPED, by ``attention_fwd_kernel``'s n_full and end."""
    grid = []
    for i in range(-(-seq_q // block_m)):
        n_full, end = seq_k // block_n * block_n, seq_k
        if causal:
            n_full, end = min(n_full, (i * block_m + 1) // block_n * block_n), min(seq_k, (i + 1) * block_m)
        grid.append([FULL if j < n_full else MASKED if j < end else SKIPPED for j in range(0, seq_k, block_n)])
    return grid


def tile_counts(seq_q: int, seq_k: int, block_m: int, block_n: int, causal: bool) -> dict:
    kinds = [k for row in tile_kinds(seq_q, seq_k, block_m, block_n, causal) for k in row]
    return {kind: kinds.count(kind) for kind in (FULL, MASKED, SKIPPED)} | {"total": len(kinds)}


def plot_tiles(cases=((300, 400, 128, 64, False), (512, 512, 128, 64, True))):
    """The (query block, key block) tiles of each case: computed without a mask, with one, skipped."""
    colors = {FULL: "#a1d99b", MASKED: "#fdae6b", SKIPPED: "#f0f0f0"}
    fig, axes = plots.new_figure(10.5, 3.6, ncols=len(cases))
    for ax, (sq, sk, bm, bn, causal) in zip(axes, cases):
        for i, row in enumerate(tile_kinds(sq, sk, bm, bn, causal)):
            for j, kind in enumerate(row):
                ax.add_patch(
                    plots.plt.Rectangle(
                        (j * bn, i * bm),
                        min(bn, sk - j * bn),
                        min(bm, sq - i * bm),
                        facecolor=colors[kind],
                        edgecolor="#555555",
                        lw=0.8,
                    )
                )
        if causal:
            ax.plot([0, min(sq, sk)], [0, min(sq, sk)], color="#d62728", lw=1.2)
        ax.set(xlim=(0, sk), ylim=(sq, 0), aspect="equal", xlabel="keys", ylabel="queries")
        ax.grid(False)
        c = tile_counts(sq, sk, bm, bn, causal)
        ax.set_title(
            f"Sq = {sq}, Sk = {sk}, blocks {bm} x {bn}{', causal' if causal else ''}\n"
            f"{c[FULL]} without mask, {c[MASKED]} masked, {c[SKIPPED]} skipped",
            fontsize=9.5,
        )
    handles = [plots.plt.Rectangle((0, 0), 1, 1, facecolor=col, edgecolor="#555555") for col in colors.values()]
    handles.append(plots.plt.Line2D([0], [0], color="#d62728", lw=1.2))
    labels = [f"computed, {k}" if k != SKIPPED else k for k in colors] + ["diagonal (key = query)"]
    fig.legend(handles, labels, loc="outside lower center", ncols=len(labels), frameon=False, fontsize=8.5)
    return fig


#: One color per provider of the attention sweep, the same in the lesson and its deep dive.
SWEEP_COLORS = {
    "course": "#000000",
    "course_pointer": "#7f7f7f",
    "tutorial": "#e6ab02",
    "sdpa": "#1f77b4",
    "sdpa_cudnn": "#9467bd",
    "sdpa_flash": "#17becf",
    "sdpa_efficient": "#8c564b",
    "naive": "#d62728",
}


def plot_sweep(tf, providers, failed=()):
    """TFLOP/s against S, one panel per (D, causal), one line per provider, the legend below the panels (where it
    hides no point). ``tf``: indexed by (D, causal, S), a column per provider, NaN where a provider has no timing;
    ``failed``: (D, causal, S, provider) of outputs that failed the float64 check, marked x on the axis."""
    failed = [tuple(f) for f in failed]
    fig, axes = plots.plt.subplots(2, 2, figsize=(10.5, 7.0), constrained_layout=True)
    for ax, ((D, causal), t) in zip(axes.flat, tf.groupby(level=["D", "causal"])):
        t = t.droplevel(["D", "causal"])
        for p in providers:
            ax.plot(t.index, t[p], marker="o", label=p, color=SWEEP_COLORS.get(p, "#7f7f7f"))
        for d, c, S, p in failed:
            if (d, c) == (D, causal) and p in providers:
                ax.plot(S, 0, "x", ms=9, mew=2, color=SWEEP_COLORS.get(p, "#7f7f7f"), clip_on=False, zorder=5)
        ax.set(
            ylim=(0, None),
            xlabel="S",
            ylabel="TFLOP/s (GPU time)",
            title=f"D = {D}, {'causal' if causal else 'not causal'}",
        )
        ax.set_xscale("log", base=2)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    if any(p in providers for *_, p in failed):
        handles.append(plots.plt.Line2D([], [], ls="", marker="x", mew=2, color="#555555"))
        labels.append("x: output failed the float64 check, not timed")
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 5), frameon=False, fontsize=9)
    return fig


def attention_rows(rounds: int = 3, seqs=(1024, 4096), dims=(64, 128), B: int = 4, H: int = 16) -> list[dict]:
    """On a GPU: fp16, B x H heads of S x D, causal or not; the course (on Hopper the tensor-descriptor
    kernel where tma_config names a tile), its pointer kernel forced (course_pointer), SDPA, its cuDNN
    backend and naive, each checked against SDPA, its peak memory, then GPU time in ``rounds`` rounds interleaved over them
    (medians and spreads), in the recording's columns (``tools/attention_bench.py`` records the full sweep)."""
    measure.require_gpu("helpers.lesson07.attention_rows()")
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def sdpa(q, k, v, causal):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def cudnn(q, k, v, causal):
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return sdpa(q, k, v, causal)

    def pointer(q, k, v, causal):  # the pointer kernel forced: its launcher, made once per shape
        return functools.partial(attention_call(attention_plan(q, k, v, causal, kernel="pointer"), q, k, v), q, k, v)

    impl = {"course": attention, "course_pointer": pointer, "sdpa": sdpa, "sdpa_cudnn": cudnn, "naive": naive_attention}
    rows = []
    for D, causal, S in itertools.product(dims, (False, True), seqs):
        q, k, v = (torch.randn(B, H, S, D, device=DEVICE, dtype=torch.float16) for _ in range(3))
        want, fns, mib, status = impl["sdpa"](q, k, v, causal), {}, {}, {}
        for p, f in impl.items():
            try:
                fn = f(q, k, v, causal) if p == "course_pointer" else functools.partial(f, q, k, v, causal=causal)
                err = (fn() - want).abs().max().item()
                status[p] = "ok" if err <= 1e-2 else f"wrong: max abs error {err:.3g} against SDPA"
            except RuntimeError as e:  # a backend that does not take these inputs
                status[p] = f"refused: {type(e).__name__}"
            if status[p] == "ok":
                fns[p], mib[p] = fn, measure.peak_mib(fn)
        timed, flops = measure.interleaved(fns, rounds), 4 * B * H * S * S * D / (2 if causal else 1)
        for p in impl:
            ms, spread = timed.get(p, (math.nan, math.nan))
            rows.append(
                dict(
                    dtype="float16",
                    B=B,
                    H=H,
                    S=S,
                    D=D,
                    causal=int(causal),
                    provider=p,
                    graph_ms=ms,
                    graph_tflops=flops / ms / 1e9,
                    graph_spread=spread,
                    peak_mib=mib.get(p, math.nan),
                    status=status[p],
                )
            )
    return rows
