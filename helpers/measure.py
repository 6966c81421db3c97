"""How the course times a softmax on a GPU: one method for the benchmark and for every live lesson cell.

Three numbers per case, in the same run, with ``y.copy_(x)`` on the same tensor timed the same way
(the practical ceiling of a memory-bound kernel):

- **GPU time** (``graph_ms``): ``triton.testing.do_bench_cudagraph``, the kernel alone, calls replayed
  from one CUDA graph. L2 is not flushed: a tensor that fits in L2 (50 MiB on an H100, 60 MiB on
  an H200) is read from it.
- **Eager time** (``ms``): ``triton.testing.do_bench``, a Python loop of calls, what a model sees. Its
  L2 clear before each call (a 256 MB memset) gives the host a head start: a call whose host path
  is shorter is measured at its GPU speed, a longer one at the host's, and which one happens can
  change from run to run. That is a finding (the wrapper is launch-bound), not noise.
- **Host time per call** (``host_us``): the best of 3 loops of 200 calls with no synchronization
  inside, in microseconds: the cost of the Python and launch path.

``spread`` and ``graph_spread`` are (max - min) / median of the rounds. Every output is checked
against a float64 softmax before it is timed.
"""

from __future__ import annotations

import math
import os
import sys
import time

import torch
import triton

from .mode import ON_GPU

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

#: Largest abs error allowed against the float64 reference, by dtype (before anything is timed).
CHECK_ATOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float64: 1e-12}

#: The timed columns of a measured shape (NaN for a provider that failed its check).
TIMED = ("ms", "graph_ms", "host_us", "gbps", "graph_gbps", "frac_of_copy", "graph_frac", "spread", "graph_spread")
#: The CSV columns of a measured shape.
COLUMNS = ("dtype", "M", "N", "provider", *TIMED, "max_err", "status")


def require_gpu(what: str = "this measurement") -> None:
    """Stop with a clear message on a machine without a GPU."""
    if not ON_GPU:
        raise RuntimeError(
            f"{what} measures on a GPU, and this run has none (kernels run in Triton's interpreter, "
            f"which says nothing about speed): use the recorded data (live=False)."
        )


def exit_without_gpu(what: str, recorded: str = "figures/data/") -> None:
    """For a benchmark's command line: on a machine without a GPU, say so and exit with status 2."""
    if not ON_GPU:
        print(
            f"{what} needs an NVIDIA GPU, and this machine has none (kernels would run in Triton's "
            f"interpreter, which says nothing about speed). Run it on a GPU machine; the recorded "
            f"results are in {recorded}.",
            file=sys.stderr,
        )
        raise SystemExit(2)


def warm_up_gpu(seconds: float = 2.0) -> None:
    """Keep the GPU busy for a moment before the first measured case (clocks ramp up from idle)."""
    warm = torch.empty(2**28, device="cuda")
    t_end = time.time() + seconds
    while time.time() < t_end:
        warm.add_(1.0)
        torch.cuda.synchronize()
    del warm


def eager_ms(fn, rep: int = 50) -> float:
    """Median milliseconds of ``fn()`` in a Python loop (``do_bench``: L2 cleared before each call)."""
    return float(triton.testing.do_bench(fn, warmup=10, rep=rep, return_mode="median"))


def gpu_ms(fn, rep: int = 20) -> float:
    """Median milliseconds of ``fn()`` replayed from a CUDA graph (``do_bench_cudagraph``)."""
    return float(triton.testing.do_bench_cudagraph(fn, rep=rep, return_mode="median"))


def host_us(fn, calls: int = 200, loops: int = 3) -> float:
    """Microseconds of host time per call: the best of ``loops`` loops of ``calls`` calls with no
    synchronization inside (the GPU work queues up behind them)."""
    fn()
    torch.cuda.synchronize()
    best = math.inf
    for _ in range(loops):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return best


