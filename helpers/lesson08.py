"""Lesson 08 · The backward pass, and softmax as a PyTorch op.

What lives here: the Jacobian of softmax built by autograd and by the formula, the vector-Jacobian
product checked against autograd in float64, the traffic of the backward variants, the correctness
table of the backward kernels, the recorded bandwidth (``figures/data/backward_h100.csv``, written by
``python -m helpers.backward_bench`` on a GPU) with its table and figure, the demos of the op
(a tiny attention model, the graphs ``torch.compile`` sees, a CUDA graph), and the checkers of
exercises 8.1 to 8.3.
"""

from __future__ import annotations

import math

import torch
import triton

from . import gpu_data, plots
from .exercises import Wrong, call_attempt, check, fmt, guarded, is_untouched, run_learner_kernel
from .kernels import softmax_backward_looped, softmax_backward_tiled
from .mode import DEVICE, ON_GPU
from .reference import round_up_err

#: The recorded benchmark this lesson shows (``python -m helpers.backward_bench figures/data/backward.csv``).
DATA_NAME = f"backward_{gpu_data.LESSON_GPU}"
BENCH_COMMAND = f"python -m helpers.backward_bench figures/data/{DATA_NAME}.csv"


# --------------------------------------------------------------------------------------------
# The gradient: the Jacobian, and the vector-Jacobian product
# --------------------------------------------------------------------------------------------


def jacobian_formula(y: torch.Tensor) -> torch.Tensor:
    """The Jacobian of softmax at one row, from its output y: J = diag(y) - y y^T."""
    return torch.diag(y) - torch.outer(y, y)


def jacobian_autograd(x: torch.Tensor) -> torch.Tensor:
    """The Jacobian of softmax at one row x, built by autograd (one backward per output element)."""
    return torch.autograd.functional.jacobian(lambda t: torch.softmax(t, dim=-1), x)


def print_jacobian(x: torch.Tensor, digits: int = 3) -> None:
    """Print y = softmax(x), the Jacobian from autograd, and its largest difference from diag(y) - y y^T."""
    x = x.to(torch.float64)
    y = torch.softmax(x, dim=-1)
    J = jacobian_autograd(x)
    print("x =", [round(v, digits) for v in x.tolist()])
    print("y =", [round(v, digits) for v in y.tolist()])
    print("J (autograd), J[i][j] = dy_i / dx_j:")
    for row in J.tolist():
        print("   " + " ".join(f"{v:+.{digits}f}" for v in row))
    diff = (J - jacobian_formula(y)).abs().max().item()
    print(f"J equals diag(y) - y y^T (to 1e-15): {diff < 1e-15}")
    print(f"rows of J sum to 0: {bool(J.sum(1).abs().max() < 1e-12)};  J is symmetric: {bool(torch.equal(J, J.T))}")


