"""The peers the course's softmax is compared with, besides PyTorch's own: a reproduction of the
official Triton fused-softmax tutorial (as its wrapper launches it), and Liger-Kernel's softmax when
that package is installed (it is not a requirement of the course; the benchmark carries it to the GPU).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .mode import ON_GPU


@triton.jit
def tutorial_softmax_kernel(
    output_ptr,
    input_ptr,
    input_row_stride,
    output_row_stride,
    n_rows,
    n_cols,
    BLOCK_SIZE: tl.constexpr,
    num_stages: tl.constexpr,
):
    # The official tutorial's kernel (triton-lang.org, "Fused Softmax"), unchanged.
    row_start = tl.program_id(0)
    row_step = tl.num_programs(0)
    for row_idx in tl.range(row_start, n_rows, row_step, num_stages=num_stages):
        row_start_ptr = input_ptr + row_idx * input_row_stride
        col_offsets = tl.arange(0, BLOCK_SIZE)
        input_ptrs = row_start_ptr + col_offsets
        mask = col_offsets < n_cols
        row = tl.load(input_ptrs, mask=mask, other=-float("inf"))
        row_minus_max = row - tl.max(row, axis=0)
        numerator = tl.exp(row_minus_max)
        denominator = tl.sum(numerator, axis=0)
        softmax_output = numerator / denominator
        output_row_start_ptr = output_ptr + row_idx * output_row_stride
        output_ptrs = output_row_start_ptr + col_offsets
        tl.store(output_ptrs, softmax_output, mask=mask)


_TUTORIAL_KERNELS: dict = {}


def tutorial_softmax(x: torch.Tensor) -> torch.Tensor:
    """The tutorial's wrapper: 2-D contiguous input, 8 warps, a persistent grid sized from the
    compiled kernel's registers and shared memory, compiled kernels cached by BLOCK_SIZE."""
    if not ON_GPU:
        raise RuntimeError("the tutorial's wrapper reads the GPU's properties: it runs on a GPU only.")
    n_rows, n_cols = x.shape
    if n_cols > 16384:
        raise ValueError("the tutorial kernel cannot hold rows this long in one block")
    BLOCK_SIZE = triton.next_power_of_2(n_cols)
    num_warps = 8
    props = torch.cuda.get_device_properties(x.device)
    size_smem, num_regs, num_sm = (
        props.shared_memory_per_multiprocessor,
        props.regs_per_multiprocessor,
        props.multi_processor_count,
    )
    num_stages = 4 if size_smem > 200000 else 2
    y = torch.empty_like(x)
    key = (BLOCK_SIZE, x.dtype)
    kernel, num_programs = _TUTORIAL_KERNELS.get(key, (None, 0))
    if kernel is None:
        kernel = tutorial_softmax_kernel.warmup(
            y,
            x,
            x.stride(0),
            y.stride(0),
            n_rows,
            n_cols,
            BLOCK_SIZE=BLOCK_SIZE,
            num_stages=num_stages,
            num_warps=num_warps,
            grid=(1,),
        )
        kernel._init_handles()
        occupancy = num_regs // (kernel.n_regs * 32 * num_warps)
        if kernel.metadata.shared:
            occupancy = min(occupancy, size_smem // kernel.metadata.shared)
        num_programs = num_sm * occupancy
        _TUTORIAL_KERNELS[key] = (kernel, num_programs)
    num_programs = min(num_programs, n_rows)
    kernel[(num_programs, 1, 1)](y, x, x.stride(0), y.stride(0), n_rows, n_cols, BLOCK_SIZE, num_stages)
    return y


try:  # Liger-Kernel's softmax, when installed
    import warnings

    with warnings.catch_warnings():  # its import pulls in tqdm.auto, which warns in a notebook without ipywidgets
        warnings.filterwarnings("ignore", message="IProgress not found")
        from liger_kernel.ops.softmax import LigerSoftmaxFunction as _Liger

    def liger_softmax(x: torch.Tensor) -> torch.Tensor:
        """Liger-Kernel's Triton softmax (its forward only)."""
        return _Liger.apply(x)
except Exception:  # pragma: no cover - not installed on the CPU
    liger_softmax = None
