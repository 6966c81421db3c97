"""Lesson 08's module (and the cells of the lesson and its deep dive that use it): the correctness inputs, the
bandwidth figure, the op demos, and every exercise checker fed the right answer, the untouched template and each
plausible wrong answer (one test each, expecting "wrong" with the hint that names the mistake). Also what the
lesson's visible cells show (the Jacobian, the vector-Jacobian product, the traffic counts, the plain launch of the
library's tiled kernel), asserted here.

Every checker must print exactly one line and never raise, whatever the learner wrote.
"""

from __future__ import annotations

import importlib
import json
import math
import sys
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl  # noqa: F401  (the generated kernels' module uses it)
from checking import _untouched, assert_solutions_correct, status, verdict

import helpers
from helpers import data, lesson08
from helpers.kernels import softmax_backward_looped, softmax_backward_tiled

ROOT = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------------------------
# What the lesson's cells show
# --------------------------------------------------------------------------------------------


def vjp(y, dy):
    return y * (dy - (y * dy).sum(-1, keepdim=True))


def test_jacobian_is_diag_minus_outer_symmetric_rows_sum_to_zero():
    x = torch.tensor([1.0, 2.0, 0.5, -1.0], dtype=torch.float64)
    y = torch.softmax(x, -1)
    J = torch.autograd.functional.jacobian(lambda t: torch.softmax(t, dim=-1), x)
    torch.testing.assert_close(J, torch.diag(y) - torch.outer(y, y), atol=1e-15, rtol=0)
    assert J.sum(1).abs().max() < 1e-12 and torch.equal(J, J.T)
    assert (J.diagonal() > 0).all() and (J - torch.diag(J.diagonal()) <= 0).all()


def test_vjp_formula_is_j_transpose_dy():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(6, generator=g, dtype=torch.float64)
    dy = torch.randn(6, generator=g, dtype=torch.float64)
    y = torch.softmax(x, -1)
    torch.testing.assert_close(vjp(y, dy), (torch.diag(y) - torch.outer(y, y)).T @ dy)


def test_traffic_counts_the_four_ops_of_the_formula():
    """The naive backward's 9MN: y * dy (2 reads, 1 write), the row sum (1 read), dy - s (1 read,
    1 write), y * (...) (2 reads, 1 write); the row sum's M-element output is left out."""
    ops = [(2, 1), (1, 0), (1, 1), (2, 1)]
    assert sum(r for r, _ in ops) == 6 and sum(w for _, w in ops) == 3
    assert 3 / (6 + 3) == pytest.approx(1 / 3) and 3 / (4 + 1) == pytest.approx(0.6)


TOLERANCE = {torch.float32: 1e-6, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}  # the lesson's, of the largest |dx|


def test_both_backward_kernels_within_the_lessons_tolerance():
    """What the lesson's correctness cell shows: both kernels, three dtypes, errors within its tolerance."""
    g = torch.Generator().manual_seed(0)
    for shape in ((1, 1), (3, 5), (2, 2, 7), (4, 781)):
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            y = torch.softmax(torch.randn(shape, generator=g) * 3, dim=-1).to(helpers.DEVICE, dtype)
            dy = torch.randn(shape, generator=g).to(helpers.DEVICE, dtype)
            ref = vjp(y.double(), dy.double())
            for dx in (softmax_backward_tiled(y, dy), softmax_backward_looped(y, dy, 32)):
                err = (dx.double() - ref).abs().max().item() / max(ref.abs().max().item(), 1e-30)
                assert err <= TOLERANCE[dtype], (shape, dtype, err)


def _fake_bench(ns=(1024, 12672, 16384)):
    rows = []
    for d in ("float32", "bfloat16"):
        for n in ns:
            for p, f in (
                ("copy", 1.0),
                ("course", 0.95),
                ("course_looped", 0.8),
                ("torch_backward", 0.5),
                ("torch_naive_backward", 0.3),
            ):
                rows.append(dict(dtype=d, M=4096, N=n, provider=p, graph_ms=1.5 / f, graph_frac=f, status="ok"))
    return data.frame(rows, {"gpu": "Test GPU"})


