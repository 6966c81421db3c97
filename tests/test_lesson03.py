"""Lesson 03's module and kernel: the fused kernel against the lesson's replay of one program and on
the lesson's awkward shapes, the live measurements (refused without a GPU), the figures, and every
exercise checker against the right answer, the untouched template and each plausible wrong answer
(one test each: "wrong" with the hint that names that mistake; an out-of-bounds store is reported
and the process lives on).

Every checker must print exactly one line and never raise, whatever the learner wrote.
"""

from __future__ import annotations

import math

import matplotlib
import pytest
import torch
import triton
import triton.language as tl
from checking import _raises, _untouched, assert_checker_contract, assert_figure, status, variant, verdict
from claims import cell_with, code_cell_with, notebook, prose

import helpers
from helpers import data, lesson03, lesson03_exercises
from helpers.mode import DEVICE

# --------------------------------------------------------------------------------------------
# The kernel: one program replayed as the notebook does it; the lesson's shapes
# --------------------------------------------------------------------------------------------


def replay(x: torch.Tensor, row: int):
    """The notebook's replay of program ``row`` of softmax_fused_kernel, in PyTorch."""
    n_cols = x.shape[1]
    block = triton.next_power_of_2(n_cols)
    cols = torch.arange(block)
    mask = cols < n_cols
    xs = torch.full((block,), -torch.inf)
    xs[mask] = x[row, cols[mask]]
    numerator = torch.exp(xs - xs.max())
    return mask, xs, numerator, numerator / numerator.sum()


def test_replay_matches_the_kernel_on_every_row():
    torch.manual_seed(3)
    x = torch.randn(4, 11) * 3
    y = helpers.softmax_fused(x.to(DEVICE)).cpu()
    for row in range(4):
        mask, xs, numerator, out = replay(x, row)
        assert mask.sum() == 11 and len(mask) == 16
        assert torch.isinf(xs[11:]).all() and (numerator[11:] == 0).all()
        torch.testing.assert_close(out[mask], y[row], atol=1e-6, rtol=1e-5)


def _lesson_launch():
    """``fused_softmax``, lesson 03's plain launch, from its notebook cell (as tests/test_house.py reads cells)."""
    import json
    from pathlib import Path

    from helpers.kernels import softmax_fused_kernel

    nb = json.loads((Path(__file__).resolve().parent.parent / "notebooks" / "03_fused_softmax.ipynb").read_text())
    src = next(
        "".join(c["source"])
        for c in nb["cells"]
        if c["cell_type"] == "code" and "def fused_softmax(x):" in "".join(c["source"])
    )
    ns = {"helpers": helpers, "torch": torch, "triton": triton, "tl": tl, "softmax_fused_kernel": softmax_fused_kernel}
    exec(compile(src.split("\n\n\n")[0], "03_fused_softmax.ipynb", "exec"), ns)
    return ns["fused_softmax"]


@pytest.mark.parametrize(
    "M, N, transposed",
    [(37, 100, False), (5, 13, False), (1, 4, False), (4, 1, False), (20, 30, True), (3, 1000, False)],
)
def test_the_lessons_plain_launch_and_the_library_agree(M, N, transposed):
    """The lesson teaches the library's own kernel through a plain launch; helpers.softmax_fused launches it through
    its plan and wrapper (the deep dive): on the same input, the same bits."""
    g = torch.Generator().manual_seed(M * 1000 + N)
    x = (torch.randn(N, M, generator=g).t() if transposed else torch.randn(M, N, generator=g)).to(DEVICE)
    torch.testing.assert_close(_lesson_launch()(x), helpers.softmax_fused(x), rtol=0, atol=0)


@pytest.mark.parametrize("M, N", [(181, 78), (1, 4), (4, 1), (128, 256), (48, 512), (96, 64), (3, 5)])
def test_fused_kernel_on_the_lessons_shapes(M, N):
    """The notebook's correctness cell (CPU shapes): within 1e-6 of float64, and rows sum to 1."""
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(M, N, generator=g) * 3).to(DEVICE)
    y = helpers.softmax_fused(x)
    assert helpers.error_report(y, x).ok(atol=1e-6)
    torch.testing.assert_close(y.double().sum(-1).cpu(), torch.ones(M, dtype=torch.float64), atol=1e-5, rtol=0)


# --------------------------------------------------------------------------------------------
# Live measurements and figures
# --------------------------------------------------------------------------------------------


