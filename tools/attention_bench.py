"""Forward attention on a GPU: the course's kernel (lesson 07) against PyTorch's SDPA backends and
the naive, materialised version.

    python tools/attention_bench.py figures/data/attention.csv          # the sweep lesson 07 shows
    python tools/attention_bench.py OUT.csv --quick                     # fp16, S = 1K and 4K only
    python tools/attention_bench.py OUT.csv --tune                      # the kernel's tile configurations
    python tools/attention_bench.py OUT.csv --seqs 4096,8192 --causal 1 --providers course,course_g1,sdpa_cudnn

The sweep: B = 4, H = 16, S = Sq = Sk in ``SEQS``, D in (64, 128), float16 and bfloat16, causal and
not. Providers (``PROVIDERS``): ``course`` (``helpers.attention``: on Hopper in 16-bit types the
tensor-descriptor kernel where ``tma_config`` names a tile), ``course_pointer`` (the pointer kernel
forced, at ``attention_config``'s tile: the kernel the descriptor one replaces), ``course_g1`` (causal,
S >= ``TUTORIAL_MIN_S``: the course's kernel with its programs in head order, ``group=1``, the order
before ``heads_per_group``'s groups), ``tutorial`` (the
official Triton tutorial's forward, autotuned, ``tools/vendored/attention_tutorial.py``; S >= ``TUTORIAL_MIN_S``,
16-bit, Hopper; its configurations are compiled first by ``TUTORIAL_WORKERS`` processes at once),
``sdpa`` (PyTorch picks the backend), ``sdpa_cudnn``/``sdpa_flash``/``sdpa_efficient`` (one backend each; one that refuses the
inputs is recorded as ``refused: ...``) and ``naive`` (the scores materialised; S <= 8192 and only
when its three (S, S) matrices fit in free memory).

Every output is first checked in float64 on a sample (two heads, up to 128 query rows, the first
and last included; ``max_err``): a wrong provider is recorded, not timed. ``ms`` and ``graph_ms``
are ``helpers.measure``'s eager time and GPU time, each the median of ``ROUNDS`` rounds interleaved
over the providers, ``spread``/``graph_spread`` (max - min) / median of the rounds. ``tflops`` count
4 B H S^2 D operations per call (halved when causal); ``peak_mib`` is the most memory allocated
during one call beyond what was allocated before it (output included, inputs not).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # helpers, from this checkout
sys.path.insert(0, str(ROOT / "tools" / "vendored"))  # attention_tutorial: the Triton tutorial's forward, a peer

import torch  # noqa: E402
import torch.nn.functional as F

import helpers  # noqa: E402,F401  (first: interpreter or GPU)
from helpers.gpu_data import provenance, write_csv
from helpers.kernels.attention import (
    AttentionConfig,
    TmaConfig,
    attention,
    attention_call,
    attention_plan,
    naive_attention,
)
from helpers.measure import eager_ms, exit_without_gpu, gpu_ms, median, peak_mib, spread
from helpers.mode import ON_GPU

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
PROVIDERS = (
    "course",
    "course_pointer",
    "course_g1",
    "tutorial",
    "sdpa",
    "sdpa_cudnn",
    "sdpa_flash",
    "sdpa_efficient",
    "naive",
)
COLUMNS = (
    "dtype",
    "B",
    "H",
    "S",
    "D",
    "causal",
    "provider",
    "ms",
    "tflops",
    "graph_ms",
    "graph_tflops",
    "spread",
    "graph_spread",
    "peak_mib",
    "max_err",
    "status",
)
#: Timing rounds per case (the median is kept, the spread recorded), and milliseconds per timing.
ROUNDS = 5
REP = 10
SEQS = (1024, 2048, 4096, 8192, 16384)
NAIVE_MAX_S = 8192
#: The tutorial's autotuner compiles every configuration at every S (its N_CTX is a constexpr): it is
#: measured where issue #23's targets are, S >= 4096, after a parallel compilation.
TUTORIAL_MIN_S = 4096
TUTORIAL_WORKERS = 16
#: Max abs error allowed in the float64 check, by dtype (outputs are O(1); probabilities are
#: rounded to the dtype before p @ v in every fused kernel).
CHECK_ATOL = {torch.float16: 1e-2, torch.bfloat16: 6e-2, torch.float32: 1e-4}
SAMPLE_ROWS = 128

#: Progress lines on stderr: on for the command line only.
VERBOSE = [False]


def _log(*args) -> None:
    if VERBOSE[0]:
        print(*args, file=sys.stderr, flush=True)


def require_gpu(what: str = "the attention benchmark") -> None:
    exit_without_gpu(what, "figures/data/attention_<gpu>.csv")


def flops(B: int, H: int, S: int, D: int, causal: bool, Sk: int | None = None) -> float:
    """4 B H Sq Sk D (q k^T and p v, a multiply and an add each), halved when causal."""
    f = 4.0 * B * H * S * (S if Sk is None else Sk) * D
    return f / 2 if causal else f


def provider_fn(name: str, q, k, v, causal: bool):
    """A no-argument function computing attention(q, k, v) with provider ``name``."""
    if name == "course":
        return lambda: attention(q, k, v, causal=causal)
    if name == "course_pointer":
        call = attention_call(attention_plan(q, k, v, causal, kernel="pointer"), q, k, v)
        return lambda: call(q, k, v)
    if name == "course_g1":
        call = attention_call(attention_plan(q, k, v, causal, group=1), q, k, v)
        return lambda: call(q, k, v)
    if name == "tutorial":
        import attention_tutorial  # tools/vendored/attention_tutorial.py

        scale = 1.0 / math.sqrt(q.shape[-1])
        return lambda: attention_tutorial.tutorial_forward(q, k, v, causal, scale)
    if name == "naive":
        return lambda: naive_attention(q, k, v, causal=causal)
    if name == "sdpa":
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    if name in ("sdpa_cudnn", "sdpa_flash", "sdpa_efficient"):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backend = {
            "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
            "sdpa_flash": SDPBackend.FLASH_ATTENTION,
            "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION,
        }[name]

        def fn():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        return fn
    raise ValueError(f"unknown provider {name!r}; choose from {PROVIDERS}")


def tutorial_skip(S: int, dtype, device) -> str | None:
    """Why the tutorial's forward is not measured at this shape (None: it is)."""
    device = torch.device(device)
    if dtype not in (torch.float16, torch.bfloat16):
        return "skipped: the tutorial's forward takes 16-bit inputs"
    if device.type != "cuda" or torch.cuda.get_device_capability(device)[0] < 9:
        return "skipped: the tutorial's forward needs a Hopper GPU (tensor descriptors)"
    if S < TUTORIAL_MIN_S:
        return f"skipped: the tutorial is measured at S >= {TUTORIAL_MIN_S}"
    return None


