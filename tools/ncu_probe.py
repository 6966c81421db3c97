"""Hardware counters (Nsight Compute) for the cases the performance notes explain.

    python tools/ncu_probe.py OUT_DIR            # runs ncu once per case, writes OUT_DIR/ncu_<case>.csv
    python tools/ncu_probe.py --case NAME        # what ncu profiles: one warm-up call, then one measured call

Each case calls a course wrapper (or a copy) twice; ncu skips the first call's kernels (compilation
and warm-up) and records the second's with the SpeedOfLight, MemoryWorkloadAnalysis, Occupancy and
WarpStateStats sections, clocks left as they are (``--clock-control none``). Nsight Compute's
default cache control flushes L2 before each profiled kernel (the recorded ncu_h100.csv was taken
so): every kernel starts cold, so reuse of data between two launches is not visible; pass
``NCU_CACHE_CONTROL=none`` in the environment to profile with the caches as the previous kernel
left them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# name -> (dtype, M, N, wrapper, kernels per call)
CASES = {
    "small_fp32_256": ("float32", 4096, 256, "softmax", 1),
    "small_bf16_256": ("bfloat16", 4096, 256, "softmax", 1),
    "bf16_1024": ("bfloat16", 4096, 1024, "softmax", 1),
    "copy_fp32_256": ("float32", 4096, 256, "copy", 1),
    "coop_fp32_8x1M": ("float32", 8, 1048576, "softmax", 1),
    "coop_bf16_8x1M": ("bfloat16", 8, 1048576, "softmax", 1),
    "coop_bf16_64x256K": ("bfloat16", 64, 262144, "softmax", 1),
    "coop_fp32_1024x64K": ("float32", 1024, 65536, "softmax", 1),
    "split_fp32_32MiB": ("float32", 128, 65536, "split", 2),
    "split_fp32_256MiB": ("float32", 1024, 65536, "split", 2),
    "bwd_bf16_64x256K": ("bfloat16", 64, 262144, "backward", 1),
    "bwd_bf16_256x256000": ("bfloat16", 256, 256000, "backward", 1),
    "bwd_bf16_1024x64K": ("bfloat16", 1024, 65536, "backward", 1),
    "bwd_fp32_8x1M": ("float32", 8, 1048576, "backward", 1),
    "copy_bf16_64x256K": ("bfloat16", 64, 262144, "copy", 1),
}
SECTIONS = ["SpeedOfLight", "MemoryWorkloadAnalysis", "Occupancy", "WarpStateStats", "LaunchStats"]


def run_case(name: str) -> None:
    sys.path.insert(0, str(ROOT))
    import torch

    import helpers

    d, M, N, what, _ = CASES[name]
    x = torch.randn(M, N, device="cuda", dtype=getattr(torch, d))
    y = torch.empty_like(x)
    if what == "backward":  # y = softmax(x) and a random dy, made before the profiled calls
        y = torch.softmax(x.float(), -1).to(x.dtype)
        dy = torch.randn_like(x)
    fn = {
        "softmax": helpers.softmax,
        "split": helpers.softmax_split,
        "copy": lambda t: y.copy_(t),
        "backward": lambda t: helpers.softmax_backward(y, dy),
    }[what]
    fn(x)
    torch.cuda.synchronize()
    fn(x)
    torch.cuda.synchronize()


def main(argv) -> int:
    if argv[:1] == ["--case"]:
        run_case(argv[1])
        return 0
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    for name, (_, _, _, what, per_call) in CASES.items():
        if len(argv) > 1 and name not in argv[1:]:
            continue
        # torch.randn's kernel is an elementwise one too: a copy case skips it and the warm-up copy.
        regex, skip = {"copy": ("regex:elementwise|copy", 2), "backward": ("regex:softmax_backward", per_call)}.get(
            what, ("regex:softmax", per_call)
        )
        cmd = [
            "ncu",
            "--clock-control",
            "none",
            "--cache-control",
            os.environ.get("NCU_CACHE_CONTROL", "all"),
            "--csv",
            "--page",
            "details",
            "--launch-skip",
            str(skip),
            "--launch-count",
            str(per_call),
            "--kernel-name",
            regex,
        ]
        for s in SECTIONS:
            cmd += ["--section", s]
        cmd += [sys.executable, str(Path(__file__).resolve()), "--case", name]
        res = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
        (out / f"ncu_{name}.csv").write_text(res.stdout)
        print(
            f"{name}: rc={res.returncode}, {len(res.stdout.splitlines())} lines"
            + (f"; stderr: {res.stderr.strip()[-300:]}" if res.returncode else ""),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
