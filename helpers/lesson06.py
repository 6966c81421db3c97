"""Lesson 06 · Rows bigger than a chip: split one row across many programs.

What lives here: how many programs a few long rows give; the (max, sum) statistics of row slices
and their merge in plain PyTorch (checked against float64); the first launch of the two-launch
split kernel on its own, so its statistics tensor can be looked at; a model of the cooperative
kernel's grid-wide wait that shows when it deadlocks; the traffic of each design and whether a
tensor fits in L2; the recorded (or live) measurements; the figures; and the checkers of exercises
6.1 to 6.3.
"""

from __future__ import annotations

import math
import random

import torch
import triton

from . import gpu_data, plots
from .exercises import Wrong, call_attempt, check, fmt
from .gpu_data import device_props  # noqa: F401  (the notebook calls lesson06.device_props)
from .kernels import softmax_online, softmax_split, softmax_split_coop, softmax_split_stats_kernel, split_plan
from .measure import measure_shape, require_gpu
from .mode import DEVICE, ON_GPU
from .reference import error_report, round_up_err

#: The long-row shapes of the course's benchmark: language-model vocabularies and beyond.
LONG_SHAPES = [(1024, 65536), (256, 131072), (64, 262144), (8, 1048576)]

#: Shapes measured live on a GPU: the same row lengths with fewer rows, so each runs quickly. In
#: float32 the first (64 MiB) is larger than an H100's or H200's L2, the others (16-32 MiB) fit.
LIVE_SHAPES = [(256, 65536), (64, 131072), (16, 262144), (8, 1048576)]

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}

MIB = 2**20

#: The course's goal for these shapes: this fraction of a plain copy's bandwidth.
TARGET_FRAC = 0.85

#: Providers this lesson compares, in plot order (any that a recording lacks are skipped).
PROVIDERS = ("torch_softmax", "torch_compile", "online", "split", "split_coop", "softmax")

LABELS = {
    "copy": "copy (the ceiling)",
    "torch_softmax": "torch.softmax",
    "torch_compile": "torch.compile(naive)",
    "online": "online (04)",
    "split": "split, two launches (06)",
    "split_coop": "split, cooperative (06)",
    "softmax": "helpers.softmax",
}

COLORS = {
    "torch_softmax": plots.COLORS["torch_softmax"],
    "torch_compile": plots.COLORS["torch_compile"],
    "online": plots.COLORS["online"],
    "split": "#e377c2",
    "split_coop": "#7b3294",
    "softmax": "#222222",
}


def label(provider: str) -> str:
    """The display name of a provider (its own name when unknown)."""
    return LABELS.get(provider, provider)


def _ok(r) -> bool:
    v = r.get("frac_of_copy")
    return r.get("status", "ok") == "ok" and isinstance(v, (int, float)) and math.isfinite(v)


def shape_name(M: int, N: int) -> str:
    """'1024 x 65536', or '8 x 1M' for a million columns."""
    n = f"{N // 2**20}M" if N % 2**20 == 0 else (f"{N // 1024}K" if N % 1024 == 0 else str(N))
    return f"{M} x {n}"


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
    the float64 reference has NaN (the all -inf row) and within 1e-6 everywhere else."""
    x = inf_rows(n_cols)
    ok_all = True
    print(f"5 rows of {n_cols} columns with all -inf slices, blocks of {block_size}")
    for s in slices:
        slice_len, n_slices = split_layout(n_cols, s, block_size)
        m, _ = slice_stats(x.to(torch.float64), n_slices, slice_len)
        empty = int((m == -math.inf).sum())
        y = softmax_split(x.to(DEVICE), slices=s, block_size=block_size)
        rep = error_report(y, x)
        ok = rep.ok(atol=1e-6)
        ok_all &= ok
        print(f"  slices={s:>2} -> {n_slices:>2} of {slice_len:>4} columns, {empty:>2} all -inf: "
              f"max abs err {round_up_err(rep.max_abs):>9}, NaN mismatches {rep.nan_mismatch}  "
              f"{'ok' if ok else 'WRONG'}")
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


# --------------------------------------------------------------------------------------------
# Traffic and the L2 cache
# --------------------------------------------------------------------------------------------

#: (reads of x, of which a second read that L2 may serve, writes of y) per design, in units of MN.
DESIGNS = {
    "online": ("online (04): one program per row", 2, 1, 1),
    "split": ("split, two launches", 2, 1, 1),
    "split_coop": ("split, cooperative (one launch)", 1, 0, 1),
}


def fits_in_l2(M: int, N: int, element_size: int, l2_bytes: int) -> bool:
    """True if the whole (M, N) input fits in an L2 cache of ``l2_bytes``: the condition for the
    two-launch split's second read to come from L2 rather than DRAM (a simple, all-or-nothing
    model: the writes of y and the L2's two halves blur the line in practice)."""
    return M * N * element_size <= l2_bytes


