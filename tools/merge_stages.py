"""Where lesson 09's lane merge spends its time: the merge kernel cut short after each of its steps, on a GPU.

    python tools/merge_stages.py            # figures/data/topk_merge_stages_<gpu>.csv, about 4 minutes on an H100
    python tools/merge_stages.py --smoke    # any machine (CPU: the interpreter): each cut once on a tiny row

The merge of ``softmax_topk(x, 50)`` on the lane path (``helpers.kernels.topk_lanes.lane_merge_kernel``) is a chain
of dependent steps, one program a row. This script copies that kernel's source and adds a constexpr ``STOP``: the
copy returns after step ``STOP``, having stored a value that depends on everything computed so far (so that the
compiler removes nothing before it, and adds no reduction of its own). Each copy is timed alone in a CUDA graph
(``do_bench_cudagraph``, one round not kept, then 3 rounds interleaved), launched on the lane arrays that the library's own slice kernel
stored: the arguments are captured from a real ``softmax_topk`` call, so the copies see exactly what the
library's merge sees. The steps (``stop``, ``step``):

- 0 ``launch``: the program starts and stores one value (a kernel that does nothing costs this much);
- 1 ``pair``: the slices' pairs (m, d) loaded and merged;
- 2 ``lanes``: the three lane arrays loaded (max, bound, column);
- 3 ``search``: T found, bit by bit;
- 4 ``lists``: the kept and the unclean lanes listed (a running count, stores, a barrier);
- 5 ``kept chunks``: the kept lanes' chunks read again, their logits >= T stored as keys;
- 6 ``unclean lanes``: the unclean lanes read again;
- 7 ``sort``: the top K of the candidates, sorted (stored as logits and columns);
- 9 ``probabilities``: the merge as the library runs it, uncut (probabilities stored).

``graph_us`` of stop s minus that of the stop before it is what step s adds to the chain. ``library`` is the
library's merge kernel, unchanged, timed in the same rounds (stop 9 should match it). A cut program never runs
the steps after its stop, so each row is what a merge ending there costs; nothing here is faster than the kernel.
``softmax_topk`` and ``copy`` (``y.copy_(x)``) are timed in the same rounds for scale.
"""

from __future__ import annotations

import argparse
import atexit
import functools
import importlib.util
import inspect
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from helpers import gpu_data  # noqa: E402
from helpers.kernels import sampling, topk_lanes  # noqa: E402
from helpers.mode import DEVICE, ON_GPU  # noqa: E402

SHAPES = [
    (1, 256000, "float32"),
    (8, 128256, "float32"),
    (64, 256000, "float32"),
    (256, 128256, "float32"),
    (256, 256000, "float32"),
    (256, 256000, "bfloat16"),
]
STEPS = {
    0: "launch",
    1: "pair",
    2: "lanes",
    3: "search",
    4: "lists",
    5: "kept chunks",
    6: "unclean lanes",
    7: "sort",
    9: "probabilities",
}
# A store that keeps values alive without a reduction: predicated on a value no lane holds, so it never writes.
KEEP = "tl.store(out_ptr + row * k + lane * 0, {v}.to(out_ptr.dtype.element_ty), mask={v} == 1.2345e-38)"
# (the line after which each cut goes, the cut's stores); out_ptr + row * k is the row's first output.
CUTS = [
    ("row = tl.program_id(0).to(tl.int64)", ["tl.store(out_ptr + row * k, (row * 0).to(out_ptr.dtype.element_ty))"]),
    (
        "d = tl.sum(d_s * tl.exp2((m_s - m) * scale_log2e), 0)",
        ["tl.store(out_ptr + row * k, (m + d).to(out_ptr.dtype.element_ty))"],
    ),
    (
        "u = tl.where(real, ordered_bits(lane_max), -2**31)",
        [
            KEEP.format(v="(lane_max + lane_v2 + lane_col.to(tl.float32))"),
            "tl.store(out_ptr + row * k, (m + d).to(out_ptr.dtype.element_ty))",
        ],
    ),
    (
        "T = (t - 2**31).to(tl.int32)",
        [
            KEEP.format(v="(lane_v2 + lane_col.to(tl.float32))"),
            "tl.store(out_ptr + row * k, (m + d + T.to(tl.float32)).to(out_ptr.dtype.element_ty))",
        ],
    ),
    (
        "tl.debug_barrier()  # the buffers, written by all threads, are read below",
        ["tl.store(out_ptr + row * k, (m + d + (n_keep + n_unclean).to(tl.float32)).to(out_ptr.dtype.element_ty))"],
    ),
    (
        "count = tl.sum(chit.to(tl.int32), 0) + tl.where(n_keep > CAP, CAP + 1, 0)  # an overflow stays one",
        ["tl.store(out_ptr + row * k, (m + d + count.to(tl.float32)).to(out_ptr.dtype.element_ty))"],
    ),
    (
        None,
        ["tl.store(out_ptr + row * k, (m + d + count.to(tl.float32)).to(out_ptr.dtype.element_ty))"],
    ),  # before the sort
    (
        "col = key_column(top)",
        [
            "tl.store(out_ptr + row * k + tl.arange(0, K), v.to(out_ptr.dtype.element_ty), mask=tl.arange(0, K) < k)",
            "tl.store(idx_ptr + row * k + tl.arange(0, K), col, mask=tl.arange(0, K) < k)",
        ],
    ),
]
SORT_LINE = "    if (count <= CAP) & (n_unclean <= UNCLEAN_CAP):"


