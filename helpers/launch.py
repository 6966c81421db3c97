"""The launch plumbing that every row-wise wrapper of the course uses.

Written the obvious way, a wrapper such as ``softmax_fused(x)`` spends 20-50 µs of host time a call
(PERFORMANCE.md) on work that depends only on *what kind* of tensor it got: checking it, viewing it
as rows, choosing block size, warps and grid, and letting Triton's JIT bind the arguments and look
up the compiled kernel. A kernel of a few µs is then *launch-bound*. ``RowSoftmax`` does all of
that once per **key** and keeps a ready-to-launch entry::

    key = (dtype, shape, strides, device index, is_cuda, is_cpu, x.data_ptr() % 16 == 0, options)

A later call with the same key looks the entry up, allocates the output and calls the compiled
kernel's launcher with raw pointers. Everything cached is a function of the key: the validation
verdict (a tensor that fails never gets an entry, so it always reaches the clear error), the row
view, the plan (tuned configurations are per device, and the device is in the key) and the compiled
kernel (Triton specializes on constexprs, on integers equal to 1 or divisible by 16, on 16-byte
aligned pointers: ``x``'s alignment is in the key, the output and workspace come fresh from
PyTorch's allocator, 512-byte aligned; and on the device). Never cached: the output, the data
pointers, the current CUDA stream (a graph capture or a ``torch.cuda.stream`` block changes it).

Under the interpreter, with a launch hook installed (a profiler), or when this Triton's launcher
does not take these arguments, the entry launches with ``kernel[grid](...)`` (the plan is still cached).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import triton
import triton.language as tl

from .checks import check_tensor
from .mode import ON_GPU

#: The longest row the single-block kernels accept. Past it the block no longer fits on chip
#: (Triton refuses blocks of more than 2**20 elements; long before that, registers spill):
#: lesson 03 measures where the fused kernel stops being fast.
MAX_FUSED_COLS = 65536

#: Under the interpreter, persistent grids run this many programs (there is no GPU to size the grid
#: from); an odd number, so grid-stride loops really loop and split rows unevenly.
INTERPRETER_PROGRAMS = 3

#: Entries kept per wrapper before its cache is cleared (a guard against a loop over many shapes).
MAX_ENTRIES = 512


def acc_dtype(dtype: torch.dtype):
    """The type the kernels compute in: fp32 for 16- and 32-bit inputs, fp64 for fp64."""
    return tl.float64 if dtype == torch.float64 else tl.float32


def num_warps_for(block_size: int) -> int:
    """Warps per program for a row block of ``block_size`` elements (the official tutorial's rule):
    more threads for longer rows, so each thread holds a bounded number of elements."""
    if block_size >= 8192:
        return 16
    if block_size >= 2048:
        return 8
    return 4


def check_fused_len(n_cols: int, fn_name: str) -> None:
    """Refuse rows longer than one block can hold, saying what to use instead."""
    if n_cols > MAX_FUSED_COLS:
        raise ValueError(
            f"{fn_name} keeps a whole row in one block, and rows of {n_cols} columns are longer than "
            f"its limit of {MAX_FUSED_COLS}: use helpers.softmax_online(x) (which loops over the row "
            f"in blocks) or helpers.softmax(x)."
        )


def check_block_size(n_cols: int, block_size, fn_name: str) -> int:
    """The block of a looping kernel: ``block_size`` checked (a power of two, at most
    ``MAX_FUSED_COLS``), or by default the row rounded up to a power of two, at most 4096."""
    if block_size is None:
        return min(triton.next_power_of_2(max(n_cols, 1)), 4096)
    if isinstance(block_size, bool) or not isinstance(block_size, int):
        raise TypeError(f"{fn_name}: block_size must be an int (a power of two) or None, got {block_size!r}.")
    if block_size < 1 or block_size & (block_size - 1):
        raise ValueError(
            f"{fn_name}: block_size must be a power of two (Triton's tl.arange needs one), got {block_size}: "
            f"try {triton.next_power_of_2(max(block_size, 1))}."
        )
    if block_size > MAX_FUSED_COLS:
        raise ValueError(f"{fn_name}: block_size {block_size} is larger than the on-chip limit {MAX_FUSED_COLS}.")
    return block_size


def check_positive_int(fn_name: str, name: str, val, low: int = 1, allow_none: bool = True) -> None:
    """A clear error unless ``val`` is an int >= ``low`` (or None when allowed)."""
    if val is None and allow_none:
        return
    if isinstance(val, bool) or not isinstance(val, int) or val < low:
        what = "a positive int" if low == 1 else f"an int >= {low}"
        extra = " (or None for the default)" if allow_none else ""
        raise ValueError(f"{fn_name}: {name} must be {what}{extra}, got {val!r}.")


@dataclass(frozen=True)
class Rows:
    """A tensor seen as (n_rows, n_cols) rows over its last dimension, without copying when the
    leading dimensions merge into one stride (``copy`` says when they do not). A wrapper of two
    inputs of one shape (a backward pass: y and dy) also gets the second one's strides."""

    n_rows: int
    n_cols: int
    in_row_stride: int
    in_col_stride: int
    out_row_stride: int
    dtype: torch.dtype
    device: torch.device
    copy: bool = False
    in2_row_stride: int = 0
    in2_col_stride: int = 0
    copy2: bool = False

    @property
    def element_size(self) -> int:
        return self.dtype.itemsize

    @staticmethod
    def _strides(x: torch.Tensor, n_rows: int, n_cols: int) -> tuple[tuple[int, int], bool]:
        if x.dim() == 1:
            return (n_cols * x.stride(0), x.stride(0)), False
        if x.dim() == 2:
            return x.stride(), False
        try:
            return x.view(n_rows, n_cols).stride(), False
        except RuntimeError:  # leading dimensions that cannot be merged into one stride: copy them
            return (n_cols, 1), True

    @staticmethod
    def of(x: torch.Tensor, other: torch.Tensor | None = None) -> Rows:
        n_cols = x.shape[-1]
        n_rows = math.prod(x.shape[:-1])  # explicit, so zero-length rows (n_cols == 0) work too
        (rs, cs), copy = Rows._strides(x, n_rows, n_cols)
        (rs2, cs2), copy2 = Rows._strides(other, n_rows, n_cols) if other is not None else ((0, 0), False)
        return Rows(n_rows, n_cols, rs, cs, n_cols, x.dtype, x.device, copy, rs2, cs2, copy2)

    def view(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` as a 2-D tensor with these rows (a copy only when the leading dims do not merge)."""
        if x.dim() == 2:
            return x
        return x.reshape(self.n_rows, self.n_cols)


#: Which tensors a launch's pointer arguments are, in the kernel's order: the output, the input
#: (and a second input, for wrappers of two), then the per-call workspace tensors WS[0], WS[1], ...
OUT, IN, IN2 = "out", "in", "in2"
WS = tuple(f"ws{i}" for i in range(8))


@dataclass
class Launch:
    """One kernel launch: ``kernel[grid](*pointers, *args, **constexprs, num_warps=..., ...)``.
    ``ptrs`` names the tensors that are its leading pointer arguments (``OUT``, ``IN``, ``IN2``,
    ``WS[i]``), in the kernel's order."""

    kernel: Any
    grid: tuple
    args: tuple = ()
    constexprs: dict = field(default_factory=dict)
    num_warps: int = 4
    num_stages: int | None = None
    ptrs: tuple = (OUT, IN)
    cooperative: bool = False  # all programs resident at once (the driver refuses a grid that cannot be)
    pdl: bool = False  # programmatic dependent launch: may start before the launch ahead of it ends (Hopper on)

    def options(self) -> dict:
        opts = {"num_warps": self.num_warps}
        if self.num_stages is not None:
            opts["num_stages"] = self.num_stages
        if self.cooperative:
            opts["launch_cooperative_grid"] = True
        if self.pdl:
            opts["launch_pdl"] = True
        return opts


@dataclass
class Plan:
    """How a wrapper handles one key: the launches, the per-call workspace, or another wrapper to
    call instead (``delegate``). ``info`` holds whatever a lesson wants to show about the choice."""

    launches: list = field(default_factory=list)
    workspace: Callable | None = None  # rows -> tuple of fresh tensors, made on every call
    delegate: Callable | None = None
    fallback: Callable | None = None  # used instead if the first launch is refused (RuntimeError)
    info: dict = field(default_factory=dict)


_raw_stream = None
_get_device = None
if ON_GPU:
    try:
        from torch._C import _cuda_getCurrentRawStream as _raw_stream  # what Triton itself calls
        from torch._C import _cuda_getDevice as _get_device
    except ImportError:  # pragma: no cover - an older torch
        _raw_stream = None

#: False once the installed Triton has been found not to take the direct launch: everything then
#: goes through the JIT (slower on the host, identical on the GPU).
DIRECT = [ON_GPU and _raw_stream is not None]


def _launch_hooks_installed() -> bool:
    """True when a profiler (Proton, a user) has installed a launch hook: the direct path would skip it.
    Triton 3.6 keeps the hooks in a HookChain that is never None: installed means it has calls."""
    try:
        knobs = triton.knobs.runtime
        hooks = (knobs.launch_enter_hook, knobs.launch_exit_hook)
    except AttributeError:  # pragma: no cover - a Triton without knobs
        return False
    return any(h is not None and (len(h.calls) > 0 if hasattr(h, "calls") else True) for h in hooks)


def raw_launcher(compiled) -> Callable:
    """``launch(gx, gy, gz, stream, *args)``: the compiled kernel's launcher called with raw pointers and
    the scalar and constexpr arguments in the kernel's order (no hooks, no scratch memory). Triton 3.6
    generates a launcher per kernel that takes the arguments one by one; from 3.7 one launcher serves
    every kernel and takes them as a tuple, with the kernel's signature. TypeError or AttributeError
    when the kernel needs scratch memory or this Triton's launcher differs (use ``kernel[grid](...)`` then)."""
    run = compiled.run
    if getattr(run, "global_scratch_size", 0) or getattr(run, "profile_scratch_size", 0):
        raise TypeError("kernel needs scratch memory")  # the plain launch path allocates it
    go, function, packed = run.launch, compiled.function, compiled.packed_metadata
    coop, pdl = run.launch_cooperative_grid, run.launch_pdl
    if hasattr(run, "kernel_signature"):  # Triton >= 3.7
        annotations, signature = run.arg_annotations, run.kernel_signature

        def launch(gx, gy, gz, stream, *args):
            go(
                gx,
                gy,
                gz,
                stream,
                function,
                coop,
                pdl,
                packed,
                None,
                None,
                None,
                None,
                None,
                annotations,
                signature,
                args,
            )
    else:  # Triton 3.6

        def launch(gx, gy, gz, stream, *args):
            go(gx, gy, gz, stream, function, coop, pdl, None, None, packed, None, None, None, *args)

    return launch


def _slots(n_inputs: int) -> dict:
    names = [OUT, IN, IN2][: 1 + n_inputs] + list(WS)
    return {name: i for i, name in enumerate(names)}


class _Direct:
    """A compiled kernel and everything its launcher needs except the pointers and the stream."""

    __slots__ = ("launch", "grid", "idx", "rest", "compiled")

    def __init__(self, L: Launch, tensors: tuple, slots: dict):
        self.idx = tuple(slots[p] for p in L.ptrs)
        compiled = L.kernel.warmup(*(tensors[i] for i in self.idx), *L.args, grid=L.grid, **L.constexprs, **L.options())
        compiled._init_handles()
        self.launch = raw_launcher(compiled)
        self.grid = tuple(L.grid) + (1,) * (3 - len(L.grid))
        # The launcher takes every parameter in the kernel's order and skips the constexpr ones:
        # after the pointers and the scalar arguments come the constexprs, by name.
        names = list(L.kernel.arg_names)[len(L.ptrs) + len(L.args) :]
        if any(n not in L.constexprs for n in names):
            raise TypeError(
                f"{L.kernel.__name__}: parameters {names} after the scalar arguments must all be constexprs"
            )
        self.rest = tuple(L.args) + tuple(L.constexprs[n] for n in names)
        self.compiled = compiled


def direct_path(x) -> bool:
    """True when kernels for tensors like ``x`` may be launched by calling the compiled kernel's
    launcher directly: ``x`` is on a GPU, this Triton's launcher takes our arguments, and no launch
    hook (a profiler) is installed. Otherwise launch through ``kernel[grid](...)``."""
    return DIRECT[0] and x.is_cuda and not _launch_hooks_installed()


def current_device() -> int:
    """The index of the current CUDA device (-1 where there is none): a launcher made for a tensor
    on another device must run inside ``torch.cuda.device(its index)``."""
    return _get_device() if _get_device is not None else -1


def direct_launcher(L: Launch, tensors: tuple, device: int) -> Callable:
    """Compile ``L`` for these example tensors (``tensors[i]`` is the pointer ``L.ptrs[i]``) and return
    ``launch(*data_ptrs, args=None)``, which queues it on ``device``'s current stream: the row wrappers'
    direct path, for kernels whose inputs are not rows (attention, sampling). ``args``, if given, replaces
    ``L.args`` for this launch: only floats may differ from those compiled for (Triton specializes integers
    and pointers, not floats). TypeError or AttributeError when this Triton's launcher differs: use
    ``kernel[grid](...)`` then (``DIRECT[0] = False`` if a launch refuses)."""
    d = _Direct(L, tensors, {p: i for i, p in enumerate(L.ptrs)})
    run, (gx, gy, gz), rest = d.launch, d.grid, d.rest
    constexprs = rest[len(L.args) :]
    raw_stream = _raw_stream

    def launch(*ptrs, args=None):
        run(gx, gy, gz, raw_stream(device), *ptrs, *(rest if args is None else (*args, *constexprs)))

    return launch


def _inputs2d(rows: Rows, inputs: tuple) -> tuple:
    first = inputs[0].reshape(rows.n_rows, rows.n_cols) if rows.copy else inputs[0]
    if len(inputs) == 1:
        return (first,)
    return first, (inputs[1].reshape(rows.n_rows, rows.n_cols) if rows.copy2 else inputs[1])


def _jit_call(plan: Plan, rows: Rows, shape, n_inputs: int) -> Callable:
    """Launch through ``kernel[grid](...)``: the interpreter, or a GPU when the direct path is off."""
    launches, workspace, slots = plan.launches, plan.workspace, _slots(n_inputs)
    idx = [tuple(slots[p] for p in L.ptrs) for L in launches]

    def call(*inputs):
        views = tuple(rows.view(t) for t in inputs)
        out = torch.empty((rows.n_rows, rows.n_cols), dtype=rows.dtype, device=inputs[0].device)
        tensors = (out, *views, *(workspace(rows) if workspace else ()))
        for L, ix in zip(launches, idx):
            L.kernel[L.grid](*(tensors[i] for i in ix), *L.args, **L.constexprs, **L.options())
        return out.view(shape)

    return call


def _direct_call(plan: Plan, rows: Rows, inputs: tuple) -> Callable:
    """Compile every launch of ``plan`` for these inputs and return the per-call function that
    launches them with raw pointers."""
    x = inputs[0]
    workspace, dev, slots = plan.workspace, x.get_device(), _slots(len(inputs))
    fmt = torch.contiguous_format
    out0 = torch.empty((rows.n_rows, rows.n_cols), dtype=rows.dtype, device=x.device)
    tensors = (out0, *(rows.view(t) for t in inputs), *(workspace(rows) if workspace else ()))
    directs = [_Direct(L, tensors, slots) for L in plan.launches]
    raw_stream = _raw_stream

    if len(directs) == 1 and workspace is None and len(inputs) == 1 and not rows.copy and directs[0].idx == (0, 1):
        # The common case, kept to the fewest Python operations: one launch, out and x.
        d = directs[0]
        launch, (gx, gy, gz), rest = d.launch, d.grid, d.rest
        if x.is_contiguous():

            def call(x):
                out = torch.empty_like(x)
                launch(gx, gy, gz, raw_stream(dev), out.data_ptr(), x.data_ptr(), *rest)
                return out
        else:

            def call(x):
                out = torch.empty_like(x, memory_format=fmt)
                launch(gx, gy, gz, raw_stream(dev), out.data_ptr(), x.data_ptr(), *rest)
                return out

        return call

    launches = [(d.launch, *d.grid, d.idx, d.rest) for d in directs]
    copy_any = rows.copy or rows.copy2

    def call(*inputs):
        out = torch.empty_like(inputs[0], memory_format=fmt)
        ptrs = [out.data_ptr()]
        for t in _inputs2d(rows, inputs) if copy_any else inputs:
            ptrs.append(t.data_ptr())
        ws = workspace(rows) if workspace is not None else ()  # kept alive until every launch is queued
        for w in ws:
            ptrs.append(w.data_ptr())
        stream = raw_stream(dev)
        for launch, gx, gy, gz, idx, rest in launches:
            launch(gx, gy, gz, stream, *[ptrs[i] for i in idx], *rest)
        return out

    return call


def _option_key(options: tuple) -> tuple:
    # 16.0 == 16 and True == 1 as dict keys: keep the types apart, so a wrong-typed option never hits
    # the entry of a valid one and always reaches the plan's clear error.
    return tuple((type(o), o) for o in options) if options else ()


class RowSoftmax:
    """A row-wise wrapper: ``RowSoftmax(plan_fn, name)(x, *options)`` returns a new tensor of
    ``x``'s shape, dtype and device (``x`` is never modified).

    ``plan_fn(rows, *options)`` says how to launch (a :class:`Plan`); it runs once per key (see the
    module docstring) and may raise a clear error for bad options. Kernel signatures start with
    their pointer arguments, as each :class:`Launch`'s ``ptrs`` names them."""

    n_inputs = 1

    def __init__(self, plan_fn: Callable, name: str):
        self.plan_fn, self.name = plan_fn, name
        self.cache: dict = {}
        self.__name__ = self.__qualname__ = name

    def __repr__(self) -> str:
        return f"<course wrapper {self.name}: {len(self.cache)} cached plans>"

    def __call__(self, x, *options):
        try:
            key = (
                x.dtype,
                x.shape,
                x.stride(),
                x.get_device(),
                x.is_cuda,
                x.is_cpu,
                not x.data_ptr() & 15,
                options and _option_key(options),
            )
            entry = self.cache[key]
        except (KeyError, AttributeError, TypeError):
            return self._resolve((x,), options)
        if _get_device is not None and key[3] >= 0 and _get_device() != key[3]:
            with torch.cuda.device(key[3]):  # launch in the tensor's own device context
                return entry(x)
        return entry(x)

    def check(self, *inputs) -> None:
        """Raise a clear error unless the inputs are tensors the kernels take."""
        check_tensor(inputs[0], kernel=True)

    def plan(self, *inputs_and_options) -> Plan:
        """The plan the inputs get (validating them), without launching anything: for lessons and tests."""
        inputs, options = inputs_and_options[: self.n_inputs], inputs_and_options[self.n_inputs :]
        self.check(*inputs)
        return self.plan_fn(Rows.of(*inputs), *options)

    def _key(self, inputs, options):
        parts = []
        for t in inputs:
            parts += [t.dtype, t.shape, t.stride(), t.get_device(), t.is_cuda, t.is_cpu, not t.data_ptr() & 15]
        return (*parts, options and _option_key(options))

    def _resolve(self, inputs, options):
        self.check(*inputs)
        x = inputs[0]
        rows = Rows.of(*inputs)
        if x.numel() == 0:
            # Nothing to launch; the plan of a one-element row still checks the options.
            self.plan_fn(dataclasses.replace(rows, n_rows=1, n_cols=max(rows.n_cols, 1)), *options)
            return torch.empty_like(x, memory_format=torch.contiguous_format)
        plan = self.plan_fn(rows, *options)
        if plan.delegate is not None:
            entry = plan.delegate
        elif direct_path(x):
            try:
                entry = _direct_call(plan, rows, inputs)
            except (TypeError, AttributeError):  # this Triton's launcher differs: use the JIT path
                entry = _jit_call(plan, rows, x.shape, len(inputs))
        else:
            entry = _jit_call(plan, rows, x.shape, len(inputs))
        if len(self.cache) >= MAX_ENTRIES:
            self.cache.clear()
        try:
            out = entry(*inputs)
        except TypeError:
            if entry is plan.delegate or not DIRECT[0]:
                raise
            DIRECT[0] = False  # the launcher refused the direct arguments before launching anything
            entry = _jit_call(plan, rows, x.shape, len(inputs))
            out = entry(*inputs)
        except RuntimeError:
            # e.g. the driver refusing a cooperative grid it cannot keep resident: refused launches
            # run nothing, so the plan's fallback (if it has one) computes the result instead
            if plan.fallback is None:
                raise
            entry = plan.fallback
            out = entry(*inputs)
        try:
            self.cache[self._key(inputs, options)] = entry
        except TypeError:  # unhashable options the plan accepted: just do not cache
            pass
        return out


class RowSoftmax2(RowSoftmax):
    """A row-wise wrapper of two inputs of one shape (a backward pass: ``wrapper(y, dy, *options)``).
    The output has the first input's shape and dtype; ``check(a, b)`` (given to the constructor)
    raises a clear error for inputs that do not go together."""

    n_inputs = 2

    def __init__(self, plan_fn: Callable, name: str, check: Callable):
        super().__init__(plan_fn, name)
        self._check = check

    def check(self, *inputs) -> None:
        self._check(*inputs)

    def __call__(self, a, b, *options):
        try:
            key = (
                a.dtype,
                a.shape,
                a.stride(),
                a.get_device(),
                a.is_cuda,
                a.is_cpu,
                not a.data_ptr() & 15,
                b.dtype,
                b.shape,
                b.stride(),
                b.get_device(),
                b.is_cuda,
                b.is_cpu,
                not b.data_ptr() & 15,
                options and _option_key(options),
            )
            entry = self.cache[key]
        except (KeyError, AttributeError, TypeError):
            return self._resolve((a, b), options)
        if _get_device is not None and key[3] >= 0 and _get_device() != key[3]:
            with torch.cuda.device(key[3]):
                return entry(a, b)
        return entry(a, b)