def two_launch_dram_bytes_answer(M: int, N: int, element_size: int, l2_bytes: int) -> int:
    """DRAM bytes of the two-launch split under the all-or-nothing model (statistics left out)."""
    passes = 2 if fits_in_l2(M, N, element_size, l2_bytes) else 3
    return passes * M * N * element_size


def print_traffic_table(shapes=LONG_SHAPES, l2_bytes: int = 62914560, dtypes=("float32", "bfloat16")) -> None:
    """For each shape and dtype: the size of x, whether x (and x with y) fits in L2, and the DRAM
    traffic of the online kernel, the two-launch split and the cooperative split, in MB and in
    units of MN (the statistics tensor, 8 bytes a slice, is left out: it is tiny)."""
    print(f"L2 cache: {l2_bytes / MIB:.0f} MiB; DRAM traffic in MiB, and in units of MN")
    head = (f"{'dtype':9} {'M x N':>13} {'x MiB':>7} {'x in L2':>8} {'x+y in L2':>10} "
            f"{'online':>12} {'two launches':>14} {'cooperative':>13}")
    print(head)
    print("-" * len(head))
    for d in dtypes:
        es = DTYPE_BYTES[d]
        for M, N in shapes:
            xb = M * N * es
            fit = fits_in_l2(M, N, es, l2_bytes)
            both = 2 * xb <= l2_bytes
            split = two_launch_dram_bytes_answer(M, N, es, l2_bytes)
            cells = []
            for b in (3 * xb, split, 2 * xb):
                cells.append(f"{b / MIB:.0f} ({b // xb}MN)")
            print(f"{d:9} {shape_name(M, N):>13} {xb / MIB:>7.0f} {'yes' if fit else 'no':>8} "
                  f"{'yes' if both else 'no':>10} {cells[0]:>12} {cells[1]:>14} {cells[2]:>13}")


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
# Measurements: recorded (CPU) or live (GPU)
# --------------------------------------------------------------------------------------------


def bench_data(live: bool | None = None, shapes=LIVE_SHAPES, dtypes=("float32", "bfloat16")) -> tuple[list[dict], dict]:
    """(rows, provenance) of the long-row shapes of the benchmark, every provider. On a GPU: measured
    live (``helpers.bench.measure_shape``) on ``shapes``; else the recorded ``bench.csv`` (the
    ``LONG_SHAPES``). Providers a recording lacks are simply absent."""
    live = ON_GPU if live is None else live
    if live:
        from .measure import DTYPES, providers

        provs = {k: v for k, v in providers().items() if k in PROVIDERS}
        rows = []
        for d in dtypes:
            for M, N in shapes:
                rows += measure_shape(M, N, DTYPES[d], provs, quick=True)
        return rows, gpu_data.provenance("helpers.lesson06.bench_data()")
    rows, meta = gpu_data.bench()
    long = {tuple(s) for s in LONG_SHAPES}
    return [r for r in rows if (r["M"], r["N"]) in long], meta


def providers_in(rows: list[dict]) -> list[str]:
    """The lesson's providers present in ``rows`` with at least one measurement, in plot order."""
    return [p for p in PROVIDERS if any(r["provider"] == p and _ok(r) for r in rows)]


def _shapes(rows, dtype=None):
    return sorted({(r["M"], r["N"]) for r in rows if dtype is None or r["dtype"] == dtype}, key=lambda s: s[1])


def _frac(rows, dtype, M, N, provider):
    r = next((r for r in rows if r["dtype"] == dtype and r["M"] == M and r["N"] == N and r["provider"] == provider), None)
    return r["frac_of_copy"] if r is not None and _ok(r) else None


