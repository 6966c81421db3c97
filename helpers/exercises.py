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


# --------------------------------------------------------------------------------------------
# Running a learner's kernel safely
# --------------------------------------------------------------------------------------------
#
# A kernel that forgets a mask reads or writes past its tensors. On the CPU, Triton's interpreter
# would touch that memory for real: a few elements past the end corrupt a neighbour, far past it
# the Python process dies with the learner's whole notebook. So the checkers launch learner kernels
# with ``run_learner_kernel``:
# - every buffer sits inside a larger allocation filled with a sentinel (guard regions), so a write
#   just past the end lands in the guard and is seen;
# - under the interpreter, every load and store is first checked against the memory of the tensors
#   the kernel was given: an address outside them stops the kernel with ``OutOfBounds`` before it
#   touches anything.
# On a GPU the kernel is compiled, so only the guard regions apply: a write far outside any buffer
# can still end the process there (restart the kernel; the notebook's text is kept).

import contextlib  # noqa: E402

import numpy as np  # noqa: E402

GUARD = 1024  # elements of guard region on each side of a buffer


class OutOfBounds(Exception):
    """A learner kernel addressed memory outside the tensors it was given."""


def guarded(shape, dtype=torch.float32, device=None, fill=float("nan"), guard: int = GUARD,
            row_stride: int | None = None) -> torch.Tensor:
    """A tensor of ``shape`` filled with ``fill``, inside an allocation with ``guard`` sentinel
    elements before and after it (``guards_intact`` checks them).

    With ``row_stride`` (2-D shapes only, at least the row length) the rows are ``row_stride``
    elements apart and the padding after every row, the last one included, holds NaN: a kernel that
    reads past a row's end reads NaN, which reaches its output, and one that writes there is seen.
    """
    from .mode import DEVICE

    shape = tuple(int(s) for s in shape)
    n = int(np.prod(shape)) if len(shape) else 1
    if row_stride is None:
        base = torch.empty(n + 2 * guard, dtype=dtype, device=device or DEVICE)
        base.fill_(_sentinel(dtype))
        t = base[guard:guard + n].view(shape)
        t.fill_(fill)
        return t
    if len(shape) != 2 or row_stride < shape[1]:
        raise ValueError(f"guarded: row_stride needs a 2-D shape and row_stride >= the row length, got shape {shape}, "
                         f"row_stride {row_stride}")
    span = shape[0] * row_stride
    base = torch.empty(span + 2 * guard, dtype=dtype, device=device or DEVICE)
    base.fill_(_sentinel(dtype))
    base[guard:guard + span].fill_(_pad(dtype))
    t = torch.as_strided(base, shape, (row_stride, 1), guard)
    t.fill_(fill)
    return t


def _sentinel(dtype) -> float:
    return -1234.5 if dtype.is_floating_point else -12345


def _pad(dtype) -> float:
    return float("nan") if dtype.is_floating_point else -23456


def _span(t: torch.Tensor) -> int:
    """Elements from a guarded tensor's first element to the end of its padding."""
    if t.dim() == 2 and t.stride(1) == 1 and t.stride(0) > t.shape[1]:
        return t.shape[0] * t.stride(0)
    return t.numel()


def guards_intact(t: torch.Tensor, guard: int = GUARD) -> bool:
    """True if nothing was written into the guard regions around a ``guarded`` tensor, nor into the
    padding between its rows (when it was made with a ``row_stride``)."""
    span = _span(t)
    base = torch.as_strided(t, (span + 2 * guard,), (1,), t.storage_offset() - guard)
    s = _sentinel(t.dtype)
    if not bool((base[:guard] == s).all() and (base[guard + span:] == s).all()):
        return False
    if span != t.numel():
        rows = base[guard:guard + span].view(t.shape[0], t.stride(0))[:, t.shape[1]:]
        pad_ok = torch.isnan(rows).all() if t.dtype.is_floating_point else (rows == _pad(t.dtype)).all()
        return bool(pad_ok)
    return True