@pytest.mark.skipif(helpers.ON_GPU, reason="checks the CPU refusal")
def test_the_live_measurement_refuses_without_a_gpu():
    with pytest.raises(RuntimeError, match="GPU"):
        lesson03.limits_rows()


def test_limits_rows_keeps_its_name_for_the_benchmark():
    """``python tools/bench.py lessons`` records fused_limits.csv with lesson03.limits_rows."""
    import inspect

    import bench

    assert "lesson03.limits_rows" in inspect.getsource(bench.lessons) and callable(lesson03.limits_rows)


@pytest.mark.parametrize("name", sorted(lesson03.FIGURES))
def test_figures_are_figures(name):
    assert_figure(lesson03.FIGURES[name])


def test_every_panel_of_the_limits_figure_has_both_axis_labels():
    fig = lesson03.plot_limits()
    try:
        for ax in fig.axes:
            assert ax.get_xlabel() and ax.get_ylabel(), ax.get_title()
    finally:
        matplotlib.pyplot.close(fig)


def test_bandwidth_figure_takes_a_live_frame():
    """On a GPU the notebook passes the live DataFrame (four N, no other providers)."""
    bench = data.load("bench", gpu="h100")
    live = data.frame(
        bench[bench.N.isin([256, 1024, 4096, 16384]) & bench.provider.isin(lesson03.BANDWIDTH_PROVIDERS)].to_dict(
            "records"
        ),
        bench.attrs["provenance"],
    )
    fig = lesson03.plot_bandwidth(live, data.load("device_props"))
    matplotlib.pyplot.close(fig)


def test_figure_names_are_prefixed_by_their_lesson():
    assert lesson03.FIGURES and all(k.startswith("03_") for k in lesson03.FIGURES)


# --------------------------------------------------------------------------------------------
# The notebook's code and prose (the numbers its text quotes are its `claims`: tests/test_claims.py)
# --------------------------------------------------------------------------------------------


def test_the_core_uses_only_what_lessons_01_to_03_taught():
    """No plan, launch object or wrapper of the library, and no provider or recording of a later lesson."""
    code = "\n".join("".join(c["source"]) for c in notebook("03")["cells"] if c["cell_type"] == "code")
    for name in (
        "Plan",
        "Launch",
        "RowWise",
        "ncu",
        "online",
        "persistent",
        "liger",
        "triton_tutorial",
        "'softmax'",
        "MAX_FUSED_COLS",
    ):
        assert name not in code, name
    launch = code_cell_with("03", "def fused_softmax(x):")
    assert "softmax_fused_kernel[(M,)](y, x, x.stride(0), x.stride(1), y.stride(0), N," in launch
    cells = notebook("03")["cells"]
    first_launch = next(i for i, c in enumerate(cells) if "softmax_fused_kernel[(M,)]" in "".join(c["source"]))
    exercise = next(i for i, c in enumerate(cells) if "".join(c["source"]).startswith("## Exercise 3.2"))
    assert first_launch < exercise
    assert "counting(x=x, y=y)" in code_cell_with("03", "counting(x=x, y=y)")  # the interpreter counts the bytes


def test_the_core_prints_one_short_provenance_line_for_the_sweep():
    """The rows the core reads (float32, M = 4096, N <= 32768; copy, naive, torch.softmax, fused) are the first
    sweep's: every later re-run the file's date names is of other rows, so the core prints that sweep's date."""
    meta = data.load("bench", gpu="h100").attrs["provenance"]
    first, later = meta["date"].split(" (", 1)
    assert later.startswith("some cells re-run until") and later.endswith(": notes)"), later
    reruns = meta["notes"].split("Dates and commits of the re-runs: ", 1)[1].split("; ")
    assert len(reruns) == 3 and all(
        part.startswith(("long rows", "their split_coop and softmax rows", "softmax at")) for part in reruns
    ), reruns
    code = code_cell_with("03", 'bench = data.load("bench", gpu="h100")')
    assert 'meta["date"].split(" (")[0]' in code
    out = next(
        "".join(o.get("text", ""))
        for c in notebook("03")["cells"]
        if c["cell_type"] == "code" and 'bench = data.load("bench", gpu="h100")' in "".join(c["source"])
        for o in c["outputs"]
    )
    assert first in out and "(notes)" not in out and len(out.strip()) < 200 and out.count("\n") == 1, out