def print_bench_table(rows: list[dict], dtype: str = "float32") -> None:
    """Fraction of the copy's bandwidth of every provider present, one line per long shape."""
    provs = providers_in(rows)
    short = {"torch_softmax": "torch", "torch_compile": "compile", "online": "online", "split": "split",
             "split_coop": "coop", "softmax": "softmax"}
    print(f"{dtype}: fraction of copy bandwidth")
    print(f"{'M x N':>13} " + " ".join(f"{short.get(p, p):>8}" for p in provs))
    for M, N in _shapes(rows, dtype):
        cells = [_frac(rows, dtype, M, N, p) for p in provs]
        print(f"{shape_name(M, N):>13} " + " ".join(f"{c:>8.2f}" if c is not None else f"{'-':>8}" for c in cells))
    missing = [p for p in ("split", "split_coop") if p not in provs]
    if missing:
        print(f"(this recording has no {' or '.join(missing)} column: it predates the split kernels; "
              f"the design-space data below has them)")


def bench_summary(rows: list[dict], target: float = TARGET_FRAC) -> None:
    """Computed from the rows: the course's best provider at each shape against the target and
    against the better of torch.softmax and torch.compile, and the peers' range."""
    mine = [p for p in ("online", "split", "split_coop", "softmax") if p in providers_in(rows)]
    peers = [p for p in ("torch_softmax", "torch_compile") if p in providers_in(rows)]
    best_fr, ratios, peer_fr, n = [], [], [], 0
    for d in ("float32", "bfloat16"):
        for M, N in _shapes(rows, d):
            m = [v for v in (_frac(rows, d, M, N, p) for p in mine) if v is not None]
            q = [v for v in (_frac(rows, d, M, N, p) for p in peers) if v is not None]
            if not m:
                continue
            n += 1
            best_fr.append(max(m))
            peer_fr += q
            if q:
                ratios.append(max(m) / max(q))
    if not n:
        print("no measurements of the course's kernels in these rows")
        return
    hits = sum(f >= target for f in best_fr)
    print(f"the course's best at each shape, of {', '.join(label(p) for p in mine)}:")
    print(f"{n} shapes: it reaches {min(best_fr):.2f} to {max(best_fr):.2f} of copy "
          f"(mean {sum(best_fr) / n:.2f}); {hits} of {n} reach the target of {target:.2f}")
    if peer_fr:
        print(f"{' and '.join(label(p) for p in peers)} reach {min(peer_fr):.2f} to {max(peer_fr):.2f} of copy; "
              f"the course's best is {min(ratios):.2f}x to {max(ratios):.2f}x the better of them")


def softmax_choice_check(rows: list[dict], tolerance: float = 0.05) -> None:
    """Does ``helpers.softmax`` (which picks one design and configuration per shape) come within
    ``tolerance`` of the better of the two split wrappers at each shape? Computed from the rows."""
    present = providers_in(rows)
    if "softmax" not in present or not {"split", "split_coop"} & set(present):
        print("(no helpers.softmax and split measurements in these rows to compare)")
        return
    good, misses = 0, []
    for d in ("float32", "bfloat16"):
        for M, N in _shapes(rows, d):
            mine = _frac(rows, d, M, N, "softmax")
            alts = [v for v in (_frac(rows, d, M, N, p) for p in ("split", "split_coop")) if v is not None]
            if mine is None or not alts:
                continue
            if mine >= (1 - tolerance) * max(alts):
                good += 1
            else:
                misses.append(f"{d} {shape_name(M, N)} ({mine:.2f} against {max(alts):.2f})")
    total = good + len(misses)
    print(f"helpers.softmax is within {tolerance:.0%} of the better split wrapper at {good} of {total} shapes"
          + (f"; not at {', '.join(misses)}" if misses else ""))


