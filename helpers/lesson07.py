"""Lesson 07 · From online softmax to attention.

What lives here: the memory and traffic of the materialised score matrix; the (m, l, o) update in
plain PyTorch (float64) with a printed and drawn trace over three K/V blocks, checked against
float64 attention after every block; the kernel's tiles (which are computed with or without a mask,
which are skipped); the correctness table against float64 ``scaled_dot_product_attention``; the
recorded GPU measurements (``figures/data/attention_h100.csv``, written by ``helpers.attention_bench``);
merging partial results by their log-sum-exp (split-K, FlashDecoding); and the checkers of
exercises 7.1 to 7.3.

Every checker prints exactly one line and never raises, whatever the learner wrote.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F

from . import gpu_data, plots
from .exercises import Wrong, call_attempt, check, expect_close, fmt, guarded, run_learner_kernel
from .kernels.attention import attention, attention_plan
from .mode import DEVICE, INTERPRETER, ON_GPU
from .reference import round_up_err

NEG_INF = float("-inf")
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453

# --------------------------------------------------------------------------------------------
# The float64 yardstick
# --------------------------------------------------------------------------------------------


def causal_mask(seq_q: int, seq_k: int, device=None) -> torch.Tensor:
    """Boolean (seq_q, seq_k): True where query i may see key j (j <= i), as SDPA's is_causal."""
    return torch.ones(seq_q, seq_k, dtype=torch.bool, device=device).tril()


def reference_attention(q, k, v, causal: bool = False, scale=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) in float64 on the CPU: ``scaled_dot_product_attention`` of the float64 inputs, and
    the natural-log log-sum-exp of each query's scaled (and masked) scores."""
    q64, k64, v64 = (t.detach().cpu().to(torch.float64) for t in (q, k, v))
    out = F.scaled_dot_product_attention(q64, k64, v64, is_causal=causal, scale=scale)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q64 @ k64.transpose(-2, -1)) * scale
    if causal:
        s = s.masked_fill(~causal_mask(s.shape[-2], s.shape[-1]), NEG_INF)
    return out, torch.logsumexp(s, dim=-1)


# --------------------------------------------------------------------------------------------
# Section 1: the score matrix's memory and traffic
# --------------------------------------------------------------------------------------------

#: Datasheet numbers (NVIDIA H100 SXM / H200 SXM): dense fp16/bf16 tensor-core TFLOP/s, HBM GB and TB/s.
GPUS = {"H100": {"memory_gb": 80, "tbps": 3.35, "tflops": 989}, "H200": {"memory_gb": 141, "tbps": 4.8, "tflops": 989}}


def memory_rows(seqs=(1024, 2048, 4096, 8192, 16384, 32768, 65536), heads: int = 64, d: int = 128,
                element_size: int = 2, block_m: int = 128) -> list[dict]:
    """Per sequence length S (Sq = Sk = S), for ``heads`` = batch x heads, in GB (1e9 bytes):
    - ``qkvo``: q, k, v and the output;
    - ``scores``: one (S, S) matrix per head; the naive version keeps two of them (scores and
      probabilities) alive at once, ``naive_peak`` = qkvo + 2 x scores;
    - ``flash_peak``: qkvo plus the float32 log-sum-exp (nothing S x S);
    - traffic to and from DRAM: ``naive_traffic`` (q, k, v read, scores written, read, probabilities
      written, read, out written), ``flash_traffic`` (q read and out written once; k and v read once
      per block of ``block_m`` queries, if no cache helps), ``flash_ideal`` (each of q, k, v, out once);
    - ``flops`` = 4 S^2 D per head (two matrix products), and the FLOP per byte of each version."""
    out = []
    for S in seqs:
        qkvo = 4 * heads * S * d * element_size
        scores = heads * S * S * element_size
        lse = heads * S * 4
        naive_traffic = 3 * heads * S * d * element_size + 4 * scores + heads * S * d * element_size
        flash_traffic = 2 * heads * S * d * element_size + 2 * math.ceil(S / block_m) * heads * S * d * element_size
        flops = 4 * heads * S * S * d
        out.append({
            "S": S, "qkvo_gb": qkvo / 1e9, "scores_gb": scores / 1e9, "naive_peak_gb": (qkvo + 2 * scores) / 1e9,
            "flash_peak_gb": (qkvo + lse) / 1e9, "naive_traffic_gb": naive_traffic / 1e9,
            "flash_traffic_gb": flash_traffic / 1e9, "flash_ideal_gb": qkvo / 1e9, "tflop": flops / 1e12,
            "naive_intensity": flops / naive_traffic, "flash_intensity": flops / flash_traffic,
            "flops_per_head": flops / heads,
        })
    return out


def _gb(v: float) -> str:
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def _k(S: int) -> str:
    return f"{S // 1024}K" if S % 1024 == 0 else str(S)


def print_memory_table(rows: list[dict] | None = None, heads: int = 64, d: int = 128) -> None:
    """Memory of the naive and blockwise versions against an 80 GB H100 and a 141 GB H200."""
    rows = rows or memory_rows(heads=heads, d=d)
    print(f"fp16, batch x heads = {heads}, D = {d}, Sq = Sk = S; GB = 1e9 bytes")
    head = (f"{'S':>5} {'q,k,v,out':>10} {'scores':>10} {'naive peak':>11} {'fits 80 GB':>11} "
            f"{'fits 141 GB':>12} {'blockwise':>10}")
    print(head)
    print("-" * len(head))
    for r in rows:
        fit80 = "yes" if r["naive_peak_gb"] <= 80 else "no"
        fit141 = "yes" if r["naive_peak_gb"] <= 141 else "no"
        print(f"{_k(r['S']):>5} {_gb(r['qkvo_gb']):>10} {_gb(r['scores_gb']):>10} {_gb(r['naive_peak_gb']):>11} "
              f"{fit80:>11} {fit141:>12} {_gb(r['flash_peak_gb']):>10}")
    print("scores: the (S, S) matrices of all the heads; naive peak: q, k, v, out, scores and probabilities; "
          "blockwise: q, k, v, out and the LSE")


def print_traffic_table(rows: list[dict] | None = None, heads: int = 64, d: int = 128, block_m: int = 128) -> None:
    """DRAM traffic and arithmetic intensity (FLOP per byte) of the naive version and of the blockwise
    one, whose programs each read all of k and v: from DRAM every time (no cache), or once per head
    (the programs of a head share them through the L2 cache)."""
    rows = rows or memory_rows(heads=heads, d=d, block_m=block_m)
    gpu = GPUS["H100"]
    ridge = gpu["tflops"] / gpu["tbps"]
    print(f"fp16, batch x heads = {heads}, D = {d}, {block_m} query rows per program; traffic in GB, "
          f"intensity in FLOP per byte")
    print(f"{'':>5} {'':>7} {'naive':>17}   {'blockwise, k and v read ...':<40}")
    print(f"{'S':>5} {'TFLOP':>7} {'GB':>9} {'FLOP/B':>7} {'per program: GB':>17} {'FLOP/B':>7} "
          f"{'once per head: GB':>18} {'FLOP/B':>7}")
    for r in rows:
        once = r["flops_per_head"] * heads / (r["flash_ideal_gb"] * 1e9)
        print(f"{_k(r['S']):>5} {_gb(r['tflop']):>7} {_gb(r['naive_traffic_gb']):>9} {r['naive_intensity']:>7.0f} "
              f"{_gb(r['flash_traffic_gb']):>17} {r['flash_intensity']:>7.0f} {_gb(r['flash_ideal_gb']):>18} {once:>7,.0f}")
    print(f"H100 datasheet: {gpu['tflops']} dense fp16 TFLOP/s over {gpu['tbps']} TB/s, so it needs {ridge:.0f} FLOP "
          f"per byte moved to keep its tensor cores busy")
    r = next((r for r in rows if r["S"] == 16384), rows[-1])
    print(f"S = {_k(r['S'])}: the naive version moves {r['naive_traffic_gb']:.0f} GB, {r['naive_traffic_gb'] / gpu['tbps']:.0f} ms "
          f"at {gpu['tbps']} TB/s, for {r['tflop']:.1f} TFLOP, {r['tflop'] / gpu['tflops'] * 1e3:.1f} ms at {gpu['tflops']} TFLOP/s")


