"""Self-checking exercises.

A checker prints exactly one deterministic line and never raises, whatever the learner did:

    Exercise 1.1 (softmax by hand): correct (max abs error 6.0e-08)
    Exercise 1.1 (softmax by hand): not yet: replace `raise NotImplementedError` with your code
    Exercise 1.1 (softmax by hand): wrong: on input [[1.0, 2.0]] expected [[0.2689, 0.7311]], got [[0.5, 0.5]]
    Exercise 1.1 (softmax by hand): wrong: your code raised ZeroDivisionError: division by zero

The exercise templates in the notebooks start as ``raise NotImplementedError`` (or return ``...``
/ ``None``), so an untouched notebook runs cleanly from top to bottom.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

CORRECT, NOT_YET, WRONG = "correct", "not yet", "wrong"


@dataclass(frozen=True)
class Verdict:
    exercise: str
    title: str
    status: str
    detail: str = ""

    @property
    def line(self) -> str:
        detail = " ".join(str(self.detail).split())  # always one line
        tail = f": {detail}" if detail else ""
        return f"Exercise {self.exercise} ({self.title}): {self.status}{tail}"

    def __str__(self) -> str:
        return self.line

    @property
    def ok(self) -> bool:
        return self.status == CORRECT


class Wrong(Exception):
    """Raised by a trial to say the learner's answer is wrong, with the reason."""


def fmt(t, digits: int = 4) -> str:
    """A short, device-free rendering of a tensor/number for a verdict line."""
    if isinstance(t, torch.Tensor):
        t = t.detach().cpu()
        if t.numel() > 8:
            return f"tensor of shape {tuple(t.shape)}"
        t = t.to(torch.float64).tolist() if t.is_floating_point() else t.tolist()

    def r(v):
        if isinstance(v, list):
            return [r(u) for u in v]
        if isinstance(v, float):
            return round(v, digits)
        return v

    return str(r(t))


def _unattempted(answer) -> bool:
    return answer is None or answer is Ellipsis or answer is NotImplemented


def check(exercise: str, title: str, attempt, trial: Callable[[object], str | None], *, show: bool = True) -> Verdict:
    """Run ``trial(attempt)`` and print one verdict line.

    ``attempt`` is the learner's function or value. ``trial`` raises ``Wrong`` (or returns
    nothing for correct, or a string to append to "correct"). ``NotImplementedError`` raised
    anywhere, or an attempt that is None/``...``, means "not yet"; any other exception is
    reported as wrong, with its type and message.
    """
    if _unattempted(attempt):
        v = Verdict(exercise, title, NOT_YET, "fill in your answer above, then run this cell again")
    else:
        try:
            extra = trial(attempt)
            v = Verdict(exercise, title, CORRECT, extra or "")
        except NotImplementedError:
            v = Verdict(exercise, title, NOT_YET, "replace `raise NotImplementedError` with your code")
        except Wrong as e:
            v = Verdict(exercise, title, WRONG, str(e))
        except Exception as e:  # the learner's own code failed: report it, never crash the notebook
            msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
            v = Verdict(exercise, title, WRONG, f"your code raised {type(e).__name__}" + (f": {msg}" if msg else ""))
    if show:
        print(v.line)
    return v


def expect_close(got, expected: torch.Tensor, *, inputs=None, atol: float = 1e-5, rtol: float = 1e-4, what: str = "") -> float:
    """Raise ``Wrong`` unless ``got`` is a tensor close to ``expected``; return the max abs error."""
    if _unattempted(got):
        raise NotImplementedError
    if not isinstance(got, torch.Tensor):
        raise Wrong(f"expected a torch.Tensor{what}, got {type(got).__name__}")
    if got.shape != expected.shape:
        raise Wrong(f"expected shape {tuple(expected.shape)}{what}, got {tuple(got.shape)}")
    g = got.detach().cpu().to(torch.float64)
    e = expected.detach().cpu().to(torch.float64)
    nan_g, nan_e = torch.isnan(g), torch.isnan(e)
    if not torch.equal(nan_g, nan_e):
        where = "on input " + fmt(inputs) + " " if inputs is not None else ""
        raise Wrong(f"{where}expected {fmt(expected)}, got {fmt(got)} (NaN in different places)")
    ok = ~nan_e
    if not ok.any():
        return 0.0
    diff = (g[ok] - e[ok]).abs()
    if not torch.isfinite(diff).all() or (diff > atol + rtol * e[ok].abs()).any():
        where = "on input " + fmt(inputs) + " " if inputs is not None else ""
        raise Wrong(f"{where}expected {fmt(expected)}, got {fmt(got)}")
    return float(diff.max())


def call_attempt(fn, *args):
    """Call the learner's function for a trial: ``...`` back means untouched (not yet), ``None``
    back means a missing ``return`` (wrong), and something that is not a function is wrong."""
    if not callable(fn):
        raise Wrong(f"expected a function, got {type(fn).__name__}")
    got = fn(*args)
    if got is Ellipsis:
        raise NotImplementedError
    if got is None:
        raise Wrong("your function returned None: is a `return` missing?")
    return got
