"""The probe that measured the launch path *before* the lean launch (issue #11), and chose it.

It runs against the course at commit 7d54e11 (`git worktree add /tmp/before 7d54e11`, copy this file
there): `helpers.softmax` and `helpers.softmax_fused` are that commit's wrappers. Its host-time
part is recorded in figures/data/probes/launch_probe_h100_7d54e11.csv (H100, 2026-11-22).

    python tools/probe_gpu.py OUT_DIR [--parts host,graph,occupancy,tiles,coop]

- host:      host microseconds per call of each way to launch the same compiled kernel (4096x256
             fp32 fused softmax), torch.softmax and torch.empty_like beside them (loops of 200 calls
             with no sync inside, best of 5).
- graph:     the direct launch and the cooperative kernel captured in a CUDA graph and replayed.
- occupancy: occupancy() against the CUDA occupancy API (cuOccupancyMaxActiveBlocksPerMultiprocessor)
             for compiled kernels, and the reserved shared memory per block.
- tiles:     the tiled kernel's candidate configurations in GPU time (do_bench_cudagraph), copy_
             timed the same way, M = 4096, N = 256 .. 32768, fp32 and bf16.
- coop:      the cooperative split kernel's (slice, warps) candidates on the long-row shapes.
Writes CSVs to OUT_DIR and prints a summary.
"""
from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.testing import do_bench_cudagraph

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import helpers  # noqa: E402
from helpers import kernels as K  # noqa: E402


def host_us(fn, n=200, loops=5):
    fn()
    torch.cuda.synchronize()
    best = math.inf
    for _ in range(loops):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        best = min(best, (t1 - t0) / n * 1e6)
    return best


def gpu_ms(fn, rep=25):
    return float(do_bench_cudagraph(fn, rep=rep, return_mode="median"))


def write(path, rows):
    if not rows:
        return
    keys = list(rows[0].keys())
    for r in rows:
        for k in r:
            if k not in keys:
                keys.append(k)
    with open(path, "w", newline="") as f:
        f.write(f"# gpu: {torch.cuda.get_device_name()}\n# torch: {torch.__version__}\n# triton: {triton.__version__}\n")
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)


def part_host(out):
    M, N = 4096, 256
    x = torch.randn(M, N, device="cuda")
    o = torch.empty_like(x)
    kern = K.softmax_fused_kernel
    kw = dict(BLOCK_SIZE=256, ACC=tl.float32, num_warps=4)
    args = (o, x, x.stride(0), x.stride(1), o.stride(0), N)
    c = kern.warmup(*args, grid=(M,), **kw)
    c._init_handles()
    dev = torch.cuda.current_device()
    from torch._C import _cuda_getCurrentRawStream as raw_stream
    run, fn_, pk = c.run, c.function, c.packed_metadata
    launch = run.launch
    coop, pdl = run.launch_cooperative_grid, run.launch_pdl
    print("launcher scratch sizes", run.global_scratch_size, run.profile_scratch_size, "arg names", kern.arg_names)
    ref = torch.softmax(x, -1)
    cache = {}
    key0 = (x.dtype, x.shape, x.stride(), x.get_device(), True)
    cache[key0] = (run, fn_, pk, (x.stride(0), x.stride(1), N, N, 256, None))

    def full_min(x):
        try:
            r, f, p, rest = cache[(x.dtype, x.shape, x.stride(), x.get_device(), x.data_ptr() % 16 == 0)]
        except KeyError:
            raise
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        r(M, 1, 1, raw_stream(dev), f, p, None, None, None, y.data_ptr(), x.data_ptr(), *rest)
        return y

    def full_min_emptylike(x):
        r, f, p, rest = cache[(x.dtype, x.shape, x.stride(), x.get_device(), x.data_ptr() % 16 == 0)]
        y = torch.empty_like(x)
        r(M, 1, 1, raw_stream(dev), f, p, None, None, None, y.data_ptr(), x.data_ptr(), *rest)
        return y

    def full_launch(x):
        r, f, p, rest = cache[(x.dtype, x.shape, x.stride(), x.get_device(), x.data_ptr() % 16 == 0)]
        y = torch.empty_like(x)
        launch(M, 1, 1, raw_stream(dev), f, coop, pdl, None, None, p, None, None, None, y.data_ptr(), x.data_ptr(), *rest)
        return y

    assert torch.allclose(full_min(x), ref, atol=1e-6)
    assert torch.allclose(full_launch(x), ref, atol=1e-6)
    cases = {
        "torch_softmax": lambda: torch.softmax(x, -1),
        "torch_empty_like": lambda: torch.empty_like(x),
        "torch_empty_shape": lambda: torch.empty(x.shape, dtype=x.dtype, device=x.device),
        "jit_launch": lambda: kern[(M,)](o, x, x.stride(0), x.stride(1), o.stride(0), N, **kw),
        "compiled_getitem": lambda: c[(M, 1, 1)](o, x, x.stride(0), x.stride(1), o.stride(0), N, 256, None),
        "run_tensors": lambda: run(M, 1, 1, raw_stream(dev), fn_, pk, None, None, None, o, x, N, 1, N, N, 256, None),
        "run_ints": lambda: run(M, 1, 1, raw_stream(dev), fn_, pk, None, None, None, o.data_ptr(), x.data_ptr(), N, 1, N, N, 256, None),
        "launch_ints": lambda: launch(M, 1, 1, raw_stream(dev), fn_, coop, pdl, None, None, pk, None, None, None,
                                      o.data_ptr(), x.data_ptr(), N, 1, N, N, 256, None),
        "key_only": lambda: cache[(x.dtype, x.shape, x.stride(), x.get_device(), x.data_ptr() % 16 == 0)],
        "wrapper_min_empty": lambda: full_min(x),
        "wrapper_min_emptylike": lambda: full_min_emptylike(x),
        "wrapper_launch_direct": lambda: full_launch(x),
        "helpers_softmax_before": lambda: helpers.softmax(x),
        "helpers_softmax_fused_before": lambda: helpers.softmax_fused(x),
    }
    rows = []
    for rnd in range(3):
        for name, fn in cases.items():
            rows.append(dict(case=name, round=rnd, host_us=round(host_us(fn), 3)))
    write(out / "probe_host.csv", rows)
    best = {}
    for r in rows:
        best[r["case"]] = min(best.get(r["case"], math.inf), r["host_us"])
    print("host us per call (best of 3 rounds):")
    for k, v in best.items():
        print(f"  {k:28s} {v:7.2f}")
    # GPU time of this one case, for the launch-bound comparison
    print("gpu time ms: copy", gpu_ms(lambda: o.copy_(x)), "softmax_fused", gpu_ms(lambda: full_min(x)),
          "torch.softmax", gpu_ms(lambda: torch.softmax(x, -1)))
    return full_min


