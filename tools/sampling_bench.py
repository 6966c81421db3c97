"""Lesson 09's benchmark: softmax + top-k and sampling over a vocabulary, the course's one-read kernels
against what a PyTorch user writes, on a GPU.

    python tools/sampling_bench.py              # figures/data/sampling_<gpu>.csv, about 5 minutes on an H100
    python tools/sampling_bench.py --quick      # one round per timing
    python tools/sampling_bench.py --smoke      # any machine (CPU: the interpreter): tiny shapes, each
                                                # provider run and checked once, nothing timed or written

Shapes: M = 1, 8, 64, 256 rows of N = 32000, 128256, 151936, 256000 logits (x = 3 * randn), in float32
and bfloat16. Providers (``helpers.lesson09.PROVIDERS``):

- ``copy``: ``y.copy_(x)``; it moves 2·M·N elements, so the floor of a one-read method is half its time;
- ``course_softmax_topk``: ``softmax_topk(x, 50)`` (checked against float64 first);
- ``course_sample``: ``sample(x, temperature=0.7, top_k=50, top_p=0.9)``;
- ``course_topk_per_program``, ``course_topk_lanes``: lesson 09's two designs of ``softmax_topk(x, 50)``, each
  at every shape (``softmax_topk`` chooses between them with ``use_lanes``);
- ``course_softmax_topk_jit``, ``course_sample_jit``: the same two calls behind a wrapper written the obvious way
  (every call checks, plans and launches through ``kernel[grid](...)``; ``lesson09.every_call_planned``), where
  ``softmax_topk`` and ``sample`` keep a ready function per kind of call and call the compiled kernels directly;
- ``torch_softmax_topk``: ``torch.softmax(x.float(), -1).topk(50)``;
- ``torch_hf_sample``: Hugging Face's chain (temperature, top-k, top-p by sort and cumsum, multinomial);
- ``compile_softmax_topk``, ``compile_hf_sample``: ``torch.compile(..., dynamic=True)`` of the two;
- ``flashinfer_sample``: ``flashinfer.sampling.top_k_top_p_sampling_from_logits`` if it imports.

A provider that fails at a shape says so in ``status`` and is not timed. Each is timed three ways, in
rounds interleaved over the providers (medians kept, spreads = (max - min) / median of the rounds):
``graph_us`` (``do_bench_cudagraph``: GPU time alone), ``eager_us`` (``do_bench``: launches included,
L2 flushed between calls) and ``host_us`` (host time of one call, best of 3 loops with no sync).
``frac_of_one_read`` = (copy's graph time / 2) / graph time.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from helpers import gpu_data, lesson09  # noqa: E402
from helpers.mode import DEVICE, ON_GPU  # noqa: E402

MS = (1, 8, 64, 256)
NS = (32000, 128256, 151936, 256000)


def gpu_tag() -> str:
    name = torch.cuda.get_device_name()
    for tag in ("h100", "h200", "a100", "l40s"):
        if tag in name.lower():
            return tag
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def smoke() -> int:
    """Every provider that runs here, once, on tiny shapes; the course's against float64."""
    x = torch.randn(3, 300, generator=torch.Generator().manual_seed(0)).mul(3).to(DEVICE)
    names = [n for n in lesson09.PROVIDERS if n != "copy" and (ON_GPU or not n.startswith("compile"))]
    failed = 0
    for name, fn in lesson09.providers(names).items():
        if fn is None:
            print(f"{name}: not installed")
            continue
        try:
            out = fn(x)
            if name in lesson09.TOPK_CHECKED:
                err = (out[0].double() - torch.softmax(x.double(), -1).topk(50).values).abs().max().item()
                assert err < 1e-5, f"max abs error {err:.1e}"
            elif name.endswith("sample"):
                assert out.shape == (3,) and (x.topk(50).indices == out[:, None]).any(-1).all(), (
                    "a token outside the top 50"
                )
            print(f"{name}: ok")
        except Exception as e:
            failed += 1
            print(f"{name}: failed: {type(e).__name__}: {e}")
    return 1 if failed else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/sampling_bench.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="CSV path (default figures/data/sampling_<gpu>.csv)")
    ap.add_argument("--quick", action="store_true", help="one round per timing")
    ap.add_argument("--smoke", action="store_true", help="run each provider once on tiny shapes; time nothing")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument(
        "--providers",
        default=",".join(lesson09.PROVIDERS),
        help="comma-separated subset of " + ", ".join(lesson09.PROVIDERS) + " (copy is always timed)",
    )
    ap.add_argument("--ms", default=",".join(map(str, MS)), help="row counts M")
    ap.add_argument("--ns", default=",".join(map(str, NS)), help="row lengths N")
    args = ap.parse_args(argv)
    if args.smoke:
        return smoke()
    if not ON_GPU:
        print("tools/sampling_bench.py measures on a GPU, and this machine has none: try --smoke.", file=sys.stderr)
        return 2
    from helpers.measure import warm_up_gpu

    warm_up_gpu()
    t0 = time.time()
    shapes = [(int(m), int(n)) for m in args.ms.split(",") for n in args.ns.split(",")]
    names = ("copy",) + tuple(n for n in args.providers.split(",") if n and n != "copy")
    unknown = set(names) - set(lesson09.PROVIDERS)
    if unknown:
        ap.error(f"unknown providers {sorted(unknown)}: choose among {', '.join(lesson09.PROVIDERS)}")
    rows = lesson09.sampling_rows(shapes, dtypes=tuple(args.dtypes.split(",")), names=names, quick=args.quick)
    cmd = "python " + " ".join(["tools/sampling_bench.py"] + (argv if argv is not None else sys.argv[1:]))
    out = Path(args.out) if args.out else gpu_data.DATA_DIR / f"sampling_{gpu_tag()}.csv"
    gpu_data.write_csv(out, rows, gpu_data.provenance(cmd))
    print(f"wrote {out} ({len(rows)} rows) in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
