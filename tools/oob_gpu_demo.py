"""A learner's out-of-bounds kernel on a GPU: "wrong" with a hint, and the notebook's CUDA context lives on.

    python tools/oob_gpu_demo.py OUT_DIR

Runs learner kernels for exercise 3.3 (a fused scaled softmax) through the real checker
(``helpers.lesson03.check_3_3``) and through ``helpers.exercises.run_learner_kernel``: one with a wrong
row stride (the row length instead of the tensor's stride), one that stores far outside its output
(on a GPU: an illegal-address fault), one whose loop never ends; after each, this process's own CUDA
context runs a torch op and synchronizes; then the right answer goes through the same checker.
Prints every verdict and writes OUT_DIR/oob_gpu_demo.csv (one row per step) with the provenance
header of ``helpers.gpu_data``. Runs on the CPU too (under the interpreter: the far store crashes the
worker process instead of faulting the GPU).
"""

from __future__ import annotations

import contextlib
import io
import sys
import time
from pathlib import Path

import helpers  # noqa: F401  (first: interpreter or GPU)
import torch
import triton
import triton.language as tl
from helpers import exercises, gpu_data, lesson03, sandbox

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


@triton.jit
def wrong_row_stride_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, scale,
                            BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)  # n_cols is not the stride
    z = tl.where(mask, x * scale, -float("inf"))
    numerator = tl.exp(z - tl.max(z, axis=0))
    tl.store(out_ptr + row * n_cols + cols, numerator / tl.sum(numerator, axis=0), mask=mask)


@triton.jit
def far_store_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, scale, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    z = tl.where(mask, x * scale, -float("inf"))
    numerator = tl.exp(z - tl.max(z, axis=0))
    far = (row + 1) * (1 << 40)  # far outside any allocation
    tl.store(out_ptr + far + cols, numerator / tl.sum(numerator, axis=0), mask=mask)


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
    except Exception as e:  # noqa: BLE001  (this is what the demo looks for)
        return f"dead: {type(e).__name__}: {str(e).splitlines()[0][:120]}"


def through_checker(kernel) -> str:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        lesson03.check_3_3(kernel)
    return buf.getvalue().strip()


def through_runner(kernel, timeout=None) -> str:
    M, N = 4, 37
    x = exercises.guarded((M, N), fill=1.0, row_stride=40)
    out = exercises.guarded((M, N), fill=0.0, row_stride=48)
    try:
        exercises.run_learner_kernel(kernel, (M,), out, x, x.stride(0), out.stride(0), N, 0.5,
                                     BLOCK_SIZE=triton.next_power_of_2(N), outputs=(out,), timeout=timeout)
    except exercises.Wrong as e:
        return f"wrong: {e}"
    except Exception as e:  # noqa: BLE001
        return f"raised {type(e).__name__}: {str(e).splitlines()[0][:160]}"
    ok = torch.allclose(out.cpu(), torch.full((M, N), 1.0 / N), atol=1e-6)
    return "ran: output " + ("right" if ok else "wrong")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__)
        return 2
    out_dir = Path(argv[1])
    meta = gpu_data.provenance("python tools/oob_gpu_demo.py " + argv[1])
    print(gpu_data.provenance_line(meta))
    rows = []

    def step(name, through, fn):
        t0 = time.perf_counter()
        verdict = fn()
        seconds = time.perf_counter() - t0
        ctx = parent_context_alive()
        rows.append({"step": name, "through": through, "verdict": " ".join(verdict.split()),
                     "seconds": round(seconds, 2), "parent_context": ctx})
        print(f"[{name} via {through}, {seconds:.1f} s] {verdict}\n    this process's {helpers.DEVICE.type}: {ctx}")

    t0 = time.perf_counter()
    sandbox.worker()
    startup = time.perf_counter() - t0
    print(f"worker started in {startup:.2f} s (pid {sandbox.worker().info['pid']}, mode {sandbox.worker().info['mode']})")
    step("wrong row stride", "check_3_3", lambda: through_checker(wrong_row_stride_kernel))
    step("wrong row stride", "run_learner_kernel", lambda: through_runner(wrong_row_stride_kernel))
    step("far out-of-bounds store", "check_3_3", lambda: through_checker(far_store_kernel))
    step("far out-of-bounds store", "run_learner_kernel", lambda: through_runner(far_store_kernel))
    step("endless loop", "run_learner_kernel", lambda: through_runner(endless_kernel, timeout=HANG_LIMIT))
    step("right answer", "check_3_3", lambda: through_checker(right_kernel))
    step("right answer", "run_learner_kernel", lambda: through_runner(right_kernel))
    laps = []
    for _ in range(5):
        t0 = time.perf_counter()
        through_runner(right_kernel)
        laps.append(time.perf_counter() - t0)
    per_launch = sorted(laps)[len(laps) // 2]
    print(f"per launch through the worker (right kernel, 4 x 37, median of 5): {per_launch * 1e3:.1f} ms")
    meta["worker_startup_s"] = round(startup, 2)
    meta["per_launch_ms"] = round(per_launch * 1e3, 1)
    path = gpu_data.write_csv(out_dir / "oob_gpu_demo.csv", rows, meta)
    print(f"wrote {path}")
    # A wrong kernel must get "wrong" (from the checker or the runner) or, where the runner has nothing to
    # object to (a wrong stride that stays inside the buffers), leave a wrong output; the right one must pass.
    def caught(v):
        return "wrong:" in v or v == "ran: output wrong"

    def passed(v):
        return "): correct" in v or v == "ran: output right"

    failures = [r for r in rows if r["parent_context"] != "alive"]
    failures += [r for r in rows if r["step"] != "right answer" and not caught(r["verdict"])]
    failures += [r for r in rows if r["step"] == "right answer" and not passed(r["verdict"])]
    print("OK: every wrong kernel got 'wrong', the right one passed, this process's context lived on" if not failures
          else f"NOT OK: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