def device_facts() -> dict:
    """The GPU's limits (``helpers.device.gpu_props``), its DRAM peak from the memory clock and bus
    width, and the bandwidth of a 1 GiB ``y.copy_(x)`` in GPU time and eager time, in GB/s."""
    require_gpu("device_facts")
    from .device import gpu_props

    props = gpu_props()
    x = torch.randn(2**28, device="cuda")
    y = torch.empty_like(x)
    g, e = gpu_ms(lambda: y.copy_(x)), eager_ms(lambda: y.copy_(x))
    p = torch.cuda.get_device_properties(torch.cuda.current_device())
    clock, bus = getattr(p, "memory_clock_rate", 0), getattr(p, "memory_bus_width", 0)
    peak = 2 * clock * 1e3 * bus / 8 / 1e9 if clock and bus else float("nan")
    nbytes = 2 * x.numel() * x.element_size()
    del x, y
    return {
        **props,
        "copy_gbps_1GiB": nbytes / e / 1e6,
        "copy_graph_gbps_1GiB": nbytes / g / 1e6,
        "dram_peak_gbps": peak,
    }


def check_against_reference(out: torch.Tensor, ref64: torch.Tensor, dtype) -> float:
    """Max abs error of ``out`` against a float64 reference; AssertionError beyond ``CHECK_ATOL``."""
    err = (out.to(torch.float64) - ref64).abs().max().item()
    if not math.isfinite(err) or err > CHECK_ATOL[dtype]:
        raise AssertionError(f"max abs error {err:.2e} > {CHECK_ATOL[dtype]:.0e}")
    return err


# Inductor compiles in background worker processes by default; their CPU load slows the host-side
# launches of the providers timed next. Compile in-process.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")


def compiled_naive():
    """``torch.compile`` of the five-op naive softmax, a fresh graph (a hit recompile limit would
    silently time eager code)."""
    from .reference import naive_softmax_rowwise

    torch._dynamo.reset()
    return torch.compile(naive_softmax_rowwise, dynamic=False, fullgraph=True)


def providers(course: bool = True, peers: bool = True) -> dict:
    """Name -> function(x) of every provider the course compares. ``torch_compile`` is the string
    "compile" (compiled fresh per shape); peers that are not installed (Liger) are left out."""
    from . import kernels as K
    from .peers import liger_softmax, tutorial_softmax
    from .reference import naive_softmax_rowwise

    p = {}
    if peers:
        p["torch_naive"] = naive_softmax_rowwise
        p["torch_softmax"] = lambda x: torch.softmax(x, dim=-1)
        p["torch_compile"] = "compile"
        p["triton_tutorial"] = tutorial_softmax
        if liger_softmax is not None:
            p["liger"] = liger_softmax
    if course:
        p.update(
            {
                "fused": K.softmax_fused,
                "online": K.softmax_online,
                "persistent": K.softmax_persistent,
                "split": K.softmax_split,
                "split_coop": K.softmax_split_coop,
                "softmax": K.softmax,
            }
        )
    return p


def failed(e: BaseException) -> str:
    """A CSV's ``status`` for an exception: 'failed: Type: its first line' (no commas)."""
    msg = (str(e).strip().splitlines() or [type(e).__name__])[0][:120].replace(",", ";")
    return f"failed: {type(e).__name__}: {msg}"


def _failure(e: BaseException) -> str:
    status = failed(e)
    return (
        "n/a: row longer than the kernel's single block"
        if "keeps a whole row" in status or "cannot hold" in status
        else status
    )


