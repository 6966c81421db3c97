"""Predicted against measured GPU time for the course's kernels, from the bytes the interpreter counts.

    python tools/traffic_table.py --gpu h200 --out figures/data/traffic_prediction_h200.csv   # any machine (CPU)

For each kernel the GPU recording timed (``bench_<gpu>.csv``: fused, online, persistent, split;
``backward_<gpu>.csv``: the backward, its rows of up to 32768 columns, where the GPU's kernels read y and dy once as
the tiled kernel does; not the cooperative kernels of longer rows, whose programs wait for each other, which the
interpreter's programs, run one after another, cannot: there the library takes a kernel of two passes instead) at each recorded shape, it runs the library's wrapper under Triton's interpreter
on one row of that shape (two for the split kernels, whose programs share rows), counts the bytes every load and
store moves (``helpers.traffic.counting``), scales them to the recorded rows, and predicts a GPU time at the speed the
recorded copy reached on the same number of bytes (``helpers.traffic.predict``). One row per (kernel, dtype, M, N):
the counted bytes, the predicted and the measured µs (GPU time, the recording's ``graph_ms``), their ratio, and the
caveats that apply. Must run under the interpreter (it sets ``TRITON_INTERPRET=1`` itself, before helpers).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"  # counting runs in the interpreter, even on a GPU machine
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import helpers  # noqa: E402
from helpers import data, gpu_data, traffic  # noqa: E402
from helpers.kernels.backward import softmax_backward_tiled  # noqa: E402

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
FORWARD = {
    "fused": helpers.softmax_fused,
    "online": helpers.softmax_online,
    "persistent": helpers.softmax_persistent,
    "split": helpers.softmax_split,
}
ONE_PROGRAM_A_ROW = {"fused", "online"}


def counted_bytes(kernel: str, dtype: torch.dtype, M: int, N: int) -> tuple[int, int, int]:
    """(bytes the kernel moves on M rows of N, bytes of the tensors it reads, rows counted): counted on a few rows,
    scaled to M."""
    rows = min(M, 2 if kernel.startswith("split") else 1)
    gen = torch.Generator().manual_seed(N)
    x = torch.randn(rows, N, generator=gen).to(dtype)
    if kernel == "backward":
        y = torch.softmax(x.float(), -1).to(dtype)
        dy = torch.randn(rows, N, generator=gen).to(dtype)
        with traffic.counting(y=y, dy=dy) as t:
            softmax_backward_tiled(y, dy)
    else:
        with traffic.counting(x=x) as t:
            FORWARD[kernel](x)
    read_once = sum(t.sizes[n] for n in t.names if t.read[n])
    return t.bytes * M // rows, read_once * M // rows, rows


def rows(gpu: str, only: set | None = None, max_n: int | None = None) -> list[dict]:
    bench = data.load("bench", gpu=gpu)
    back = data.load("backward", gpu=gpu)
    cases = [
        (r.provider, r.dtype, int(r.M), int(r.N), float(r.graph_ms))
        for r in bench.itertuples()
        if r.provider in FORWARD and str(r.status if "status" in bench else "ok").startswith("ok")
    ]
    cases += [
        ("backward", r.dtype, int(r.M), int(r.N), float(r.graph_ms))
        for r in back.itertuples()
        if r.provider == "course" and str(r.status).startswith("ok") and r.N <= 32768
    ]
    out = []
    for kernel, dt, M, N, graph_ms in cases:
        if (only and kernel not in only) or (max_n and N > max_n) or dt not in DTYPES:
            continue
        nbytes, read_once, counted_rows = counted_bytes(kernel, DTYPES[dt], M, N)
        p = traffic.predict(nbytes, gpu, programs=M if kernel in ONE_PROGRAM_A_ROW else None, tensors_read=read_once)
        measured_us = graph_ms * 1e3
        out.append(
            {
                "kernel": kernel,
                "dtype": dt,
                "M": M,
                "N": N,
                "counted_rows": counted_rows,
                "bytes": nbytes,
                "copy_gbps": round(p["GB/s"], 1),
                "predicted_us": round(p["us"], 2),
                "measured_us": round(measured_us, 2),
                "ratio": round(p["us"] / measured_us, 3),
                "caveats": "; ".join(p["caveats"]),
            }
        )
        print(
            f"{kernel:10s} {dt:9s} {M:5d} x {N:7d}: predicted {p['us']:9.2f} µs, measured {measured_us:9.2f} µs, "
            f"ratio {p['us'] / measured_us:.2f} {('(' + ', '.join(p['caveats']) + ')') if p['caveats'] else ''}",
            flush=True,
        )
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", default="h200", choices=("h100", "h200"))
    ap.add_argument("--out", help="write the table here (CSV with provenance)")
    ap.add_argument("--kernels", help="comma-separated subset (fused,online,persistent,split,backward)")
    ap.add_argument("--max-n", type=int, help="skip rows longer than this (a quick run)")
    a = ap.parse_args(argv)
    table = rows(a.gpu, set(a.kernels.split(",")) if a.kernels else None, a.max_n)
    if a.out:
        measured = data.load("bench", gpu=a.gpu).attrs["provenance"]
        meta = {k: str(measured.get(k, "?")).split(" (")[0] for k in ("gpu", "driver", "torch", "triton", "date")}
        meta["commit"] = gpu_data.provenance()["commit"]
        meta["command"] = "python tools/traffic_table.py " + " ".join(argv if argv is not None else sys.argv[1:])
        meta["measured"] = (
            f"graph_ms of bench_{a.gpu}.csv and backward_{a.gpu}.csv (GPU time; those files' headers say when and how)"
        )
        meta["predicted"] = (
            "bytes counted under Triton's interpreter (helpers.traffic.counting) on the CPU, Triton "
            f"{gpu_data.provenance()['triton']}, at the speed of the recorded copy on as many bytes"
        )
        gpu_data.write_csv(a.out, table, meta)
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