def test_the_flow_table_restates_no_speed_up():
    """'Why more than four times?': each version's own bytes per second against the copy's, up to N = 16384 (the copy
    at N = 32768 was slow in GPU time); no column that restates the measured speed-up."""
    code = code_cell_with("03", "flow = pd.DataFrame(")
    assert ".loc[:16384]" in code and "speed-up" not in code and "graph_ms" not in code
    assert "N = 32768$ is left out" in cell_with("03", "### Why more than four times?")


def test_the_limits_are_medians_of_three_rounds():
    """fused_limits.csv was recorded with limits_rows' default rounds, which the text and the table's caption name."""
    import inspect

    assert inspect.signature(lesson03.limits_rows).parameters["rounds"].default == 3
    assert "median of three rounds" in cell_with("03", "Two ends of the table need explaining")
    assert "medians of 3 rounds" in code_cell_with("03", "limits.query(")
    assert "timed once" not in prose("03") and "single round" not in prose("03")


def test_a_fraction_of_copy_is_a_yardstick_not_a_ceiling():
    assert "a point we come back to" not in prose("03") and "the ceiling" not in prose("03")


# --------------------------------------------------------------------------------------------
# Exercise 3.1: block size and padding
# --------------------------------------------------------------------------------------------


def block_and_padding_right(n):
    b = 1
    while b < n:
        b *= 2
    return b, b - n


def bp_doubles_once_too_often(n):
    b = 1
    while b <= n:
        b *= 2
    return b, b - n


def bp_the_row(n):
    return n, 0


def bp_power_below(n):
    b = 1 << (n.bit_length() - 1)
    return b, b - n


def bp_padding_is_n(n):
    return triton.next_power_of_2(n), n


def bp_swapped(n):
    b = triton.next_power_of_2(n)
    return b - n, b


def bp_fraction_wasted(n):
    b = triton.next_power_of_2(n)
    return b, (b - n) / b


def bp_not_a_pair(n):
    return triton.next_power_of_2(n)


def bp_float_block(n):
    import numpy as np

    b = 2 ** np.ceil(np.log2(n))  # a float, even where it is whole
    return b, b - n


def bp_math_pow(n):
    b = math.pow(2, math.ceil(math.log2(n)))  # a Python float
    return b, int(b) - n


def test_checker_3_1_contract(capsys):
    assert_checker_contract(capsys, lesson03_exercises.check_3_1, block_and_padding_right, bp_the_row, "power of two")


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (bp_doubles_once_too_often, "already a power of two"),
        (bp_the_row, "must be a power of two"),
        (bp_power_below, "must hold the whole row"),
        (bp_padding_is_n, "past the row's end"),
        (bp_swapped, "in that order"),
        (bp_fraction_wasted, "a whole number of lanes"),
        (bp_not_a_pair, "return a pair"),
        (bp_float_block, "a block size is an integer power of two, as tl.arange needs"),
        (bp_math_pow, "a block size is an integer power of two, as tl.arange needs"),
    ],
    ids=lambda v: getattr(v, "__name__", str(v))[:30],
)
def test_checker_3_1_wrong_answers(wrong, hint, capsys):
    line = verdict(capsys, lesson03_exercises.check_3_1, wrong)
    assert status(line).startswith("wrong") and hint in line, line


# --------------------------------------------------------------------------------------------
# Exercise 3.4: predict a bandwidth-bound time
# --------------------------------------------------------------------------------------------


def predicted_ms_right(M, N, es, gbps):
    return 2 * M * N * es / (gbps * 1e9) * 1e3


def test_checker_3_4_contract(capsys):
    assert_checker_contract(
        capsys,
        lesson03_exercises.check_3_4,
        predicted_ms_right,
        lambda M, N, es, gb: M * N * es / (gb * 1e9) * 1e3,
        "count the write",
    )


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda M, N, es, gb: M * N * es / (gb * 1e9) * 1e3, "count the write"),
        (lambda M, N, es, gb: 4 * M * N * es / (gb * 1e9) * 1e3, "not twice that"),
        (lambda M, N, es, gb: 2 * M * N * 4 / (gb * 1e9) * 1e3, "fixed 4 bytes"),
        (lambda M, N, es, gb: 2 * M * N * 2 / (gb * 1e9) * 1e3, "fixed 2 bytes"),
        (lambda M, N, es, gb: 2 * M * N / (gb * 1e9) * 1e3, "multiply by element_size"),
        (lambda M, N, es, gb: 2 * M * N * es / (gb * 1e9), "not seconds"),
        (lambda M, N, es, gb: 2 * M * N * es / (gb * 1e9) * 1e6, "not microseconds"),
        (lambda M, N, es, gb: 2 * M * N * es / gb * 1e3, "10**9 bytes per second"),
        (lambda M, N, es, gb: 2 * M * N * es / (gb * 2**30) * 1e3, "not 2**30"),
        (lambda M, N, es, gb: "fast", "return a number"),
    ],
    ids=["no-write", "twice", "es-4", "es-2", "elements", "seconds", "microseconds", "bytes-per-s", "gib", "str"],
)
def test_checker_3_4_wrong_answers(wrong, hint, capsys):
    line = verdict(capsys, lesson03_exercises.check_3_4, wrong)
    assert status(line).startswith("wrong") and hint in line, line


