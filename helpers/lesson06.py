"""Lesson 06 · Rows bigger than a chip: split one row across many programs.

What lives here: the GPU terms the lesson needs (from the recorded H100); why a few long rows are
slow (recorded: programs per SM, and the one-program-per-row kernels' traffic and spills); how many
programs a few long rows give; the (max, sum) statistics of row slices and their merge in plain
PyTorch (checked against float64); the first launch of the two-launch split kernel on its own; a
model of the cooperative kernel's grid-wide wait and its safety net run under the interpreter; the
all-or-nothing L2 model of each design's DRAM traffic against the measurements and the Nsight
Compute counters; the recorded (or live) long-row measurements and the tuner's candidates of the
cooperative kernel; the figures; and the checkers of exercises 6.1 to 6.3.
"""

from __future__ import annotations

import math
import random
import re

import torch
import triton

from . import gpu_data, plots
from .device import occupancy
from .exercises import Wrong, call_attempt, check, fmt, guarded, guards_intact, is_untouched, run_learner_kernel
from .gpu_data import SPREAD_LIMIT, noisy, noisy_timings
from .gpu_data import device_props  # noqa: F401  (the notebook calls lesson06.device_props)
from .kernels import (softmax_online, softmax_split, softmax_split_coop, softmax_split_coop_kernel,
                      softmax_split_stats_kernel, split_plan)
from .measure import measure_shape, require_gpu
from .mode import DEVICE, ON_GPU
from .reference import error_report, round_up_err

#: The long-row shapes of the course's benchmark: language-model vocabularies and beyond.
LONG_SHAPES = [(1024, 65536), (256, 131072), (64, 262144), (8, 1048576)]

#: The benchmark's held-out long-row shape: no configuration was tuned on it.
HELD_OUT = (300, 100000)

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}

MIB = 2**20

#: The course's goal for these shapes: this fraction of a plain copy's bandwidth.
TARGET_FRAC = 0.85


#: Providers this lesson compares, in table and plot order (any that a recording lacks are skipped).
PROVIDERS = ("torch_softmax", "torch_compile", "online", "split", "split_coop", "softmax")

SHORT = {"torch_softmax": "torch.softmax", "torch_compile": "compile", "online": "online",
         "split": "two launches", "split_coop": "cooperative", "softmax": "softmax"}


def label(provider: str) -> str:
    """The display name of a provider, as every lesson names it."""
    return plots.label(provider)


def _ok(r, key: str = "graph_frac") -> bool:
    return gpu_data.ok(r, key)


def shape_name(M: int, N: int) -> str:
    """'1024 x 64K', or '8 x 1M' for a million columns."""
    n = f"{N // 2**20}M" if N % 2**20 == 0 else (f"{N // 1024}K" if N % 1024 == 0 else str(N))
    return f"{M} x {n}"


def _props(props: dict | None = None) -> dict:
    return props if props is not None else device_props(live=False)[0]


def _recorded(name: str) -> tuple[list[dict], dict]:
    """(rows, provenance) of a recorded CSV under figures/data/ (``name`` relative to it, e.g.
    'split_l2' or 'bench_runs/split_l2_b3a7cdd.csv'), with the file's name added to the provenance
    as ``source``, so that what prints a source names it from the data it was given."""
    path = name if name.endswith(".csv") else name + ".csv"
    rows, meta = gpu_data.read_csv(gpu_data.DATA_DIR / path)
    return rows, {**meta, "source": path}


def is_live(meta: dict) -> bool:
    """True for data measured in this session: a lesson's live measurement is labelled with the
    function that measured it (``helpers....``); a recorded file's command is the recording run's
    (``python -m helpers.bench ...``, ``python tools/...``) or absent."""
    return str(meta.get("command", "")).startswith("helpers.")


def source_name(meta: dict) -> str:
    """How the lesson names where rows come from: 'this run' for a live measurement, else the
    recorded file and its commit, from the provenance (never a fixed file name)."""
    if is_live(meta):
        return "this run"
    return f"{meta.get('source', 'a recording')} (commit {meta.get('commit', '?')})"


# --------------------------------------------------------------------------------------------
# The GPU's terms, with the recorded GPU's numbers
# --------------------------------------------------------------------------------------------


def print_device_terms(props: dict | None = None) -> None:
    """The numbers behind this lesson's terms: SMs, warp slots and registers per SM, the L2 cache
    and the DRAM peak (``device_props.csv``, or the live GPU's ``gpu_props``)."""
    p = _props(props)
    warps = p["max_threads_per_sm"] // p["warp_size"]
    print(f"{p.get('name', 'GPU')}: {p['sm_count']} SMs")
    print(f"  per SM: at most {warps} warps ({p['max_threads_per_sm']:,} threads) resident, "
          f"{p['regs_per_sm']:,} 32-bit registers, {p['shared_per_sm'] // 1024} KiB of shared memory")
    print(f"  L2 cache, shared by all SMs: {p['l2_bytes'] / MIB:.0f} MiB")
    if isinstance(p.get("dram_peak_gbps"), (int, float)):
        print(f"  DRAM peak (from its clocks): {p['dram_peak_gbps']:,.0f} GB/s")


def few_rows_rows() -> tuple[list[dict], dict, list[dict], dict]:
    """(rows_grow rows, meta, fused_limits rows, meta): recorded on the lesson's GPU (lessons 03, 04)."""
    grow, gmeta = gpu_data.read_csv("rows_grow")
    lim, lmeta = gpu_data.read_csv("fused_limits")
    return grow, gmeta, lim, lmeta


def print_few_rows_evidence(sm_count: int | None = None) -> None:
    """Why long rows are slow with one program per row, from the recordings of lessons 03 and 04:
    the online kernel and torch.softmax at 256 MiB of float32 as rows grow (programs per SM), and
    the fused kernel's registers and spills at 1024 x 64K."""
    sms = sm_count or _props()["sm_count"]
    grow, gmeta, lim, lmeta = few_rows_rows()
    print("rows_grow.csv (lesson 04): " + gpu_data.provenance_line(gmeta))
    print("float32, 256 MiB, one program per row; fraction of copy in GPU time (eager in brackets)")
    print(f"{'M x N':>13} {'programs per SM':>16} {'online (04)':>14} {'torch.softmax':>14}")
    shapes = sorted({(r["M"], r["N"]) for r in grow if r["dtype"] == "float32" and r["M"] <= 1024}, reverse=True)
    spreads = []
    for M, N in shapes:
        cells = []
        for p in ("online", "torch_softmax"):
            r = next((r for r in grow if (r["dtype"], r["M"], r["N"], r["provider"]) == ("float32", M, N, p)), None)
            if r is not None and _ok(r):
                cells.append(f"{r['graph_frac']:.2f} ({r['frac_of_copy']:.2f})")
                spreads += [r.get("spread", 0.0), r.get("graph_spread", 0.0)]
            else:
                cells.append("-")
        print(f"{shape_name(M, N):>13} {M / sms:>16.2f} {cells[0]:>14} {cells[1]:>14}")
    spreads = [s for s in spreads if isinstance(s, (int, float)) and math.isfinite(s)]
    if spreads and max(spreads) > 0:
        print(f"(largest spread over rounds in these cells: {max(spreads):.0%})")
    elif spreads:
        print("(recorded with one round each: no spread over rounds to show)")
    f = next((r for r in lim if r["dtype"] == "float32" and r["N"] == 65536), None)
    if f is not None:
        print("fused_limits.csv (lesson 03): " + gpu_data.provenance_line(lmeta))
        print(f"the fused kernel (03) at float32 {shape_name(f['M'], f['N'])}: {f['n_regs']} registers a thread, "
              f"{f['n_spills']} spilled; {f['graph_frac']:.2f} of copy in GPU time ({f['frac_of_copy']:.2f} eager)")
    print(f"the online kernel moves 3MN against the copy's 2MN: at best 2/3 = {2 / 3:.2f} of copy")


# --------------------------------------------------------------------------------------------
# How many programs a few long rows give
# --------------------------------------------------------------------------------------------


def print_programs_table(shapes=LONG_SHAPES, sm_count: int = 132, per_sm: int = 8) -> None:
    """For each shape: the programs one program per row gives, per SM, and how many slices per row
    ``helpers.kernels.split_plan`` cuts to reach about ``per_sm`` programs per SM."""
    target = per_sm * sm_count
    print(f"{sm_count} SMs; the split kernels aim at {per_sm} programs per SM = {target} programs")
    head = (f"{'M x N':>14} {'one per row':>12} {'per SM':>7} {'SMs idle':>9}   "
            f"{'slices/row':>10} {'slice cols':>10} {'programs':>9} {'per SM':>7}")
    print(head)
    print("-" * len(head))
    for M, N in shapes:
        plan = split_plan(M, N, 4, target_programs=target)
        progs = M * plan["slices"]
        idle = max(0, sm_count - M)
        print(f"{shape_name(M, N):>14} {M:>12,} {M / sm_count:>7.2f} {idle:>9}   "
              f"{plan['slices']:>10} {plan['slice_len']:>10,} {progs:>9,} {progs / sm_count:>7.2f}")


# --------------------------------------------------------------------------------------------
# Slice statistics and their merge, in plain PyTorch
# --------------------------------------------------------------------------------------------

#: The pair of an empty slice: merging with it changes nothing.
IDENTITY = (-math.inf, 0.0)


