"""Lesson 02 · Numerical stability: where exp overflows and underflows, a printed trace of the
max-shift trick, the float16 sweep figure and why 16-bit inputs are computed in float32 (the exercise
checkers: ``helpers.lesson02_exercises``)."""

from __future__ import annotations

import math

import torch

from . import plots
from .checks import check_tensor
from .reference import naive_softmax, stable_softmax

#: Integer types with the same width as each floating type (to walk floats by their bit patterns).
_BITS = {
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
    torch.float32: torch.int32,
    torch.float64: torch.int64,
}


def _from_bits(bits: int, dtype) -> torch.Tensor:
    return torch.tensor([bits], dtype=_BITS[dtype]).view(dtype)


def _to_bits(value: float, dtype) -> int:
    return int(torch.tensor([value], dtype=dtype).view(_BITS[dtype])[0])


def _bisect(dtype, pred) -> tuple[float, float]:
    """Walk the positive floats of ``dtype`` by bit pattern (which orders them by value): (largest a
    with pred(a) True, smallest a with pred(a) False), for pred monotone, True at 1, False at the max."""
    if dtype not in _BITS:
        raise ValueError(f"dtype must be one of {[str(d) for d in _BITS]}, got {dtype!r}.")
    lo, hi = _to_bits(1.0, dtype), _to_bits(torch.finfo(dtype).max, dtype)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if pred(_from_bits(mid, dtype)):
            lo = mid
        else:
            hi = mid
    return float(_from_bits(lo, dtype)), float(_from_bits(hi, dtype))


def exp_overflow_threshold(dtype=torch.float16) -> tuple[float, float]:
    """(largest x of ``dtype`` whose ``torch.exp(x)`` is finite, smallest x whose exp is inf),
    found by bisection over every positive value of the type. Close to ln(finfo(dtype).max)."""
    return _bisect(dtype, lambda a: bool(torch.isfinite(torch.exp(a))))


def exp_underflow_threshold(dtype=torch.float16) -> tuple[float, float]:
    """(most negative x of ``dtype`` whose ``torch.exp(x)`` is still above 0, the next value
    below it, whose exp rounds to 0)."""
    keep, lost = _bisect(dtype, lambda a: bool(torch.exp(-a) > 0))
    return -keep, -lost


def softmax_in_dtype(x: torch.Tensor) -> torch.Tensor:
    """The max-shift softmax over the last dimension computed entirely in ``x``'s dtype: the shift
    alone keeps float16 from overflowing; what 16-bit arithmetic costs in precision."""
    check_tensor(x)
    numerator = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return numerator / numerator.sum(dim=-1, keepdim=True)


# The trick, step by step


def softmax_trace(x: torch.Tensor, stable: bool = True) -> list[tuple[str, str, torch.Tensor]]:
    """The intermediate values of softmax over a 1-D ``x``, in x's dtype: a list of
    (step, expression, value). ``stable=False`` skips the max and the shift."""
    check_tensor(x)
    if x.dim() != 1:
        raise ValueError(f"softmax_trace takes a 1-D tensor, got shape {tuple(x.shape)}: pass one row, e.g. x[0].")
    steps, z = [("input", "x", x)], x
    if stable:
        z = x - x.max()
        steps += [("max", "m = max(x)", x.max()), ("shift", "z = x - m", z)]
    e = torch.exp(z)
    return steps + [
        ("exp", f"e = exp({'z' if stable else 'x'})", e),
        ("sum", "s = sum(e)", e.sum()),
        ("normalize", "y = e / s", e / e.sum()),
    ]


# The float16 sweep


def float16_row_sweep(lo: float = 8.0, hi: float = 12.0) -> dict:
    """Every float16 value x in [lo, hi], exp(x) in float16 and the last entry of the float16 softmax
    of [x-2, x-1, x], naive and stable (float lists, inf/NaN kept)."""
    a, b = _to_bits(lo, torch.float16), _to_bits(hi, torch.float16)
    xs = torch.arange(a, b + 1, dtype=torch.int16).view(torch.float16)
    rows = torch.stack([xs - 2, xs - 1, xs], dim=1)
    return {
        "x": xs.float().tolist(),
        "exp": torch.exp(xs).float().tolist(),
        "naive": naive_softmax(rows)[:, 2].float().tolist(),
        "stable": softmax_in_dtype(rows)[:, 2].float().tolist(),
    }


