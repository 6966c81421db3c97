"""Lesson 04 · the exercise checkers: 4.1 the online pass in Triton, 4.2 merging two (m, d) pairs, 4.3 the
traffic of a stash-and-rescale variant. What the lesson shows is in ``helpers.lesson04``."""

from __future__ import annotations

import math
import numbers

import torch

from .exercises import (
    Wrong,
    call_attempt,
    check,
    fmt_pair,
    guarded,
    guards_intact,
    launch_learner_kernel,
    require_kernel,
)
from .reference import NEG_INF, round_up_err

# ---- Exercise 4.1: the online pass in Triton. Each case targets one mistake that the cases before it let
# through, and its hints name that mistake. Row strides of x and out differ (and from the row length), with
# NaN after every row: a read past a row's end puts NaN in the output, a write there breaks guards_intact.
UNSTORED = -1.0  # the output's fill: a softmax is never negative

H_STRIDES = (
    "row 0 is right but the rows after it are not: x's rows are in_row_stride elements apart and out's "
    "rows out_row_stride apart (here the two differ, and neither is n_cols): row r of x starts at "
    "in_ptr + r * in_row_stride, row r of out at out_ptr + r * out_row_stride"
)
H_FACTOR = (
    "rescale the old sum by exp(m - m_new), which is at most 1 (and 0 on the first block, where m = -inf), "
    "not by exp(m_new - m), which overflows (0 * inf is NaN)"
)
H_SHIFT = (
    "pass 2 writes exp(x - m) / d, so d must be the sum of exp(x - m) over the row, with m its maximum: "
    "take each block's terms as exp(x - m_new), relative to the new running max"
)
H_RESCALE = (
    "when the maximum grows, the sum so far is relative to the old m: multiply the old sum d by "
    "exp(m_old - m_new) (computed before m is updated) before adding the block's sum, rather than "
    "rescaling the block's new terms or nothing"
)
H_OVERFLOW = (
    "exp overflowed when the maximum jumped by 100: take the block's terms relative to the new maximum, "
    "exp(x - m_new), which is at most 1, not relative to the old m"
)
H_BLOCK_MAX = (
    "the blocks after the first have maxima far below the running max: take each block's terms "
    "relative to the running max m_new, not to the block's own maximum"
)
H_MASK = (
    "the last block runs past the row's end, where this input holds NaN: load with mask=offs < n_cols "
    'and other=-float("inf"), so the padding lanes add nothing'
)
H_OTHER = (
    'the padding lanes of the last block must load -inf (other=-float("inf")): a 0 there enters the '
    "max and the sum of rows whose values are all negative"
)
H_NEG_INF = (
    "while every value seen is -inf, m_new is -inf too and exp(m - m_new) and exp(x - m_new) are "
    "exp(-inf - -inf) = NaN: nothing has been seen yet, so the rescale factor must be 1 and the block "
    "must add 0 (tl.where)"
)
H_ALL_INF = (
    "a row of only -inf has no softmax; torch.softmax gives NaN there and so must your kernel (with "
    "m = -inf and d = 0 at the end, exp(x - m) / d is NaN by itself: do not replace it with made-up values)"
)
H_COL = "x[row, j] is at row_start + j * in_col_stride: use the column stride in every load"
H_STORE = (
    "your kernel wrote past the end of its output rows (into the padding after each row): does tl.store "
    "have mask=offs < n_cols?"
)
H_EXP = "every exponent must be x - m_new, at most 0, so that nothing overflows"