def test_checker_3_4_names_only_the_mistake_made(capsys):
    """A hard-coded element size is not a forgotten write (the two give the same number on 2-byte data)."""
    line = verdict(capsys, lesson03_exercises.check_3_4, lambda M, N, es, gb: 2 * M * N * 4 / (gb * 1e9) * 1e3)
    assert "count the write" not in line and "element_size" in line, line


def test_checker_3_4_never_prints_the_same_expected_and_got(capsys):
    line = verdict(
        capsys, lesson03_exercises.check_3_4, lambda M, N, es, gb: predicted_ms_right(M, N, es, gb) * (1 + 2e-6)
    )
    got, expected = line.split("you gave ")[1].split(" ms, expected ")
    assert got != expected.split(" ms")[0], line


# --------------------------------------------------------------------------------------------
# Exercise 3.2: a column softmax through strides (the learner launches the fused kernel)
# --------------------------------------------------------------------------------------------


def dim0_right(x, out, kernel):
    M, N = x.shape
    kernel[(N,)](
        out, x, x.stride(1), x.stride(0), out.stride(0), M, BLOCK_SIZE=triton.next_power_of_2(M), ACC=tl.float32
    )


def _rows_of(xt, out, kernel, **options):
    """The fused kernel over the rows of xt, one program each, into out."""
    block = triton.next_power_of_2(xt.shape[1])
    kernel[(xt.shape[0],)](
        out, xt, xt.stride(0), xt.stride(1), out.stride(0), xt.shape[1], BLOCK_SIZE=block, ACC=tl.float32, **options
    )


def dim0_right_transposed_view(x, out, kernel):
    _rows_of(x.t(), out, kernel, num_warps=1)  # a view: the same memory, so not a copy


def dim0_strides_not_swapped(x, out, kernel):
    M, N = x.shape
    kernel[(N,)](
        out, x, x.stride(0), x.stride(1), out.stride(0), M, BLOCK_SIZE=triton.next_power_of_2(M), ACC=tl.float32
    )


def dim0_counts_swapped(x, out, kernel):
    M, N = x.shape
    kernel[(M,)](
        out, x, x.stride(1), x.stride(0), out.stride(0), N, BLOCK_SIZE=triton.next_power_of_2(N), ACC=tl.float32
    )


def dim0_copy(x, out, kernel):
    _rows_of(x.t().contiguous(), out, kernel)


def dim0_clone(x, out, kernel):
    dim0_right(x.clone(), out, kernel)


def dim0_wrong_out_stride(x, out, kernel):
    M, N = x.shape
    kernel[(N,)](out, x, x.stride(1), x.stride(0), 1, M, BLOCK_SIZE=triton.next_power_of_2(M), ACC=tl.float32)


def dim0_out_stride_of_x(x, out, kernel):
    M, N = x.shape
    kernel[(N,)](out, x, x.stride(1), x.stride(0), N, M, BLOCK_SIZE=triton.next_power_of_2(M), ACC=tl.float32)


def dim0_out_stride_is_the_row_length(x, out, kernel):
    M, N = x.shape
    kernel[(N,)](out, x, x.stride(1), x.stride(0), M, M, BLOCK_SIZE=triton.next_power_of_2(M), ACC=tl.float32)


def dim0_hardcoded_strides(x, out, kernel):
    M, N = x.shape
    kernel[(N,)](out, x, 1, N, out.stride(0), M, BLOCK_SIZE=triton.next_power_of_2(M), ACC=tl.float32)


