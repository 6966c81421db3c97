"""A learner's kernel that faults, hangs or reads the wrong rows, on a GPU: the checker says "wrong" with a hint, and
the notebook's own CUDA context lives on (the kernel ran in the sandbox's worker process, `helpers.sandbox`).

GPU only: on a CPU the interpreter runs these in the worker too (a far store crashes the worker, not the GPU), and
`tests/test_exercises_framework.py` covers that. Recorded once on an H100 (`figures/data/oob_gpu_demo_h100.csv`: the
worker's start and the cost of a launch through it).
"""

from __future__ import annotations

import contextlib
import io

import pytest
import torch
import triton
import triton.language as tl
from checking import variant

import helpers  # noqa: F401  (first: interpreter or GPU)
from helpers import exercises, lesson03_exercises
from helpers.mode import ON_GPU

pytestmark = pytest.mark.skipif(not ON_GPU, reason="a GPU's illegal-address fault and its CUDA context")

HANG_LIMIT = 15.0  # seconds for the endless kernel (the default is sandbox.KERNEL_TIMEOUT)


@triton.jit
def right_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, scale, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    z = tl.where(mask, x * scale, -float("inf"))
    numerator = tl.exp(z - tl.max(z, axis=0))
    tl.store(out_ptr + row * out_row_stride + cols, numerator / tl.sum(numerator, axis=0), mask=mask)


LOAD = "x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=0.0).to(tl.float32)"
STORE = "tl.store(out_ptr + row * out_row_stride + cols, numerator / tl.sum(numerator, axis=0), mask=mask)"
wrong_row_stride_kernel = variant(
    right_kernel,
    "wrong_row_stride_kernel",
    {
        LOAD: LOAD.replace("in_row_stride", "n_cols") + "  # n_cols is not the stride",
        STORE: STORE.replace("out_row_stride", "n_cols"),
    },
)
far_store_kernel = variant(
    right_kernel,
    "far_store_kernel",
    {
        STORE: "far = (row + 1) * (1 << 40)  # far outside any allocation\n"
        + STORE.replace("row * out_row_stride", "far")
    },
)


@triton.jit
def endless_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, scale, BLOCK_SIZE: tl.constexpr):
    i = 0
    while i < n_cols:  # i never grows
        tl.store(out_ptr + i, 0.0)
        i = i * 1


def parent_context_alive() -> str:
    """A torch op on this process's device, synchronized: 'alive' or the error."""
    try:
        y = torch.arange(1 << 20, device=helpers.DEVICE, dtype=torch.float32).sum()
        if helpers.DEVICE.type == "cuda":
            torch.cuda.synchronize()
        return "alive" if float(y) == float((1 << 20) * ((1 << 20) - 1) // 2) else f"wrong sum {float(y)}"
    except Exception as e:  # noqa: BLE001  (this is what the test looks for)
        return f"dead: {type(e).__name__}: {str(e).splitlines()[0][:120]}"


def through_checker(kernel) -> str:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        lesson03_exercises.check_3_3(kernel)
    return buf.getvalue().strip()


def through_runner(kernel, timeout=None) -> str:
    M, N = 4, 37
    x = exercises.guarded((M, N), fill=1.0, row_stride=40)
    out = exercises.guarded((M, N), fill=0.0, row_stride=48)
    try:
        exercises.run_learner_kernel(
            kernel,
            (M,),
            out,
            x,
            x.stride(0),
            out.stride(0),
            N,
            0.5,
            BLOCK_SIZE=triton.next_power_of_2(N),
            outputs=(out,),
            timeout=timeout,
        )
    except exercises.Wrong as e:
        return f"wrong: {e}"
    except Exception as e:  # noqa: BLE001
        return f"raised {type(e).__name__}: {str(e).splitlines()[0][:160]}"
    ok = torch.allclose(out.cpu(), torch.full((M, N), 1.0 / N), atol=1e-6)
    return "ran: output " + ("right" if ok else "wrong")


def caught(verdict: str) -> bool:
    return "wrong:" in verdict or verdict == "ran: output wrong"


@pytest.mark.parametrize("kernel", [wrong_row_stride_kernel, far_store_kernel], ids=["wrong_row_stride", "far_store"])
def test_a_wrong_kernel_is_wrong_and_the_context_lives(kernel):
    assert caught(through_checker(kernel))
    assert parent_context_alive() == "alive"
    assert caught(through_runner(kernel))
    assert parent_context_alive() == "alive"


def test_an_endless_kernel_is_stopped_and_the_context_lives():
    assert caught(through_runner(endless_kernel, timeout=HANG_LIMIT))
    assert parent_context_alive() == "alive"


def test_the_right_kernel_passes_after_them():
    assert "): correct" in through_checker(right_kernel)
    assert through_runner(right_kernel) == "ran: output right"