def vjp_formula(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """dx = y * (dy - sum(y * dy)) per row: the vector-Jacobian product, without the Jacobian."""
    return y * (dy - (y * dy).sum(-1, keepdim=True))


def jacobian_bytes_table(ns=(1024, 32768, 131072), M: int = 4096, element_size: int = 4) -> None:
    """What building the Jacobian would cost, next to the row and the whole batch."""
    print(f"{'N':>7} {'one row':>10} {'its Jacobian':>14} {'Jacobians of M rows':>20}   (M = {M}, {element_size}-byte elements)")
    for n in ns:
        print(f"{n:>7} {_bytes(n * element_size):>10} {_bytes(n * n * element_size):>14} {_bytes(M * n * n * element_size):>20}")


def _bytes(b: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= size:
            return f"{b / size:.1f} {unit}"
    return f"{b:.0f} B"


# --------------------------------------------------------------------------------------------
# Traffic
# --------------------------------------------------------------------------------------------

#: (name, what the backward keeps from the forward, reads in MN, writes in MN, note).
TRAFFIC = (
    ("naive PyTorch, 4 ops", "y", 6, 3, "y*dy, sum, dy - s, y*(...): each op a trip to memory"),
    ("one kernel, rows on chip", "y", 2, 1, "read y and dy once, write dx once"),
    ("one kernel, from x", "x", 2, 1, "same bytes, but redo max, exp and sum (and keep x alive)"),
    ("looped, rows re-read", "y", 4, 1, "pass 1: the dot; pass 2: dx (4MN if the re-read misses L2)"),
)


def traffic_rows(M: int, N: int, element_size: int = 4) -> list[dict]:
    """Elements and bytes each backward variant moves on an (M, N) input (the MN-sized terms)."""
    out = []
    for name, saved, r, w, note in TRAFFIC:
        out.append(dict(name=name, saved=saved, reads=r * M * N, writes=w * M * N, total=(r + w) * M * N,
                        mb=(r + w) * M * N * element_size / 1e6, note=note, best_frac=3 / (r + w)))
    return out


def print_traffic_table(M: int = 4096, N: int = 4096, element_size: int = 4) -> None:
    """Reads, writes and the best fraction of copy each backward variant can reach (from its traffic)."""
    print(f"M = {M}, N = {N}, {element_size}-byte elements")
    head = f"{'backward':26} {'keeps':>5} {'reads':>6} {'writes':>6} {'total':>6} {'MB':>8} {'best frac':>9}"
    print(head)
    print("-" * len(head))
    for r in traffic_rows(M, N, element_size):
        k = r["total"] // (M * N)
        print(f"{r['name']:26} {r['saved']:>5} {r['reads'] // (M * N):>4}MN {r['writes'] // (M * N):>4}MN "
              f"{k:>4}MN {r['mb']:>8.1f} {r['best_frac']:>9.2f}")


# --------------------------------------------------------------------------------------------
# The kernels: correctness
# --------------------------------------------------------------------------------------------

#: Shapes of the correctness table under the interpreter (small: every program costs milliseconds there).
CPU_SHAPES = ((1, 1), (3, 5), (33, 100), (4, 781), (2, 3, 50))
GPU_SHAPES = ((1, 1), (3, 5), (1823, 781), (4096, 1024), (64, 32768), (8, 3, 12672))
TOLERANCE = {torch.float32: 1e-6, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def correctness_shapes():
    return GPU_SHAPES if ON_GPU else CPU_SHAPES


def backward_case(shape, dtype=torch.float32, seed: int = 0):
    """(y, dy) for a shape: y a real softmax output (of a normal x times 3), dy normal."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * 3
    y = torch.softmax(x, dim=-1).to(dtype).to(DEVICE)
    dy = torch.randn(shape, generator=g).to(dtype).to(DEVICE)
    return y, dy


def check_backward_shapes(shapes=None, dtypes=(torch.float32, torch.float16, torch.bfloat16)) -> bool:
    """The backward kernels (tiled, looped with a small block) against the float64 formula; the error
    is relative to the largest |dx| and rounded up to a power of ten. True if all are within tolerance."""
    shapes = correctness_shapes() if shapes is None else shapes
    fns = {"tiled": softmax_backward_tiled, "looped": lambda y, dy: softmax_backward_looped(y, dy, 32)}
    print(f"{'shape':>14} {'dtype':>9} {'tiled':>9} {'looped':>9}   (largest error / largest |dx|)")
    ok_all = True
    for shape in shapes:
        for dtype in dtypes:
            y, dy = backward_case(shape, dtype)
            ref = vjp_formula(y.double(), dy.double())
            scale = ref.abs().max().item() or 1.0
            cells = []
            for fn in fns.values():
                err = (fn(y, dy).double() - ref).abs().max().item() / scale
                ok_all &= err <= TOLERANCE[dtype]
                cells.append(round_up_err(err))
            name = " x ".join(map(str, shape))
            print(f"{name:>14} {str(dtype).replace('torch.', ''):>9} {cells[0]:>9} {cells[1]:>9}")
    return ok_all


# --------------------------------------------------------------------------------------------
# Bandwidth, recorded on a GPU (helpers.backward_bench)
# --------------------------------------------------------------------------------------------

PROVIDERS = ("copy", "course", "course_looped", "torch_backward", "torch_naive_backward")
LABELS = {
    "copy": "copy (the ceiling)",
    "course": "helpers.softmax_backward (08)",
    "course_looped": "looped backward (08)",
    "torch_backward": "torch's softmax backward",
    "torch_naive_backward": "naive PyTorch backward",
}
COLORS = {"copy": "#444444", "course": "#000000", "course_looped": "#2ca02c", "torch_backward": "#1f77b4",
          "torch_naive_backward": "#d62728"}


def backward_data(path=None) -> tuple[list[dict], dict] | None:
    """(rows, provenance) of the recorded backward benchmark, or None when there is no recording."""
    try:
        return gpu_data.read_csv(path or DATA_NAME)
    except FileNotFoundError:
        return None


def live_backward_data(ns=(1024, 4096, 16384), dtypes=("float32",)) -> tuple[list[dict], dict]:
    """A quick live run of the benchmark on this GPU (a few row lengths)."""
    if not ON_GPU:
        raise RuntimeError("live_backward_data measures on a GPU, and this run has none: use backward_data().")
    from . import backward_bench

    return backward_bench.sweep(ns=ns, dtypes=dtypes), gpu_data.provenance("helpers.lesson08.live_backward_data()")


def _ok(r) -> bool:
    return r.get("status") == "ok" and isinstance(r.get("graph_frac"), (int, float)) and math.isfinite(r["graph_frac"])


def print_backward_table(rows: list[dict], dtype: str = "float32", key: str = "graph_frac") -> None:
    """Fraction of copy (``graph_frac``: GPU time; ``frac_of_copy``: eager) per N for each provider."""
    ns = sorted({r["N"] for r in rows if r["dtype"] == dtype})
    provs = [p for p in PROVIDERS if p != "copy" and any(r["provider"] == p for r in rows)]
    short = {"course": "course", "course_looped": "looped", "torch_backward": "torch", "torch_naive_backward": "naive"}
    M = next((r["M"] for r in rows), 0)
    print(f"{dtype}, M = {M}: {key} (1.0 = the backward moves its 3MN elements as fast as copy moves 2MN)")
    print(f"{'N':>7} " + " ".join(f"{short.get(p, p):>8}" for p in provs))
    for n in ns:
        cells = []
        for p in provs:
            r = next((r for r in rows if r["dtype"] == dtype and r["N"] == n and r["provider"] == p), None)
            cells.append(f"{r[key]:8.2f}" if r and r.get("status") == "ok" and math.isfinite(r[key]) else f"{'-':>8}")
        print(f"{n:>7} " + " ".join(cells))


def backward_summary(rows: list[dict]) -> str:
    """One sentence per dtype: the range of the course's backward and torch's, in GPU time."""
    out = []
    for dtype in sorted({r["dtype"] for r in rows}, key=lambda d: d != "float32"):
        rng = {}
        for p in ("course", "torch_backward"):
            v = [r["graph_frac"] for r in rows if r["dtype"] == dtype and r["provider"] == p and _ok(r)]
            rng[p] = (min(v), max(v)) if v else None
        ratio = _ratios(rows, dtype)
        if rng["course"] and rng["torch_backward"] and ratio:
            c, t = rng["course"], rng["torch_backward"]
            out.append(f"{dtype}: helpers.softmax_backward reaches {c[0]:.2f}-{c[1]:.2f} of copy in GPU time, "
                       f"torch's backward {t[0]:.2f}-{t[1]:.2f}; at the same N the course's takes "
                       f"{1 / max(ratio):.2f}-{1 / min(ratio):.2f} of torch's time.")
    return "\n".join(out)


def _ratios(rows, dtype):
    by = {}
    for r in rows:
        if r["dtype"] == dtype and _ok(r):
            by.setdefault(r["N"], {})[r["provider"]] = r["graph_ms"]
    return [p["torch_backward"] / p["course"] for p in by.values() if "course" in p and "torch_backward" in p]


def set_n_axis(ax, ns) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(ns)
    ax.set_xticklabels([f"{n // 1024}K" if n % 1024 == 0 else str(n) for n in ns], fontsize=8)
    ax.minorticks_off()


def plot_backward(rows: list[dict], meta: dict | None = None, key: str = "graph_frac"):
    """Fraction of copy against N, one panel per dtype."""
    dtypes = sorted({r["dtype"] for r in rows}, key=lambda d: d != "float32")
    fig, axes = plots.new_figure(4.2 * len(dtypes), 3.6, ncols=len(dtypes))
    axes = axes if isinstance(axes, (list, tuple)) or hasattr(axes, "__len__") else [axes]
    for ax, dtype in zip(axes, dtypes):
        for p in PROVIDERS:
            pts = sorted((r["N"], r[key]) for r in rows if r["dtype"] == dtype and r["provider"] == p and _ok(r))
            if not pts:
                continue
            style = "--" if p == "copy" else "o-"
            ax.plot([a for a, _ in pts], [b for _, b in pts], style, color=COLORS[p], ms=4,
                    lw=2 if p == "course" else 1.4, label=LABELS[p])
        set_n_axis(ax, sorted({r["N"] for r in rows if r["dtype"] == dtype}))
        ax.set_ylim(0, 1.3)
        ax.set_xlabel("N (columns per row)")
        ax.set_title(f"{dtype}, M = {rows[0]['M']}", fontsize=10)
    axes[0].set_ylabel("fraction of copy (GPU time)")
    axes[0].legend(frameon=False, fontsize=8, loc="lower left")
    gpu = (meta or {}).get("gpu", "GPU")
    fig.suptitle(f"Softmax backward, 1.5 x copy time / time, {gpu}", fontsize=10)
    return fig


def show_backward_bandwidth(path=None) -> None:
    """The bandwidth section: live on a GPU; on the CPU the recording (its provenance, a table per
    dtype, a summary and the figure), or one line saying it is missing."""
    if ON_GPU and path is None:
        rows, meta = live_backward_data()
    else:
        data = backward_data(path)
        if data is None:
            print(f"No recorded backward benchmark yet (figures/data/{DATA_NAME}.csv): it is written on a GPU by "
                  f"`{BENCH_COMMAND}`.")
            return
        rows, meta = data
    print(gpu_data.provenance_line(meta))
    for dtype in sorted({r["dtype"] for r in rows}, key=lambda d: d != "float32"):
        print_backward_table(rows, dtype)
        print()
    print(backward_summary(rows))
    plots.show(plot_backward(rows, meta))


# --------------------------------------------------------------------------------------------
# The op at work
# --------------------------------------------------------------------------------------------


def tiny_attention(params: dict, x: torch.Tensor, softmax) -> torch.Tensor:
    """One attention layer: softmax(q k^T / sqrt(d)) v, then a linear read-out."""
    q, k, v = x @ params["wq"], x @ params["wk"], x @ params["wv"]
    p = softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]))
    return (p @ v) @ params["wo"]


def train_tiny_attention(softmax, steps: int = 5, lr: float = 0.5, seed: int = 0) -> list[float]:
    """A few SGD steps of a tiny attention layer fitting a fixed target; the losses, one per step."""
    g = torch.Generator().manual_seed(seed)
    B, S, D = 2, 6, 8
    params = {n: (torch.randn(D, D, generator=g) / math.sqrt(D)).to(DEVICE).requires_grad_() for n in ("wq", "wk", "wv", "wo")}
    x = torch.randn(B, S, D, generator=g).to(DEVICE)
    target = torch.randn(B, S, D, generator=g).to(DEVICE)
    losses = []
    for _ in range(steps):
        loss = ((tiny_attention(params, x, softmax) - target) ** 2).mean()
        grads = torch.autograd.grad(loss, list(params.values()))
        with torch.no_grad():
            for p, gr in zip(params.values(), grads):
                p -= lr * gr
        losses.append(loss.item())
    return losses


def compare_training(steps: int = 5) -> None:
    """The tiny attention layer trained with helpers.softmax and with torch.softmax, side by side."""
    ours = train_tiny_attention(lambda s: _softmax_public(s), steps)
    theirs = train_tiny_attention(lambda s: torch.softmax(s, dim=-1), steps)
    print(f"{'step':>4} {'loss, helpers.softmax':>22} {'loss, torch.softmax':>20}")
    for i, (a, b) in enumerate(zip(ours, theirs)):
        print(f"{i:>4} {a:>22.6f} {b:>20.6f}")
    worst = max(abs(a - b) for a, b in zip(ours, theirs))
    print(f"largest difference between the two runs: {round_up_err(worst)}")


def _softmax_public(x):
    from .kernels import softmax

    return softmax(x)


def compiled_graphs(fn, *args):
    """Compile ``fn`` with ``fullgraph=True`` through AOTAutograd, keeping the forward and backward
    graphs it produces (no code generation: the graphs run as they are). Returns (result, graphs)."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    graphs = {}

    def keep(kind):
        def compiler(gm, example_inputs):
            graphs[kind] = gm
            return make_boxed_func(gm.forward)
        return compiler

    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, backend=aot_autograd(fw_compiler=keep("forward"), bw_compiler=keep("backward")))
    out = compiled(*args)
    if out.requires_grad:
        out.sum().backward() if out.dim() else out.backward()
    return out, graphs


def print_graph_ops(graphs: dict) -> None:
    """The operations each graph calls, in order."""
    for kind in ("forward", "backward"):
        gm = graphs.get(kind)
        if gm is None:
            continue
        ops = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
        print(f"{kind:>8}: " + ", ".join(ops))


def compile_check(backend: str | None = None, shape=(3, 4, 10), seed: int = 0) -> bool:
    """torch.compile(fullgraph=True) of a loss that calls helpers.softmax, against the same loss with
    torch.softmax in eager mode: values and gradients. ``aot_eager`` on the CPU, inductor on a GPU."""
    backend = backend or ("inductor" if ON_GPU else "aot_eager")
    g = torch.Generator().manual_seed(seed)
    x0 = torch.randn(shape, generator=g).to(DEVICE)
    w = torch.randn(shape[-1], generator=g).to(DEVICE)

    def loss(x, softmax):
        return (softmax(x) * w).sum()

    torch._dynamo.reset()
    f = torch.compile(lambda x: loss(x, _softmax_public), fullgraph=True, backend=backend)
    x1, x2 = x0.clone().requires_grad_(), x0.clone().requires_grad_()
    v1 = f(x1)
    v1.backward()
    v2 = loss(x2, lambda t: torch.softmax(t, dim=-1))
    v2.backward()
    dv = abs(v1.item() - v2.item())
    dg = (x1.grad - x2.grad).abs().max().item()
    print(f"torch.compile(fullgraph=True, backend={backend!r}): traced without a graph break; "
          f"value differs by {round_up_err(dv)}, gradient by {round_up_err(dg)}")
    return dv < 1e-5 and dg < 1e-5


def cuda_graph_demo() -> bool | None:
    """On a GPU: capture one forward and backward of helpers.softmax in a CUDA graph, replay it on new
    data and compare with torch.softmax. On the CPU: one line saying it needs a GPU."""
    if not ON_GPU:
        print("CUDA graphs need a GPU: on one, this cell captures a forward and backward of helpers.softmax "
              "and replays it on new data.")
        return None
    x = torch.randn(64, 1000, device="cuda", requires_grad=True)
    w = torch.randn(1000, device="cuda")

    def step():
        x.grad = None
        (_softmax_public(x) * w).sum().backward()
        return x.grad

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm up: plans are made and kernels compiled before capture
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    x.grad = None
    with torch.cuda.graph(graph):
        (_softmax_public(x) * w).sum().backward()
    grad = x.grad
    with torch.no_grad():
        x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    x2 = x.detach().clone().requires_grad_()
    (torch.softmax(x2, -1) * w).sum().backward()
    err = (grad - x2.grad).abs().max().item()
    print(f"CUDA graph: captured forward + backward, replayed on new data: gradient within {round_up_err(err)} "
          f"of torch.softmax's")
    return err < 1e-5


# --------------------------------------------------------------------------------------------
# Exercise 8.1: the backward of log-softmax
# --------------------------------------------------------------------------------------------


def log_softmax_backward_answer(out: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """dx for out = log_softmax(x): dy - softmax(x) * sum(dy), with softmax(x) = exp(out)."""
    return dy - torch.exp(out) * dy.sum(-1, keepdim=True)


def _wrong_8_1(out, dy) -> dict:
    p = torch.exp(out)
    s = dy.sum(-1, keepdim=True)
    cands = {
        "forgot the -softmax(x) * sum(dy) term: every output of log_softmax depends on every input "
        "through the log-sum-exp": dy,
        "forgot the sum: the correction is softmax(x) times the row sum of dy, not softmax(x) alone": dy - p,
        "out holds log-probabilities; softmax(x) is exp(out), not out": dy - out * s,
        "a sign: the softmax(x) * sum(dy) term is subtracted from dy, not added": dy + p * s,
        "the sum runs over the last dimension (along a row: dim=-1), not over the rows": dy - p * dy.sum(0, keepdim=True),
        "that is softmax's backward (from y = softmax(x)); for log_softmax, differentiate out_i = x_i - LSE(x)":
            p * (dy - (p * dy).sum(-1, keepdim=True)),
    }
    if out.dim() == 2 and out.shape[0] == out.shape[1]:
        cands["keep the summed dimension (keepdim=True): without it the row sums broadcast along the wrong axis"] = \
            dy - p * dy.sum(-1)
    return cands


def _cases_8_1():
    g = torch.Generator().manual_seed(81)
    shapes = [(3, 5), (4, 4), (2, 3, 6), (1, 1)]
    for shape in shapes:
        x = torch.randn(shape, generator=g, dtype=torch.float64) * 2
        dy = torch.randn(shape, generator=g, dtype=torch.float64) + 0.5
        yield torch.log_softmax(x, dim=-1), dy


def _trial_8_1(fn) -> str:
    worst = 0.0
    for out, dy in _cases_8_1():
        o, d = out.clone(), dy.clone()
        try:
            got = call_attempt(fn, o, d)
        except RuntimeError as e:
            if "must match the size" in str(e):
                raise Wrong(f"on an input of shape {tuple(out.shape)} your code raised RuntimeError: "
                            f"{str(e).splitlines()[0]}. Keep the summed dimension: .sum(-1, keepdim=True)") from None
            raise
        if not (torch.equal(o, out) and torch.equal(d, dy)):
            raise Wrong("your function changed its inputs: compute a new tensor instead")
        want = log_softmax_backward_answer(out, dy)
        if not isinstance(got, torch.Tensor):
            raise Wrong(f"return a tensor, got {type(got).__name__}")
        if got.shape != want.shape:
            hint = " (keep the summed dimension: .sum(-1, keepdim=True))" if got.numel() != want.numel() or got.dim() != want.dim() else ""
            raise Wrong(f"on an input of shape {tuple(out.shape)} you returned shape {tuple(got.shape)}{hint}")
        got64 = got.detach().to(torch.float64).cpu()
        err = (got64 - want).abs().max().item()
        if not err <= 1e-9:
            for hint, cand in _wrong_8_1(out, dy).items():
                if cand.shape == got64.shape and torch.allclose(got64, cand, atol=1e-9):
                    raise Wrong(f"on an input of shape {tuple(out.shape)}: {hint}")
            raise Wrong(f"on an input of shape {tuple(out.shape)}: largest error {err:.2e}; first row should start "
                        f"{fmt(want.reshape(-1, want.shape[-1])[0, :3])}, got {fmt(got64.reshape(-1, got64.shape[-1])[0, :3])}")
        worst = max(worst, err)
    return f"{'exact' if worst == 0 else 'largest error ' + round_up_err(worst)} on 4 inputs (float64)"


def check_8_1(log_softmax_backward) -> None:
    """Exercise 8.1: ``log_softmax_backward(out, dy)`` returns dx for out = log_softmax(x)."""
    check("8.1", "the backward of log-softmax", log_softmax_backward, _trial_8_1)


# --------------------------------------------------------------------------------------------
# Exercise 8.2: a backward kernel for short rows (a tile of rows per program)
# --------------------------------------------------------------------------------------------

#: (M, N, BLOCK_M): exact tiles; a partial last tile with padded columns; one tile larger than the input.
CASES_8_2 = ((4, 8, 2), (5, 37, 2), (3, 20, 4))


_is_untouched_kernel = is_untouched


def _trial_8_2(kernel) -> str:
    if not hasattr(kernel, "__getitem__") or not hasattr(kernel, "fn"):
        raise Wrong("backward_tile_kernel must be a Triton kernel: decorate it with @triton.jit")
    if _is_untouched_kernel(kernel):
        raise NotImplementedError
    g = torch.Generator().manual_seed(82)
    worst = 0.0
    for M, N, bm in CASES_8_2:
        y0 = torch.softmax(torch.randn(M, N, generator=g, dtype=torch.float64) * 2, -1).float()
        dy0 = torch.randn(M, N, generator=g).float() + 0.5
        y, dy, dx = guarded((M, N)), guarded((M, N)), guarded((M, N))
        y.copy_(y0.to(y.device))
        dy.copy_(dy0.to(dy.device))
        bn = triton.next_power_of_2(N)
        run_learner_kernel(kernel, (triton.cdiv(M, bm),), dx, y, dy, N, M, N, BLOCK_M=bm, BLOCK_N=bn, outputs=[dx])
        if not (torch.equal(y.cpu(), y0) and torch.equal(dy.cpu(), dy0)):
            raise Wrong("your kernel changed y or dy: store into dx_ptr only")
        got = dx.detach().cpu().double()
        y64, dy64 = y0.double(), dy0.double()
        want = vjp_formula(y64, dy64)
        where = f"on a {M} x {N} input with BLOCK_M = {bm}, BLOCK_N = {bn}"
        if torch.isnan(got).any():
            rows_nan = sorted({int(i) for i in torch.nonzero(torch.isnan(got))[:, 0].tolist()})
            if torch.isnan(got).all():
                raise Wrong(f"{where} every output is NaN: padding lanes must load 0.0 (other=0.0), since -inf or "
                            f"NaN padding turns the row dot into NaN; and is every row stored?")
            raise Wrong(f"{where} rows {rows_nan[:4]} of dx were never written (still NaN): does the mask cover "
                        f"exactly rows < n_rows and cols < n_cols, and does each program store its BLOCK_M rows?")
        err = (got - want).abs().max().item()
        if not err <= 1e-5:
            prod = y64 * dy64
            dot = prod.sum(-1, keepdim=True)
            # axis=0 sums each column over the tile's rows (the padding rows load 0)
            dot_cols = torch.cat([prod[i:i + bm].sum(0, keepdim=True).expand(min(bm, M - i), N) for i in range(0, M, bm)])
            cands = {
                "forgot the - sum_j y_j dy_j term: dx = y * (dy - dot)": y64 * dy64,
                "a sign: dx = y * (dy - dot), the dot is subtracted": y64 * (dy64 + dot),
                "the row dot sums along a row: tl.sum(y * dy, axis=1), then dot[:, None] against the tile": y64 * (dy64 - dot_cols),
                "dx is y * (dy - dot), not dy * (y - dot)": dy64 * (y64 - dot),
                "dx = y * (dy - dot): the product with y is missing": dy64 - dot,
            }
            for hint, cand in cands.items():
                if torch.allclose(got, cand, atol=1e-5):
                    raise Wrong(f"{where}: {hint}")
            raise Wrong(f"{where}: largest error {err:.1e} against y * (dy - sum(y * dy)); row 0 should start "
                        f"{fmt(want[0, :3])}, got {fmt(got[0, :3])}. Do both loads use the mask and other=0.0?")
        worst = max(worst, err)
    return f"largest error {round_up_err(worst)} on {len(CASES_8_2)} inputs"


def check_8_2(backward_tile_kernel) -> None:
    """Exercise 8.2: a Triton kernel for dx = y * (dy - sum(y * dy)), BLOCK_M rows per program."""
    check("8.2", "a backward kernel for short rows", backward_tile_kernel, _trial_8_2)


# --------------------------------------------------------------------------------------------
# Exercise 8.3: the gradient of cross-entropy
# --------------------------------------------------------------------------------------------


def cross_entropy_grad_answer(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """d/dlogits of F.cross_entropy(logits, target) (the mean over rows): (softmax - one_hot) / M."""
    p = torch.softmax(logits, dim=-1)
    return (p - torch.nn.functional.one_hot(target, logits.shape[-1]).to(p.dtype)) / logits.shape[0]


def _cases_8_3():
    g = torch.Generator().manual_seed(83)
    out = []
    for M, N, spread, shift in ((4, 5, 1.0, 0.0), (3, 7, 2.0, 0.0), (2, 6, 1.0, 200.0)):
        logits = (torch.randn(M, N, generator=g, dtype=torch.float64) * spread + shift).float()
        target = torch.randint(0, N, (M,), generator=g)
        out.append((logits, target))
    return out


def _trial_8_3(fn) -> str:
    worst = 0.0
    for logits, target in _cases_8_3():
        lg, tg = logits.clone(), target.clone()
        got = call_attempt(fn, lg, tg)
        if not (torch.equal(lg, logits) and torch.equal(tg, target)):
            raise Wrong("your function changed its inputs: compute a new tensor instead")
        if not isinstance(got, torch.Tensor):
            raise Wrong(f"return a tensor, got {type(got).__name__}")
        x64 = logits.double()
        want = cross_entropy_grad_answer(x64, target)
        M, N = logits.shape
        where = f"on {M} x {N} logits" + (" around 200" if logits.mean() > 100 else "")
        if got.shape != want.shape:
            raise Wrong(f"{where} you returned shape {tuple(got.shape)}, expected {tuple(want.shape)} (one gradient per logit)")
        got64 = got.detach().to(torch.float64).cpu()
        if torch.isnan(got64).any() or torch.isinf(got64).any():
            raise Wrong(f"{where} your gradient has NaN or inf: exp of a float32 logit near 200 overflows; subtract "
                        f"the row maximum first (or use torch.softmax)")
        err = (got64 - want).abs().max().item()
        if not err <= 1e-6:
            p = torch.softmax(x64, -1)
            oh = torch.nn.functional.one_hot(target, N).to(p.dtype)
            cands = {
                "F.cross_entropy averages over the rows: divide by the number of rows M": p - oh,
                "a sign: the gradient is softmax minus the one-hot target": (oh - p) / M,
                "the target's term is missing: d(-x[target])/dx subtracts 1 at the target's column": p / M,
                "softmax runs along each row (dim=-1), not down the columns": (torch.softmax(x64, 0) - oh) / M,
                "that is log_softmax: the gradient of log-sum-exp is softmax itself": (torch.log_softmax(x64, -1) - oh) / M,
            }
            for hint, cand in cands.items():
                if torch.allclose(got64, cand, atol=1e-5):
                    raise Wrong(f"{where}: {hint}")
            raise Wrong(f"{where}: largest error {err:.2e}; row 0 should be {fmt(want[0])}, got {fmt(got64[0])}")
        worst = max(worst, err)
    return f"largest error {round_up_err(worst)}, logits near 200 included"


def check_8_3(cross_entropy_grad) -> None:
    """Exercise 8.3: ``cross_entropy_grad(logits, target)``: the gradient of the mean cross-entropy."""
    check("8.3", "the gradient of cross-entropy", cross_entropy_grad, _trial_8_3)
