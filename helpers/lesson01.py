"""Lesson 01 · Naive softmax in PyTorch: the traffic of the five ops (counted by ``helpers.traffic``),
the roofline of the recorded GPU (``figures/data/device_props.csv``), figures and exercise checkers."""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

from . import data, plots
from .exercises import Wrong, call_attempt, check, expect_close, fmt, same_values
from .reference import reference_softmax, stable_softmax
from .traffic import kernel_traffic, naive_ops

# Traffic of the naive five-op softmax


def traffic_rows(M: int, N: int) -> list[dict]:
    """One dict per operation of the naive row-wise softmax (name, code, reads, writes, in
    elements), then one for the naive total and one for a fused kernel."""
    rows = [{"name": o.name, "code": o.code, "reads": o.reads, "writes": o.writes} for o in naive_ops(M, N)]
    return rows + [
        {"name": "naive total", "code": "", **kernel_traffic("naive", M, N)},
        {"name": "fused kernel", "code": "y = softmax(x) in one kernel", **kernel_traffic("fused", M, N)},
    ]


def plot_naive_traffic(M: int = 4096, N: int = 1024):
    """Reads and writes of each naive op, in units of MN, next to the naive total and a fused
    kernel's: the five-op version moves about 8MN elements, the fused kernel 2MN."""
    rows, MN = traffic_rows(M, N), M * N
    fig, (ax1, ax2) = plots.new_figure(9.0, 3.6, ncols=2)
    read_c, write_c = "#7f9fc9", "#e0915a"
    names = [r["name"] for r in rows[:-2]]
    reads, writes = ([r[k] / MN for r in rows[:-2]] for k in ("reads", "writes"))
    ax1.bar(names, reads, color=read_c, label="reads")
    ax1.bar(names, writes, bottom=reads, color=write_c, label="writes")
    ax1.set_ylabel("elements moved (units of MN)")
    ax1.set_title("Naive softmax: one pass over memory per op")
    ax1.set_ylim(0, 2.6)
    ax1.legend(loc="upper right", ncols=2, frameon=False)

    labels = ["naive (5 ops)", "fused kernel"]
    r2, w2 = ([r[k] / MN for r in rows[-2:]] for k in ("reads", "writes"))
    ax2.bar(labels, r2, color=read_c, label="reads", width=0.5)
    ax2.bar(labels, w2, bottom=r2, color=write_c, label="writes", width=0.5)
    for i, (a, b) in enumerate(zip(r2, w2)):
        ax2.text(i, a + b + 0.15, f"{a + b:.1f} MN", ha="center")
    ax2.set_ylim(0, 9.5)
    ax2.set_title("Total DRAM traffic")
    ax2.legend(loc="upper right", frameon=False)
    fig.suptitle(f"M = {M}, N = {N}: the M-sized terms (row max, row sum) are too small to see", fontsize=9)
    return fig


# Arithmetic intensity and the roofline

#: fp32 lanes per SM of a Hopper GPU (H100, H200), and its boost clock (NVIDIA's H100 SXM
#: datasheet): device_props.csv records neither, so the compute roof is the one datasheet number.
FP32_LANES_PER_SM = 128
BOOST_CLOCK_HZ = 1.98e9


def recorded_gpu() -> dict:
    """The course's GPU as ``figures/data/device_props.csv`` recorded it (the H100): name, SMs, the
    DRAM peak from its memory clock and bus width (``bytes_per_s``: the memory roof), the measured
    ``y.copy_(x)`` of 1 GiB (eager and GPU time), the fp32 peak (SMs x 128 lanes x 2 FLOP x the
    boost clock), the provenance."""
    df = data.load("device_props")
    props, sms = df.iloc[0], int(df.sm_count.iloc[0])
    return {
        "name": props["name"].replace("NVIDIA ", ""),
        "full_name": props["name"],
        "sm_count": sms,
        "fp32_flops": sms * FP32_LANES_PER_SM * 2 * BOOST_CLOCK_HZ,
        "bytes_per_s": float(props["dram_peak_gbps"]) * 1e9,
        "copy_bytes_per_s": float(props["copy_gbps_1GiB"]) * 1e9,
        "copy_graph_bytes_per_s": float(props["copy_graph_gbps_1GiB"]) * 1e9,
        "provenance": data.provenance(df),  # GPU, driver, versions, date, command
    }


