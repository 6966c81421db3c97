"""Lesson 03 · the exercise checkers: 3.1 block size and padding, 3.2 a column-wise softmax through strides,
3.3 a fused scaled softmax kernel, 3.4 a bandwidth-bound time. What the lesson shows is in ``helpers.lesson03``."""

import ast
import math

import numpy as np
import torch
import triton

from .exercises import (
    Wrong,
    call_attempt,
    check,
    guarded,
    guards_intact,
    launch_learner_kernel,
    require_kernel,
    run_learner_kernel,
)
from .kernels import softmax_fused_kernel
from .reference import round_up_err
from .sandbox import kernel_spec


# Exercise checkers: one line each (correct / not yet / wrong), never an exception. Learner kernels run on
# guarded rows further apart than their length with NaN between: wrong strides, loads and stores show.
def _differ(e: float, g: float) -> tuple[str, str]:  # two numbers with enough digits to tell them apart
    return next(((f"{e:.{d}g}", f"{g:.{d}g}") for d in (4, 6, 9) if f"{e:.{d}g}" != f"{g:.{d}g}"), (repr(e), repr(g)))


def _trial_3_1(block_and_padding) -> str:
    for n in (1, 2, 3, 4, 78, 781, 1000, 1024, 1025, 12672, 65536):
        got = call_attempt(block_and_padding, n)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise Wrong(f"return a pair (BLOCK_SIZE, padding), got {type(got).__name__} {got!r}")
        if isinstance(got[0], (float, np.floating)):  # 2 ** np.ceil(np.log2(n)), math.pow: a float, even when whole
            raise Wrong(
                f"for N = {n} BLOCK_SIZE is the float {float(got[0])!r}: a block size is an integer power of two, "
                f"as tl.arange needs (it refuses a float); return an int (1 << k, or a loop of doublings)"
            )
        for v, what in zip(got, ("BLOCK_SIZE", "padding")):
            if isinstance(v, bool) or not (isinstance(v, (int, np.integer)) or isinstance(v, float) and v.is_integer()):
                raise Wrong(f"{what} should be a whole number of lanes (an int), got {type(v).__name__} {v!r}")
        (block, pad), want = (int(v) for v in got), triton.next_power_of_2(n)
        if (block, pad) == (want - n, want) and block != pad:
            raise Wrong(f"for N = {n} you returned ({block}, {pad}): return (BLOCK_SIZE, padding), in that order")
        if block != want:
            hint = (
                f"{n} is already a power of two, so the row fills its block exactly: stop doubling once the block "
                f"holds the row"
                if block == 2 * n == 2 * want
                else "the block must hold the whole row: the smallest power of two that is at least N"
                if block < n
                else "BLOCK_SIZE must be a power of two (tl.arange requires it), the smallest one that is at least N"
            )
            raise Wrong(f"for N = {n} you gave BLOCK_SIZE = {block}, expected {want}: {hint}")
        if pad != want - n:
            raise Wrong(
                f"for N = {n} (BLOCK_SIZE = {want}) you gave padding = {pad}, expected {want - n}: "
                f"the padding is the block's lanes past the row's end"
            )
    return "e.g. N = 781 -> BLOCK_SIZE 1024 with 243 padding lanes"


def check_3_1(block_and_padding) -> None:
    """Exercise 3.1: ``block_and_padding(n_cols)`` returns (BLOCK_SIZE, padding lanes)."""
    check("3.1", "block size and padding", block_and_padding, _trial_3_1)


class _KernelSpy:
    """Stands in for the fused kernel in 3.2: records each launch and runs it through ``run_learner_kernel``."""

    def __init__(self, kernel, outputs):
        self.kernel, self.outputs, self.launches, self.fn = kernel, outputs, [], kernel.fn

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches.append((grid, {**dict(zip(self.kernel.arg_names, args)), **kwargs}))
            run_learner_kernel(self.kernel, grid, *args, outputs=self.outputs, **kwargs)

        return launch


