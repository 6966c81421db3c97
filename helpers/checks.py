"""Input validation shared by every public helper.

Each error says what was wrong and what to do about it. Nothing here modifies its input.
"""

from __future__ import annotations

import torch

from .mode import DEVICE, MODE

FLOATING = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def check_tensor(x, name: str = "x", *, kernel: bool = False) -> None:
    """Raise a clear error unless ``x`` is a floating tensor with at least one dimension.

    With ``kernel=True`` also check that ``x`` lives where the course's Triton kernels run
    (the GPU in GPU mode, the CPU under the interpreter).
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor, got {type(x).__name__}: wrap your data with torch.tensor(...) first."
        )
    if x.dtype not in FLOATING:
        raise TypeError(
            f"{name} has dtype {x.dtype}, but softmax needs a floating tensor "
            f"(float16, bfloat16, float32 or float64): convert it with {name}.float()."
        )
    if x.dim() == 0:
        raise ValueError(
            f"{name} is a 0-d tensor (a single number); softmax works over the last dimension "
            f"of a tensor with at least one: use {name}.reshape(1)."
        )
    if kernel and x.device.type != DEVICE.type:
        if MODE == "gpu":
            fix = f"move it with {name}.to('cuda') (or {name}.to(helpers.DEVICE))"
        else:
            fix = (
                f"there is no GPU in this run, so the kernels run in Triton's interpreter on the CPU: "
                f"move it with {name}.cpu() (or {name}.to(helpers.DEVICE))"
            )
        raise ValueError(f"{name} is on device '{x.device}', but the kernels run on '{DEVICE}': {fix}.")


def check_positive_int(fn_name: str, name: str, val, low: int = 1, allow_none: bool = True) -> None:
    """A clear error unless ``val`` is an int >= ``low`` (or None when allowed)."""
    if val is None and allow_none:
        return
    if isinstance(val, bool) or not isinstance(val, int) or val < low:
        what = "a positive int" if low == 1 else f"an int >= {low}"
        extra = " (or None for the default)" if allow_none else ""
        raise ValueError(f"{fn_name}: {name} must be {what}{extra}, got {val!r}.")
