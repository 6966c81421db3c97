"""`sample` and `softmax_topk` called again and again in one process, in random order, every result checked.

    python tools/sampling_stress.py --seconds 360 --out stress.csv     # on a GPU
    python tools/sampling_stress.py --calls 40 --small                 # anywhere (a CPU: the interpreter)

The calls come in epochs of 150: each epoch draws three shapes (1 to 1024 rows of 111 to 256000 columns, at most
32M logits; with --small at most 4 rows of 3000), each with a dtype and a kind of logits, and six settings:
`top_k` on each side of each path's limit (the lane kernels' 64, the per-program kernels' 1024), `top_p` with and
without `top_k`, temperatures from 0 (greedy) to below the kernels' range, Gumbel-max (no filter), and
`softmax_topk`'s `k` on each side of the same limits; then it calls them in random order, the kernels compiled for
the epoch called many times. Every call gets fresh logits, freed after it; between calls tensors filled with 0xFF
bytes (NaN as floats) are made and freed, so that memory a kernel did not write in this call holds poison, not an
old right answer; `--max-entries` shrinks the wrappers' cache of ready functions, so that they are dropped and
made again. It checks

- every draw of `sample` against the columns it may return, computed in float64 by a stable sort (of equal logits
  the lower column first), with a slack of 1e-4 at the nucleus's boundary, and never a column of probability 0;
  greedy and rows without a softmax (-1) exactly;
- every `softmax_topk` against float64 torch: the columns exactly (ties to the lower column), the probabilities
  within the dtype's tolerance.

It prints a line per path at the end (calls, rows, wrong results), writes them with `--out`, and exits 1 after
the first wrong result, saying how to rebuild it (call seed, shape, setting, row, column).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import helpers  # noqa: E402  (first: interpreter or GPU)
from helpers import gpu_data, launch  # noqa: E402
from helpers.kernels import sampling, sampling_step, topk_lanes  # noqa: E402

ROWS = (1, 2, 3, 8, 31, 64, 99, 128, 256, 989, 1024)
COLS = (111, 1000, 4096, 32000, 50257, 128256, 151936, 256000)
KINDS = ("randn", "wide", "logprobs", "ties", "flat", "minus_inf", "no_softmax")
TOP_K = (1, 2, 10, 50, 63, 64, 65, 256, 257, 600, 1024, 1025, 3000)
TOP_P = (0.1, 0.5, 0.8, 0.9, 0.95, 0.999)
TEMPERATURES = (0.3, 0.7, 1.0, 1.7, 1e-31)  # 1e-31: below the kernels' range, the sort
SLACK = 1e-4


class WrongResult(AssertionError):
    pass


def make_logits(kind, M, N, dtype, gen, device):
    """Logits of one kind; no -0.0 (the kernels' key puts it below 0.0, float64's sort does not)."""
    r = lambda: torch.rand(M, N, generator=gen, device=device)  # noqa: E731
    if kind == "randn":
        x = torch.randn(M, N, generator=gen, device=device) * 3
    elif kind == "wide":  # far apart: most probabilities underflow, the temperature matters
        x = torch.randn(M, N, generator=gen, device=device) * 40
    elif kind == "logprobs":  # FlashInfer's test inputs: log of normalized uniforms, many near-ties
        p = r()
        x = (p / p.sum(-1, keepdim=True)).log()
    elif kind == "ties":  # few distinct values
        x = torch.randint(0, 4, (M, N), generator=gen, device=device).float()
    elif kind == "flat":  # nearly equal: nuclei larger than the kernels' 256 candidates
        x = r() * 1e-3
    elif kind == "minus_inf":  # most of each row -inf, one row all -inf
        x = (torch.randn(M, N, generator=gen, device=device) * 3).masked_fill(r() < 0.97, float("-inf"))
        x[M // 2] = float("-inf")
    else:  # rows without a softmax: a NaN, a +inf
        x = torch.randn(M, N, generator=gen, device=device)
        x[0, N // 3] = float("nan")
        x[M - 1, N // 2] = float("inf")
    return (x + 0.0).to(dtype)


def stable_order(x):
    return torch.sort(x.double(), dim=-1, descending=True, stable=True).indices


def no_softmax(x64):
    return (x64.isnan() | (x64 == float("inf"))).any(-1) | (x64 == float("-inf")).all(-1)


def allowed(x, temperature, top_k, top_p):
    """(M, N) bool: the columns a draw may return (float64, ties to the lower column, SLACK at the boundary)."""
    x64 = x.double()
    order = stable_order(x)
    z = (x64 - x64.amax(-1, keepdim=True)) / temperature
    p = torch.softmax(z.nan_to_num(nan=0.0), -1).gather(-1, order)
    live = torch.ones_like(p, dtype=torch.bool)
    if top_k is not None:
        live[:, top_k:] = False
        p = torch.where(live, p, 0.0)
        p = p / p.sum(-1, keepdim=True)
    if top_p is not None and top_p < 1:
        live &= (p.cumsum(-1) - p) < top_p + SLACK
    live &= p > 0
    return torch.zeros_like(live).scatter(-1, order, live)


def check_sample(x, ids, temperature, top_k, top_p):
    """Raise WrongResult naming the first bad row."""
    x64 = x.double()
    none = no_softmax(x64)
    if temperature == 0:
        ok = ids == torch.where(none, -1, stable_order(x)[:, 0])
    else:
        fine = allowed(x, temperature, top_k, top_p)
        inside = fine.gather(-1, ids.clamp(0, x.shape[1] - 1)[:, None])[:, 0] & (ids >= 0)
        ok = torch.where(none, ids == -1, inside)
    if not bool(ok.all()):
        row = int((~ok).nonzero()[0, 0])
        raise WrongResult(f"row {row} drew column {int(ids[row])}")


def check_topk(x, values, indices, k):
    x64 = x.double()
    good = ~no_softmax(x64)
    want = stable_order(x)[:, :k]
    p = torch.softmax(x64, -1).gather(-1, want)
    if not torch.equal(indices[good], want[good]):
        row = int((indices != want).any(-1).logical_and(good).nonzero()[0, 0])
        raise WrongResult(f"row {row}: columns {indices[row, :8].tolist()}..., want {want[row, :8].tolist()}...")
    tol = 1e-5 if x.dtype == torch.float32 else 1e-2
    close = torch.isclose(values.double(), p, rtol=tol, atol=1e-6).all(-1)
    if not bool(close[good].all()):
        row = int((~close & good).nonzero()[0, 0])
        raise WrongResult(f"row {row}: probabilities {values[row, :4].tolist()}..., want {p[row, :4].tolist()}...")
    only_minus_inf = (x64 == float("-inf")).all(-1)
    if not bool(values[only_minus_inf].isnan().all()):
        raise WrongResult("a row of only -inf: its probabilities should be NaN, as torch.softmax gives")


def path_of(api, M, N, k=None, temperature=1.0, top_k=None, top_p=None):
    """Which kernels (or sort) the call takes, as the wrappers decide."""
    if api == "softmax_topk":
        K = sampling.candidate_lanes(k)
        return "softmax_topk " + (
            "sort" if k > sampling_step.MAX_K else "lanes" if topk_lanes.use_lanes(M, N, K) else "per_program"
        )
    if temperature == 0:
        return "sample greedy " + ("lanes" if topk_lanes.use_lanes(M, N, 2) else "per_program")
    if not sampling_step.MIN_TEMPERATURE <= temperature <= sampling_step.MAX_TEMPERATURE:
        return "sample sort (temperature)"
    nucleus = top_p is not None and top_p < 1
    if top_k is None and not nucleus:
        return "sample gumbel"
    kk = min(top_k, N) if top_k is not None else min(sampling_step.TOP_P_BOUND, N)
    what = "top_k" if not nucleus else ("top_p" if top_k is None else "top_k+top_p")
    if kk > sampling_step.MAX_K:
        return f"sample {what} sort"
    return f"sample {what} " + ("lanes" if topk_lanes.use_lanes(M, N, sampling.candidate_lanes(kk)) else "per_program")


def draw_setting(rng):
    """One setting: a dict of call arguments, with the api's name."""
    if rng.random() < 0.3:
        return {"api": "softmax_topk", "k": rng.choice(TOP_K)}  # cut to the row's length at the call
    temperature = 0 if rng.random() < 0.12 else rng.choice(TEMPERATURES)
    return {
        "api": "sample",
        "temperature": temperature,
        "top_k": rng.choice((None,) + TOP_K) if rng.random() < 0.8 else None,
        "top_p": rng.choice((None, 1.0) + TOP_P),
        "repeat": 20 if rng.random() < 0.1 else rng.randint(1, 3),
    }