def _dim0_hint(launch, x: torch.Tensor, out: torch.Tensor) -> str:
    """What is wrong with the arguments of a launch, for a softmax over the columns of ``x``."""
    (grid, a), (M, N) = launch, x.shape
    g = grid(dict(BLOCK_SIZE=a.get("BLOCK_SIZE"))) if callable(grid) else grid
    rs, cs, ors, nc, b = (
        a.get(k) for k in ("in_row_stride", "in_col_stride", "out_row_stride", "n_cols", "BLOCK_SIZE")
    )
    return next(
        (
            hint
            for bad, hint in (
                (
                    (rs, cs) == x.stride() and M != 1,
                    "in_row_stride and in_col_stride are x's strides for a softmax over "
                    "rows: the kernel's 'row' is now a column of x, so its row stride is x.stride(1) and its column stride "
                    "x.stride(0)",
                ),
                (
                    (g[0] if isinstance(g, (tuple, list)) and g else g) != N,
                    f"one program per column of x: the grid is (x.shape[1],) = ({N},), you launched {g!r}",
                ),
                (
                    nc != M,
                    f"n_cols is the length of what each program reduces: a column of x has x.shape[0] = {M} "
                    f"elements, you passed {nc!r}",
                ),
                (
                    rs != x.stride(1) or cs != x.stride(0),
                    f"use x.stride(), not the shape: this x is a slice of a wider "
                    f"tensor, its strides are {x.stride()}; you passed in_row_stride = {rs!r}, in_col_stride = {cs!r}",
                ),
                (
                    ors != out.stride(0),
                    f"out_row_stride is the distance between out[c] and out[c + 1], out.stride(0) = "
                    f"{out.stride(0)} here (rows of out can be further apart than their length); you passed {ors!r}",
                ),
                (
                    isinstance(b, int) and b < M,
                    f"BLOCK_SIZE must hold a whole column: a power of two >= {M}, you passed {b}",
                ),
            )
            if bad
        ),
        "out[c] must be the softmax of column c of x",
    )


def _trial_3_2(softmax_dim0) -> str:
    if not callable(softmax_dim0):
        raise Wrong(f"expected a function, got {type(softmax_dim0).__name__}")
    g, worst = torch.Generator().manual_seed(302), 0.0
    # (M, N, row stride of x: None = contiguous, else a slice of a wider tensor; row stride of out)
    for M, N, xs, os_ in [
        (5, 3, None, None),
        (3, 7, None, 5),
        (13, 20, None, None),
        (20, 13, 23, 27),
        (1, 6, None, None),
        (7, 1, 3, 10),
        (40, 9, 14, 43),
    ]:
        x = guarded((M, N), row_stride=xs, fill=0.0).copy_(torch.randn(M, N, generator=g) * 3)
        before, out = x.clone(), guarded((N, M), row_stride=os_)
        spy = _KernelSpy(softmax_fused_kernel, outputs=(out,))
        on = f"on x of shape {M} x {N}" + (f" (a slice of a wider tensor, strides {x.stride()})" if xs else "")
        try:
            call_attempt(lambda *a: softmax_dim0(*a) or True, x, out, spy)  # time-limited; None back is fine here
        except Exception as e:  # a Wrong from run_learner_kernel: an access outside x and out
            if not spy.launches or isinstance(e, NotImplementedError):
                raise
            what = (
                ("the kernel reached memory outside x and out" if "finish" not in str(e) else str(e))
                if isinstance(e, Wrong)
                else f"the launch raised {type(e).__name__}: {(str(e).strip().splitlines() or [''])[-1][:120]}"
            )
            raise Wrong(f"{on} {what}: {_dim0_hint(spy.launches[-1], x, out)}") from None
        if len(spy.launches) != 1:
            raise Wrong(
                f"launch the kernel once (one program per column), not {len(spy.launches)} times"
                if spy.launches
                else "your function never launched the kernel it was given: call kernel[grid](...) once"
            )
        xin, o = spy.launches[0][1]["in_ptr"], spy.launches[0][1]["out_ptr"]  # tensors: the launch ran
        for bad, why in (
            (
                xin.untyped_storage().data_ptr() != x.untyped_storage().data_ptr(),
                "the kernel read a copy of x (x.t().contiguous() or similar moves the whole tensor through "
                "memory once more): pass x itself and let the strides do the transposing",
            ),
            (xin.data_ptr() != x.data_ptr(), "in_ptr must point at x's first element: pass x itself"),
            (o.data_ptr() != out.data_ptr(), "write into the out tensor you were given (pass it as out_ptr)"),
            (not torch.equal(x, before), "x changed: the kernel must only read it"),
        ):
            if bad:
                raise Wrong(why)
        ref, got = torch.softmax(x.detach().cpu().double(), dim=0), out.detach().cpu().double().t()
        if torch.isnan(got).any():
            cols = sorted({int(c) for c in torch.nonzero(torch.isnan(got))[:, 1]})
            raise Wrong(
                f"{on}, out[c] holds NaN (never written, or read from past a row's end) for c in {cols[:6]}: "
                f"{_dim0_hint(spy.launches[0], x, out)}"
            )
        err = (got - ref).abs().max().item()
        if not err <= 1e-5:
            raise Wrong(
                f"{on}: out.t() is {err:.1e} away from softmax(x, dim=0): {_dim0_hint(spy.launches[0], x, out)}"
            )
        worst = max(worst, err)
    return f"max abs error {round_up_err(worst)}, and x was read in place on every shape, slices included"


