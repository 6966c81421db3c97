"""Softmax as a PyTorch operator: autograd, ``torch.compile`` and CUDA graphs see one op each way.

Written by hand, not exported from lesson 08: the registration must run exactly once per process,
when ``helpers`` is imported (``helpers/__init__.py`` imports this module), before ``helpers.softmax``
can route to it. A name registered again is replaced by ``custom_op``, dropping what was registered
on it (and refused by the lower-level ``torch.library.define``), so a lesson cell re-running these
lines would swap the operator under ``helpers.softmax``. Lesson 08's deep dive shows this file.

- ``torch.ops.softmax_course.softmax(x)``: the forward kernels of ``helpers.softmax``.
- ``torch.ops.softmax_course.softmax_backward(y, dy)``: ``helpers.softmax_backward``.
- A *fake* implementation of each: the output's shape, dtype and layout, computed without running
  anything. ``torch.compile`` traces with it, so the op stays one node in the graph.
- Autograd: the forward saves its output y; the backward calls the backward op. The backward op
  has a backward of its own (plain PyTorch), so second derivatives work too.

``helpers.softmax`` calls the operator when ``torch.compile`` traces it. In eager mode it records
autograd with ``helpers.kernels.dispatch.SoftmaxFunction`` instead, around the same kernels: the
dispatcher and the operator's autograd wrapper cost tens of µs of host time a call.
"""

from __future__ import annotations

import torch

from .kernels.backward import softmax_backward as _softmax_backward
from .kernels.dispatch import _softmax

NAMESPACE = "softmax_course"


@torch.library.custom_op(f"{NAMESPACE}::softmax", mutates_args=())
def softmax_op(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension (the course's Triton kernels): a new, contiguous tensor."""
    return _softmax(x)


@softmax_op.register_fake
def _(x):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op(f"{NAMESPACE}::softmax_backward", mutates_args=())
def softmax_backward_op(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """dx = y * (dy - sum(y * dy)) over the last dimension (the course's Triton backward kernels)."""
    return _softmax_backward(y, dy)


@softmax_backward_op.register_fake
def _(y, dy):
    return torch.empty_like(y, memory_format=torch.contiguous_format)


# Autograd of the forward: y = softmax(x) is all the backward needs, so y is what is saved.
def _setup_softmax(ctx, inputs, output):
    ctx.save_for_backward(output)


def _softmax_grad(ctx, dy):
    (y,) = ctx.saved_tensors
    return softmax_backward_op(y, dy)


softmax_op.register_autograd(_softmax_grad, setup_context=_setup_softmax)


# Autograd of the backward (for second derivatives). With g = dL/d(dx):
#   dL/d(dy) = y * (g - sum(y * g))                          (the same backward, applied to g)
#   dL/dy    = g * (dy - sum(y * dy)) - dy * sum(y * g)
def _setup_backward(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _softmax_backward_grad(ctx, g):
    y, dy = ctx.saved_tensors
    dot_dy = (y * dy).sum(-1, keepdim=True)
    dot_g = (y * g).sum(-1, keepdim=True)
    return g * (dy - dot_dy) - dy * dot_g, softmax_backward_op(y, g)


softmax_backward_op.register_autograd(_softmax_backward_grad, setup_context=_setup_backward)
