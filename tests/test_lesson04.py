"""Lesson 04's module and kernels: the online trace against the kernel, the looped kernels on the
hard rows, the rows-grow measurement's CPU refusal, the figures, and every exercise checker against
the right answer, the untouched template and one plausible wrong answer per test (an out-of-bounds
store among them), each expected to get the hint that names its mistake.

Every checker must print exactly one line and never raise, whatever the learner wrote.
"""

from __future__ import annotations

import math

import matplotlib
import pytest
import torch
import triton
import triton.language as tl
from checking import assert_checker_contract, assert_figure, status, verdict
from claims import code_cell_with, notebook, prose

import helpers
from helpers import data, lesson04, lesson04_exercises
from helpers.mode import DEVICE

NEG_INF = float("-inf")

# --------------------------------------------------------------------------------------------
# The online trace, and the looped kernels
# --------------------------------------------------------------------------------------------


def _example():
    return torch.tensor(lesson04.TRACE_ROW), lesson04.TRACE_BLOCK


def test_worked_trace_has_block_maxima_3_5_2():
    x, b = _example()
    t = lesson04.online_trace(x, b)
    assert t["block_max"].tolist() == [3.0, 5.0, 2.0]
    assert t["m_new"].tolist() == [3.0, 5.0, 5.0]
    assert t["d_old"].iloc[0] == 0.0
    assert t["alpha"].iloc[1] == pytest.approx(math.exp(-2))
    assert t["alpha"].iloc[2] == 1.0
    assert t["d_new"].iloc[-1] == pytest.approx(float(torch.exp(x.double() - 5).sum()), rel=1e-12)


@pytest.mark.parametrize("block", [1, 2, 4, 8, 64])
def test_trace_equals_kernel_on_random_rows(block):
    g = torch.Generator().manual_seed(block)
    x = torch.randn(50, generator=g) * 4
    t = lesson04.online_trace(x, block)
    m, d = t["m_new"].iloc[-1], t["d_new"].iloc[-1]
    assert m == float(x.max())
    kernel = helpers.softmax_online(x[None].to(DEVICE), block_size=block)[0].cpu().double()
    torch.testing.assert_close(torch.exp(x.double() - m) / d, kernel, atol=1e-6, rtol=1e-5)


def test_trace_without_rescale_is_wrong():
    x, b = _example()
    good = lesson04.online_trace(x, b)["d_new"].iloc[-1]
    bad = lesson04.online_trace(x, b, rescale=False)["d_new"].iloc[-1]
    assert bad > good * 1.5


def test_trace_handles_leading_neg_inf_blocks():
    x = torch.tensor([NEG_INF] * 4 + [1.0, 2.0])
    t = lesson04.online_trace(x, 2)
    assert t["m_new"].iloc[0] == NEG_INF and t["d_new"].iloc[0] == 0.0
    assert not math.isnan(t["d_new"].iloc[-1])


@pytest.mark.parametrize("bad", [torch.zeros(2, 3), torch.zeros(0)])
def test_trace_rejects_bad_rows(bad):
    with pytest.raises(ValueError):
        lesson04.online_trace(bad, 2)


def test_trace_rejects_bad_block_sizes():
    for b in (0, 1.5, True):
        with pytest.raises(ValueError):
            lesson04.online_trace(torch.ones(3), b)


