"""Quick correctness check of every kernel on the active device (GPU or interpreter).

python tools/gpu_smoke.py   -> one line per failing (kernel, dtype, case), then 'N passed, N failed'.
"""

import sys

import torch

import helpers as h
from helpers.kernels import softmax_tiled

KERNELS = {
    "fused": h.softmax_fused,
    "three_pass": h.softmax_three_pass,
    "online": h.softmax_online,
    "online_b64": lambda x: h.softmax_online(x, block_size=64),
    "persistent": h.softmax_persistent,
    "tiled": softmax_tiled,
    "split": h.softmax_split,
    "split_coop": h.softmax_split_coop,
    "softmax": h.softmax,
}


def cases(dtype):
    g = torch.Generator().manual_seed(0)
    r = lambda *s: (torch.randn(*s, generator=g) * 4).to(dtype).to(h.DEVICE)
    yield "1823x781", r(1823, 781)
    yield "1x4", r(1, 4)
    yield "4x1", r(4, 1)
    yield "128x256", r(128, 256)
    yield "batched 3x5x300", r(3, 5, 300)
    yield "transposed", r(300, 70).t()
    yield "col-strided", r(64, 1000)[:, ::3]
    yield "permuted 3-D", r(4, 6, 90).permute(1, 0, 2)
    x = r(6, 200)
    x[0, 5], x[2, 7] = float("inf"), float("nan")
    x[1, :] = float("-inf")
    x[3, :100] = float("-inf")
    x[4, 150] = 1000.0
    yield "special", x
    yield "long 2x70000", r(2, 70000)
    yield "long 3x200000", r(3, 200000)


def main():
    ok = bad = 0
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        for cname, x in cases(dtype):
            for kname, fn in KERNELS.items():
                if x.shape[-1] > h.MAX_FUSED_COLS and kname in ("fused", "persistent", "tiled"):
                    continue
                x0 = x.clone()
                try:
                    for _ in range(2):  # the first call resolves the plan, the second takes the cached path
                        y = fn(x)
                        h.assert_matches_reference(y, x)
                    assert torch.equal(x.nan_to_num(), x0.nan_to_num()), "input modified"
                    assert y.dtype == x.dtype and y.shape == x.shape and y.device == x.device
                    ok += 1
                except Exception as e:
                    bad += 1
                    print(
                        f"FAIL {kname:11} {str(dtype):15} {cname:16} {type(e).__name__}: {str(e).splitlines()[0][:150]}"
                    )
    print(h.banner())
    print(f"{ok} passed, {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