def part_graph(out, full_min):
    x = torch.randn(4096, 256, device="cuda")
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        full_min(x)
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        y = full_min(x)
    x.copy_(torch.randn_like(x))
    g.replay()
    torch.cuda.synchronize()
    print("graph capture of the direct launch:", bool(torch.allclose(y, torch.softmax(x, -1), atol=1e-6)))
    xl = torch.randn(8, 1 << 20, device="cuda")
    try:
        yl0 = K.softmax_split_coop(xl)
        g2 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g2):
            yl = K.softmax_split_coop(xl)
        xl.copy_(torch.randn_like(xl) * 3)
        g2.replay()
        torch.cuda.synchronize()
        print("graph capture of the cooperative kernel:",
              bool(torch.allclose(yl, torch.softmax(xl, -1), atol=1e-6)), bool(torch.allclose(yl0, yl0)))
    except Exception as e:
        print("graph capture of the cooperative kernel FAILED:", type(e).__name__, str(e)[:300])


def part_occupancy(out):
    rows = []
    try:
        from cuda.bindings import driver as cu
    except Exception as e:
        print("no cuda.bindings:", e)
        return
    dev = torch.cuda.current_device()
    err, cudev = cu.cuDeviceGet(dev)
    err, reserved = cu.cuDeviceGetAttribute(cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, cudev)
    err, smem_sm = cu.cuDeviceGetAttribute(cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, cudev)
    err, smem_optin = cu.cuDeviceGetAttribute(cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, cudev)
    err, l2 = cu.cuDeviceGetAttribute(cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, cudev)
    err, clock = cu.cuDeviceGetAttribute(cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, cudev)
    err, bus = cu.cuDeviceGetAttribute(cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, cudev)
    props = K.gpu_props()
    print("reserved smem per block", reserved, "smem per SM", smem_sm, "optin", smem_optin, "l2", l2,
          "mem clock kHz", clock, "bus bits", bus, "props", props)
    for N, w, s in [(1024, 1, 4), (1024, 4, 2), (4096, 1, 3), (4096, 8, 2), (16384, 16, 1), (256, 1, 1), (2048, 2, 3)]:
        x = torch.randn(4096, N, device="cuda")
        info = K.persistent_launch_info(x, torch.empty_like(x), N, w, s)
        c = K.softmax_persistent_kernel.warmup(torch.empty_like(x), x, N, 1, N, 4096, N, BLOCK_SIZE=N, ACC=tl.float32,
                                               NUM_STAGES=s, num_warps=w, grid=(1,))
        c._init_handles()
        err, api = cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(cu.CUfunction(c.function), 32 * w, c.metadata.shared)
        rows.append(dict(N=N, num_warps=w, num_stages=s, n_regs=c.n_regs, shared=c.metadata.shared,
                         course=info["programs_per_sm"], course_limit=info["limited_by"], cuda_api=int(api),
                         reserved_smem=int(reserved)))
        print(rows[-1])
    write(out / "probe_occupancy.csv", rows)