def draw_shape(rng, small, max_elements):
    """(M, N, dtype, kind)."""
    M = rng.choice((1, 2, 3, 4) if small else ROWS)
    N = rng.choice((111, 1000, 3000) if small else COLS)
    while not small and M * N > max_elements:
        M, N = (M // 2, N) if M > 1 else (1, max(c for c in COLS if c <= max(max_elements, COLS[0])))
    if not small and rng.random() < 0.1 and 99 * 32000 <= max_elements:  # FlashInfer's test_top_k_sampling
        return 99, 32000, torch.float32, "logprobs"
    return M, N, rng.choice((torch.float32, torch.bfloat16, torch.float16)), rng.choice(KINDS)


def churn(rng, device, pool):
    """Make and free tensors of poison (0xFF bytes), so freed memory never holds an old right answer."""
    for _ in range(rng.randint(0, 3)):
        pool.append(
            torch.full((rng.randint(1, 1 << rng.choice((10, 16, 20, 24))),), 255, dtype=torch.uint8, device=device)
        )
    while len(pool) > 6 or (pool and rng.random() < 0.5):
        pool.pop(rng.randrange(len(pool)))


def one_call(shape, s, call_seed, strided, fns):
    """Fresh logits of `shape` (M, N, dtype, kind), read through a wider buffer if `strided`, then the call of
    setting `s`, checked. Returns (path, calls made, rows)."""
    (M, N, dtype, kind), device = shape, helpers.DEVICE
    x = make_logits(kind, M, N, dtype, torch.Generator(device=device).manual_seed(call_seed), device)
    if strided:  # a row stride larger than N
        wide = torch.full((M, N + 13), float("nan"), dtype=dtype, device=device)
        wide[:, :N] = x
        x = wide[:, :N]
    path = "?"
    try:
        if s["api"] == "softmax_topk":
            k = min(s["k"], N)
            path, reps = path_of("softmax_topk", M, N, k=k), 1
            values, indices = fns["softmax_topk"](x, k)
            check_topk(x, values, indices, k)
        else:
            path = path_of("sample", M, N, temperature=s["temperature"], top_k=s["top_k"], top_p=s["top_p"])
            reps = s.get("repeat", 1)
            for r in range(reps):
                g = torch.Generator(device=device).manual_seed(42 if reps == 20 else call_seed + r)
                ids = fns["sample"](x, temperature=s["temperature"], top_k=s["top_k"], top_p=s["top_p"], generator=g)
                check_sample(x, ids, s["temperature"], s["top_k"], s["top_p"])
    except WrongResult as e:
        raise WrongResult(f"call seed {call_seed} ({M} x {N} {str(dtype)[6:]} {kind}) {s}, path {path}: {e}") from None
    return path, reps, M


#: One call of each kernel and mode, on small inputs (--cover: what compute-sanitizer runs, each once).
COVER = [
    ((4, 32000, torch.float32, "randn"), dict(api="softmax_topk", k=50)),  # lanes, MODE 0
    ((4, 32000, torch.float32, "randn"), dict(api="sample", temperature=0.7, top_k=50, top_p=0.9)),  # MODE 1
    ((4, 32000, torch.bfloat16, "logprobs"), dict(api="sample", temperature=0, top_k=None, top_p=None)),  # 2
    ((8, 4096, torch.float16, "ties"), dict(api="sample", temperature=1.0, top_k=10, top_p=None)),  # whole row
    ((3, 50257, torch.float32, "minus_inf"), dict(api="softmax_topk", k=64)),  # lanes, -inf rows
    ((2, 128256, torch.bfloat16, "randn"), dict(api="sample", temperature=1.0, top_k=64, top_p=None)),
    ((2, 1000, torch.float32, "randn"), dict(api="softmax_topk", k=100)),  # per program, MODE 0
    ((2, 1000, torch.bfloat16, "no_softmax"), dict(api="sample", temperature=0, top_k=None, top_p=None)),
    ((3, 4096, torch.float32, "randn"), dict(api="sample", temperature=1.0, top_k=600, top_p=0.95)),  # K 1024
    ((3, 4096, torch.float32, "flat"), dict(api="sample", temperature=0.7, top_k=None, top_p=0.5)),  # fallback
    ((2, 4096, torch.float16, "randn"), dict(api="sample", temperature=1.3, top_k=None, top_p=None)),  # Gumbel
    ((2, 2000, torch.float32, "randn"), dict(api="softmax_topk", k=1025)),
]  # the sort


def run(
    seconds=None,
    calls=None,
    small=False,
    seed=0,
    fns=None,
    log=print,
    max_elements=32_000_000,
    shapes=3,
    settings=6,
    epoch=150,
):
    """Call until `seconds` have passed or `calls` calls are made; return, per path, the calls and rows. Raises
    WrongResult at the first wrong result. The calls come in epochs: each draws `shapes` shapes and `settings`
    settings and makes `epoch` calls of them in random order (fresh logits each call), so that kernels compiled
    for an epoch are called many times. `fns` replaces the functions under test ({"sample": ..., "softmax_topk":
    ...}), for the test that checks the checks."""
    fns = {"sample": sampling.sample, "softmax_topk": sampling.softmax_topk, **(fns or {})}
    device = helpers.DEVICE
    rng = random.Random(seed)
    done, rows = Counter(), Counter()
    pool, start, n = [], time.time(), 0
    more = lambda: (calls is None or n < calls) and (seconds is None or time.time() - start < seconds)  # noqa: E731
    while more():
        shape_pool = [draw_shape(rng, small, max_elements) for _ in range(shapes)]
        setting_pool = [draw_setting(rng) for _ in range(settings)]
        for _ in range(epoch):
            if not more():
                break
            shape, s = rng.choice(shape_pool), dict(rng.choice(setting_pool))
            churn(rng, device, pool)
            path, reps, M = one_call(shape, s, rng.randrange(2**31), rng.random() < 0.2, fns)
            done[path] += reps
            rows[path] += reps * M
            n += reps
            if n % 500 == 0:
                log(f"{n} calls, {sum(done.values())} draws or top-k's, {time.time() - start:.0f} s")
    return {path: {"calls": done[path], "rows": rows[path]} for path in sorted(done)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float)
    ap.add_argument("--calls", type=int)
    ap.add_argument("--small", action="store_true", help="at most 4 rows of 3000 columns (for the interpreter)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-elements", type=int, default=32_000_000, help="at most this many logits a call")
    ap.add_argument("--epoch", type=int, default=150, help="calls an epoch (its shapes and settings) lasts")
    ap.add_argument("--shapes", type=int, default=3, help="shapes an epoch draws")
    ap.add_argument("--settings", type=int, default=6, help="settings an epoch draws")
    ap.add_argument("--max-entries", type=int, help="the wrappers' cache size (default: helpers.launch.MAX_ENTRIES)")
    ap.add_argument("--no-pdl", action="store_true", help="launch the lane kernels one after the other, without PDL")
    ap.add_argument("--cover", action="store_true", help="one call of each kernel and mode (COVER), then stop")
    ap.add_argument("--out", help="write the per-path counts here, with provenance")
    a = ap.parse_args(argv)
    if a.seconds is None and a.calls is None and not a.cover:
        ap.error("say how long: --seconds or --calls (or --cover)")
    if a.max_entries:
        launch.MAX_ENTRIES = a.max_entries
    if a.no_pdl:
        topk_lanes.launch_pdl = lambda device_index: False
    start = time.time()
    try:
        if a.cover:
            fns = {"sample": sampling.sample, "softmax_topk": sampling.softmax_topk}
            counts = Counter(one_call(shape, s, i, i % 2 == 1, fns)[0] for i, (shape, s) in enumerate(COVER))
            counts = {p: {"calls": c, "rows": 0} for p, c in sorted(counts.items())}
        else:
            counts = run(
                a.seconds,
                a.calls,
                a.small,
                a.seed,
                max_elements=a.max_elements,
                shapes=a.shapes,
                settings=a.settings,
                epoch=a.epoch,
            )
    except WrongResult as e:
        print(f"WRONG: {e}", file=sys.stderr)
        return 1
    took = time.time() - start
    for path, c in counts.items():
        print(f"{path:36s} {c['calls']:8d} calls {c['rows']:10d} rows")
    total = sum(c["calls"] for c in counts.values())
    print(
        f"all right: {total} calls, {sum(c['rows'] for c in counts.values())} rows, {len(counts)} paths, {took:.0f} s"
    )
    if a.out:
        command = "python tools/sampling_stress.py " + " ".join(argv if argv is not None else sys.argv[1:])
        meta = gpu_data.provenance(command)
        meta["seconds"] = round(took)
        gpu_data.write_csv(a.out, [{"path": p, **c, "wrong": 0} for p, c in counts.items()], meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