def test_the_figure_has_a_panel_per_dtype_and_labels_that_do_not_overlap():
    fig = lesson08.plot_backward(_fake_bench())
    assert len(fig.axes) == 2 and "Test GPU" in fig._suptitle.get_text()
    fig.canvas.draw()
    for ax in fig.axes:
        boxes = [t.get_window_extent() for t in ax.get_xticklabels() if t.get_text()]
        assert [t.get_text() for t in ax.get_xticklabels()] == ["1K", "12.4K", "16K"]
        assert not any(a.overlaps(b) for a, b in zip(boxes, boxes[1:])), "x tick labels overlap"
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_the_recorded_figure_draws():
    assert "08_backward" in lesson08.FIGURES
    import matplotlib.pyplot as plt

    plt.close(lesson08.FIGURES["08_backward"]())


def test_live_rows_need_a_gpu():
    if helpers.ON_GPU:
        pytest.skip("measures on a GPU")
    with pytest.raises(RuntimeError, match="GPU"):
        lesson08.backward_rows()


def test_live_rows_time_the_gpu_only_in_the_benchmarks_rounds(monkeypatch):
    """backward_rows with the GPU faked: every provider of the benchmark checked against float64, then timed
    by the GPU timer only, in rounds interleaved over them; the rows keep the columns the lesson shows, with
    no empty (eager, host) ones, and the same providers as the recording."""
    import backward_bench  # tools/backward_bench.py: what the recording measures

    from helpers import measure

    calls = []
    monkeypatch.setattr(lesson08, "ON_GPU", True)
    monkeypatch.setattr(measure, "warm_up_gpu", lambda: None)
    monkeypatch.setattr(measure, "gpu_ms", lambda fn: calls.append(fn) or 2.0)
    bench = data.frame(
        lesson08.backward_rows(ns=(8, 20), dtypes=("float32", "bfloat16"), M=3, rounds=2), {"gpu": "Test GPU"}
    )
    assert list(bench.columns) == [
        "dtype",
        "M",
        "N",
        "provider",
        "graph_ms",
        "graph_frac",
        "graph_spread",
        "max_err",
        "status",
    ]
    assert len(bench) == 4 * 5 and (bench.status == "ok").all() and bench.notna().all().all()
    assert list(bench.provider[:5]) == list(backward_bench.providers())
    assert len(calls) == 4 * 5 * 2 and calls[0] is not calls[1]  # 2 rounds, each over the 5 providers in turn
    assert (bench.graph_frac == bench.provider.map(lambda p: 1.0 if p == "copy" else 1.5)).all()
    assert (bench.graph_spread == 0).all()


def test_live_rows_do_not_time_a_wrong_provider(monkeypatch):
    """A provider whose dx is off (here the course's, faked) is reported with its error and not timed."""
    from helpers import measure

    monkeypatch.setattr(lesson08, "ON_GPU", True)
    monkeypatch.setattr(measure, "warm_up_gpu", lambda: None)
    monkeypatch.setattr(measure, "gpu_ms", lambda fn: 2.0)
    monkeypatch.setattr(lesson08, "softmax_backward", lambda y, dy: y * dy)  # forgets the - sum(y * dy) term
    rows = {r["provider"]: r for r in lesson08.backward_rows(ns=(16,), dtypes=("float32",), M=2, rounds=1)}
    assert rows["course"]["status"].startswith("wrong: max abs error") and math.isnan(rows["course"]["graph_ms"])
    assert rows["course_looped"]["status"] == "ok" and rows["course_looped"]["graph_frac"] == 1.5
    assert lesson08.LIVE_NS == (1024, 2048, 32768)  # copies in L2 and not, the fair ones, the slow fp32 one


def test_cuda_graph_demo():
    err = lesson08.cuda_graph_demo()
    assert (err is None) if not helpers.ON_GPU else err < 1e-5


def test_compile_sees_one_softmax_node_each_way():
    x = torch.randn(3, 5, device=helpers.DEVICE, requires_grad=True)
    w = torch.randn(5, device=helpers.DEVICE)
    _, graphs = lesson08.compiled_graphs(lambda x, w: (helpers.softmax(x) * w).sum(), x, w)
    ops = {k: [str(n.target) for n in g.graph.nodes if n.op == "call_function"] for k, g in graphs.items()}
    assert "softmax_course.softmax.default" in ops["forward"]
    assert "softmax_course.softmax_backward.default" in ops["backward"]


# --------------------------------------------------------------------------------------------
# Exercise 8.1: the backward of log-softmax
# --------------------------------------------------------------------------------------------