def dim0_block_too_small(x, out, kernel):
    M, N = x.shape
    kernel[(N,)](
        out,
        x,
        x.stride(1),
        x.stride(0),
        out.stride(0),
        M,
        BLOCK_SIZE=max(1, triton.next_power_of_2(M) // 2),
        ACC=tl.float32,
    )


def dim0_no_launch(x, out, kernel):
    out.copy_(torch.softmax(x, dim=0).t())


def dim0_library(x, out, kernel):
    out.copy_(helpers.softmax_fused(x.t()))


def dim0_twice(x, out, kernel):
    dim0_right(x, out, kernel)
    dim0_right(x, out, kernel)


def test_checker_3_2_right_answers(capsys):
    assert status(verdict(capsys, lesson03_exercises.check_3_2, dim0_right)).startswith("correct")
    assert status(verdict(capsys, lesson03_exercises.check_3_2, dim0_right_transposed_view)).startswith("correct")


def test_checker_3_2_stops_a_function_that_never_returns(capsys, monkeypatch):
    from helpers import exercises

    monkeypatch.setattr(exercises, "FUNCTION_TIMEOUT", 1.0)

    def loops_forever(x, out, kernel):
        while True:
            pass

    line = verdict(capsys, lesson03_exercises.check_3_2, loops_forever)
    assert status(line).startswith("wrong") and "did not finish" in line, line


def test_checker_3_2_not_yet(capsys):
    assert status(verdict(capsys, lesson03_exercises.check_3_2, _untouched)).startswith("not yet")
    assert status(verdict(capsys, lesson03_exercises.check_3_2, None)).startswith("not yet")


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (dim0_strides_not_swapped, "x.stride(1)"),
        (dim0_counts_swapped, "one program per column"),
        (dim0_copy, "copy of x"),
        (dim0_clone, "copy of x"),
        (dim0_wrong_out_stride, "out_row_stride"),
        (dim0_out_stride_of_x, "out_row_stride"),
        (dim0_out_stride_is_the_row_length, "out_row_stride"),
        (dim0_hardcoded_strides, "use x.stride()"),
        (dim0_block_too_small, "BLOCK_SIZE"),
        (dim0_no_launch, "never launched"),
        (dim0_library, "never launched"),
        (dim0_twice, "launch the kernel once"),
        (_raises, "ZeroDivisionError"),
        (lambda x, out, kernel: None, "never launched"),
        (42, "expected a function"),
    ],
    ids=lambda v: getattr(v, "__name__", str(v))[:30],
)
def test_checker_3_2_wrong_answers(wrong, hint, capsys):
    line = verdict(capsys, lesson03_exercises.check_3_2, wrong)
    assert status(line).startswith("wrong") and hint in line, line


# --------------------------------------------------------------------------------------------
# Exercise 3.3: a fused scaled softmax kernel (defined here, after `helpers` chose the mode)
# --------------------------------------------------------------------------------------------