@contextlib.contextmanager
def bounds_checked(*tensors):
    """Inside this block, interpreted kernels may only load from and store to the memory of
    ``tensors`` (their whole allocations, guard regions included): anything else raises
    ``OutOfBounds`` before the access happens. Does nothing on a GPU (kernels are compiled there)."""
    from .mode import INTERPRETER

    if not INTERPRETER:
        yield
        return
    from triton.runtime import interpreter as itp

    spans = []
    for t in tensors:
        st = t.untyped_storage()
        spans.append((st.data_ptr(), st.data_ptr() + st.nbytes()))

    def check(ptrs, mask, what):
        addr = np.asarray(ptrs.data, dtype=np.uint64)
        live = np.ones(addr.shape, dtype=bool) if mask is None else np.asarray(mask.data, dtype=bool)
        live = np.broadcast_to(live, addr.shape)
        if not live.any():
            return
        a = addr[live]
        size = max(1, ptrs.get_element_ty().primitive_bitwidth // 8)
        ok = np.zeros(a.shape, dtype=bool)
        for lo, hi in spans:
            ok |= (a >= lo) & (a + size <= hi)
        if not ok.all():
            raise OutOfBounds(f"{what} {int((~ok).sum())} element(s) outside the tensors the kernel was given")

    B = itp.InterpreterBuilder
    saved = {name: getattr(B, name) for name in ("create_masked_load", "create_masked_store", "create_atomic_rmw",
                                                 "create_atomic_cas")}

    def masked_load(self, ptrs, mask, other, cache_policy, is_volatile):
        check(ptrs, mask, "a load reads")
        return saved["create_masked_load"](self, ptrs, mask, other, cache_policy, is_volatile)

    def masked_store(self, ptrs, value, mask, cache_policy):
        check(ptrs, mask, "a store writes")
        return saved["create_masked_store"](self, ptrs, value, mask, cache_policy)

    def atomic_rmw(self, op, ptr, val, mask, sem, scope):
        check(ptr, mask, "an atomic writes")
        return saved["create_atomic_rmw"](self, op, ptr, val, mask, sem, scope)

    def atomic_cas(self, ptr, cmp, val, sem, scope):
        check(ptr, None, "an atomic writes")
        return saved["create_atomic_cas"](self, ptr, cmp, val, sem, scope)

    B.create_masked_load, B.create_masked_store = masked_load, masked_store
    B.create_atomic_rmw, B.create_atomic_cas = atomic_rmw, atomic_cas
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(B, name, fn)


def _root_cause(e: BaseException) -> BaseException:
    seen = 0
    while seen < 8 and (e.__cause__ or e.__context__) is not None and not isinstance(e, OutOfBounds):
        e = e.__cause__ or e.__context__
        seen += 1
    return e


def run_learner_kernel(kernel, grid, *args, outputs=(), **kwargs) -> None:
    """Launch a learner's kernel for a checker: ``kernel[grid](*args, **kwargs)`` with every tensor
    argument bounds-checked (under the interpreter), then the guard regions of ``outputs`` (tensors
    made by ``guarded``) checked. Raises ``Wrong`` with a hint for an out-of-bounds access, and
    ``NotImplementedError`` for an untouched template; any other error of the learner's code is
    re-raised for ``check`` to report."""
    tensors = [a for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)]
    try:
        with bounds_checked(*tensors):
            kernel[grid](*args, **kwargs)
    except Exception as e:
        root = _root_cause(e)
        if isinstance(root, OutOfBounds):
            raise Wrong(f"your kernel went out of bounds: {root}. Does every tl.load and tl.store have "
                        f"a mask for the lanes past the end of the row?") from None
        if isinstance(root, NotImplementedError) or "NotImplementedError" in str(e):
            raise NotImplementedError from e
        raise
    for i, t in enumerate(outputs):
        if not guards_intact(t):
            raise Wrong("your kernel wrote past the end of its output (into memory just outside it): "
                        "does tl.store have mask=... for the padding lanes?")


def is_untouched(kernel) -> bool:
    """True if a learner's kernel still holds its template's ``raise NotImplementedError``."""
    import re

    from .show import source_of

    try:
        src = source_of(kernel)
    except Exception:
        return False
    return re.search(r"^\s*raise\s+NotImplementedError\b", src, re.MULTILINE) is not None


def launch_learner_kernel(kernel, grid, *args, where: str, outputs=(), **kwargs) -> None:
    """``run_learner_kernel``, for a checker: an untouched template is "not yet", and any other error of
    the learner's code becomes ``Wrong("<where> your kernel raised ...")``."""
    try:
        run_learner_kernel(kernel, grid, *args, outputs=outputs, **kwargs)
    except (Wrong, NotImplementedError):
        raise
    except Exception as e:
        if is_untouched(kernel):
            raise NotImplementedError from e
        msg = str(e).strip().splitlines()[-1] if str(e).strip() else ""
        raise Wrong(f"{where} your kernel raised {type(e).__name__}: {msg[:160]}") from e
