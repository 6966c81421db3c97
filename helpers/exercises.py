"""Self-checking exercises.

A checker prints one deterministic line and never raises, whatever the learner did:

    Exercise 1.1 (softmax by hand): correct (max abs error 6.0e-08)
    Exercise 1.1 (softmax by hand): not yet: replace `raise NotImplementedError` with your code
    Exercise 1.1 (softmax by hand): wrong: on input [[1.0, 2.0]] expected [[0.2689, 0.7311]], got [[0.5, 0.5]]
    Exercise 1.1 (softmax by hand): wrong: your code raised ZeroDivisionError: division by zero

A correct Triton kernel checked under the interpreter gets a second line: the bytes it moved, counted
(``helpers.traffic``), against one pass over its tensors, and the GPU time they predict.

The exercise templates in the notebooks start as ``raise NotImplementedError`` (or return ``...``
/ ``None``), so an untouched notebook runs cleanly from top to bottom.
"""

from __future__ import annotations

import _thread
import math
import re
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

CORRECT, NOT_YET, WRONG = "correct", "not yet", "wrong"


@dataclass(frozen=True)
class Verdict:
    exercise: str
    title: str
    status: str
    detail: str = ""
    traffic: str = ""  # a correct kernel's traffic line (under the interpreter), printed after the verdict

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


def _round(v, digits):
    if isinstance(v, list):
        return [_round(u, digits) for u in v]
    if isinstance(v, float):
        return round(v, digits)
    return v


def _values(t: torch.Tensor) -> list:
    t = t.detach().cpu()
    return t.to(torch.float64).tolist() if t.is_floating_point() else t.tolist()


def fmt(t, digits: int = 4) -> str:
    """A short, device-free rendering of a tensor/number for a verdict line. A tensor of more than 8
    elements shows its shape and its first three and last values (``fmt_pair`` renders two values
    so that they differ wherever the values do)."""
    if isinstance(t, torch.Tensor):
        if t.numel() > 8:
            flat = _round(_values(t.reshape(-1)), digits)
            return f"tensor of shape {tuple(t.shape)}: [{', '.join(map(str, flat[:3]))}, ..., {flat[-1]}]"
        t = _values(t)
    return str(_round(t, digits))


def _index(flat_i: int, shape) -> tuple:
    idx = []
    for n in reversed(tuple(shape)):
        idx.append(flat_i % n)
        flat_i //= n
    return tuple(reversed(idx))


def fmt_pair(expected, got, digits: int = 4) -> tuple[str, str]:
    """Renderings of ``expected`` and ``got`` that differ wherever their values do: small values get
    more digits until they differ; tensors of more than 8 elements (same shape) are shown at their
    first differing element, with its index."""
    if (
        isinstance(expected, torch.Tensor)
        and isinstance(got, torch.Tensor)
        and expected.shape == got.shape
        and expected.numel() > 8
    ):
        e = expected.detach().cpu().reshape(-1).to(torch.float64)
        g = got.detach().cpu().reshape(-1).to(torch.float64)
        same = (e == g) | (torch.isnan(e) & torch.isnan(g))
        if bool(same.all()):
            return fmt(expected, digits), fmt(got, digits)
        i = int(torch.nonzero(~same)[0])
        idx = list(_index(i, expected.shape))
        ev, gv = _pair_numbers(float(e[i]), float(g[i]), digits)
        return f"{ev} at index {idx}", f"{gv}"
    a, b = fmt(expected, digits), fmt(got, digits)
    for d in range(digits + 1, 18):
        if a != b:
            break
        a, b = fmt(expected, d), fmt(got, d)
    return a, b


def _pair_numbers(a: float, b: float, digits: int) -> tuple[str, str]:
    for d in range(digits, 18):
        x, y = str(round(a, d)), str(round(b, d))
        if x != y:
            return x, y
    return repr(a), repr(b)


def same_values(got, want: torch.Tensor, atol: float, rtol: float) -> bool:
    """True if ``got`` is a tensor of ``want``'s shape with the same values: NaN and infinities in the
    same places, the finite values close (to recognize a known wrong answer by what it returns)."""
    return (
        isinstance(got, torch.Tensor)
        and got.shape == want.shape
        and torch.allclose(
            got.detach().cpu().double(), want.detach().cpu().double(), atol=atol, rtol=rtol, equal_nan=True
        )
    )


def _unattempted(answer) -> bool:
    return answer is None or answer is Ellipsis or answer is NotImplemented