def _hard_rows(n: int = 40) -> dict:
    g = torch.Generator().manual_seed(0)
    rows = {"random": torch.randn(n, generator=g) * 2}
    x = torch.randn(n, generator=g)
    x[n - 3] = 200.0
    rows["late max"] = x
    x = torch.randn(n, generator=g)
    x[: n // 2 + 5] = NEG_INF
    rows["leading -inf"] = x
    x = torch.randn(n, generator=g)
    x[0] = 50.0
    rows["first slot"] = x
    rows["all -inf"] = torch.full((n,), NEG_INF)
    return rows


@pytest.mark.parametrize("fn", [helpers.softmax_three_pass, helpers.softmax_online])
def test_looped_kernels_get_the_hard_rows_right(fn):
    """The rows of the lesson's 'Rows that break careless versions' section: NaN where the reference
    has NaN (a row of only -inf), within 1e-6 elsewhere."""
    for name, x in _hard_rows().items():
        y = fn(x.to(DEVICE)[None, :], block_size=16)
        rep = helpers.error_report(y, x[None, :])
        assert rep.ok(atol=1e-6), (name, rep)
    assert torch.isnan(helpers.softmax_online(torch.full((1, 40), NEG_INF, device=DEVICE), block_size=16)).all()


def test_traffic_of_the_looped_kernels():
    from helpers.traffic import kernel_traffic

    M, N = 8, 16
    total = {k: sum(kernel_traffic(k, M, N).values()) / (M * N) for k in ("three_pass", "online", "fused")}
    assert total == {"three_pass": 4, "online": 3, "fused": 2}


def test_the_lessons_plain_launch_agrees_with_the_library():
    """The lesson launches its two kernels plainly (its `softmax_looped` cell); the library wraps the same kernels
    (the deep dive's `looped_plan` and `RowWise`). On the same inputs and blocks they write the same values,
    strided views and -inf prefixes included."""
    from helpers import kernels as K

    ns = {"torch": torch, "tl": tl}
    exec(code_cell_with("04", "def softmax_looped"), ns)
    g = torch.Generator().manual_seed(5)
    wide = (torch.randn(5, 900, generator=g) * 4).to(DEVICE)
    wide[1, :100] = NEG_INF  # a -inf prefix
    wide[3] = NEG_INF  # a row of only -inf: NaN from both
    for x in (wide[:, :300], wide[:, ::3]):
        for kernel, library in (
            (K.softmax_three_pass_kernel, helpers.softmax_three_pass),
            (K.softmax_online_kernel, helpers.softmax_online),
        ):
            for block in (16, 128, 512):
                torch.testing.assert_close(
                    ns["softmax_looped"](kernel, x, block), library(x, block_size=block), rtol=0, atol=0, equal_nan=True
                )


# --------------------------------------------------------------------------------------------
# The notebooks' code: what the lesson defines for learners to read, and what it may use
# --------------------------------------------------------------------------------------------


def test_the_notebook_trace_row_is_the_figure_row():
    cell = code_cell_with("04", "lesson04.online_trace(x, block_size)")
    assert str(lesson04.TRACE_ROW) in cell and f"block_size = {lesson04.TRACE_BLOCK}" in cell


def test_the_lesson_uses_no_later_lesson():
    """The core reads only data of lessons 01-04 (no lesson 05 recording, no Little's law) and launches its kernels
    plainly, not through the library's wrapper (which the deep dive exports)."""
    code = "\n".join("".join(c["source"]) for c in notebook("04")["cells"] if c["cell_type"] == "code")
    assert "persistent_programs" not in code and "Little" not in prose("04")
    for wrapper in ("RowWise", "Plan(", "looped_plan", "helpers.softmax_online", "helpers.softmax_three_pass"):
        assert wrapper not in code, wrapper
    assert "kernel[(M,)](y, x," in code_cell_with("04", "def softmax_looped")
    assert "RowWise(looped_plan" in code_cell_with("04d", "def looped_plan")
    assert "Little's law" in prose("04d")


def test_the_lesson_counts_the_passes_with_the_interpreter():
    assert 'moved.times_read("x")' in code_cell_with("04", "times x is read")


def test_idle_sms_are_not_given_as_the_reason_for_the_longest_rows():
    """The deep dive shows that too few loads in flight, not idle SMs, slow the longest rows: no notebook says the
    opposite."""
    for nb in ("04", "04d"):
        assert "leaves SMs with nothing to do" not in prose(nb)


def test_the_notebooks_online_attention():
    cell = code_cell_with("04", "def online_attention")
    ns = {"math": math, "torch": torch}
    exec(cell, ns)
    online_attention = ns["online_attention"]
    g = torch.Generator().manual_seed(7)
    s = torch.randn(13, generator=g, dtype=torch.float64) * 3
    V = torch.randn(13, 4, generator=g, dtype=torch.float64)
    for b in (1, 3, 13):
        torch.testing.assert_close(online_attention(s, V, b), torch.softmax(s, 0) @ V)


def test_no_solution_code_above_the_4_1_checker():
    cells = notebook("04")["cells"]
    checker = next(i for i, c in enumerate(cells) if "lesson04_exercises.check_4_1(" in "".join(c["source"]))
    above = "\n".join("".join(c["source"]) for c in cells[:checker] if c["cell_type"] == "code")
    for answer in ("tl.exp(m - m_new)", "d * alpha", "m_new = tl.maximum"):
        assert answer not in above, answer


# --------------------------------------------------------------------------------------------
# Rows grow: the measurement, the recording and the figures
# --------------------------------------------------------------------------------------------


@pytest.mark.skipif(helpers.ON_GPU, reason="checks the CPU refusal")
def test_rows_grow_live_refuses_without_a_gpu():
    with pytest.raises(RuntimeError, match="GPU"):
        lesson04.rows_grow_rows()


def test_rows_grow_recording_has_what_the_lesson_reads():
    grow = data.load("rows_grow")
    assert "H100" in grow.attrs["provenance"]["gpu"]
    assert {"dtype", "M", "N", "provider", "graph_frac", "frac_of_copy", "graph_spread", "status"} <= set(grow)
    assert set(lesson04.ROWS_GROW_PROVIDERS) == set(grow["provider"])
    assert (grow["M"] * grow["N"]).nunique() == 1  # a fixed total size


@pytest.mark.parametrize("name", sorted(lesson04.FIGURES))
def test_figures_are_figures(name):
    assert_figure(lesson04.FIGURES[name])


def test_figures_draw_given_data():
    assert lesson04.FIGURES and all(k.startswith("04_") for k in lesson04.FIGURES)
    grow = data.load("rows_grow")
    fig = lesson04.plot_rows_grow(grow[grow["N"] <= 8192])
    assert len(fig.axes[0].lines) >= 4
    matplotlib.pyplot.close(fig)
    matplotlib.pyplot.close(lesson04.plot_trace(lesson04.online_trace(torch.tensor([NEG_INF, 1.0, 2.0]), 1)))


# --------------------------------------------------------------------------------------------
# Exercise 4.1: the online pass in Triton. A learner writes the row pointers and pass 1; pass 2
# is given. Each variant below is the right answer with one plausible mistake.
# --------------------------------------------------------------------------------------------

# The right update, line by line; each mistake below is written as the lines where it differs from it.
MAX = "m_new = tl.maximum(m, tl.max(x, axis=0))"
ALPHA = 'alpha = tl.where(m_new == -float("inf"), 1.0, tl.exp(m - m_new))'
SUM = 'd = d * alpha + tl.sum(tl.where(x == -float("inf"), 0.0, tl.exp(x - m_new)), axis=0)'
STEP = "m = m_new"
RIGHT = "\n".join([MAX, ALPHA, SUM, STEP])
NO_RESCALE = "\n".join([MAX, SUM.replace("d * alpha", "d"), STEP])
M_UPDATED_FIRST = "\n".join([MAX, STEP, ALPHA, SUM])
RESCALES_THE_BLOCK = "\n".join([MAX, ALPHA, SUM.replace("d * alpha + ", "d + alpha * "), STEP])
WRONG_FACTOR = "\n".join([MAX, ALPHA.replace("tl.exp(m - m_new)", "tl.exp(m_new - m)"), SUM, STEP])
OLD_MAX_SHIFT = "\n".join(
    [MAX, ALPHA, SUM.replace("tl.exp(x - m_new)", 'tl.exp(x - tl.where(m == -float("inf"), m_new, m))'), STEP]
)
BLOCK_MAX_SHIFT = "\n".join(
    [
        "b = tl.max(x, axis=0)",
        "m_new = tl.maximum(m, b)",
        ALPHA,
        SUM.replace("tl.exp(x - m_new)", "tl.exp(x - b)"),
        STEP,
    ]
)
NO_SHIFT = "\n".join(["m = tl.maximum(m, tl.max(x, axis=0))", "d = d + tl.sum(tl.exp(x), axis=0)"])
NO_NEG_INF_GUARD = "\n".join([MAX, "d = d * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)", STEP])


def _kernel_source(
    update=RIGHT,
    load_mask=True,
    other='-float("inf")',
    in_rs="in_row_stride",
    out_rs="out_row_stride",
    col="in_col_stride",
    store_mask=True,
    all_inf_zero=False,
    untouched=False,
) -> str:
    mask = ", mask=offs < n_cols" if load_mask else ""
    fill = f", other={other}" if load_mask else ""
    body = "\n".join("        " + line for line in update.strip().splitlines())
    pass1 = (
        "    raise NotImplementedError\n"
        if untouched
        else f"""    row_start = in_ptr + row * {in_rs}
    out_start = out_ptr + row * {out_rs}
    m = tl.full((), -float("inf"), tl.float32)
    d = tl.zeros((), tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + cols
        x = tl.load(row_start + offs * {col}{mask}{fill}).to(tl.float32)
{body}
"""
    )
    final = "tl.where(d == 0.0, 0.0, tl.exp(x - m) / d)" if all_inf_zero else "tl.exp(x - m) / d"
    store = ", mask=mask" if store_mask else ""
    return f"""
@triton.jit
def kernel(out_ptr, in_ptr, in_row_stride, in_col_stride, out_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
{pass1}    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + cols
        mask = offs < n_cols
        x = tl.load(row_start + offs * in_col_stride, mask=mask, other=-float("inf")).to(tl.float32)
        tl.store(out_start + offs, {final}{store})
"""


def _variant(**kw):
    """A learner's kernel (the template filled in with ``kw``'s mistakes), built under the current mode."""
    import linecache
    import sys

    src = _kernel_source(**kw)
    name = f"<learner kernel {abs(hash(src))}>"
    linecache.cache[name] = (len(src), None, src.splitlines(True), name)  # so Triton can read the source
    ns = {"tl": tl, "triton": triton}
    exec(compile(src, name, "exec"), ns)
    kernel = ns["kernel"]
    sys.modules[__name__].__dict__.setdefault("_kernels", []).append(kernel)
    return kernel


def test_checker_4_1_right_untouched_and_none(capsys):
    line = verdict(capsys, lesson04_exercises.check_4_1, _variant())
    assert status(line).startswith("correct"), line
    assert status(verdict(capsys, lesson04_exercises.check_4_1, _variant(untouched=True))).startswith("not yet")
    assert status(verdict(capsys, lesson04_exercises.check_4_1, None)).startswith("not yet")


def test_checker_4_1_takes_the_notebook_template_as_untouched(capsys):
    """The notebook's own template cell, run as the learner finds it: "not yet"."""
    cell = next(
        "".join(c["source"])
        for c in notebook("04")["cells"]
        if c["cell_type"] == "code" and "def online_softmax_kernel" in "".join(c["source"])
    )
    assert "raise NotImplementedError" in cell and "tl.exp(m - m_new)" not in cell
    kernel = _notebook_kernel("<notebook template 4.1>", cell)
    assert status(verdict(capsys, lesson04_exercises.check_4_1, kernel)).startswith("not yet")


def _notebook_kernel(name: str, cell: str):
    import linecache

    linecache.cache[name] = (len(cell), None, cell.splitlines(True), name)
    ns = {"tl": tl, "triton": triton, "__name__": __name__}
    exec(compile(cell, name, "exec"), ns)
    return ns["online_softmax_kernel"]


def test_checker_4_1_takes_the_notebooks_solution_as_correct(capsys):
    """The solution cell's code, put in place of the template's `raise NotImplementedError`: "correct"."""
    import re

    cells = notebook("04")["cells"]
    i = next(
        i
        for i, c in enumerate(cells)
        if c["cell_type"] == "code" and "def online_softmax_kernel" in "".join(c["source"])
    )
    template = "".join(cells[i]["source"])
    solution = next("".join(c["source"]) for c in cells[i:] if "solution" in c.get("metadata", {}).get("tags", []))
    code = re.search(r"```python\n(.*?)```", solution, re.S).group(1)
    filled = re.sub(r"    # Your code:.*\n    raise NotImplementedError\n", lambda _: code, template)
    assert filled != template and "raise NotImplementedError" not in filled
    line = verdict(capsys, lesson04_exercises.check_4_1, _notebook_kernel("<notebook solution 4.1>", filled))
    assert status(line).startswith("correct"), line


WRONG_4_1 = {
    "no rescale": (dict(update=NO_RESCALE), lesson04_exercises.H_RESCALE),
    "factor computed after m is updated": (dict(update=M_UPDATED_FIRST), "computed before m is updated"),
    "rescales the block instead of the old sum": (dict(update=RESCALES_THE_BLOCK), "multiply the old sum d"),
    "factor exp(m_new - m)": (dict(update=WRONG_FACTOR), "not by exp(m_new - m)"),
    "block shifted by the old max": (dict(update=OLD_MAX_SHIFT), lesson04_exercises.H_OVERFLOW),
    "block shifted by its own max": (dict(update=BLOCK_MAX_SHIFT), lesson04_exercises.H_BLOCK_MAX),
    "no shift at all": (dict(update=NO_SHIFT), lesson04_exercises.H_SHIFT),
    "no -inf guard": (dict(update=NO_NEG_INF_GUARD), "exp(-inf - -inf) = NaN"),
    "all -inf rows give 0": (dict(all_inf_zero=True), "torch.softmax gives NaN"),
    "no mask on the tail block": (dict(load_mask=False), lesson04_exercises.H_MASK),
    "padding lanes load 0": (dict(other="0.0"), lesson04_exercises.H_OTHER),
    "no mask on the store (out of bounds)": (dict(store_mask=False), lesson04_exercises.H_STORE),
    "x read with out's row stride": (dict(in_rs="out_row_stride"), lesson04_exercises.H_STRIDES),
    "out written with x's row stride": (dict(out_rs="in_row_stride"), lesson04_exercises.H_STRIDES),
    "row stride hard-coded as n_cols": (dict(in_rs="n_cols", out_rs="n_cols"), lesson04_exercises.H_STRIDES),
    "column stride ignored": (dict(col="1"), lesson04_exercises.H_COL),
}


@pytest.mark.parametrize("kind", sorted(WRONG_4_1))
def test_checker_4_1_wrong_answers(kind, capsys):
    kw, hint = WRONG_4_1[kind]
    line = verdict(capsys, lesson04_exercises.check_4_1, _variant(**kw))
    assert status(line).startswith("wrong") and hint in line, line


def test_checker_4_1_not_a_kernel(capsys):
    line = verdict(capsys, lesson04_exercises.check_4_1, lambda *a: None)
    assert status(line).startswith("wrong") and "@triton.jit" in line


def test_online_kernel_cases_are_hostile():
    cases = lesson04_exercises.online_kernel_cases()
    for c in cases:
        M, N = c["x"].shape
        col = c.get("col", 1)
        assert c["in_rs"] > N * col and c["out_rs"] > N and c["in_rs"] != c["out_rs"], c["name"]
        if N % c["block"]:  # a read past the row's end lands in the NaN padding, never in the next row
            assert c["in_rs"] >= -(-N // c["block"]) * c["block"] * col, c["name"]
            assert c["out_rs"] >= -(-N // c["block"]) * c["block"], c["name"]
    names = " ".join(c["name"] for c in cases)
    for text in ("late maximum", "-inf", "1e4", "only -inf", "column stride", "+1000 and -1000", "near -100"):
        assert text in names, text
    x = next(c for c in cases if "+1000" in c["name"])["x"]
    assert torch.isinf(torch.exp(x[0])).all() and (torch.exp(x[1]) == 0).all()  # only a shift by the max works
    all_inf = next(c for c in cases if "only -inf" in c["name"])
    assert torch.isnan(torch.softmax(all_inf["x"].double(), -1)).any()


# --------------------------------------------------------------------------------------------
# Exercises 4.2 and 4.3: plain Python answers
# --------------------------------------------------------------------------------------------


def _empty_safe(merge):
    """``merge`` with the case every right merge needs: two empty parts (m = -inf on both sides) merge to an
    empty part, (-inf, 0), rather than to NaN from exp(-inf - -inf)."""

    def safe(m1, d1, m2, d2):
        if max(m1, m2) == -math.inf:
            return -math.inf, 0.0
        return merge(m1, d1, m2, d2)

    return safe


def merge_no_empty(m1, d1, m2, d2):
    m = max(m1, m2)
    return m, d1 * math.exp(m1 - m) + d2 * math.exp(m2 - m)


merge_right = _empty_safe(merge_no_empty)


@_empty_safe
def merge_right_float32(m1, d1, m2, d2):
    """The right formula, computed in torch's default dtype (float32): off from float64 in the 8th digit."""
    t = lambda v: torch.tensor(v, dtype=torch.float32)  # noqa: E731
    m = max(m1, m2)
    return t(m), t(d1) * torch.exp(t(m1) - t(m)) + t(d2) * torch.exp(t(m2) - t(m))


@_empty_safe
def merge_right_numpy_float32(m1, d1, m2, d2):
    import numpy as np

    f, m = np.float32, max(m1, m2)
    return f(m), f(d1) * np.exp(f(m1) - f(m)) + f(d2) * np.exp(f(m2) - f(m))


def merge_no_rescale(m1, d1, m2, d2):
    return max(m1, m2), d1 + d2


def merge_min(m1, d1, m2, d2):
    return min(m1, m2), d1 + d2


@_empty_safe
def merge_wrong_factor(m1, d1, m2, d2):
    m = max(m1, m2)
    return m, d1 * math.exp(m - m1) + d2 * math.exp(m - m2)


@_empty_safe
def merge_unshifted(m1, d1, m2, d2):
    """Sums of exp(x) rather than of exp(x - m): a mistake the checker has no special hint for."""
    return max(m1, m2), d1 * math.exp(m1) + d2 * math.exp(m2)


def test_checker_4_2_contract(capsys):
    assert_checker_contract(
        capsys, lesson04_exercises.check_4_2, merge_right, merge_no_rescale, lesson04_exercises.H_MERGE_ADD
    )


@pytest.mark.parametrize("right", [merge_right_float32, merge_right_numpy_float32])
def test_checker_4_2_takes_the_right_formula_computed_in_float32(right, capsys):
    d = right(-2.0, 1.25, 0.5, 1.0)[1]
    assert float(d) != merge_right(-2.0, 1.25, 0.5, 1.0)[1]  # really float32: not the float64 answer
    line = verdict(capsys, lesson04_exercises.check_4_2, right)
    assert status(line).startswith("correct"), line


WRONG_4_2 = {
    "empty part not handled (NaN)": (merge_no_empty, lesson04_exercises.H_MERGE_EMPTY),
    "sums added without a rescale": (merge_no_rescale, lesson04_exercises.H_MERGE_ADD),
    "the smaller maximum": (merge_min, lesson04_exercises.H_MERGE_MAX),
    "factor exp(m - m_i)": (merge_wrong_factor, lesson04_exercises.H_MERGE_FACTOR),
    "sums of exp(x), not shifted": (merge_unshifted, lesson04_exercises.H_MERGE_DEFINITION),
}


@pytest.mark.parametrize("kind", sorted(WRONG_4_2))
def test_checker_4_2_wrong_answers(kind, capsys):
    """Each wrong merge gets the hint that names its mistake, and no other merge hint."""
    wrong, hint = WRONG_4_2[kind]
    line = verdict(capsys, lesson04_exercises.check_4_2, wrong)
    assert status(line).startswith("wrong") and hint in line, line
    others = {h for _, h in WRONG_4_2.values()} - {hint}
    assert not any(h in line for h in others), line


def test_checker_4_2_shows_what_was_given_and_what_was_expected(capsys):
    """A merge off by 1e-4 (beyond float32's rounding, so wrong): the line shows the pair given and the pair
    expected, in digits that tell them apart."""
    line = verdict(
        capsys, lesson04_exercises.check_4_2, lambda m1, d1, m2, d2: merge_right(m1, d1, m2, d2 * (1 + 1e-4))
    )
    assert status(line).startswith("wrong"), line
    assert "merge(3, 1.5, 5, 2) gave (5.0, 2.203203), expected (5.0, 2.203003)" in line, line


def stash_traffic_right(M, N):
    """Pass 1 reads x and writes exp(x - m_block) to out; pass 2 reads out, rescales it and writes it back."""
    return 2 * M * N, 2 * M * N


def test_checker_4_3_contract(capsys):
    assert_checker_contract(
        capsys, lesson04_exercises.check_4_3, stash_traffic_right, lambda M, N: (M * N, 2 * M * N), "reads"
    )


WRONG_4_3 = {
    "pass 2's read of out forgotten": (lambda M, N: (M * N, 2 * M * N), "reads: pass 1 reads x, and pass 2 reads back"),
    "pass 1's write forgotten": (lambda M, N: (2 * M * N, M * N), "writes: pass 1 writes the exponentials"),
    "the three-pass kernel's traffic": (lambda M, N: (3 * M * N, M * N), "reads: pass 1 reads x, and pass 2"),
    "one total, not a pair": (lambda M, N: 4 * M * N, "return a pair (reads, writes)"),
}


@pytest.mark.parametrize("kind", sorted(WRONG_4_3))
def test_checker_4_3_wrong_answers(kind, capsys):
    wrong, hint = WRONG_4_3[kind]
    line = verdict(capsys, lesson04_exercises.check_4_3, wrong)
    assert status(line).startswith("wrong") and hint in line, line


def test_merge_answer_is_the_online_update():
    x = torch.randn(20, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    a, b = x[:7], x[7:]
    m1, m2 = float(a.max()), float(b.max())
    m, d = lesson04_exercises.merge_answer(m1, float(torch.exp(a - m1).sum()), m2, float(torch.exp(b - m2).sum()))
    assert m == float(x.max()) and d == pytest.approx(float(torch.exp(x - m).sum()), rel=1e-12)