WRONG_8_1 = {
    "forgot the -softmax(x) * sum(dy)": lambda out, dy: dy.clone(),
    "forgot the sum": lambda out, dy: dy - torch.exp(out),
    "exp(out), not out": lambda out, dy: dy - out * dy.sum(-1, keepdim=True),
    "a sign": lambda out, dy: dy + torch.exp(out) * dy.sum(-1, keepdim=True),
    "not over the rows": lambda out, dy: dy - torch.exp(out) * dy.sum(0, keepdim=True),
    "that is softmax's backward": lambda out, dy: torch.exp(out) * (dy - (torch.exp(out) * dy).sum(-1, keepdim=True)),
    "keepdim=True": lambda out, dy: dy - torch.exp(out) * dy.sum(-1),  # a broadcast error on (3, 5)
    "return a tensor": lambda out, dy: 0.5,
    "returned None": lambda out, dy: None,
    "shape": lambda out, dy: (dy - torch.exp(out) * dy.sum(-1, keepdim=True)).sum(-1),
    "largest error": lambda out, dy: dy - 0.9 * torch.exp(out) * dy.sum(-1, keepdim=True),
}


def test_checker_8_1_right_and_untouched(capsys):
    assert status(verdict(capsys, lesson08.check_8_1, lesson08.log_softmax_backward_answer)).startswith("correct")
    assert status(verdict(capsys, lesson08.check_8_1, _untouched)).startswith("not yet")
    assert status(verdict(capsys, lesson08.check_8_1, None)).startswith("not yet")
    assert status(verdict(capsys, lesson08.check_8_1, lambda out, dy: ...)).startswith("not yet")


@pytest.mark.parametrize("hint", list(WRONG_8_1))
def test_checker_8_1_wrong(capsys, hint):
    line = verdict(capsys, lesson08.check_8_1, WRONG_8_1[hint])
    assert status(line).startswith("wrong") and hint in line, line


def test_checker_8_1_raising_and_in_place(capsys):
    assert "wrong: your code raised ZeroDivisionError" in verdict(capsys, lesson08.check_8_1, lambda out, dy: 1 / 0)

    def in_place(out, dy):
        dy -= torch.exp(out) * dy.sum(-1, keepdim=True)
        return dy

    assert "changed its inputs" in verdict(capsys, lesson08.check_8_1, in_place)


def test_the_square_input_catches_a_missing_keepdim_by_value(capsys):
    """On (4, 4) a missing keepdim broadcasts without an error: the value says which mistake it is."""

    def no_keepdim_square_only(out, dy):
        if out.shape[-1] != out.shape[0]:
            return lesson08.log_softmax_backward_answer(out, dy)
        return dy - torch.exp(out) * dy.sum(-1)

    line = verdict(capsys, lesson08.check_8_1, no_keepdim_square_only)
    assert "wrong" in line and "keep the summed dimension" in line and "(4, 4)" in line


# --------------------------------------------------------------------------------------------
# Exercise 8.2: the learner's Triton kernel, three tensors with their own row strides
# --------------------------------------------------------------------------------------------

RIGHT_8_2 = """
@triton.jit
def KERNEL(dx_ptr, y_ptr, dy_ptr, y_row_stride, dy_row_stride, dx_row_stride, n_rows, n_cols,
           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    y = tl.load(y_ptr + rows[:, None] * y_row_stride + cols[None, :], mask=mask, other=0.0)
    dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=mask, other=0.0)
    s = tl.sum(y * dy, axis=1)
    dx = y * (dy - s[:, None])
    tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :], dx, mask=mask)
"""