@triton.jit
def scaled_right(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, scale, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    z = tl.where(mask, x * scale, -float("inf"))
    num = tl.exp(z - tl.max(z, axis=0))
    tl.store(out_ptr + row * out_row_stride + cols, num / tl.sum(num, axis=0), mask=mask)


@triton.jit
def scaled_untouched(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, scale, BLOCK_SIZE: tl.constexpr):
    raise NotImplementedError  # your code here


LOAD = "x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=0.0).to(tl.float32)"
WHERE = 'z = tl.where(mask, x * scale, -float("inf"))'
NUM = "num = tl.exp(z - tl.max(z, axis=0))"
STORE = "tl.store(out_ptr + row * out_row_stride + cols, num / tl.sum(num, axis=0), mask=mask)"
LOAD_NEG_INF = 'x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf"))'
# 3.3's plausible answers, each written as the lines where it differs from scaled_right (tests/checking.py: variant)
VARIANTS_3_3 = {
    "scaled_stores_with_input_stride": {STORE: STORE.replace("out_row_stride", "in_row_stride")},
    "scaled_loads_with_output_stride": {LOAD: LOAD.replace("in_row_stride", "out_row_stride")},
    "scaled_row_stride_is_n_cols": {
        LOAD: LOAD.replace("in_row_stride", "n_cols"),
        STORE: STORE.replace("out_row_stride", "n_cols"),
    },
    "scaled_stores_with_n_cols": {STORE: STORE.replace("out_row_stride", "n_cols")},
    "scaled_no_load_mask": {
        LOAD: "z = tl.load(in_ptr + row * in_row_stride + cols).to(tl.float32) * scale  # reads past the row's end",
        WHERE: None,
    },
    # right numbers: tl.where drops what the unmasked load read past the row (and past x on the last row)
    "scaled_unmasked_load_then_where": {LOAD: "x = tl.load(in_ptr + row * in_row_stride + cols).to(tl.float32)"},
    # no mask on the load, but every offset is clamped into the row: a right answer
    "scaled_right_clamped_offsets": {
        LOAD: "x = tl.load(in_ptr + row * in_row_stride + tl.minimum(cols, n_cols - 1)).to(tl.float32)"
    },
    "scaled_right_positional_mask": {LOAD: LOAD.replace("mask=mask", "mask")},
    "scaled_pads_before_scaling": {
        LOAD: LOAD_NEG_INF + " * scale",
        WHERE: None,
        NUM: "num = tl.exp(x - tl.max(x, axis=0))",
    },
    # padding handled right, but the shift is the max of x, taken before scaling
    "scaled_max_before_scaling": {
        LOAD: LOAD_NEG_INF + ".to(tl.float32)",
        WHERE: 'z = tl.where(mask, (x - tl.max(x, axis=0)) * scale, -float("inf"))',
        NUM: "num = tl.exp(z)",
    },
    "scaled_forgets_scale": {LOAD: LOAD_NEG_INF, WHERE: None, NUM: "num = tl.exp(x - tl.max(x, axis=0))"},
    "scaled_no_max_shift": {WHERE: None, NUM: "num = tl.where(mask, tl.exp(x * scale), 0.0)"},
    "scaled_shifts_by_the_mean": {
        WHERE: "z = tl.where(mask, x * scale, 0.0)",
        NUM: "num = tl.where(mask, tl.exp(z - tl.sum(z, axis=0) / n_cols), 0.0)",
    },
    "scaled_no_store_mask": {
        STORE: "tl.store(out_ptr + row * out_row_stride + cols, num / tl.sum(num, axis=0))  # no mask: writes the padding"
    },
    "scaled_writes_input": {
        STORE: "y = num / tl.sum(num, axis=0)\n"
        "tl.store(in_ptr + row * in_row_stride + cols, y, mask=mask)\n"
        "tl.store(out_ptr + row * out_row_stride + cols, y, mask=mask)"
    },
}
V = {name: variant(scaled_right, name, changes) for name, changes in VARIANTS_3_3.items()}


@triton.jit
def _load_row(ptr, cols):
    return tl.load(ptr + cols).to(tl.float32)  # unmasked, in a helper the kernel calls


@triton.jit
def scaled_unmasked_load_in_a_helper(
    out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, scale, BLOCK_SIZE: tl.constexpr
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    z = tl.where(mask, _load_row(in_ptr + row * in_row_stride, cols) * scale, -float("inf"))
    num = tl.exp(z - tl.max(z, axis=0))
    tl.store(out_ptr + row * out_row_stride + cols, num / tl.sum(num, axis=0), mask=mask)


@triton.jit
def scaled_far_store(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, scale, BLOCK_SIZE: tl.constexpr):
    # a wild store, millions of elements past the output: would corrupt the process without the guard
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + (row + 1) * 50_000_000 + cols, tl.zeros((BLOCK_SIZE,), tl.float32))


@triton.jit
def scaled_bad_index(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, scale, BLOCK_SIZE: tl.constexpr):
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(in_ptr + cols + undefined_name)  # noqa: F821
    tl.store(out_ptr + cols, x)


def test_checker_3_3_right_answer(capsys):
    assert status(verdict(capsys, lesson03_exercises.check_3_3, scaled_right)).startswith("correct")


@pytest.mark.parametrize(
    "right", [V["scaled_right_clamped_offsets"], V["scaled_right_positional_mask"]], ids=lambda k: k.fn.__name__
)
def test_checker_3_3_takes_a_load_that_stays_in_the_row(right, capsys):
    """No `mask=` keyword is needed: a mask passed by position, or offsets clamped into the row, read nothing outside."""
    line = verdict(capsys, lesson03_exercises.check_3_3, right)
    assert status(line).startswith("correct"), line


@pytest.mark.parametrize(
    "wrong", [V["scaled_unmasked_load_then_where"], scaled_unmasked_load_in_a_helper], ids=lambda k: k.fn.__name__
)
def test_checker_3_3_rejects_an_unmasked_load_whose_values_tl_where_drops(wrong, capsys):
    """The numbers are right (tl.where drops what the load read past each row), but the load reads past every row
    and past x on the last row: the checker names the unmasked load, on the CPU and on a GPU alike (it reads the
    kernel's source, since those reads leave no trace in the output)."""
    line = verdict(capsys, lesson03_exercises.check_3_3, wrong)
    assert status(line).startswith("wrong") and "has no mask" in line and "unmasked load" in line, line
    assert "tl.load(" in line and "mask=cols < n_cols" in line, line


def test_checker_3_3_untouched_template_is_not_yet(capsys):
    assert status(verdict(capsys, lesson03_exercises.check_3_3, scaled_untouched)).startswith("not yet")
    assert status(verdict(capsys, lesson03_exercises.check_3_3, None)).startswith("not yet")


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (V["scaled_stores_with_input_stride"], "it stores with in_row_stride"),
        (V["scaled_loads_with_output_stride"], "it loads with out_row_stride"),
        (V["scaled_row_stride_is_n_cols"], "row to row of x by n_cols"),
        (V["scaled_stores_with_n_cols"], "row to row of out by n_cols"),
        (V["scaled_no_load_mask"], "Does tl.load have mask="),
        (V["scaled_pads_before_scaling"], "-inf * scale is +inf"),
        (V["scaled_max_before_scaling"], "the max of x * scale"),
        (V["scaled_forgets_scale"], "softmax(x * scale)"),
        (V["scaled_no_max_shift"], "subtract the row maximum"),
        (V["scaled_shifts_by_the_mean"], "subtract the row maximum"),
        (V["scaled_no_store_mask"], "does tl.store have mask="),
        (scaled_far_store, "wrong"),
        (V["scaled_writes_input"], "changed its input"),
        (scaled_bad_index, "raised"),
        (lambda *a: None, "@triton.jit"),
    ],
    ids=lambda v: getattr(v, "__name__", None) or getattr(getattr(v, "fn", None), "__name__", "x"),
)
def test_checker_3_3_wrong_answers(wrong, hint, capsys):
    line = verdict(capsys, lesson03_exercises.check_3_3, wrong)
    assert status(line).startswith("wrong") and hint in line, line


