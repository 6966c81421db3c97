"""Lesson 02 · the exercise checkers: 2.1 a stable logsumexp, 2.2 softmax with a temperature, 2.3 a
log_softmax that stays finite, 2.4 a masked softmax (-inf arithmetic). Each prints one line (correct / not
yet / wrong) and never raises. Plain PyTorch, no Triton (lessons 01-02 run without it); what the lesson
shows is in ``helpers.lesson02``."""

from __future__ import annotations

import torch

from .exercises import Wrong, call_attempt, check, expect_close, fmt, fmt_pair, same_values


def _dtype_name(dt) -> str:
    return str(dt).replace("torch.", "")


def _tol(x: torch.Tensor) -> dict:
    return dict(atol=2e-2, rtol=2e-3) if x.dtype in (torch.float16, torch.bfloat16) else dict(atol=1e-5, rtol=1e-5)


def _nonfinite_hint(got, ref, x, what: str) -> None:
    if isinstance(got, torch.Tensor) and got.shape == ref.shape:
        if (torch.isfinite(ref) & ~torch.isfinite(got.detach().cpu().double())).any():
            raise Wrong(f"on input {fmt(x)} you returned {fmt(got)}: {what}")


def _passes(fn, args, ref, tol: dict) -> bool:
    try:
        with torch.no_grad():
            expect_close(fn(*args), ref, **tol)
        return True
    except Exception:
        return False


def _diagnose(got, args, mistakes, earlier, reference) -> str | None:
    """The hint of the mistake (name, function, hint) that explains ``got``: one that passes every
    earlier case (the argument tuples ``earlier``, as the learner's function did) and gives ``got`` on
    this one (``args``)."""
    for _name, fn, hint in mistakes:
        if not all(_passes(fn, a, reference(*a), _tol(a[0])) for a in earlier):
            continue
        try:
            with torch.no_grad():
                cand = fn(*args)
        except Exception:
            continue
        if same_values(got, cand, **_tol(args[0])):
            return hint
    return None


def _shift_mistakes(build, v: str, fix: str, sep: str, zero: str) -> list:
    """The wrong shifts that every exercise shifting by the row maximum must catch: (name, function,
    hint), with ``build(shift)`` the exercise's function shifting by ``shift(v)``."""
    return [
        (
            "shift by min",
            build(lambda z: z.min(dim=-1, keepdim=True).values),
            f"shifting by the row minimum makes every {v} - min >= 0, and exp overflows on a row with a wide range"
            f"{sep}{fix}",
        ),
        (
            "shift by first",
            build(lambda z: z[..., :1]),
            f"shifting by the row's first element overflows when a later element is much larger{sep}{fix}",
        ),
        (
            "shift by mean",
            build(lambda z: z.mean(dim=-1, keepdim=True)),
            f"shifting by the row mean overflows when the row's largest value is far above its mean{sep}{fix}",
        ),
        (
            "one max for the whole tensor",
            build(lambda z: z.max().reshape([1] * z.dim())),
            f"one maximum for the whole tensor makes every exp of a row far below it underflow to 0 ({zero}): "
            f"take the maximum of each row, {v}.max(dim=-1, keepdim=True)",
        ),
    ]


def _row_max(z):
    return z.max(dim=-1, keepdim=True).values


def _no_shift(z):
    return torch.zeros_like(z[..., :1])


def _trial_shifting(attempt, cases, reference, mistakes, describe, compare) -> dict:
    """Exercises 2.1 to 2.3: ``attempt`` on every case (a tuple of arguments, the input first) against
    ``reference``, by ``compare(got, ref, args)`` (raises ``Wrong``, returns the error); a wrong answer
    that one of ``mistakes`` explains gets that mistake's hint. Returns the worst error per dtype."""
    worst, earlier = {}, []
    for args in cases:
        x = args[0]
        before = x.clone()
        try:
            got = call_attempt(attempt, *args)
        except IndexError as e:
            if x.dim() == 1 and "dimension out of range" in str(e).lower():
                raise Wrong(
                    f"on input {describe(*args)} your code raised IndexError ({e}): a 1-D row has no dim=1; "
                    "the last dimension is dim=-1, whatever the number of dimensions"
                ) from None
            raise
        if not torch.equal(x, before):
            raise Wrong(f"your function changed its input {fmt(before)}: compute into a new tensor instead")
        try:
            err = compare(got, reference(*args), args)
        except Wrong:
            hint = _diagnose(got, args, mistakes, earlier, reference)
            if hint is None:
                raise
            raise Wrong(f"on input {describe(*args)} you returned {fmt(got)}: {hint}") from None
        earlier.append(args)
        worst[_dtype_name(x.dtype)] = max(worst.get(_dtype_name(x.dtype), 0.0), err)
    return worst


