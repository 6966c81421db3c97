"""Lesson 08 · The backward pass, and softmax as a PyTorch op.

What the lesson need not show: the live bandwidth measurement (``backward_rows``; the full sweep is
``python tools/backward_bench.py``), its figure, the op demos' glue and the checkers of 8.1 to 8.3."""

from __future__ import annotations

import itertools
import math

import torch
import triton

from . import data, measure, plots
from .exercises import (
    Wrong,
    call_attempt,
    check,
    guarded,
    guards_intact,
    is_untouched,
    launch_learner_kernel,
    require_kernel,
)
from .kernels import softmax, softmax_backward, softmax_backward_looped
from .mode import DEVICE, ON_GPU
from .reference import round_up_err

# --- Bandwidth: measured live on a GPU, drawn from a DataFrame

#: The live cell's row lengths: copies from L2 (1024; 2048 in bf16), from DRAM, and the H100's slow fp32 copy.
LIVE_NS = (1024, 2048, 32768)


def backward_rows(ns=LIVE_NS, dtypes=("float32", "bfloat16"), M: int = 4096, rounds: int = 3) -> list[dict]:
    """The benchmark's providers at a few row lengths, measured now on this GPU as ``tools/backward_bench.py``
    records them: checked against the float64 formula, then GPU time (``measure.gpu_ms`` at its default) in
    ``rounds`` rounds interleaved over them; ``graph_frac = 1.5 x copy time / time`` (3MN elements against 2MN)."""
    if not ON_GPU:
        raise RuntimeError("backward_rows measures on a GPU, and this run has none: data.load('backward', gpu='h100').")
    measure.warm_up_gpu()
    rows = []
    for d, N in itertools.product(dtypes, ns):
        g = torch.Generator(DEVICE).manual_seed(0)
        y = torch.softmax(torch.randn(M, N, device=DEVICE, generator=g), -1).to(measure.DTYPES[d])
        dy, out = torch.randn(M, N, device=DEVICE, generator=g).to(y.dtype), torch.empty_like(y)
        y64, dy64 = y.double(), dy.double()
        ref = y64 * (dy64 - (y64 * dy64).sum(-1, keepdim=True))
        fns = {
            "copy": lambda: out.copy_(y),
            "course": lambda: softmax_backward(y, dy),
            "course_looped": lambda: softmax_backward_looped(y, dy),
            "torch_backward": lambda: torch._softmax_backward_data(dy, y, -1, y.dtype),
            "torch_naive_backward": lambda: y * (dy - (y * dy).sum(-1, keepdim=True)),
        }
        err = {p: (fn().double() - (y64 if p == "copy" else ref)).abs().max().item() for p, fn in fns.items()}
        tol = (1e-5 if y.dtype == torch.float32 else 3e-2) * ref.abs().max().item()
        timed = measure.interleaved({p: fn for p, fn in fns.items() if err[p] <= tol}, rounds)
        copy_ms = timed["copy"][0] if "copy" in timed else math.nan
        for p in fns:
            ms, spread = timed.get(p, (math.nan, math.nan))
            status = "ok" if p in timed else f"wrong: max abs error {err[p]:.2e}"
            frac = (1 if p == "copy" else 1.5) * copy_ms / ms
            rows.append(
                dict(
                    dtype=d,
                    M=M,
                    N=N,
                    provider=p,
                    graph_ms=ms,
                    graph_frac=frac,
                    graph_spread=spread,
                    max_err=err[p],
                    status=status,
                )
            )
    return rows


LABELS = {
    "copy": "y.copy_(x): the yardstick (1.0)",
    "course": "helpers.softmax_backward (08)",
    "liger_backward": "Liger-Kernel's backward",
    "torch_backward": "torch's softmax backward",
    "torch_naive_backward": "naive PyTorch backward",
}
COLORS = {
    "copy": "#444444",
    "course": "#000000",
    "liger_backward": "#9467bd",
    "torch_backward": "#1f77b4",
    "torch_naive_backward": "#d62728",
}
#: A copy below this fraction of the DRAM peak is slower than usual (the lesson's "fair" copy reaches it).
FAIR_COPY = 0.8