def check(
    exercise: str,
    title: str,
    attempt,
    trial: Callable[[object], str | None],
    *,
    show: bool = True,
    compute_bound: bool = False,
) -> Verdict:
    """Run ``trial(attempt)`` and print one verdict line: "correct" (with what ``trial`` returns, and a second
    line, the traffic of the learner's kernel when the trial launched one: ``compute_bound`` for attention),
    "not yet" for an attempt that is None/``...`` or raises ``NotImplementedError``, "wrong" with the
    reason of a ``Wrong``, or with the type and message of any other exception."""
    TRAFFIC.clear()
    if _unattempted(attempt):
        v = Verdict(exercise, title, NOT_YET, "fill in your answer above, then run this cell again")
    else:
        try:
            extra = trial(attempt)
            from .traffic import learner_line

            v = Verdict(
                exercise,
                title,
                CORRECT,
                extra or "",
                learner_line(TRAFFIC, compute_bound=compute_bound) if TRAFFIC else "",
            )
        except NotImplementedError:
            v = Verdict(exercise, title, NOT_YET, "replace `raise NotImplementedError` with your code")
        except Wrong as e:
            v = Verdict(exercise, title, WRONG, str(e))
        except Exception as e:  # the learner's own code failed: report it, never crash the notebook
            msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
            v = Verdict(exercise, title, WRONG, f"your code raised {type(e).__name__}" + (f": {msg}" if msg else ""))
    if show:
        print(v.line)
        if v.traffic:
            print(v.traffic)
    return v


def expect_close(
    got, expected: torch.Tensor, *, inputs=None, atol: float = 1e-5, rtol: float = 1e-4, what: str = ""
) -> float:
    """Raise ``Wrong`` unless ``got`` is a tensor close to ``expected``; return the max abs error. The
    message never shows the same text for "expected" and "got" (``fmt_pair``); in a tensor of more than
    8 elements it names the first wrong element (or misplaced NaN) by its index."""
    if _unattempted(got):
        raise NotImplementedError
    if not isinstance(got, torch.Tensor):
        raise Wrong(f"expected a torch.Tensor{what}, got {type(got).__name__}")
    if got.shape != expected.shape:
        raise Wrong(f"expected shape {tuple(expected.shape)}{what}, got {tuple(got.shape)}")
    g = got.detach().cpu().to(torch.float64)
    e = expected.detach().cpu().to(torch.float64)
    where = "on input " + fmt(inputs) + " " if inputs is not None else ""
    nan_g, nan_e = torch.isnan(g), torch.isnan(e)
    if not torch.equal(nan_g, nan_e):
        if e.numel() <= 8:
            a, b = fmt_pair(expected, got)
            raise Wrong(f"{where}expected {a}{what}, got {b} (NaN in different places)")
        bad = (nan_g != nan_e).reshape(-1)
        i = int(torch.nonzero(bad)[0])
        idx, n = list(_index(i, e.shape)), int(bad.sum())
        more = f" ({n - 1} more element(s) like it)" if n > 1 else ""
        ev, gv = e.reshape(-1)[i].item(), g.reshape(-1)[i].item()
        if math.isnan(gv):
            raise Wrong(f"{where}got NaN{what} at index {idx}, where {_round(ev, 4)} was expected{more}")
        raise Wrong(f"{where}expected NaN{what} at index {idx}, got {_round(gv, 4)}{more}")
    ok = ~nan_e
    if not ok.any():
        return 0.0
    close = (g == e) | ((g - e).abs() <= atol + rtol * e.abs())
    bad = ok & ~close
    diff = torch.where(ok & (g != e), (g - e).abs(), torch.zeros_like(e))
    err = float(diff.max())
    if bool(bad.any()):
        if e.numel() <= 8:
            a, b = fmt_pair(expected, got)
            raise Wrong(f"{where}expected {a}{what}, got {b}")
        i = int(torch.nonzero(bad.reshape(-1))[0])
        ev, gv = _pair_numbers(e.reshape(-1)[i].item(), g.reshape(-1)[i].item(), 4)
        raise Wrong(
            f"{where}at index {list(_index(i, e.shape))} expected {ev}{what}, got {gv} "
            f"(max abs error {err:.2g}, {int(bad.sum())} of {e.numel()} elements wrong)"
        )
    return err


#: Seconds a learner's Python function may run in ``call_attempt`` before it is stopped.
FUNCTION_TIMEOUT = 60.0