def check_3_2(softmax_dim0) -> None:
    """Exercise 3.2: ``softmax_dim0(x, out, kernel)``: softmax(x, dim=0) into out, one launch on x itself."""
    check("3.2", "a column-wise softmax through strides", softmax_dim0, _trial_3_2)


def isolated_max_rows(M: int, N: int, g, top: float = 120.0, gap: float = 100.0) -> torch.Tensor:
    """Rows whose maximum is above ``top`` and ``gap`` above all else: any other shift overflows exp in float32."""
    z = top - gap - 30.0 * torch.rand(M, N, generator=g)
    z[torch.arange(M), torch.randint(0, N, (M,), generator=g)] = top + 10.0 * torch.rand(M, generator=g)
    return z


# ((M, N), scale, rows, row stride of x, of out, value between x's rows or NaN): each catches what earlier ones miss
_CASES_3_3 = [
    ((3, 8), 0.5, "randn", 11, 13, -2.0),  # no padding: the scale, and which stride goes with which tensor
    ((5, 37), 2.0, "randn", 41, 39, None),  # padding lanes: masks on the load and on the store
    ((2, 20), 3.0, "isolated", 23, 21, None),  # only the max shift keeps exp finite
    ((4, 13), -1.0, "randn", 17, 15, None),  # a negative scale with padding: -inf * scale = +inf
    ((3, 16), -2.0, "isolated", 19, 21, None),  # negative scale, no padding: the max of x * scale, not of x
    ((4, 70), -0.25, "isolated", 75, 73, None),  # both at once, several rows of padding
]


def _stride_hint(x, out, scale: float) -> str:
    """The wrong row strides a kernel used: the (load, store) stride pair whose simulation matches out."""
    (M, N), rs_in, rs_out = x.shape, x.stride(0), out.stride(0)
    says = {
        ("load", rs_out): "it loads with out_row_stride: x's rows are in_row_stride apart",
        ("store", rs_in): "it stores with in_row_stride: out's rows are out_row_stride apart",
        **{
            (k, N): f"it steps from row to row of {t} by n_cols: {t}'s rows are {t.replace('x', 'in')}_row_stride "
            f"apart, which is n_cols only for a contiguous {t}"
            for k, t in (("load", "x"), ("store", "out"))
        },
    }
    span = out.untyped_storage().nbytes() // out.element_size()
    for ld in (rs_in, rs_out, N):
        want = torch.softmax(torch.as_strided(x, (M, N), (ld, 1)).detach().cpu().double() * scale, -1)
        for st in (rs_out, rs_in, N):
            if (ld, st) == (rs_in, rs_out) or out.storage_offset() + (M - 1) * st + N > span:
                continue
            if torch.allclose(
                torch.as_strided(out, (M, N), (st, 1)).detach().cpu().double(), want, atol=1e-5, equal_nan=True
            ):
                return "; ".join(
                    says[k, v] for k, v, right in (("load", ld, rs_in), ("store", st, rs_out)) if v != right
                )
    return ""