def test_the_row_stride_mistake_is_named_for_both_tensors(capsys):
    line = verdict(capsys, lesson03_exercises.check_3_3, V["scaled_row_stride_is_n_cols"])
    assert "row to row of x by n_cols" in line and "row to row of out by n_cols" in line, line


def test_isolated_max_rows_break_every_shift_but_the_max():
    """The checker's rows: exp overflows in float32 for a shift by nothing, the mean, the min or any
    element other than the maximum; only the maximum gives finite numerators."""
    z = lesson03_exercises.isolated_max_rows(4, 20, torch.Generator().manual_seed(0))
    for row in z:
        top = row.max()
        assert torch.isfinite(torch.exp(row - top)).all()
        for shift in [torch.tensor(0.0), row.mean(), row.min(), *[v for v in row if v != top]]:
            assert torch.isinf(torch.exp(row - shift)).any(), float(shift)


def test_the_max_before_scaling_is_right_without_the_isolated_rows():
    """The isolated rows are what catches it: on a negative scale with a narrow spread, taking the max
    before scaling gives the right answer (softmax ignores a shift), so only a wide spread shows it."""
    x = torch.randn(4, 13, generator=torch.Generator().manual_seed(0))
    xd = x.to(DEVICE)
    got = torch.empty_like(xd)
    V["scaled_max_before_scaling"][(4,)](got, xd, 13, 13, 13, -1.0, BLOCK_SIZE=16)
    torch.testing.assert_close(got.cpu().double(), torch.softmax(x.double() * -1.0, -1), atol=1e-6, rtol=1e-5)


def test_an_out_of_bounds_store_leaves_the_process_alive(capsys):
    """The far store is reported as wrong; the checker and this test (the same process) go on to
    run a correct kernel."""
    line = verdict(capsys, lesson03_exercises.check_3_3, scaled_far_store)
    assert status(line).startswith("wrong")
    assert status(verdict(capsys, lesson03_exercises.check_3_3, scaled_right)).startswith("correct")
    assert math.isfinite(float(helpers.softmax_fused(torch.randn(2, 5, device=DEVICE)).sum()))