#: Floating-point operations per element of softmax: compare (max), subtract, exp, add (sum),
#: divide (``exp`` counted as one: a few instructions would not change the conclusion).
SOFTMAX_FLOPS_PER_ELEMENT = 5


def ridge_point(gpu: dict | None = None) -> float:
    """FLOPs per byte where a kernel turns from memory-bound to compute-bound: peak FLOP/s / peak
    bytes/s (default: the recorded GPU)."""
    g = recorded_gpu() if gpu is None else gpu
    return g["fp32_flops"] / g["bytes_per_s"]


def softmax_intensity(kernel: str = "fused", element_size: int = 4, M: int = 4096, N: int = 4096) -> float:
    """Arithmetic intensity (FLOPs per byte of DRAM traffic) of softmax as ``kernel`` computes it."""
    t = kernel_traffic(kernel, M, N)
    return SOFTMAX_FLOPS_PER_ELEMENT * M * N / ((t["reads"] + t["writes"]) * element_size)


def plot_roofline(gpu: dict | None = None):
    """The roofline of ``gpu`` (default: the recorded GPU) with softmax, naive and fused, far to the
    left of the ridge point."""
    import numpy as np

    gpu = recorded_gpu() if gpu is None else gpu
    fig, ax = plots.new_figure(7.0, 3.8)
    peak, bw, ridge = gpu["fp32_flops"], gpu["bytes_per_s"], ridge_point(gpu)
    ai = np.logspace(-2, 3, 200)
    ax.plot(ai, np.minimum(peak, ai * bw) / 1e12, color="#333333", lw=2)
    ax.axvline(ridge, color="#888888", ls="--", lw=1)
    ax.text(ridge * 1.1, 0.02, f"ridge point\n{ridge:.0f} FLOP/byte", fontsize=9, va="bottom")
    ax.text(
        1.6,
        1.6 * bw / 1e12 * 2.2,
        f"memory roof: {bw / 1e9:.0f} GB/s",
        fontsize=9,
        rotation=29,
        ha="center",
        va="center",
    )
    ax.text(60, peak / 1e12 * 1.15, f"compute roof: {peak / 1e12:.1f} TFLOP/s (fp32)", fontsize=9, ha="center")
    for kernel, color, where in (
        ("naive", plots.COLORS["naive"], (0.6, 0.06)),
        ("fused", plots.COLORS["fused"], (0.09, 8.0)),
    ):
        x = softmax_intensity(kernel)
        y = x * bw / 1e12
        ax.plot([x], [y], "o", color=color, ms=8)
        ax.annotate(
            f"softmax, {kernel}\n{x:.2f} FLOP/byte",
            (x, y),
            xytext=where,
            fontsize=9,
            color=color,
            ha="center",
            va="center",
            arrowprops=dict(arrowstyle="-", color=color, lw=0.8),
        )
    ax.set(
        xscale="log",
        yscale="log",
        xlim=(1e-2, 1e3),
        ylim=(1e-2, 300),
        xlabel="arithmetic intensity (FLOP per byte of DRAM traffic)",
        ylabel="attainable TFLOP/s",
    )
    ax.set_title(f"Roofline of the {gpu['name']}, fp32: softmax sits on the memory roof", fontsize=10)
    return fig


#: Figures of this lesson, by the name ``helpers.plots.save`` writes them under.
FIGURES = {"01_naive_traffic": plot_naive_traffic, "01_roofline": plot_roofline}


# Exercise checkers: each prints one line (correct / not yet / wrong) and never raises.


class _TorchCalls(TorchFunctionMode):
    """While active (``with _TorchCalls() as calls:``), records in ``calls.names`` the name of every torch
    function called: ``torch.softmax``, ``F.softmax``, ``Tensor.softmax`` and ``nn.Softmax`` all arrive as
    "softmax", ``torch.special.softmax`` as "special_softmax"."""

    def __init__(self):
        super().__init__()
        self.names: set[str] = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.names.add(getattr(func, "__name__", ""))
        return func(*args, **(kwargs or {}))