def plot_memory(rows: list[dict] | None = None, heads: int = 64, d: int = 128):
    """Memory against S: the naive version's peak, the blockwise one's, and the two GPUs' memory."""
    rows = rows or memory_rows(heads=heads, d=d)
    fig, ax = plots.new_figure(7.0, 3.8)
    S = [r["S"] for r in rows]
    ax.plot(S, [r["naive_peak_gb"] for r in rows], "o-", color=plots.COLORS["naive"], label="naive: q, k, v, out + scores + probabilities")
    ax.plot(S, [r["flash_peak_gb"] for r in rows], "o-", color=plots.COLORS["online"], label="blockwise: q, k, v, out + LSE")
    for name, style, where in (("H100", "--", 0.72), ("H200", ":", 1.15)):
        gb = GPUS[name]["memory_gb"]
        ax.axhline(gb, color="#555555", ls=style, lw=1)
        ax.text(S[-1], gb * where, f"{name}: {gb} GB", fontsize=8.5, color="#555555", ha="right")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(S)
    ax.set_xticklabels([_k(s) for s in S])
    ax.set_xlabel("sequence length S (Sq = Sk)")
    ax.set_ylabel("memory (GB)")
    ax.set_title(f"fp16, batch x heads = {heads}, D = {d}", fontsize=10)
    ax.legend(frameon=False, fontsize=8.5, loc="upper left")
    return fig


def naive_vs_reference(naive_fn, seed: int = 0) -> None:
    """Run ``naive_fn`` on a few small float32 inputs and print its error against float64 SDPA."""
    g = torch.Generator().manual_seed(seed)
    lines = []
    for lead, Sq, Sk, d, causal in (((2, 3), 5, 7, 16, False), ((2, 3), 6, 6, 16, True), ((4,), 1, 9, 32, False)):
        q, k, v = (torch.randn(*lead, n, d, generator=g) for n in (Sq, Sk, Sk))
        ref, _ = reference_attention(q, k, v, causal)
        err = (naive_fn(q, k, v, causal=causal).double() - ref).abs().max().item()
        lines.append(f"q {tuple(q.shape)}, k and v {tuple(k.shape)}, causal={causal!s:<5}: "
                     f"max abs error against float64 SDPA {_err(err)}")
    print("\n".join(lines))


_err = round_up_err  # an error rounded up to a power of ten, the same on every machine


def _err1(e: float) -> str:
    """An error rounded up to one significant digit ('< 2e-02'): comparable with a tolerance."""
    if e != e:
        return "NaN"
    if e == 0:
        return "exact"
    if e == math.inf:
        return "inf"
    exp = math.floor(math.log10(e))
    digit = math.floor(e / 10**exp * (1 + 1e-9)) + 1
    if digit == 10:
        digit, exp = 1, exp + 1
    return f"< {digit}e{exp:+03d}".replace("+", "")


# --------------------------------------------------------------------------------------------
# Section 2: the (m, l, o) update, in plain PyTorch
# --------------------------------------------------------------------------------------------

#: The worked example: one query, six keys in three blocks of two, 2-d values, scale 1.
TRACE_Q = [1.0, 0.5]
TRACE_K = [[1.0, 0.0], [2.0, 2.0], [4.0, 2.0], [0.0, 1.0], [2.0, 0.0], [3.0, 3.0]]
TRACE_V = [[1.0, 0.0], [0.0, 2.0], [1.0, 1.0], [-1.0, 0.0], [0.0, -1.0], [2.0, 1.0]]
TRACE_BLOCK = 2


def trace_example() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """(q, K, V, block): the worked example in float64; its scores q . k_j are 1, 3, 5, 0.5, 2, 4.5."""
    f = torch.float64
    return torch.tensor(TRACE_Q, dtype=f), torch.tensor(TRACE_K, dtype=f), torch.tensor(TRACE_V, dtype=f), TRACE_BLOCK


def attention_step(m: float, l: float, o: torch.Tensor, s: torch.Tensor, v: torch.Tensor) -> dict:
    """One K/V block for one query: scores ``s`` (n,), values ``v`` (n, D), running (m, l, o).

        m_new = max(m, max_j s_j),  alpha = e^(m - m_new),
        l_new = alpha * l + sum_j e^(s_j - m_new),  o_new = alpha * o + sum_j e^(s_j - m_new) v_j.

    Natural exp here (the kernel uses exp2 on scores pre-multiplied by log2 e: the same numbers)."""
    m_new = max(m, float(s.max()))
    alpha = math.exp(m - m_new) if m != NEG_INF else 0.0  # nothing summed yet: the factor multiplies 0
    p = torch.exp(s - m_new)
    return {"m_old": m, "m_new": m_new, "alpha": alpha, "p": p, "l_old": l, "l_new": alpha * l + float(p.sum()),
            "o_old": o.clone(), "o_new": alpha * o + p @ v}


def attention_trace(q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, block: int, scale: float = 1.0) -> list[dict]:
    """Run the (m, l, o) update for one query over K/V in blocks of ``block``; after every block,
    compare o / l with float64 attention over the keys seen so far, and m + log l with their
    log-sum-exp. One dict per block."""
    q, K, V = (t.detach().cpu().to(torch.float64) for t in (q, K, V))
    s_all = (K @ q) * scale
    m, l, o = NEG_INF, 0.0, torch.zeros(V.shape[1], dtype=torch.float64)
    steps = []
    for b, start in enumerate(range(0, K.shape[0], block)):
        s, v = s_all[start:start + block], V[start:start + block]
        st = attention_step(m, l, o, s, v)
        seen = slice(0, start + s.numel())
        exact = torch.softmax(s_all[seen], dim=0) @ V[seen]
        st.update(block=b, keys=(start, start + s.numel() - 1), scores=s.tolist(), out=st["o_new"] / st["l_new"],
                  exact=exact, lse=st["m_new"] + math.log(st["l_new"]), exact_lse=float(torch.logsumexp(s_all[seen], 0)))
        st["err"] = max(float((st["out"] - exact).abs().max()), abs(st["lse"] - st["exact_lse"]))
        steps.append(st)
        m, l, o = st["m_new"], st["l_new"], st["o_new"]
    return steps


def _vec(t, digits: int = 4) -> str:
    return "[" + ", ".join(f"{x:.{digits}f}" for x in t.tolist()) + "]"


def print_attention_trace(steps: list[dict]) -> None:
    """Per block: the scores, the running max, the rescale factor, l and o, and the check of o / l
    against float64 attention over the keys seen so far."""
    for st in steps:
        a, b = st["keys"]
        m_old = "-inf" if st["m_old"] == NEG_INF else f"{st['m_old']:g}"
        alpha = "(nothing yet)" if st["m_old"] == NEG_INF else f"e^({st['m_old']:g} - {st['m_new']:g}) = {st['alpha']:.4f}"
        print(f"block {st['block'] + 1}: keys {a}-{b}, scores {[round(x, 4) for x in st['scores']]}, "
              f"m: {m_old} -> {st['m_new']:g}, rescale {alpha}")
        print(f"   l = {st['l_old']:.4f} x {st['alpha']:.4f} + {float(st['p'].sum()):.4f} = {st['l_new']:.4f}")
        print(f"   o = {_vec(st['o_old'])} x {st['alpha']:.4f} + p @ v = {_vec(st['o_new'])}")
        print(f"   o / l = {_vec(st['out'])}; float64 attention over keys 0-{b}: {_vec(st['exact'])}; "
              f"m + log l = {st['lse']:.4f} (logsumexp {st['exact_lse']:.4f}); max difference {_err(st['err'])}")