def staged_source(src: str) -> str:
    """lane_merge_kernel's source with a constexpr STOP and a return after each step (ValueError if the
    kernel no longer has the lines the cuts go after: the lesson changed it, and so must this script)."""
    src = src.replace("def lane_merge_kernel(", "def lane_merge_stages_kernel(", 1)
    if "    PDL: tl.constexpr," not in src:
        raise ValueError("lane_merge_kernel has no `PDL: tl.constexpr,` parameter line to add STOP before")
    src = src.replace("    PDL: tl.constexpr,", "    STOP: tl.constexpr,\n    PDL: tl.constexpr,", 1)
    for stop, (anchor, stores) in reversed(list(enumerate(CUTS))):
        if anchor is None:
            anchor_at = src.find(SORT_LINE)
            if anchor_at < 0:
                raise ValueError(f"lane_merge_kernel has no line {SORT_LINE.strip()!r}: update tools/merge_stages.py")
            at, indent = anchor_at, "    "
        else:
            if src.count(anchor) != 1:
                raise ValueError(
                    f"lane_merge_kernel has {src.count(anchor)} lines with {anchor!r}, not one: "
                    f"update tools/merge_stages.py's cuts to the lesson's kernel"
                )
            i = src.index(anchor)
            line_start = src.rindex("\n", 0, i) + 1
            indent = src[line_start:i]
            at = src.index("\n", i) + 1
        cut = "".join(
            f"{indent}{line}\n" for line in [f"if STOP == {stop}:"] + ["    " + s for s in stores] + ["    return"]
        )
        src = src[:at] + cut + src[at:]
    return src


