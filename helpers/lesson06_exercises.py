"""Lesson 06 · the exercise checkers: 6.1 the split statistics kernel, 6.2 merging a row's statistics in one
step, 6.3 the L2 model's prediction. What the lesson shows is in ``helpers.lesson06``."""

from __future__ import annotations

import math

import torch
import triton

from .exercises import Wrong, call_attempt, check, fmt, fmt_pair, guarded, launch_learner_kernel, require_kernel
from .reference import round_up_err, slice_stats
from .traffic import MIB, predicted_frac_answer

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
