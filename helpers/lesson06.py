"""Lesson 06 · Rows bigger than a chip: the slice statistics (shown in the lesson),
launch glue, the live measurements (``*_rows``, GPU only), the figures, the checkers of 6.1-6.3."""

from __future__ import annotations

import math

import pandas as pd
import torch
import triton

from . import data, plots
from .exercises import Wrong, call_attempt, check, fmt, fmt_pair, guarded, launch_learner_kernel, require_kernel
from .kernels import (
    softmax_online,
    softmax_split,
    softmax_split_coop,
    softmax_split_coop_kernel,
    softmax_split_stats_kernel,
)
from .launch import check_positive_int
from .measure import DTYPES, measure_shape, providers, require_gpu
from .mode import DEVICE, ON_GPU
from .reference import round_up_err

#: The long-row shapes of the course's benchmark, and its held-out one (no configuration tuned on it).
LONG_SHAPES = ((1024, 65536), (256, 131072), (64, 262144), (8, 1048576))
HELD_OUT = (300, 100000)
#: The providers the lesson compares, in table order.
PROVIDERS = ["torch_softmax", "torch_compile", "online", "split", "split_coop", "softmax"]
MIB = 2**20


def slice_stats(x: torch.Tensor, slices: int, slice_len: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Cut the last dimension of ``x`` into ``slices`` slices of ``slice_len`` columns (default
    ceil(N / slices)) and reduce each to (m, d), its max and sum of exp(x - m); empty: (-inf, 0)."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() == 0:
        raise TypeError("slice_stats: x must be a floating tensor with at least one dimension.")
    check_positive_int("slice_stats", "slices", slices, allow_none=False)
    N = x.shape[-1]
    L = slice_len if slice_len is not None else max(1, -(-N // slices))
    if L * slices < N:
        raise ValueError(f"slice_stats: {slices} slices of {L} columns do not cover {N} columns.")
    pad = torch.full((*x.shape[:-1], L * slices - N), -math.inf, dtype=x.dtype, device=x.device)
    parts = torch.cat([x, pad], dim=-1).reshape(*x.shape[:-1], slices, L)
    m = parts.max(dim=-1).values
    terms = torch.where(
        parts == -math.inf, torch.zeros((), dtype=x.dtype, device=x.device), torch.exp(parts - m.unsqueeze(-1))
    )
    return m, terms.sum(dim=-1)


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


def predicted_frac_answer(design: str, M: int, N: int, element_size: int, l2_bytes: int) -> float:
    """The all-or-nothing L2 model: a copy's 2MN bytes over the design's (2MN or 3MN)."""
    if design not in ("online", "split", "split_coop"):
        raise ValueError(f"predicted_frac: design must be 'online', 'split' or 'split_coop', got {design!r}.")
    fits = M * N * element_size <= l2_bytes
    return 1.0 if design == "split_coop" or (design == "split" and fits) else 2 / 3


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


# ---- exercise checkers: each prints one line (correct / not yet / wrong) and never raises ----

UNWRITTEN = 1.0e30  #: what the checker fills the statistics with: a pair still holding it was never stored


def _stats_kernel_cases():
    """(description, x float32, slice_len, block, column stride, row stride in memory) for 6.1."""
    g, inf = torch.Generator().manual_seed(61), math.inf
    a = torch.randn(7, 150, generator=g) * 3
    a[1] = torch.linspace(-300.0, 300.0, 150)  # the max rises block after block: exp(x - anything else) overflows
    a[2, :100] = -inf  # two slices of only -inf, then a partly -inf one
    a[3] = -inf  # a row of only -inf
    a[4] = -inf
    a[4, 60] = 5.0  # one finite value
    a[5, 16:32], a[5, 48:64], a[5, 149] = -inf, -inf, 200.0  # -inf blocks; the max in the last, partial slice
    a[6] = torch.linspace(-250.0, -200.0, 150)  # exp(x - anything but the max) underflows float32 to 0
    b = torch.randn(4, 70, generator=g) * 5
    b[1], b[2, :40], b[3, 3] = -inf, -inf, 1e4
    c = torch.randn(3, 37, generator=g)
    c[1, :36] = -inf
    c[2] = torch.linspace(-50.0, 80.0, 37)
    return [
        (
            "7 rows of 150 columns, 160 apart, in slices of 48 (3 blocks of 16; the last slice 6 columns)",
            a,
            48,
            16,
            1,
            160,
        ),
        (
            "4 rows of 70 columns, 150 apart, read with a column stride of 2, in slices of 16 (2 blocks of 8)",
            b,
            16,
            8,
            2,
            150,
        ),
        ("3 rows of 37 columns, 41 apart, in slices of one block of 8", c, 8, 8, 1, 41),
    ]


def simulate_stats(
    x: torch.Tensor,
    slice_len: int,
    block: int,
    *,
    start_step=None,
    blocks=None,
    mask=True,
    pad=None,
    col_stride=None,
    row_stride=None,
    rescale=True,
    accumulate=True,
):
    """What a statistics kernel stores for ``x``, in float64 from x's memory block by block (a NaN read
    makes the pair NaN); the keywords model the mistakes the checker names. Returns (m, d)."""
    flat = torch.empty(0, dtype=x.dtype, device=x.device).set_(x.untyped_storage()).cpu().double()
    rs = x.stride(0) if row_stride is None else row_stride
    cs = x.stride(1) if col_stride is None else col_stride
    n_rows, n_cols = x.shape
    n_slices = triton.cdiv(n_cols, slice_len)
    m = torch.full((n_rows, n_slices), -math.inf, dtype=torch.float64)
    d = torch.zeros((n_rows, n_slices), dtype=torch.float64)
    for r in range(n_rows):
        for s in range(n_slices):
            mr, dr = -math.inf, 0.0
            for b in range(slice_len // block if blocks is None else blocks):
                c = s * (slice_len if start_step is None else start_step) + b * block + torch.arange(block)
                live = c < n_cols if mask else torch.ones(block, dtype=torch.bool)
                idx = (x.storage_offset() + r * rs + c[live] * cs).clamp(0, flat.numel() - 1)
                v = flat[idx]
                if pad is not None:
                    v = torch.cat([v, torch.full((int((~live).sum()),), float(pad), dtype=torch.float64)])
                if torch.isnan(v).any():
                    mr, dr = math.nan, math.nan
                    break
                m_new = max(mr, float(v.max()) if v.numel() else -math.inf)
                terms = 0.0 if m_new == -math.inf else float(torch.exp(v[v != -math.inf] - m_new).sum())
                dr = (
                    terms
                    if not accumulate
                    else (dr * math.exp(mr - m_new) if rescale and mr != -math.inf else dr) + terms
                )
                mr = m_new
            m[r, s], d[r, s] = mr, dr
    return m, d


def _same_stats(gm, gd, m, d, rtol: float = 2e-5):
    """Element-wise: NaN where the model has NaN, elsewhere equal maxima and sums within ``rtol``."""
    nan = torch.isnan(d)
    close = ((gm == m) | (torch.isinf(gm) & torch.isinf(m) & (gm.sign() == m.sign()))) & (
        (gd - d).abs() <= rtol * d.abs() + 1e-30
    )
    return torch.where(nan, torch.isnan(gd), close & ~torch.isnan(gd))


def _trial_6_1(kernel) -> str:
    require_kernel(kernel, "split_stats_kernel")
    for desc, rows, L, B, cs, rs in _stats_kernel_cases():
        (M, N), n_slices = rows.shape, triton.cdiv(rows.shape[1], L)
        base = guarded((M, cs * (N - 1) + 1), fill=1000.0, row_stride=rs)  # columns a stride skips hold 1000
        (x := base[:, ::cs]).copy_(rows.to(base.device))
        before = base.clone()
        stats = guarded((M, n_slices, 2), fill=UNWRITTEN)
        launch_learner_kernel(
            kernel,
            (M, n_slices),
            stats,
            x,
            x.stride(0),
            x.stride(1),
            N,
            L,
            n_slices,
            BLOCK_SIZE=B,
            where=f"on {desc}:",
            outputs=(stats, base),
        )
        if not torch.equal(base.nan_to_num(), before.nan_to_num()):
            raise Wrong("your kernel changed its input: store into stats_ptr only")
        gm, gd = (got := stats.detach().cpu().double()).unbind(-1)
        unwritten = (got == float(torch.tensor(UNWRITTEN))).any(-1)
        if unwritten.any():
            r, s = map(int, unwritten.nonzero()[0])
            raise Wrong(
                f"on {desc}: nothing was stored for (row {r}, slice {s}): program (row, s) stores m at "
                f"stats_ptr + 2 * (row * n_slices + s) and d right after it"
            )
        m, d = simulate_stats(x, L, B)
        if _same_stats(gm, gd, m, d).all():
            continue
        if _same_stats(gd, gm, m, d).all():
            raise Wrong(f"on {desc}: m and d are swapped: store m at stats_ptr + 2 * (row * n_slices + s), d one after")
        for kw, hint in (
            (dict(start_step=B), "slice s starts at column s * slice_len, not s * BLOCK_SIZE"),
            (
                dict(blocks=L // B - 1),
                "the loop stops before the slice's last block: range(0, slice_len, "
                "BLOCK_SIZE) visits every block, and d is stored after the loop",
            ),
            (dict(accumulate=False), "d holds only the last block's terms: add each block's terms to the running d"),
            (
                dict(mask=False),
                "the last slice of a row reads past n_cols (here into what follows the row): load "
                "with mask=cols < n_cols and other=-float('inf')",
            ),
            (
                dict(pad=0.0),
                "masked lanes load 0, which counts as a value: load them as other=-float('inf') and "
                "leave their terms out",
            ),
            (
                dict(col_stride=1),
                "the columns are in_col_stride elements apart: address "
                "in_ptr + row * in_row_stride + cols * in_col_stride",
            ),
            (
                dict(row_stride=N),
                "rows are in_row_stride elements apart, not n_cols: address "
                "in_ptr + row * in_row_stride + cols * in_col_stride",
            ),
            (
                dict(rescale=False),
                "when the running max grows, multiply d by exp(m_old - m_new) before adding the new block's terms",
            ),
        ):
            if (
                kw.get("blocks", 1) >= 1
                and not (kw.get("col_stride") == cs)
                and _same_stats(gm, gd, *simulate_stats(x, L, B, **kw)).all()
            ):
                raise Wrong(f"on {desc}: {hint}")
        r, s = map(int, (~_same_stats(gm, gd, m, d)).nonzero()[0])
        part = rows[r, s * L : min((s + 1) * L, N)]
        fin = part[torch.isfinite(part)]
        if torch.isnan(gd[r, s]) and bool((part[:B] == -math.inf).all()):
            raise Wrong(
                f"on {desc}: (row {r}, slice {s}) came out NaN; it starts with a block of only -inf, where the "
                f"running max is still -inf and exp(-inf - (-inf)) is NaN. A slice of only -inf must give "
                f"(-inf, 0): leave those terms and the rescale factor out with tl.where"
            )
        if (
            (torch.isnan(gd[r, s]) or torch.isinf(gd[r, s]) or gd[r, s] == 0)
            and fin.numel()
            and float(fin.abs().max()) > 80
        ):
            raise Wrong(
                f"on {desc}: (row {r}, slice {s}) has d = {gd[r, s].item():g}: its values reach "
                f"{float(fin.abs().max()):.0f} in size, where exp overflows or underflows float32. Take "
                f"tl.exp of x - m with the running max m, never of x alone or of x minus another shift"
            )
        want_m, got_m = fmt_pair(m[r, s].item(), gm[r, s].item())
        want_d, got_d = fmt_pair(d[r, s].item(), gd[r, s].item())
        raise Wrong(f"on {desc}: (row {r}, slice {s}) stored ({got_m}, {got_d}), expected ({want_m}, {want_d})")
    return "every (m, d) matches float64 on rows of -inf, slices of -inf, a spread of 600, partial slices, strides"


def check_6_1(split_stats_kernel) -> None:
    """Exercise 6.1: a Triton kernel writing each slice's (m, d) into a (rows, slices, 2) buffer."""
    check("6.1", "the split statistics kernel", split_stats_kernel, _trial_6_1)


def _stats_cases():
    """(description, x float64, slices) for 6.2; the statistics are handed over in float32."""
    g = torch.Generator().manual_seed(61)
    x = torch.randn(4, 40, generator=g, dtype=torch.float64) * 4
    x[1, :25] = -math.inf  # the first slices all -inf
    x[2, :8], x[2, 8:16], x[2, 30] = -150.0, 0.0, 150.0  # slice maxima 300 apart: any shift but the max overflows
    y = torch.full((3, 12), -math.inf, dtype=torch.float64)
    y[0, 5], y[1, 11] = 2.0, -1.0  # row 2 stays all -inf: (m, d) = (-inf, 0)
    return [
        ("random rows, one with -inf slices and one whose slice maxima are -150, 0 and 150", x, 5),
        ("rows that are -inf in all slices but one, and a row of only -inf", y, 4),
        ("one slice per row", x, 1),
        ("more slices than columns in some (empty slices)", x[:, :6], 8),
    ]


def _trial_6_2(combine) -> str:
    worst = 0.0
    for desc, x, s in _stats_cases():
        stats = torch.stack(slice_stats(x, s), dim=-1).float()
        before = stats.clone()
        got = call_attempt(combine, stats)
        if not torch.equal(stats.nan_to_num(), before.nan_to_num()):
            raise Wrong("your function changed the statistics tensor: compute into new tensors instead")
        if not isinstance(got, (tuple, list)) or len(got) != 2 or not all(isinstance(t, torch.Tensor) for t in got):
            raise Wrong(f"return a pair of tensors (m, d), got {type(got).__name__}")
        m, d = (t.detach().cpu().double() for t in got)
        want_m, lse = x.max(dim=-1).values, torch.logsumexp(x, dim=-1)
        if tuple(m.shape) != tuple(want_m.shape) or tuple(d.shape) != tuple(want_m.shape):
            raise Wrong(
                f"on {desc}: m and d should hold one value per row, shape {tuple(want_m.shape)}; yours have "
                f"shapes {tuple(m.shape)} and {tuple(d.shape)}: reduce over the last dimension (the slices)"
            )
        nan = torch.isnan(m) | torch.isnan(d)
        if (nan & ~(stats[..., 0] == -math.inf).any(-1).cpu()).any():
            raise Wrong(
                f"on {desc}: got NaN in d = {fmt(d)} for a row without empty slices: e^(m_s - shift) overflows "
                f"float32 here unless the shift is the row's maximum m: move each d_s with e^(m_s - m)"
            )
        if nan.any():
            raise Wrong(
                f"on {desc}: got NaN in (m, d) = ({fmt(m)}, {fmt(d)}): a slice of only -inf is (-inf, 0), "
                f"and e^(-inf - -inf) is NaN unless you leave such slices out"
            )
        fin = ~torch.isinf(want_m)
        if (
            not torch.equal(torch.isinf(m), torch.isinf(want_m))
            or ((m[fin] - want_m[fin]).abs() > 1e-5 * want_m[fin].abs().clamp(min=1.0)).any()
        ):
            raise Wrong(f"on {desc}: m should be each row's largest slice maximum {fmt(want_m)}, got {fmt(m)}")
        if not torch.equal(d[~fin], torch.zeros_like(d[~fin])):
            raise Wrong(f"on {desc}: a row of only -inf should give d = 0, got {fmt(d)}")
        if torch.isinf(d).any() or (d[fin] == 0).any():
            raise Wrong(
                f"on {desc}: got d = {fmt(d)}: e^(m_s - shift) overflows or underflows float32 here unless "
                f"the shift is the row's maximum m: move each d_s with e^(m_s - m)"
            )
        err = (m[fin] + torch.log(d[fin]) - lse[fin]).abs()
        if (err > 1e-5).any():
            raise Wrong(
                f"on {desc}: m + log d should be each row's logsumexp {fmt(lse)}, got {fmt(m + torch.log(d))}: "
                f"is each slice's d moved to the row's maximum, d_s * e^(m_s - m), before the sum?"
            )
        worst = max(worst, float(err.max()) if err.numel() else 0.0)
    return f"m + log d within {round_up_err(worst)[2:] if worst else '0'} of the float64 logsumexp on every row"


def check_6_2(combine) -> None:
    """Exercise 6.2: ``combine(stats)`` merges a (rows, slices, 2) statistics tensor into each row's (m, d)."""
    check("6.2", "merge a row's statistics in one step", combine, _trial_6_2)


def _trial_6_3(predicted_frac) -> str:
    l2 = 50 * MIB
    cases = [
        ("split", 8, 1048576, 4, l2),
        ("split", 64, 262144, 4, l2),
        ("split", 64, 262144, 2, l2),
        ("split", 1024, 65536, 4, l2),
        ("split", 4, 1000, 4, 16000),
        ("split", 4, 1001, 4, 16000),
        ("split", 4, 1000, 4, 8000),
        ("split_coop", 1024, 65536, 4, l2),
        ("split_coop", 8, 1048576, 2, l2),
        ("online", 8, 1048576, 4, l2),
        ("online", 1024, 65536, 2, l2),
        ("split", 16, 1048576, 4, 64 * MIB),
    ]
    for design, M, N, es, cache in cases:
        got = call_attempt(predicted_frac, design, M, N, es, cache)
        if isinstance(got, bool) or not isinstance(got, (int, float)) or not math.isfinite(got):
            raise Wrong(f"return a number (a fraction of the copy's speed), got {got!r}")
        want = predicted_frac_answer(design, M, N, es, cache)
        if abs(got - want) <= 1e-9:
            continue
        xb, (w, g) = M * N * es, fmt_pair(want, got)
        where = (
            f"for {design!r} with M={M}, N={N}, {es}-byte elements and an L2 of {cache:,} bytes "
            f"(x is {xb:,} bytes) you said {g}, expected {w}"
        )
        if got > 1.0 + 1e-9:
            hint = (
                "a fraction of the copy's speed is at most 1 in this model: the copy's 2MN bytes divided by the "
                "design's bytes (did you return bytes, or the inverse?)"
            )
        elif abs(got - want) < 0.01:
            hint = "close, but the model's fractions are exactly 2/3 or 1: count whole passes, without the statistics"
        elif design == "split_coop":
            hint = "the cooperative kernel reads x once and writes y once, whatever the size"
        elif design == "online":
            hint = "the model counts both of the online kernel's passes from DRAM, whatever the size"
        elif want == 1.0:
            hint = (
                f"x fits in L2 here{' (exactly full counts as fitting)' if xb == cache else ''}, so the second read "
                f"is free in this model"
            )
        elif M * N <= cache and call_attempt(predicted_frac, design, M, N, es, M * N // 2) != got:
            hint = "x's bytes are M * N * element_size: count the element size before comparing with the L2"
        else:
            hint = "x does not fit in L2 here, so the second read comes from DRAM"
        raise Wrong(f"{where}: {hint}")
    return "the model: 2/3 of copy for three passes over DRAM, 1 for two"


def check_6_3(predicted_frac) -> None:
    """Exercise 6.3: ``predicted_frac(design, M, N, element_size, l2_bytes)``, the all-or-nothing model."""
    check("6.3", "the L2 model's prediction", predicted_frac, _trial_6_3)