def measure_shape(
    M: int, N: int, dtype, provs: dict, *, seed: int = 0, rounds: int = 3, quick: bool = False, host: bool = True
) -> list[dict]:
    """Check every provider at one (M, N) shape, then time copy and every provider: GPU time,
    eager time (``rounds`` interleaved rounds, so a slow spell of the GPU hits all of them alike;
    medians kept) and host time per call. Rows have the ``COLUMNS`` keys."""
    require_gpu("measure_shape")
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(M, N, device="cuda", dtype=dtype, generator=g)
    ref = torch.softmax(x.to(torch.float64), dim=-1)
    nbytes = 2 * M * N * x.element_size()
    y = torch.empty_like(x)
    d = str(dtype).replace("torch.", "")
    fns = {"copy": lambda t: y.copy_(t)}
    rows = {"copy": dict(dtype=d, M=M, N=N, provider="copy", max_err=0.0, status="ok")}
    for name, fn in provs.items():
        row = dict(dtype=d, M=M, N=N, provider=name)
        try:
            if fn == "compile":
                fn = compiled_naive()
            out = fn(x)
            torch.cuda.synchronize()
            row.update(max_err=check_against_reference(out, ref, dtype), status="ok")
            del out
            fns[name] = fn
        except Exception as e:  # reported in the CSV, never hidden
            row.update(max_err=float("nan"), status=_failure(e))
        rows[name] = row
    eager = {name: [] for name in fns}
    graph = {name: [] for name in fns}
    rounds = 1 if quick else rounds
    for _ in range(rounds):
        for name, fn in fns.items():
            call = lambda fn=fn: fn(x)
            eager[name].append(eager_ms(call, rep=25 if quick else 50))
            try:
                graph[name].append(gpu_ms(call, rep=10 if quick else 20))
            except Exception as e:  # a provider that cannot be captured in a CUDA graph
                rows[name]["status"] = f"ok (no CUDA graph: {type(e).__name__})"
                graph[name].append(float("nan"))
    out_rows = []
    for name, row in rows.items():
        if name in fns:
            ms, gms = median(eager[name]), median(graph[name])
            row.update(
                ms=ms,
                graph_ms=gms,
                gbps=nbytes / ms / 1e6,
                graph_gbps=nbytes / gms / 1e6,
                frac_of_copy=median(eager["copy"]) / ms,
                graph_frac=median(graph["copy"]) / gms,
                spread=spread(eager[name]),
                graph_spread=spread(graph[name]),
                host_us=host_us(lambda fn=fns[name]: fn(x)) if host else float("nan"),
            )
        else:
            row.update(dict.fromkeys(TIMED, float("nan")))
        out_rows.append({k: row[k] for k in COLUMNS})
    del x, y, ref
    torch.cuda.empty_cache()
    return out_rows


def median(values) -> float:
    """The middle of the rounds (the upper middle for an even count)."""
    v = sorted(values)
    return v[len(v) // 2]


def spread(values) -> float:
    """(max - min) / median of the rounds: 0 for a single round, NaN when one is not finite."""
    return (max(values) - min(values)) / median(values) if all(math.isfinite(t) for t in values) else float("nan")


def peak_mib(fn) -> float:
    """MiB allocated at most during one call of ``fn`` beyond what was allocated before it (output included)."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = fn()
    torch.cuda.synchronize()
    del out
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def interleaved(fns: dict, rounds: int = 3, timer=None) -> dict:
    """name -> (median, spread) of ``timer(fn)`` (default ``gpu_ms``) over ``rounds`` rounds, each round
    timing every function once in turn (a slow spell of the GPU hits them all alike)."""
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append((timer or gpu_ms)(fn))
    return {name: (median(t), spread(t)) for name, t in times.items()}


def rounded(rows: list[dict], digits: int = 6) -> list[dict]:
    """Rows with their floats rounded (for a CSV)."""
    return [
        {k: (round(v, digits) if isinstance(v, float) and math.isfinite(v) else v) for k, v in r.items()} for r in rows
    ]


def progress(items, desc: str):
    """A progress bar on stderr when tqdm is there (the benchmark's command line)."""
    try:
        from tqdm.auto import tqdm

        return tqdm(items, desc=desc, file=sys.stderr, mininterval=2.0)
    except ImportError:  # pragma: no cover
        return items