def plot_attention_trace(steps: list[dict] | None = None, V: torch.Tensor | None = None):
    """Left: the scores by block and the running max. Middle: the running sum l, multiplied by the
    rescale factor, then the block's sum added (o gets the same factor). Right: the value vectors
    v_j as points and o / l after each block, the attention over the keys seen so far: the rescale
    multiplies o and l alike, so it never moves o / l; only the new keys do."""
    if steps is None or V is None:
        q, K, V, b = trace_example()
        steps = attention_trace(q, K, V, b)
    V = V.detach().cpu().to(torch.float64)
    fig, (ax1, ax2, ax3) = plots.new_figure(13.0, 4.0, ncols=3)
    palette = ["#9ecae1", "#fdae6b", "#a1d99b", "#bcbddc", "#fc9272"]
    xs_run, m_run = [], []
    for st in steps:
        a, b = st["keys"]
        xs = list(range(a, b + 1))
        ax1.bar(xs, st["scores"], color=palette[st["block"] % len(palette)], edgecolor="#555555", lw=0.5,
                label=f"block {st['block'] + 1}")
        xs_run += [a - 0.5, b + 0.5]
        m_run += [st["m_new"], st["m_new"]]
        ax1.text((a + b) / 2, st["m_new"] + 0.3, f"m = {st['m_new']:g}", ha="center", fontsize=9, color=plots.COLORS["online"])
        if a:
            ax1.axvline(a - 0.5, color="#aaaaaa", lw=0.8, ls=":")
    ax1.plot(xs_run, m_run, "-", color=plots.COLORS["online"], lw=2, label="running max m")
    ax1.set_xlabel("key j")
    ax1.set_ylabel("score s_j = q . k_j")
    ax1.set_ylim(0, max(m_run) + 1.8)
    ax1.set_title("Scores by block, and the running max", fontsize=10)
    ax1.legend(frameon=False, fontsize=8, loc="upper left", ncols=2)

    idx = [st["block"] for st in steps]
    plots.rescale_bars(ax2, idx, [st["l_old"] for st in steps], [st["alpha"] for st in steps],
                       [float(st["p"].sum()) for st in steps], [st["m_old"] == NEG_INF for st in steps], "l", "x",
                       ticks=[f"block {i + 1}\nm = {st['m_new']:g}" for i, st in zip(idx, steps)],
                       rescaled_label="l x alpha (o x alpha too)", added_label="+ this block's sum of e^(s - m)",
                       headroom=1.35)
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
        ax3.plot(*p, "*" if last else "o", ms=14 if last else 7, color="#000000" if last else plots.COLORS["online"], zorder=4)
        ax3.annotate(f"after block {st['block'] + 1}", p, textcoords="offset points", fontsize=8.5,
                     xytext=offsets[st["block"]] if st["block"] < len(offsets) else (8, -12))
    ax3.set_xlabel("output, component 1")
    ax3.set_ylabel("output, component 2")
    ax3.set_title("o / l: attention over the keys seen so far", fontsize=10)
    ax3.set_aspect("equal", adjustable="datalim")
    return fig


# --------------------------------------------------------------------------------------------
# Section 3: the kernel's tiles
# --------------------------------------------------------------------------------------------

FULL, MASKED, SKIPPED = "no mask", "masked", "skipped"