def precompile_tutorial(shapes, workers: int = TUTORIAL_WORKERS) -> int:
    """Compile the tutorial's configurations at every (B, H, S, D, dtype, causal) of ``shapes`` in
    ``workers`` processes, into Triton's on-disk cache, where its autotuner then finds them. Returns
    how many compiled."""
    import multiprocessing as mp

    import attention_tutorial as T

    jobs = [
        (B, H, S, D, DTYPES[dt], causal, i)
        for B, H, S, D, dt, causal in shapes
        for i in range(len(T.configs_for(D, causal, S)))
    ]
    if not jobs:
        return 0
    with mp.get_context("spawn").Pool(workers) as pool:
        errors = pool.map(T.precompile_job, jobs, chunksize=1)
    return sum(e is None for e in errors)


def sample_rows(S: int, n: int = SAMPLE_ROWS) -> torch.Tensor:
    """Up to ``n`` query rows spread over [0, S), the first and the last included."""
    if S <= n:
        return torch.arange(S)
    return torch.unique(torch.linspace(0, S - 1, n).round().long())


def sample_reference(q, k, v, causal: bool, heads, rows) -> torch.Tensor:
    """float64 attention of query ``rows`` of each (b, h) in ``heads``: (len(heads), len(rows), D)."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    out = []
    for b, h in heads:
        qs = q[b, h, rows].double()
        s = (qs @ k[b, h].double().T) * scale
        if causal:
            cols = torch.arange(k.shape[-2], device=s.device)
            s = s.masked_fill(cols[None, :] > rows.to(s.device)[:, None], float("-inf"))
        out.append(torch.softmax(s, dim=-1) @ v[b, h].double())
    return torch.stack(out)


def _inputs(B, H, S, D, dtype, causal: bool, device, seed: int):
    """q, k, v (random normal), the sampled heads and query rows, and their float64 reference."""
    g = torch.Generator(device=device).manual_seed(seed)  # on the device: a CPU generator takes seconds at 16K
    q, k, v = (torch.randn(B, H, S, D, generator=g, device=device).to(dtype) for _ in range(3))
    heads, rows = sorted({(0, 0), (B - 1, H - 1)}), sample_rows(S).to(q.device)
    return q, k, v, heads, rows, sample_reference(q, k, v, causal, heads, rows)


def max_error(out, ref, heads, rows) -> float:
    got = torch.stack([out[b, h, rows].double() for b, h in heads])
    err = (got - ref).abs()
    return float("nan") if torch.isnan(err).any() else float(err.max())


def gpu_timer(rep: int = REP):
    """One round of a function's timing: (eager ms, graph ms), helpers.measure's two timers."""

    def timer(fn):
        return eager_ms(fn, rep=rep), gpu_ms(fn, rep=rep)

    return timer


def _free_bytes(device) -> int:
    if torch.device(device).type != "cuda":
        return 2**62
    free, _ = torch.cuda.mem_get_info(device)
    return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)


def _row(dtype_name, B, H, S, D, causal, provider, **kw) -> dict:
    nan = float("nan")
    row = {
        "dtype": dtype_name,
        "B": B,
        "H": H,
        "S": S,
        "D": D,
        "causal": int(causal),
        "provider": provider,
        "ms": nan,
        "tflops": nan,
        "graph_ms": nan,
        "graph_tflops": nan,
        "spread": nan,
        "graph_spread": nan,
        "peak_mib": nan,
        "max_err": nan,
        "status": "ok",
    }
    row.update(kw)
    return row


def _short(e: BaseException) -> str:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {msg}"[:120].replace(",", ";")


def measure_shape(
    dtype_name: str,
    B: int,
    H: int,
    S: int,
    D: int,
    causal: bool,
    providers=PROVIDERS,
    *,
    timer=None,
    peak=None,
    device=None,
    seed: int = 0,
    rounds: int = ROUNDS,
) -> list[dict]:
    """Check every provider on one shape, then time the ones that passed in ``rounds`` rounds
    interleaved over the providers (``timer(fn)`` -> (eager ms, graph ms), once per round); one row
    each (failures included) with the medians and the spreads."""
    device = device or ("cuda" if ON_GPU else "cpu")
    timer = timer or gpu_timer()
    peak = peak or peak_mib
    dtype = DTYPES.get(dtype_name, getattr(torch, dtype_name, None))
    q, k, v, heads, rows_idx, ref = _inputs(B, H, S, D, dtype, causal, device, seed)
    f = flops(B, H, S, D, causal)
    out_rows, timed = {}, {}
    for p in providers:
        base = dict(dtype_name=dtype_name, B=B, H=H, S=S, D=D, causal=causal, provider=p)
        if p == "course_g1" and not (causal and S >= TUTORIAL_MIN_S):
            out_rows[p] = _row(**base, status=f"skipped: the head order is measured causal, at S >= {TUTORIAL_MIN_S}")
            continue
        if p == "tutorial" and tutorial_skip(S, dtype, q.device):
            out_rows[p] = _row(**base, status=tutorial_skip(S, dtype, q.device))
            continue
        if p == "naive":
            need = 3 * B * H * S * S * q.element_size()
            if S > NAIVE_MAX_S or need > 0.8 * _free_bytes(q.device):
                out_rows[p] = _row(**base, status=f"skipped: its (S, S) matrices need {need / 2**30:.0f} GiB")
                continue
        fn = provider_fn(p, q, k, v, causal)
        try:
            out = fn()
        except torch.cuda.OutOfMemoryError as e:
            out_rows[p] = _row(**base, status="out of memory: " + _short(e))
            _free()
            continue
        except RuntimeError as e:  # an SDPA backend that does not take these inputs
            out_rows[p] = _row(**base, status="refused: " + _short(e))
            continue
        err = max_error(out, ref, heads, rows_idx)
        del out
        if p == "tutorial":
            import attention_tutorial

            c = attention_tutorial._attn_fwd.best_config
            _log(
                f"  the tutorial's pick at {dtype_name} S={S} D={D} causal={int(causal)}: "
                f"({c.kwargs['BLOCK_M']}, {c.kwargs['BLOCK_N']}, {c.num_warps}, {c.num_stages})"
            )
        tol = CHECK_ATOL.get(dtype, 1e-2)
        if not err <= tol:
            out_rows[p] = _row(**base, max_err=err, status=f"wrong: max abs error {err:.3g} > {tol:g}")
            continue
        try:
            mib = peak(fn)
        except torch.cuda.OutOfMemoryError as e:
            out_rows[p] = _row(**base, max_err=err, status="out of memory: " + _short(e))
            _free()
            continue
        out_rows[p] = _row(**base, peak_mib=mib, max_err=err)
        timed[p] = (fn, [], [])
    for _ in range(max(1, rounds)):
        for p, (fn, eager, graph) in list(timed.items()):
            try:
                e_ms, g_ms = timer(fn)
            except (torch.cuda.OutOfMemoryError, RuntimeError) as e:
                out_rows[p]["status"] = (
                    "out of memory: " if isinstance(e, torch.cuda.OutOfMemoryError) else "failed while timed: "
                ) + _short(e)
                del timed[p]
                _free()
                continue
            eager.append(e_ms)
            graph.append(g_ms)
    for p, (fn, eager, graph) in timed.items():
        ms, graph_ms = median(eager), median(graph)
        out_rows[p].update(
            ms=ms,
            tflops=f / (ms * 1e-3) / 1e12,
            graph_ms=graph_ms,
            graph_tflops=f / (graph_ms * 1e-3) / 1e12,
            spread=spread(eager),
            graph_spread=spread(graph),
        )
        _log(
            f"  {dtype_name} S={S} D={D} causal={int(causal)} {p:<15} {graph_ms:8.3f} ms "
            f"(spread {spread(graph):.0%})  {out_rows[p]['graph_tflops']:6.1f} TFLOP/s  err {out_rows[p]['max_err']:.1e}"
        )
    del q, k, v
    _free()
    return [out_rows[p] for p in providers]


def _free() -> None:
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _round(rows: list[dict]) -> list[dict]:
    out = []
    for r in rows:
        r = dict(r)
        for key, nd in (
            ("ms", 4),
            ("graph_ms", 4),
            ("tflops", 1),
            ("graph_tflops", 1),
            ("peak_mib", 1),
            ("spread", 4),
            ("graph_spread", 4),
        ):
            if isinstance(r[key], float) and r[key] == r[key]:
                r[key] = round(r[key], nd)
        if isinstance(r["max_err"], float) and r["max_err"] == r["max_err"]:
            r["max_err"] = float(f"{r['max_err']:.2e}")
        out.append(r)
    return out


def sweep(
    seqs=SEQS,
    dims=(64, 128),
    dtypes=("float16", "bfloat16"),
    causals=(False, True),
    providers=PROVIDERS,
    B: int = 4,
    H: int = 16,
    out=None,
    **kw,
) -> list[dict]:
    """Every (dtype, D, causal, S) of the sweep, every provider: the rows of the CSV. ``out``: (path,
    provenance) to write the rows so far after every shape (a run cut short keeps what it measured)."""
    rows = []
    t0 = time.time()
    if "tutorial" in providers and ON_GPU and (kw.get("device") or "cuda") == "cuda":
        shapes = [
            (B, H, S, D, dt, c)
            for dt in dtypes
            for D in dims
            for c in causals
            for S in seqs
            if not tutorial_skip(S, DTYPES[dt], "cuda")
        ]
        _log(f"compiling the tutorial's configurations at {len(shapes)} shapes ...")
        _log(f"[{time.time() - t0:6.1f} s] {precompile_tutorial(shapes)} compiled")
    for dtype_name in dtypes:
        for D in dims:
            for causal in causals:
                for S in seqs:
                    _log(f"[{time.time() - t0:6.1f} s] {dtype_name} D={D} causal={int(causal)} S={S}")
                    rows += measure_shape(dtype_name, B, H, S, D, causal, providers, **kw)
                    if out is not None:
                        write_csv(out[0], _round(rows), out[1])
    return _round(rows)


def live_rows(rounds: int = 3) -> list[dict]:
    """A short sweep for lesson 07 on a GPU: fp16, S = 1K and 4K, the course, SDPA and naive
    (the rows of the recording, fewer of them)."""
    require_gpu("helpers.lesson07.attention_rows()")
    return sweep(seqs=(1024, 4096), dtypes=("float16",), providers=("course", "sdpa", "naive"), rounds=rounds)


TUNE_CONFIGS = tuple(
    AttentionConfig(*c)
    for c in (
        (64, 32, 4, 3),
        (64, 64, 4, 3),
        (64, 64, 4, 4),
        (128, 32, 4, 3),
        (128, 64, 4, 3),
        (128, 64, 4, 4),
        (128, 64, 8, 3),
        (128, 128, 8, 2),
        (128, 128, 8, 3),
        (128, 32, 8, 4),
    )
) + tuple(
    TmaConfig(*c, False)
    for c in (  # the tensor-descriptor kernel (Hopper): 2 programs per SM at 128x64x4x2
        (128, 64, 4, 2),
        (128, 64, 4, 3),
        (128, 64, 8, 3),
        (128, 128, 8, 3),
        (64, 64, 4, 2),
        (64, 64, 4, 3),
    )
)


def _kernel(cfg) -> str:
    return "tma" if isinstance(cfg, TmaConfig) else "pointer"


def tune(
    S: int = 4096,
    dims=(64, 128),
    causals=(False, True),
    dtype_name: str = "float16",
    configs=TUNE_CONFIGS,
    B: int = 4,
    H: int = 16,
    rep: int = 25,
    rounds: int = ROUNDS,
) -> list[dict]:
    """GPU time of the course's kernel in each tile configuration (checked first, as the sweep):
    the median of ``rounds`` rounds interleaved over the configurations, and their spread."""
    dtype = DTYPES[dtype_name]
    rows = []
    for D in dims:
        for causal in causals:
            q, k, v, heads, idx, ref = _inputs(B, H, S, D, dtype, causal, "cuda", seed=1)
            timed = []
            for cfg in configs:
                row = {
                    "dtype": dtype_name,
                    "B": B,
                    "H": H,
                    "S": S,
                    "D": D,
                    "causal": int(causal),
                    "kernel": _kernel(cfg),
                    **dict(zip(("block_m", "block_n", "num_warps", "num_stages"), cfg[:4])),
                    "graph_ms": float("nan"),
                    "graph_tflops": float("nan"),
                    "graph_spread": float("nan"),
                    "max_err": float("nan"),
                    "status": "ok",
                }
                try:
                    call = attention_call(attention_plan(q, k, v, causal, config=cfg, kernel=_kernel(cfg)), q, k, v)
                    fn = lambda call=call: call(q, k, v)  # noqa: E731
                    err = max_error(fn(), ref, heads, idx)
                    row["max_err"] = float(f"{err:.2e}")
                    if not err <= CHECK_ATOL[dtype]:
                        row["status"] = f"wrong: max abs error {err:.3g}"
                    else:
                        timed.append((row, fn, []))
                except Exception as e:  # a configuration that does not compile (shared memory) or launch
                    row["status"] = "failed: " + _short(e)
                rows.append(row)
            for _ in range(max(1, rounds)):
                for row, fn, times in timed:
                    times.append(gpu_ms(fn, rep=rep))
            for row, fn, times in timed:
                ms = median(times)
                row.update(
                    graph_ms=round(ms, 4),
                    graph_tflops=round(flops(B, H, S, D, causal) / ms / 1e9, 1),
                    graph_spread=round(spread(times), 4),
                )
                _log(
                    f"  D={D} causal={int(causal)} {row['kernel']} {row['block_m'], row['block_n'], row['num_warps'], row['num_stages']} "
                    f"{row['graph_tflops']} TFLOP/s (spread {row['graph_spread']:.0%})"
                )
            del q, k, v
            _free()
    return rows


def best_configs(rows: list[dict]) -> dict:
    """(D, causal) -> the fastest configuration's row."""
    best = {}
    for r in rows:
        if r["status"] != "ok":
            continue
        key = (r["D"], r["causal"])
        if key not in best or r["graph_tflops"] > best[key]["graph_tflops"]:
            best[key] = r
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_csv", help="where to write the rows, e.g. figures/data/attention.csv")
    ap.add_argument("--quick", action="store_true", help="fp16, S = 1K and 4K only")
    ap.add_argument("--tune", action="store_true", help="time the kernel's tile configurations instead")
    ap.add_argument("--rep", type=int, default=REP, help=f"milliseconds of timing per measurement (default {REP})")
    ap.add_argument(
        "--rounds", type=int, default=ROUNDS, help=f"timing rounds per case, median kept (default {ROUNDS})"
    )
    ap.add_argument("--seqs", help="comma-separated sequence lengths (default: " + ",".join(map(str, SEQS)) + ")")
    ap.add_argument("--causal", choices=("0", "1"), help="only without the mask (0) or only causal (1)")
    ap.add_argument("--providers", help="comma-separated providers (default: all of " + ",".join(PROVIDERS) + ")")
    args = ap.parse_args(argv)
    require_gpu()
    VERBOSE[0] = True
    t0 = time.time()
    command = "python tools/attention_bench.py " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.tune:
        rows = tune(rounds=args.rounds)
        for (D, causal), r in sorted(best_configs(rows).items()):
            print(
                f"D={D} causal={causal}: best {r['kernel']} ({r['block_m']}, {r['block_n']}, {r['num_warps']}, "
                f"{r['num_stages']}) at {r['graph_tflops']} TFLOP/s"
            )
    else:
        quick = dict(seqs=(1024, 4096), dtypes=("float16",)) if args.quick else {}
        if args.seqs:
            quick["seqs"] = tuple(int(x) for x in args.seqs.split(","))
        if args.causal:
            quick["causals"] = (args.causal == "1",)
        if args.providers:
            quick["providers"] = tuple(args.providers.split(","))
            unknown = set(quick["providers"]) - set(PROVIDERS)
            if unknown:
                ap.error(f"unknown providers {sorted(unknown)}; choose from {PROVIDERS}")
        rows = sweep(
            **quick, timer=gpu_timer(args.rep), rounds=args.rounds, out=(Path(args.out_csv), provenance(command))
        )
    path = write_csv(Path(args.out_csv), rows, provenance(command))
    bad = [r for r in rows if r["status"] != "ok" and r.get("provider") == "course"]
    print(
        f"wrote {len(rows)} rows to {path} in {time.time() - t0:.0f} s"
        + (f"; the course's kernel failed {len(bad)} checks: {bad[0]['status']}" if bad else "")
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
