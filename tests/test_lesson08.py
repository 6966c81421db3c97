"""Lesson 08's module: the Jacobian and traffic tables, the correctness table, the recorded bandwidth
(from a temporary CSV: the real one is written on a GPU), the op demos, and every exercise checker
fed right, untouched, raising and plausibly wrong answers (each wrong one must get its hint).

Every checker must print exactly one line and never raise, whatever the learner wrote.
"""

from __future__ import annotations

import math

import helpers
import pytest
import torch
import triton
import triton.language as tl
from helpers import gpu_data, lesson08
from checking import _untouched, status, verdict


# --------------------------------------------------------------------------------------------
# The lesson's tables and demos
# --------------------------------------------------------------------------------------------


def test_jacobian_formula_matches_autograd(capsys):
    x = torch.tensor([0.3, -1.0, 2.0, 0.0, 1.5], dtype=torch.float64)
    J = lesson08.jacobian_autograd(x)
    torch.testing.assert_close(J, lesson08.jacobian_formula(torch.softmax(x, -1)), atol=1e-15, rtol=0)
    lesson08.print_jacobian(x)
    out = capsys.readouterr().out
    assert "(to 1e-15): True" in out and "sum to 0: True" in out and "symmetric: True" in out


def test_vjp_formula_is_j_transpose_dy():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(6, generator=g, dtype=torch.float64)
    dy = torch.randn(6, generator=g, dtype=torch.float64)
    y = torch.softmax(x, -1)
    torch.testing.assert_close(lesson08.vjp_formula(y, dy), lesson08.jacobian_formula(y).T @ dy)


def test_traffic_rows():
    rows = {r["name"]: r for r in lesson08.traffic_rows(8, 16)}
    assert rows["naive PyTorch, 4 ops"]["total"] == 9 * 8 * 16
    assert rows["one kernel, rows on chip"]["total"] == 3 * 8 * 16 and rows["one kernel, rows on chip"]["best_frac"] == 1.0
    assert math.isclose(rows["looped, rows re-read"]["best_frac"], 0.6)


def test_tables_print(capsys):
    lesson08.jacobian_bytes_table()
    lesson08.print_traffic_table(M=4, N=8)
    out = capsys.readouterr().out
    assert "68.7 GB" in out and "9MN" in out and "0.33" in out


def test_check_backward_shapes(capsys):
    assert lesson08.check_backward_shapes(shapes=[(3, 5), (2, 2, 7)], dtypes=(torch.float32, torch.bfloat16))
    assert len(capsys.readouterr().out.strip().splitlines()) == 1 + 4
    assert set(lesson08.correctness_shapes()) == set(lesson08.GPU_SHAPES if helpers.ON_GPU else lesson08.CPU_SHAPES)


def _fake_rows():
    rows = []
    for d in ("float32", "bfloat16"):
        for n, (course, torch_b) in {1024: (1.0, 0.5), 4096: (0.95, 0.4)}.items():
            for p, f in (("copy", 1.0), ("course", course), ("course_looped", 0.8), ("torch_backward", torch_b),
                         ("torch_naive_backward", 0.3)):
                rows.append(dict(dtype=d, M=4096, N=n, provider=p, ms=1.0, graph_ms=1.5 / f, frac_of_copy=f,
                                 graph_frac=f, host_us=5.0, max_err=0.0, status="ok"))
    return rows


def test_recorded_bandwidth_from_a_csv(tmp_path, capsys):
    pytest.importorskip("IPython")  # the figure is displayed the notebook's way
    path = gpu_data.write_csv(tmp_path / "backward.csv", _fake_rows(),
                              {"gpu": "Test GPU", "command": "python -m helpers.backward_bench x.csv"})
    rows, meta = lesson08.backward_data(path)
    assert len(rows) == 20 and meta["gpu"] == "Test GPU"
    lesson08.show_backward_bandwidth(path)
    out = capsys.readouterr().out
    assert "Recorded on Test GPU" in out
    assert "float32, M = 4096" in out and "bfloat16, M = 4096" in out
    assert "reaches 0.95-1.00 of copy" in out and "torch's backward 0.40-0.50" in out
    fig = lesson08.plot_backward(rows, meta)
    assert len(fig.axes) == 2


def test_missing_recording_is_one_line(tmp_path, capsys):
    if helpers.ON_GPU:
        pytest.skip("on a GPU the section measures live")
    assert lesson08.backward_data(tmp_path / "nothing.csv") is None
    lesson08.show_backward_bandwidth(tmp_path / "nothing.csv")
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "helpers.backward_bench" in out[0]


def test_training_matches_torch(capsys):
    lesson08.compare_training(steps=2)
    out = capsys.readouterr().out
    last = out.strip().splitlines()[-1]
    assert last.startswith("largest difference between the two runs:") and last.endswith(("exact", "1e-07", "1e-08"))


def test_compile_check_and_graphs(capsys):
    assert lesson08.compile_check()
    assert "without a graph break" in capsys.readouterr().out


