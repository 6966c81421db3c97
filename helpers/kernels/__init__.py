"""The course's Triton softmax kernels, one module per family, each exported from the lesson that
teaches it (``tools/export.py``: edit the notebook's cells, then run ``make export``):

- ``fused``       lesson 03: one program per row, the whole row in one block.
- ``online``      lesson 04: a loop over the row in blocks: three passes, then the online (max, sum).
- ``persistent``  lesson 05: a persistent grid sized from the compiled kernel; the tiled kernel.
- ``split``       lesson 06: one row split across programs: two launches, or one cooperative launch.
- ``backward``    lesson 08: the gradient of softmax, dx = y * (dy - sum(y * dy)), from y and dy.
- ``dispatch``    ``softmax``: the course's best answer for any shape (written by hand).
- ``attention``   lesson 07: FlashAttention's forward pass, the online softmax with an output accumulator.
- ``sampling_step`` lesson 09: the keys (a logit and its column in one int64), their merges, the sampling step.
- ``topk_program`` lesson 09's deep dive: a running top K in every program of a slice, then a merge per row.
- ``topk_lanes``  lesson 09's deep dive: lanes that each keep their maximum, then a threshold search per row.
- ``sampling``    lesson 09: softmax_topk (the k most probable tokens) and sample (temperature, top-k,
                  top-p) in one read of the logits, by one of the two designs above.

Every wrapper takes a floating tensor of any shape (at least one dimension) and returns the
softmax over its last dimension: same shape, dtype and device, a new tensor (the input is never
modified). fp16/bf16 are computed in fp32 inside the kernels, float64 in float64. The launch
plumbing they share (validation, the per-key plan cache, the direct launch) is ``helpers.launch``.
"""

from ..device import gpu_props, occupancy
from ..rowwise import INTERPRETER_PROGRAMS, MAX_FUSED_COLS, acc_dtype, num_warps_for
from .attention import attention, attention_plan, naive_attention  # noqa: E402  (lesson 07)
from .attention_checks import HEAD_DIMS  # noqa: E402
from .backward import (
    BACKWARD_TILED_MAX_COLS,
    backward_coop_plan,
    backward_looped_plan,
    backward_plan,
    backward_tiled_plan,
    softmax_backward,
    softmax_backward_coop,
    softmax_backward_coop_kernel,
    softmax_backward_looped,
    softmax_backward_looped_kernel,
    softmax_backward_tiled,
    softmax_backward_tiled_kernel,
)
from .dispatch import TILED_MAX_COLS, softmax, softmax_plan  # noqa: E402  (after the families it chooses from)
from .fused import fused_plan, softmax_fused, softmax_fused_kernel
from .online import looped_plan, softmax_online, softmax_online_kernel, softmax_three_pass, softmax_three_pass_kernel
from .persistent import (
    persistent_plan,
    softmax_persistent,
    softmax_persistent_kernel,
    softmax_tiled,
    softmax_tiled_kernel,
    tiled_plan,
)
from .sampling import sample, softmax_topk  # noqa: E402  (lesson 09)
from .split import (
    MAX_SPIN,
    coop_plan,
    softmax_split,
    softmax_split_coop,
    softmax_split_coop_kernel,
    softmax_split_normalize_kernel,
    softmax_split_stats_kernel,
    split_plan,
    two_launch_plan,
)
from .topk_program import topk_merge_kernel, topk_plan, topk_slice_kernel