def online_kernel_cases(seed: int = 41) -> list[dict]:
    """Exercise 4.1's rows, in order: ``x`` (M, N) float32, ``block`` the BLOCK_SIZE, ``in_rs``/``out_rs`` the row
    strides of input and output, ``col`` x's column stride, ``hint`` (``nan_hint``, ...) the mistake shown."""
    g = torch.Generator().manual_seed(seed)
    rnd = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    cases = []
    cases.append(
        dict(
            name="rows of one block, x and out with different row strides",
            x=rnd(4, 16) * 2,
            block=16,
            in_rs=24,
            out_rs=20,
            hint=H_SHIFT,
            nan_hint=H_FACTOR,
            inf_hint=H_RESCALE,
            rows_hint=H_STRIDES,
        )
    )
    x = rnd(3, 64) + torch.tensor([0.0, 3.0, 6.0, 100.0]).repeat_interleave(16)
    cases.append(
        dict(
            name="a maximum that grows from block to block, by 100 in the last",
            x=x,
            block=16,
            in_rs=72,
            out_rs=68,
            hint=H_RESCALE,
            nan_hint=H_OVERFLOW,
            inf_hint=H_OVERFLOW,
            zero_hint=H_OVERFLOW,
        )
    )
    x = rnd(3, 64).index_fill_(1, torch.tensor([3]), 30.0)
    cases.append(dict(name="the maximum (30) in the first block", x=x, block=16, in_rs=72, out_rs=68, hint=H_BLOCK_MAX))
    cases.append(
        dict(
            name="rows of 70 values near -100 in blocks of 16 (the last block partial)",
            x=rnd(3, 70) - 100.0,
            block=16,
            in_rs=80,
            out_rs=84,
            hint=H_OTHER,
            nan_hint=H_MASK,
        )
    )
    cases.append(
        dict(
            name="rows near +1000 and -1000 (only the running max keeps exp in range)",
            x=rnd(2, 40) * 3 + torch.tensor([[1000.0], [-1000.0]]),
            block=16,
            in_rs=48,
            out_rs=52,
            hint=H_EXP,
        )
    )
    x = rnd(2, 70)
    x[0, 66], x[1, 40] = 200.0, 90.0
    cases.append(
        dict(
            name="a late maximum of 200 (exp(200) overflows float32)",
            x=x,
            block=16,
            in_rs=88,
            out_rs=84,
            hint=H_RESCALE,
            nan_hint=H_OVERFLOW,
        )
    )
    x = rnd(2, 70).index_fill_(1, torch.arange(37), NEG_INF)
    cases.append(
        dict(
            name="rows whose first 37 columns (two whole blocks) are -inf",
            x=x,
            block=16,
            in_rs=80,
            out_rs=84,
            hint=H_NEG_INF,
            nan_hint=H_NEG_INF,
        )
    )
    x = rnd(3, 50).index_fill_(0, torch.tensor([1]), NEG_INF)
    cases.append(
        dict(
            name="a row of only -inf between two ordinary rows (torch.softmax gives NaN)",
            x=x,
            block=16,
            in_rs=64,
            out_rs=68,
            hint=H_ALL_INF,
        )
    )
    cases.append(dict(name="values spread over +-1e4", x=rnd(2, 64) * 1e4, block=16, in_rs=72, out_rs=80, hint=H_EXP))
    cases.append(
        dict(
            name="a column stride of 3 (a strided view of a wider tensor)",
            x=rnd(3, 50) * 3,
            block=16,
            in_rs=200,
            out_rs=68,
            col=3,
            hint=H_COL,
        )
    )
    return cases