#: name -> (edits of the right kernel's source, expected status, words of the hint)
VARIANTS_8_2 = {
    "right": ([], "correct", "largest error"),
    "rows_n_cols_apart": (
        [("* y_row_stride", "* n_cols"), ("* dy_row_stride", "* n_cols"), ("* dx_row_stride", "* n_cols")],
        "wrong",
        "right only when rows are n_cols apart",
    ),
    "dy_read_with_y_stride": (
        [("* dy_row_stride", "* y_row_stride")],
        "wrong",
        "dy is read with another tensor's row stride",
    ),
    "y_read_with_dy_stride": (
        [("rows[:, None] * y_row_stride", "rows[:, None] * dy_row_stride")],
        "wrong",
        "y is read with another tensor's row stride",
    ),
    "dx_written_with_y_stride": (
        [("* dx_row_stride", "* y_row_stride")],
        "wrong",
        "dx is written with another tensor's row stride",
    ),
    "no_load_mask": ([("mask=mask, other=0.0)", ")")], "wrong", "a load reads past the end of a row"),
    "no_column_mask": (
        [("mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)", "mask = rows[:, None] < n_rows")],
        "wrong",
        "past a row's last column",
    ),
    "no_store_mask": ([("dx, mask=mask)", "dx)")], "wrong", "a store wrote outside dx's rows"),
    "no_row_mask": (
        [("mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)", "mask = cols[None, :] < n_cols")],
        "wrong",
        "a store wrote outside dx's rows",
    ),
    "inf_padding": (
        [
            (
                "y = tl.load(y_ptr + rows[:, None] * y_row_stride + cols[None, :], mask=mask, other=0.0)",
                "y = tl.load(y_ptr + rows[:, None] * y_row_stride + cols[None, :], mask=mask, other=-float('inf'))",
            )
        ],
        "wrong",
        "other=0.0",
    ),
    # the forward's padding on both loads: -inf * -inf = inf in s, so dx is -inf (not NaN)
    "inf_padding_both": (
        [("mask=mask, other=0.0)", "mask=mask, other=-float('inf'))")],
        "wrong",
        "the padding lanes loaded -inf, the forward's padding, and -inf * -inf = inf",
    ),
    "inf_padding_dy": (
        [
            (
                "dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=mask, other=0.0)",
                "dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=mask, other=-float('inf'))",
            )
        ],
        "wrong",
        "-inf padding gives -inf * 0 = NaN",
    ),
    "no_sum_term": ([("dx = y * (dy - s[:, None])", "dx = y * dy")], "wrong", "y * dy is only the first term"),
    "sum_term_without_y": (
        [("dx = y * (dy - s[:, None])", "dx = y * dy - s[:, None]")],
        "wrong",
        "missing its factor y",
    ),
    "no_product_with_y": (
        [("dx = y * (dy - s[:, None])", "dx = dy - s[:, None]")],
        "wrong",
        "the product with y is missing",
    ),
    "sign": ([("dx = y * (dy - s[:, None])", "dx = y * (dy + s[:, None])")], "wrong", "a sign"),
    "wrong_axis": (
        [("s = tl.sum(y * dy, axis=1)", "s = tl.sum(y * dy, axis=0)"), ("dy - s[:, None]", "dy - s[None, :]")],
        "wrong",
        "axis=1",
    ),
    "sum_of_dy": ([("s = tl.sum(y * dy, axis=1)", "s = tl.sum(dy, axis=1)")], "wrong", "not the sum of dy"),
    "dy_times_y_minus_s": ([("dx = y * (dy - s[:, None])", "dx = dy * (y - s[:, None])")], "wrong", "not dy * (y - s)"),
    "no_program_id": ([("tl.program_id(0).to(tl.int64) * BLOCK_M + ", "")], "wrong", "never written"),
    "stores_into_y": (
        [("tl.store(dx_ptr + rows[:, None] * dx_row_stride", "tl.store(y_ptr + rows[:, None] * y_row_stride")],
        "wrong",
        "changed y or dy",
    ),
    "half_the_answer": ([("dx = y * (dy - s[:, None])", "dx = 0.5 * y * (dy - s[:, None])")], "wrong", "largest error"),
    "far_out_of_bounds_store": (
        [("tl.store(dx_ptr + rows[:, None] * dx_row_stride", "tl.store(dx_ptr + rows[:, None] * dx_row_stride * 4096")],
        "wrong",
        "",
    ),
}


@pytest.fixture(scope="module")
def kernels_8_2(tmp_path_factory):
    """Every variant as a real @triton.jit kernel in a module file (Triton reads a kernel's source)."""
    src = ["import triton", "import triton.language as tl", ""]
    for name, (edits, _, _) in VARIANTS_8_2.items():
        body = RIGHT_8_2.replace("KERNEL", f"k_{name}")
        for old, new in edits:
            assert old in body, (name, old)
            body = body.replace(old, new)
        src.append(body)
    src.append(
        "@triton.jit\ndef k_untouched(dx_ptr, y_ptr, dy_ptr, y_row_stride, dy_row_stride, dx_row_stride, n_rows, "
        "n_cols, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):\n    raise NotImplementedError  # your code here\n"
    )
    d = tmp_path_factory.mktemp("kernels_8_2")
    (d / "variants_8_2.py").write_text("\n".join(src))
    sys.path.insert(0, str(d))
    try:
        return importlib.import_module("variants_8_2")
    finally:
        sys.path.remove(str(d))


