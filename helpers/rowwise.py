"""The row-wise wrappers: softmax over the last dimension of any tensor, forward (``RowWise``) and backward
(``RowWisePair``, two inputs of one shape), on the course's one launch runtime (``helpers.launch``). A wrapper is a
*plan function*, ``plan_fn(rows, *options) -> launch.Plan``, which sees the input as ``Rows`` (rows of the last
dimension, with their strides) and says what to launch; the wrapper checks the input, keys its ``launch.Cache``
on the input's ``launch.tensor_key`` and the options, and launches the plan through ``launch.runner``. Also here:
the limits and rules the row kernels' plans share (the longest fused row, warps for a block, the clear errors
for bad options).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from . import launch
from .checks import check_positive_int, check_tensor  # noqa: F401 (the kernel modules import it from here)
from .launch import IN, OUT, Cache, Plan, tensor_key

#: The longest row the single-block kernels accept. Past it the block no longer fits on chip
#: (Triton refuses blocks of more than 2**20 elements; long before that, registers spill):
#: lesson 03 measures where the fused kernel stops being fast.
MAX_FUSED_COLS = 65536

#: Under the interpreter, persistent grids run this many programs (there is no GPU to size the grid
#: from); an odd number, so grid-stride loops really loop and split rows unevenly.
INTERPRETER_PROGRAMS = 3


def acc_dtype(dtype: torch.dtype):
    """The type the kernels compute in: fp32 for 16- and 32-bit inputs, fp64 for fp64."""
    return tl.float64 if dtype == torch.float64 else tl.float32


def num_warps_for(block_size: int) -> int:
    """Warps per program for a row block of ``block_size`` elements (the official tutorial's rule):
    more threads for longer rows, so each thread holds a bounded number of elements."""
    return 16 if block_size >= 8192 else 8 if block_size >= 2048 else 4


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


#: The row wrappers' pointer names: the output and the input (launch.OUT and launch.IN), a second input for
#: wrappers of two, then the workspace's parts WS[0], WS[1], ...
IN2 = "in2"
WS = tuple(f"ws{i}" for i in range(8))


def _option_key(options: tuple) -> tuple:
    # 16.0 == 16 and True == 1 as dict keys: keep the types apart, so a wrong-typed option never hits
    # the entry of a valid one and always reaches the plan's clear error.
    return tuple((type(o), o) for o in options) if options else ()


class RowWise:
    """A row-wise wrapper: ``RowWise(plan_fn, name)(x, *options)`` returns a new tensor of
    ``x``'s shape, dtype and device (``x`` is never modified).

    ``plan_fn(rows, *options)`` says how to launch (a :class:`Plan` whose pointers are ``OUT``, ``IN`` and
    the workspace's parts); it runs once per key (``tensor_key`` of the inputs, and the options) and may
    raise a clear error for bad options."""

    n_inputs = 1

    def __init__(self, plan_fn: Callable, name: str):
        self.plan_fn, self.name = plan_fn, name
        self.cache = Cache()
        self.__name__ = self.__qualname__ = name

    def __repr__(self) -> str:
        return f"<course wrapper {self.name}: {len(self.cache)} cached plans>"

    def __call__(self, x, *options):
        try:  # (*tensor_key(x), options), written out: this line is most of a cached call's host time
            opt = options and _option_key(options)
            key = (x.dtype, x.shape, x.stride(), x.device, not x.data_ptr() & 15, opt)
            entry = self.cache[key]
        except (KeyError, AttributeError, TypeError):
            return self._first_call((x,), options)
        return entry(x)

    def check(self, *inputs) -> None:
        """Raise a clear error unless the inputs are tensors the kernels take."""
        check_tensor(inputs[0], kernel=True)

    def plan(self, *inputs_and_options) -> Plan:
        """The plan the inputs get (validating them), without launching anything: for lessons and tests."""
        inputs, options = inputs_and_options[: self.n_inputs], inputs_and_options[self.n_inputs :]
        self.check(*inputs)
        return self.plan_fn(Rows.of(*inputs), *options)

    def _first_call(self, inputs, options):
        try:
            key = (*tensor_key(*inputs), options and _option_key(options))
        except (AttributeError, TypeError):  # not tensors: build() says what to do
            key = None
        return self.cache.first_call(key, lambda: self._build(inputs, options), *inputs)

    def _build(self, inputs, options) -> Callable:
        """The ready function for inputs like these: check, view as rows, plan, compile."""
        self.check(*inputs)
        x, fmt = inputs[0], torch.contiguous_format
        rows = Rows.of(*inputs)
        if x.numel() == 0:  # nothing to launch; the plan of a one-element row still checks the options
            self.plan_fn(dataclasses.replace(rows, n_rows=1, n_cols=max(rows.n_cols, 1)), *options)
            return lambda x, *more: torch.empty_like(x, memory_format=fmt)
        plan = self.plan_fn(rows, *options)
        if plan.delegate is not None:
            return plan.delegate
        copies, shape = (rows.copy, rows.copy2)[: len(inputs)], (rows.n_rows, rows.n_cols)

        def as_rows(ts):  # leading dimensions that do not merge into one stride: copied, every call
            return tuple(t.reshape(shape) if c else t for t, c in zip(ts, copies))

        try:
            run = launch.runner(
                plan, (OUT, IN, IN2)[: 1 + len(inputs)], (torch.empty_like(x, memory_format=fmt), *as_rows(inputs))
            )
        except RuntimeError:  # the driver refused the first launch (a cooperative grid it cannot keep resident)
            if plan.fallback is None:
                raise
            return plan.fallback
        if len(inputs) == 2 and not any(copies):

            def call(a, b):
                out = torch.empty_like(a, memory_format=fmt)
                run(out, a, b)
                return out
        elif any(copies) or len(inputs) > 1:

            def call(*inputs):
                out = torch.empty_like(inputs[0], memory_format=fmt)
                run(out, *as_rows(inputs))
                return out
        elif x.is_contiguous():

            def call(x):
                out = torch.empty_like(x)
                run(out, x)
                return out
        else:

            def call(x):
                out = torch.empty_like(x, memory_format=fmt)
                run(out, x)
                return out

        call.fallback = plan.fallback
        return call


class RowWisePair(RowWise):
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
        try:  # (*tensor_key(a, b), options), written out
            opt, a16, b16 = options and _option_key(options), not a.data_ptr() & 15, not b.data_ptr() & 15
            key = (a.dtype, a.shape, a.stride(), a.device, a16, b.dtype, b.shape, b.stride(), b.device, b16, opt)
            entry = self.cache[key]
        except (KeyError, AttributeError, TypeError):
            return self._first_call((a, b), options)
        return entry(a, b)