@functools.cache
def staged_kernel():
    """The cut copy, compiled from a file (Triton reads a kernel's source back from where it was defined); written
    once a run: the cuts are the same at every shape."""
    src = inspect.getsource(topk_lanes.lane_merge_kernel.fn)
    src = staged_source(src)
    names = sorted(
        n
        for n in vars(topk_lanes)
        if not n.startswith("_") and n != "lane_merge_kernel" and re.search(rf"\b{n}\b", src)
    )
    folder = tempfile.mkdtemp(prefix="merge_stages_")
    # Triton (and its interpreter, at a kernel's first call) reads the source back from the file, so it stays
    # until the process ends, and goes then.
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    path = Path(folder) / "merge_stages_kernel.py"
    path.write_text(
        "import triton\nimport triton.language as tl\n"
        f"from helpers.kernels.topk_lanes import {', '.join(names)}\n\n\n{src}"
    )
    spec = importlib.util.spec_from_file_location("merge_stages_kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.lane_merge_stages_kernel


def captured_merge(x, k=50):
    """Run softmax_topk(x, k) once and return (its values, indices, a function that launches the library's
    merge again with the same arguments, or a cut copy of it with STOP=stop). Without programmatic dependent
    launch: the merge runs alone."""
    seen = {}
    real = topk_lanes.lane_merge_kernel

    class Recorder:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                seen.update(grid=grid, args=args, kwargs=kwargs)
                return real[grid](*args, **kwargs)

            return launch

    topk_lanes.lane_merge_kernel = Recorder()
    sampling._CALLS.clear()  # a ready function made before would not launch through the recorder
    try:
        values, indices = sampling.softmax_topk(x, k)
    finally:
        topk_lanes.lane_merge_kernel = real
        sampling._CALLS.clear()  # nor may the one made now, through it, serve later calls
    if not seen:
        raise RuntimeError(f"softmax_topk({tuple(x.shape)}, {k}) did not take the lane kernels")
    kwargs = {key: v for key, v in seen["kwargs"].items() if key != "launch_pdl"}
    kwargs["PDL"] = False
    staged = staged_kernel()

    def merge(stop=None):
        if stop is None:
            return real[seen["grid"]](*seen["args"], **kwargs)
        return staged[seen["grid"]](*seen["args"], **kwargs, STOP=stop)

    return values, indices, merge, kwargs


def smoke() -> int:
    """Each cut once on two small rows (the lane path); the uncut copy must give the library's answer."""
    x = torch.randn(2, 20000, generator=torch.Generator().manual_seed(0)).mul(3).to(DEVICE)
    values, indices, merge, _ = captured_merge(x)
    for stop in STEPS:
        merge(stop)
        print(f"stop {stop} ({STEPS[stop]}): ran")
    v2, i2 = sampling.softmax_topk(x, 50)
    merge(9)  # the uncut copy writes the same outputs again
    same = torch.equal(v2, values) and torch.equal(i2, indices)
    print("uncut copy gives the library's answer:", same)
    return 0 if same else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/merge_stages.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="CSV path (default figures/data/topk_merge_stages_<gpu>.csv)")
    ap.add_argument("--smoke", action="store_true", help="run each cut once on a tiny row; time nothing")
    args = ap.parse_args(argv)
    if args.smoke:
        return smoke()
    if not ON_GPU:
        print("tools/merge_stages.py measures on a GPU, and this machine has none: try --smoke.", file=sys.stderr)
        return 2
    from helpers.measure import gpu_ms, interleaved, rounded, warm_up_gpu

    warm_up_gpu()
    t0 = time.time()
    rows = []
    for M, N, dtype in SHAPES:
        x = (3 * torch.randn((M, N), generator=torch.Generator(device="cuda").manual_seed(0), device="cuda")).to(
            getattr(torch, dtype)
        )
        values, indices, merge, kw = captured_merge(x)
        ref = torch.softmax(x.double(), -1).topk(50)
        err = (values.double() - ref.values).abs().max().item()
        assert err < (1e-5 if dtype == "float32" else 1e-2), f"softmax_topk off by {err:.1e} at {M} x {N} {dtype}"
        y = torch.empty_like(x)
        fns = {
            **{STEPS[s]: (lambda s=s: merge(s)) for s in STEPS},
            "library": lambda: merge(None),
            "softmax_topk": lambda: sampling.softmax_topk(x, 50),
            "copy": lambda: y.copy_(x),
        }
        for fn in fns.values():  # one call of each first, not kept (compilation, clocks, caches)
            gpu_ms(fn)
        timed = interleaved(fns)  # name -> (median ms, spread) over 3 rounds, each timing every cut once in turn
        for name, (ms, sp) in timed.items():
            stop = next((s for s, n in STEPS.items() if n == name), "")
            rows.append(
                dict(
                    dtype=dtype,
                    M=M,
                    N=N,
                    stop=stop,
                    step=name,
                    graph_us=ms * 1e3,
                    spread=sp,
                    lanes=kw["LANES"],
                    merge_warps=kw["num_warps"],
                    err=err,
                )
            )
        print(f"{M} x {N} {dtype}: " + ", ".join(f"{n} {ms * 1e3:.2f}" for n, (ms, _) in timed.items()), flush=True)
    cmd = "python " + " ".join(["tools/merge_stages.py"] + (argv if argv is not None else sys.argv[1:]))
    out = Path(args.out) if args.out else gpu_data.DATA_DIR / f"topk_merge_stages_{gpu_data.gpu_short_name()}.csv"
    gpu_data.write_csv(out, rounded(rows, 4), gpu_data.provenance(cmd))
    print(f"wrote {out} ({len(rows)} rows) in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