@pytest.mark.parametrize("name", list(VARIANTS_8_2))
def test_checker_8_2(capsys, kernels_8_2, name):
    _, expected, words = VARIANTS_8_2[name]
    line = verdict(capsys, lesson08.check_8_2, getattr(kernels_8_2, f"k_{name}"))
    assert status(line).startswith(expected), line
    assert words in line, line


def test_checker_8_2_untouched_and_not_a_kernel(capsys, kernels_8_2):
    assert status(verdict(capsys, lesson08.check_8_2, kernels_8_2.k_untouched)).startswith("not yet")
    assert status(verdict(capsys, lesson08.check_8_2, None)).startswith("not yet")
    line = verdict(capsys, lesson08.check_8_2, lambda *a, **k: None)
    assert status(line).startswith("wrong") and "@triton.jit" in line


def test_checker_8_2_the_process_survives_and_the_next_run_is_clean(capsys, kernels_8_2):
    verdict(capsys, lesson08.check_8_2, kernels_8_2.k_far_out_of_bounds_store)
    assert status(verdict(capsys, lesson08.check_8_2, kernels_8_2.k_right)).startswith("correct")


def test_checker_8_2_inputs_have_distinct_strides():
    """The exercise's point: y, dy and dx rows are apart by different strides, none of them n_cols."""
    for M, N, bm in lesson08.CASES_8_2:
        strides = (N + 3, N + 9, N + 5)
        assert len(set(strides)) == 3 and N not in strides


# --------------------------------------------------------------------------------------------
# Exercise 8.3: the gradient of cross-entropy
# --------------------------------------------------------------------------------------------


def _onehot(logits, target):
    return torch.nn.functional.one_hot(target, logits.shape[-1]).to(logits.dtype)


WRONG_8_3 = {
    "divide by the number of rows": lambda x, t: torch.softmax(x, -1) - _onehot(x, t),
    "a sign": lambda x, t: (_onehot(x, t) - torch.softmax(x, -1)) / x.shape[0],
    "the target's term is missing": lambda x, t: torch.softmax(x, -1) / x.shape[0],
    "along each row (dim=-1)": lambda x, t: (torch.softmax(x, 0) - _onehot(x, t)) / x.shape[0],
    "that is log_softmax": lambda x, t: (torch.log_softmax(x, -1) - _onehot(x, t)) / x.shape[0],
    "overflows": lambda x, t: (torch.exp(x) / torch.exp(x).sum(-1, keepdim=True) - _onehot(x, t)) / x.shape[0],
    # shifted, but not by the maximum: fine around 200, overflows on rows spread over hundreds
    "subtract each row's maximum": lambda x, t: (
        ((e := torch.exp(x - x.mean(-1, keepdim=True))) / e.sum(-1, keepdim=True) - _onehot(x, t)) / x.shape[0]
    ),
    "shape": lambda x, t: torch.softmax(x, -1)[:, 0],
    "largest error": lambda x, t: 0.9 * lesson08.cross_entropy_grad_answer(x, t),
}


def test_checker_8_3_right_answers_and_untouched(capsys):
    assert status(verdict(capsys, lesson08.check_8_3, lesson08.cross_entropy_grad_answer)).startswith("correct")

    def autograd(logits, target):
        x = logits.detach().clone().requires_grad_()
        torch.nn.functional.cross_entropy(x, target).backward()
        return x.grad

    assert status(verdict(capsys, lesson08.check_8_3, autograd)).startswith("correct")
    assert status(verdict(capsys, lesson08.check_8_3, _untouched)).startswith("not yet")


@pytest.mark.parametrize("hint", list(WRONG_8_3))
def test_checker_8_3_wrong(capsys, hint):
    line = verdict(capsys, lesson08.check_8_3, WRONG_8_3[hint])
    assert status(line).startswith("wrong") and hint in line, line