def tile_candidates(block_n, es):
    lo, hi = (4, 64) if es == 4 else (8, 128)
    out = []
    for bm in (1, 2, 4, 8, 16, 32):
        if bm > 1 and bm * block_n * es > 65536:
            continue
        for w in (1, 2, 4, 8, 16, 32):
            e = bm * block_n // (32 * w)
            if bm * block_n < 32 * w or not (lo <= e <= hi):
                continue
            out.append((bm, w, 1, 0))
    if block_n >= 4096:
        for w in (8, 16, 32):
            e = block_n // (32 * w)
            if not (lo // 2 <= e <= hi):
                continue
            for pps, st in ((1, 2), (2, 2), (2, 3), (4, 2)):
                out.append((1, w, st, pps))
    return out


def part_tiles(out, dtypes=("float32", "bfloat16"), ns=(256, 512, 1024, 2048, 4096, 8192, 16384, 32768), M=4096):
    rows = []
    sms = K.gpu_props()["sm_count"]
    for d in dtypes:
        dtype = getattr(torch, d)
        es = torch.empty((), dtype=dtype).element_size()
        for N in ns:
            t0 = time.time()
            x = torch.randn(M, N, device="cuda", dtype=dtype)
            y = torch.empty_like(x)
            o = torch.empty_like(x)
            ref = torch.softmax(x.double(), -1)
            copy = gpu_ms(lambda: y.copy_(x))
            rows.append(dict(dtype=d, M=M, N=N, provider="copy", block_m="", num_warps="", num_stages="", pps="",
                             graph_ms=copy, graph_frac=1.0))
            ts = gpu_ms(lambda: torch.softmax(x, -1))
            rows.append(dict(dtype=d, M=M, N=N, provider="torch_softmax", block_m="", num_warps="", num_stages="",
                             pps="", graph_ms=ts, graph_frac=copy / ts))
            for bm, w, st, pps in tile_candidates(N, es):
                n_tiles = triton.cdiv(M, bm)
                grid = (min(n_tiles, sms * pps) if pps else n_tiles,)
                kw = dict(BLOCK_M=bm, BLOCK_N=N, ACC=tl.float32, NUM_STAGES=st, num_warps=w)
                f = lambda: K.softmax_tiled_kernel[grid](o, x, x.stride(0), x.stride(1), o.stride(0), M, N, **kw)
                row = dict(dtype=d, M=M, N=N, provider="tiled", block_m=bm, num_warps=w, num_stages=st, pps=pps)
                try:
                    o.fill_(float("nan"))
                    f()
                    torch.cuda.synchronize()
                    err = (o.double() - ref).abs().max().item()
                    if not err < 2e-2:
                        raise AssertionError(f"err {err}")
                    ms = gpu_ms(f)
                    row.update(graph_ms=ms, graph_frac=copy / ms)
                except Exception as e:
                    row.update(graph_ms="", graph_frac="", status=f"{type(e).__name__}: {str(e)[:80]}")
                rows.append(row)
            ok = sorted((r for r in rows if r["dtype"] == d and r["N"] == N and r["provider"] == "tiled"
                         and r.get("graph_frac") not in ("", None)), key=lambda r: -r["graph_frac"])
            print(f"{d} N={N}: copy {copy*1e3:.2f} us, torch {copy/ts:.3f}, best", [
                (r["block_m"], r["num_warps"], r["num_stages"], r["pps"], round(r["graph_frac"], 3)) for r in ok[:4]],
                f"({time.time()-t0:.0f} s)", flush=True)
            del x, y, o, ref
            torch.cuda.empty_cache()
    write(out / "probe_tiles.csv", rows)


def part_coop(out):
    rows = []
    for d in ("float32", "bfloat16"):
        dtype = getattr(torch, d)
        for M, N in [(1024, 65536), (256, 131072), (64, 262144), (8, 1048576)]:
            x = torch.randn(M, N, device="cuda", dtype=dtype)
            y = torch.empty_like(x)
            ref = torch.softmax(x.double(), -1)
            copy = gpu_ms(lambda: y.copy_(x))
            for sl, w in ((4096, 4), (4096, 8), (8192, 8), (8192, 16), (16384, 16), (16384, 32)):
                row = dict(dtype=d, M=M, N=N, slice=sl, num_warps=w)
                try:
                    f = lambda: K.softmax_split_coop(x, slice_cols=sl, num_warps=w)
                    err = (f().double() - ref).abs().max().item()
                    assert err < 2e-2, err
                    ms = gpu_ms(f)
                    row.update(graph_ms=ms, graph_frac=copy / ms)
                except Exception as e:
                    row.update(graph_ms="", graph_frac="", status=f"{type(e).__name__}: {str(e)[:80]}")
                rows.append(row)
            best = max((r for r in rows if r["dtype"] == d and r["N"] == N and r.get("graph_frac") not in ("", None)),
                       key=lambda r: r["graph_frac"], default=None)
            print(d, M, N, "best coop", best, flush=True)
            del x, y, ref
            torch.cuda.empty_cache()
    write(out / "probe_coop.csv", rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--parts", default="host,graph,occupancy,tiles,coop")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    parts = a.parts.split(",")
    print(helpers.banner(), flush=True)
    full_min = None
    if "host" in parts:
        full_min = part_host(out)
    if "graph" in parts and full_min is not None:
        part_graph(out, full_min)
    if "occupancy" in parts:
        part_occupancy(out)
    if "tiles" in parts:
        part_tiles(out)
    if "coop" in parts:
        part_coop(out)


if __name__ == "__main__":
    main()