def plot_bench(rows: list[dict] | None = None, meta: dict | None = None, target: float = TARGET_FRAC):
    """Fraction of copy for every provider present at each long shape, float32 and bfloat16, with
    the course's target."""
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
            xs, ys = [], []
            for j, (M, N) in enumerate(shapes):
                v = _frac(rows, d, M, N, p)
                if v is not None:
                    xs.append(j - 0.4 + (i + 0.5) * width)
                    ys.append(v)
            ax.bar(xs, ys, width=width * 0.92, color=COLORS.get(p, "#7f7f7f"), label=label(p))
        ax.axhline(target, ls="--", color="#444444", lw=1)
        ax.text(len(shapes) - 0.5, target + 0.015, f"target {target:.2f}", ha="right", va="bottom", fontsize=8)
        ax.set_xticks(range(len(shapes)), [shape_name(M, N) for M, N in shapes], fontsize=8.5)
        ax.set_ylim(0, 1.0)
        ax.set_ylabel("fraction of copy bandwidth")
        ax.set_title(d, fontsize=10)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(6, len(labels)), frameon=False, fontsize=8.5)
    fig.suptitle(f"Few long rows on an {(meta or {}).get('gpu', 'GPU')}: speed as a fraction of a plain copy",
                 fontsize=10)
    return fig


def variants_data(live: bool = False) -> tuple[list[dict], dict]:
    """(rows, provenance) of the split designs' configurations (dtype, M, N, variant, ms, gbps,
    frac_of_copy, status): 'split tT bB' is the two-launch kernel aiming at T programs per SM with
    blocks of B, 'coop sS wW' the cooperative one with slices of S columns and W warps, plus
    'online' and 'torch_softmax'. Live on a GPU (two smaller shapes, one larger than L2 and one
    smaller, float32), else the recorded
    ``split_variants.csv``."""
    if live:
        raise ValueError("variants_data: the design-space sweep is recorded (figures/data/split_variants.csv); "
                         "it is not measured live (it takes minutes).")
    return gpu_data.read_csv("split_variants")


def design(variant: str) -> str:
    """'split', 'coop', or the variant's own name ('online', 'torch_softmax')."""
    return variant.split(" ")[0]


def best_variants(rows: list[dict]) -> dict:
    """(dtype, M, N) -> {design: (frac_of_copy, variant)}: the best measured configuration of each
    design at each shape."""
    out: dict = {}
    for r in rows:
        if not _ok(r):
            continue
        key = (r["dtype"], r["M"], r["N"])
        dz = design(r["variant"])
        cur = out.setdefault(key, {}).get(dz)
        if cur is None or r["frac_of_copy"] > cur[0]:
            out[key][dz] = (r["frac_of_copy"], r["variant"])
    return out


def print_best_variants(rows: list[dict], l2_bytes: int = 62914560) -> None:
    """Per shape: the best two-launch and the best cooperative configuration, next to the online
    kernel and torch.softmax, and whether x fits in L2."""
    best = best_variants(rows)
    print(f"{'dtype':9} {'M x N':>13} {'x in L2':>8} {'online':>7} {'torch':>6}  {'best two-launch':>22}  "
          f"{'best cooperative':>22}  {'winner':>7}")
    for d in ("float32", "bfloat16"):
        for key in sorted((k for k in best if k[0] == d), key=lambda k: k[2]):
            b = best[key]
            _, M, N = key
            fit = fits_in_l2(M, N, DTYPE_BYTES[d], l2_bytes)

            def cell(name):
                return f"{b[name][0]:.2f} ({b[name][1].split(' ', 1)[1]})" if name in b else "-"

            def one(name):
                return f"{b[name][0]:.2f}" if name in b else "-"

            win = "-"
            if "split" in b and "coop" in b:
                win = "coop" if b["coop"][0] > b["split"][0] else "split"
            print(f"{d:9} {shape_name(M, N):>13} {'yes' if fit else 'no':>8} {one('online'):>7} "
                  f"{one('torch_softmax'):>6}  {cell('split'):>22}  {cell('coop'):>22}  {win:>7}")
    tops = [(max(v[0] for k, v in b.items() if k in ("split", "coop")), key) for key, b in best.items()
            if "split" in b or "coop" in b]
    if tops:
        top, (d, M, N) = max(tops)
        hits = sum(t >= TARGET_FRAC for t, _ in tops)
        print(f"best split configuration anywhere: {top:.2f} of copy ({d}, {shape_name(M, N)}); "
              f"{hits} of {len(tops)} shapes reach the target of {TARGET_FRAC:.2f}")