def test_checker_8_3_in_place(capsys):
    def in_place(logits, target):
        logits -= logits.max(-1, keepdim=True).values
        return lesson08.cross_entropy_grad_answer(logits, target)

    assert "changed its inputs" in verdict(capsys, lesson08.check_8_3, in_place)


# --------------------------------------------------------------------------------------------
# The notebook's exercises: solutions pass, and no solution is on screen above its checker
# --------------------------------------------------------------------------------------------

NOTEBOOK = ROOT / "notebooks" / "08_backward.ipynb"
DEEP_DIVE = ROOT / "notebooks" / "08d_backward_in_depth.ipynb"


def _cells(notebook=NOTEBOOK):
    return json.loads(notebook.read_text())["cells"]


def test_the_notebooks_solutions_are_correct(capsys, tmp_path):
    """The code of each `solution` cell of the lesson, run through its checker."""
    assert_solutions_correct(
        capsys,
        "08",
        tmp_path,
        {
            "log_softmax_backward": lesson08.check_8_1,
            "backward_tile_kernel": lesson08.check_8_2,
            "cross_entropy_grad": lesson08.check_8_3,
        },
    )


def test_no_kernel_answer_on_screen_above_the_checker_of_8_2():
    """Above exercise 8.2's solution no cell holds a tile kernel's row dot, its dx or its strided
    offsets: the library's backward kernel comes after the solution."""
    cells = _cells()
    sol = next(
        i
        for i, c in enumerate(cells)
        if "solution" in c.get("metadata", {}).get("tags", []) and "backward_tile_kernel" in "".join(c["source"])
    )
    above = "\n".join("".join(c["source"]) for c in cells[:sol])
    for answer in ("tl.sum(y * dy", "dy - dot[:, None]", "* y_row_stride", "softmax_backward_tiled_kernel"):
        assert answer not in above, answer
    after = "\n".join("".join(c["source"]) for c in cells[sol:])
    assert "softmax_backward_tiled_kernel" in after


def test_exercise_answers_match_autograd():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, 6, generator=g, dtype=torch.float64, requires_grad=True)
    dy = torch.randn(3, 6, generator=g, dtype=torch.float64)
    out = torch.log_softmax(x, -1)
    (dx,) = torch.autograd.grad(out, x, dy)
    torch.testing.assert_close(lesson08.log_softmax_backward_answer(out.detach(), dy), dx)
    target = torch.tensor([1, 0, 5])
    (g_ce,) = torch.autograd.grad(torch.nn.functional.cross_entropy(x, target), x)
    torch.testing.assert_close(lesson08.cross_entropy_grad_answer(x.detach(), target), g_ce)


def _run_cell(phrase: str, ns: dict, notebook=NOTEBOOK) -> dict:
    """Run the code cell of ``notebook`` (the lesson unless told) that contains ``phrase``, in ``ns``."""
    (src,) = [
        "".join(c["source"]) for c in _cells(notebook) if c["cell_type"] == "code" and phrase in "".join(c["source"])
    ]
    exec(compile(src, f"{notebook.name} ({phrase})", "exec"), ns)
    return ns


def _notebook_names() -> dict:
    import pandas as pd

    from helpers.reference import round_up_err

    return dict(helpers=helpers, torch=torch, pd=pd, data=data, lesson08=lesson08, round_up_err=round_up_err, claims={})


def test_the_lessons_plain_launch_agrees_with_the_library():
    """The lesson launches the library's tiled kernel plainly (its own tile, the default warps): the same dx as
    helpers.softmax_backward, whose launcher picks the tile, on strided and expanded layouts and three dtypes."""
    from helpers.kernels.backward import softmax_backward_tiled_kernel

    ns = _run_cell(
        "def backward(y, dy, BLOCK_M=4)",
        dict(_notebook_names(), triton=triton, tl=tl, softmax_backward_tiled_kernel=softmax_backward_tiled_kernel),
    )
    g = torch.Generator().manual_seed(8)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for M, N in ((5, 37), (9, 100)):
            y = torch.softmax(torch.randn(N, M, generator=g) * 3, dim=0).t().to(helpers.DEVICE, dtype)  # transposed
            dy = torch.randn(M, N + 3, generator=g)[:, :N].to(helpers.DEVICE, dtype)  # rows N + 3 apart
            for block_m in (1, 4):
                torch.testing.assert_close(
                    ns["backward"](y, dy, block_m).float(),
                    helpers.softmax_backward(y, dy).float(),
                    atol=TOLERANCE[dtype],
                    rtol=0,
                )
        ones = torch.ones(1, dtype=dtype, device=helpers.DEVICE).expand(M, N)  # stride 0: dx is 0
        assert ns["backward"](y, ones).abs().max().item() < TOLERANCE[dtype]