def tile_kinds(seq_q: int, seq_k: int, block_m: int, block_n: int, causal: bool) -> list[list[str]]:
    """For each (query block, key block): whether the kernel computes it without a mask, with one,
    or skips it: the same n_full / end arithmetic as ``attention_fwd_kernel``."""
    grid = []
    for i in range(-(-seq_q // block_m)):
        n_full, end = seq_k // block_n * block_n, seq_k
        if causal:
            n_full = min(n_full, (i * block_m + 1) // block_n * block_n)
            end = min(seq_k, (i + 1) * block_m)
        row = []
        for j in range(-(-seq_k // block_n)):
            start = j * block_n
            row.append(FULL if start < n_full else MASKED if start < end else SKIPPED)
        grid.append(row)
    return grid


def tile_counts(seq_q: int, seq_k: int, block_m: int, block_n: int, causal: bool) -> dict:
    kinds = [k for row in tile_kinds(seq_q, seq_k, block_m, block_n, causal) for k in row]
    return {kind: kinds.count(kind) for kind in (FULL, MASKED, SKIPPED)} | {"total": len(kinds)}


def plot_tiles(cases=((300, 400, 128, 64, False), (512, 512, 128, 64, True))):
    """The (query block, key block) tiles of each case: computed without a mask, with one, skipped."""
    colors = {FULL: "#a1d99b", MASKED: "#fdae6b", SKIPPED: "#f0f0f0"}
    fig, axes = plots.new_figure(10.5, 3.6, ncols=len(cases))
    for ax, (sq, sk, bm, bn, causal) in zip(axes, cases):
        kinds = tile_kinds(sq, sk, bm, bn, causal)
        for i, row in enumerate(kinds):
            for j, kind in enumerate(row):
                x0, y0 = j * bn, i * bm
                w, h = min(bn, sk - x0), min(bm, sq - y0)
                ax.add_patch(plots.plt.Rectangle((x0, y0), w, h, facecolor=colors[kind], edgecolor="#555555", lw=0.8))
        if causal:
            ax.plot([0, min(sq, sk)], [0, min(sq, sk)], color="#d62728", lw=1.2)
        ax.set_xlim(0, sk)
        ax.set_ylim(sq, 0)
        ax.set_aspect("equal")
        ax.grid(False)
        ax.set_xlabel("keys")
        ax.set_ylabel("queries")
        c = tile_counts(sq, sk, bm, bn, causal)
        ax.set_title(f"Sq = {sq}, Sk = {sk}, blocks {bm} x {bn}{', causal' if causal else ''}\n"
                     f"{c[FULL]} without mask, {c[MASKED]} masked, {c[SKIPPED]} skipped", fontsize=9.5)
    handles = [plots.plt.Rectangle((0, 0), 1, 1, facecolor=col, edgecolor="#555555") for col in colors.values()]
    labels = [f"computed, {k}" if k != SKIPPED else k for k in colors]
    if any(c[4] for c in cases):
        handles.append(plots.plt.Line2D([0], [0], color="#d62728", lw=1.2))
        labels.append("diagonal (key = query)")
    fig.legend(handles, labels, loc="outside lower center", ncols=len(labels), frameon=False, fontsize=8.5)
    return fig


def print_launch(q, k, v, causal: bool = False) -> None:
    """What ``attention`` launches for these inputs: grid, tiles, warps and the tiles each kind."""
    p = attention_plan(q, k, v, causal)
    c = p.config
    sq, sk = q.shape[-2], k.shape[-2]
    n_q, n_k = -(-sq // c.block_m), -(-sk // c.block_n)
    print(f"q {tuple(q.shape)}, k and v {tuple(k.shape)}, {str(q.dtype).replace('torch.', '')}, causal={causal}")
    print(f"grid (query blocks, H, Z) = {p.grid}: {math.prod(p.grid)} programs of {c.block_m} query rows; "
          f"{n_k} key blocks of {c.block_n} per head")
    t = tile_counts(sq, sk, c.block_m, c.block_n, causal)
    print(f"per head: {t['total']} tiles = {n_q} x {n_k}: {t[FULL]} without mask, {t[MASKED]} masked, "
          f"{t[SKIPPED]} skipped")


# --------------------------------------------------------------------------------------------
# Section 4: correctness
# --------------------------------------------------------------------------------------------

#: Tolerances (atol, rtol) of the output against float64 SDPA, by dtype: the output is rounded to
#: the dtype once, and on a GPU the probabilities are rounded to it before p @ v.
TOLERANCES = {torch.float32: (2e-5, 2e-5), torch.float16: (4e-3, 4e-3), torch.bfloat16: (3e-2, 2e-2)}
LSE_TOL = (1e-4, 1e-5)


def correctness_cases() -> list[dict]:
    """Named inputs for the correctness table: irregular lengths, several dtypes, causal, large
    scores, a single query, a non-default scale."""
    rows = [
        ("Sq = Sk = 64", (2,), 64, 64, 32, False, None, 1.0),
        ("Sq = 50, Sk = 70", (2, 3), 50, 70, 16, False, None, 1.0),
        ("causal, S = 77", (3,), 77, 77, 32, True, None, 1.0),
        ("one query, Sk = 200", (2,), 1, 200, 128, False, None, 1.0),
        ("Sq = 37, Sk = 5, scale 0.05", (2,), 37, 5, 64, False, 0.05, 1.0),
        ("large scores (|s| ~ 1e4)", (2,), 40, 45, 64, False, None, 40.0),
        ("large scores, causal", (2,), 40, 40, 64, True, None, 40.0),
    ]
    cases = []
    for i, (name, lead, sq, sk, d, causal, scale, amp) in enumerate(rows):
        g = torch.Generator().manual_seed(100 + i)
        q, k, v = (torch.randn(*lead, n, d, generator=g) for n in (sq, sk, sk))
        cases.append({"name": name, "q": q * amp, "k": k * amp, "v": v, "causal": causal, "scale": scale})
    return cases


def score_tolerance(q, k, v, scale=None) -> float:
    """The output error that rounding the scores to fp32 alone can cause: a score s is known to about
    2^-24 |s|, and a change ds of the scores moves the output by at most about ds * max|v|."""
    q64, k64 = (t.detach().cpu().to(torch.float64).abs() for t in (q, k))
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else abs(scale)
    s_max = float((q64 @ k64.transpose(-2, -1)).max()) * scale if q.numel() and k.numel() else 0.0
    return 2.0**-24 * s_max * float(v.detach().abs().max()) if v.numel() else 0.0


def run_correctness(attention_fn=attention, dtypes=(torch.float32, torch.float16, torch.bfloat16)) -> bool:
    """Run ``attention_fn`` (with return_lse=True) on every case and dtype; print the max error of
    the output and of the LSE against float64, and whether each is within its tolerance: the dtype's
    (TOLERANCES) plus what fp32 scores of that size can be off by (score_tolerance)."""
    lines = [f"{'case':<28} {'dtype':<9} {'out error':>10} {'tolerance':>10} {'LSE error':>10}  ok"]
    all_ok = True
    for c in correctness_cases():
        for dt in dtypes:
            q, k, v = (t.to(dt).to(DEVICE) for t in (c["q"], c["k"], c["v"]))
            out, lse = attention_fn(q, k, v, causal=c["causal"], scale=c["scale"], return_lse=True)
            ref, ref_lse = reference_attention(q, k, v, c["causal"], c["scale"])
            atol, rtol = TOLERANCES[dt]
            atol += score_tolerance(q, k, v, c["scale"])
            err = (out.cpu().double() - ref).abs()
            ok = bool((err <= atol + rtol * ref.abs()).all())
            lerr = (lse.cpu().double() - ref_lse).abs()
            ok &= bool((lerr <= LSE_TOL[0] + LSE_TOL[1] * ref_lse.abs()).all()) and lse.dtype == torch.float32
            all_ok &= ok
            lines.append(f"{c['name']:<28} {str(dt).replace('torch.', ''):<9} {_err1(err.max().item()):>10} "
                         f"{atol:>10.0e} {_err1(lerr.max().item()):>10}  {'yes' if ok else 'NO'}")
    print("\n".join(lines))  # at once: the stored output does not depend on when the kernels finished
    return all_ok


def large_scores_demo(naive_fn, attention_fn=attention) -> None:
    """fp16 scores beyond 65504: the naive version's q @ k^T overflows to inf (then NaN); the kernel
    accumulates the dot products in fp32."""
    g = torch.Generator().manual_seed(7)
    q = (torch.randn(1, 32, 64, generator=g) * 60).half()
    k = (torch.randn(1, 48, 64, generator=g) * 60).half()
    v = torch.randn(1, 48, 64, generator=g).half()
    s = q.float() @ k.float().transpose(-2, -1)
    ref, _ = reference_attention(q, k, v)
    lines = [f"largest |q . k| = {s.abs().max().item():,.0f} (float16 holds at most 65,504)"]
    for name, fn in (("naive, fp16", naive_fn), ("kernel, fp16", attention_fn)):
        out = fn(q.to(DEVICE), k.to(DEVICE), v.to(DEVICE)).cpu()
        n_nan = int(torch.isnan(out).sum())
        err = (out.double() - ref).abs().nan_to_num(nan=math.inf).max().item()
        lines.append(f"{name:<13}: {n_nan:>5} NaN of {out.numel()}, max abs error {_err(err)}")
    print("\n".join(lines))


# --------------------------------------------------------------------------------------------
# Section 5: the recorded GPU measurements
# --------------------------------------------------------------------------------------------

ATTENTION_CSV = f"attention_{gpu_data.LESSON_GPU}"
MISSING = (f"No recorded attention benchmark yet: figures/data/{ATTENTION_CSV}.csv is written on a GPU by "
           f"`python -m helpers.attention_bench figures/data/{ATTENTION_CSV}.csv`.")
SDPA_BACKENDS = ("sdpa_cudnn", "sdpa_flash", "sdpa_efficient")
LABELS = {"course": "course (07)", "sdpa": "SDPA (default)", "sdpa_cudnn": "SDPA cuDNN", "sdpa_flash": "SDPA flash",
          "sdpa_efficient": "SDPA efficient", "naive": "naive"}
LINE_COLORS = {"course": "#000000", "sdpa": "#1f77b4", "sdpa_cudnn": "#17becf", "sdpa_flash": "#9467bd",
               "sdpa_efficient": "#8c564b", "naive": plots.COLORS["naive"]}


def attention_data(live: bool | None = None, path=None):
    """(rows, provenance) of the attention benchmark: live on a GPU (a short sweep), else the
    recording ``figures/data/attention.csv`` (or ``path``); None when there is no recording."""
    live = ON_GPU if live is None else live
    if live and path is None:
        from . import attention_bench

        return attention_bench.live_rows(), gpu_data.provenance("helpers.lesson07.attention_data()")
    p = Path(path) if path is not None else gpu_data.DATA_DIR / f"{ATTENTION_CSV}.csv"
    if not p.exists():
        return None
    return gpu_data.read_csv(p)


def _ok(r) -> bool:
    t = r.get("graph_tflops")
    return r.get("status") == "ok" and isinstance(t, (int, float)) and t == t and t > 0


def _cell(rows, dtype, D, causal, S, provider, col="graph_tflops"):
    for r in rows:
        if (r["dtype"], r["D"], int(r["causal"]), r["S"], r["provider"]) == (dtype, D, int(causal), S, provider):
            return r
    return None


def best_sdpa(rows, dtype, D, causal, S, col="graph_tflops"):
    """(provider, value) of the fastest SDPA backend at that point (None if none ran)."""
    best = None
    for p in ("sdpa",) + SDPA_BACKENDS:
        r = _cell(rows, dtype, D, causal, S, p)
        if r is not None and _ok(r) and (best is None or r[col] > best[1]):
            best = (p, r[col])
    return best


SHORT = {"course": "course", "sdpa": "SDPA", "sdpa_cudnn": "cuDNN", "sdpa_flash": "flash", "sdpa_efficient": "efficient",
         "naive": "naive"}


def print_tflops_table(data, dtypes=("float16", "bfloat16"), col: str = "graph_tflops") -> None:
    """TFLOP/s (GPU time) of the course's kernel, the fastest SDPA backend and the naive version,
    per (dtype, D, causal, S); the last column is the course's fraction of the fastest SDPA."""
    if data is None:
        print(MISSING)
        return
    rows, meta = data
    print(gpu_data.provenance_line(meta))
    for dtype in (dtypes,) if isinstance(dtypes, str) else dtypes:
        rs = [r for r in rows if r["dtype"] == dtype]
        if not rs:
            continue
        B, H = rs[0]["B"], rs[0]["H"]
        print(f"\n{dtype}, B = {B}, H = {H}: TFLOP/s from GPU time (4 B H S^2 D per call, halved when causal)")
        print(f"{'D':>4} {'causal':>6} {'S':>6} {'course':>8} {'best SDPA':>10} {'(backend)':<12} {'naive':>7} "
              f"{'course/best':>12}")
        for D in sorted({r["D"] for r in rs}):
            for causal in (0, 1):
                for S in sorted({r["S"] for r in rs if r["D"] == D and int(r["causal"]) == causal}):
                    c = _cell(rs, dtype, D, causal, S, "course")
                    n = _cell(rs, dtype, D, causal, S, "naive")
                    b = best_sdpa(rs, dtype, D, causal, S, col)
                    cv = f"{c[col]:.0f}" if c is not None and _ok(c) else ("-" if c is None else c["status"][:8])
                    nv = f"{n[col]:.0f}" if n is not None and _ok(n) else "-"
                    bv, bn = (f"{b[1]:.0f}", f"({SHORT[b[0]]})") if b else ("-", "")
                    frac = f"{c[col] / b[1]:.2f}" if b and c is not None and _ok(c) else "-"
                    print(f"{D:>4} {'yes' if causal else 'no':>6} {_k(S):>6} {cv:>8} {bv:>10} {bn:<12} {nv:>7} {frac:>12}")


def tflops_summary(data) -> None:
    """From the recording: the course's kernel against the fastest SDPA backend and the naive version,
    and how far the eager (host-launched) timing is from the GPU time."""
    if data is None:
        print(MISSING)
        return
    rows, _ = data
    fracs, naive_x = [], []
    for r in rows:
        if r["provider"] != "course" or not _ok(r):
            continue
        b = best_sdpa(rows, r["dtype"], r["D"], r["causal"], r["S"])
        if b:
            fracs.append((r["graph_tflops"] / b[1], r))
        n = _cell(rows, r["dtype"], r["D"], r["causal"], r["S"], "naive")
        if n is not None and _ok(n):
            naive_x.append(r["graph_tflops"] / n["graph_tflops"])
    if not fracs:
        print("no course rows with an SDPA row beside them in the recording")
        return
    lo, hi = min(fracs, key=lambda t: t[0]), max(fracs, key=lambda t: t[0])

    def where(r):
        return f"{r['dtype']} D={r['D']} S={_k(r['S'])}{' causal' if int(r['causal']) else ''}"

    print(f"course kernel / fastest SDPA backend: {lo[0]:.2f} ({where(lo[1])}) to {hi[0]:.2f} ({where(hi[1])}), "
          f"median {sorted(f for f, _ in fracs)[len(fracs) // 2]:.2f} over {len(fracs)} points")
    long = [(f, r) for f, r in fracs if r["S"] >= 4096]
    if long:
        short = sorted((f, where(r)) for f, r in long if f < 0.8)
        print(f"at S >= 4K: {len(long) - len(short)} of {len(long)} points reach 0.8 of the fastest backend"
              + (f"; below it: {', '.join(f'{w} ({f:.2f})' for f, w in short)}" if short else ""))
    if naive_x:
        print(f"course kernel / naive: {min(naive_x):.1f}x to {max(naive_x):.1f}x where the naive version ran")
    eager = [r["tflops"] / r["graph_tflops"] for r in rows if r["provider"] == "course" and _ok(r)
             and isinstance(r.get("tflops"), (int, float)) and r["tflops"] == r["tflops"]]
    if eager:
        print(f"course kernel, eager TFLOP/s / GPU-time TFLOP/s: {min(eager):.2f} to {max(eager):.2f}")


def plot_tflops(data, dtype: str = "float16"):
    """TFLOP/s (GPU time) against S, one panel per (D, causal), every provider of the recording."""
    rows, meta = data
    rs = [r for r in rows if r["dtype"] == dtype]
    Ds = sorted({r["D"] for r in rs})
    fig, axes = plots.plt.subplots(len(Ds), 2, figsize=(10.5, 3.3 * len(Ds)), constrained_layout=True, squeeze=False)
    for i, D in enumerate(Ds):
        for j, causal in enumerate((0, 1)):
            ax = axes[i][j]
            for p in ("course", "sdpa") + SDPA_BACKENDS + ("naive",):
                pts = sorted((r["S"], r["graph_tflops"]) for r in rs if r["provider"] == p and r["D"] == D
                             and int(r["causal"]) == causal and _ok(r))
                if pts:
                    ax.plot([s for s, _ in pts], [t for _, t in pts], marker="o", ms=4, lw=2.2 if p == "course" else 1.2,
                            color=LINE_COLORS[p], label=LABELS[p], ls="--" if p == "sdpa" else "-")
            ax.set_xscale("log", base=2)
            Ss = sorted({r["S"] for r in rs})
            ax.set_xticks(Ss)
            ax.set_xticklabels([_k(s) for s in Ss])
            ax.set_ylim(bottom=0)
            ax.set_title(f"D = {D}, {'causal' if causal else 'not causal'}", fontsize=10)
            ax.set_xlabel("S")
            ax.set_ylabel("TFLOP/s (GPU time)")
    axes[0][0].legend(frameon=False, fontsize=8, loc="lower right")
    fig.suptitle(f"Attention forward, {dtype}, B x H = {rs[0]['B'] * rs[0]['H']} ({meta.get('gpu', '?')})", fontsize=10.5)
    return fig


def show_tflops(data, dtype: str = "float16") -> None:
    """Display :func:`plot_tflops`, or print that the recording is missing."""
    if data is None:
        print(MISSING)
        return
    plots.show(plot_tflops(data, dtype))


def print_peak_memory(data, dtype: str = "float16", D: int = 128, causal: int = 0) -> None:
    """Peak memory each provider allocated during one call (MiB, inputs not counted), by S."""
    if data is None:
        print(MISSING)
        return
    rows, _ = data
    rs = [r for r in rows if r["dtype"] == dtype and r["D"] == D and int(r["causal"]) == causal]
    provs = [p for p in ("course", "sdpa") + SDPA_BACKENDS + ("naive",) if any(r["provider"] == p for r in rs)]
    print(f"{dtype}, D = {D}, {'causal' if causal else 'not causal'}: peak MiB allocated during one call "
          f"(the inputs not counted)")
    print(f"{'S':>6} " + " ".join(f"{SHORT[p]:>10}" for p in provs))
    for S in sorted({r["S"] for r in rs}):
        cells = []
        for p in provs:
            r = _cell(rs, dtype, D, causal, S, p)
            ok = r is not None and r.get("status") == "ok" and isinstance(r.get("peak_mib"), (int, float))
            cells.append(f"{r['peak_mib']:,.0f}" if ok else "-")
        print(f"{_k(S):>6} " + " ".join(f"{c:>10}" for c in cells))


# --------------------------------------------------------------------------------------------
# Section 6: merging partial results (split-K, FlashDecoding)
# --------------------------------------------------------------------------------------------


def tile_tuning(gpus=("h100", "h200")) -> list[dict]:
    """For each GPU and (D, causal): the tile configuration the kernel uses (attention_config) and the
    fastest of the tuner's candidates, in GPU TFLOP/s at S = 4096 (``attention_tune_<gpu>.csv``)."""
    from .kernels.attention import attention_config

    out = []
    for gpu in gpus:
        rows, meta = gpu_data.read_csv(f"attention_tune_{gpu}")
        for D, causal in sorted({(r["D"], r["causal"]) for r in rows}):
            rs = [r for r in rows if (r["D"], r["causal"]) == (D, causal) and r["status"] == "ok"]
            best = max(rs, key=lambda r: r["graph_tflops"])
            cfg = tuple(attention_config(getattr(torch, rs[0]["dtype"]), D, interpreter=False))
            used = next((r for r in rs if (r["block_m"], r["block_n"], r["num_warps"], r["num_stages"]) == cfg), None)
            out.append(dict(gpu=meta["gpu"], meta=meta, D=D, causal=causal, candidates=len(rs), used_cfg=cfg,
                            used=used["graph_tflops"] if used else float("nan"), best=best["graph_tflops"],
                            best_cfg=(best["block_m"], best["block_n"], best["num_warps"], best["num_stages"])))
    return out


def print_tile_tuning(gpus=("h100", "h200")) -> None:
    """Print :func:`tile_tuning`: is the configuration in use the fastest candidate on each GPU?"""
    rows = tile_tuning(gpus)
    for meta in {id(r["meta"]): r["meta"] for r in rows}.values():
        print(gpu_data.provenance_line(meta))
    print("float16, S = 4096, B = 4, H = 16: GPU TFLOP/s of the configuration in use (block_m, block_n, warps, "
          "stages) and of the fastest candidate")
    print(f"{'GPU':<22} {'D':>4} {'causal':>6} {'in use':>16} {'TFLOP/s':>8} {'fastest':>16} {'TFLOP/s':>8} {'share':>6}")
    for r in rows:
        print(f"{r['gpu'].replace('NVIDIA ', ''):<22} {r['D']:>4} {'yes' if r['causal'] else 'no':>6} "
              f"{str(r['used_cfg']):>16} {r['used']:>8.1f} {str(r['best_cfg']):>16} {r['best']:>8.1f} "
              f"{r['used'] / r['best']:>6.2f}")
    worst = min(rows, key=lambda r: r["used"] / r["best"])
    print(f"the configuration in use reaches at least {worst['used'] / worst['best']:.2f} of the fastest of "
          f"{worst['candidates']} candidates in every case on {len(gpus)} GPUs")


def merge_two(o1, lse1, o2, lse2):
    """Attention over the keys of two parts, from each part's (output, lse): every output is
    weighted by its share of the total sum, e^(lse_i - lse), with lse = log(e^lse1 + e^lse2)."""
    lse = torch.logaddexp(lse1, lse2)
    w1 = torch.exp(lse1 - lse).unsqueeze(-1)
    w2 = torch.exp(lse2 - lse).unsqueeze(-1)
    return o1 * w1 + o2 * w2, lse


def split_keys_demo(attention_fn=attention, parts: int = 3, seed: int = 0) -> float:
    """Cut the keys (and values) into ``parts`` chunks, run ``attention_fn`` on each with its LSE,
    merge the partial outputs pairwise with :func:`merge_two`, and compare with one call over all keys."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 4, 64, generator=g).to(DEVICE)
    k = (torch.randn(2, 100, 64, generator=g) * 2).to(DEVICE)
    v = torch.randn(2, 100, 64, generator=g).to(DEVICE)
    bounds = [round(i * k.shape[-2] / parts) for i in range(parts + 1)]
    o = lse = None
    lines = []
    for a, b in zip(bounds, bounds[1:]):
        o_p, lse_p = attention_fn(q, k[..., a:b, :], v[..., a:b, :], return_lse=True)
        lines.append(f"keys {a:>3}-{b - 1:>3}: lse of query 0 = {lse_p[0, 0].item():.4f}")
        o, lse = (o_p, lse_p) if o is None else merge_two(o, lse, o_p, lse_p)
    full, full_lse = attention_fn(q, k, v, return_lse=True)
    diff = max((o - full).abs().max().item(), (lse - full_lse).abs().max().item())
    lines.append(f"merged: lse of query 0 = {lse[0, 0].item():.4f}; one call over all keys: {full_lse[0, 0].item():.4f}")
    lines.append(f"max difference between the merged and the one-call output and LSE: {_err(diff)}")
    print("\n".join(lines))
    return diff


# --------------------------------------------------------------------------------------------
# Exercise 7.1: causal attention in PyTorch
# --------------------------------------------------------------------------------------------


def _naive64(q, k, v, scale, mask=None, *, mask_after_softmax=False, max_over_all=False, scale_after=False):
    """Variants of materialised attention in float64, for recognising the usual mistakes."""
    s = q @ k.transpose(-2, -1)
    if not scale_after:
        s = s * scale
    if mask is not None and max_over_all:  # exp relative to the max over every key, then masked
        e = torch.exp(s - s.max(dim=-1, keepdim=True).values) * mask
        p = e / e.sum(dim=-1, keepdim=True)
    elif mask is not None and not mask_after_softmax:
        p = torch.softmax(s.masked_fill(~mask, NEG_INF), dim=-1)
    else:
        p = torch.softmax(s, dim=-1)
        if mask is not None:
            p = p * mask
    if scale_after:
        p = p * scale
    return p @ v


def _cases_7_1():
    g = torch.Generator().manual_seed(71)
    f = torch.float64
    cases = []
    for lead, S, d in (((2, 3), 6, 8), ((1,), 9, 4), ((2,), 1, 4)):
        cases.append((torch.randn(*lead, S, d, generator=g, dtype=f), torch.randn(*lead, S, d, generator=g, dtype=f),
                      torch.randn(*lead, S, d, generator=g, dtype=f)))
    # the last key has a score of ~ 1000 with every query: visible only to the last query
    q = torch.randn(1, 5, 4, generator=g, dtype=f)
    k = torch.randn(1, 5, 4, generator=g, dtype=f)
    q[..., 0], k[..., 4, :] = 10.0, torch.tensor([200.0, 0.0, 0.0, 0.0], dtype=f)
    cases.append((q, k, torch.randn(1, 5, 4, generator=g, dtype=f)))
    return cases


def _trial_7_1(causal_attention) -> str:
    for q, k, v in _cases_7_1():
        S, d = q.shape[-2], q.shape[-1]
        scale = 1 / math.sqrt(d)
        args = [t.clone() for t in (q, k, v)]
        got = call_attempt(causal_attention, *args, scale)
        if not all(torch.equal(a, t) for a, t in zip(args, (q, k, v))):
            raise Wrong("your function modified q, k or v: compute new tensors instead (no in-place ops)")
        want, _ = reference_attention(q, k, v, causal=True, scale=scale)
        if isinstance(got, torch.Tensor) and got.shape == want.shape:
            g = got.detach().to(torch.float64)
            if torch.allclose(g, want, atol=1e-8, rtol=1e-8):
                continue
            mask = causal_mask(S, S)
            wrongs = [
                (_naive64(q, k, v, scale, mask, mask_after_softmax=True),
                 "the mask is applied after the softmax, so each row no longer sums to 1: set the hidden "
                 "scores to -inf before the softmax"),
                (_naive64(q, k, v, scale, causal_mask(S, S).T),
                 "query i must see keys 0..i (the lower triangle, .tril()), not the keys after it"),
                (_naive64(q, k, v, scale, torch.ones(S, S, dtype=torch.bool).tril(-1)),
                 "query i sees keys 0..i, itself included: .tril() (diagonal 0), not .tril(-1)"),
                (_naive64(q, k, v, 1.0, mask),
                 "the scores are not scaled: multiply q @ k^T by scale before the softmax"),
                (_naive64(q, k, v, scale, mask, scale_after=True),
                 "scale multiplies the scores before the softmax, not the probabilities or the output"),
                (_naive64(q, k, v, scale),
                 "nothing is masked: query i must not see keys after it"),
            ]
            for cand, hint in wrongs:
                if torch.allclose(g, cand, atol=1e-8, rtol=1e-8, equal_nan=True):
                    raise Wrong(hint)
            if torch.isnan(g).any() and not torch.isnan(want).any():
                raise Wrong("your output has NaN where attention is defined. If you take the max (or the exp) over "
                            "every key and mask afterwards, a large hidden score makes the visible ones underflow "
                            "to 0 (and 0/0 = NaN): mask the scores with -inf before the max and the exp")
        expect_close(got, want, atol=1e-8, rtol=1e-8, what=f" for q of shape {tuple(q.shape)}")
    return "it matches float64 SDPA with is_causal=True"


def check_7_1(causal_attention) -> None:
    """Exercise 7.1: ``causal_attention(q, k, v, scale)`` in PyTorch, scores materialised."""
    check("7.1", "causal attention in PyTorch", causal_attention, _trial_7_1)


# --------------------------------------------------------------------------------------------
# Exercise 7.2: combine n partial results by their LSE
# --------------------------------------------------------------------------------------------


def combine_answer(o_parts: torch.Tensor, lse_parts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) of the union of n parts of the keys, from (n, ..., Sq, D) and (n, ..., Sq)."""
    lse = torch.logsumexp(lse_parts, dim=0)
    return (o_parts * torch.exp(lse_parts - lse).unsqueeze(-1)).sum(dim=0), lse


def _parts(q, k, v, bounds):
    """Each part's (out, lse) in float64 (a part with no keys: out 0, lse -inf)."""
    os_, ls_ = [], []
    for a, b in zip(bounds, bounds[1:]):
        if b > a:
            o, lse = reference_attention(q, k[..., a:b, :], v[..., a:b, :])
        else:
            o = torch.zeros(q.shape, dtype=torch.float64)
            lse = torch.full(q.shape[:-1], NEG_INF, dtype=torch.float64)
        os_.append(o)
        ls_.append(lse)
    return torch.stack(os_), torch.stack(ls_)


def _cases_7_2():
    g = torch.Generator().manual_seed(72)
    f = torch.float64
    cases = []
    for name, lead, sq, sk, d, bounds, amp in (
        ("two parts", (2,), 3, 10, 4, (0, 4, 10), 1.0),
        ("five parts", (2, 2), 4, 23, 8, (0, 3, 9, 12, 20, 23), 1.0),
        ("scores near 1800 (e^lse overflows)", (1,), 3, 8, 4, (0, 5, 8), 1.0),
        ("a part with no keys (lse = -inf)", (1,), 2, 6, 4, (0, 6, 6), 1.0),
    ):
        q, k, v = (torch.randn(*lead, n, d, generator=g, dtype=f) * amp for n in (sq, sk, sk))
        if "1800" in name:
            q = q + 30.0
            k = k + 30.0  # scores around 30 * 30 * 4 / 2 = 1800
        cases.append((name, q, k, v, bounds))
    return cases


def _trial_7_2(combine) -> str:
    for name, q, k, v, bounds in _cases_7_2():
        o_parts, lse_parts = _parts(q, k, v, bounds)
        args = (o_parts.clone(), lse_parts.clone())
        got = call_attempt(combine, *args)
        if not (torch.equal(args[0], o_parts) and torch.equal(args[1], lse_parts)):
            raise Wrong("your function modified its inputs: compute new tensors instead")
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise Wrong(f"return a pair (out, lse), got {type(got).__name__}")
        o, lse = got
        want_o, want_lse = reference_attention(q, k, v)
        if not isinstance(o, torch.Tensor) or not isinstance(lse, torch.Tensor):
            raise Wrong("return two tensors (out, lse)")
        if o.shape != want_o.shape or lse.shape != want_lse.shape:
            raise Wrong(f"on {name}: expected out of shape {tuple(want_o.shape)} and lse of shape "
                        f"{tuple(want_lse.shape)}, got {tuple(o.shape)} and {tuple(lse.shape)}")
        o64, l64 = o.detach().to(torch.float64), lse.detach().to(torch.float64)
        lse_ok = torch.allclose(l64, want_lse, atol=1e-9, rtol=1e-10)
        o_ok = torch.allclose(o64, want_o, atol=1e-9, rtol=1e-9)
        if lse_ok and o_ok:
            continue
        if not lse_ok:
            if (torch.allclose(l64, want_lse / LN2, atol=1e-9, rtol=1e-9)
                    or torch.allclose(l64, torch.logsumexp(lse_parts * LN2, dim=0) / LN2, atol=1e-9, rtol=1e-9)):
                raise Wrong(f"on {name}: your lse is in log2 units (log2 of the sum); the parts' lse are natural "
                            f"logs and so must the result be: use exp and log (or multiply by ln 2)")
            if torch.allclose(l64, lse_parts.max(dim=0).values, atol=1e-9):
                raise Wrong(f"on {name}: your lse is the largest part's; the total is log(sum_i e^lse_i), "
                            f"torch.logsumexp(lse_parts, dim=0)")
            if torch.allclose(l64, lse_parts.sum(dim=0), atol=1e-9) or torch.allclose(l64, lse_parts.mean(dim=0), atol=1e-9):
                raise Wrong(f"on {name}: the sums of exponentials add, not their logs: lse = log(sum_i e^lse_i)")
            if not torch.isfinite(l64[torch.isfinite(want_lse)]).all():
                raise Wrong(f"on {name}: your lse overflowed or is NaN: e^lse_i overflows near lse = 710 in float64; "
                            f"subtract the largest lse first (torch.logsumexp does)")
            raise Wrong(f"on {name}: lse expected {fmt(want_lse)}, got {fmt(lse)}")
        if torch.isnan(o64).any() or torch.isinf(o64).any():
            raise Wrong(f"on {name}: your output has inf or NaN: weight each part by e^(lse_i - lse), never by "
                        f"e^lse_i itself (it overflows when the scores are large)")
        if torch.allclose(o64, o_parts.mean(dim=0), atol=1e-9):
            raise Wrong(f"on {name}: a plain average gives every part the same weight; part i holds a share "
                        f"e^(lse_i - lse) of the total")
        unnorm = (o_parts * torch.exp(lse_parts).unsqueeze(-1)).sum(dim=0)
        if torch.allclose(o64, unnorm, atol=1e-9, rtol=1e-9):
            raise Wrong(f"on {name}: the weights e^lse_i must be divided by their sum, e^lse: use e^(lse_i - lse)")
        w2 = torch.exp2(lse_parts - (torch.logsumexp(lse_parts * LN2, dim=0) / LN2)).unsqueeze(-1)
        if torch.allclose(o64, (o_parts * w2).sum(dim=0), atol=1e-9, rtol=1e-9):
            raise Wrong(f"on {name}: the weights use powers of 2; the lse are natural logs, so part i weighs "
                        f"exp(lse_i - lse)")
        raise Wrong(f"on {name}: out expected {fmt(want_o)}, got {fmt(o)}")
    return "the merged parts equal attention over all the keys, lse included"


def check_7_2(combine) -> None:
    """Exercise 7.2: ``combine(o_parts, lse_parts)`` merges n partial attention results."""
    check("7.2", "combine partial results by their LSE", combine, _trial_7_2)


# --------------------------------------------------------------------------------------------
# Exercise 7.3: complete the (m, l, o) update inside a Triton kernel
# --------------------------------------------------------------------------------------------

#: The shapes the checker runs the learner's kernel on: (heads, Sq, Sk, D, BLOCK_M, BLOCK_N, late),
#: late: the last keys get the largest scores (the running max grows in the last block).
CASES_7_3 = ((2, 20, 40, 16, 16, 16, False), (1, 19, 37, 16, 16, 16, True), (3, 5, 9, 32, 16, 16, False))


def _inputs_7_3(heads, sq, sk, d, late, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(heads, sq, d, generator=g)
    k = torch.randn(heads, sk, d, generator=g)
    v = torch.randn(heads, sk, d, generator=g)
    if late:
        k[:, -5:, :] = q.mean(dim=1, keepdim=True) * 4  # large scores in the last keys
    return q, k, v


def _blockwise(q, k, v, scale, block_n, kind):
    """Plausible wrong versions of the blockwise loop, in float64 (scores in log2 units, as the kernel)."""
    q, k, v = (t.to(torch.float64) for t in (q, k, v))
    s_all = (q @ k.transpose(-2, -1)) * scale * LOG2E
    m = torch.full(q.shape[:-1], NEG_INF, dtype=torch.float64)
    l = torch.zeros(q.shape[:-1], dtype=torch.float64)
    acc = torch.zeros(q.shape, dtype=torch.float64)
    for a in range(0, k.shape[-2], block_n):
        s, vb = s_all[..., a:a + block_n], v[..., a:a + block_n, :]
        m_new = torch.maximum(m, s.max(dim=-1).values)
        alpha = torch.exp2(m - m_new)
        p = torch.exp2(s - m_new.unsqueeze(-1))
        l_new = l * alpha + p.sum(-1)
        if kind == "no_rescale_acc":
            acc = acc + p @ vb
        elif kind == "no_rescale":
            l_new = l + p.sum(-1)
            acc = acc + p @ vb
        elif kind == "divide_in_loop":  # acc kept normalised, then rescaled by alpha only
            acc = (acc * alpha.unsqueeze(-1) + p @ vb) / l_new.unsqueeze(-1)
        elif kind == "exp_not_exp2":
            p = torch.exp(s - m_new.unsqueeze(-1))
            alpha = torch.exp(m - m_new)
            l_new = l * alpha + p.sum(-1)
            acc = acc * alpha.unsqueeze(-1) + p @ vb
        else:
            acc = acc * alpha.unsqueeze(-1) + p @ vb
        m, l = m_new, l_new
    if kind == "divide_in_loop":
        return acc, (m + torch.log2(l)) * LN2
    if kind == "no_division":
        return acc, (m + torch.log2(l)) * LN2
    return acc / l.unsqueeze(-1), (m + torch.log2(l)) * LN2


#: The checker's tolerance: fp32 in the interpreter; on a GPU, tl.dot rounds fp32 inputs to TF32 by default.
TOL_7_3 = 1e-4 if INTERPRETER else 1e-2

HINTS_7_3 = {
    "no_rescale_acc": "acc is not rescaled: when the max grows, multiply acc by alpha = exp2(m_i - m_new) too, "
                      "as l_i (acc * alpha[:, None])",
    "no_rescale": "neither l_i nor acc is rescaled: when the max grows, both must be multiplied by "
                  "alpha = exp2(m_i - m_new) before adding the block",
    "divide_in_loop": "acc is divided by l inside the loop, and the next block rescales it by alpha alone; keep acc "
                      "unnormalised (acc * alpha + p @ v) and divide by l_i once, after the loop",
    "exp_not_exp2": "s is in log2 units (qk_scale includes log2(e)): use tl.exp2, not tl.exp",
    "no_division": "the output is acc / l_i: divide once, after the loop",
}


def _trial_7_3(kernel) -> str:
    import triton

    if kernel is None or kernel is Ellipsis:
        raise NotImplementedError
    if not hasattr(kernel, "__getitem__"):
        raise Wrong(f"expected a @triton.jit kernel, got {type(kernel).__name__}")
    for i, (heads, sq, sk, d, bm, bn, late) in enumerate(CASES_7_3):
        q, k, v = (t.to(DEVICE) for t in _inputs_7_3(heads, sq, sk, d, late, seed=730 + i))
        scale = 1 / math.sqrt(d)
        out = guarded((heads, sq, d), torch.float32)
        lse = guarded((heads, sq), torch.float32)
        qc, kc, vc = q.clone(), k.clone(), v.clone()
        run_learner_kernel(kernel, (triton.cdiv(sq, bm), heads), out, lse, q, k, v, sq, sk, scale * LOG2E,
                           outputs=[out, lse], HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn)
        if not (torch.equal(q, qc) and torch.equal(k, kc) and torch.equal(v, vc)):
            raise Wrong("your kernel wrote into q, k or v: store only into out_ptr and lse_ptr")
        want, want_lse = reference_attention(q, k, v, scale=scale)
        o64, l64 = out.cpu().double(), lse.cpu().double()
        where = f"heads={heads}, Sq={sq}, Sk={sk}, D={d}, blocks {bm} x {bn}"
        if torch.isnan(o64).all():
            raise Wrong(f"on {where}: nothing was stored in out: tl.store the output o = acc / l_i[:, None]")
        tol = TOL_7_3
        out_ok = torch.allclose(o64, want, atol=tol, rtol=tol)
        lse_ok = torch.allclose(l64, want_lse, atol=tol, rtol=tol / 10)
        if out_ok and lse_ok:
            continue
        for kind, hint in HINTS_7_3.items():
            co, cl = _blockwise(q.cpu(), k.cpu(), v.cpu(), scale, bn, kind)
            if not out_ok and torch.allclose(o64, co, atol=tol, rtol=tol):
                raise Wrong(f"on {where}: {hint}")
        if out_ok and torch.isnan(l64).all():
            raise Wrong(f"on {where}: nothing was stored in lse: tl.store the row's log-sum-exp (natural log)")
        if out_ok and torch.allclose(l64, want_lse / LN2, atol=tol, rtol=tol / 10):
            raise Wrong(f"on {where}: your LSE is in log2 units (m_i + log2(l_i)); the LSE is a natural log: "
                        f"multiply by ln 2 = 0.6931...")
        if out_ok:
            raise Wrong(f"on {where}: the output is right but the LSE is not: expected {fmt(want_lse[0, :4])}... "
                        f"got {fmt(lse.cpu()[0, :4])}... (lse = (m_i + tl.log2(l_i)) * ln 2)")
        raise Wrong(f"on {where}: the output differs from float64 attention (max abs error "
                    f"{(o64 - want).abs().nan_to_num(nan=math.inf).max().item():.3g}): check the update of m_i, l_i "
                    f"and acc, and that the stores are masked to rows < seq_q")
    return "your kernel matches float64 attention, LSE included, on three shapes with partial blocks"


def check_7_3(kernel) -> None:
    """Exercise 7.3: a Triton kernel with the (m, l, o) update and the epilogue filled in."""
    check("7.3", "the (m, l, o) update inside a kernel", kernel, _trial_7_3)


# A correct solution of exercise 7.3, for the tests (the notebook's solution cell shows the same code).
SOLUTION_7_3 = '''
@triton.jit
def my_attention_kernel(out_ptr, lse_ptr, q_ptr, k_ptr, v_ptr, seq_q, seq_k, qk_scale,
                        HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    head = tl.program_id(1)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    rows = head * seq_q + offs_m
    q = tl.load(q_ptr + rows[:, None] * HEAD_DIM + offs_d[None, :], mask=offs_m[:, None] < seq_q, other=0.0)
    m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    for start_n in range(0, seq_k, BLOCK_N):
        cols = start_n + offs_n
        keys = head * seq_k + cols
        k = tl.load(k_ptr + keys[None, :] * HEAD_DIM + offs_d[:, None], mask=cols[None, :] < seq_k, other=0.0)
        v = tl.load(v_ptr + keys[:, None] * HEAD_DIM + offs_d[None, :], mask=cols[:, None] < seq_k, other=0.0)
        s = tl.dot(q, k) * qk_scale
        s = tl.where(cols[None, :] < seq_k, s, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v)
        m_i = m_new
    o = acc / l_i[:, None]
    tl.store(out_ptr + rows[:, None] * HEAD_DIM + offs_d[None, :], o, mask=offs_m[:, None] < seq_q)
    tl.store(lse_ptr + rows, (m_i + tl.log2(l_i)) * 0.6931471805599453, mask=offs_m < seq_q)
'''