def test_cuda_graph_demo_on_the_cpu(capsys):
    if helpers.ON_GPU:
        assert lesson08.cuda_graph_demo()
    else:
        assert lesson08.cuda_graph_demo() is None
        assert "need a GPU" in capsys.readouterr().out


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
}


def test_checker_8_1(capsys):
    assert status(verdict(capsys, lesson08.check_8_1, lesson08.log_softmax_backward_answer)).startswith("correct")
    assert status(verdict(capsys, lesson08.check_8_1, _untouched)).startswith("not yet")
    assert status(verdict(capsys, lesson08.check_8_1, None)).startswith("not yet")
    assert status(verdict(capsys, lesson08.check_8_1, lambda out, dy: ...)).startswith("not yet")
    for hint, fn in WRONG_8_1.items():
        line = verdict(capsys, lesson08.check_8_1, fn)
        assert status(line).startswith("wrong") and hint in line, (hint, line)


def test_checker_8_1_keepdim_and_other_mistakes(capsys):
    line = verdict(capsys, lesson08.check_8_1, lambda out, dy: dy - torch.exp(out) * dy.sum(-1))
    assert status(line).startswith("wrong") and "keepdim=True" in line  # a broadcast error on (3, 5)
    line = verdict(capsys, lesson08.check_8_1, lambda out, dy: None)
    assert status(line).startswith("wrong") and "return" in line
    line = verdict(capsys, lesson08.check_8_1, lambda out, dy: 1 / 0)
    assert "wrong: your code raised ZeroDivisionError" in line

    def in_place(out, dy):
        dy -= torch.exp(out) * dy.sum(-1, keepdim=True)
        return dy
    assert "changed its inputs" in verdict(capsys, lesson08.check_8_1, in_place)
    line = verdict(capsys, lesson08.check_8_1, lambda out, dy: (dy - torch.exp(out) * dy.sum(-1, keepdim=True)).sum(-1))
    assert status(line).startswith("wrong") and "shape" in line


def test_checker_8_1_keepdim_hint_on_a_square_input():
    out = torch.log_softmax(torch.randn(4, 4, dtype=torch.float64), -1)
    dy = torch.randn(4, 4, dtype=torch.float64)
    hints = lesson08._wrong_8_1(out, dy)
    assert any("keepdim" in h for h in hints)


# --------------------------------------------------------------------------------------------
# Exercise 8.2: the learner's Triton kernel
# --------------------------------------------------------------------------------------------


