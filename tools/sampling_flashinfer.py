"""FlashInfer's sampling kernels beside lesson 09's ``sample``, on a GPU (issue #24's FlashInfer peer).

    python tools/sampling_flashinfer.py --check   # import, check the draws (top 50, frequencies); times nothing
    python tools/sampling_flashinfer.py           # figures/data/sampling_flashinfer_<gpu>.csv, about 3 minutes

FlashInfer is not one of the course's dependencies: install ``flashinfer-python`` (with ``apache-tvm-ffi``) to
run this. It compiles its CUDA sources with nvcc on first use (set FLASHINFER_CUDA_ARCH_LIST=9.0a on a Hopper
GPU to build one architecture): its sampling module in about 2 minutes on 16 cores, its top-k module in well
over 7. Without FlashInfer the script says so and exits with status 2. Where the top-k module cannot load (with
FLASHINFER_DISABLE_JIT=1 and no prebuilt copy, say), or with ``--no-radix``, FlashInfer's masked whole-row path
is timed at every N, and the CSV's ``flashinfer_path`` line says which path was timed.

Shapes and timings are ``tools/sampling_bench.py``'s: M = 1, 8, 64, 256 rows of N = 32000, 128256, 151936,
256000 logits (x = 3 * randn), float32 and bfloat16, timed by ``helpers.lesson09.sampling_rows`` (3 rounds
interleaved over the providers; GPU time from a CUDA graph, eager time, host time per call; spreads). Providers:

- ``copy``, ``course_sample``: as in ``tools/sampling_bench.py`` (``sample(x, temperature=0.7, top_k=50, top_p=0.9)``);
- ``flashinfer_sample``: the same draw from the same logits through FlashInfer's API,
  ``top_k_top_p_sampling_from_logits(x.float() / 0.7, 50, 0.9)``: the function takes float32 logits and no
  temperature, so the cast and the division are PyTorch ops inside the timed call;
- ``flashinfer_sample_scaled``: ``top_k_top_p_sampling_from_logits(z, 50, 0.9)`` on z = x.float() / 0.7 made
  once before timing: FlashInfer's kernels alone, as where the temperature is folded into the layer before.
  z is float32, so at bfloat16 it reads twice the bytes of x.

FlashInfer's calls get their seed and offset as device tensors (its documented way to run in a CUDA graph).
``--check`` (also run first by a recording) asserts each id is among the row's 50 largest logits, and compares
the frequencies of 8192 draws of one row with the exact top-k-then-top-p distribution (total variation
distance), for FlashInfer and for the course's ``sample``, at a vocabulary on each of FlashInfer's two paths
(below 65536 columns it masks the top k and samples the whole row; from 65536 on it selects the top k first).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from helpers import gpu_data, lesson09  # noqa: E402
from helpers.mode import ON_GPU  # noqa: E402

sys.path.insert(0, str(ROOT / "tools"))
from sampling_bench import MS, NS, gpu_tag  # noqa: E402

T, K, P = 0.7, 50, 0.9
NAMES = ("copy", "course_sample", "flashinfer_sample", "flashinfer_sample_scaled")


def check(fs) -> dict:
    """Draws inside the top K at every path, and frequencies against the exact distribution; raises on failure."""
    g = torch.Generator("cuda").manual_seed(0)
    out = {}
    for N in (32000, 128256):  # FlashInfer's two paths (the second is the first with --no-radix)
        x = torch.randn(8, N, device="cuda", generator=g).mul(3)
        top = x.topk(K).indices
        t0 = time.time()
        ids = fs.top_k_top_p_sampling_from_logits(x / T, K, P)
        torch.cuda.synchronize()
        first_s = time.time() - t0
        assert ids.shape == (8,), f"shape {tuple(ids.shape)}"
        assert (top == ids.long()[:, None]).any(-1).all(), f"N = {N}: a token outside the top {K}"
        rows = x[:1].expand(8192, N).contiguous()
        q = lesson09.exact_probs(x[0], T, K, P)  # the distribution `sample` draws from
        freq = lambda t: torch.bincount(t.long(), minlength=N).double() / t.numel()
        tv_fi = 0.5 * (freq(fs.top_k_top_p_sampling_from_logits(rows / T, K, P)) - q).abs().sum().item()
        tv_course = 0.5 * (freq(lesson09.sample(rows, temperature=T, top_k=K, top_p=P)) - q).abs().sum().item()
        kept = int((q > 0).sum())
        print(
            f"N = {N}: ids in the top {K} (first call {first_s:.1f} s); 8192 draws of one row ({kept} tokens kept): "
            f"total variation from the exact distribution {tv_fi:.4f} (FlashInfer), {tv_course:.4f} (course)"
        )
        assert tv_fi < 0.05, f"N = {N}: FlashInfer's frequencies are {tv_fi:.3f} away from the distribution"
        out[f"tv_{N}"] = f"flashinfer {tv_fi:.4f}, course {tv_course:.4f} ({kept} tokens kept)"
        for dt in (torch.bfloat16,):
            try:
                fs.top_k_top_p_sampling_from_logits(x.to(dt), K, P)
                torch.cuda.synchronize()
                print(f"N = {N}: {dt} logits accepted")
            except Exception as e:
                print(f"N = {N}: {dt} logits refused: {type(e).__name__}: {str(e)[:120]}")
    x = torch.randn(8, 32000, device="cuda", generator=g).mul(3)
    probs = fs.softmax(x, temperature=T)
    err = (probs.double() - torch.softmax(x.double() / T, -1)).abs().max().item()
    renorm = fs.top_k_renorm_probs(probs, K)
    print(
        f"softmax(x, temperature=0.7): max abs error {err:.1e}; top_k_renorm_probs: "
        f"{(renorm > 0).sum(-1).tolist()} nonzero, sums {[round(s, 5) for s in renorm.sum(-1).tolist()]}"
    )
    assert err < 1e-5 and (renorm > 0).sum(-1).eq(K).all()
    for N in (32000, 128256):
        x = torch.randn(8, N, device="cuda", generator=g).mul(3)
        for name, fn in lesson09.flashinfer_draws(fs).items():
            try:
                fn(x)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    fn(x)
                graph.replay()
                torch.cuda.synchronize()
                print(f"N = {N}, {name}: captured in a CUDA graph and replayed")
            except Exception as e:  # the recording then says "no CUDA graph" for it
                print(f"N = {N}, {name}: no CUDA graph: {type(e).__name__}: {str(e)[:120]}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/sampling_flashinfer.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="CSV path (default figures/data/sampling_flashinfer_<gpu>.csv)")
    ap.add_argument("--check", action="store_true", help="import and check FlashInfer's draws; time nothing")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--ms", default=",".join(map(str, MS)), help="row counts M")
    ap.add_argument("--ns", default=",".join(map(str, NS)), help="row lengths N")
    ap.add_argument(
        "--no-radix",
        action="store_true",
        help="keep FlashInfer off its radix top-k path (its masked whole-row path at every N)",
    )
    args = ap.parse_args(argv)
    if not ON_GPU:
        print("tools/sampling_flashinfer.py measures on a GPU, and this machine has none.", file=sys.stderr)
        return 2
    try:
        import flashinfer
        import flashinfer.sampling as fs
    except Exception as e:
        print(
            f"FlashInfer does not import here ({type(e).__name__}: {e}): pip install flashinfer-python.",
            file=sys.stderr,
        )
        return 2
    print(f"flashinfer {flashinfer.__version__}")
    no_radix = args.no_radix
    if not no_radix:
        try:  # the radix top-k path needs FlashInfer's topk module (minutes of nvcc the first time)
            fs.top_k_top_p_sampling_from_logits(torch.randn(2, 1 << 17, device="cuda"), K, P)
            torch.cuda.synchronize()
        except Exception as e:
            print(
                f"FlashInfer's radix top-k path does not run here ({type(e).__name__}: {str(e)[:160]}); "
                "timing its masked whole-row path at every N",
                file=sys.stderr,
            )
            no_radix = True
    if no_radix:  # a private setting of FlashInfer's: without it the CSV would name a path that was not timed
        if not hasattr(fs, "_TOP_K_FIRST_FAST_PATH_MIN_VOCAB"):
            print(
                f"flashinfer {flashinfer.__version__} has no _TOP_K_FIRST_FAST_PATH_MIN_VOCAB: this script cannot "
                "keep it off its radix top-k path; time its default path (without --no-radix) instead.",
                file=sys.stderr,
            )
            return 2
        fs._TOP_K_FIRST_FAST_PATH_MIN_VOCAB = 1 << 62
    checked = check(fs)
    if args.check:
        return 0
    from helpers.measure import warm_up_gpu

    warm_up_gpu()
    t0 = time.time()
    provs = {**lesson09.providers([n for n in NAMES if n in lesson09.PROVIDERS]), **lesson09.flashinfer_draws(fs)}
    shapes = [(int(m), int(n)) for m in args.ms.split(",") for n in args.ns.split(",")]
    rows = lesson09.sampling_rows(shapes, dtypes=tuple(args.dtypes.split(",")), provs=provs)
    cmd = "python " + " ".join(["tools/sampling_flashinfer.py"] + (argv if argv is not None else sys.argv[1:]))
    meta = {
        **gpu_data.provenance(cmd),
        "flashinfer": flashinfer.__version__,
        "flashinfer_path": "masked whole row at every N" if no_radix else "radix top-k first from 65536 columns",
        **checked,
    }
    out = Path(args.out) if args.out else gpu_data.DATA_DIR / f"sampling_flashinfer_{gpu_tag()}.csv"
    gpu_data.write_csv(out, rows, meta)
    print(f"wrote {out} ({len(rows)} rows) in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