def _lse_with(shift, add_back: bool = True):
    """A logsumexp that shifts each row by ``shift(x)`` (a column), computed in ``x``'s dtype."""

    def lse(x):
        m = shift(x)
        s = torch.log(torch.exp(x - m).sum(dim=-1, keepdim=True))
        return (m + s if add_back else s).squeeze(-1)

    return lse


_ROW_MAX_FIX = "shift each row by its maximum m, so every exp(x - m) <= 1, and add m back: m + log(sum(exp(x - m)))"

#: Plausible wrong logsumexps (name, function, the hint that names the mistake). The checker's rows
#: make each of them overflow or underflow (or come out off by the shift) in float32 and float16.
LSE_MISTAKES = [
    (
        "no shift",
        _lse_with(_no_shift),
        "without a shift exp(x) overflows for large x (exp(1000) = inf) and underflows to 0 for very negative x: "
        + _ROW_MAX_FIX,
    ),
    (
        "shift not added back",
        _lse_with(_row_max, add_back=False),
        "you subtracted the row maximum m but did not add it back: logsumexp(x) = m + log(sum(exp(x - m)))",
    ),
    (
        "shift by max |x|",
        _lse_with(lambda x: x.abs().max(dim=-1, keepdim=True).values),
        "the largest |x| is not the maximum: on a row of negative numbers x - max|x| is far below 0 and every "
        "exp underflows to 0, so log gives -inf; " + _ROW_MAX_FIX,
    ),
    *_shift_mistakes(_lse_with, "x", _ROW_MAX_FIX, "; ", "log 0 = -inf"),
]


def _lse_cases():
    """Exercise 2.1's inputs, in this order: each mistake of ``LSE_MISTAKES`` first fails on a row of
    its own (float32), then wide rows that overflow every shift but the maximum even in float64,
    then float16 rows that overflow a wrong shift in float16."""
    torch.manual_seed(2)
    h = torch.float16
    return [
        torch.tensor([1.0, 2.0, 3.0]),  # the shift not added back is off by 3
        torch.tensor([1000.0, 1001.0, 1002.0]),  # no shift: exp overflows
        torch.tensor([-1000.0, -1001.0, -1002.0]),  # shift by max |x|: every exp underflows
        torch.tensor([100.0, 100.0, 100.0, 0.0]),  # shift by the min (100 above it)
        torch.tensor([50.0, 150.0, 140.0, 140.0]),  # shift by the first element (100 below the max)
        torch.tensor([200.0, 0.0]),  # shift by the mean (100 below the max)
        torch.tensor([[1000.0, 1001.0, 1002.0], [-1000.0, -1001.0, -1002.0]]),  # one max for all rows
        torch.randn(4, 7) * 10,
        torch.tensor([[2000.0, 0.0], [0.0, 2000.0]]),  # every shift but the max overflows, even in float64
        torch.tensor([10.0, 11.0, 12.0], dtype=h),  # float16: exp(12) > 65504
        torch.tensor([12.0, 12.0, 12.0, 0.0], dtype=h),
        torch.tensor([6.0, 18.0, 17.0, 17.0], dtype=h),
        torch.tensor([24.0, 0.0], dtype=h),
    ]


def _in_dtype(x) -> str:
    return f"{fmt(x)} ({_dtype_name(x.dtype)})"


def _compare_2_1(got, ref, args) -> float:
    x = args[0]
    _nonfinite_hint(
        got, ref, x, "inf or NaN where the answer is finite: did exp overflow, or underflow to 0? " + _ROW_MAX_FIX
    )
    return expect_close(
        got, ref, inputs=x, what=" (one value per row: sum with keepdim=False, or .squeeze(-1))", **_tol(x)
    )


def check_2_1(logsumexp) -> None:
    """Exercise 2.1: a ``logsumexp(x)`` over the last dim that never overflows."""

    def trial(fn):
        worst = _trial_shifting(
            fn,
            [(x,) for x in _lse_cases()],
            lambda x: torch.logsumexp(x.double(), dim=-1),
            LSE_MISTAKES,
            _in_dtype,
            _compare_2_1,
        )
        return "max abs error " + ", ".join(f"{e:.1e} ({name})" for name, e in worst.items())

    check("2.1", "a stable logsumexp", logsumexp, trial)