class _Watchdog:
    """Interrupts the main thread (``_thread.interrupt_main``) once ``limit`` seconds have passed,
    then every second until the call returns; ``fired`` tells its interrupt from the user's own. Where
    SIGINT is ignored (a process started in the background by a script, or under ``nohup``), the interrupt
    would do nothing: Python's own handler is put in place for the call, and the old one back after it."""

    def __init__(self, limit: float):
        self.limit, self.fired, self.done, self.fires = limit, False, False, 0
        self._handler = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        if self._stop.wait(self.limit):
            return
        while True:
            with self._lock:
                if self.done:
                    return
                self.fired = True
                self.fires += 1
                _thread.interrupt_main()
            if self._stop.wait(1.0):
                return

    def __enter__(self):
        if signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, signal.SIG_DFL):
            self._handler = signal.signal(signal.SIGINT, signal.default_int_handler)
        self._thread.start()
        return self

    def __exit__(self, exc_type, *exc):
        with self._lock:
            self.done = True
            fires = self.fires
        self._stop.set()
        if fires > (1 if exc_type is KeyboardInterrupt else 0):
            # an interrupt may still be pending: let it arrive here, not in the caller
            try:
                for _ in range(50):
                    time.sleep(0.01)
            except KeyboardInterrupt:
                pass
        if self._handler is not None:
            signal.signal(signal.SIGINT, self._handler)
        return False


def _did_not_finish(limit: float, what: str) -> Wrong:
    return Wrong(
        f"{what} did not finish within {limit:g} s: does every loop end (a `while` whose condition "
        f"never changes, an index that never advances)?"
    )


def require_kernel(kernel, name: str) -> None:
    """Raise ``Wrong`` unless the learner's ``kernel`` is a Triton kernel (``@triton.jit``)."""
    if not hasattr(kernel, "__getitem__") or not hasattr(kernel, "fn"):
        raise Wrong(f"{name} must be a Triton kernel: decorate it with @triton.jit")


def call_attempt(fn, *args, timeout: float | None = None):
    """Call the learner's function for a trial: ``...`` back is "not yet", ``None`` back (a missing
    ``return``) or a non-function is wrong, and a call still running after ``timeout`` seconds (default
    ``FUNCTION_TIMEOUT``) is interrupted, as Ctrl-C would (in the main thread only), and wrong."""
    if not callable(fn):
        raise Wrong(f"expected a function, got {type(fn).__name__}")
    limit = FUNCTION_TIMEOUT if timeout is None else timeout
    if limit and threading.current_thread() is threading.main_thread():
        dog = _Watchdog(limit)
        try:
            with dog:
                got = fn(*args)
        except KeyboardInterrupt:
            if dog.fired:
                raise _did_not_finish(limit, "your function") from None
            raise
        if dog.fired:
            raise _did_not_finish(limit, "your function")
    else:
        got = fn(*args)
    if got is Ellipsis:
        raise NotImplementedError
    if got is None:
        raise Wrong("your function returned None: is a `return` missing?")
    return got


# Running a learner's kernel safely: in a child worker process (``helpers.sandbox``; why, in
# docs/CONVENTIONS.md). Checkers see out-of-bounds accesses by their effect: a ``guarded`` buffer sits
# between guard regions (and with ``row_stride`` its rows between NaN padding), so a write just outside
# is seen by ``guards_intact`` and a read past a row's end puts NaN into the output; an access farther
# away crashes the worker or makes the GPU fault.

GUARD = 1024  # elements of guard region on each side of a buffer

#: Seconds a learner's kernel may run (compilation included); ``run_learner_kernel(..., timeout=)``
#: overrides it for one call. None: ``helpers.sandbox.KERNEL_TIMEOUT`` (60 s on the CPU's
#: interpreter, 30 s on a GPU).
KERNEL_TIMEOUT: float | None = None


def guarded(
    shape, dtype=torch.float32, device=None, fill=float("nan"), guard: int = GUARD, row_stride: int | None = None
) -> torch.Tensor:
    """A tensor of ``shape`` filled with ``fill``, between ``guard`` sentinel elements on each side
    (``guards_intact`` checks them). With ``row_stride`` (2-D only) its rows are ``row_stride`` apart
    and the padding after each holds NaN: a read past a row's end puts NaN into the output."""
    from .mode import DEVICE

    shape = tuple(int(s) for s in shape)
    if row_stride is not None and (len(shape) != 2 or row_stride < shape[1]):
        raise ValueError(
            f"guarded: row_stride needs a 2-D shape and row_stride >= the row length, got shape {shape}, "
            f"row_stride {row_stride}"
        )
    span = math.prod(shape) if row_stride is None else shape[0] * row_stride
    base = torch.full((span + 2 * guard,), _sentinel(dtype), dtype=dtype, device=device or DEVICE)
    if row_stride is None:
        t = base[guard : guard + span].view(shape)
    else:
        base[guard : guard + span].fill_(_pad(dtype))
        t = torch.as_strided(base, shape, (row_stride, 1), guard)
    return t.fill_(fill)


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
    if not bool((base[:guard] == s).all() and (base[guard + span :] == s).all()):
        return False
    if span != t.numel():
        rows = base[guard : guard + span].view(t.shape[0], t.stride(0))[:, t.shape[1] :]
        pad_ok = torch.isnan(rows).all() if t.dtype.is_floating_point else (rows == _pad(t.dtype)).all()
        return bool(pad_ok)
    return True