def test_the_notebooks_compile_cell_shows_the_lessons_op_once_each_way(capsys):
    """The lesson's operator cell, then its compile cell: one lesson08 node in the forward graph, one in the backward."""
    ns = _run_cell('custom_op("lesson08::softmax"', _notebook_names())
    _run_cell("def loss_fn", ns)
    out = capsys.readouterr().out
    assert "lesson08.softmax.default" in out and "lesson08.softmax_backward.default" in out
    forward, backward = out.strip().splitlines()[-2:]
    assert "lesson08.softmax.default" in forward and "lesson08.softmax_backward.default" in backward


def test_the_deep_dives_training_cell_matches_torch_step_by_step(capsys):
    ns = _run_cell("def tiny_attention", _notebook_names(), DEEP_DIVE)
    losses = ns["losses"]
    assert len(losses) == 5 and losses["helpers.softmax"].is_monotonic_decreasing
    assert (losses["helpers.softmax"] - losses["torch.softmax"]).abs().max() < 1e-6


def test_the_deep_dives_compile_cells_trace_without_a_graph_break(capsys):
    ns = _run_cell("def loss_fn", _notebook_names(), DEEP_DIVE)
    out = capsys.readouterr().out
    assert "softmax_course.softmax.default" in out and "softmax_course.softmax_backward.default" in out
    _run_cell("fullgraph=True, backend=backend", ns, DEEP_DIVE)
    assert torch.allclose(ns["x1"].grad, ns["x2"].grad, atol=1e-6) and abs(ns["v1"].item() - ns["v2"].item()) < 1e-5


def test_the_notebooks_bandwidth_cells_mark_noisy_cells_and_find_the_fair_yardstick():
    """The lesson's cells on what a GPU's live branch measures (lesson08.LIVE_NS, no Liger rows), with spreads: a
    cell over 10% gets its '*'; the copy table says which copies fit in L2, and the fair yardstick leaves those out;
    every claim but Liger's is put."""
    bench = _fake_bench(lesson08.LIVE_NS)
    bench["graph_spread"] = 0.01
    bench.loc[(bench.provider == "course") & (bench.N == 32768) & (bench.dtype == "float32"), "graph_spread"] = 0.3
    bench.loc[(bench.provider == "copy") & (bench.N == 1024) & (bench.dtype == "bfloat16"), "graph_spread"] = 0.2
    props = data.frame([dict(dram_peak_gbps=1.0, l2_bytes=50e6)], {"gpu": "Test GPU"})  # every copy beats 0.8 of it
    ns = _run_cell("providers = [", dict(_notebook_names(), bench=bench))
    noisy = ns["noisy"]
    assert list(ns["frac"].columns) == ["course", "torch_backward", "torch_naive_backward"]  # the lesson's providers
    assert noisy.loc[("float32", 32768), "course"] and not noisy.loc[("float32", 32768)].drop("course").any()
    assert noisy.loc[("bfloat16", 1024)].all(), "a noisy copy marks every fraction measured against it"
    assert int(noisy.values.sum()) == 1 + len(noisy.columns)
    shown = repr(data.show(ns["frac"], best="max", noisy=noisy))
    assert "0.95*" in shown and "rounds spread over 10%" in shown
    ns = _run_cell("peak, l2_mb = props", dict(ns, props=props))
    copy = ns["copy"]
    assert copy.loc[("float32", 1024), "MB moved"] == pytest.approx(2 * 4096 * 1024 * 4 / 1e6)
    in_cache = [("bfloat16", 1024), ("bfloat16", 2048), ("float32", 1024)]
    assert sorted(copy.index[copy["fits in L2"] == "yes"]) == in_cache
    ns = _run_cell("fair = copy.index", ns)  # without Liger's rows, as a live run has them
    assert sorted(ns["fair"]) == sorted(i for i in copy.index if i not in in_cache)
    assert ns["claims"] and not any("Liger" in key for key in ns["claims"])
    in_l2, of_peak = lesson08.copy_speed(bench, props)  # what the figure shades
    assert sorted(in_l2[in_l2].index) == in_cache and (of_peak >= 0.8).all()