def plot_design_space(rows: list[dict] | None = None, meta: dict | None = None):
    """Every measured configuration of the two split designs at each shape (dots), the best of each
    (ringed), with the online kernel and torch.softmax for reference."""
    if rows is None:
        rows, meta = variants_data(live=False)
    dtypes = [d for d in ("float32", "bfloat16") if any(r["dtype"] == d for r in rows)]
    fig, axes = plots.new_figure(11.0, 4.2, ncols=len(dtypes))
    axes = list(axes) if len(dtypes) > 1 else [axes]
    best = best_variants(rows)
    style = {"split": (-0.14, COLORS["split"], "two launches (each configuration)"),
             "coop": (0.14, COLORS["split_coop"], "cooperative (each configuration)")}
    for ax, d in zip(axes, dtypes):
        shapes = sorted({(r["M"], r["N"]) for r in rows if r["dtype"] == d}, key=lambda s: s[1])
        for j, (M, N) in enumerate(shapes):
            rs = [r for r in rows if r["dtype"] == d and r["M"] == M and r["N"] == N and _ok(r)]
            for dz, (off, c, lab) in style.items():
                ys = sorted(r["frac_of_copy"] for r in rs if design(r["variant"]) == dz)
                if not ys:
                    continue
                xs = [j + off + 0.05 * ((k % 3) - 1) for k in range(len(ys))]
                ax.scatter(xs, ys, s=14, color=c, alpha=0.55, label=lab if j == 0 else None, zorder=2)
                top = best[(d, M, N)][dz][0]
                ax.scatter([j + off], [top], s=90, facecolors="none", edgecolors=c, lw=1.6,
                           label=("best " + lab.split(" (")[0]) if j == 0 else None, zorder=3)
            for dz, mk, c, lab in (("online", "_", COLORS["online"], "online (04)"),
                                   ("torch_softmax", "_", COLORS["torch_softmax"], "torch.softmax")):
                if dz in best.get((d, M, N), {}):
                    ax.scatter([j], [best[(d, M, N)][dz][0]], marker=mk, s=500, color=c, lw=2.2,
                               label=lab if j == 0 else None, zorder=4)
        ax.axhline(TARGET_FRAC, ls="--", color="#444444", lw=1)
        ax.set_xticks(range(len(shapes)), [shape_name(M, N) for M, N in shapes], fontsize=8.5)
        ax.set_ylim(0, 1.0)
        ax.set_ylabel("fraction of copy bandwidth")
        ax.set_title(d, fontsize=10)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=3, frameon=False, fontsize=8.5)
    fig.suptitle(f"The design space on an {(meta or {}).get('gpu', 'GPU')}: every configuration measured",
                 fontsize=10)
    return fig


def l2_points(rows: list[dict]) -> list[dict]:
    """Per shape (and dtype): the size of x in bytes, the best two-launch / best cooperative
    fractions of copy, and the copy's own milliseconds in that run (frac_of_copy x ms)."""
    out = []
    for (d, M, N), b in best_variants(rows).items():
        if "split" in b and "coop" in b:
            ref = next(r for r in rows if _ok(r) and (r["dtype"], r["M"], r["N"]) == (d, M, N))
            out.append({"dtype": d, "M": M, "N": N, "x_bytes": M * N * DTYPE_BYTES[d],
                        "copy_ms": ref["frac_of_copy"] * ref["ms"],
                        "split": b["split"][0], "coop": b["coop"][0], "ratio": b["split"][0] / b["coop"][0]})
    return sorted(out, key=lambda p: p["x_bytes"])