def slice_stats(x: torch.Tensor, slices: int, slice_len: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Cut the last dimension of ``x`` into ``slices`` consecutive slices of ``slice_len`` columns
    (default: ceil(N / slices); the last slices may be partial or empty) and reduce each to
    (m, d): its maximum and the sum of exp(x - m). Returns two tensors of shape
    ``x.shape[:-1] + (slices,)``, computed in x's dtype. An empty slice, or one of nothing but
    -inf, gives the identity (-inf, 0)."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() == 0:
        raise TypeError("slice_stats: x must be a floating tensor with at least one dimension.")
    if isinstance(slices, bool) or not isinstance(slices, int) or slices < 1:
        raise ValueError(f"slice_stats: slices must be a positive int, got {slices!r}.")
    N = x.shape[-1]
    L = slice_len if slice_len is not None else max(1, -(-N // slices))
    if L * slices < N:
        raise ValueError(f"slice_stats: {slices} slices of {L} columns do not cover {N} columns.")
    pad = torch.full((*x.shape[:-1], L * slices - N), -math.inf, dtype=x.dtype, device=x.device)
    parts = torch.cat([x, pad], dim=-1).reshape(*x.shape[:-1], slices, L)
    m = parts.max(dim=-1).values
    terms = torch.where(parts == -math.inf, torch.zeros((), dtype=x.dtype, device=x.device),
                        torch.exp(parts - m.unsqueeze(-1)))
    return m, terms.sum(dim=-1)


def merge(a, b):
    """(m_a, d_a) merged with (m_b, d_b): m = max(m_a, m_b), d = d_a e^(m_a - m) + d_b e^(m_b - m).
    Floats give floats; tensors (of pairs, element-wise) give tensors. The identity (-inf, 0)
    contributes nothing, even where both are the identity (where e^(-inf - -inf) would be NaN)."""
    (m_a, d_a), (m_b, d_b) = a, b
    if not any(isinstance(v, torch.Tensor) for v in (m_a, d_a, m_b, d_b)):
        m = max(m_a, m_b)
        if m == -math.inf:
            return -math.inf, 0.0
        return m, d_a * math.exp(m_a - m) + d_b * math.exp(m_b - m)
    m = torch.maximum(torch.as_tensor(m_a), torch.as_tensor(m_b))
    zero = torch.zeros((), dtype=m.dtype)
    part_a = torch.where(torch.as_tensor(d_a) == 0, zero, d_a * torch.exp(m_a - m))
    part_b = torch.where(torch.as_tensor(d_b) == 0, zero, d_b * torch.exp(m_b - m))
    return m, part_a + part_b


def merge_in_random_order(pairs: list, rng: random.Random):
    """Merge a list of (m, d) pairs into one with ``merge``, in a random order and a random tree
    shape: shuffle them, then repeatedly merge a randomly chosen neighbouring two."""
    items = list(pairs)
    rng.shuffle(items)
    if not items:
        return IDENTITY
    while len(items) > 1:
        i = rng.randrange(len(items) - 1)
        items[i:i + 2] = [merge(items[i], items[i + 1])]
    return items[0]


def logsumexp_of(pair) -> float:
    """log(sum_j e^(x_j)) from a row's (m, d): m + log d (-inf for the identity)."""
    m, d = pair
    return -math.inf if d == 0 else m + math.log(d)


def demo_rows(seed: int = 0, n_cols: int = 48) -> torch.Tensor:
    """Five float64 rows that exercise the merge: random, a late maximum of 200 (e^200 overflows
    float32), a first half of -inf, a middle of -inf, and a single finite value."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(5, n_cols, generator=g, dtype=torch.float64) * 3
    x[1, -3] = 200.0
    x[2, : n_cols // 2] = -math.inf
    x[3, n_cols // 4: 3 * n_cols // 4] = -math.inf
    x[4, :] = -math.inf
    x[4, n_cols // 3] = 1.5
    return x


def check_merge_orders(x: torch.Tensor | None = None, slices=(1, 3, 4, 7, 12), orders: int = 50, seed: int = 0) -> bool:
    """For each row of ``x`` (float64) and each number of slices: reduce every slice to (m, d),
    merge the pairs in ``orders`` random orders and groupings, and compare m + log d with
    torch.logsumexp of the row. Prints one line per number of slices (how many slices were all
    -inf, the worst error); returns True if every merge is within 1e-12 of the reference."""
    x = demo_rows() if x is None else x.to(torch.float64)
    rng = random.Random(seed)
    ref = torch.logsumexp(x, dim=-1).tolist()
    ok_all = True
    print(f"{x.shape[0]} rows of {x.shape[1]} columns (float64), {orders} random merge orders each")
    for s in slices:
        m, d = slice_stats(x, s)
        empty = int((m == -math.inf).sum())
        worst = 0.0
        for r in range(x.shape[0]):
            pairs = list(zip(m[r].tolist(), d[r].tolist()))
            for _ in range(orders):
                got = logsumexp_of(merge_in_random_order(pairs, rng))
                worst = max(worst, abs(got - ref[r]))
        ok = worst <= 1e-12
        ok_all &= ok
        print(f"  {s:>2} slices ({empty:>2} of them all -inf): max |m + log d - logsumexp| = "
              f"{round_up_err(worst):>9}  {'ok' if ok else 'WRONG'}")
    return ok_all


def print_merge_laws(seed: int = 1) -> None:
    """The three laws on concrete pairs: identity, commutativity, associativity (float64)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 5, generator=g, dtype=torch.float64) * 4
    m, d = slice_stats(x, 1)
    a, b, c = [(m[i, 0].item(), d[i, 0].item()) for i in range(3)]

    def show(p):
        return f"({p[0]:.6f}, {p[1]:.6f})"

    print("a =", show(a), " b =", show(b), " c =", show(c))
    print("a + identity     =", show(merge(a, IDENTITY)), " (a itself)")
    print("identity + identity =", merge(IDENTITY, IDENTITY))
    print("a + b            =", show(merge(a, b)))
    print("b + a            =", show(merge(b, a)))
    print("(a + b) + c      =", show(merge(merge(a, b), c)))
    print("a + (b + c)      =", show(merge(a, merge(b, c))))
    whole = slice_stats(x.reshape(-1), 1)
    print("all 15 numbers at once:", show((whole[0][0].item(), whole[1][0].item())))


# --------------------------------------------------------------------------------------------
# The two-launch kernel, one launch at a time
# --------------------------------------------------------------------------------------------


def split_layout(n_cols: int, slices: int, block_size: int) -> tuple[int, int]:
    """(slice_len, n_slices) as ``softmax_split`` lays a row out when asked for ``slices`` slices
    of blocks of ``block_size``: a slice is a whole number of blocks, so the row may end up in
    fewer slices than asked for."""
    slice_len = triton.cdiv(triton.cdiv(n_cols, slices), block_size) * block_size
    return slice_len, triton.cdiv(n_cols, slice_len)


def launch_stats(x: torch.Tensor, slices: int, block_size: int) -> torch.Tensor:
    """Run only the first launch of the two-launch split (``softmax_split_stats_kernel``) on a 2-D
    float32 ``x`` and return its statistics tensor, shape (rows, n_slices, 2): [..., 0] is each
    slice's maximum m, [..., 1] its sum of exp(x - m)."""
    if x.dim() != 2 or x.dtype != torch.float32:
        raise ValueError("launch_stats: x must be a 2-D float32 tensor.")
    x = x.to(DEVICE)
    n_rows, n_cols = x.shape
    slice_len, n_slices = split_layout(n_cols, slices, block_size)
    stats = torch.empty((n_rows, n_slices, 2), dtype=torch.float32, device=x.device)
    softmax_split_stats_kernel[(n_rows, n_slices)](
        stats, x, x.stride(0), x.stride(1), n_cols, slice_len, n_slices, BLOCK_SIZE=block_size,
    )
    return stats


def compare_stats(x: torch.Tensor, slices: int, block_size: int) -> float:
    """Print the kernel's statistics tensor for ``x`` next to ``slice_stats`` in float64; return
    the largest relative difference of the d's (the m's are compared exactly)."""
    stats = launch_stats(x, slices, block_size).cpu()
    slice_len, n_slices = split_layout(x.shape[1], slices, block_size)
    m64, d64 = slice_stats(x.cpu().to(torch.float64), n_slices, slice_len)
    print(f"x: {tuple(x.shape)}, asked for {slices} slices of blocks of {block_size} -> "
          f"{n_slices} slices of {slice_len} columns; stats tensor of shape {tuple(stats.shape)}")
    worst = 0.0
    for r in range(x.shape[0]):
        cells = []
        for s in range(n_slices):
            m_k, d_k = stats[r, s].tolist()
            cells.append(f"({m_k:7.3f}, {d_k:7.3f})" if m_k != -math.inf else f"({'-inf':>7}, {d_k:7.3f})")
            if not (m_k == m64[r, s].item() or (math.isinf(m_k) and math.isinf(m64[r, s].item()))):
                raise AssertionError(f"row {r} slice {s}: kernel max {m_k} != {m64[r, s].item()}")
            if d64[r, s].item() > 0:
                worst = max(worst, abs(d_k - d64[r, s].item()) / d64[r, s].item())
            elif d_k != 0:
                raise AssertionError(f"row {r} slice {s}: an all -inf slice has d = {d_k}, not 0")
        print(f"  row {r}: " + " ".join(cells))
    print(f"every m equals the float64 one; largest relative difference of a d: {round_up_err(worst)}")
    return worst


def inf_rows(n_cols: int = 1000) -> torch.Tensor:
    """float32 rows whose slices hold only -inf in places: the first half, a middle stretch, all
    but one value, the maximum (200) in the last columns after -inf, and a row of only -inf
    (softmax is undefined: the reference says NaN)."""
    g = torch.Generator().manual_seed(6)
    x = torch.randn(5, n_cols, generator=g) * 3
    x[0, : n_cols // 2] = -math.inf
    x[1, n_cols // 5: 4 * n_cols // 5] = -math.inf
    keep = x[2, n_cols // 3].item()
    x[2, :] = -math.inf
    x[2, n_cols // 3] = keep
    x[3, : n_cols - 10] = -math.inf
    x[3, -2] = 200.0
    x[4, :] = -math.inf
    return x



def check_split_on_inf_rows(slices=(1, 2, 3, 5, 8, 16), block_size: int = 64, n_cols: int = 1000) -> bool:
    """``helpers.softmax_split`` on ``inf_rows`` with several numbers of slices: NaN exactly where
    the float64 reference has NaN (the all -inf row) and within 1e-6 everywhere else. The table is
    printed at once, after every launch."""
    x = inf_rows(n_cols)
    ok_all = True
    lines = [f"5 rows of {n_cols} columns with all -inf slices, blocks of {block_size}"]
    for s in slices:
        slice_len, n_slices = split_layout(n_cols, s, block_size)
        m, _ = slice_stats(x.to(torch.float64), n_slices, slice_len)
        empty = int((m == -math.inf).sum())
        y = softmax_split(x.to(DEVICE), slices=s, block_size=block_size)
        rep = error_report(y, x)
        ok = rep.ok(atol=1e-6)
        ok_all &= ok
        lines.append(f"  slices={s:>2} -> {n_slices:>2} of {slice_len:>4} columns, {empty:>2} all -inf: "
                     f"max abs err {round_up_err(rep.max_abs):>9}, NaN mismatches {rep.nan_mismatch}  "
                     f"{'ok' if ok else 'WRONG'}")
    print("\n".join(lines))
    return ok_all

def plot_row_cut(M: int = 3, slices: int = 4):
    """How the two-launch split cuts M rows into slices: one program (row, s) per slice, each
    writing its (m, d) pair into the (M, slices, 2) statistics tensor; the second launch reads a
    row's pairs back and normalizes the same slice."""
    from matplotlib.patches import FancyArrowPatch, Rectangle

    fig, ax = plots.new_figure(10.0, 3.9)
    ax.set_axis_off()
    cmap = ["#c6dbef", "#9ecae1", "#6baed6", "#4292c6", "#2171b5", "#08519c"]
    row_h, gap, seg_w = 0.62, 0.38, 1.55
    x0 = 0.9
    top = (M - 1) * (row_h + gap)
    for r in range(M):
        y = top - r * (row_h + gap)
        ax.text(x0 - 0.15, y + row_h / 2, f"row {r}", ha="right", va="center", fontsize=9)
        for s in range(slices):
            c = cmap[s % len(cmap)]
            ax.add_patch(Rectangle((x0 + s * seg_w, y), seg_w, row_h, facecolor=c, edgecolor="white", lw=2))
            ax.text(x0 + (s + 0.5) * seg_w, y + row_h / 2, f"program ({r}, {s})", ha="center", va="center",
                    fontsize=8, color="white" if s >= 3 else "black")
    w_row = slices * seg_w
    ax.annotate("", xy=(x0 + w_row, top + row_h + 0.28), xytext=(x0, top + row_h + 0.28),
                arrowprops=dict(arrowstyle="<->", lw=0.8, color="#555555"))
    ax.text(x0 + w_row / 2, top + row_h + 0.4, f"one row: N columns, cut into {slices} slices of N/{slices}",
            ha="center", va="bottom", fontsize=9)
    # the statistics tensor, one cell per program, coloured like its slice
    sx0, cell_w, cell_h = x0 + w_row + 3.0, 0.78, 0.62
    for r in range(M):
        y = top - r * (row_h + gap)
        for s in range(slices):
            ax.add_patch(Rectangle((sx0 + s * cell_w, y), cell_w, cell_h, facecolor=cmap[s % len(cmap)],
                                   alpha=0.45, edgecolor="#333333", lw=0.8))
            ax.text(sx0 + (s + 0.5) * cell_w, y + cell_h / 2, "m, d", ha="center", va="center", fontsize=8)
    ax.text(sx0 + slices * cell_w / 2, top + row_h + 0.4,
            f"statistics: ({M}, {slices}, 2) float32", ha="center", va="bottom", fontsize=9)
    # one program and its cell, outlined; the two launches as arrows between them
    r, s = 1, 2
    y = top - r * (row_h + gap)
    ax.add_patch(Rectangle((x0 + s * seg_w, y), seg_w, row_h, facecolor="none", edgecolor="#d62728", lw=2))
    ax.add_patch(Rectangle((sx0 + s * cell_w, y), cell_w, cell_h, facecolor="none", edgecolor="#d62728", lw=2))
    mid = (x0 + w_row + sx0) / 2
    ax.add_patch(FancyArrowPatch((x0 + w_row + 0.1, y + row_h * 0.72), (sx0 - 0.1, y + row_h * 0.72),
                                 arrowstyle="-|>", mutation_scale=12, color="#d62728", lw=1.4))
    ax.text(mid, y + row_h + 0.05, "launch 1: each program\nreduces its slice to (m, d)", color="#d62728",
            ha="center", va="bottom", fontsize=8)
    ax.add_patch(FancyArrowPatch((sx0 - 0.1, y + row_h * 0.28), (x0 + w_row + 0.1, y + row_h * 0.28),
                                 arrowstyle="-|>", mutation_scale=12, color="#2ca02c", lw=1.4))
    ax.text(mid, y - 0.05, "launch 2: each program merges\nits row's pairs, then normalizes\nand writes its slice",
            color="#2ca02c", ha="center", va="top", fontsize=8)
    ax.set_xlim(0, sx0 + slices * cell_w + 0.2)
    ax.set_ylim(-0.9, top + row_h + 1.2)
    ax.set_title(f"{M} rows x {slices} slices = {M * slices} programs, where one program per row gives {M}",
                 fontsize=10)
    return fig


# --------------------------------------------------------------------------------------------
# The grid-wide wait, modelled: when it finishes and when it deadlocks
# --------------------------------------------------------------------------------------------


def simulate_grid_wait(n_rows: int, n_slices: int, resident: int, order: str = "row-major") -> dict:
    """A model of the cooperative kernel's wait with one program per (row, slice): a program is
    dispatched when an SM slot is free, counts itself in, then holds its slot until every slice of
    its row has counted in. ``order``: 'row-major' dispatches row 0's slices first, 'slice-major'
    slice 0 of every row first. Returns finished, the programs that completed, and (on deadlock)
    the programs stuck waiting and those never dispatched."""
    if order == "row-major":
        queue = [(r, s) for r in range(n_rows) for s in range(n_slices)]
    elif order == "slice-major":
        queue = [(r, s) for s in range(n_slices) for r in range(n_rows)]
    else:
        raise ValueError("order must be 'row-major' or 'slice-major'")
    count = [0] * n_rows
    running, done = [], 0
    while True:
        while queue and len(running) < resident:
            r, s = queue.pop(0)
            count[r] += 1
            running.append((r, s))
        finished = [p for p in running if count[p[0]] == n_slices]
        if not finished:
            break
        running = [p for p in running if count[p[0]] < n_slices]
        done += len(finished)
    return {"finished": not running and not queue, "completed": done, "waiting": running, "never_started": len(queue)}


def print_grid_wait_cases(n_rows: int = 2, n_slices: int = 4) -> None:
    """The model on a few GPUs: how many programs fit at once, and the dispatch order."""
    grid = n_rows * n_slices
    print(f"{n_rows} rows x {n_slices} slices = {grid} programs, each waiting for its row's other slices")
    cases = [(1, "row-major", "the interpreter (one program at a time)"),
             (grid, "slice-major", "the whole grid resident"),
             (6, "row-major", "6 resident, row by row"),
             (6, "slice-major", "6 resident, slice by slice"),
             (3, "row-major", "3 resident: fewer than a row's slices")]
    for resident, order, what in cases:
        r = simulate_grid_wait(n_rows, n_slices, resident, order)
        if r["finished"]:
            verdict = "finishes"
        else:
            waiting = ", ".join(f"({a},{b})" for a, b in r["waiting"])
            verdict = (f"DEADLOCK: {waiting} wait forever; {r['never_started']} never start")
        print(f"  {what:<42} {verdict}")




def run_coop_kernel(x: torch.Tensor, slice_cols: int, rows_per_round: int, max_spin: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch ``softmax_split_coop_kernel`` itself (not its wrapper) on a 2-D ``x`` with a spin limit
    of ``max_spin`` polls. Returns (y, the workspace's counters): a counter per row of the slices
    that counted in, then the number of programs that gave up waiting."""
    M, N = x.shape
    n_slices = triton.cdiv(N, slice_cols)
    y = torch.full_like(x, float("nan"))
    # one zeroed int32 buffer: the (m, d) pairs as float32, a counter per row, the timeout count
    ws = torch.zeros(2 * M * n_slices + M + 1, dtype=torch.int32, device=x.device)
    softmax_split_coop_kernel[(rows_per_round * n_slices,)](
        y, x, ws, x.stride(0), x.stride(1), y.stride(0), M, N, n_slices, rows_per_round,
        SLICE=slice_cols, SLICES_P2=triton.next_power_of_2(n_slices), MAX_SPIN=max_spin,
        **({"launch_cooperative_grid": True} if ON_GPU else {}))
    return y, ws[2 * M * n_slices:]


def print_coop_safety_net(M: int = 3, N: int = 300, slice_cols: int = 64, max_spin: int = 1) -> bool:
    """The cooperative kernel with a spin limit of ``max_spin`` polls on rows with -inf slices and
    a huge value: under the interpreter (one program at a time) every program but the last of its
    row gives up waiting, reads its whole row and computes the row's (m, d) itself. Prints the
    count in the workspace's last word and checks the result against float64."""
    g = torch.Generator().manual_seed(6)
    x = torch.randn(M, N, generator=g) * 4
    x[1, : N // 2] = -math.inf
    x[M - 1, N // 3] = 1e4
    n_slices = triton.cdiv(N, slice_cols)
    y, counts = run_coop_kernel(x.to(DEVICE), slice_cols, rows_per_round=M, max_spin=max_spin)
    rep = error_report(y, x)
    ok = rep.ok(atol=1e-6)
    print(f"softmax_split_coop_kernel launched directly: {M} rows x {n_slices} slices = {M * n_slices} programs, "
          f"MAX_SPIN = {max_spin}")
    print(f"slices counted in, per row: {counts[:-1].tolist()}")
    print(f"programs that gave up waiting and computed their row themselves (the last word): "
          f"{int(counts[-1])} of {M * n_slices}")
    print(f"result within 1e-6 of the float64 softmax: {ok} (max abs error {round_up_err(rep.max_abs)})")
    return ok


# --------------------------------------------------------------------------------------------
# Traffic and the L2 cache: the all-or-nothing model
# --------------------------------------------------------------------------------------------

#: (reads of x, of which a second read that L2 may serve, writes of y) per design, in units of MN.
DESIGNS = {
    "online": ("online (04): one program per row", 2, 1, 1),
    "split": ("split, two launches", 2, 1, 1),
    "split_coop": ("split, cooperative (one launch)", 1, 0, 1),
}


def fits_in_l2(M: int, N: int, element_size: int, l2_bytes: int) -> bool:
    """True if the whole (M, N) input fits in an L2 cache of ``l2_bytes``: in the all-or-nothing
    model, the condition for the two-launch split's second read to come from L2 rather than DRAM."""
    return M * N * element_size <= l2_bytes


def model_dram_bytes(design: str, M: int, N: int, element_size: int, l2_bytes: int) -> int:
    """DRAM bytes of a design in the all-or-nothing model (statistics left out): the online kernel
    3MN (both passes counted from DRAM), the two launches 3MN or 2MN when x fits in L2, the
    cooperative kernel 2MN."""
    if design not in DESIGNS:
        raise ValueError(f"model_dram_bytes: design must be one of {sorted(DESIGNS)}, got {design!r}.")
    passes = 3
    if design == "split_coop" or (design == "split" and fits_in_l2(M, N, element_size, l2_bytes)):
        passes = 2
    return passes * M * N * element_size


def predicted_frac_answer(design: str, M: int, N: int, element_size: int, l2_bytes: int) -> float:
    """The model's prediction, as a fraction of a copy's speed: if time is DRAM bytes over one
    bandwidth, a design runs at (a copy's 2MN bytes) / (its own bytes) of a copy's speed."""
    return 2 * M * N * element_size / model_dram_bytes(design, M, N, element_size, l2_bytes)


def print_traffic_table(shapes=LONG_SHAPES, l2_bytes: int | None = None, dtypes=("float32", "bfloat16")) -> None:
    """For each long shape and dtype: the size of x, whether it fits in L2, and each design's DRAM
    traffic in the all-or-nothing model, in MiB and units of MN, with the predicted fraction of copy."""
    l2_bytes = l2_bytes or _props()["l2_bytes"]
    print(f"the all-or-nothing model with an L2 of {l2_bytes / MIB:.0f} MiB: DRAM traffic in MiB (units of MN), "
          f"predicted fraction of copy")
    head = f"{'dtype':9} {'M x N':>13} {'x MiB':>6} {'x in L2':>8}   " + "   ".join(
        f"{n:>21}" for n in ("online", "two launches", "cooperative"))
    print(head)
    print("-" * len(head))
    for d in dtypes:
        es = DTYPE_BYTES[d]
        for M, N in shapes:
            xb = M * N * es
            cells = []
            for dz in ("online", "split", "split_coop"):
                b = model_dram_bytes(dz, M, N, es, l2_bytes)
                cells.append(f"{b / MIB:>5.0f} ({b // xb}MN) -> {predicted_frac_answer(dz, M, N, es, l2_bytes):.2f}")
            print(f"{d:9} {shape_name(M, N):>13} {xb / MIB:>6.0f} {'yes' if fits_in_l2(M, N, es, l2_bytes) else 'no':>8}   "
                  + "   ".join(f"{c:>21}" for c in cells))


# --------------------------------------------------------------------------------------------
# The model against the measurement: split_l2.csv and the Nsight Compute counters
# --------------------------------------------------------------------------------------------

#: The two-launch design against the cooperative one as the tensor grows past L2: float32 rows of
#: 65536 columns, 8 MiB to 256 MiB.
L2_SHAPES = [(32, 65536), (64, 65536), (128, 65536), (256, 65536), (512, 65536), (1024, 65536)]


def l2_rows(shapes=L2_SHAPES, dtype_name: str = "float32") -> list[dict]:
    """Measure copy, the online kernel and both split designs at sizes below and above the L2 cache
    (GPU only; ``helpers.measure`` columns). ``python -m helpers.bench lessons`` records them as
    ``figures/data/split_l2.csv``."""
    from .measure import DTYPES

    require_gpu("l2_rows")
    provs = {"online": softmax_online, "split": softmax_split, "split_coop": softmax_split_coop}
    rows = []
    for M, N in shapes:
        rows += measure_shape(M, N, DTYPES[dtype_name], provs, host=False)
    return rows


def l2_data(live: bool | None = None) -> tuple[list[dict], dict]:
    """(rows, provenance) of the L2 sweep: measured live on a GPU (``l2_rows``, the method of
    ``make bench``), else the recorded ``split_l2.csv``."""
    live = ON_GPU if live is None else live
    if live:
        return l2_rows(), gpu_data.provenance("helpers.lesson06.l2_rows()")
    return _recorded("split_l2")


#: The L2 sweep recorded before the cooperative kernel's grid-sizing fix (commit b3a7cdd), kept.
EARLIER_L2 = "bench_runs/split_l2_b3a7cdd.csv"


def earlier_l2_data() -> tuple[list[dict], dict]:
    """(rows, provenance) of the earlier recording of the L2 sweep (``EARLIER_L2``). It does not
    record which configuration of the cooperative kernel each row used."""
    return _recorded(EARLIER_L2)


def _find(rows, provider, M, N, dtype="float32"):
    return next((r for r in rows if (r["dtype"], r["M"], r["N"], r["provider"]) == (dtype, M, N, provider)), None)


#: The designs of the L2 sweep, in table order.
L2_DESIGNS = ("split", "split_coop", "online")


def l2_points(rows: list[dict], l2_bytes: int) -> list[dict]:
    """One dict per size of the L2 sweep: x's bytes, whether it fits, the copy's GPU µs, and for each
    design the model's fraction of copy and the measured ones (GPU time, eager) with their spreads."""
    out = []
    for d, M, N in sorted({(r["dtype"], r["M"], r["N"]) for r in rows}, key=lambda k: k[1] * k[2] * DTYPE_BYTES[k[0]]):
        es = DTYPE_BYTES[d]
        copy = _find(rows, "copy", M, N, d)
        if copy is None or not _ok(copy):
            continue
        p = {"dtype": d, "M": M, "N": N, "x_bytes": M * N * es, "fits": fits_in_l2(M, N, es, l2_bytes),
             "copy_us": copy["graph_ms"] * 1e3, "copy_eager_us": copy["ms"] * 1e3}
        for dz in L2_DESIGNS:
            r = _find(rows, dz, M, N, d)
            p[dz] = {"model": predicted_frac_answer(dz, M, N, es, l2_bytes),
                     "gpu": r["graph_frac"] if r is not None and _ok(r) else None,
                     "eager": r["frac_of_copy"] if r is not None and _ok(r, "frac_of_copy") else None,
                     "us": r["graph_ms"] * 1e3 if r is not None and _ok(r) else None,
                     # spread over rounds: of the GPU time, of the eager time, and the larger one
                     "graph_spread": r.get("graph_spread") if r is not None else None,
                     "eager_spread": r.get("spread") if r is not None else None,
                     "spread": max(r.get("spread", 0.0), r.get("graph_spread", 0.0)) if r is not None else None}
        out.append(p)
    return out


def _f(v, w=4):
    return f"{v:.2f}" if isinstance(v, (int, float)) and math.isfinite(v) else "-".rjust(w)


def print_l2_model_vs_measured(rows: list[dict], l2_bytes: int | None = None) -> None:
    """The all-or-nothing model's prediction against the measurement at each size of the L2 sweep,
    then what that says, computed from the rows."""
    l2_bytes = l2_bytes or _props()["l2_bytes"]
    pts = l2_points(rows, l2_bytes)
    if not pts:
        print("no L2 sweep rows to show")
        return
    print(f"float32 rows of {pts[0]['N']:,} columns; L2 = {l2_bytes / MIB:.0f} MiB; fraction of copy: "
          f"the model's prediction, then the measurement in GPU time (eager in brackets)")
    print(f"{'':29}" + "".join(f"{SHORT[dz]:>21} " for dz in L2_DESIGNS))
    print(f"{'x MiB':>6} {'M':>5} {'in L2':>6} {'copy µs':>8}  " + "".join(f"{'model':>7} {'measured':>13} " for _ in L2_DESIGNS))
    for p in pts:
        cells = "".join(f"{p[dz]['model']:>7.2f} {_f(p[dz]['gpu']) + ' (' + _f(p[dz]['eager']) + ')':>13} " for dz in L2_DESIGNS)
        print(f"{p['x_bytes'] / MIB:>6.0f} {p['M']:>5} {'yes' if p['fits'] else 'no':>6} {p['copy_us']:>8.1f}  {cells}")
    fit = [p for p in pts if p["fits"] and p["split"]["gpu"]]
    out = [p for p in pts if not p["fits"] and p["split"]["gpu"]]
    if fit:
        b = fit[-1]
        s = b["split"]
        print(f"at {b['x_bytes'] / MIB:.0f} MiB, the largest x that fits: the model says the two launches run at "
              f"{s['model']:.2f} of copy; measured {s['gpu']:.2f} (eager {_f(s['eager'])}), so they took "
              f"{s['model'] / s['gpu']:.2f}x the time the model allows")
    if out:
        g = [p["split"]["gpu"] for p in out]
        e = [p["split"]["eager"] for p in out if p["split"]["eager"]]
        print(f"beyond L2 ({out[0]['x_bytes'] / MIB:.0f} to {out[-1]['x_bytes'] / MIB:.0f} MiB) the model says "
              f"{out[0]['split']['model']:.2f}; measured {min(g):.2f} to {max(g):.2f} (eager {min(e):.2f} to {max(e):.2f})")
    if fit and out:
        a, b = fit[-1], out[0]
        print(f"across the L2 line ({a['x_bytes'] / MIB:.0f} -> {b['x_bytes'] / MIB:.0f} MiB) the model drops from "
              f"{a['split']['model']:.2f} to {b['split']['model']:.2f}; the measurement goes from "
              f"{a['split']['gpu']:.2f} to {b['split']['gpu']:.2f}")
    c = [p["split_coop"]["gpu"] for p in pts if p["split_coop"]["gpu"]]
    if c:
        print(f"the cooperative kernel: the model says 1.00 at every size; measured {min(c):.2f} to {max(c):.2f}")
    gaps = [(p, p["split_coop"]["gpu"] - p["split"]["gpu"]) for p in pts if p["split_coop"]["gpu"] and p["split"]["gpu"]]
    if gaps:
        print("the cooperative kernel minus the two launches, GPU time: "
              + ", ".join(f"{g:+.2f} at {p['x_bytes'] / MIB:.0f} MiB" for p, g in gaps))
    noisy_cells = l2_noisy_cells(pts)
    print("spread over rounds above 10%: " + (", ".join(noisy_cells) + " (no conclusion rests on it)" if noisy_cells else "none"))


def l2_noisy_cells(pts: list[dict]) -> list[str]:
    """The measurements of the L2 sweep whose spread over rounds exceeds ``SPREAD_LIMIT``, named by
    design, size and timing (GPU time or eager)."""
    out = []
    for p in pts:
        for dz in L2_DESIGNS:
            for key, name in (("graph_spread", "GPU time"), ("eager_spread", "eager")):
                v = p[dz].get(key)
                if noisy(v):
                    out.append(f"{label(dz)} at {p['x_bytes'] / MIB:.0f} MiB ({name} {v:.0%})")
    return out


def ncu_data() -> tuple[list[dict], dict]:
    """(rows, provenance) of the recorded Nsight Compute summary ``ncu_h100.csv`` (one row per kernel).
    Its provenance may lack lines (driver, versions, command): they print as '?'."""
    return _recorded(f"ncu_{gpu_data.LESSON_GPU}")


#: What each Nsight Compute case ran (``tools/ncu_probe.py``): (dtype, M, N).
NCU_SHAPES = {
    "small_fp32_256": ("float32", 4096, 256), "small_bf16_256": ("bfloat16", 4096, 256),
    "bf16_1024": ("bfloat16", 4096, 1024), "coop_fp32_8x1M": ("float32", 8, 1048576),
    "coop_bf16_8x1M": ("bfloat16", 8, 1048576), "coop_bf16_64x256K": ("bfloat16", 64, 262144),
    "coop_fp32_1024x64K": ("float32", 1024, 65536), "split_fp32_32MiB": ("float32", 128, 65536),
    "split_fp32_256MiB": ("float32", 1024, 65536),
}

KERNEL_SHORT = {"softmax_split_stats_kernel": "stats", "softmax_split_normalize_kernel": "normalize",
                "softmax_split_coop_kernel": "cooperative", "softmax_tiled_kernel": "tiled (05)"}


def _x_bytes(case: str) -> int:
    d, M, N = NCU_SHAPES[case]
    return M * N * DTYPE_BYTES[d]


def print_split_counters(ncu_rows: list[dict], l2_rows_: list[dict] | None = None, props: dict | None = None) -> None:
    """The two launches under Nsight Compute at 32 MiB and 256 MiB: each kernel's duration, DRAM
    bytes, % of the DRAM peak and L2 hit rate, their sum against the pair's GPU time in the L2 sweep,
    and the model's bytes for the normalize kernel at the size that fits."""
    p = _props(props)
    cases = [c for c in ("split_fp32_32MiB", "split_fp32_256MiB") if any(r["case"] == c for r in ncu_rows)]
    print(f"{'case':>19} {'x MiB':>6}  {'kernel':<10} {'µs':>7} {'DRAM MB':>8} {'% of peak':>10} {'L2 hit':>7}")
    for c in cases:
        ks = [r for r in ncu_rows if r["case"] == c]
        xb = _x_bytes(c)
        for i, r in enumerate(ks):
            print(f"{c if i == 0 else '':>19} {f'{xb / MIB:.0f}' if i == 0 else '':>6}  {KERNEL_SHORT.get(r['kernel'], r['kernel']):<10} "
                  f"{r['duration_ns'] / 1e3:>7.1f} {r['dram_bytes'] / 1e6:>8.1f} {r['dram_pct_of_peak']:>9.0f}% "
                  f"{r['l2_hit_pct']:>6.0f}%")
        tot_us = sum(r["duration_ns"] for r in ks) / 1e3
        tot_mb = sum(r["dram_bytes"] for r in ks) / 1e6
        print(f"{'':>19} {'':>6}  {'both':<10} {tot_us:>7.1f} {tot_mb:>8.1f}")
        if l2_rows_:
            _, M, N = NCU_SHAPES[c]
            t = _find(l2_rows_, "split", M, N)
            if t is not None and _ok(t):
                print(f"{'':>19} {'':>6}  the same two launches back to back in the L2 sweep, in a CUDA graph: "
                      f"{t['graph_ms'] * 1e3:.1f} µs")
    fit = [c for c in cases if _x_bytes(c) <= p["l2_bytes"]]
    if fit:
        c = fit[0]
        xb = _x_bytes(c)
        norm = next(r for r in ncu_rows if r["case"] == c and r["kernel"] == "softmax_split_normalize_kernel")
        print(f"the model at {xb / MIB:.0f} MiB (x and y are {xb / 1e6:.1f} MB each): the normalize kernel moves "
              f"{xb / 1e6:.1f} MB (y only) if x's second read comes from L2, {2 * xb / 1e6:.1f} MB if it does not; "
              f"measured {norm['dram_bytes'] / 1e6:.1f} MB")


def print_write_back(ncu_rows: list[dict]) -> None:
    """Every profiled kernel's DRAM bytes against what it reads and writes: what was written to DRAM
    during the kernel (DRAM bytes minus reads) and what of its output was still in L2 at the end."""
    print(f"{'case':>19}  {'kernel':<11} {'reads MB':>9} {'writes MB':>10} {'DRAM MB':>8} {'DRAM - reads':>13} "
          f"{'writes still in L2':>19}")
    order = sorted(ncu_rows, key=lambda r: (_x_bytes(r["case"]), r["case"], r["kernel"] != "softmax_split_stats_kernel"))
    for r in order:
        xb = _x_bytes(r["case"])
        if r["kernel"] == "softmax_split_stats_kernel":
            reads, writes = xb, 0  # (its statistics are a few KB)
        else:
            reads, writes = xb, xb  # x read once (normalize: its second read, from a flushed L2), y written
        back = r["dram_bytes"] - reads
        left = max(0, writes - max(0, back))
        print(f"{r['case']:>19}  {KERNEL_SHORT.get(r['kernel'], r['kernel']):<11} {reads / 1e6:>9.1f} {writes / 1e6:>10.1f} "
              f"{r['dram_bytes'] / 1e6:>8.1f} {back / 1e6:>13.1f} {left / 1e6 if writes else 0:>19.1f}")


def plot_traffic():
    """DRAM traffic of each design in units of MN: a first read of x, a second read (hatched where
    it may come from L2), the write of y."""
    fig, ax = plots.new_figure(7.6, 3.6)
    names = ["online (04)\none program per row", "split, two launches\nx larger than L2",
             "split, two launches\nx fits in L2", "split, cooperative\none launch"]
    first = [1, 1, 1, 1]
    second_dram = [1, 1, 0, 0]
    second_l2 = [0, 0, 1, 0]
    write = [1, 1, 1, 1]
    rc, wc = "#7f9fc9", "#e0915a"
    xs = range(len(names))
    ax.bar(xs, first, color=rc, label="read x (DRAM)", width=0.55)
    ax.bar(xs, second_dram, bottom=first, color="#4f74a8", label="read x again (DRAM)", width=0.55)
    ax.bar(xs, second_l2, bottom=first, color="white", edgecolor="#4f74a8", hatch="///",
           label="read x again (from L2: no DRAM)", width=0.55)
    b2 = [f + s for f, s in zip(first, second_dram)]
    ax.bar(xs, write, bottom=[b + l for b, l in zip(b2, second_l2)], color=wc, label="write y (DRAM)", width=0.55)
    for i in xs:
        dram = first[i] + second_dram[i] + write[i]
        ax.text(i, first[i] + second_dram[i] + second_l2[i] + write[i] + 0.08, f"{dram} MN from DRAM",
                ha="center", fontsize=9)
    ax.set_xticks(list(xs), names, fontsize=8.5)
    ax.set_ylabel("elements moved (units of MN)")
    ax.set_ylim(0, 4.1)
    ax.legend(loc="upper right", fontsize=8, frameon=False, ncols=2)
    ax.set_title("DRAM traffic of each design (the copy, the floor, moves 2 MN)", fontsize=10)
    return fig



# --------------------------------------------------------------------------------------------
# Few long rows: the benchmark, the cooperative kernel's counters, the tuner's candidates
# --------------------------------------------------------------------------------------------


def bench_data(live: bool | None = None, shapes=tuple(LONG_SHAPES) + (HELD_OUT,),
               dtypes=("float32", "bfloat16")) -> tuple[list[dict], dict]:
    """(rows, provenance) of the long-row shapes, every provider of this lesson. On a GPU: measured
    live with ``helpers.measure.measure_shape`` (the method of ``make bench``, one round); else the
    recorded ``bench_h100.csv`` (``gpu_data.bench``), long shapes and the held-out 300 x 100000."""
    live = ON_GPU if live is None else live
    if live:
        from .measure import DTYPES, providers

        provs = {k: v for k, v in providers().items() if k in PROVIDERS}
        rows = []
        for d in dtypes:
            for M, N in shapes:
                rows += measure_shape(M, N, DTYPES[d], provs, quick=True, host=False)
        return rows, gpu_data.provenance("helpers.lesson06.bench_data()")
    rows, meta = _recorded(f"bench_{gpu_data.LESSON_GPU}")
    keep = {tuple(s) for s in shapes}
    return [r for r in rows if (r["M"], r["N"]) in keep and r["dtype"] in dtypes
            and r["provider"] in PROVIDERS + ("copy",)], meta


def providers_in(rows: list[dict]) -> list[str]:
    """The lesson's providers present in ``rows`` with at least one measurement, in table order."""
    return [p for p in PROVIDERS if any(r["provider"] == p and _ok(r) for r in rows)]


def _shapes(rows, dtype=None):
    """The long shapes in ``rows`` by row length, the held-out shape last."""
    s = {(r["M"], r["N"]) for r in rows if dtype is None or r["dtype"] == dtype}
    return sorted(s - {HELD_OUT}, key=lambda t: t[1]) + ([HELD_OUT] if HELD_OUT in s else [])


def _frac(rows, dtype, M, N, provider, key="graph_frac"):
    r = _find(rows, provider, M, N, dtype)
    return r[key] if r is not None and _ok(r, key) else None


def print_bench_table(rows: list[dict], dtype: str = "float32") -> None:
    """Fraction of the copy's speed of every provider present, one line per long shape: GPU time,
    eager in brackets; then the cells whose spread over rounds exceeds 10%."""
    provs = providers_in(rows)
    print(f"{dtype}: fraction of copy, GPU time (eager in brackets); * = held out (no configuration was tuned on it)")
    print(f"{'M x N':>14} " + " ".join(f"{SHORT.get(p, p):>14}" for p in provs))
    noisy_cells = []
    for M, N in _shapes(rows, dtype):
        cells = []
        for p in provs:
            g, e = _frac(rows, dtype, M, N, p), _frac(rows, dtype, M, N, p, "frac_of_copy")
            cells.append(f"{_f(g)} ({_f(e)})" if g is not None or e is not None else "-")
            for what, v in noisy_timings(_find(rows, p, M, N, dtype)):
                noisy_cells.append(f"{SHORT.get(p, p)} at {shape_name(M, N)} ({what} {v:.0%})")
        star = "*" if (M, N) == HELD_OUT else " "
        print(f"{shape_name(M, N) + star:>14} " + " ".join(f"{c:>14}" for c in cells))
    print("spread over rounds above 10%: " + (", ".join(noisy_cells) + " (no conclusion rests on these)" if noisy_cells else "none"))
    c = _find(rows, "copy", *HELD_OUT, dtype)
    if c is not None and _ok(c) and c["graph_ms"] > c["ms"]:
        print(f"(at {shape_name(*HELD_OUT)} the copy takes {c['graph_ms'] * 1e3:.0f} µs in a CUDA graph and "
              f"{c['ms'] * 1e3:.0f} µs eager, so the graph fractions there rest on a slow copy)")


def bench_summary(rows: list[dict], target: float = TARGET_FRAC) -> None:
    """Computed from the rows: the course's best provider at each benchmark long shape against the
    target and against torch.softmax and torch.compile, in GPU time and in eager time."""
    mine = [p for p in ("online", "split", "split_coop", "softmax") if p in providers_in(rows)]
    peers = [p for p in ("torch_softmax", "torch_compile") if p in providers_in(rows)]
    if not mine:
        print("no measurements of the course's kernels in these rows")
        return
    for key, name in (("graph_frac", "GPU time"), ("frac_of_copy", "eager")):
        best, ratios, n = [], [], 0
        for d in ("float32", "bfloat16"):
            for M, N in _shapes(rows, d):
                if (M, N) == HELD_OUT:
                    continue
                m = [(v, p) for p in mine if (v := _frac(rows, d, M, N, p, key)) is not None]
                q = [v for p in peers if (v := _frac(rows, d, M, N, p, key)) is not None]
                if not m:
                    continue
                n += 1
                top = max(m)
                best.append((top[0], d, M, N, top[1]))
                if q:
                    ratios.append(top[0] / max(q))
        if not best:
            continue
        hi = max(best)
        hits = sum(b[0] >= target for b in best)
        print(f"{name}: the course's best reaches {min(best)[0]:.2f} to {hi[0]:.2f} of copy at the {n} benchmark long "
              f"shapes (highest: {label(hi[4])}, {hi[1]} {shape_name(hi[2], hi[3])}); {hits} of {n} reach the target "
              f"of {target:.2f}" + (f"; {min(ratios):.1f}x to {max(ratios):.1f}x the better of "
                                   f"{' and '.join(label(p) for p in peers)}" if ratios else ""))


def print_earlier_recording(l2_rows_: list[dict], bench_rows: list[dict], l2_meta: dict, bench_meta: dict,
                            earlier: list[tuple[list[dict], dict]] | None = None,
                            tuning: tuple[list[dict], dict] | None = None) -> None:
    """The cooperative kernel in the L2 sweep given (``l2_rows_``: recorded, or measured in this run)
    beside earlier recordings of the same sweep (default: the recorded ``split_l2.csv`` when the
    sweep given is live, and ``EARLIER_L2``), size by size, with the configuration the tuning table
    gives the wrapper at each size; then which sizes reach the target in each, and the same kernel in
    the benchmark at the shapes the two share. Every source is named from its provenance."""
    if earlier is None:
        earlier = ([l2_data(live=False)] if is_live(l2_meta) else []) + [earlier_l2_data()]
    sources = [(l2_rows_, l2_meta)] + list(earlier)
    tuning_rows, tuning_meta = tuning if tuning is not None else tuning_data()

    def coop(rows):
        return {(r["dtype"], r["M"], r["N"]): r for r in rows if r["provider"] == "split_coop" and _ok(r)}

    cols = [coop(rows) for rows, _ in sources]
    keys = sorted(set().union(*cols), key=lambda k: (k[0], k[1] * k[2]))
    names = "ABCDEFGH"
    print("the cooperative kernel in the L2 sweep: fraction of copy in GPU time (eager in brackets)")
    for n, (_, meta) in zip(names, sources):
        print(f"  {n}: {source_name(meta)}")
    print(f"  config: the (slice, warps) the wrapper takes at that size from {source_name(tuning_meta)}")
    print(f"{'dtype':>9} {'M x N':>11} {'x MiB':>6} " + " ".join(f"{n:>12}" for n in names[:len(sources)])
          + f" {names[0] + ' - ' + names[len(sources) - 1]:>7} {'config':>11}")
    noisy_cells = []
    for d, M, N in keys:
        cells = []
        for n, c in zip(names, cols):
            r = c.get((d, M, N))
            cells.append(f"{r['graph_frac']:.2f} ({r['frac_of_copy']:.2f})" if r else "-")
            noisy_cells += [f"{n} at {shape_name(M, N)} ({what} {v:.0%})" for what, v in noisy_timings(r)]
        first, last = cols[0].get((d, M, N)), cols[-1].get((d, M, N))
        diff = f"{round(first['graph_frac'] - last['graph_frac'], 2) + 0.0:+.2f}" if first and last else "-"
        cfg, _ = coop_choice(tuning_rows, d, M, N)
        print(f"{d:>9} {shape_name(M, N):>11} {M * N * DTYPE_BYTES[d] / MIB:>6.0f} "
              + " ".join(f"{c:>12}" for c in cells) + f" {diff:>7} "
              + f"{(f'{cfg.slice_cols} x {cfg.num_warps}' if cfg else '-'):>11}")
    print("spread over rounds above 10%: " + (", ".join(noisy_cells) if noisy_cells else "none"))
    for n, c in zip(names, cols):
        hits = [shape_name(M, N) for (d, M, N), r in sorted(c.items(), key=lambda t: t[0][1])
                if r["graph_frac"] >= TARGET_FRAC]
        best = max(c.values(), key=lambda r: r["graph_frac"], default=None)
        if best is not None:
            print(f"{n}: highest {best['graph_frac']:.2f} (eager {best['frac_of_copy']:.2f}) at "
                  f"{shape_name(best['M'], best['N'])}; at or above the target of {TARGET_FRAC:.2f}: "
                  + (", ".join(hits) or "none"))
    for d, M, N in keys:
        b = _find(bench_rows, "split_coop", M, N, d)
        if b is not None and _ok(b):
            print(f"the same kernel at {d} {shape_name(M, N)} in the benchmark: {b['graph_frac']:.2f} of copy "
                  f"(eager {b['frac_of_copy']:.2f}) in {source_name(bench_meta)}")


def print_coop_counters(ncu_rows: list[dict], bench_rows: list[dict], props: dict | None = None) -> None:
    """The cooperative kernel under Nsight Compute: its grid, registers, occupancy (the course's
    formula with what limits it, ncu's theoretical and achieved), DRAM throughput, and its duration
    next to the copy's GPU time at the same shape in the benchmark."""
    p = _props(props)
    print(f"{'':>20} {'':>13} {'':>5} {'occupancy':^48}")
    print(f"{'shape':>20} {'grid x warps':>13} {'regs':>5} {'per SM':>7} {'limit':>10} {'formula':>8} "
          f"{'ncu: theor.':>12} {'achieved':>9} {'DRAM % of peak':>15} {'kernel µs':>10} {'copy µs':>8}")
    rows = coop_counter_rows(ncu_rows, bench_rows, p)
    for r in rows:
        print(f"{r['dtype'] + ' ' + shape_name(r['M'], r['N']):>20} {r['grid']:>6} x {r['warps']:<4} {r['registers']:>5} "
              f"{r['per_sm']:>7} {r['limited_by']:>10} {r['formula']:>8.0%} {r['theoretical']:>11.0f}% "
              f"{r['achieved']:>8.0f}% {r['dram_pct']:>14.0f}% {r['kernel_us']:>10.0f} "
              f"{_f0(r['copy_us']):>8}")
    sms = p["sm_count"]
    tuning_rows = tuning_data()[0]
    for r in rows:
        cfg, _ = coop_choice(tuning_rows, r["dtype"], r["M"], r["N"])
        if cfg is None or cfg.num_warps != r["warps"]:
            continue
        n_slices = triton.cdiv(r["N"], cfg.slice_cols)
        print(f"{r['dtype']} {shape_name(r['M'], r['N'])}: slices of {cfg.slice_cols} columns, {n_slices} a row; "
              f"{r['per_sm']} x {sms} SMs = {r['per_sm'] * sms} programs resident at once; grid {r['grid']} = "
              f"{r['grid'] // n_slices} rows of {n_slices} slices at a time")


def _f0(v) -> str:
    return f"{v:.0f}" if isinstance(v, (int, float)) and math.isfinite(v) else "-"


def coop_counter_rows(ncu_rows: list[dict], bench_rows: list[dict], props: dict | None = None) -> list[dict]:
    """One dict per profiled cooperative kernel (float32 first, larger first): shape, grid, warps,
    registers, the course's occupancy (programs per SM, what limits them, the share of warp slots),
    ncu's theoretical and achieved occupancy (%), DRAM % of peak, kernel µs, the copy's GPU µs."""
    p = _props(props)
    max_warps = p["max_threads_per_sm"] // p["warp_size"]
    out = []
    for r in sorted((r for r in ncu_rows if r["kernel"] == "softmax_split_coop_kernel"),
                    key=lambda r: (NCU_SHAPES[r["case"]][0] != "float32", -_x_bytes(r["case"]))):
        d, M, N = NCU_SHAPES[r["case"]]
        warps = int(r["block"]) // p["warp_size"]
        occ = occupancy(int(r["registers"]), 0, warps, p)
        c = _find(bench_rows, "copy", M, N, d)
        out.append({"case": r["case"], "dtype": d, "M": M, "N": N, "grid": int(r["grid"]), "warps": warps,
                    "registers": int(r["registers"]), "per_sm": occ["programs_per_sm"],
                    "limited_by": occ["limited_by"], "formula": occ["programs_per_sm"] * warps / max_warps,
                    "theoretical": r["theoretical_occupancy_pct"], "achieved": r["achieved_occupancy_pct"],
                    "dram_pct": r["dram_pct_of_peak"], "kernel_us": r["duration_ns"] / 1e3,
                    "copy_us": c["graph_ms"] * 1e3 if c is not None and _ok(c) else None})
    return out


def tuning_data() -> tuple[list[dict], dict]:
    """(rows, provenance) of the lesson GPU's recorded tuning table (``helpers.tuning``): every
    candidate the tuner timed, kinds 'tiled' and 'coop'."""
    return _recorded("tuning_nvidia_h100_80gb_hbm3")


#: The H100 tuning table recorded before the cooperative kernel's grid-sizing fix (commit 43f5b47), kept.
EARLIER_TUNING = "bench_runs/tuning_nvidia_h100_80gb_hbm3_43f5b47.csv"


def earlier_tuning_data() -> tuple[list[dict], dict]:
    """(rows, provenance) of the H100 tuning table recorded before the grid-sizing fix."""
    return _recorded(EARLIER_TUNING)


def coop_status_counts(tuning_rows: list[dict]) -> dict:
    """How many candidates of the cooperative kernel a tuning table holds, by outcome: 'ran' (timed
    and passed the tuner's float64 check), 'refused', 'failed check', 'failed' (anything else)."""
    counts = {"ran": 0, "refused": 0, "failed check": 0, "failed": 0}
    for r in tuning_rows:
        if r["kind"] == "coop":
            w = _status_word(r)
            counts["ran" if w[0].isdigit() else w] += 1
    return counts


def print_tuning_history(tables: list[tuple[list[dict], dict]] | None = None,
                         shapes=(("float32", 1024, 65536),)) -> None:
    """For each tuning table (default: the one recorded before the grid fix, then today's): how many
    cooperative candidates ran, were refused or failed the check, and the configuration the wrapper
    takes from it at ``shapes``."""
    if tables is None:
        tables = [earlier_tuning_data(), tuning_data()]
    for rows, meta in tables:
        c = coop_status_counts(rows)
        print(f"{source_name(meta)}: {sum(c.values())} cooperative candidates: {c['ran']} ran, "
              f"{c['refused']} refused, {c['failed check']} failed check"
              + (f", {c['failed']} failed otherwise" if c["failed"] else ""))
        for d, M, N in shapes:
            cfg, src = coop_choice(rows, d, M, N)
            if cfg is not None:
                best = next((r["graph_frac"] for r in rows if r["kind"] == "coop" and (r["dtype"], r["M"], r["N"],
                             r["slice_cols"], r["num_warps"]) == (d, M, N, cfg.slice_cols, cfg.num_warps)
                             and _ok(r)), None)
                print(f"  the wrapper takes {cfg.slice_cols} x {cfg.num_warps} at {d} {shape_name(M, N)}"
                      + (f" ({best:.2f} of copy in the tuner)" if best is not None else
                         f" (from the nearest tuned shape, {shape_name(*src)})"))


def coop_choice(tuning_rows: list[dict], dtype: str, M: int, N: int):
    """The (slice_cols, num_warps) the wrapper uses at (M, N): the fastest candidate of the tuned
    long shape of this dtype nearest on a log scale, as ``helpers.tuning.coop_config`` picks it on a
    GPU (shapes where every candidate failed have no entry). Returns (config, the shape it came from)."""
    from .tuning import best_of

    coop = {k: v for k, v in best_of(tuning_rows)[1].items() if k[0] == dtype}
    if not coop:
        return None, None
    key = min(coop, key=lambda k: abs(math.log2(k[1]) - math.log2(M)) + abs(math.log2(k[2]) - math.log2(N)))
    return coop[key], key[1:]


def _status_word(r) -> str:
    s = str(r.get("status", ""))
    if s == "ok" and isinstance(r.get("graph_frac"), (int, float)):
        return f"{r['graph_frac']:.2f}"
    if "too many blocks" in s:
        return "refused"
    if "max abs error" in s:
        return "failed check"
    return "failed"


def print_coop_candidates(tuning_rows: list[dict], bench_rows: list[dict], meta: dict | None = None) -> None:
    """Every (slice, warps) candidate of the cooperative kernel at each long shape (GPU time, fraction
    of copy, from the tuning table), what the wrapper uses there, and both designs in the benchmark."""
    coop = [r for r in tuning_rows if r["kind"] == "coop"]
    marked = False
    for d in ("float32", "bfloat16"):
        rs = [r for r in coop if r["dtype"] == d]
        shapes = sorted({(r["M"], r["N"]) for r in rs}, key=lambda s: s[1])
        cands = sorted({(r["slice_cols"], r["num_warps"]) for r in rs})
        print(f"{d}: every candidate, fraction of copy in GPU time")
        print(f"{'slice x warps':>19} " + " ".join(f"{shape_name(M, N):>13}" for M, N in shapes))
        for sc, w in cands:
            cells = []
            for M, N in shapes:
                r = next((r for r in rs if (r["M"], r["N"], r["slice_cols"], r["num_warps"]) == (M, N, sc, w)), None)
                cells.append(_status_word(r) if r is not None else "-")
            print(f"{f'{sc} x {w}':>19} " + " ".join(f"{c:>13}" for c in cells))
        uses = []
        for M, N in shapes:
            cfg, src = coop_choice(tuning_rows, d, M, N)
            uses.append(f"{cfg.slice_cols} x {cfg.num_warps}" + ("" if src == (M, N) else "°") if cfg else "-")
            marked = marked or (cfg is not None and src != (M, N))
        print(f"{'the wrapper uses':>19} " + " ".join(f"{u:>13}" for u in uses))
        for p in ("split_coop", "split"):
            vals = [_frac(bench_rows, d, M, N, p) for M, N in shapes]
            print(f"{'bench: ' + SHORT[p]:>19} " + " ".join(f"{_f(v):>13}" for v in vals))
        errs = [_find(bench_rows, "split_coop", M, N, d) for M, N in shapes]
        print(f"{'bench: max error':>19} " + " ".join(f"{r['max_err']:>13.1g}" if r is not None and isinstance(
            r.get("max_err"), (int, float)) else f"{'-':>13}" for r in errs))
        print()
    words = {_status_word(r) for r in coop}
    notes = []
    if "refused" in words:
        notes.append("refused: the driver refused the cooperative launch (too many blocks in cooperative launch)")
    if "failed check" in words:
        notes.append("failed check: the tuner's float64 check failed")
    if any(w == "failed" for w in words):
        notes.append("failed: the candidate did not run")
    if not notes:
        notes.append(f"every one of the {len(coop)} candidates ran and passed the tuner's float64 check")
    if marked:
        notes.append("° = no candidate passed at this shape: the configuration of the nearest tuned shape")
    print("; ".join(notes))


# --------------------------------------------------------------------------------------------
# Figures of the measurements
# --------------------------------------------------------------------------------------------


def plot_l2_model(rows: list[dict] | None = None, meta: dict | None = None, ncu_rows: list[dict] | None = None,
                  l2_bytes: int | None = None):
    """Left: the all-or-nothing model's fraction of copy against the size of x (lines) and the
    measurement (GPU time filled, eager hollow), with the L2 size. Right: the two launches' DRAM
    bytes in units of x's size, the model's against Nsight Compute's (stats + normalize kernels)."""
    if rows is None:
        rows, meta = l2_data(live=False)
    if l2_bytes is None:
        l2_bytes = _props()["l2_bytes"]
    if ncu_rows is None:
        ncu_rows = ncu_data()[0]
    pts = l2_points(rows, l2_bytes)
    fig, (ax, bx) = plots.new_figure(11.5, 4.3, ncols=2)
    sizes = [p["x_bytes"] / MIB for p in pts]
    lo, hi = min(sizes) / 1.4, max(sizes) * 1.4
    l2 = l2_bytes / MIB
    # the model: the two launches step down at the L2 size, the cooperative kernel stays at 1
    ax.plot([lo, l2, l2, hi], [1.0, 1.0, 2 / 3, 2 / 3], ls="--", lw=1.6, color=plots.color("split"),
            label="model: two launches")
    ax.plot([lo, hi], [1.005, 1.005], ls=":", lw=1.8, color=plots.color("split_coop"), label="model: cooperative")
    for dz, mk in (("split", "o"), ("split_coop", "s"), ("online", "^")):
        c = plots.color(dz)
        g = [(s, p[dz]["gpu"]) for s, p in zip(sizes, pts) if p[dz]["gpu"] is not None]
        e = [(s, p[dz]["eager"]) for s, p in zip(sizes, pts) if p[dz]["eager"] is not None]
        if g:
            ax.plot(*zip(*g), marker=mk, color=c, lw=1.4, label=f"measured: {label(dz)}")
        if e:
            ax.plot(*zip(*e), marker=mk, color=c, lw=0.8, ls=(0, (1, 2)), markerfacecolor="white")
    ax.plot([], [], marker="o", color="#555555", markerfacecolor="white", ls=(0, (1, 2)), lw=0.8, label="(hollow: eager)")
    ax.axvline(l2, color="#444444", lw=1)
    ax.text(l2 * 0.96, 1.04, f"L2 = {l2:.0f} MiB", fontsize=8.5, ha="right")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [f"{s:.0f}" for s in sizes])
    ax.minorticks_off()
    ax.set_xlim(lo, hi)
    ax.set_ylim(0, 1.1)
    ax.set_xlabel("size of x (MiB), float32 rows of 65,536 columns")
    ax.set_ylabel("fraction of copy")
    ax.legend(loc="lower right", fontsize=7.5, frameon=False)
    ax.set_title("Prediction (lines) against measurement (markers)", fontsize=10)
    # right: bytes in units of x's size
    cases = [c for c in ("split_fp32_32MiB", "split_fp32_256MiB") if any(r["case"] == c for r in ncu_rows)]
    for i, c in enumerate(cases):
        xb = _x_bytes(c)
        d, M, N = NCU_SHAPES[c]
        model = model_dram_bytes("split", M, N, DTYPE_BYTES[d], l2_bytes) / xb
        ax_x = [i - 0.2, i + 0.2]
        bx.bar(ax_x[0], model, width=0.36, color="white", edgecolor=plots.color("split"), hatch="//",
               label="model (all-or-nothing)" if i == 0 else None)
        bx.text(ax_x[0], model + 0.05, f"{model:.2f}", ha="center", fontsize=8.5)
        bottom = 0.0
        for r in (r for r in ncu_rows if r["case"] == c):
            k = KERNEL_SHORT.get(r["kernel"], r["kernel"])
            v = r["dram_bytes"] / xb
            bx.bar(ax_x[1], v, bottom=bottom, width=0.36, color=plots.color("split") if k == "normalize" else "#f4c6e4",
                   edgecolor="#333333", lw=0.6, label=f"Nsight Compute: {k} kernel" if i == 0 else None)
            bx.text(ax_x[1], bottom + v / 2, f"{v:.2f}", ha="center", va="center", fontsize=8)
            bottom += v
        bx.text(ax_x[1], bottom + 0.05, f"{bottom:.2f}", ha="center", fontsize=8.5)
    bx.axhline(2, color="#999999", lw=0.8, ls=":")
    bx.axhline(3, color="#999999", lw=0.8, ls=":")
    bx.set_xticks(range(len(cases)), [f"x = {_x_bytes(c) / MIB:.0f} MiB\n({'fits in' if _x_bytes(c) <= l2_bytes else 'larger than'} L2)"
                                      for c in cases])
    bx.set_ylim(0, 3.6)
    bx.set_ylabel("DRAM bytes / bytes of x")
    bx.legend(loc="upper left", fontsize=7.5, frameon=False)
    bx.set_title("Two launches: DRAM bytes (each kernel profiled from a flushed L2)", fontsize=10)
    fig.suptitle(f"The all-or-nothing L2 model on an {(meta or {}).get('gpu', 'GPU')}", fontsize=10)
    return fig


def plot_design_space(tuning_rows: list[dict] | None = None, bench_rows: list[dict] | None = None,
                      meta: dict | None = None):
    """Every candidate of the cooperative kernel the tuner timed at each long shape (dots; failed ones
    as x at the bottom), both designs' wrappers in the benchmark, torch.softmax, and the target."""
    if tuning_rows is None:
        tuning_rows, meta = tuning_data()
    if bench_rows is None:
        bench_rows = bench_data(live=False)[0]
    fig, axes = plots.new_figure(11.0, 4.2, ncols=2)
    for ax, d in zip(axes, ("float32", "bfloat16")):
        rs = [r for r in tuning_rows if r["kind"] == "coop" and r["dtype"] == d]
        shapes = [s for s in LONG_SHAPES if any((r["M"], r["N"]) == s for r in rs)] or list(LONG_SHAPES)
        for j, (M, N) in enumerate(shapes):
            cand = [r for r in rs if (r["M"], r["N"]) == (M, N)]
            good = [r for r in cand if _status_word(r)[0].isdigit()]
            bad = [r for r in cand if not _status_word(r)[0].isdigit()]
            ax.scatter([j - 0.12 + 0.05 * (k % 3) for k in range(len(good))], [r["graph_frac"] for r in good], s=18,
                       color=plots.color("split_coop"), alpha=0.6, zorder=2,
                       label="cooperative: each candidate (tuning table)" if j == 0 else None)
            if bad:
                ax.scatter([j - 0.12 + 0.05 * (k % 3) for k in range(len(bad))], [0.03] * len(bad), marker="x", s=18,
                           color="#999999", zorder=2, label="a candidate that failed or was refused" if j == 0 else None)
            for p, mk, s in (("split_coop", "o", 90), ("split", "D", 45), ("torch_softmax", "_", 400)):
                v = _frac(bench_rows, d, M, N, p)
                if v is None:
                    continue
                style = (dict(facecolors="none", edgecolors=plots.color(p)) if mk == "o" else
                         dict(color=plots.color(p)))
                ax.scatter([j + 0.2], [v], marker=mk, s=s, lw=1.8, zorder=3,
                           label=f"benchmark: {label(p)}" if j == 0 else None, **style)
        ax.axhline(TARGET_FRAC, ls="--", color="#444444", lw=1)
        ax.text(len(shapes) - 0.5, TARGET_FRAC + 0.015, f"target {TARGET_FRAC:.2f}", ha="right", fontsize=8)
        ax.set_xticks(range(len(shapes)), [shape_name(M, N) for M, N in shapes], fontsize=8.5)
        ax.set_ylim(0, 1.0)
        ax.set_ylabel("fraction of copy (GPU time)")
        ax.set_title(d, fontsize=10)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=3, frameon=False, fontsize=8.5)
    fig.suptitle(f"The cooperative kernel's candidates on an {(meta or {}).get('gpu', 'GPU')}", fontsize=10)
    return fig


def plot_bench(rows: list[dict] | None = None, meta: dict | None = None, target: float = TARGET_FRAC):
    """Fraction of copy of every provider present at each long shape (bars: GPU time; ticks: eager),
    float32 and bfloat16, with the course's target."""
    if rows is None:
        rows, meta = bench_data(live=False)
    provs = providers_in(rows)
    dtypes = [d for d in ("float32", "bfloat16") if any(r["dtype"] == d for r in rows)]
    fig, axes = plots.new_figure(11.0, 4.2, ncols=len(dtypes))
    axes = list(axes) if len(dtypes) > 1 else [axes]
    width = 0.8 / max(1, len(provs))
    for ax, d in zip(axes, dtypes):
        shapes = _shapes(rows, d)
        for i, p in enumerate(provs):
            xs, ys, es = [], [], []
            for j, (M, N) in enumerate(shapes):
                v, e = _frac(rows, d, M, N, p), _frac(rows, d, M, N, p, "frac_of_copy")
                if v is not None:
                    xs.append(j - 0.4 + (i + 0.5) * width)
                    ys.append(v)
                    es.append(e)
            ax.bar(xs, ys, width=width * 0.92, color=plots.color(p), label=label(p))
            ax.scatter([x for x, e in zip(xs, es) if e is not None], [e for e in es if e is not None], marker="_",
                       s=60, color="#000000", lw=1.2, zorder=3, label="eager" if i == len(provs) - 1 else None)
        ax.axhline(target, ls="--", color="#444444", lw=1)
        ax.text(-0.5, target + 0.015, f"target {target:.2f}", ha="left", va="bottom", fontsize=8)
        ax.set_xticks(range(len(shapes)), [shape_name(M, N) + ("*" if (M, N) == HELD_OUT else "") for M, N in shapes],
                      fontsize=8)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("fraction of copy (bars: GPU time)")
        ax.set_title(d + " (* held out)", fontsize=10)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(7, len(labels)), frameon=False, fontsize=8.5)
    fig.suptitle(f"Few long rows on an {(meta or {}).get('gpu', 'GPU')}: speed as a fraction of a plain copy",
                 fontsize=10)
    return fig


def softmax_choice_check(rows: list[dict], tolerance: float = 0.05) -> None:
    """Does ``helpers.softmax`` (one design and configuration per shape) come within ``tolerance`` of
    the better of the two split wrappers at each shape, in GPU time? Computed from the rows."""
    present = providers_in(rows)
    if "softmax" not in present or not {"split", "split_coop"} & set(present):
        print("(no helpers.softmax and split measurements in these rows to compare)")
        return
    good, misses, spreads = 0, [], []
    for d in ("float32", "bfloat16"):
        for M, N in _shapes(rows, d):
            mine = _frac(rows, d, M, N, "softmax")
            alts = [(v, p) for p in ("split", "split_coop") if (v := _frac(rows, d, M, N, p)) is not None]
            if mine is None or not alts:
                continue
            top, winner = max(alts)
            if mine >= (1 - tolerance) * top:
                good += 1
            else:
                misses.append(f"{d} {shape_name(M, N)} ({mine:.2f} against {top:.2f}, {SHORT[winner]})")
                for p in ("softmax", winner):
                    v = (_find(rows, p, M, N, d) or {}).get("graph_spread")
                    if isinstance(v, (int, float)) and math.isfinite(v):
                        spreads.append(v)
    total = good + len(misses)
    print(f"helpers.softmax is within {tolerance:.0%} of the better split wrapper (GPU time) at {good} of {total} shapes"
          + (f"; not at {', '.join(misses)}" if misses else ""))
    if spreads:
        print(f"(largest spread over rounds of the GPU times behind those misses: {max(spreads):.0%})")


#: Figures of this lesson, by the name ``helpers.plots.save`` writes them under.
FIGURES = {
    "06_row_cut": lambda: plot_row_cut(),
    "06_traffic": lambda: plot_traffic(),
    "06_l2": lambda: plot_l2_model(),
    "06_design_space": lambda: plot_design_space(),
    "06_bench": lambda: plot_bench(),
}


# --------------------------------------------------------------------------------------------
# Exercise checkers: each prints one line (correct / not yet / wrong) and never raises.
# --------------------------------------------------------------------------------------------


_call = call_attempt  # one definition, shared by every lesson's checkers

# ---- Exercise 6.1: the split statistics kernel ----------------------------------------------

#: What the checker fills the statistics buffer with: a pair still holding it was never stored.
UNWRITTEN = 1.0e30


_untouched = is_untouched


def _allocation(t: torch.Tensor) -> torch.Tensor:
    """The whole allocation behind ``t`` (guard regions included), as a 1-D float64 CPU tensor."""
    flat = torch.empty(0, dtype=t.dtype, device=t.device).set_(t.untyped_storage())
    return flat.detach().cpu().to(torch.float64)


def simulate_stats(x: torch.Tensor, slice_len: int, block: int, *, start_step: int | None = None,
                   blocks: int | None = None, mask: bool = True, pad: float | None = None,
                   col_stride: int | None = None, rescale: bool = True, accumulate: bool = True):
    """What a split statistics kernel stores for ``x`` (float64, from x's memory), block by block as
    the kernel walks it: program (row, s) reads ``blocks`` blocks (default: slice_len // block)
    from column s * ``start_step`` (default: slice_len). The keywords model mistakes: ``mask=False``
    reads past the row's end, ``pad`` is the value masked lanes load (None: -inf, they count for
    nothing), ``col_stride`` overrides x's, ``rescale=False`` skips the factor exp(m_old - m_new),
    ``accumulate=False`` keeps only the last block. Returns (m, d) of shape (rows, n_slices), or None
    where such a kernel would read outside x's allocation."""
    flat = _allocation(x)
    base = x.storage_offset()
    rs, cs = x.stride()
    cs = cs if col_stride is None else col_stride
    n_rows, n_cols = x.shape
    n_slices = triton.cdiv(n_cols, slice_len)
    step = slice_len if start_step is None else start_step
    nb = slice_len // block if blocks is None else blocks
    m = torch.full((n_rows, n_slices), -math.inf, dtype=torch.float64)
    d = torch.zeros((n_rows, n_slices), dtype=torch.float64)
    for r in range(n_rows):
        for s in range(n_slices):
            mr, dr = -math.inf, 0.0
            for b in range(nb):
                c = s * step + b * block + torch.arange(block)
                live = c < n_cols if mask else torch.ones(block, dtype=torch.bool)
                idx = base + r * rs + c[live] * cs
                if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= flat.numel()):
                    return None
                v = flat[idx]
                if pad is not None:
                    v = torch.cat([v, torch.full((int((~live).sum()),), float(pad), dtype=torch.float64)])
                blk = float(v.max()) if v.numel() else -math.inf
                m_new = max(mr, blk)
                terms = 0.0 if m_new == -math.inf else float(torch.exp(v[v != -math.inf] - m_new).sum())
                if not accumulate:
                    dr = terms
                elif rescale and mr != -math.inf:
                    dr = dr * math.exp(mr - m_new) + terms
                else:
                    dr = dr + terms
                mr = m_new
            m[r, s], d[r, s] = mr, dr
    return m, d


def _same_stats(got_m, got_d, m, d, rtol: float = 2e-5):
    """Element-wise: the maxima equal (infinities alike) and the sums within ``rtol``."""
    m_ok = (got_m == m) | (torch.isinf(got_m) & torch.isinf(m) & (torch.sign(got_m) == torch.sign(m)))
    d_ok = (got_d - d).abs() <= rtol * d.abs() + 1e-30
    return m_ok & d_ok


def _stats_kernel_cases():
    """(description, x data float32, slice_len, block, column stride, row length in memory)."""
    g = torch.Generator().manual_seed(61)
    inf = math.inf
    a = torch.randn(6, 150, generator=g) * 3
    a[1] = torch.linspace(-300.0, 300.0, 150)  # a spread of 600, the maximum rising block after block
    a[2, :100] = -inf                          # two slices of only -inf, then a partly -inf one
    a[3] = -inf                                # a row of only -inf
    a[4] = -inf
    a[4, 60] = 5.0                             # one finite value
    a[5, 16:32] = -inf                         # an all -inf block in the middle of a slice
    a[5, 48:64] = -inf                         # a slice whose first block is all -inf
    a[5, 149] = 200.0                          # the row's maximum in the last, partial slice
    b = torch.randn(4, 70, generator=g) * 5
    b[1] = -inf
    b[2, :40] = -inf
    b[3, 3] = 1e4
    c = torch.randn(3, 37, generator=g)
    c[1, :36] = -inf
    c[2] = torch.linspace(-50.0, 80.0, 37)
    return [("6 rows of 150 columns in slices of 48 (3 blocks of 16; the last slice 6 columns)", a, 48, 16, 1, 150),
            ("4 rows of 70 columns read with a column stride of 2, slices of 16 (2 blocks of 8)", b, 16, 8, 2, 145),
            ("3 rows of 37 columns, slices of one block of 8", c, 8, 8, 1, 37)]


def _first(mask: torch.Tensor):
    r, s = (int(v) for v in mask.nonzero()[0])
    return r, s


def _pair(m, d) -> str:
    return f"({m:.6g}, {d:.6g})"


def _trial_6_1(kernel) -> str:
    if not (hasattr(kernel, "__getitem__") and hasattr(kernel, "fn")):
        raise Wrong("split_stats_kernel must be a Triton kernel: decorate it with @triton.jit")
    if _untouched(kernel):
        raise NotImplementedError
    for desc, data, L, B, cs, row_len in _stats_kernel_cases():
        M, N = data.shape
        n_slices = triton.cdiv(N, L)
        base = guarded((M, row_len), fill=1000.0)  # the columns a strided view skips hold 1000
        x = base[:, : N * cs: cs] if cs != 1 else base
        x.copy_(data.to(x.device))
        before = base.clone()
        stats = guarded((M, n_slices, 2), fill=UNWRITTEN)
        try:
            run_learner_kernel(kernel, (M, n_slices), stats, x, x.stride(0), x.stride(1), N, L, n_slices,
                               BLOCK_SIZE=B, outputs=(stats,))
        except (Wrong, NotImplementedError):
            raise
        except Exception as e:
            msg = (str(e).strip().splitlines() or [""])[-1][:160]
            raise Wrong(f"launching your kernel on {desc} raised {type(e).__name__}: {msg}") from None
        if not torch.equal(base.nan_to_num(), before.nan_to_num()) or not guards_intact(base):
            raise Wrong("your kernel changed its input: store into stats_ptr only")
        got = stats.detach().cpu().to(torch.float64)
        gm, gd = got[..., 0], got[..., 1]
        m, d = simulate_stats(x, L, B)
        unwritten = (got == float(torch.tensor(UNWRITTEN, dtype=torch.float32))).any(-1)
        if unwritten.any():
            r, s = _first(unwritten)
            raise Wrong(f"on {desc}: nothing was stored for (row {r}, slice {s}): program (row, s) stores m at "
                        f"stats_ptr + 2 * (row * n_slices + s) and d right after it")
        if _same_stats(gd, gm, m, d).all():
            raise Wrong(f"on {desc}: m and d are swapped: store m at stats_ptr + 2 * (row * n_slices + s), d one after")
        nan = torch.isnan(gm) | torch.isnan(gd)
        if nan.any():
            r, s = _first(nan)
            part = data[r, s * L: min((s + 1) * L, N)]
            if bool((part[:B] == -math.inf).all()):
                raise Wrong(f"on {desc}: (row {r}, slice {s}) came out as {_pair(gm[r, s], gd[r, s])}; it starts with a "
                            f"block of only -inf, where the running max is still -inf and exp(-inf - (-inf)) is NaN. "
                            f"A slice of only -inf must give (-inf, 0): leave those terms and the rescale factor out "
                            f"with tl.where")
            fin = part[torch.isfinite(part)]
            if fin.numel() and float(fin.abs().max()) > 80:
                raise Wrong(f"on {desc}: (row {r}, slice {s}) came out as {_pair(gm[r, s], gd[r, s])}: its values reach "
                            f"{float(fin.abs().max()):.0f} in size, where exp overflows or underflows float32. Take "
                            f"tl.exp of x - m with the running max m, never of x alone")
            raise Wrong(f"on {desc}: (row {r}, slice {s}) came out as {_pair(gm[r, s], gd[r, s])}: NaN. Do masked "
                        f"lanes load other=-float('inf'), and are -inf terms left out?")
        if torch.isinf(gd).any():
            r, s = _first(torch.isinf(gd))
            raise Wrong(f"on {desc}: (row {r}, slice {s}) has d = {gd[r, s].item()}: subtract the running max before "
                        f"tl.exp (exp(300) overflows float32)")
        bad = ~_same_stats(gm, gd, m, d)
        if not bad.any():
            continue
        mistakes = [
            (dict(start_step=B), "slice s starts at column s * slice_len, not s * BLOCK_SIZE"),
            (dict(blocks=L // B - 1), "the loop stops before the slice's last block: range(0, slice_len, BLOCK_SIZE) "
                                      "visits every block, and d is stored after the loop"),
            (dict(accumulate=False), "d holds only the last block's terms: add each block's terms to the running d"),
            (dict(mask=False), "a slice that reaches the end of the row reads past n_cols: load with a mask "
                               "(columns < n_cols) and other=-float('inf')"),
            (dict(pad=0.0), "masked lanes load 0, which counts as a value: load them as other=-float('inf') and "
                            "leave their terms out"),
            (dict(col_stride=1), "the columns are in_col_stride elements apart: address "
                                 "in_ptr + row * in_row_stride + cols * in_col_stride"),
            (dict(rescale=False), "when the running max grows, multiply d by exp(m_old - m_new) before adding the "
                                  "new block's terms"),
        ]
        for kw, hint in mistakes:
            if kw.get("blocks", 1) < 1 or (kw.get("col_stride") == 1 and cs == 1):
                continue
            alt = simulate_stats(x, L, B, **kw)
            if alt is not None and _same_stats(gm, gd, *alt).all():
                raise Wrong(f"on {desc}: {hint}")
        r, s = _first(bad)
        if bool((gm[bad] == m[bad]).all()) and bool((gd[bad] > d[bad]).all()):
            raise Wrong(f"on {desc}: (row {r}, slice {s}) stored {_pair(gm[r, s], gd[r, s])}, expected "
                        f"{_pair(m[r, s], d[r, s])}: the maxima are right and d is too large. When the running max "
                        f"grows, multiply d by exp(m_old - m_new) before adding the new block's terms")
        raise Wrong(f"on {desc}: (row {r}, slice {s}) stored {_pair(gm[r, s], gd[r, s])}, expected "
                    f"{_pair(m[r, s], d[r, s])}")
    return ("every (m, d) matches float64 on rows of -inf, slices of -inf, a spread of 600, partial last slices "
            "and a column stride")


def check_6_1(split_stats_kernel) -> None:
    """Exercise 6.1: a Triton kernel writing each slice's (m, d) into a (rows, slices, 2) buffer."""
    check("6.1", "the split statistics kernel", split_stats_kernel, _trial_6_1)


# ---- Exercise 6.2: merge a row's statistics in one step -------------------------------------


def combine_answer(stats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The row's (m, d) from a (rows, slices, 2) statistics tensor, as the second launch merges it."""
    m_s, d_s = stats[..., 0], stats[..., 1]
    m = m_s.max(dim=-1).values
    safe = torch.where(d_s == 0, torch.zeros((), dtype=stats.dtype), d_s * torch.exp(m_s - m.unsqueeze(-1)))
    return m, safe.sum(dim=-1)


def _stats_cases():
    """(description, x float64, slices) for exercise 6.2."""
    g = torch.Generator().manual_seed(61)
    x = torch.randn(4, 40, generator=g, dtype=torch.float64) * 4
    x[1, :25] = -math.inf  # first slices all -inf
    x[2, 17] = 300.0  # exp(300) overflows float32 without the max shift
    y = torch.full((3, 12), -math.inf, dtype=torch.float64)
    y[0, 5] = 2.0
    y[1, 11] = -1.0  # row 2 stays all -inf: the row is empty, (m, d) = (-inf, 0)
    return [("random rows, one with -inf slices and one with a 300", x, 5),
            ("rows that are -inf in all slices but one, and a row of only -inf", y, 4),
            ("one slice per row", x, 1),
            ("more slices than columns in some (empty slices)", x[:, :6], 8)]


def _trial_6_2(combine) -> str:
    worst = 0.0
    for desc, x, s in _stats_cases():
        m_s, d_s = slice_stats(x, s)
        stats = torch.stack([m_s, d_s], dim=-1)
        before = stats.clone()
        got = _call(combine, stats)
        if not torch.equal(stats.nan_to_num(), before.nan_to_num()):
            raise Wrong("your function changed the statistics tensor: compute into new tensors instead")
        if not isinstance(got, (tuple, list)) or len(got) != 2 or not all(isinstance(t, torch.Tensor) for t in got):
            raise Wrong(f"return a pair of tensors (m, d), got {type(got).__name__}")
        m, d = got
        want_m = x.max(dim=-1).values
        if tuple(m.shape) != tuple(want_m.shape) or tuple(d.shape) != tuple(want_m.shape):
            raise Wrong(f"on {desc}: expected m and d of shape {tuple(want_m.shape)} (one per row), "
                        f"got {tuple(m.shape)} and {tuple(d.shape)}")
        m, d = m.to(torch.float64), d.to(torch.float64)
        if torch.isnan(m).any() or torch.isnan(d).any():
            raise Wrong(f"on {desc}: got NaN in (m, d) = ({fmt(m)}, {fmt(d)}): a slice of only -inf is "
                        f"(-inf, 0), and e^(-inf - -inf) is NaN unless you leave such slices out")
        same_inf = torch.isinf(m) == torch.isinf(want_m)
        fin = ~torch.isinf(want_m)
        if not same_inf.all() or ((m[fin] - want_m[fin]).abs() > 1e-6 * want_m[fin].abs().clamp(min=1.0)).any():
            raise Wrong(f"on {desc}: the row maxima should be {fmt(want_m)}, got {fmt(m)}")
        lse_ref = torch.logsumexp(x, dim=-1)
        empty = want_m == -math.inf
        if not torch.equal(d[empty], torch.zeros_like(d[empty])):
            raise Wrong(f"on {desc}: a row of only -inf should give d = 0, got {fmt(d)}")
        lse = m[~empty] + torch.log(d[~empty])
        err = (lse - lse_ref[~empty]).abs()
        if not torch.isfinite(err).all() or (err > 1e-6).any():
            raise Wrong(f"on {desc}: m + log d should be the row's logsumexp {fmt(lse_ref)}, "
                        f"got {fmt(m + torch.log(d))}: is each slice's d moved to the row's maximum?")
        worst = max(worst, float(err.max()) if err.numel() else 0.0)
    if worst == 0:
        return "m + log d equals the float64 logsumexp on every row"
    return f"m + log d within {round_up_err(worst)[2:]} of the float64 logsumexp on every row"


def check_6_2(combine) -> None:
    """Exercise 6.2: ``combine(stats)`` merges a (rows, slices, 2) statistics tensor into each row's
    (m, d)."""
    check("6.2", "merge a row's statistics in one step", combine, _trial_6_2)


# ---- Exercise 6.3: the model's prediction ---------------------------------------------------


def _trial_6_3(predicted_frac) -> str:
    l2 = 50 * MIB
    cases = [("split", 8, 1048576, 4, l2), ("split", 64, 262144, 4, l2), ("split", 64, 262144, 2, l2),
             ("split", 1024, 65536, 4, l2), ("split", 4, 1000, 4, 16000), ("split", 4, 1001, 4, 16000),
             ("split_coop", 1024, 65536, 4, l2), ("split_coop", 8, 1048576, 2, l2), ("online", 8, 1048576, 4, l2),
             ("online", 1024, 65536, 2, l2), ("split", 16, 1048576, 4, 64 * MIB)]
    for design, M, N, es, cache in cases:
        got = _call(predicted_frac, design, M, N, es, cache)
        if isinstance(got, bool) or not isinstance(got, (int, float)) or not math.isfinite(got):
            raise Wrong(f"return a number (a fraction of the copy's speed), got {got!r}")
        want = predicted_frac_answer(design, M, N, es, cache)
        if abs(got - want) <= 1e-9:
            continue
        xb = M * N * es
        fit = xb <= cache
        where = (f"for {design!r} with M={M}, N={N}, {es}-byte elements and an L2 of {cache:,} bytes "
                 f"(x is {xb:,} bytes) you said {got:.4g}, expected {want:.4g}")
        if got > 1.0 + 1e-9:
            hint = ("a fraction of the copy's speed is at most 1 in this model: the copy's 2MN bytes divided by the "
                    "design's bytes (did you return bytes, or the inverse?)")
        elif design == "split_coop":
            hint = "the cooperative kernel reads x once and writes y once, whatever the size"
        elif design == "online":
            hint = "the model counts both of the online kernel's passes from DRAM, whatever the size"
        elif fit and abs(got - 2 / 3) < 1e-9:
            hint = ("x fits in L2 here (exactly full counts as fitting)" if xb == cache else "x fits in L2 here")
            hint += ", so the second read is free in this model"
        elif not fit:
            hint = "x does not fit in L2 here, so the second read comes from DRAM"
        else:
            hint = "count the bytes: read x, maybe read it again, write y"
        raise Wrong(f"{where}: {hint}")
    return "the model: 2/3 of copy for three passes over DRAM, 1 for two"


def check_6_3(predicted_frac) -> None:
    """Exercise 6.3: ``predicted_frac(design, M, N, element_size, l2_bytes)``, the all-or-nothing model."""
    check("6.3", "the L2 model's prediction", predicted_frac, _trial_6_3)