def copy_speed(bench, props):
    """Per (dtype, N): the MB the copy moves (2MN elements), whether that fits in the L2, and its TB/s as a
    fraction of the DRAM peak, from the benchmark's DataFrame and the GPU's ``l2_bytes`` and ``dram_peak_gbps``."""
    copy = bench[bench.provider == "copy"].set_index(["dtype", "N"])
    mb = (
        2
        * copy.M
        * copy.index.get_level_values("N")
        * copy.index.get_level_values("dtype").map({"float32": 4, "bfloat16": 2, "float16": 2})
        / 1e6
    )
    in_l2 = mb <= props.l2_bytes.iloc[0] / 1e6
    of_peak = mb / copy.graph_ms / (props.dram_peak_gbps.iloc[0] / 1e3) / 1e3  # MB per ms is GB/s
    return in_l2, of_peak


def plot_backward(bench, props=None, value: str = "graph_frac"):
    """Fraction of copy against N, one panel per dtype, from the benchmark's DataFrame. With ``props`` (the GPU's
    L2 size and DRAM peak), the row lengths where the copy is no fair yardstick are shaded: its data fit in the L2,
    or it ran below FAIR_COPY of the DRAM peak."""
    dtypes = sorted(bench.dtype.unique(), key=lambda d: d != "float32")
    fig, axes = plots.new_figure(4.6 * len(dtypes), 4.4, ncols=len(dtypes))
    axes = list(axes) if hasattr(axes, "__len__") else [axes]
    in_l2, of_peak = copy_speed(bench, props) if props is not None else (None, None)
    shades = {
        "l2": ("#d9d9d9", "copy's data fit in the L2 (it reads from cache)"),
        "slow": ("#fde0c5", f"copy below {FAIR_COPY} of the DRAM peak"),
    }
    handles = {}
    for ax, dtype in zip(axes, dtypes):
        table = bench[(bench.dtype == dtype) & (bench.status == "ok")].pivot_table(
            index="N", columns="provider", values=value
        )
        if in_l2 is not None:
            for n in table.index:
                kind = (
                    "l2" if in_l2.get((dtype, n), False) else "slow" if of_peak.get((dtype, n), 1) < FAIR_COPY else None
                )
                if kind:
                    handles[kind] = ax.axvspan(n / 1.2, n * 1.2, color=shades[kind][0], lw=0, label=shades[kind][1])
        for p in [p for p in LABELS if p in table]:
            ax.plot(
                table.index,
                table[p],
                "--" if p == "copy" else "o-",
                color=COLORS[p],
                ms=4,
                lw=2 if p == "course" else 1.4,
                zorder=3 if p == "course" else 2,
                label=LABELS[p],
            )
        ax.set_xscale("log", base=2)
        ax.minorticks_off()
        ax.set(xticks=list(table.index), ylim=(0, 1.35), xlabel="N (columns per row)")
        ax.set_xticklabels(
            [f"{n // 1024}K" if n % 1024 == 0 else f"{n / 1024:.1f}K" for n in table.index],
            fontsize=8,
            rotation=45,
            ha="right",
        )
        ax.set_title(f"{dtype}, M = {int(bench.M.iloc[0])}", fontsize=10)
    axes[0].set_ylabel("fraction of copy (GPU time)")
    lines, labels = axes[0].get_legend_handles_labels()
    keep = [(h, lab) for h, lab in zip(lines, labels) if lab in LABELS.values()]
    keep += [(handles[k], shades[k][1]) for k in shades if k in handles]
    fig.legend(*zip(*keep), loc="outside lower center", ncols=3, frameon=False, fontsize=8)
    fig.suptitle(f"Softmax backward, 1.5 x copy time / time, {data.gpu(bench)}", fontsize=10)
    return fig


FIGURES = {
    "08_backward": lambda: plot_backward(
        data.load("backward", gpu="h100").query("group == 'M=4096'"), data.load("device_props")
    )
}


