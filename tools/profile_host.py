"""Where the host time of one `helpers.softmax` call goes, piece by piece (GPU only).

    python tools/profile_host.py [M N]     # microseconds per call of each piece, best of 5 loops of 2000
"""
import sys

import torch

import helpers
import helpers.kernels.dispatch as D
from helpers.launch import _get_device, _option_key, _raw_stream
from helpers.measure import host_us


def us(fn):
    return host_us(fn, calls=2000, loops=5)


def main():
    M, N = (int(a) for a in sys.argv[1:3]) if len(sys.argv) > 2 else (4096, 256)
    x = torch.randn(M, N, device="cuda")
    helpers.softmax(x)
    w = D._softmax
    key = next(k for k in w.cache if k[1] == x.shape)
    entry = w.cache[key]
    cells = dict(zip(entry.__code__.co_freevars, (c.cell_contents for c in entry.__closure__)))
    launch, rest, packed, f_ = cells["launch"], cells["rest"], cells["packed"], cells["fn"]
    g, coop, pdl = (cells["gx"], cells["gy"], cells["gz"]), cells["coop"], cells["pdl"]
    out = torch.empty_like(x)
    op, xp = out.data_ptr(), x.data_ptr()
    pieces = {
        "torch.softmax(x)": lambda: torch.softmax(x, -1),
        "helpers.softmax(x)": lambda: helpers.softmax(x),
        "_softmax(x) (RowSoftmax.__call__)": lambda: w(x),
        "entry(x) (the cached direct call)": lambda: entry(x),
        "key tuple": lambda: (x.dtype, x.shape, x.stride(), x.get_device(), x.is_cuda, x.is_cpu,
                              x.data_ptr() % 16 == 0, _option_key(())),
        "cache lookup": lambda: w.cache[key],
        "_cuda_getDevice()": lambda: _get_device(),
        "raw stream": lambda: _raw_stream(0),
        "torch.empty_like(x)": lambda: torch.empty_like(x),
        "launch only (cached arguments)": lambda: launch(*g, _raw_stream(0), f_, coop, pdl, None, None, packed, None,
                                                         None, None, op, xp, *rest),
        "x.data_ptr()": lambda: x.data_ptr(),
        "x.requires_grad + grad enabled": lambda: x.requires_grad and torch.is_grad_enabled(),
        "torch.compiler.is_compiling()": lambda: torch.compiler.is_compiling(),
    }
    for name, f in pieces.items():
        print(f"{name:38s} {us(f):7.3f} us")


if __name__ == "__main__":
    main()
