"""Lesson 09: softmax over a vocabulary, top-k and sampling in one read of the logits. What its cells call
and a learner need not read: the key probe, the correctness and frequency checks and the live measurement
(``sampling_rows``, also used by ``tools/sampling_bench.py``). The checkers of exercises 9.1 and 9.2 are in
``helpers.lesson09_exercises``."""

from __future__ import annotations

import math

import pandas as pd
import torch
import triton
import triton.language as tl

from . import data, launch, plots
from .kernels import sampling
from .kernels.sampling import sample, softmax_topk
from .kernels.sampling_step import topk_keys
from .mode import DEVICE, ON_GPU


# ---- Keys, and the library's kernels against float64 ----
@triton.jit
def _keys_probe(out_ptr, in_ptr, n, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    x = tl.load(in_ptr + cols, mask=cols < n, other=0.0)
    tl.store(out_ptr + cols, topk_keys(x, cols.to(tl.int64), n), mask=cols < n)


def keys_of(x: torch.Tensor) -> torch.Tensor:
    """The int64 keys ``topk_keys`` gives the logits of a 1-D float32 tensor (column j for entry j)."""
    x = x.to(DEVICE, torch.float32).contiguous()
    out = torch.empty(x.shape, dtype=torch.int64, device=DEVICE)
    _keys_probe[(1,)](out, x, x.numel(), BLOCK=triton.next_power_of_2(x.numel()))
    return out.cpu()


def topk_cases():
    """(name, x, k): irregular rows, -inf entries, a row of only -inf, leading dimensions, a
    transposed view, k = 1 and k = N, ties, bfloat16."""
    g = torch.Generator().manual_seed(9)
    r = lambda *s: torch.randn(*s, generator=g) * 3
    inf = r(3, 300)
    inf[0, :250] = float("-inf")
    inf[1, ::3] = float("-inf")
    inf[2] = float("-inf")
    ties = torch.tensor([[1.0, 2.0, 2.0, 0.5, 2.0, -1.0, 2.0]])
    return [
        ("37 columns, k = 5", r(3, 37), 5),
        ("300 columns with -inf, k = 50", inf, 50),
        ("leading dimensions (2, 3, 45), k = 45", r(2, 3, 45), 45),
        ("a transposed view, k = 1", r(40, 3).t(), 1),
        ("ties, k = 3", ties, 3),
        ("bfloat16, 100 columns, k = 7", r(2, 100).to(torch.bfloat16), 7),
    ]


def topk_error(fn, x: torch.Tensor, k: int) -> float:
    """Largest error of ``fn(x, k)`` against float64, NaN where torch gives NaN; indices checked
    through the probabilities they point at (ties may pick either column). inf on a mismatch."""
    xd = x.to(DEVICE)
    x_before = xd.clone()
    values, indices = fn(xd, k)
    values, indices = values.cpu(), indices.cpu()
    if not torch.equal(xd, x_before):  # the tensor it was given, on the GPU too
        return math.inf
    p = torch.softmax(x.double(), -1)
    want = p.topk(k).values
    if values.shape != want.shape or indices.shape != want.shape or values.dtype != x.dtype:
        return math.inf
    nan = torch.isnan(want)
    if not torch.equal(torch.isnan(values), nan):
        return math.inf
    ok = ~nan
    err = (values.double() - want)[ok].abs().max().item() if ok.any() else 0.0
    at = p.gather(-1, indices)[ok] if ok.any() else torch.zeros(0)
    return max(err, (at - want[ok]).abs().max().item() if at.numel() else 0.0)


def check_softmax_topk(fn=softmax_topk) -> bool:
    """Every case of ``topk_cases`` within its dtype's tolerance (bfloat16: the values' rounding)."""
    return all(topk_error(fn, x, k) <= (1e-2 if x.dtype == torch.bfloat16 else 1e-6) for _, x, k in topk_cases())


# ---- The draws' frequencies against the exact distribution ----
VOCAB = torch.tensor([2.0, 1.6, 1.5, 1.0, 0.7, 0.3, 0.0, -0.5, -1.0, -2.0])
SETTINGS = ({"temperature": 0.7, "top_k": 4, "top_p": 0.8}, {"top_p": 0.6}, {"temperature": 1.5}, {"top_k": 3})


def exact_probs(logits: torch.Tensor, temperature=1.0, top_k=None, top_p=None) -> torch.Tensor:
    """The float64 distribution ``sample`` draws from, for one row: temperature, top-k renormalized,
    then the nucleus (the mass before a token below top_p), renormalized."""
    p = torch.softmax(logits.double() / temperature, -1)
    order = p.argsort(descending=True)
    q = torch.zeros_like(p)
    keep = order[: top_k or len(p)]
    q[keep] = p[keep] / p[keep].sum()
    if top_p is not None:
        qs = q[order]
        drop = order[(qs.cumsum(0) - qs) >= top_p]
        q[drop] = 0.0
        q = q / q.sum()
    return q


def frequency_check(draws: int = 2000, settings=SETTINGS, seed: int = 0, fn=sample) -> pd.DataFrame:
    """Draw ``draws`` tokens per setting of ``SETTINGS`` from ``VOCAB`` in one call each, and compare
    the counts with ``exact_probs`` by a chi-square statistic against its 0.1% critical value
    (Wilson-Hilferty), and count draws outside the kept tokens."""
    rows = []
    for i, s in enumerate(settings):
        q = exact_probs(VOCAB, **s)
        logits = VOCAB.to(DEVICE).expand(draws, len(VOCAB))  # one row, read `draws` times (row stride 0)
        ids = fn(logits, generator=torch.Generator(device=DEVICE).manual_seed(seed + i), **s).cpu()
        counts = torch.bincount(ids, minlength=len(VOCAB)).double()
        kept = q > 0
        chi2 = (((counts - draws * q)[kept]) ** 2 / (draws * q[kept])).sum().item()
        df = max(int(kept.sum()) - 1, 1)
        crit = df * (1 - 2 / (9 * df) + 3.09 * math.sqrt(2 / (9 * df))) ** 3
        rows.append(
            {
                "setting": ", ".join(f"{k}={v}" for k, v in s.items()),
                "tokens kept": int(kept.sum()),
                "chi2": round(chi2, 3),
                "critical (0.1%)": round(crit, 3),
                "draws outside": int(counts[~kept].sum()),
                "agrees": bool(chi2 < crit and counts[~kept].sum() == 0),
            }
        )
    return pd.DataFrame(rows).set_index("setting")


# ---- Live measurement (on a GPU): used by the lesson's cell and tools/sampling_bench.py ----
def hf_sample(logits, temperature=0.7, top_k=50, top_p=0.9, generator=None):
    """Hugging Face's logits-processor chain: temperature, top-k, top-p by sort and cumsum, multinomial."""
    x = logits.float() / temperature
    x = x.masked_fill(x < x.topk(top_k, dim=-1).values[..., -1:], float("-inf"))
    xs, order = x.sort(dim=-1)
    drop = xs.softmax(-1).cumsum(-1) <= 1 - top_p
    drop[..., -1] = False
    x = x.scatter(-1, order, xs.masked_fill(drop, float("-inf")))
    return torch.multinomial(x.softmax(-1), 1, generator=generator)[..., 0]


def torch_softmax_topk(x, k=50):
    return torch.softmax(x.float(), -1).topk(k)


def every_call_planned(fn):
    """The same kernels behind a wrapper written the obvious way: every call checks, plans and launches them
    through ``kernel[grid](...)``, and nothing is kept (``fn(x)`` makes a ready function and calls it once)."""

    def call(x):
        direct, launch.DIRECT[0] = launch.DIRECT[0], False  # so the ready function made here takes the JIT path
        try:
            return fn(x)
        finally:
            launch.DIRECT[0] = direct

    return call


PROVIDERS = (
    "copy",
    "course_softmax_topk",
    "course_sample",
    "course_topk_per_program",
    "course_topk_lanes",
    "course_softmax_topk_jit",
    "course_sample_jit",
    "torch_softmax_topk",
    "torch_hf_sample",
    "compile_softmax_topk",
    "compile_hf_sample",
    "flashinfer_sample",
)
TOPK_CHECKED = (
    "course_softmax_topk",
    "course_topk_per_program",
    "course_topk_lanes",  # against float64 first
    "course_softmax_topk_jit",
)


def providers(names=PROVIDERS) -> dict:
    """Name -> function(x) (or None where not installed). Compiled ones are compiled once, dynamic."""
    p = {
        "course_softmax_topk": lambda x: softmax_topk(x, 50),
        "course_sample": lambda x: sample(x, temperature=0.7, top_k=50, top_p=0.9),
        "course_topk_per_program": lambda x: sampling.topk_per_program(x, 50),  # each design at every shape
        "course_topk_lanes": lambda x: sampling.topk_by_lanes(x, 50),
        "course_softmax_topk_jit": every_call_planned(lambda x: sampling._topk_call(x, 50, None)(x)),
        "course_sample_jit": every_call_planned(lambda x: sampling._sample_call(x, 0.7, 50, 0.9)(x, None, 0.7, 0.9)),
        "torch_softmax_topk": torch_softmax_topk,
        "torch_hf_sample": hf_sample,
    }
    if "compile_softmax_topk" in names or "compile_hf_sample" in names:
        p["compile_softmax_topk"] = torch.compile(torch_softmax_topk, dynamic=True)
        p["compile_hf_sample"] = torch.compile(hf_sample, dynamic=True)
    try:
        import flashinfer.sampling as fs

        p["flashinfer_sample"] = flashinfer_draws(fs)["flashinfer_sample"]
    except Exception:
        p["flashinfer_sample"] = None
    return {n: p.get(n) for n in names if n != "copy"}


def flashinfer_draws(fs) -> dict:
    """Name -> function(x) for FlashInfer's ``top_k_top_p_sampling_from_logits`` (module ``fs``), the draw of
    ``sample(x, temperature=0.7, top_k=50, top_p=0.9)``. Its seed and offset are device tensors, FlashInfer's
    documented way to run inside a CUDA graph. ``flashinfer_sample``: from the same logits (FlashInfer takes
    float32 and no temperature, so the cast and the division are in the call); ``flashinfer_sample_scaled``: its
    kernels alone, on z = x.float() / 0.7 made once per tensor, outside the call."""
    seed = torch.zeros(1, dtype=torch.int64, device=DEVICE)
    offset = torch.zeros(1, dtype=torch.int64, device=DEVICE)
    draw = lambda z: fs.top_k_top_p_sampling_from_logits(z, 50, 0.9, seed=seed, offset=offset)
    scaled = {}

    def prescaled(x):
        key = (x.data_ptr(), tuple(x.shape), x.dtype)
        if key not in scaled:
            scaled.clear()
            scaled[key] = x.float() / 0.7
        return draw(scaled[key])

    return {"flashinfer_sample": lambda x: draw(x.float() / 0.7), "flashinfer_sample_scaled": prescaled}


TIMINGS = ("graph_us", "eager_us", "host_us", "graph_spread", "spread", "frac_of_one_read")


def sampling_rows(
    shapes, dtypes=("float32", "bfloat16"), names=PROVIDERS, rounds: int = 3, quick: bool = False, provs=None
):
    """On a GPU: each provider at each (M, N) and dtype, checked (the course's top-k against float64),
    then timed: GPU time (CUDA graph), eager time, host time per call; ``rounds`` rounds with spread.
    provs: name -> function(x) (None: not installed) to time beside the copy instead of ``providers(names)``."""
    from . import measure

    measure.require_gpu("sampling_rows")
    provs = providers(names) if provs is None else provs
    med = lambda v: sorted(v)[len(v) // 2]
    spread = lambda v: (max(v) - min(v)) / med(v) if all(math.isfinite(t) for t in v) else float("nan")
    out = []
    for dt in dtypes:
        for M, N in shapes:
            x = (
                torch.randn(M, N, device=DEVICE, generator=torch.Generator(DEVICE).manual_seed(0))
                .mul(3)
                .to(measure.DTYPES[dt])
            )
            y = torch.empty_like(x)
            fns, status = {"copy": lambda: y.copy_(x)}, {"copy": "ok"}
            for name, fn in provs.items():
                if fn is None:
                    status[name] = "not installed"
                    continue
                try:
                    res = fn(x)
                    if name in TOPK_CHECKED:
                        want = torch.softmax(x.double(), -1).topk(50).values
                        err = (res[0].double() - want).abs().max().item()
                        if not err <= (1e-2 if dt == "bfloat16" else 1e-5):
                            raise AssertionError(f"max abs error {err:.1e}")
                    if ON_GPU:
                        torch.cuda.synchronize()
                    fns[name], status[name] = (lambda fn=fn: fn(x)), "ok"
                except Exception as e:  # reported in the CSV, never hidden
                    status[name] = f"failed: {type(e).__name__}: {str(e).strip()[:80]}".replace(",", ";").replace(
                        "\n", " "
                    )
            t = {n: {"graph": [], "eager": []} for n in fns}
            for _ in range(1 if quick else rounds):
                for n, fn in fns.items():
                    t[n]["eager"].append(measure.eager_ms(fn, rep=20 if quick else 25))
                    try:
                        t[n]["graph"].append(measure.gpu_ms(fn, rep=10 if quick else 15))
                    except Exception as e:
                        status[n] = f"ok (no CUDA graph: {type(e).__name__})"
                        t[n]["graph"].append(float("nan"))
            floor = med(t["copy"]["graph"]) / 2 if fns else float("nan")
            for n, st in status.items():
                r = {"dtype": dt, "M": M, "N": N, "provider": n, **dict.fromkeys(TIMINGS, float("nan")), "status": st}
                if n in fns:
                    g = med(t[n]["graph"])
                    r.update(
                        graph_us=g * 1e3,
                        eager_us=med(t[n]["eager"]) * 1e3,
                        graph_spread=spread(t[n]["graph"]),
                        spread=spread(t[n]["eager"]),
                        frac_of_one_read=floor / g,
                        host_us=measure.host_us(fns[n], calls=20 if quick else 50),
                    )
                out.append({k: (round(v, 4) if isinstance(v, float) and math.isfinite(v) else v) for k, v in r.items()})
            del x, y
            if ON_GPU:
                torch.cuda.empty_cache()
    return out


def bench_frame(
    shapes,
    dtypes=("float32",),
    names=("copy", "course_softmax_topk", "course_sample", "torch_softmax_topk", "torch_hf_sample"),
) -> pd.DataFrame:
    """``sampling_rows`` as a DataFrame with its provenance (the lesson's live cell, on a GPU)."""
    from .gpu_data import provenance

    return data.frame(sampling_rows(shapes, dtypes, names, quick=True), provenance("lesson 09, live"))


# ---- Figures ----
GPU_COLORS = {"H100": "#1f77b4", "H200": "#d62728"}


def plot_fixed_cost(recordings: dict, above_us: float):
    """softmax_topk's GPU time against one read of the same logits (half the copy's time), one point per shape of
    each recording (``{"H100": frame, ...}``, frames of ``tools/sampling_bench.py``), log-log; hollow: the faster of
    PyTorch's softmax + top-k, eager or compiled. Lines: one read (the floor), 0.85 of it (the target), and one
    read plus ``above_us`` microseconds."""
    if not recordings:
        raise ValueError(
            "plot_fixed_cost needs at least one recording, e.g. {'H100': data.load('sampling', gpu='h100')}."
        )
    fig, ax = plots.new_figure(7.2, 4.6)
    reads = []
    for gpu, bench in recordings.items():
        us = bench.pivot_table(index=["dtype", "M", "N"], columns="provider", values="graph_us")
        missing = {"copy", "course_softmax_topk"} - set(us.columns)
        if missing:
            raise ValueError(
                f"the {gpu} recording has no {sorted(missing)} rows: pass frames of tools/sampling_bench.py."
            )
        read = us["copy"] / 2
        reads.append(read)
        color = GPU_COLORS.get(gpu, "#7f7f7f")
        ax.scatter(read, us.course_softmax_topk, s=22, color=color, zorder=3, label=f"softmax_topk(x, 50), {gpu}")
        peers = [c for c in ("torch_softmax_topk", "compile_softmax_topk") if c in us]
        if peers:  # the faster of the two at each shape
            ax.scatter(
                read,
                us[peers].min(axis=1),
                s=22,
                facecolors="none",
                edgecolors=color,
                alpha=0.7,
                zorder=3,
                label=f"PyTorch's softmax + top-k, {gpu}",
            )
    reads = pd.concat(reads)
    lo, hi = reads.min() / 1.5, reads.max() * 1.5
    line = [lo, hi]
    ax.plot(line, line, color=plots.color("copy"), lw=1.4, label="one read (the floor)")
    ax.plot(
        line, [v / 0.85 for v in line], color=plots.color("copy"), lw=1.2, ls=":", label="0.85 of one read (the target)"
    )
    grid = [lo * (hi / lo) ** (i / 60) for i in range(61)]
    ax.plot(grid, [v + above_us for v in grid], color="#2ca02c", lw=1.4, ls="--", label=f"one read + {above_us:.1f} µs")
    ax.set(
        xscale="log",
        yscale="log",
        xlim=(lo, hi),
        xlabel="one read of the logits, µs (half the copy's GPU time)",
        ylabel="GPU time, µs",
    )
    ax.legend(loc="upper left", fontsize=7.5, frameon=False)
    ax.set_title("softmax + top-50 at 1 to 256 rows of 32000 to 256000 logits, float32 and bfloat16", fontsize=9.5)
    return fig


def lane_example(x=None, k: int = 3):
    """What the lane kernels keep of one slice and what the merge reads again, for x of shape (steps, lanes, chunk)
    (default: 3 steps of 4 lanes reading chunks of 4, 16 bytes of float32, chosen so that every case occurs): a dict
    with x, each lane's maximum m, the step c of the chunk that holds it, v (the largest logit outside that chunk),
    T (the k-th largest m), the kept and unclean lanes, the candidates (every logit >= T of a kept lane's maximum
    chunk or of an unclean lane) and the top k of all logits, both as sets of (step, lane, position)."""
    if x is None:
        g = torch.Generator().manual_seed(9)
        x = (torch.randn(3, 4, 4, generator=g) * 1.5).clamp(max=4.0).mul(10).round().div(10)
        x[1, 0, 2], x[2, 0, 0] = 9.1, 7.5  # lane 0: its maximum, and a logit >= T in another chunk (unclean)
        x[0, 1, 1], x[0, 1, 3] = 8.0, 7.3  # lane 1: two logits >= T in the maximum's chunk (both read again)
        x[2, 2, 3] = 7.2  # lane 2: the k-th largest maximum, T
        x[0, 3, 0] = 5.0  # lane 3: a maximum below T (never read again)
    elif not (isinstance(x, torch.Tensor) and x.dim() == 3 and x.is_floating_point() and x.shape[0] >= 2):
        raise ValueError(
            "x must be a float tensor of shape (steps, lanes, chunk) with at least 2 steps, e.g. "
            "lane_example()['x'] with a value changed."
        )
    x = x.detach().float().cpu().clone()  # never the caller's tensor
    steps, lanes, chunk = x.shape
    if not 1 <= k <= lanes:
        raise ValueError(f"k must be between 1 and the number of lanes, {lanes}, got {k}.")
    chunk_max = x.amax(-1)  # (steps, lanes)
    top2 = chunk_max.topk(2, dim=0)
    m, c, v = top2.values[0], top2.indices[0], top2.values[1]
    T = m.topk(k).values[-1]
    kept, unclean = m >= T, v >= T
    where = [(b, j, e) for b in range(steps) for j in range(lanes) for e in range(chunk)]
    candidates = {w for w in where if x[w] >= T and ((kept[w[1]] and c[w[1]] == w[0]) or unclean[w[1]])}
    order = sorted(where, key=lambda w: -float(x[w]))
    return {
        "x": x,
        "m": m,
        "c": c,
        "v": v,
        "T": float(T),
        "k": k,
        "kept": kept,
        "unclean": unclean,
        "candidates": candidates,
        "top": set(order[:k]),
    }


def plot_lanes(example=None):
    """lane_example as the kernel sees it: a row of cells per step, each lane's chunk in its color, the chunk that
    holds its maximum outlined; bold: the candidates the merge reads again; red: the top k among them."""
    ex = example or lane_example()
    x, steps, lanes, chunk = ex["x"], *ex["x"].shape
    tints = ["#dbe9f6", "#fde3c8", "#d9f0d3", "#e8dff2"]
    fig, ax = plots.new_figure(9.0, 3.0)
    for b in range(steps):
        for j in range(lanes):
            for e in range(chunk):
                col = j * chunk + e
                ax.add_patch(
                    plots.plt.Rectangle((col, -b - 1), 1, 1, facecolor=tints[j % 4], edgecolor="white", lw=1.5)
                )
                w = (b, j, e)
                ax.text(
                    col + 0.5,
                    -b - 0.5,
                    f"{float(x[w]):.1f}",
                    ha="center",
                    va="center",
                    fontsize=8.5,
                    fontweight="bold" if w in ex["candidates"] else "normal",
                    color="#d62728" if w in ex["top"] else ("#000000" if w in ex["candidates"] else "#666666"),
                )
        ax.text(
            -0.2,
            -b - 0.5,
            f"step {b}: columns {b * lanes * chunk}-{(b + 1) * lanes * chunk - 1}",
            ha="right",
            va="center",
            fontsize=8.5,
        )
    for j in range(lanes):
        b = int(ex["c"][j])
        ax.add_patch(
            plots.plt.Rectangle(
                (j * chunk + 0.04, -b - 0.96), chunk - 0.08, 0.92, fill=False, edgecolor="#000000", lw=2
            )
        )
        ax.text(j * chunk + chunk / 2, 0.35, f"lane {j}", ha="center", fontsize=9)
        m, v = float(ex["m"][j]), float(ex["v"][j])
        verdict = (
            "unclean: read again whole"
            if ex["unclean"][j]
            else "kept: its chunk read again"
            if ex["kept"][j]
            else "below T: not read again"
        )
        ax.text(
            j * chunk + chunk / 2,
            -steps - 0.35,
            f"m = {m:.1f}, v = {v:.1f}\n{verdict}",
            ha="center",
            va="top",
            fontsize=8.5,
        )
    ax.set(xlim=(-4.8, lanes * chunk + 0.1), ylim=(-steps - 1.3, 0.8))
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(
        f"{lanes} lanes, each reading a chunk of {chunk} logits a step; outlined: the chunk that "
        f"holds a lane's maximum m.\nk = {ex['k']}, so T = {ex['T']:.1f} (the k-th largest m). Bold: every logit "
        f">= T the merge reads again; red: the top {ex['k']}.",
        fontsize=9,
    )
    return fig


def _fixed_cost_figure():
    """09_fixed_cost from the two recordings, the dashed line at the median above one read over every shape at 64
    and 256 rows. The lesson's cell leaves out shapes whose rounds spread over 10% (these recordings have none), so
    the two lines agree while no shape is noisy; the text quotes the cell's (its `claims`)."""
    recordings = {"H100": data.load("sampling", gpu="h100"), "H200": data.load("sampling", gpu="h200")}
    us = (
        pd.concat([b.assign(gpu=g) for g, b in recordings.items()])
        .query("M >= 64")
        .pivot_table(index=["dtype", "M", "N"], columns=["provider", "gpu"], values="graph_us")
    )
    return plot_fixed_cost(recordings, (us["course_softmax_topk"] - us["copy"] / 2).stack().median())


#: Figures of this lesson, by the name ``helpers.plots.save`` writes them under (from the recordings).
FIGURES = {"09_lanes": plot_lanes, "09_fixed_cost": _fixed_cost_figure}
