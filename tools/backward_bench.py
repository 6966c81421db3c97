"""The softmax backward on a GPU: the course's Triton kernels against PyTorch's, checked, then timed.

    python tools/backward_bench.py figures/data/backward_h100.csv   # 3 timing rounds per shape: minutes on an H100

Shapes (``SHAPES``, in float32 and bfloat16): M = 4096 rows with N in ``NS`` (group ``M=4096``), four
long-row shapes (``long``) and LLM vocabulary rows that no configuration was chosen on (``held-out``);
y is the softmax of a random normal x, dy random normal. Providers: ``copy`` (``out.copy_(y)``, the
ceiling: 2MN elements), ``course`` (``helpers.softmax_backward``), ``course_looped`` (the two-pass
looped kernel, one program per row: what reading y and dy twice costs), ``torch_backward``
(``torch._softmax_backward_data``, what autograd runs), ``torch_naive_backward`` (the formula as
PyTorch ops) and, where Liger-Kernel is installed, ``liger_backward`` (its backward kernels with the
settings its forward picks; it refuses rows over 65536). Each is checked against float64 first (a
wrong or failing one is reported in ``status``, not timed), then timed as ``helpers.measure`` times
softmax (``ms``, ``graph_ms``, ``host_us``; ``ROUNDS`` interleaved rounds, medians kept, ``spread``
and ``graph_spread`` of the rounds). ``frac_of_copy = 1.5 * t_copy / t`` (``graph_frac`` the same in
GPU time): the backward moves 3MN elements, so 1.0 means it moves its bytes as fast as the copy.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # helpers, from this checkout

import torch  # noqa: E402

import helpers  # noqa: E402,F401  (first: interpreter or GPU)
from helpers import measure as _measure  # (`measure` below is this module's own function)
from helpers.gpu_data import provenance, write_csv
from helpers.kernels.backward import softmax_backward, softmax_backward_looped
from helpers.measure import exit_without_gpu, median, spread, warm_up_gpu
from helpers.mode import DEVICE

M_ROWS = 4096
NS = (1024, 2048, 4096, 8192, 12672, 16384, 32768)
LONG = ((1024, 65536), (256, 131072), (64, 262144), (8, 1048576))
HELD_OUT = tuple((m, n) for m in (1, 8, 64, 256) for n in (32000, 128256, 151936, 256000))
SHAPES = {"M=4096": tuple((M_ROWS, n) for n in NS), "long": LONG, "held-out": HELD_OUT}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
COLUMNS = (
    "group",
    "dtype",
    "M",
    "N",
    "provider",
    "ms",
    "graph_ms",
    "frac_of_copy",
    "graph_frac",
    "host_us",
    "spread",
    "graph_spread",
    "max_err",
    "status",
)
#: Timing rounds per shape, interleaved over the providers (a slow spell of the GPU hits them all alike).
ROUNDS = 3

#: Largest error allowed against the float64 formula, as a fraction of the largest |dx|.
REL_TOL = {torch.float32: 1e-5, torch.float64: 1e-12, torch.float16: 1e-2, torch.bfloat16: 3e-2}


def naive_backward(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """The backward as four PyTorch ops: y * dy, its row sum, dy - sum, y * (...)."""
    return y * (dy - (y * dy).sum(-1, keepdim=True))


def reference_backward(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """dx in float64, the reference every provider is checked against."""
    y64, dy64 = y.to(torch.float64), dy.to(torch.float64)
    return y64 * (dy64 - (y64 * dy64).sum(-1, keepdim=True))


def liger_backward():
    """Liger-Kernel's backward as its autograd Function runs it, or None where it is not installed.
    (Its private ``_softmax_backward``, as Liger 0.8.5 has it: a failure is reported in ``status``.)"""
    try:
        from liger_kernel.ops.softmax import _softmax_backward
        from liger_kernel.ops.utils import calculate_settings
    except Exception:
        return None

    def run(y, dy, out):
        block, warps = calculate_settings(y.shape[-1])
        return _softmax_backward(dy, y, block, warps, False)

    return run


def providers() -> dict[str, Callable]:
    """name -> fn(y, dy, out) for every provider (``out`` is only the copy's destination)."""
    provs = {
        "copy": lambda y, dy, out: out.copy_(y),
        "course": lambda y, dy, out: softmax_backward(y, dy),
        "course_looped": lambda y, dy, out: softmax_backward_looped(y, dy),
        "torch_backward": lambda y, dy, out: torch._softmax_backward_data(dy, y, -1, y.dtype),
        "torch_naive_backward": lambda y, dy, out: naive_backward(y, dy),
    }
    liger = liger_backward()
    if liger is not None:
        provs["liger_backward"] = liger
    return provs


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def eager_ms(fn) -> float:
    return _measure.eager_ms(fn, rep=100)


def graph_ms(fn) -> float:
    return _measure.gpu_ms(fn, rep=50)


def host_us(fn) -> float:
    return _measure.host_us(fn)


GPU_TIMERS = {"ms": eager_ms, "graph_ms": graph_ms, "host_us": host_us}


def inputs(M: int, N: int, dtype, device=None, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, dy): y = softmax(x) of a random normal x (computed in fp32), dy random normal."""
    device = device or DEVICE
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(M, N, device=device, generator=g)
    y = torch.softmax(x, dim=-1).to(dtype)
    dy = torch.randn(M, N, device=device, generator=g).to(dtype)
    return y, dy


def measure(
    M: int,
    N: int,
    dtype,
    provs: dict | None = None,
    *,
    timers: dict | None = None,
    device=None,
    seed: int = 0,
    rounds: int = ROUNDS,
    group: str = "M=4096",
) -> list[dict]:
    """The rows of one shape: every provider checked against float64, then timed (``timers``: name
    -> fn(callable) -> number, the GPU timers by default; tests pass their own)."""
    provs = providers() if provs is None else provs
    timers = GPU_TIMERS if timers is None else timers
    y, dy = inputs(M, N, dtype, device, seed)
    ref = reference_backward(y, dy)
    scale = ref.abs().max().item() or 1.0
    out = torch.empty_like(y)
    d = str(dtype).replace("torch.", "")
    rows, ok = {}, {}
    for name, fn in provs.items():
        row = dict(group=group, dtype=d, M=M, N=N, provider=name)
        try:
            got = fn(y, dy, out)
            _sync()
            if name == "copy":
                err = (got.to(torch.float64) - y.to(torch.float64)).abs().max().item()
                good = err == 0.0
            else:
                err = (got.to(torch.float64) - ref).abs().max().item()
                good = math.isfinite(err) and err <= REL_TOL[dtype] * scale
            row.update(
                max_err=err, status="ok" if good else f"wrong: max abs error {err:.2e} (largest |dx| {scale:.2e})"
            )
            if good:
                ok[name] = fn
            del got
        except Exception as e:  # report, never hide: the CSV says which provider failed where, and why
            row.update(max_err=float("nan"), status=_measure.failed(e))
        rows[name] = row
    times = {name: {key: [] for key in timers} for name in ok}
    for _ in range(rounds):
        for name, fn in ok.items():
            call = lambda fn=fn: fn(y, dy, out)
            for key, timer in timers.items():
                if key in rows[name]:  # this timer failed in an earlier round
                    continue
                try:
                    times[name][key].append(timer(call))
                except Exception as e:  # e.g. a capture that fails: keep the other timings and say why
                    rows[name][key] = float("nan")
                    rows[name]["status"] = f"{key} {_measure.failed(e)}"
                    try:
                        _sync()
                    except Exception:
                        pass
    for name, by_key in times.items():
        for key, v in by_key.items():
            if key not in rows[name] and v:
                rows[name][key] = median(v)
                if key in ("ms", "graph_ms"):
                    rows[name]["spread" if key == "ms" else "graph_spread"] = spread(v)
    t_copy = rows.get("copy", {})
    for name, row in rows.items():
        for key in ("ms", "graph_ms", "host_us", "spread", "graph_spread"):
            row.setdefault(key, float("nan"))
        for frac, key in (("frac_of_copy", "ms"), ("graph_frac", "graph_ms")):
            tc, t = t_copy.get(key, float("nan")), row[key]
            if name == "copy":
                row[frac] = 1.0 if math.isfinite(t) else float("nan")
            else:
                row[frac] = 1.5 * tc / t if t and math.isfinite(t) else float("nan")
    del y, dy, ref, out
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return _measure.rounded([{k: rows[name][k] for k in COLUMNS} for name in rows])


def sweep(groups=tuple(SHAPES), dtypes=("float32", "bfloat16"), log=None, names=None) -> list[dict]:
    """Every provider (or those ``names``, with the copy) at every shape of the groups named, in each dtype
    (GPU timers)."""
    provs = providers()
    if names is not None:
        unknown = sorted(set(names) - set(provs))
        if unknown:
            raise SystemExit(f"unknown or unavailable providers {unknown}; these run here: {', '.join(provs)}")
        provs = {k: v for k, v in provs.items() if k == "copy" or k in names}
    warm_up_gpu()
    rows = []
    for d in dtypes:
        for group in groups:
            for M, N in SHAPES[group]:
                t0 = time.time()
                rows += measure(M, N, DTYPES[d], provs, group=group)
                if log:
                    log(f"{d} {M} x {N}: {time.time() - t0:.1f} s")
    return rows


def summary(rows: list[dict]) -> str:
    """One line per (dtype, N): course, torch_backward and the naive version, as fractions of copy (GPU time)."""
    cells: dict = {}
    for r in rows:
        cells.setdefault((r["dtype"], r["M"], r["N"]), {})[r["provider"]] = r
    lines = [
        f"{'dtype':9} {'N':>6}  {'course':>7} {'looped':>7} {'torch':>7} {'naive':>7}   (graph_frac; host µs of course / torch)"
    ]
    for (d, M, N), p in cells.items():
        f = lambda k: p.get(k, {}).get("graph_frac", float("nan"))
        h = lambda k: p.get(k, {}).get("host_us", float("nan"))
        lines.append(
            f"{d:9} {N:6d}  {f('course'):7.3f} {f('course_looped'):7.3f} {f('torch_backward'):7.3f} "
            f"{f('torch_naive_backward'):7.3f}   {h('course'):.1f} / {h('torch_backward'):.1f}"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/backward_bench.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("out_csv", help="where to write the CSV (the lesson reads figures/data/backward.csv)")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--groups", default=",".join(SHAPES), help=f"shape groups, comma-separated: {', '.join(SHAPES)}")
    ap.add_argument(
        "--providers",
        default=None,
        help="only these providers, comma-separated (the copy always runs: the fractions need it)",
    )
    args = ap.parse_args(argv)
    exit_without_gpu("the softmax backward benchmark", "figures/data/backward_<gpu>.csv")
    t0 = time.time()
    log = lambda s: print(s, file=sys.stderr, flush=True)
    rows = sweep(
        groups=tuple(args.groups.split(",")),
        dtypes=tuple(args.dtypes.split(",")),
        log=log,
        names=args.providers.split(",") if args.providers else None,
    )
    cmd = "python tools/backward_bench.py " + " ".join(argv if argv is not None else sys.argv[1:])
    path = write_csv(Path(args.out_csv), rows, provenance(cmd))
    print(summary(rows))
    print(f"wrote {path} ({len(rows)} rows) in {time.time() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