OUT_OF_BOUNDS_HINT = "check the masks and the strides"

#: What the learner's kernel launches of the current check moved (under the interpreter): one list a launch of
#: ``(bytes of the tensor, bytes read from it, bytes written to it, is an output)``.
TRAFFIC: list = []


def run_learner_kernel(kernel, grid, *args, outputs=(), timeout: float | None = None, **kwargs) -> None:
    """``kernel[grid](*args, **kwargs)`` in the worker process (``helpers.sandbox``; pass every tensor the
    kernel touches as an argument), then the guards of ``outputs`` (``guarded`` tensors) checked.
    Raises ``Wrong`` with a hint for an out-of-bounds write, a crashed worker, a GPU fault or no end
    within ``timeout`` s (default ``KERNEL_TIMEOUT``), ``NotImplementedError`` for an untouched
    template, and re-raises any other error of the learner's code (same type name and message)."""
    from . import sandbox

    limit = timeout if timeout is not None else KERNEL_TIMEOUT
    try:
        sandbox.run(kernel, grid, args, kwargs, timeout=limit)
    except sandbox.KernelTimeout as e:
        raise _did_not_finish(e.limit, "your kernel") from None
    except sandbox.KernelCrashed as e:
        sig = f" ({e.signal_name})" if e.signal_name else ""
        raise Wrong(
            f"your kernel crashed the process that ran it{sig}: most likely an access far outside its "
            f"tensors: {OUT_OF_BOUNDS_HINT}"
        ) from None
    except sandbox.KernelCudaError as e:
        raise Wrong(
            f"your kernel made the GPU fault ({first_sentence(str(e))}): most likely an access outside "
            f"its tensors: {OUT_OF_BOUNDS_HINT}"
        ) from None
    except sandbox.KernelWroteOutside:
        raise Wrong(f"your kernel wrote outside the memory of the tensors it was given: {OUT_OF_BOUNDS_HINT}") from None
    for t in outputs:
        if not guards_intact(t):
            raise Wrong(
                "your kernel wrote past the end of its output (into memory just outside it): "
                "does tl.store have mask=... for the padding lanes?"
            )
    if sandbox.LAST_TRAFFIC:
        TRAFFIC.append(
            [(t.numel() * t.element_size(), r, w, any(t is o for o in outputs)) for t, r, w in sandbox.LAST_TRAFFIC]
        )


def first_sentence(message: str) -> str:
    """The first sentence of an error message, without the links and advice that follow it (PyTorch's
    "CUDA error: an illegal memory access was encountered\nSearch for `cudaErrorIllegalAddress' in
    https://..." gives "CUDA error: an illegal memory access was encountered")."""
    line = next((ln.strip() for ln in message.splitlines() if ln.strip()), "")
    line = re.split(r"(?<=[.!?])\s|\s+(?:Search for|See) |\s*\S*https?://", line)[0]
    return line.rstrip(". ") or "no message"


def is_untouched(kernel) -> bool:
    """True if a learner's kernel still holds its template's ``raise NotImplementedError``."""
    from .show import source_of

    try:
        src = source_of(kernel)
    except Exception:
        return False
    return re.search(r"^\s*raise\s+NotImplementedError\b", src, re.MULTILINE) is not None


def launch_learner_kernel(kernel, grid, *args, where: str, outputs=(), timeout: float | None = None, **kwargs) -> None:
    """``run_learner_kernel``, for a checker: an untouched template is "not yet", and any other error of
    the learner's code becomes ``Wrong("<where> your kernel raised ...")``."""
    try:
        run_learner_kernel(kernel, grid, *args, outputs=outputs, timeout=timeout, **kwargs)
    except (Wrong, NotImplementedError):
        raise
    except Exception as e:
        if is_untouched(kernel):
            raise NotImplementedError from e
        msg = str(e).strip().splitlines()[-1] if str(e).strip() else ""
        raise Wrong(f"{where} your kernel raised {type(e).__name__}: {msg[:160]}") from e