def _softmax_t_with(shift, scale=lambda x, T: x / T):
    """softmax(z) with z = scale(x, T), each row of z shifted by ``shift(z)``, in x's dtype."""

    def softmax_t(x, T):
        z = scale(x, T)
        e = torch.exp(z - shift(z))
        return e / e.sum(dim=-1, keepdim=True)

    return softmax_t


_TEMP_FIX = "compute z = x / T, then subtract each row's maximum of z before exp"

#: The hint for a softmax taken over the columns (dim=0) where the exercise asks for the rows.
_OVER_COLUMNS = (
    "you took the max and the sum over dim=0, down each column: softmax over the rows runs along the "
    "last dimension, dim=-1 (dim=1 on a matrix); a softmax over the columns is a different function"
)

#: Plausible wrong answers of exercise 2.2 (name, function, the hint that names the mistake).
TEMPERATURE_MISTAKES = [
    (
        "x * T",
        _softmax_t_with(_row_max, lambda x, T: x * T),
        "the temperature divides the scores: softmax(x / T), not softmax(x * T)",
    ),
    (
        "softmax(x) / T",
        lambda x, T: torch.softmax(x, dim=-1) / T,
        "T divides the scores before exp (softmax(x / T)), not the probabilities after it",
    ),
    (
        "no shift",
        _softmax_t_with(_no_shift),
        "exp(x / T) overflows when T is small or x large (inf / inf = NaN): " + _TEMP_FIX,
    ),
    *_shift_mistakes(_softmax_t_with, "z", _TEMP_FIX, ": ", "0 / 0 = NaN"),
    ("over the columns", lambda x, T: torch.softmax(x / T, dim=0), _OVER_COLUMNS),
]


def _temperature_cases():
    """(x, T) for exercise 2.2, in this order: each mistake of ``TEMPERATURE_MISTAKES`` first fails on a
    case of its own (z = x / T has a row 100 above its min, its first element, its mean, ...)."""
    torch.manual_seed(3)
    return [
        (torch.tensor([1.0, 2.0, 3.0]), 1.0),
        (torch.tensor([1.0, 2.0, 3.0]), 0.5),  # x * T, softmax(x) / T
        (torch.tensor([1.0, 2.0, 3.0]), 10.0),
        (torch.tensor([500.0, 400.0]), 2.0),  # no shift: exp(250)
        (torch.tensor([1.0, 1.0, 1.0, 0.0]), 0.01),  # shift by the min
        (torch.tensor([0.5, 1.5, 1.4, 1.4]), 0.01),  # shift by the first element
        (torch.tensor([2.0, 0.0]), 0.01),  # shift by the mean
        (torch.tensor([[500.0, 400.0], [-3.0, 3.0]]), 2.0),  # one max for all rows
        (torch.tensor([0.1, 0.2, 0.3]), 0.001),
        (torch.randn(3, 5), 0.01),
    ]


def _with_t(x, T) -> str:
    return f"{fmt(x)} with T = {T}"


def _compare_2_2(got, ref, args) -> float:
    if isinstance(got, torch.Tensor) and torch.isnan(got).any():
        raise Wrong(f"on input {_with_t(*args)} you returned {fmt(got)}: NaN (did exp overflow?)")
    try:
        return expect_close(got, ref, atol=1e-5, rtol=1e-4)
    except Wrong as e:
        raise Wrong(f"on input {_with_t(*args)}: {e}") from None


def check_2_2(softmax_with_temperature) -> None:
    """Exercise 2.2: ``softmax_with_temperature(x, T)`` = softmax(x / T), stable for small T."""

    def trial(fn):
        worst = _trial_shifting(
            fn,
            _temperature_cases(),
            lambda x, T: torch.softmax(x.double() / T, dim=-1),
            TEMPERATURE_MISTAKES,
            _with_t,
            _compare_2_2,
        )
        return f"max abs error {max(worst.values()):.1e}"

    check("2.2", "softmax with a temperature", softmax_with_temperature, trial)


def _log_softmax_with(shift, subtract_shift: bool = True):
    """z - log(sum(exp(z))) with z = x - shift(x) (or x, when the shift is not subtracted), in x's dtype."""

    def log_softmax(x):
        m = shift(x)
        s = torch.log(torch.exp(x - m).sum(dim=-1, keepdim=True))
        return (x - m - s) if subtract_shift else (x - s)

    return log_softmax


_LOG_FIX = "compute z = x - max(x) per row, then z - log(sum(exp(z)))"
_LOG_OF_SOFTMAX = (
    "log(softmax(x)) takes the log of probabilities that underflow to 0 (or to too few digits): " + _LOG_FIX
)