def _run_3_3(kernel, data: torch.Tensor, scale: float, rs_in: int, rs_out: int, pad: float | None):
    """The kernel on guarded x (rows rs_in apart, ``pad`` or NaN between) into out: (x, out, x changed)."""
    M, N = data.shape
    x, out = guarded((M, N), row_stride=rs_in, fill=0.0).copy_(data), guarded((M, N), row_stride=rs_out)
    if pad is not None:
        torch.as_strided(x, (M, rs_in - N), (rs_in, 1), x.storage_offset() + N).fill_(pad)
    memory = torch.empty(0, dtype=x.dtype, device=x.device).set_(x.untyped_storage())
    before = memory.clone()
    launch_learner_kernel(
        kernel,
        (M,),
        out,
        x,
        rs_in,
        rs_out,
        N,
        scale,
        BLOCK_SIZE=triton.next_power_of_2(N),
        where=f"on a {M} x {N} input",
        outputs=(),
    )
    return x, out, not torch.equal(memory.view(torch.int32), before.view(torch.int32))


def _unmasked_loads(kernel) -> list[str]:
    """The ``tl.load`` calls of a learner's kernel (and of the ``@triton.jit`` functions it calls) that take no mask,
    no boundary check and no clamped offsets: each reads every lane of its block, the padding lanes past a row's end
    too. Read from the source: what such a load reads past the row leaves no trace once ``tl.where`` drops it."""
    try:
        todo, found = [kernel_spec(kernel)], []
    except Exception:  # no source to read: nothing to say
        return []
    while todo:
        spec = todo.pop()
        if spec[0] != "source":
            continue
        todo += [v[1] for v in spec[3].values() if v[0] == "kernel"]
        for node in ast.walk(ast.parse(spec[2])):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "load"):
                continue
            clamped = node.args and any(
                isinstance(n, ast.Call)
                and isinstance(n.func, (ast.Attribute, ast.Name))
                and getattr(n.func, "attr", getattr(n.func, "id", "")) in ("minimum", "where")
                for n in ast.walk(node.args[0])
            )
            if (
                len(node.args) < 2
                and not {k.arg for k in node.keywords} & {"mask", "boundary_check", None}
                and not clamped
            ):
                found.append(ast.unparse(node))
    return found


def _trial_3_3(kernel) -> str:
    require_kernel(kernel, "scaled_softmax_kernel")
    g, worst = torch.Generator().manual_seed(33), 0.0
    for (M, N), scale, rows, rs_in, rs_out, pad in _CASES_3_3:
        data = isolated_max_rows(M, N, g) / scale if rows == "isolated" else torch.randn(M, N, generator=g)
        x, out, changed = _run_3_3(kernel, data, scale, rs_in, rs_out, pad)
        on = f"on a {M} x {N} input (rows {rs_in} apart in x, {rs_out} in out) with scale = {scale}"
        if changed:
            raise Wrong(f"{on} your kernel changed its input: store into out_ptr only")
        ref, got = torch.softmax(data.double() * scale, -1), out.detach().cpu().double()
        bad_nan, bad_pad = bool(torch.isnan(got).any()), not guards_intact(out)
        err = (got - ref).abs().nan_to_num(float("inf")).max().item()
        worst = max(worst, err)
        if not (bad_nan or bad_pad or err > 1e-5):
            continue
        only_max = "your output has NaN on rows where only a shift by the row maximum keeps exp finite"
        hints = (
            (True, _stride_hint(x, out, scale)),
            (
                bad_nan and scale < 0 and N & (N - 1) and rows == "randn",
                "your output has NaN: the padding lanes "
                "load -inf, and -inf * scale is +inf when scale < 0. Give them -inf after scaling (tl.where, mask)",
            ),
            (
                bad_nan and rows == "isolated" and scale < 0,
                f"{only_max}: with scale < 0 the largest x * scale comes "
                "from the smallest x. Take the max of x * scale, after scaling",
            ),
            (bad_nan and rows == "isolated", f"{only_max}: did you subtract the row maximum (of x * scale)?"),
            (
                bad_nan,
                "your output has NaN, and every input value is finite: the checker puts NaN just past the "
                "end of each row. Does tl.load have mask=cols < n_cols?",
            ),
            (bad_pad, "your kernel wrote into the padding after a row of out: does tl.store have mask=...?"),
        )
        hint = next((h for bad, h in hints if bad and h), "")
        if not hint:
            r, c = divmod(int((got - ref).abs().argmax()), N)
            e, o = _differ(float(ref[r, c]), float(got[r, c]))
            hint = f"out[{r}, {c}] should be {e} (softmax(x * scale)), you wrote {o}"
        raise Wrong(f"{on}: {hint}")
    loads = _unmasked_loads(kernel)
    if loads:
        load = loads[0] if len(loads[0]) <= 90 else loads[0][:87] + "..."
        raise Wrong(
            f"your numbers are right, but `{load}` has no mask: the unmasked load reads all BLOCK_SIZE lanes, "
            f"past the end of every row and, on the last row, past the end of x. tl.where drops those values, "
            f"not the reads, and on a GPU a read outside a tensor can fault: load with mask=cols < n_cols"
        )
    return f"max abs error {round_up_err(worst)}"