#: PyTorch's own softmax, under the names it reaches ``_TorchCalls`` by (exercise 1.1 rules them out).
_READY_MADE = {
    "softmax": "softmax",
    "_softmax": "softmax",
    "special_softmax": "softmax",
    "log_softmax": "log_softmax",
    "_log_softmax": "log_softmax",
    "special_log_softmax": "log_softmax",
}


def _call_without_softmax(softmax_1d, x):
    """``call_attempt(softmax_1d, x)``, wrong if the learner's function called PyTorch's softmax."""
    with _TorchCalls() as calls:
        got = call_attempt(softmax_1d, x)
    used = sorted({_READY_MADE[n] for n in calls.names if n in _READY_MADE})
    if used:
        name = used[0]
        raise Wrong(
            f"your function calls PyTorch's own {name} (torch.{name}, F.{name} or x.{name}()), which this "
            "exercise rules out: write softmax yourself from exp, sum and divide"
        )
    return got


def _trial_1_1(softmax_1d) -> str:
    torch.manual_seed(0)
    cases = [
        torch.tensor([1.0, 2.0, 3.0]),
        torch.tensor([0.0, 0.0]),
        torch.tensor([5.0]),
        torch.tensor([-1.0, 0.5, 2.0, -3.0]),
        torch.randn(10),
        torch.randn(6, dtype=torch.float64),
    ]
    worst = 0.0
    for x in cases:
        before = x.clone()
        got = _call_without_softmax(softmax_1d, x)
        if not torch.equal(x, before):
            raise Wrong(f"your function changed its input {fmt(before)}: compute into a new tensor instead")
        try:
            err = expect_close(got, reference_softmax(x), inputs=x, atol=1e-6, rtol=1e-5)
        except Wrong as e:
            hint = next((h for fn, h in SOFTMAX_1D_MISTAKES if _gives(fn, x, got)), None)
            raise Wrong(f"{e}: {hint}" if hint else str(e)) from None
        worst = max(worst, err)
    return f"max abs error {worst:.1e}"


#: Plausible wrong answers of exercise 1.1 (function, the hint that names the mistake).
SOFTMAX_1D_MISTAKES = [
    (torch.exp, "exp(x) alone does not sum to 1: divide it by its sum, exp(x) / exp(x).sum()"),
    (lambda x: x / x.sum(), "x / x.sum() skips the exponential: softmax is exp(x) / exp(x).sum()"),
    (
        lambda x: torch.exp(x) / torch.exp(x).max(),
        "divide by the sum of the exponentials, not by their maximum "
        "(exp(x - max(x)) is exp(x) divided by their maximum)",
    ),
    (lambda x: torch.exp(x) / x.sum(), "divide exp(x) by the sum of exp(x), not by the sum of x"),
]


def _gives(fn, x, got) -> bool:
    """True if the mistake ``fn`` returns ``got`` on ``x`` (the same values, NaN and inf included)."""
    try:
        return same_values(got, fn(x), atol=1e-6, rtol=1e-5)
    except Exception:
        return False


def check_1_1(softmax_1d) -> None:
    """Exercise 1.1: ``softmax_1d(x)`` returns the softmax of a 1-D tensor."""
    check("1.1", "softmax of a 1-D tensor", softmax_1d, _trial_1_1)


def three_op_traffic_answer(M: int, N: int) -> tuple[int, int]:
    """Element reads and writes of exp -> sum -> divide (softmax without the max shift)."""
    return 3 * M * N + M, 2 * M * N + M


#: Plausible wrong counts of exercise 1.2 (function of M and N, the hint that names the mistake).
THREE_OP_MISTAKES = [
    (
        lambda M, N: (3 * M * N, 2 * M * N + M),
        "the divide also reads the M sums (one per row) that the sum wrote: they come back from DRAM too",
    ),
    (
        lambda M, N: (3 * M * N + M, 2 * M * N),
        "the sum writes its M results (one per row) to DRAM, where the divide reads them back",
    ),
    (
        lambda M, N: (3 * M * N, 2 * M * N),
        "the M row sums go through DRAM: the sum writes them (M writes) and the divide reads them back (M reads)",
    ),
    (
        lambda M, N: (4 * M * N, 2 * M * N + M),
        "the divide reads each row's sum once, M values in all: denominator[:, None] is a view, not an M x N tensor",
    ),
    (
        lambda M, N: (3 * M * N + 2 * M, 2 * M * N + 2 * M),
        "denominator[:, None] is a view, not a kernel: it reads and writes nothing (the divide reads the M sums)",
    ),
    (
        lambda M, N: (2 * M * N + M, 2 * M * N + M),
        "every kernel reads its inputs from DRAM, even what the kernel before it just wrote: the sum and the divide "
        "each read the whole numerator",
    ),
    (lambda M, N: (2 * M * N + M, 3 * M * N + M), "you swapped the reads and the writes: return (reads, writes)"),
    (
        lambda M, N: (5 * M * N + 2 * M, 3 * M * N + 2 * M),
        "that is the count of the five-line version: without the max and the subtraction there are three lines",
    ),
    (lambda M, N: (4 * (3 * M * N + M), 4 * (2 * M * N + M)), "count elements, not bytes"),
]