def test_the_figure_shades_where_the_copy_is_no_fair_yardstick():
    """On the recording, the figure (lesson08.copy_speed) shades exactly the row lengths the lesson's cells leave out
    of the fair yardstick: copies in L2, and copies below FAIR_COPY of the DRAM peak, the threshold its prose and its
    cell state."""
    bench = data.load("backward", gpu="h100").query("group == 'M=4096' and provider != 'course_looped'")
    props = data.load("device_props")
    ns = _run_cell("providers = [", dict(_notebook_names(), bench=bench))
    ns = _run_cell("fair = copy.index", _run_cell("peak, l2_mb = props", dict(ns, props=props)))
    copy = ns["copy"]
    in_l2, of_peak = lesson08.copy_speed(bench, props)
    assert sorted(in_l2[in_l2].index) == sorted(copy.index[copy["fits in L2"] == "yes"])
    shaded = set(in_l2[in_l2].index) | set(of_peak[of_peak < lesson08.FAIR_COPY].index)
    assert sorted(set(copy.index) - shaded) == sorted(ns["fair"])
    fair_cell = next(c for c in _cells() if c["cell_type"] == "code" and "fair = copy.index" in "".join(c["source"]))
    assert f'copy["of DRAM peak"] >= {lesson08.FAIR_COPY}' in "".join(fair_cell["source"])
    assert f"at least {lesson08.FAIR_COPY} of the DRAM peak" in _prose()
    assert "copy" in lesson08.LABELS and "the ceiling" not in lesson08.LABELS["copy"]


def _prose(notebook=NOTEBOOK) -> str:
    return "\n\n".join("".join(c["source"]) for c in _cells(notebook) if c["cell_type"] == "markdown")


@pytest.mark.parametrize("notebook", [NOTEBOOK, DEEP_DIVE], ids=["08", "08d"])
def test_no_history_in_the_prose(notebook):
    text = _prose(notebook).lower()
    for phrase in ("earlier recording", "before the fix", "commit ", "not reproduced", "as before", "the ceiling"):
        assert phrase not in text, phrase


def test_the_tile_rule_and_its_exceptions_are_the_librarys():
    """The deep dive's tile rule, as its prose states it, is what backward_tiled_config and backward_splits_few_rows
    do: 8 warps from 64 KiB of each input, the split for few rows of a spilling tile (at most 3 programs an SM), the
    same in both dtypes, and a shorter row a tile however few the rows. 132 SMs: both recorded GPUs."""
    from helpers.kernels.backward import (
        SPLIT_PROGRAMS_PER_SM,
        backward_splits_few_rows,
        backward_tiled_config,
    )

    text = _prose(DEEP_DIVE)
    assert "float32 rows of more than 8192 columns, 16-bit rows of more than 16384" in text
    assert backward_tiled_config(32000, 4) == (1, 8) and backward_tiled_config(8193, 4) == (1, 8)
    assert backward_tiled_config(8192, 4)[1] != 8 and backward_tiled_config(32000, 2) == (1, 8)
    assert backward_tiled_config(16384, 2) == (1, 32) and backward_tiled_config(16385, 2) == (1, 8)  # 64 KiB a row
    assert f"rows × slices ≤ {SPLIT_PROGRAMS_PER_SM} × SMs" in text and SPLIT_PROGRAMS_PER_SM == 3
    assert backward_splits_few_rows(48, 32000, 4, 132) and not backward_splits_few_rows(64, 32000, 4, 132)
    for m in (1, 8, 16, 32, 48, 64, 96, 128, 256, 1024, 4096):
        assert backward_splits_few_rows(m, 32000, 4, 132) == backward_splits_few_rows(m, 32000, 2, 132), m
    assert "the split at 1 and 8 rows, one row of 8 warps per program from 64 rows on" in text
    assert [m for m in (1, 8, 64, 256) if backward_splits_few_rows(m, 32000, 4, 132)] == [1, 8]  # the recorded rows
    for n in (8192, 12672, 16384, 32000, 32768):  # the probe's row lengths, with 1 and 8 rows
        for m in (1, 8):
            for size in (4, 2):
                assert backward_splits_few_rows(m, n, size, 132) == (n > 16384), (m, n, size)
