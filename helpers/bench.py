"""One harness that validates and times every softmax of the course on a GPU.

    python -m helpers.bench sweep     # the `make bench` sweep -> figures/data/bench.csv (+ plots)
    python -m helpers.bench lessons   # the measurements lessons 03-05 show
    python -m helpers.bench tune      # the tiled kernel's configuration sweep
    python -m helpers.bench all

Rules (the same for every provider, in the same run):
- inputs are random normal (never zeros), fresh per shape;
- every output is checked against a float64 softmax before it is timed (a provider that is wrong
  at a shape is reported as failed there, never timed);
- timing is ``triton.testing.do_bench`` (median, after warm-up; it flushes L2 between runs);
- ``gbps`` counts the minimum traffic 2*M*N*element_size; ``frac_of_copy`` divides the time of
  ``y.copy_(x)`` on the same tensor, in the same run, by the provider's time.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import torch
import triton

from . import kernels as K
from .gpu_data import DATA_DIR, provenance, write_csv
from .mode import ON_GPU
from .reference import naive_softmax_rowwise

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

#: The `make bench` sweep (issue: M=4096 over N, and few long rows).
SWEEP_SHAPES = [(4096, n) for n in (256, 512, 1024, 2048, 4096, 8192, 12672, 16384, 32768)] + [
    (1024, 65536), (256, 131072), (64, 262144), (8, 1048576),
]

#: Bytes of error allowed against the float64 reference, by dtype.
CHECK_ATOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def require_gpu(what: str = "the benchmark") -> None:
    if not ON_GPU:
        print(
            f"{what} needs an NVIDIA GPU, and this machine has none (kernels would run in Triton's "
            "interpreter, which says nothing about speed). Run it on a GPU machine; the recorded "
            "results are in figures/data/.",
            file=sys.stderr,
        )
        raise SystemExit(2)


#: Progress lines on stderr: on for the command line, off when a lesson calls these functions.
VERBOSE = [False]


def _log(*args) -> None:
    if VERBOSE[0]:
        print(*args, file=sys.stderr)


def time_ms(fn, warmup: int = 25, rep: int = 100) -> float:
    """Median milliseconds of ``fn()`` by triton.testing.do_bench."""
    return float(triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))


# Inductor compiles in background worker processes by default; their CPU load slows the host-side
# launches of the providers timed next (seen as 0.2-0.3 of copy at 4 MiB tensors). Compile in-process.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")


def _compiled_naive():
    torch._dynamo.reset()  # a fresh graph per shape: a hit recompile limit would silently time eager code
    return torch.compile(naive_softmax_rowwise, dynamic=False, fullgraph=True)


def providers(include_peers: bool = True) -> dict:
    """Name -> function(x) for every provider of the sweep. ``torch_compile`` is built per shape."""
    p = {}
    if include_peers:
        p["torch_naive"] = naive_softmax_rowwise
        p["torch_softmax"] = lambda x: torch.softmax(x, dim=-1)
        p["torch_compile"] = "compile"
    p.update({
        "fused": K.softmax_fused,
        "online": K.softmax_online,
        "persistent": K.softmax_persistent,
        "split": K.softmax_split,
        "split_coop": K.softmax_split_coop,
        "softmax": K.softmax,
    })
    return p


def check_against_reference(out: torch.Tensor, ref64: torch.Tensor, dtype) -> float:
    err = (out.to(torch.float64) - ref64).abs().max().item()
    if not math.isfinite(err) or err > CHECK_ATOL[dtype]:
        raise AssertionError(f"max abs error {err:.2e} > {CHECK_ATOL[dtype]:.0e}")
    return err


def measure_shape(M: int, N: int, dtype, provs: dict, *, seed: int = 0, quick: bool = False, rounds: int = 3) -> list[dict]:
    """Check every provider at one shape, then time copy and every provider in ``rounds``
    interleaved rounds (so a slow spell of the GPU hits all of them alike) and keep the median.
    ``spread`` is (max - min) / median of a provider's rounds: the run-to-run noise."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(M, N, device="cuda", dtype=dtype, generator=g)
    ref = torch.softmax(x.to(torch.float64), dim=-1)
    nbytes = 2 * M * N * x.element_size()
    y = torch.empty_like(x)
    rep = 40 if quick else 100
    d = str(dtype).replace("torch.", "")
    fns, rows = {"copy": lambda t: y.copy_(t)}, {"copy": dict(dtype=d, M=M, N=N, provider="copy", max_err=0.0, status="ok")}
    for name, fn in provs.items():
        row = dict(dtype=d, M=M, N=N, provider=name)
        try:
            if fn == "compile":
                fn = _compiled_naive()
            out = fn(x)
            torch.cuda.synchronize()
            row.update(max_err=check_against_reference(out, ref, dtype), status="ok")
            del out
            fns[name] = fn
        except Exception as e:  # report, never hide: the CSV says which provider failed where and why
            msg = (str(e).strip().splitlines() or [type(e).__name__])[0][:120].replace(",", ";")
            status = "n/a: row longer than the kernel's single block" if "keeps a whole row" in msg else \
                f"failed: {type(e).__name__}: {msg}"
            row.update(max_err=float("nan"), status=status)
        rows[name] = row
    times = {name: [] for name in fns}
    if not quick and nbytes < 2**26:
        rounds = max(rounds, 5)  # a few µs per call: more rounds against the host's hiccups
    for _ in range(1 if quick else rounds):
        for name, fn in fns.items():
            times[name].append(time_ms(lambda: fn(x), rep=rep))
    med = {name: sorted(t)[len(t) // 2] for name, t in times.items()}
    out_rows = []
    for name, row in rows.items():
        if name in med:
            t = times[name]
            row.update(ms=med[name], gbps=nbytes / med[name] / 1e6, frac_of_copy=med["copy"] / med[name],
                       spread=(max(t) - min(t)) / med[name])
        else:
            row.update(ms=float("nan"), gbps=float("nan"), frac_of_copy=float("nan"), spread=float("nan"))
        out_rows.append({k: row[k] for k in ("dtype", "M", "N", "provider", "ms", "gbps", "frac_of_copy", "spread", "max_err", "status")})
    del x, y, ref
    torch.cuda.empty_cache()
    return out_rows


def _progress(items, desc):
    try:
        from tqdm.auto import tqdm

        return tqdm(items, desc=desc, file=sys.stderr, mininterval=2.0)
    except ImportError:  # pragma: no cover
        return items


def sweep(shapes=SWEEP_SHAPES, dtypes=("float32", "bfloat16"), provs=None, out_name="bench") -> Path:
    """The `make bench` sweep: every provider at every shape, written to figures/data/<out_name>.csv."""
    require_gpu("`make bench`")
    provs = providers() if provs is None else provs
    rows = []
    cells = [(d, M, N) for d in dtypes for (M, N) in shapes]
    # Some cells of earlier sweeps read ~0.2 of copy for every Triton provider with a large spread,
    # twice in the first cell (figures/data/bench_runs/). A guess, not yet measured: an idle GPU's
    # clocks ramping up. Keep the GPU busy for ~2 s before the first cell.
    warm = torch.empty(2**28, device="cuda")
    t_end = time.time() + 2.0
    while time.time() < t_end:
        warm.add_(1.0)
        torch.cuda.synchronize()
    del warm
    for d, M, N in _progress(cells, "bench"):
        rows += measure_shape(M, N, DTYPES[d], provs)
    for r in rows:
        for k in ("ms", "gbps", "frac_of_copy", "spread", "max_err"):
            r[k] = round(r[k], 6) if isinstance(r[k], float) and math.isfinite(r[k]) else r[k]
    path = write_csv(DATA_DIR / f"{out_name}.csv", rows, provenance(f"python -m helpers.bench sweep"))
    print(f"wrote {path}", file=sys.stderr)
    return path


def summary(rows: list[dict], provider: str = "softmax") -> str:
    """A table of frac_of_copy per shape: the provider against the best of torch.softmax / torch.compile."""
    lines = [f"{'dtype':9} {'M':>5} {'N':>8}  {provider:>9}  best_peer  peer"]
    key = {}
    for r in rows:
        key.setdefault((r["dtype"], r["M"], r["N"]), {})[r["provider"]] = r.get("frac_of_copy")
    for (d, M, N), p in key.items():
        peers = {k: v for k, v in p.items() if k in ("torch_softmax", "torch_compile") and isinstance(v, float) and math.isfinite(v)}
        best = max(peers, key=peers.get) if peers else "-"
        mine = p.get(provider, float("nan"))
        lines.append(f"{d:9} {M:5d} {N:8d}  {mine:9.3f}  {peers.get(best, float('nan')):9.3f}  {best}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Measurements the lessons show
# --------------------------------------------------------------------------------------------


def device_props_rows() -> list[dict]:
    props = K.gpu_props()
    x = torch.randn(2**28 // 4, device="cuda")
    y = torch.empty_like(x)
    ms = time_ms(lambda: y.copy_(x))
    return [{**props, "copy_gbps_1GiB": round(2 * x.numel() * 4 / ms / 1e6, 1)}]


def fused_limits_rows(dtypes=("float32", "bfloat16"), total_bytes=2**28) -> list[dict]:
    """Lesson 03: the fused kernel as rows grow: compiled registers, spills, shared memory, speed,
    and where it stops compiling."""
    rows = []
    for d in dtypes:
        dtype = DTYPES[d]
        es = torch.empty((), dtype=dtype).element_size()
        for k in range(8, 19):
            N = 2**k
            M = max(1, total_bytes // (N * es))
            row = dict(dtype=d, M=M, N=N, block=N, num_warps=K.num_warps_for(N))
            try:
                x = torch.randn(M, N, device="cuda", dtype=dtype)
                out = torch.empty_like(x)
                args = (out, x, x.stride(0), x.stride(1), out.stride(0), N)
                kw = dict(BLOCK_SIZE=N, ACC=K._acc_dtype(dtype), num_warps=row["num_warps"])
                c = K.softmax_fused_kernel.warmup(*args, **kw, grid=(M,))
                c._init_handles()
                K.softmax_fused_kernel[(M,)](*args, **kw)
                err = check_against_reference(out, torch.softmax(x.double(), -1), dtype)
                y = torch.empty_like(x)
                copy_ms = time_ms(lambda: y.copy_(x), rep=50)
                ms = time_ms(lambda: K.softmax_fused_kernel[(M,)](*args, **kw), rep=50)
                row.update(n_regs=c.n_regs, n_spills=c.n_spills, shared=c.metadata.shared, status="ok",
                           ms=round(ms, 5), gbps=round(2 * M * N * es / ms / 1e6, 1),
                           frac_of_copy=round(copy_ms / ms, 4), max_err=err)
                del x, out, y
            except Exception as e:
                msg = (str(e).strip().splitlines() or [type(e).__name__])[0][:100].replace(",", ";")
                row.update(n_regs="", n_spills="", shared="", status=f"failed: {type(e).__name__}: {msg}",
                           ms="", gbps="", frac_of_copy="", max_err="")
            torch.cuda.empty_cache()
            rows.append(row)
            _log(row)
    return rows


def rows_grow_rows(dtype_name="float32", total_bytes=2**28) -> list[dict]:
    """Lesson 04: bandwidth as rows grow past what fits on chip, same total bytes."""
    dtype = DTYPES[dtype_name]
    es = torch.empty((), dtype=dtype).element_size()
    provs = {
        "torch_softmax": lambda x: torch.softmax(x, dim=-1),
        "fused": K.softmax_fused,
        "three_pass": K.softmax_three_pass,
        "online": K.softmax_online,
    }
    rows = []
    for k in range(10, 21):
        N = 2**k
        M = max(1, total_bytes // (N * es))
        rows += measure_shape(M, N, dtype, provs, quick=True)
    return rows


def programs_rows(N=1024, M=65536, dtype_name="float32") -> list[dict]:
    """Lesson 05: bandwidth of the persistent kernel against the number of programs."""
    dtype = DTYPES[dtype_name]
    sms = K.gpu_props()["sm_count"]
    x = torch.randn(M, N, device="cuda", dtype=dtype)
    y = torch.empty_like(x)
    nbytes = 2 * x.numel() * x.element_size()
    copy_ms = time_ms(lambda: y.copy_(x), rep=50)
    info = K.persistent_launch_info(K.as_rows(x), torch.empty_like(x), triton.next_power_of_2(N), K.num_warps_for(N), 2)
    counts = sorted({max(1, int(sms * f)) for f in (0.25, 0.5, 0.75, 1, 1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32)}
                    | {sms - 1, sms + 1, 2 * sms + 1, info["programs"], M})
    rows = []
    for p in counts:
        ms = time_ms(lambda: K.softmax_persistent(x, num_programs=p), rep=50)
        rows.append(dict(dtype=dtype_name, M=M, N=N, num_programs=p, programs_per_sm=round(p / sms, 3),
                         occupancy_programs=info["programs"], ms=round(ms, 5),
                         gbps=round(nbytes / ms / 1e6, 1), frac_of_copy=round(copy_ms / ms, 4)))
    return rows


def persistent_tuning_rows(shapes=((16384, 1024), (4096, 4096), (4096, 16384)), dtype_name="float32") -> list[dict]:
    """Lesson 05: num_warps x num_stages -> registers, shared memory, occupancy, bandwidth."""
    dtype = DTYPES[dtype_name]
    rows = []
    for M, N in shapes:
        x = torch.randn(M, N, device="cuda", dtype=dtype)
        y = torch.empty_like(x)
        nbytes = 2 * x.numel() * x.element_size()
        copy_ms = time_ms(lambda: y.copy_(x), rep=50)
        for w in (1, 2, 4, 8, 16, 32):
            for s in (1, 2, 3, 4):
                row = dict(dtype=dtype_name, M=M, N=N, num_warps=w, num_stages=s)
                try:
                    info = K.persistent_launch_info(x, torch.empty_like(x), triton.next_power_of_2(N), w, s)
                    out = K.softmax_persistent(x, num_warps=w, num_stages=s)
                    check_against_reference(out, torch.softmax(x.double(), -1), dtype)
                    ms = time_ms(lambda: K.softmax_persistent(x, num_warps=w, num_stages=s), rep=50)
                    row.update(n_regs=info["n_regs"], n_spills=info["n_spills"], shared=info["shared"],
                               programs_per_sm=info["programs_per_sm"], limited_by=info["limited_by"],
                               programs=info["programs"], ms=round(ms, 5), gbps=round(nbytes / ms / 1e6, 1),
                               frac_of_copy=round(copy_ms / ms, 4), status="ok")
                except Exception as e:
                    msg = (str(e).strip().splitlines() or [type(e).__name__])[0][:100].replace(",", ";")
                    row.update(n_regs="", n_spills="", shared="", programs_per_sm="", limited_by="", programs="",
                               ms="", gbps="", frac_of_copy="", status=f"failed: {type(e).__name__}: {msg}")
                rows.append(row)
        del x, y
    return rows


def tiled_tuning_rows(ns=(256, 512, 1024, 2048, 4096, 8192, 12672, 16384, 32768, 65536), M=4096,
                      dtypes=("float32", "bfloat16")) -> list[dict]:
    """The tiled kernel's (rows per program, num_warps) sweep that ``tiled_config`` is fitted to."""
    rows = []
    for d in dtypes:
        dtype = DTYPES[d]
        es = torch.empty((), dtype=dtype).element_size()
        for N in ns:
            m = M if N <= 32768 else max(8, 2**28 // (N * es))
            x = torch.randn(m, N, device="cuda", dtype=dtype)
            y = torch.empty_like(x)
            ref = torch.softmax(x.double(), -1)
            nbytes = 2 * x.numel() * es
            copy_ms = time_ms(lambda: y.copy_(x), rep=50)
            bn = triton.next_power_of_2(N)
            for bm in (1, 2, 4, 8, 16, 32):
                if bm * bn * es > 2**17:
                    continue
                for w in (1, 2, 4, 8, 16, 32):
                    if bm * bn < 32 * w:  # fewer elements than threads
                        continue
                    if bm * bn // (32 * w) > 256:  # far too many elements per thread: spills
                        continue
                    row = dict(dtype=d, M=m, N=N, block_m=bm, num_warps=w)
                    try:
                        out = K.softmax_tiled(x, block_m=bm, num_warps=w)
                        check_against_reference(out, ref, dtype)
                        ms = time_ms(lambda: K.softmax_tiled(x, block_m=bm, num_warps=w), rep=40)
                        row.update(ms=round(ms, 5), gbps=round(nbytes / ms / 1e6, 1),
                                   frac_of_copy=round(copy_ms / ms, 4), status="ok")
                    except Exception as e:
                        msg = (str(e).strip().splitlines() or [type(e).__name__])[0][:100].replace(",", ";")
                        row.update(ms="", gbps="", frac_of_copy="", status=f"failed: {type(e).__name__}: {msg}")
                    rows.append(row)
            best = max((r for r in rows if r["N"] == N and r["dtype"] == d and r["status"] == "ok"),
                       key=lambda r: r["frac_of_copy"], default=None)
            _log(f"{d} N={N}: best {best}")
            del x, y, ref
            torch.cuda.empty_cache()
    return rows


def _time_variants(x, variants: dict, ref, dtype, copy_ms, nbytes, base: dict, rep=40) -> list[dict]:
    rows = []
    for label, fn in variants.items():
        row = dict(base, variant=label)
        try:
            out = fn(x)
            check_against_reference(out, ref, dtype)
            del out
            ms = time_ms(lambda: fn(x), rep=rep)
            row.update(ms=round(ms, 5), gbps=round(nbytes / ms / 1e6, 1), frac_of_copy=round(copy_ms / ms, 4), status="ok")
        except Exception as e:
            msg = (str(e).strip().splitlines() or [type(e).__name__])[0][:100].replace(",", ";")
            row.update(ms="", gbps="", frac_of_copy="", status=f"failed: {type(e).__name__}: {msg}")
        rows.append(row)
    return rows


def tiled_variants_rows(ns=(4096, 8192, 12672, 16384, 32768), M=4096, dtypes=("float32", "bfloat16"),
                        combos=((1, 0), (2, 1), (2, 2), (3, 2)), warps=(8, 16, 32), block_ms=(1, 2)) -> list[dict]:
    """Round 2 of tuning: the tiled kernel with persistent grids and prefetching (num_stages)."""
    rows = []
    for d in dtypes:
        dtype = DTYPES[d]
        for N in ns:
            x = torch.randn(M, N, device="cuda", dtype=dtype)
            y = torch.empty_like(x)
            ref = torch.softmax(x.double(), -1)
            nbytes = 2 * x.numel() * x.element_size()
            copy_ms = time_ms(lambda: y.copy_(x), rep=50)
            variants = {}
            for bm in block_ms:
                for w in warps:
                    for ns_, pps in combos:
                        variants[f"bm{bm} w{w} s{ns_} pps{pps}"] = (
                            lambda x, bm=bm, w=w, ns_=ns_, pps=pps: K.softmax_tiled(x, block_m=bm, num_warps=w, num_stages=ns_, programs_per_sm=pps))
            r = _time_variants(x, variants, ref, dtype, copy_ms, nbytes, dict(dtype=d, M=M, N=N))
            ok = [q for q in r if q["status"] == "ok"]
            ok.sort(key=lambda q: -q["frac_of_copy"])
            _log(d, N, [(q["variant"], q["frac_of_copy"]) for q in ok[:4]])
            rows += r
            del x, y, ref
            torch.cuda.empty_cache()
    return rows


LONG_SHAPES = [(1024, 65536), (256, 131072), (64, 262144), (8, 1048576)]


def split_variants_rows(shapes=LONG_SHAPES, dtypes=("float32", "bfloat16")) -> list[dict]:
    """Lesson 06 / tuning: the split-row designs on few long rows."""
    rows = []
    sms = K.gpu_props()["sm_count"]
    for d in dtypes:
        dtype = DTYPES[d]
        for M, N in shapes:
            x = torch.randn(M, N, device="cuda", dtype=dtype)
            y = torch.empty_like(x)
            ref = torch.softmax(x.double(), -1)
            nbytes = 2 * x.numel() * x.element_size()
            copy_ms = time_ms(lambda: y.copy_(x), rep=50)
            variants = {"online": K.softmax_online, "torch_softmax": lambda x: torch.softmax(x, -1)}
            for t in (2, 4, 8):
                for blk in (4096, 8192):
                    variants[f"split t{t} b{blk}"] = (lambda x, t=t, blk=blk: K.softmax_split(
                        x, slices=max(1, min(N // blk, -(-t * sms // M))), block_size=blk))
            for sl in (4096, 8192, 16384, 32768):
                for w in (4, 8, 16, 32):
                    if sl // (32 * w) > 128 or sl // (32 * w) < 8:
                        continue
                    variants[f"coop s{sl} w{w}"] = (lambda x, sl=sl, w=w: K.softmax_split_coop(x, slice_cols=sl, num_warps=w))
            r = _time_variants(x, variants, ref, dtype, copy_ms, nbytes, dict(dtype=d, M=M, N=N))
            ok = [q for q in r if q["status"] == "ok"]
            ok.sort(key=lambda q: -q["frac_of_copy"])
            _log(d, M, N, [(q["variant"], q["frac_of_copy"]) for q in ok[:5]])
            rows += r
            del x, y, ref
            torch.cuda.empty_cache()
    return rows


def lessons(out_dir=DATA_DIR) -> None:
    require_gpu("recording the lessons' GPU data")
    out_dir = Path(out_dir)
    jobs = {
        "device_props": device_props_rows,
        "fused_limits": fused_limits_rows,
        "rows_grow": rows_grow_rows,
        "persistent_programs": programs_rows,
        "persistent_tuning": persistent_tuning_rows,
    }
    for name, job in jobs.items():
        t0 = time.time()
        rows = job()
        write_csv(out_dir / f"{name}.csv", rows, provenance(f"python -m helpers.bench lessons ({name})"))
        print(f"{name}: {len(rows)} rows in {time.time() - t0:.0f} s", file=sys.stderr)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m helpers.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("what", nargs="?", default="sweep", choices=["sweep", "lessons", "tune", "tune2", "tune3", "tune4", "all"])
    ap.add_argument("--dtypes", default="float32,bfloat16")
    args = ap.parse_args(argv)
    require_gpu("`make bench`")
    VERBOSE[0] = True
    dtypes = tuple(args.dtypes.split(","))
    if args.what in ("lessons", "all"):
        lessons()
    if args.what in ("tune", "all"):
        rows = tiled_tuning_rows(dtypes=dtypes)
        write_csv(DATA_DIR / "tuning_tiled.csv", rows, provenance("python -m helpers.bench tune"))
    if args.what == "tune4":
        rows = split_variants_rows(dtypes=dtypes)
        write_csv(DATA_DIR / "split_variants.csv", rows, provenance("python -m helpers.bench tune4"))
    if args.what == "tune3":
        rows = split_variants_rows(dtypes=dtypes)
        write_csv(DATA_DIR / "split_variants.csv", rows, provenance("python -m helpers.bench tune3"))
        rows = tiled_variants_rows(ns=(12672, 16384, 32768), dtypes=("bfloat16",), block_ms=(1,),
                                   combos=((1, 0), (2, 2), (3, 2), (4, 2), (2, 3), (3, 3), (3, 4), (3, 1), (4, 1)))
        rows += tiled_variants_rows(ns=(8192, 16384, 32768), dtypes=("float32",), block_ms=(1,),
                                    combos=((1, 0), (2, 2), (3, 2), (3, 3), (3, 1)))
        write_csv(DATA_DIR / "tuning_tiled_variants2.csv", rows, provenance("python -m helpers.bench tune3"))
    if args.what == "tune2":
        rows = split_variants_rows(dtypes=dtypes)
        write_csv(DATA_DIR / "split_variants.csv", rows, provenance("python -m helpers.bench tune2"))
        rows = tiled_variants_rows(dtypes=dtypes)
        write_csv(DATA_DIR / "tuning_tiled_variants.csv", rows, provenance("python -m helpers.bench tune2"))
    if args.what in ("sweep", "all"):
        path = sweep(dtypes=dtypes)
        from .gpu_data import read_csv

        rows, _ = read_csv(path)
        print(summary(rows))
        try:
            from .bench_plots import save_bench_plots

            save_bench_plots(path)
        except ImportError:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