@triton.jit
def tile_right(dx_ptr, y_ptr, dy_ptr, row_stride, n_rows, n_cols, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    offs = rows[:, None] * row_stride + cols[None, :]
    y = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    dot = tl.sum(y * dy, axis=1)
    tl.store(dx_ptr + offs, y * (dy - dot[:, None]), mask=mask)


@triton.jit
def tile_untouched(dx_ptr, y_ptr, dy_ptr, row_stride, n_rows, n_cols, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    raise NotImplementedError  # your code here


@triton.jit
def tile_no_dot(dx_ptr, y_ptr, dy_ptr, row_stride, n_rows, n_cols, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    offs = rows[:, None] * row_stride + cols[None, :]
    y = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(dx_ptr + offs, y * dy, mask=mask)


@triton.jit
def tile_sign(dx_ptr, y_ptr, dy_ptr, row_stride, n_rows, n_cols, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    offs = rows[:, None] * row_stride + cols[None, :]
    y = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    dot = tl.sum(y * dy, axis=1)
    tl.store(dx_ptr + offs, y * (dy + dot[:, None]), mask=mask)


@triton.jit
def tile_wrong_axis(dx_ptr, y_ptr, dy_ptr, row_stride, n_rows, n_cols, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    offs = rows[:, None] * row_stride + cols[None, :]
    y = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    dot = tl.sum(y * dy, axis=0)  # sums each column over the tile's rows
    tl.store(dx_ptr + offs, y * (dy - dot[None, :]), mask=mask)


@triton.jit
def tile_inf_padding(dx_ptr, y_ptr, dy_ptr, row_stride, n_rows, n_cols, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    offs = rows[:, None] * row_stride + cols[None, :]
    y = tl.load(y_ptr + offs, mask=mask, other=-float("inf")).to(tl.float32)  # the forward's padding
    dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    dot = tl.sum(y * dy, axis=1)
    tl.store(dx_ptr + offs, y * (dy - dot[:, None]), mask=mask)


@triton.jit
def tile_no_store_mask(dx_ptr, y_ptr, dy_ptr, row_stride, n_rows, n_cols, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    offs = rows[:, None] * row_stride + cols[None, :]
    y = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    dot = tl.sum(y * dy, axis=1)
    tl.store(dx_ptr + offs, y * (dy - dot[:, None]))  # no mask: past the end of dx


@triton.jit
def tile_far_out_of_bounds(dx_ptr, y_ptr, dy_ptr, row_stride, n_rows, n_cols, BLOCK_M: tl.constexpr,
                           BLOCK_N: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    offs = rows[:, None] * row_stride * 4096 + cols[None, :]  # far outside every tensor
    tl.store(dx_ptr + offs, tl.zeros((BLOCK_M, BLOCK_N), tl.float32))


@triton.jit
def tile_first_rows_only(dx_ptr, y_ptr, dy_ptr, row_stride, n_rows, n_cols, BLOCK_M: tl.constexpr,
                         BLOCK_N: tl.constexpr):
    rows = tl.arange(0, BLOCK_M).to(tl.int64)  # forgets the program id: every program does tile 0
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    offs = rows[:, None] * row_stride + cols[None, :]
    y = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    dot = tl.sum(y * dy, axis=1)
    tl.store(dx_ptr + offs, y * (dy - dot[:, None]), mask=mask)


def not_a_kernel(*args, **kwargs):
    return None


@pytest.mark.parametrize("kernel, expected, words", [
    (tile_right, "correct", ""),
    (tile_untouched, "not yet", ""),
    (None, "not yet", ""),
    (tile_no_dot, "wrong", "forgot the - sum_j y_j dy_j term"),
    (tile_sign, "wrong", "a sign"),
    (tile_wrong_axis, "wrong", "axis=1"),
    (tile_inf_padding, "wrong", "other=0.0"),
    (tile_no_store_mask, "wrong", "mask"),
    (tile_far_out_of_bounds, "wrong", "out of bounds"),
    (tile_first_rows_only, "wrong", "never written"),
    (not_a_kernel, "wrong", "@triton.jit"),
], ids=["right", "untouched", "none", "no_dot", "sign", "axis", "inf_padding", "no_store_mask", "far_oob",
        "program_id", "not_a_kernel"])
def test_checker_8_2(capsys, kernel, expected, words):
    if kernel is tile_far_out_of_bounds and helpers.ON_GPU:
        pytest.skip("compiled on a GPU, only the guard regions apply: a store far outside any buffer is the "
                    "interpreter's bounds check to catch (helpers.exercises)")
    line = verdict(capsys, lesson08.check_8_2, kernel)
    assert status(line).startswith(expected), line
    assert words in line, line


def test_checker_8_2_the_process_survives_and_the_next_run_is_clean(capsys):
    verdict(capsys, lesson08.check_8_2, tile_far_out_of_bounds)
    assert status(verdict(capsys, lesson08.check_8_2, tile_right)).startswith("correct")


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
}


def test_checker_8_3(capsys):
    assert status(verdict(capsys, lesson08.check_8_3, lesson08.cross_entropy_grad_answer)).startswith("correct")

    def solution(logits, target):  # the notebook's solution, which edits its own softmax in place
        p = torch.softmax(logits, dim=-1)
        p[torch.arange(len(target)), target] -= 1
        return p / logits.shape[0]
    assert status(verdict(capsys, lesson08.check_8_3, solution)).startswith("correct")

    def autograd(logits, target):
        x = logits.detach().clone().requires_grad_()
        torch.nn.functional.cross_entropy(x, target).backward()
        return x.grad
    assert status(verdict(capsys, lesson08.check_8_3, autograd)).startswith("correct")
    assert status(verdict(capsys, lesson08.check_8_3, _untouched)).startswith("not yet")
    for hint, fn in WRONG_8_3.items():
        line = verdict(capsys, lesson08.check_8_3, fn)
        assert status(line).startswith("wrong") and hint in line, (hint, line)
    line = verdict(capsys, lesson08.check_8_3, lambda x, t: torch.softmax(x, -1)[:, 0])
    assert status(line).startswith("wrong") and "shape" in line

    def in_place(logits, target):
        logits -= logits.max(-1, keepdim=True).values
        return cross_entropy_grad(logits, target)
    cross_entropy_grad = lesson08.cross_entropy_grad_answer
    assert "changed its inputs" in verdict(capsys, lesson08.check_8_3, in_place)


def test_the_notebooks_solutions_are_correct(capsys, tmp_path, monkeypatch):
    """The code of each `solution` cell of the lesson, run through its checker."""
    import importlib
    import json
    import re
    from pathlib import Path

    nb = json.loads((Path(__file__).resolve().parent.parent / "notebooks" / "08_backward.ipynb").read_text())
    blocks = []
    for c in nb["cells"]:
        if "solution" in c.get("metadata", {}).get("tags", []):
            blocks += re.findall(r"```python\n(.*?)```", "".join(c["source"]), re.S)
    assert len(blocks) == 3
    header = "import torch\nimport triton\nimport triton.language as tl\n\n"
    (tmp_path / "lesson08_solutions.py").write_text(header + "\n\n".join(blocks))  # Triton reads kernels' source
    monkeypatch.syspath_prepend(str(tmp_path))
    sol = importlib.import_module("lesson08_solutions")
    for checker, fn in ((lesson08.check_8_1, sol.log_softmax_backward), (lesson08.check_8_2, sol.backward_tile_kernel),
                        (lesson08.check_8_3, sol.cross_entropy_grad)):
        assert status(verdict(capsys, checker, fn)).startswith("correct")


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