def check_3_3(scaled_softmax_kernel) -> None:
    """Exercise 3.3: a Triton kernel computing softmax(x * scale) row by row."""
    check("3.3", "a fused scaled softmax kernel", scaled_softmax_kernel, _trial_3_3)


#: Exercise 3.4: a wrong answer off by the same factor on every case, and what that factor means.
_FACTORS_3_4 = (
    (0.5, "count the write as well as the read: 2 · M · N · element_size bytes"),
    (2.0, "each element is read once and written once: 2 · M · N · element_size bytes, not twice that"),
    (1e-3, "milliseconds, not seconds: multiply seconds by 1e3"),
    (1e3, "milliseconds, not microseconds"),
    (1e9, "gbps is in 10**9 bytes per second: divide the bytes by gbps * 1e9"),
    (1e9 / 2**30, "a GB here is 10**9 bytes, not 2**30"),
)


def _trial_3_4(predicted_ms) -> str:
    cases = [
        (4096, 4096, 4, 4000.0),
        (1, 1, 4, 1.0),
        (65536, 1024, 2, 3350.0),
        (1024, 65536, 4, 2000.0),
        (3, 5, 8, 10.0),
    ]
    got = [
        (lambda v: v.item() if isinstance(v, torch.Tensor) and v.numel() == 1 else v)(call_attempt(predicted_ms, *c))
        for c in cases
    ]
    for v in got:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise Wrong(f"return a number of milliseconds, got {type(v).__name__}")
    want = [2 * M * N * es / (gb * 1e9) * 1e3 for M, N, es, gb in cases]
    bad = [i for i, (v, w) in enumerate(zip(got, want)) if not math.isclose(v, w, rel_tol=1e-6)]
    if not bad:
        return "e.g. a 4096 x 4096 float32 softmax at 4,000 GB/s: at least 0.0336 ms"
    same = lambda rs: all(math.isclose(r, rs[0], rel_tol=1e-3) for r in rs)  # noqa: E731
    ratio = [v / w for v, w in zip(got, want)]
    per_byte = [r * c[2] for r, c in zip(ratio, cases)]  # the same on every case when element_size was ignored
    hint, size = "", round(per_byte[0]) if math.isfinite(per_byte[0]) else 0
    if same(ratio):
        hint = next((why for f, why in _FACTORS_3_4 if math.isclose(ratio[0], f, rel_tol=1e-3)), "")
    elif same(per_byte) and size and math.isclose(per_byte[0], size, rel_tol=1e-3):
        hint = (
            "multiply by element_size: the bandwidth counts bytes, not elements"
            if size == 1
            else f"use element_size: your answer fits a fixed {size} bytes an element"
        )
    (M, N, es, gb), (e, o) = cases[bad[0]], _differ(want[bad[0]], float(got[bad[0]]))
    raise Wrong(
        f"for M = {M}, N = {N}, {es}-byte elements at {gb:g} GB/s you gave {o} ms, expected {e} ms"
        + (f" ({hint})" if hint else "")
    )


def check_3_4(predicted_ms) -> None:
    """Exercise 3.4: ``predicted_ms(M, N, element_size, gbps)``, reading and writing each element once."""
    check("3.4", "predict a bandwidth-bound time", predicted_ms, _trial_3_4)
