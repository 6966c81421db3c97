"""helpers: the one shared package of the softmax course.

Import it before anything decorates a Triton kernel: ``helpers.mode`` decides, once per process,
whether kernels are compiled for a GPU or run in Triton's interpreter on the CPU.
"""

from .mode import DEVICE, INTERPRETER, MODE, ON_GPU, banner, describe  # noqa: I001  (must come first)
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
from .launch import INTERPRETER_PROGRAMS, MAX_FUSED_COLS, num_warps_for
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
)
from .kernels import softmax_backward
from . import ops  # noqa: E402  (registers torch.ops.softmax_course.*, which helpers.softmax routes autograd to)
from .show import show_source

__all__ = [
    "DEVICE", "INTERPRETER", "MODE", "ON_GPU", "banner", "describe", "check_tensor",
    "TOLERANCES", "ErrorReport", "assert_matches_reference", "error_report", "naive_softmax",
    "naive_softmax_rowwise", "reference_softmax", "stable_softmax",
    "INTERPRETER_PROGRAMS", "MAX_FUSED_COLS", "gpu_props", "num_warps_for", "occupancy", "softmax",
    "softmax_fused", "softmax_online", "softmax_persistent", "softmax_split", "softmax_split_coop",
    "softmax_three_pass", "softmax_tiled", "show_source", "softmax_backward", "ops", "attention",
]