#: Plausible wrong answers of exercise 2.3 (name, function, the hint that names the mistake).
LOG_SOFTMAX_MISTAKES = [
    (
        "shift left in",
        _log_softmax_with(_row_max, subtract_shift=False),
        "x - log(sum(exp(x - m))) is off by the row maximum m: subtract it from x too, (x - m) - log(sum(exp(x - m)))",
    ),
    (
        "no shift",
        _log_softmax_with(_no_shift),
        "without a shift exp(x) overflows for large x (exp(1000) = inf): " + _LOG_FIX,
    ),
    (
        "shift by max |x|",
        _log_softmax_with(lambda x: x.abs().max(dim=-1, keepdim=True).values),
        "the largest |x| is not the maximum: on a row of negative numbers every exp(x - max|x|) underflows to 0: "
        + _LOG_FIX,
    ),
    ("log of softmax", lambda x: torch.log(torch.softmax(x.float(), dim=-1)).to(x.dtype), _LOG_OF_SOFTMAX),
    ("log of softmax, in the input's dtype", lambda x: torch.log(torch.softmax(x, dim=-1)), _LOG_OF_SOFTMAX),
    *_shift_mistakes(_log_softmax_with, "x", _LOG_FIX, ": ", "log 0 = -inf"),
    ("over the columns", lambda x: torch.log_softmax(x, dim=0), _OVER_COLUMNS),
]


def _log_softmax_cases():
    """Exercise 2.3's inputs, in this order: each mistake of ``LOG_SOFTMAX_MISTAKES`` first fails on a
    row of its own."""
    torch.manual_seed(4)
    return [
        torch.tensor([1.0, 2.0, 3.0]),  # the shift left in: off by 3
        torch.tensor([1000.0, 1001.0, 1002.0]),  # no shift
        torch.tensor([-1000.0, -1001.0, -1002.0]),  # shift by max |x|
        torch.tensor([100.0, 100.0, 100.0, 0.0]),  # shift by the min; log(softmax): exp(-100) is subnormal
        torch.tensor([50.0, 150.0, 140.0, 140.0]),  # shift by the first element
        torch.tensor([200.0, 0.0]),  # shift by the mean
        torch.tensor([[1000.0, 1001.0, 1002.0], [-1000.0, -1001.0, -1002.0]]),  # one max for all rows
        torch.tensor([0.0, -200.0]),  # log(softmax): exp(-200) underflows to 0
        torch.randn(3, 6) * 5,
        torch.tensor([0.0, -20.0], dtype=torch.float16),  # log(softmax) in float16: exp(-20) underflows
    ]


def _compare_2_3(got, ref, args) -> float:
    x = args[0]
    _nonfinite_hint(
        got, ref, x, "-inf or NaN where the answer is finite (a log of a probability that underflowed to 0?)"
    )
    return expect_close(got, ref, inputs=x, **_tol(x))


def check_2_3(log_softmax) -> None:
    """Exercise 2.3: a ``log_softmax(x)`` that stays finite where log(softmax(x)) is -inf."""

    def trial(fn):
        worst = _trial_shifting(
            fn,
            [(x,) for x in _log_softmax_cases()],
            lambda x: torch.log_softmax(x.double(), dim=-1),
            LOG_SOFTMAX_MISTAKES,
            _in_dtype,
            _compare_2_3,
        )
        return f"max abs error {max(worst.values()):.1e}"

    check("2.3", "a log_softmax that stays finite", log_softmax, trial)


# Exercise 2.4: a masked softmax