def _run_case(kernel, case: dict) -> float:
    """Run ``kernel`` on one case; raise Wrong with the case's hint, or return the max abs error."""
    data_x, block, col = case["x"], case["block"], case.get("col", 1)
    M, N = data_x.shape
    what = f"on {case['name']}:"
    wide = guarded((M, N * col), row_stride=case["in_rs"], fill=0.0)
    wide.copy_(torch.randn(M, N * col, generator=torch.Generator().manual_seed(7)).to(wide.device) * 50)
    x = wide[:, ::col] if col > 1 else wide
    x.copy_(data_x.to(x.device))
    before = wide.clone()
    out = guarded((M, N), row_stride=case["out_rs"], fill=UNSTORED)
    launch_learner_kernel(
        kernel, (M,), out, x, x.stride(0), x.stride(1), out.stride(0), N, BLOCK_SIZE=block, outputs=(), where=what
    )
    if not (torch.equal(wide.nan_to_num(), before.nan_to_num()) and guards_intact(wide)):
        raise Wrong("your kernel changed its input: store into out_ptr only")
    got, ref = out.detach().cpu().double(), torch.softmax(data_x.double(), dim=-1)
    if (got == UNSTORED).all():
        raise Wrong(
            f"{what} nothing was stored in out: does pass 2 run, with out_start = out_ptr + row * out_row_stride?"
        )
    nan_got, nan_ref = torch.isnan(got), torch.isnan(ref)
    rows_ok = (((got - ref).abs() <= 1e-6) | (nan_got & nan_ref)).all(dim=1)
    if "rows_hint" in case and rows_ok[0] and not rows_ok.all():
        raise Wrong(f"{what} {case['rows_hint']}")
    if (nan_ref & ~nan_got).any():
        raise Wrong(f"{what} {H_ALL_INF}")
    if not rows_ok.all():
        err = (got - ref).abs()[~(nan_got | nan_ref)]
        err = f"max abs error {err.max().item():.1e} against torch.softmax" if err.numel() else "NaN"
        hint = case["hint"]
        if (nan_got & ~nan_ref).any():
            hint, err = case.get("nan_hint", hint), "your output has NaN where torch.softmax has none"
        elif torch.isinf(got).any():
            hint = case.get("inf_hint", hint)
        elif (got.sum(dim=1) == 0).any():  # d overflowed to inf
            hint = case.get("zero_hint", hint)
        raise Wrong(f"{what} {err}: {hint}")
    if not guards_intact(out):
        raise Wrong(f"{what} {H_STORE}")
    ok = ~nan_ref
    return (got[ok] - ref[ok]).abs().max().item() if ok.any() else 0.0


def _trial_4_1(kernel) -> str:
    require_kernel(kernel, "online_softmax_kernel")
    cases = online_kernel_cases()
    worst = max(_run_case(kernel, case) for case in cases)
    return f"max abs error {round_up_err(worst)} on all {len(cases)} kinds of rows, -inf rows and strides included"


def check_4_1(online_softmax_kernel) -> None:
    """Exercise 4.1: the online pass of a looped softmax kernel, written in Triton."""
    check("4.1", "the online pass in Triton", online_softmax_kernel, _trial_4_1)


# ---- Exercises 4.2 and 4.3: plain Python answers
def _pair(got, what: str) -> list[float]:
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise Wrong(f"{what} should return a pair (m, d), got {type(got).__name__}")
    out = []
    for v in got:
        v = v.item() if isinstance(v, torch.Tensor) and v.numel() == 1 else v
        if isinstance(v, bool) or not isinstance(v, numbers.Real):  # numbers.Real: numpy's floats too
            raise Wrong(f"{what} should return two numbers, got {type(v).__name__}")
        out.append(float(v))
    return out


#: A right merge computed in float32 (torch's default dtype) is off by a few float32 roundings, about 1e-7 relative;
#: each wrong merge the checker names is off by far more than this.
MERGE_RTOL = 1e-5