# --- The op at work


def compiled_graphs(fn, *args):
    """Compile ``fn`` (fullgraph) through AOTAutograd, keeping its forward and backward graphs, which run
    as they are (no code generation); run it and its backward on ``args``. Returns (result, graphs)."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    graphs = {}

    def keep(kind):
        def compiler(gm, example_inputs):
            graphs[kind] = gm
            return make_boxed_func(gm.forward)

        return compiler

    torch._dynamo.reset()
    compiled = torch.compile(
        fn, fullgraph=True, backend=aot_autograd(fw_compiler=keep("forward"), bw_compiler=keep("backward"))
    )
    out = compiled(*args)
    if out.requires_grad:
        out.sum().backward()
    return out, graphs


def cuda_graph_demo() -> float | None:
    """On a GPU: capture one forward and backward of helpers.softmax in a CUDA graph, replay it on new
    data, and return the largest difference from torch.softmax's gradient. None on the CPU."""
    if not ON_GPU:
        return None
    x = torch.randn(64, 1000, device="cuda", requires_grad=True)
    w = torch.randn(1000, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm up: plans are made and kernels compiled before capture
        for _ in range(3):
            x.grad = None
            (softmax(x) * w).sum().backward()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    x.grad = None
    with torch.cuda.graph(graph):
        (softmax(x) * w).sum().backward()
    grad = x.grad
    x.detach().copy_(torch.randn_like(x))  # new data in the captured input
    graph.replay()
    torch.cuda.synchronize()
    x2 = x.detach().clone().requires_grad_()
    (torch.softmax(x2, -1) * w).sum().backward()
    return (grad - x2.grad).abs().max().item()


# --- Exercises 8.1 (log-softmax's backward) and 8.3 (cross-entropy's gradient): functions


def _where_worst(got, want) -> str:
    """Where the largest error is, and what belongs there (the learner's value is not repeated)."""
    diff = (got - want).abs().reshape(-1, want.shape[-1])
    r, c = divmod(int(diff.argmax()), want.shape[-1])
    return (
        f"largest error {diff.max().item():.1e}, at row {r}, column {c}, where the answer is "
        f"{want.reshape(-1, want.shape[-1])[r, c].item():.6g}"
    )


def _compare(fn, args, want, hints: dict, where: str, atol: float) -> float:
    """Call the learner's function on copies of ``args``; raise Wrong (with the hint of the first
    matching plausible mistake) unless it returns ``want`` within ``atol``; return the error."""
    copies = [a.clone() for a in args]
    try:
        got = call_attempt(fn, *copies)
    except RuntimeError as e:
        if "must match the size" in str(e):
            raise Wrong(
                f"{where} your code raised RuntimeError: {str(e).splitlines()[0]}. Keep the summed "
                f"dimension: .sum(-1, keepdim=True)"
            ) from None
        raise
    if not all(torch.equal(c, a) for c, a in zip(copies, args)):
        raise Wrong("your function changed its inputs: compute a new tensor instead")
    if not isinstance(got, torch.Tensor):
        raise Wrong(f"return a tensor, got {type(got).__name__}")
    if got.shape != want.shape:
        raise Wrong(
            f"{where} you returned shape {tuple(got.shape)}, expected {tuple(want.shape)} (one value per "
            f"input element; keep the summed dimension: .sum(-1, keepdim=True))"
        )
    got = got.detach().to(torch.float64).cpu()
    if not torch.isfinite(got).all():  # a hint without a candidate (None) names what gives NaN or inf
        hint = next((f": {h}" for h, cand in hints.items() if cand is None), "")
        raise Wrong(f"{where} your result has NaN or inf{hint}")
    err = (got - want).abs().max().item()
    if err > atol:
        for hint, cand in hints.items():
            if cand is not None and cand.shape == got.shape and torch.allclose(got, cand, atol=atol, rtol=0):
                raise Wrong(f"{where} {hint}")
        raise Wrong(f"{where} {_where_worst(got, want)}")
    return err


def log_softmax_backward_answer(out: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """dx for out = log_softmax(x): dy - softmax(x) * sum(dy), with softmax(x) = exp(out)."""
    return dy - torch.exp(out) * dy.sum(-1, keepdim=True)


def _trial_8_1(fn) -> str:
    g = torch.Generator().manual_seed(81)
    worst = 0.0
    for shape in ((3, 5), (4, 4), (2, 3, 6), (1, 1)):
        out = torch.log_softmax(torch.randn(shape, generator=g, dtype=torch.float64) * 2, dim=-1)
        dy = torch.randn(shape, generator=g, dtype=torch.float64) + 0.5
        p, s = torch.exp(out), dy.sum(-1, keepdim=True)
        hints = {
            "forgot the -softmax(x) * sum(dy) term: every output of log_softmax depends on every input "
            "through the log-sum-exp": dy,
            "forgot the sum: the correction is softmax(x) times the row sum of dy, not softmax(x) alone": dy - p,
            "out holds log-probabilities; softmax(x) is exp(out), not out": dy - out * s,
            "a sign: the softmax(x) * sum(dy) term is subtracted from dy, not added": dy + p * s,
            "the sum runs over the last dimension (along a row: dim=-1), not over the rows": dy
            - p * dy.sum(0, keepdim=True),
            "that is softmax's backward (from y = softmax(x)); for log_softmax, differentiate out_i = x_i - LSE(x)": p
            * (dy - (p * dy).sum(-1, keepdim=True)),
        }
        if out.dim() == 2 and out.shape[0] == out.shape[1]:
            hints[
                "keep the summed dimension (keepdim=True): without it the row sums broadcast along the wrong axis"
            ] = dy - p * dy.sum(-1)
        worst = max(
            worst,
            _compare(
                fn,
                (out, dy),
                log_softmax_backward_answer(out, dy),
                hints,
                f"on an input of shape {tuple(shape)}:",
                1e-9,
            ),
        )
    return f"largest error {round_up_err(worst)} on 4 inputs (float64)"


def check_8_1(log_softmax_backward) -> None:
    """Exercise 8.1: ``log_softmax_backward(out, dy)`` returns dx for out = log_softmax(x)."""
    check("8.1", "the backward of log-softmax", log_softmax_backward, _trial_8_1)


def cross_entropy_grad_answer(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """d/dlogits of F.cross_entropy(logits, target) (the mean over rows): (softmax - one_hot) / M."""
    p = torch.softmax(logits, dim=-1)
    return (p - torch.nn.functional.one_hot(target, logits.shape[-1]).to(p.dtype)) / logits.shape[0]


#: (M, N, spread, shift) of the logits: plain rows; around 200; spread over hundreds (exp overflows in fp32 unshifted).
CASES_8_3 = ((4, 5, 1.0, 0.0), (3, 7, 2.0, 0.0), (2, 6, 1.0, 200.0), (3, 6, 80.0, 0.0))


def _trial_8_3(fn) -> str:
    g = torch.Generator().manual_seed(83)
    worst = 0.0
    for M, N, spread, shift in CASES_8_3:
        logits = (torch.randn(M, N, generator=g, dtype=torch.float64) * spread + shift).float()
        target = torch.randint(0, N, (M,), generator=g)
        x64 = logits.double()
        p, oh = torch.softmax(x64, -1), torch.nn.functional.one_hot(target, N).double()
        hints = {
            "exp of a float32 logit over 88 overflows: subtract each row's maximum first (or use torch.softmax)": None,
            "F.cross_entropy averages over the rows: divide by the number of rows M": p - oh,
            "a sign: the gradient is softmax minus the one-hot target": (oh - p) / M,
            "the target's term is missing: d(-x[target])/dx subtracts 1 at the target's column": p / M,
            "softmax runs along each row (dim=-1), not down the columns": (torch.softmax(x64, 0) - oh) / M,
            "that is log_softmax: the gradient of log-sum-exp is softmax itself": (torch.log_softmax(x64, -1) - oh) / M,
        }
        where = (
            f"on {M} x {N} logits" + (" around 200" if shift else " spread over hundreds" if spread > 10 else "") + ":"
        )
        worst = max(worst, _compare(fn, (logits, target), cross_entropy_grad_answer(x64, target), hints, where, 1e-6))
    return f"largest error {round_up_err(worst)}, logits around 200 and spread over hundreds included"


def check_8_3(cross_entropy_grad) -> None:
    """Exercise 8.3: ``cross_entropy_grad(logits, target)``: the gradient of the mean cross-entropy."""
    check("8.3", "the gradient of cross-entropy", cross_entropy_grad, _trial_8_3)


# --- Exercise 8.2: a backward kernel for short rows, three tensors with their own row strides

#: (M, N, BLOCK_M): a partial last tile with padded columns; exact tiles; one tile larger than the input.
CASES_8_2 = ((5, 37, 2), (4, 8, 2), (3, 20, 4))
UNWRITTEN = 12345.0  # what dx holds before the kernel runs


def _launch_8_2(kernel, M, N, bm, strides, args=None, seed=82):
    """Run the learner's kernel once on (y, dy, dx) whose rows are ``strides`` apart (None: n_cols, no padding;
    padding holds NaN), passing it the row strides ``args`` (default: the true ones). Returns what a verdict needs."""
    g = torch.Generator().manual_seed(seed)
    y0 = torch.softmax(torch.randn(M, N, generator=g, dtype=torch.float64) * 2, -1).float()
    dy0 = torch.randn(M, N, generator=g) + 0.5
    y, dy = guarded((M, N), row_stride=strides[0]), guarded((M, N), row_stride=strides[1])
    dx = guarded((M, N), fill=UNWRITTEN, row_stride=strides[2])
    y.copy_(y0.to(y.device))
    dy.copy_(dy0.to(dy.device))
    bn = triton.next_power_of_2(N)
    where = f"on a {M} x {N} input with BLOCK_M = {bm}, BLOCK_N = {bn}:"
    args = args or (y.stride(0), dy.stride(0), dx.stride(0))
    launch_learner_kernel(kernel, (triton.cdiv(M, bm),), dx, y, dy, *args, M, N, BLOCK_M=bm, BLOCK_N=bn, where=where)
    y64, dy64 = y0.double(), dy0.double()
    want = y64 * (dy64 - (y64 * dy64).sum(-1, keepdim=True))
    got = dx.detach().cpu().double()
    return dict(
        y=y64,
        dy=dy64,
        want=want,
        got=got,
        where=where,
        intact=guards_intact(dx) and guards_intact(y) and guards_intact(dy),
        inputs_kept=torch.equal(y.cpu(), y0) and torch.equal(dy.cpu(), dy0),
    )


def _right(r) -> bool:
    return r["intact"] and r["inputs_kept"] and torch.allclose(r["got"], r["want"], atol=1e-5, rtol=0)


def _diagnose_8_2(kernel, M, N, bm, r) -> str:
    """The mistake behind a wrong result, found by running the kernel on other layouts."""
    if not r["inputs_kept"]:
        return "your kernel changed y or dy: store into dx_ptr only"
    S = N + 4
    same = _launch_8_2(kernel, M, N, bm, (S, S, S))
    if _right(same):  # right when all rows are one stride apart
        for i, name in enumerate(("y", "dy", "dx")):  # a stride argument whose value changes nothing is unused
            lie = [S + 3 if j == i else S for j in range(3)]
            if _right(_launch_8_2(kernel, M, N, bm, (S, S, S), args=lie)):
                verb = "written" if name == "dx" else "read"
                return (
                    f"{name} is {verb} with another tensor's row stride: each tensor has its own, so {name}'s rows "
                    f"start at rows[:, None] * {name}_row_stride"
                )
        return "y, dy and dx each have their own row stride here: use y_row_stride, dy_row_stride and dx_row_stride"
    dense = _launch_8_2(kernel, M, N, bm, (None, None, None))
    if _right(dense):  # right only when rows are n_cols apart
        return (
            "your kernel is right only when rows are n_cols apart: here they are further apart, so offsets are "
            "rows[:, None] * y_row_stride + cols[None, :] (dy_row_stride and dx_row_stride for the others)"
        )
    if not (same["intact"] and dense["intact"]):
        return (
            "a store wrote outside dx's rows (past a row's last column, or rows past n_rows in the last tile): "
            "tl.store needs mask=(rows[:, None] < n_rows) & (cols[None, :] < n_cols)"
        )
    got, y, dy, want = same["got"], same["y"], same["dy"], same["want"]
    unwritten = sorted({int(i) for i in torch.nonzero(got == UNWRITTEN)[:, 0].tolist()})
    if unwritten:
        return (
            f"rows {unwritten[:4]} of dx were never written: does program p start at row "
            f"tl.program_id(0) * BLOCK_M and store all its BLOCK_M rows?"
        )
    if torch.isinf(got).any():  # both loads padded with the forward's -inf: -inf * -inf = inf in every row's s
        return (
            "dx holds inf: the padding lanes loaded -inf, the forward's padding, and -inf * -inf = inf in the row's "
            "sum s (-inf * 0 would be NaN). Here they must add nothing to s: load 0.0 (other=0.0)"
        )
    if torch.isnan(got).any():
        if torch.isnan(dense["got"]).all():
            return (
                "every row of dx is NaN, even where rows are n_cols apart: the padding lanes must load 0.0 "
                "(other=0.0); -inf padding gives -inf * 0 = NaN in the row's sum"
            )
        return (
            "a load reads past the end of a row: here the memory after each row holds NaN, and it reached dx. "
            "Mask the loads of y and dy (cols[None, :] < n_cols, rows[:, None] < n_rows) with other=0.0"
        )
    dot = (y * dy).sum(-1, keepdim=True)
    prod = y * dy
    dot_cols = torch.cat([prod[i : i + bm].sum(0, keepdim=True).expand(min(bm, M - i), N) for i in range(0, M, bm)])
    cands = {
        "y * dy is only the first term: dx = y * (dy - s), with s = tl.sum(y * dy, axis=1) for each row": prod,
        "the sum term is missing its factor y: dx = y * (dy - s), not y * dy - s": prod - dot,
        "dx = y * (dy - s): the product with y is missing": dy - dot,
        "a sign: dx = y * (dy - s), the row sum is subtracted": y * (dy + dot),
        "the row sum runs along a row: tl.sum(y * dy, axis=1), then s[:, None] against the tile (axis=0 mixes rows)": y
        * (dy - dot_cols),
        "s is the row's dot sum_j y_j dy_j, not the sum of dy alone": y * (dy - dy.sum(-1, keepdim=True)),
        "dx is y * (dy - s), not dy * (y - s)": dy * (y - dot),
    }
    for hint, cand in cands.items():
        if torch.allclose(got, cand, atol=1e-5, rtol=0):
            return hint
    return _where_worst(got, want) + " (dx = y * (dy - sum(y * dy)) per row)"


def _trial_8_2(kernel) -> str:
    require_kernel(kernel, "backward_tile_kernel")
    if is_untouched(kernel):
        raise NotImplementedError
    worst = 0.0
    for M, N, bm in CASES_8_2:
        r = _launch_8_2(kernel, M, N, bm, (N + 3, N + 9, N + 5))
        if not _right(r):
            raise Wrong(f"{r['where']} {_diagnose_8_2(kernel, M, N, bm, r)}")
        worst = max(worst, (r["got"] - r["want"]).abs().max().item())
    return f"largest error {round_up_err(worst)} on {len(CASES_8_2)} inputs whose y, dy and dx rows are 3, 9 and 5 elements longer than a row"


def check_8_2(backward_tile_kernel) -> None:
    """Exercise 8.2: a Triton kernel for dx = y * (dy - sum(y * dy)), BLOCK_M rows per program, own row strides."""
    check("8.2", "a backward kernel for short rows", backward_tile_kernel, _trial_8_2)
