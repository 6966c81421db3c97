"""helpers: the one shared package of the softmax course.

Import it before anything decorates a Triton kernel: ``helpers.mode`` decides, once per process,
whether kernels are compiled for a GPU or run in Triton's interpreter on the CPU.

Without Triton (it publishes no build for macOS or Windows) the package still imports: the mode,
the reference, traffic, plots, recorded data, exercises and lessons 01-02 work; ``HAS_TRITON`` is
False, and the kernel names below (``helpers.softmax``, ...) raise ``KernelsUnavailable`` with one
line saying where the kernel lessons run.
"""

from .mode import DEVICE, INTERPRETER, MODE, ON_GPU, banner, describe  # noqa: I001  (must come first)
from .mode import HAS_TRITON, KernelsUnavailable, require_kernels
from .checks import check_tensor
from .reference import (
    TOLERANCES,
    ErrorReport,
    assert_matches_reference,
    error_report,
    naive_softmax,
    naive_softmax_rowwise,
    reference_softmax,
    stable_softmax,
)
from .device import gpu_props, occupancy

if HAS_TRITON:
    from .rowwise import INTERPRETER_PROGRAMS, MAX_FUSED_COLS, num_warps_for
    from .kernels import (
        softmax,
        softmax_fused,
        softmax_online,
        softmax_persistent,
        softmax_split,
        softmax_split_coop,
        softmax_three_pass,
        softmax_tiled,
        attention,
        sample,
        softmax_topk,
    )
    from .kernels import softmax_backward
    from . import ops  # noqa: E402  (registers torch.ops.softmax_course.*, which helpers.softmax routes autograd to)
from .show import show_source

#: The public names that need Triton (the kernels and their launch constants).
KERNEL_NAMES = (
    "INTERPRETER_PROGRAMS",
    "MAX_FUSED_COLS",
    "num_warps_for",
    "softmax",
    "softmax_fused",
    "softmax_online",
    "softmax_persistent",
    "softmax_split",
    "softmax_split_coop",
    "softmax_three_pass",
    "softmax_tiled",
    "attention",
    "softmax_backward",
    "ops",
    "softmax_topk",
    "sample",
)

__all__ = [
    "DEVICE",
    "INTERPRETER",
    "MODE",
    "ON_GPU",
    "banner",
    "describe",
    "check_tensor",
    "TOLERANCES",
    "ErrorReport",
    "assert_matches_reference",
    "error_report",
    "naive_softmax",
    "naive_softmax_rowwise",
    "reference_softmax",
    "stable_softmax",
    "INTERPRETER_PROGRAMS",
    "MAX_FUSED_COLS",
    "gpu_props",
    "num_warps_for",
    "occupancy",
    "softmax",
    "softmax_fused",
    "softmax_online",
    "softmax_persistent",
    "softmax_split",
    "softmax_split_coop",
    "softmax_three_pass",
    "softmax_tiled",
    "show_source",
    "softmax_backward",
    "ops",
    "attention",
    "HAS_TRITON",
    "KernelsUnavailable",
    "require_kernels",
    "softmax_topk",
    "sample",
]
if not HAS_TRITON:
    __all__ = [name for name in __all__ if name not in KERNEL_NAMES]


def __getattr__(name: str):
    # Reached only for names this module does not define: the kernel names when Triton is missing.
    if name in KERNEL_NAMES:
        raise KernelsUnavailable(f"`helpers.{name}`")
    raise AttributeError(f"module 'helpers' has no attribute {name!r}")