def plot_float16_overflow():
    """Left: exp(x) in float16 against the exact value, and where it overflows. Right: the largest
    probability of softmax([x-2, x-1, x]) in float16, naive and stable, with the three regimes. inf and
    NaN are not values: each is marked on a band of its own above its panel, off the value axis."""
    import matplotlib.pyplot as plt
    import numpy as np

    d = float16_row_sweep(8.0, 12.0)
    x, e16, naive, stable = (np.array(d[k]) for k in ("x", "exp", "naive", "stable"))
    ln_max = math.log(torch.finfo(torch.float16).max)
    # The sum exp(x-2) + exp(x-1) + exp(x) = exp(x) (1 + 1/e + 1/e^2) overflows first.
    sum_over = ln_max - math.log(1 + math.exp(-1) + math.exp(-2))

    fig, axes = plt.subplots(2, 2, figsize=(9.5, 4.2), sharex="col", height_ratios=[1, 5], constrained_layout=True)
    (band1, band2), (ax1, ax2) = axes

    def band(ax, where, label, title):
        """A strip above a panel that marks the x where the value is ``label`` (inf or NaN)."""
        ax.plot(x[where], np.zeros(where.sum()), "x", ms=3.5, color=plots.COLORS["naive"])
        ax.set_yticks([0], [label])
        ax.set_ylim(-1, 1)
        ax.tick_params(axis="y", length=0, labelcolor=plots.COLORS["naive"])
        ax.tick_params(axis="x", labelbottom=False)
        ax.grid(False)
        ax.set_title(title)

    fin = np.isfinite(e16)
    band(band1, ~fin, "inf", "exp(x) in float16 overflows past x = 11.09")
    band1.text(8.05, 0, "exp(x) in float16 is inf here:", fontsize=8, va="center")
    ax1.plot(x, np.exp(x), color="#999999", lw=3, label="exact exp(x)")
    ax1.plot(x[fin], e16[fin], ".", ms=2.5, color=plots.COLORS["fused"], label="exp(x) in float16")
    ax1.axhline(torch.finfo(torch.float16).max, color="#444444", ls=":", lw=1)
    ax1.text(8.05, 65504 * 1.15, "largest float16: 65504", fontsize=8)
    for ax in (band1, ax1):
        ax.axvline(ln_max, color=plots.COLORS["naive"], ls="--", lw=1)
    ax1.text(ln_max - 0.05, 3e3, f"ln 65504\n= {ln_max:.2f}", fontsize=8, ha="right")
    ax1.set_yscale("log")
    ax1.set_ylim(2e3, 3e5)
    ax1.set_xlabel("x")
    ax1.legend(loc="upper left", fontsize=8, frameon=False)

    ok = np.isfinite(naive)
    for ax in (band2, ax2):
        ax.axvspan(8.0, sum_over, color="#2ca02c", alpha=0.08)
        ax.axvspan(sum_over, ln_max, color="#ff7f0e", alpha=0.12)
        ax.axvspan(ln_max, 12.0, color="#d62728", alpha=0.12)
    band(band2, ~ok, "NaN", "softmax([x-2, x-1, x]) in float16")
    band2.text(8.05, 0, "naive softmax is NaN here:", fontsize=8, va="center")
    ax2.plot(x, stable, color=plots.COLORS["online"], lw=3, label="stable (max shift)")
    ax2.plot(x[ok], naive[ok], ".", ms=3, color=plots.COLORS["naive"], label="naive")
    ax2.text((8.0 + sum_over) / 2, 0.45, "correct", ha="center", fontsize=8)
    ax2.text((sum_over + ln_max) / 2, 0.45, "sum\n= inf:\nall 0", ha="center", fontsize=8)
    ax2.text((ln_max + 12.0) / 2, 0.45, "exp = inf:\nNaN, on\nthe band above", ha="center", fontsize=8)
    ax2.set_xlim(8.0, 12.0)
    ax2.set_ylim(-0.05, 0.85)
    ax2.set_xlabel("x")
    ax2.set_ylabel("largest probability")
    ax2.legend(loc="upper left", fontsize=8, frameon=False, ncols=2)
    return fig


# 16-bit inputs: why softmax computes them in float32


def bfloat16_errors(x: torch.Tensor) -> dict:
    """Largest relative error against the float64 softmax of a bfloat16 ``x``: computed in bfloat16,
    by ``helpers.stable_softmax`` (float32 inside) and by torch.softmax; and, at the element where
    bfloat16 arithmetic is worst, x - max exactly and as bfloat16 holds it (and its probability)."""
    if x.dtype != torch.bfloat16:
        raise ValueError(f"bfloat16_errors takes a bfloat16 tensor, got {x.dtype}.")
    ref = torch.softmax(x.double(), dim=-1)

    def rel(y):
        return ((y.double() - ref).abs() / ref).flatten()

    r16 = rel(softmax_in_dtype(x))
    i = int(r16.argmax())
    m = x.max(dim=-1, keepdim=True).values
    return {
        "bfloat16": float(r16.max()),
        "float32": float(rel(stable_softmax(x)).max()),
        "torch.softmax": float(rel(torch.softmax(x, dim=-1)).max()),
        "shift_exact": float((x.double() - m.double()).flatten()[i]),
        "shift_bf16": float((x - m).flatten()[i]),
        "p": float(ref.flatten()[i]),
    }


def bfloat16_running_sum(n: int = 2048, denom: int = 512) -> tuple[float, float]:
    """(a running sum of ``n`` terms 1/``denom`` kept in bfloat16, ``torch.sum`` of the same terms): the
    running sum stalls once a term is 1/256 of it; ``torch.sum`` accumulates in float32."""
    terms = torch.full((n,), 1 / denom, dtype=torch.bfloat16)
    s = torch.zeros((), dtype=torch.bfloat16)
    for t in terms:
        s = s + t
    return float(s), float(terms.sum())


#: Figures of this lesson, by the name ``helpers.plots.save`` writes them under.
FIGURES = {"02_float16_overflow": plot_float16_overflow}