def print_l2_effect(rows: list[dict], l2_bytes: int = 62914560) -> None:
    """Per shape, by the size of x: best two-launch / best cooperative, and whether x fits in L2;
    then the mean ratio on either side of the line."""
    pts = l2_points(rows)
    print(f"L2 = {l2_bytes / MIB:.0f} MiB")
    print(f"{'dtype':9} {'M x N':>13} {'x MiB':>7} {'fits':>5} {'copy us':>8} {'two-launch / cooperative':>25}")
    for p in pts:
        fit = p["x_bytes"] <= l2_bytes
        print(f"{p['dtype']:9} {shape_name(p['M'], p['N']):>13} {p['x_bytes'] / MIB:>7.0f} "
              f"{'yes' if fit else 'no':>5} {p['copy_ms'] * 1e3:>8.0f} {p['ratio']:>25.2f}")
    for fit in (True, False):
        rs = [p["ratio"] for p in pts if (p["x_bytes"] <= l2_bytes) == fit]
        if rs:
            print(f"x {'fits' if fit else 'does not fit'} in L2 ({len(rs)} shape{'s' * (len(rs) != 1)}): the two launches reach "
                  f"{sum(rs) / len(rs):.2f} of the cooperative kernel's speed on average")


def plot_l2_effect(rows: list[dict] | None = None, meta: dict | None = None, l2_bytes: int | None = None):
    """Best two-launch speed divided by best cooperative speed against the size of x, with the L2
    size: left of the line the second read is (mostly) served by L2."""
    if rows is None:
        rows, meta = variants_data(live=False)
    if l2_bytes is None:
        l2_bytes = device_props(live=False)[0]["l2_bytes"]
    pts = l2_points(rows)
    fig, ax = plots.new_figure(7.4, 3.8)
    mk = {"float32": ("o", (7, -3), "left"), "bfloat16": ("s", (-7, -3), "right"), "float16": ("^", (7, 5), "left")}
    for d in sorted({p["dtype"] for p in pts}):
        marker, off, ha = mk.get(d, ("o", (7, 5), "left"))
        ps = [p for p in pts if p["dtype"] == d]
        ax.scatter([p["x_bytes"] / MIB for p in ps], [p["ratio"] for p in ps], marker=marker, s=45,
                   color=COLORS["split"], edgecolors="#333333", label=d, zorder=3)
        for p in ps:
            ax.annotate(shape_name(p["M"], p["N"]), (p["x_bytes"] / MIB, p["ratio"]), xytext=off,
                        textcoords="offset points", fontsize=7.5, ha=ha)
    ax.axvline(l2_bytes / MIB, color="#444444", ls="--", lw=1)
    ax.text(l2_bytes / MIB * 0.93, 1.13, f"L2 = {l2_bytes / MIB:.0f} MiB", ha="right", fontsize=8.5)
    ax.axhline(1.0, color="#999999", lw=0.8)
    ax.axhline(2 / 3, color="#999999", lw=0.8, ls=":")
    ax.text(11, 2 / 3 - 0.015, "2/3: the second read costs a full DRAM pass (3MN against 2MN)",
            fontsize=8, color="#555555", va="top")
    ax.set_xscale("log")
    ticks = [16, 32, 64, 128, 256]
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()
    ax.set_xlim(9, 400)
    ax.set_ylim(0.5, 1.2)
    ax.set_xlabel("size of x (MiB)")
    ax.set_ylabel("best two-launch / best cooperative")
    ax.legend(loc="upper right", frameon=False, fontsize=8.5)
    ax.set_title(f"The second read is cheap while x fits in L2 ({(meta or {}).get('gpu', 'GPU')})", fontsize=10)
    return fig


#: Figures of this lesson, by the name ``helpers.plots.save`` writes them under.
FIGURES = {
    "06_row_cut": plot_row_cut,
    "06_traffic": plot_traffic,
    "06_bench": plot_bench,
    "06_design_space": plot_design_space,
    "06_l2": plot_l2_effect,
}


# --------------------------------------------------------------------------------------------
# Exercise checkers: each prints one line (correct / not yet / wrong) and never raises.
# --------------------------------------------------------------------------------------------


_call = call_attempt  # one definition, shared by every lesson's checkers


