"""``helpers.softmax``: the course's best answer for any shape (lessons 05, 06 and 08).

Rows that fit on chip (up to ``TILED_MAX_COLS`` columns) go to the tiled kernel, in the
configuration measured for this GPU (``helpers.tuning``); longer rows are split across programs
that wait for each other inside one launch (``softmax_split_coop``; the two-launch
``softmax_split`` under the interpreter). One cache lookup a call: the plan of each kind of tensor
is decided once (``helpers.launch``).

Autograd (lesson 08): a call that ``torch.compile`` is tracing goes through the operator
``torch.ops.softmax_course.softmax`` (``helpers.ops``), the only form the compiler can put in a graph.
In eager mode, a call that autograd must record (``x.requires_grad`` with grad mode on) goes through
``SoftmaxFunction``, a ``torch.autograd.Function`` around the same kernels, whose backward is
``helpers.softmax_backward``: the same numbers as the operator for a fraction of its host cost (the
dispatcher and the operator's Python autograd cost tens of µs a call). Every other call launches
the kernels directly, as cheap as before autograd was supported.
"""

from __future__ import annotations

import torch

from ..checks import check_tensor
from ..rowwise import RowWise
from .backward import softmax_backward
from .persistent import tiled_plan
from .split import coop_plan

#: Rows up to this many columns go to the tiled kernel; longer ones are split across programs.
TILED_MAX_COLS = 32768


def softmax_plan(rows):
    """The plan ``softmax`` uses for these rows: the tiled kernel's, or the cooperative split's."""
    if rows.n_cols <= TILED_MAX_COLS:
        return tiled_plan(rows)
    return coop_plan(rows)


_softmax = RowWise(softmax_plan, "softmax")
_is_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled


class SoftmaxFunction(torch.autograd.Function):
    """Eager autograd around the kernels: saves y, and its backward is ``softmax_backward``. When the
    backward itself is recorded (``create_graph=True``), it goes through the backward operator, whose
    own backward gives second derivatives."""

    @staticmethod
    def forward(ctx, x):
        y = _softmax(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        if _grad_enabled():
            return torch.ops.softmax_course.softmax_backward(y, dy)
        return softmax_backward(y, dy)


def softmax(x):
    """Softmax over the last dimension for any shape: a new tensor of ``x``'s shape, dtype and
    device, computed in fp32 for 16-bit inputs. Differentiable (lesson 08)."""
    try:
        record = x.requires_grad and _grad_enabled()
    except AttributeError:  # not a tensor: the wrapper's check says what to do
        return _softmax(x)
    if _is_compiling():
        check_tensor(x, kernel=True)
        return torch.ops.softmax_course.softmax(x)
    if record:
        check_tensor(x, kernel=True)
        return SoftmaxFunction.apply(x)
    return _softmax(x)