def _same(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return False
    return a == b if math.isinf(a) or math.isinf(b) else math.isclose(a, b, rel_tol=MERGE_RTOL, abs_tol=1e-30)


def _exp(v: float) -> float:
    try:
        return math.exp(v)
    except OverflowError:
        return math.inf


def merge_answer(m1: float, d1: float, m2: float, d2: float) -> tuple[float, float]:
    """The (m, d) of two blocks together, from each block's (max, sum of exp(x - max))."""
    m = max(m1, m2)
    return (NEG_INF, 0.0) if m == NEG_INF else (m, d1 * math.exp(m1 - m) + d2 * math.exp(m2 - m))


H_MERGE_EMPTY = "an empty part has m = -inf and d = 0: exp(-inf - -inf) is NaN, so handle it"
H_MERGE_MAX = "the merged m is the larger of the two maxima"
H_MERGE_ADD = (
    "the two sums are relative to different maxima: rescale each d from its own max to the merged one, "
    "d_i * exp(m_i - m), before adding them"
)
H_MERGE_FACTOR = "the factor that moves d_i to the merged max is exp(m_i - m), at most 1, not exp(m - m_i)"
H_MERGE_DEFINITION = "the merged d is the sum of exp(x - m) over both parts, relative to the merged max m"


def _merge_hint(case, m: float, d: float) -> str:
    """The hint for a wrong merge: the mistake it names where the answer is that mistake's, else the definition."""
    m1, d1, m2, d2 = case
    wm, _ = merge_answer(*case)
    if math.isnan(d) and NEG_INF in (m1, m2):
        return H_MERGE_EMPTY
    if not _same(m, wm):
        return H_MERGE_MAX
    if _same(d, d1 + d2):
        return H_MERGE_ADD
    if _same(d, d1 * _exp(wm - m1) + d2 * _exp(wm - m2)):
        return H_MERGE_FACTOR
    return H_MERGE_DEFINITION


MERGE_CASES = [
    (3.0, 1.5, 5.0, 2.0),
    (5.0, 2.0, 3.0, 1.5),
    (1.0, 2.0, 1.0, 3.0),
    (-2.0, 1.25, 0.5, 1.0),
    (NEG_INF, 0.0, 2.0, 1.0),
    (2.0, 1.0, NEG_INF, 0.0),
    (NEG_INF, 0.0, NEG_INF, 0.0),
    (700.0, 1.0, -700.0, 1.0),
]


def _trial_4_2(merge) -> str:
    for c in MERGE_CASES:
        m, d = _pair(call_attempt(merge, *c), "merge")
        wm, wd = merge_answer(*c)
        if not (_same(m, wm) and _same(d, wd)):
            args = ", ".join(f"{v:g}" for v in c)
            (em, gm), (ed, gd) = fmt_pair(wm, m, 6), fmt_pair(wd, d, 6)
            raise Wrong(f"merge({args}) gave ({gm}, {gd}), expected ({em}, {ed}) ({_merge_hint(c, m, d)})")
    return "merging is associative and commutative, so blocks can be combined in any order"


def check_4_2(merge) -> None:
    """Exercise 4.2: ``merge(m1, d1, m2, d2)`` combines two (max, sum) pairs."""
    check("4.2", "merge two (m, d) pairs", merge, _trial_4_2)


def _trial_4_3(stash_traffic) -> str:
    for M, N in ((1, 1), (3, 5), (1024, 65536)):
        got = call_attempt(stash_traffic, M, N)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise Wrong(f"return a pair (reads, writes), got {type(got).__name__}")
        # the stash variant: pass 1 reads x, writes exp(x - m_block) to out; pass 2 reads it, rescales, writes it
        (r, w), (wr, ww) = got, (2 * M * N, 2 * M * N)
        if (r, w) != (wr, ww):
            hint = [
                h
                for bad, h in (
                    (r != wr, "reads: pass 1 reads x, and pass 2 reads back what pass 1 wrote"),
                    (w != ww, "writes: pass 1 writes the exponentials, and pass 2 writes the result over them"),
                )
                if bad
            ]
            raise Wrong(
                f"for M = {M}, N = {N} (MN = {M * N}) you gave (reads, writes) = ({r}, {w}); " + "; ".join(hint)
            )
    return "4MN in all: more than the online kernel's 3MN, so re-reading x beats stashing"


def check_4_3(stash_traffic) -> None:
    """Exercise 4.3: ``stash_traffic(M, N)`` returns (reads, writes) of the stash variant."""
    check("4.3", "traffic of a stash-and-rescale variant", stash_traffic, _trial_4_3)