def combine_answer(stats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The row's (m, d) from a (rows, slices, 2) statistics tensor, as the second launch merges it."""
    m_s, d_s = stats[..., 0], stats[..., 1]
    m = m_s.max(dim=-1).values
    safe = torch.where(d_s == 0, torch.zeros((), dtype=stats.dtype), d_s * torch.exp(m_s - m.unsqueeze(-1)))
    return m, safe.sum(dim=-1)


def _stats_cases():
    """(description, x float64, slices) for exercise 6.1."""
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


def _trial_6_1(combine) -> str:
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


def check_6_1(combine) -> None:
    """Exercise 6.1: ``combine(stats)`` merges a (rows, slices, 2) statistics tensor into each row's
    (m, d)."""
    check("6.1", "merge a row's statistics in one step", combine, _trial_6_1)


def slices_per_row_answer(M: int, sm_count: int, per_sm: int) -> int:
    """The fewest slices per row that give M x slices >= per_sm x sm_count programs."""
    return max(1, -(-per_sm * sm_count // M))


def _trial_6_2(slices_per_row) -> str:
    cases = [(8, 132, 4), (64, 132, 4), (256, 132, 4), (1024, 132, 4), (528, 132, 4), (529, 132, 4),
             (1, 132, 4), (3, 108, 8), (100, 132, 4), (7, 1, 1)]
    for M, sms, k in cases:
        got = _call(slices_per_row, M, sms, k)
        if isinstance(got, bool) or not isinstance(got, int):
            if isinstance(got, float) and got.is_integer():
                raise Wrong(f"return an int (a number of slices), got the float {got} for M={M}: "
                            f"use // or math.ceil")
            raise Wrong(f"return an int (a number of slices), got {type(got).__name__} {got!r} for M={M}")
        want = slices_per_row_answer(M, sms, k)
        if got != want:
            progs = M * got
            hint = (f"{M} x {got} = {progs} programs, fewer than {k} x {sms} = {k * sms}" if progs < k * sms
                    else f"{M} x {want} = {M * want} programs are already enough")
            raise Wrong(f"for M={M}, {sms} SMs, {k} per SM you said {got}, expected {want}: {hint}")
    return "8 rows need 66 slices each on 132 SMs"


def check_6_2(slices_per_row) -> None:
    """Exercise 6.2: ``slices_per_row(M, sm_count, per_sm)``."""
    check("6.2", "slices per row to fill the GPU", slices_per_row, _trial_6_2)


def _trial_6_3(two_launch_dram_bytes) -> str:
    l2 = 62914560
    cases = [(1024, 65536, 4, l2), (8, 1048576, 4, l2), (64, 262144, 2, l2), (64, 262144, 4, l2),
             (8, 1048576, 2, l2), (256, 131072, 2, l2), (15, 1048576, 4, l2), (16, 1048576, 4, 64 * 2**20),
             (4, 1000, 4, 16000), (4, 1001, 4, 16000)]
    for M, N, es, cache in cases:
        got = _call(two_launch_dram_bytes, M, N, es, cache)
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            raise Wrong(f"return a number of bytes, got {type(got).__name__}")
        want = two_launch_dram_bytes_answer(M, N, es, cache)
        if got != want:
            xb = M * N * es
            fit = xb <= cache
            raise Wrong(f"for M={M}, N={N}, {es}-byte elements, L2 of {cache:,} bytes you said {got:,}, "
                        f"expected {want:,}: x is {xb:,} bytes and {'fits' if fit else 'does not fit'} in L2, "
                        f"so the second read comes from {'L2' if fit else 'DRAM'}")
    return "3MN bytes from DRAM, or 2MN when x fits in L2"


def check_6_3(two_launch_dram_bytes) -> None:
    """Exercise 6.3: ``two_launch_dram_bytes(M, N, element_size, l2_bytes)``."""
    check("6.3", "DRAM traffic of the two launches", two_launch_dram_bytes, _trial_6_3)


#: The two-launch design against the cooperative one as the tensor grows past L2: float32 rows of
#: 65536 columns, 8 MiB to 256 MiB.
L2_SHAPES = [(32, 65536), (64, 65536), (128, 65536), (256, 65536), (512, 65536), (1024, 65536)]


def l2_rows(shapes=L2_SHAPES, dtype_name: str = "float32") -> list[dict]:
    """Measure copy, the online kernel and both split designs at sizes below and above the L2 cache
    (GPU only; ``helpers.measure`` columns)."""
    from .measure import DTYPES

    require_gpu("l2_rows")
    provs = {"online": softmax_online, "split": softmax_split, "split_coop": softmax_split_coop}
    rows = []
    for M, N in shapes:
        rows += measure_shape(M, N, DTYPES[dtype_name], provs, host=False)
    return rows