def masked_softmax_answer(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """What exercise 2.4 asks for, in float64: softmax over the last dimension of ``x`` with the
    positions where ``mask`` is False set to -inf, and a row with every position masked all zeros."""
    y = torch.softmax(x.detach().cpu().double().masked_fill(~mask.cpu(), float("-inf")), dim=-1)
    return y.masked_fill(~mask.cpu().any(dim=-1, keepdim=True), 0.0)


def _masked_cases():
    """(x, mask) pairs for exercise 2.4: 1-D, 2-D, 3-D, large values (the max shift), one
    position left, a fully masked row, float16."""
    g = torch.Generator().manual_seed(24)
    T, F = True, False
    x2 = torch.randn(3, 6, generator=g) * 3
    m2 = torch.rand(3, 6, generator=g) > 0.4
    m2[:, 0] = True  # at least one position per row
    x3 = torch.randn(2, 3, 5, generator=g)
    m3 = torch.rand(2, 3, 5, generator=g) > 0.3
    m3[..., 1] = True
    m3[1, 2] = False  # a fully masked row
    return [
        (torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([T, F, T, T])),
        (x2, m2),
        (torch.tensor([[1000.0, 1001.0, 1002.0, 1003.0]]), torch.tensor([[T, T, F, T]])),
        (torch.tensor([[0.5, -1.0, 2.0], [3.0, 1.0, -2.0]]), torch.tensor([[F, T, F], [F, F, F]])),
        (x3, m3),
        (torch.tensor([[10.0, 11.0, 12.0, 13.0]], dtype=torch.float16), torch.tensor([[T, T, T, F]])),
        # the largest score is masked out: a maximum taken before masking makes every exp underflow
        (torch.tensor([[0.0, 1.0, 500.0], [2.0, -300.0, 1.0]]), torch.tensor([[T, T, F], [F, T, T]])),
    ]


def _masked_hint(got: torch.Tensor, x, mask, want: torch.Tensor) -> str:
    """Why a wrong masked softmax is wrong, when the pattern says so."""
    g = got.detach().cpu().double()
    empty = ~mask.any(dim=-1)
    if empty.any():
        rows = g[empty]
        if torch.isnan(rows).any():
            return (
                "a fully masked row came out NaN: its max is -inf and exp(-inf - (-inf)) = exp(NaN); "
                "this exercise wants zeros there"
            )
        n = mask.shape[-1]
        if torch.allclose(rows, torch.full_like(rows, 1.0 / n), atol=1e-3):
            return (
                "a fully masked row came out uniform (1/N everywhere): a large negative number such as -1e9 "
                "is still a number, so an all-masked row is a row of equal scores; mask with float('-inf')"
            )
    live = ~empty
    dead = live & (torch.isnan(g).any(dim=-1) | (g.abs() <= 1e-6).all(dim=-1))
    if dead.any():
        xd = x.detach().cpu().double()
        top_all = xd.max(dim=-1).values
        top_live = xd.masked_fill(~mask.cpu(), float("-inf")).max(dim=-1).values
        if ((top_all - top_live > 80) & dead).any():
            return (
                "a row with unmasked positions came out NaN or all zeros: its largest score is masked out, so a "
                "maximum taken before masking puts every unmasked exp(x - max) at 0; take the maximum after "
                "masking, over the unmasked scores only"
            )
        return (
            "a row with unmasked positions came out NaN or all zeros: did exp overflow? Subtract the row's "
            "maximum (over the unmasked scores) before exp"
        )
    if (g[~mask].abs() > 1e-6).any() and not (g[mask].abs() > 1e-6).any():
        return "probability where the mask is False and none where it is True: is the mask inverted?"
    sums = g.sum(dim=-1)
    if ((sums - 1).abs() > 1e-2)[mask.any(dim=-1)].any() and (g[~mask].abs() <= 1e-6).all():
        return (
            "the rows do not sum to 1: zeroing the masked positions after the softmax leaves their share "
            "missing; mask the scores before it"
        )
    if (g[~mask].abs() > 1e-6).any():
        return "the masked positions (mask False) must get probability 0"
    return ""


def _trial_2_4(masked_softmax) -> str:
    worst = 0.0
    for x, mask in _masked_cases():
        xb, mb = x.clone(), mask.clone()
        got = call_attempt(masked_softmax, x, mask)
        if not torch.equal(x, xb):
            raise Wrong(
                f"your function changed its input {fmt(xb)}: mask a copy (x.masked_fill, not x.masked_fill_) instead"
            )
        if not torch.equal(mask, mb):
            raise Wrong("your function changed the mask: leave it as given")
        want = masked_softmax_answer(x, mask)
        if isinstance(got, torch.Tensor) and got.shape == want.shape:
            if got.dtype != x.dtype:
                raise Wrong(f"return the input's dtype ({_dtype_name(x.dtype)}), got {_dtype_name(got.dtype)}")
            try:
                err = expect_close(got, want, **_tol(x))
            except Wrong:
                hint = _masked_hint(got, x, mask, want)
                said_want, said_got = fmt_pair(want, got)
                raise Wrong(
                    f"on x = {fmt(x)} with mask = {fmt(mask)} expected {said_want}, got {said_got}"
                    + (f": {hint}" if hint else "")
                ) from None
            worst = max(worst, err)
        else:
            expect_close(got, want, inputs=x)  # the type or shape message
    return f"max abs error {worst:.1e}, a fully masked row gives zeros"


def check_2_4(masked_softmax) -> None:
    """Exercise 2.4: ``masked_softmax(x, mask)``: softmax over the last dim with the positions where
    ``mask`` is False at -inf, and zeros for a fully masked row."""
    check("2.4", "a masked softmax", masked_softmax, _trial_2_4)