def _trial_1_2(three_op_traffic) -> str:
    shapes = ((1, 1), (2, 3), (7, 5), (4096, 1024))
    answers = []
    for M, N in shapes:
        got = call_attempt(three_op_traffic, M, N)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise Wrong(f"return a pair (reads, writes), got {type(got).__name__} {fmt(got)}")
        answers.append(tuple(got))
    for (M, N), (reads, writes) in zip(shapes, answers):
        want_r, want_w = three_op_traffic_answer(M, N)
        bad = [name for name, g, w in (("reads", reads, want_r), ("writes", writes, want_w)) if g != w]
        if bad:
            hint = next(
                (h for fn, h in THREE_OP_MISTAKES if all(tuple(fn(m, n)) == a for (m, n), a in zip(shapes, answers))),
                "count each of the three lines as the max and the subtraction were counted above",
            )
            raise Wrong(
                f"for M={M}, N={N} you returned (reads, writes) = ({reads}, {writes}); the "
                f"{' and the '.join(bad)} are off: {hint}"
            )
    return "3MN + M reads, 2MN + M writes"


def check_1_2(three_op_traffic) -> None:
    """Exercise 1.2: ``three_op_traffic(M, N)`` returns the (reads, writes) of the 3-op softmax."""
    check("1.2", "traffic of a three-op softmax", three_op_traffic, _trial_1_2)


#: Exercise 1.3's functions: (description, function, is it shift-invariant over the last dim?).
SHIFT_CASES = [
    ("torch.softmax(x, dim=-1)", lambda t: torch.softmax(t, dim=-1), True),
    ("helpers.stable_softmax", stable_softmax, True),
    ("torch.exp", torch.exp, False),
    ("x / x.sum(dim=-1)", lambda t: t / t.sum(dim=-1, keepdim=True), False),
    ("softmax(2 * x)", lambda t: torch.softmax(2 * t, dim=-1), True),
    ("x - x.mean(dim=-1)", lambda t: t - t.mean(dim=-1, keepdim=True), True),
    ("softmax(x ** 2)", lambda t: torch.softmax(t * t, dim=-1), False),
]


def _as_bool(v):
    """``v`` as a bool if it is one (a Python or numpy bool, a one-element bool tensor), else None."""
    if (
        isinstance(v, bool)
        or type(v).__name__ == "bool_"
        or (isinstance(v, torch.Tensor) and v.numel() == 1 and v.dtype == torch.bool)
    ):
        return bool(v)
    return None


def _trial_1_3(is_shift_invariant) -> None:
    torch.manual_seed(1)
    x = torch.rand(3, 5, dtype=torch.float64) + 0.5
    for desc, f, truth in SHIFT_CASES:
        got = call_attempt(is_shift_invariant, f, x.clone())
        b = _as_bool(got)
        if b is None:
            raise Wrong(f"return True or False, got {type(got).__name__} for f = {desc}")
        if b != truth:
            verdict = "is" if truth else "is not"
            hint = (
                " (compare with torch.allclose, not == or torch.equal: f(x + c) and f(x) can differ in the last bits)"
                if truth
                else ""
            )
            raise Wrong(f"you said f = {desc} {'is' if b else 'is not'} shift-invariant, but it {verdict}{hint}")


def check_1_3(is_shift_invariant) -> None:
    """Exercise 1.3: ``is_shift_invariant(f, x)`` tells whether f(x + c) == f(x) for constants c."""
    check("1.3", "a test for shift invariance", is_shift_invariant, _trial_1_3)
