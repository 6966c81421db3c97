"""Lesson 04's module: the online trace against the kernel, the hard rows, the traffic table, the
recorded rows-grow data (H100, GPU time and eager) and its cache model, the figures, and every
exercise checker against the right answer, the untouched template and the plausible wrong answers
(an out-of-bounds store must be reported without killing the process).

Every checker must print exactly one line and never raise, whatever the learner wrote.
"""

from __future__ import annotations

import math

import helpers
import matplotlib
import pytest
import torch
import triton
import triton.language as tl
from helpers import gpu_data, lesson04
from helpers.mode import DEVICE
from checking import _untouched, assert_checker_contract, status, verdict


# --------------------------------------------------------------------------------------------
# The online trace
# --------------------------------------------------------------------------------------------


def test_worked_trace_has_block_maxima_3_5_2():
    x, b = lesson04.trace_example()
    steps = lesson04.online_trace(x, b)
    assert [s["block_max"] for s in steps] == [3.0, 5.0, 2.0]
    assert [s["m_new"] for s in steps] == [3.0, 5.0, 5.0]
    assert steps[0]["d_old"] == 0.0
    assert steps[1]["alpha"] == pytest.approx(math.exp(-2))
    assert steps[2]["alpha"] == 1.0
    x64 = x.double()
    assert steps[-1]["d_new"] == pytest.approx(float(torch.exp(x64 - 5).sum()), rel=1e-12)


def test_worked_trace_equals_the_kernel(capsys):
    x, b = lesson04.trace_example()
    assert lesson04.check_trace_against_kernel(x, b) < 1e-6
    kernel = helpers.softmax_online(x[None].to(DEVICE), block_size=b)[0].cpu().double()
    torch.testing.assert_close(lesson04.trace_softmax(x, lesson04.online_trace(x, b)), kernel, atol=1e-7, rtol=1e-6)


@pytest.mark.parametrize("block", [1, 2, 8, 64])
def test_trace_equals_kernel_on_random_rows(block):
    g = torch.Generator().manual_seed(block)
    x = torch.randn(50, generator=g) * 4
    steps = lesson04.online_trace(x, block)
    assert steps[-1]["m_new"] == float(x.max())
    kernel = helpers.softmax_online(x[None].to(DEVICE), block_size=block)[0].cpu().double()
    torch.testing.assert_close(lesson04.trace_softmax(x, steps), kernel, atol=1e-6, rtol=1e-5)


def test_trace_without_rescale_is_wrong():
    x, b = lesson04.trace_example()
    good = lesson04.online_trace(x, b)[-1]["d_new"]
    bad = lesson04.online_trace(x, b, rescale=False)[-1]["d_new"]
    assert bad > good * 1.5


def test_trace_handles_leading_neg_inf_blocks():
    x = torch.tensor([float("-inf")] * 4 + [1.0, 2.0])
    steps = lesson04.online_trace(x, 2)
    assert steps[0]["m_new"] == float("-inf") and steps[0]["d_new"] == 0.0
    assert not math.isnan(steps[-1]["d_new"])


@pytest.mark.parametrize("bad", [torch.zeros(2, 3), torch.zeros(0)])
def test_trace_rejects_bad_rows(bad):
    with pytest.raises(ValueError):
        lesson04.online_trace(bad, 2)


def test_hard_rows_pass(capsys):
    assert lesson04.run_hard_rows(block_size=16, n_cols=40)
    assert "NaN (right)" in capsys.readouterr().out


def test_online_attention_matches_softmax_times_v():
    g = torch.Generator().manual_seed(7)
    s = torch.randn(13, generator=g, dtype=torch.float64) * 3
    V = torch.randn(13, 4, generator=g, dtype=torch.float64)
    for b in (1, 3, 13):
        torch.testing.assert_close(lesson04.online_attention(s, V, b), torch.softmax(s, 0) @ V)


def test_traffic_table_fractions(capsys):
    lesson04.print_traffic_table(M=8, N=16)
    out = capsys.readouterr().out
    assert "0.500" in out and "0.667" in out and "1.000" in out


# --------------------------------------------------------------------------------------------
# Rows grow: the recorded H100 run, GPU time first, its cross-check and its cache model
# --------------------------------------------------------------------------------------------


def test_rows_grow_is_the_h100_recording_with_both_timings():
    rows, meta = lesson04.rows_grow_data(live=False)
    assert "H100" in meta["gpu"] and gpu_data.provenance_line(meta).startswith("Recorded on NVIDIA H100")
    assert {"graph_frac", "frac_of_copy", "graph_spread", "spread", "status"} <= set(rows[0])


@pytest.mark.skipif(helpers.ON_GPU, reason="checks the CPU refusal")
def test_rows_grow_live_refuses_without_a_gpu():
    with pytest.raises(RuntimeError, match="GPU"):
        lesson04.rows_grow_data(live=True)
    with pytest.raises(RuntimeError, match="GPU"):
        lesson04.rows_grow_rows()


def test_rows_grow_table_and_summary_come_from_the_rows(capsys):
    rows, _ = lesson04.rows_grow_data(live=False)
    lesson04.print_rows_grow_table(rows, "float32")
    lesson04.rows_grow_summary(rows, "float32", sm_count=132)
    out = capsys.readouterr().out
    r = next(r for r in rows if r["N"] == 65536 and r["provider"] == "online")
    assert f"{r['graph_frac']:.2f} ({r['frac_of_copy']:.2f})" in out
    assert "refused" in out
    few = sorted(r["M"] for r in rows if r["provider"] == "online" and r["M"] < 132)
    assert all(f"(M = {M})" in out for M in few)


def test_the_looped_kernels_reach_their_bounds_only_for_long_rows():
    """What the lesson's prose says about the recording, checked against it."""
    rows, _ = lesson04.rows_grow_data(live=False)
    by = {(r["N"], r["provider"]): r["graph_frac"] for r in rows if gpu_data.ok(r)}
    assert by[1024, "three_pass"] > 0.9 and by[1024, "online"] > 0.9
    assert abs(by[32768, "three_pass"] - 0.5) < 0.05 and abs(by[32768, "online"] - 2 / 3) < 0.05
    assert by[65536, "fused"] < 0.8 and (131072, "fused") not in by


def test_rows_in_flight_model():
    rows, _ = lesson04.rows_grow_data(live=False)
    props, _ = gpu_data.device_props(live=False)
    model = lesson04.rows_in_flight(rows, props)
    first = model[0]
    assert first["resident"] == min(props["max_threads_per_sm"] // (32 * first["num_warps"]), 32) * props["sm_count"]
    assert first["fits"] and not model[-1]["fits"]
    # where the model says the rows fit but the measurement has already dropped: the lesson says so
    assert any(m["fits"] and m["three_pass"] < 0.7 for m in model)


def test_crosscheck_with_the_sweep(capsys):
    rows, _ = lesson04.rows_grow_data(live=False)
    sweep, _ = gpu_data.bench()
    lesson04.crosscheck_with_sweep(rows, sweep)
    out = capsys.readouterr().out
    assert "1024x65536" in out and "sweep spreads" in out
    lesson04.crosscheck_with_sweep(rows, [])
    assert "no shape in common" in capsys.readouterr().out


def test_rows_grow_rows_keeps_its_name_for_the_benchmark():
    assert callable(lesson04.rows_grow_rows)


@pytest.mark.parametrize("name", sorted(lesson04.FIGURES))
def test_figures_are_figures(name):
    fig = lesson04.FIGURES[name]()
    try:
        assert isinstance(fig, matplotlib.figure.Figure) and fig.axes
    finally:
        matplotlib.pyplot.close(fig)


def test_figure_names_and_given_rows():
    assert lesson04.FIGURES and all(k.startswith("04_") for k in lesson04.FIGURES)
    rows, meta = lesson04.rows_grow_data(live=False)
    matplotlib.pyplot.close(lesson04.plot_rows_grow(rows[:15], meta))


# --------------------------------------------------------------------------------------------
# Exercise 4.1: the online pass in Triton (kernels defined here, after `helpers` chose the mode)
# --------------------------------------------------------------------------------------------

NEG = -float("inf")


@triton.jit
def online_right(out_ptr, in_ptr, in_row_stride, in_col_stride, out_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    row_start = in_ptr + row * in_row_stride
    out_start = out_ptr + row * out_row_stride
    cols = tl.arange(0, BLOCK_SIZE)
    m = tl.full((), -float("inf"), tl.float32)
    d = tl.zeros((), tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + cols
        x = tl.load(row_start + offs * in_col_stride, mask=offs < n_cols, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        alpha = tl.where(m_new == -float("inf"), 1.0, tl.exp(m - m_new))
        d = d * alpha + tl.sum(tl.where(x == -float("inf"), 0.0, tl.exp(x - m_new)), axis=0)
        m = m_new
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + cols
        mask = offs < n_cols
        x = tl.load(row_start + offs * in_col_stride, mask=mask, other=-float("inf")).to(tl.float32)
        tl.store(out_start + offs, tl.exp(x - m) / d, mask=mask)


@triton.jit
def online_untouched(out_ptr, in_ptr, in_row_stride, in_col_stride, out_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    row_start = in_ptr + row * in_row_stride
    out_start = out_ptr + row * out_row_stride
    cols = tl.arange(0, BLOCK_SIZE)
    m = tl.full((), -float("inf"), tl.float32)
    d = tl.zeros((), tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + cols
        x = tl.load(row_start + offs * in_col_stride, mask=offs < n_cols, other=-float("inf")).to(tl.float32)
        raise NotImplementedError  # your code here: update m and d with this block
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + cols
        mask = offs < n_cols
        x = tl.load(row_start + offs * in_col_stride, mask=mask, other=-float("inf")).to(tl.float32)
        tl.store(out_start + offs, tl.exp(x - m) / d, mask=mask)


def _variant(update: str, store_mask: bool = True, strided: bool = True, all_inf_zero: bool = False):
    """A learner's kernel with the given loop body (source text), built under the current mode."""
    load = "offs * in_col_stride" if strided else "offs"
    store = ", mask=mask" if store_mask else ""
    final = ("tl.where(d == 0.0, 0.0, tl.exp(x - m) / d)" if all_inf_zero else "tl.exp(x - m) / d")
    body = "\n".join("        " + line for line in update.strip().splitlines())
    src = f'''
def kernel(out_ptr, in_ptr, in_row_stride, in_col_stride, out_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    row_start = in_ptr + row * in_row_stride
    out_start = out_ptr + row * out_row_stride
    cols = tl.arange(0, BLOCK_SIZE)
    m = tl.full((), -float("inf"), tl.float32)
    d = tl.zeros((), tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + cols
        x = tl.load(row_start + {load}, mask=offs < n_cols, other=-float("inf")).to(tl.float32)
{body}
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + cols
        mask = offs < n_cols
        x = tl.load(row_start + {load}, mask=mask, other=-float("inf")).to(tl.float32)
        tl.store(out_start + offs, {final}{store})
'''
    import linecache
    import sys

    name = f"<learner kernel {abs(hash(src))}>"
    linecache.cache[name] = (len(src), None, src.splitlines(True), name)  # so Triton can read the source
    ns = {"tl": tl, "triton": triton}
    exec(compile(src, name, "exec"), ns)
    fn = ns["kernel"]
    fn.__module__ = __name__
    sys.modules[__name__].__dict__.setdefault("_kernels", []).append(fn)
    return triton.jit(fn)


RIGHT = """
m_new = tl.maximum(m, tl.max(x, axis=0))
alpha = tl.where(m_new == -float("inf"), 1.0, tl.exp(m - m_new))
d = d * alpha + tl.sum(tl.where(x == -float("inf"), 0.0, tl.exp(x - m_new)), axis=0)
m = m_new
"""
NO_RESCALE = """
m_new = tl.maximum(m, tl.max(x, axis=0))
d = d + tl.sum(tl.where(x == -float("inf"), 0.0, tl.exp(x - m_new)), axis=0)
m = m_new
"""
WRONG_SIGN = """
m_new = tl.maximum(m, tl.max(x, axis=0))
alpha = tl.where(m_new == -float("inf"), 1.0, tl.exp(m_new - m))
d = d * alpha + tl.sum(tl.where(x == -float("inf"), 0.0, tl.exp(x - m_new)), axis=0)
m = m_new
"""
M_UPDATED_FIRST = """
m_new = tl.maximum(m, tl.max(x, axis=0))
m = m_new
alpha = tl.where(m_new == -float("inf"), 1.0, tl.exp(m - m_new))
d = d * alpha + tl.sum(tl.where(x == -float("inf"), 0.0, tl.exp(x - m_new)), axis=0)
"""
NO_NEG_INF_GUARD = """
m_new = tl.maximum(m, tl.max(x, axis=0))
d = d * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
m = m_new
"""
OLD_MAX_IN_EXP = """
m_new = tl.maximum(m, tl.max(x, axis=0))
alpha = tl.where(m_new == -float("inf"), 1.0, tl.exp(m - m_new))
d = d * alpha + tl.sum(tl.where(x == -float("inf"), 0.0, tl.exp(x - tl.where(m == -float("inf"), m_new, m))), axis=0)
m = m_new
"""


def test_variant_builder_builds_the_right_kernel(capsys):
    assert status(verdict(capsys, lesson04.check_4_1, _variant(RIGHT))).startswith("correct")


def test_checker_4_1_right_and_not_yet(capsys):
    assert status(verdict(capsys, lesson04.check_4_1, online_right)).startswith("correct")
    assert status(verdict(capsys, lesson04.check_4_1, online_untouched)).startswith("not yet")
    assert status(verdict(capsys, lesson04.check_4_1, None)).startswith("not yet")


@pytest.mark.parametrize("kind, hint", [
    ("no rescale", "multiply it by exp(m_old - m_new)"),
    ("wrong sign", "not by exp(m_new - m)"),
    ("m updated before alpha", "computed before m is updated"),
    ("no -inf guard", "exp(-inf - -inf) = NaN"),
    ("old max in exp", "max abs error"),
    ("all -inf rows give 0", "torch.softmax gives NaN"),
    ("no store mask", "wrote past the end of its output"),
    ("column stride ignored", "in_col_stride"),
])
def test_checker_4_1_wrong_answers(kind, hint, capsys):
    kernel = {
        "no rescale": lambda: _variant(NO_RESCALE),
        "wrong sign": lambda: _variant(WRONG_SIGN),
        "m updated before alpha": lambda: _variant(M_UPDATED_FIRST),
        "no -inf guard": lambda: _variant(NO_NEG_INF_GUARD),
        "old max in exp": lambda: _variant(OLD_MAX_IN_EXP),
        "all -inf rows give 0": lambda: _variant(RIGHT, all_inf_zero=True),
        "no store mask": lambda: _variant(RIGHT, store_mask=False),
        "column stride ignored": lambda: _variant(RIGHT, strided=False),
    }[kind]()
    line = verdict(capsys, lesson04.check_4_1, kernel)
    assert status(line).startswith("wrong") and hint in line, line


def test_checker_4_1_not_a_kernel(capsys):
    line = verdict(capsys, lesson04.check_4_1, lambda *a: None)
    assert status(line).startswith("wrong") and "@triton.jit" in line


def test_online_kernel_cases_are_hostile():
    cases = lesson04.online_kernel_cases()
    names = " ".join(c["name"] for c in cases)
    for text in ("late maximum", "-inf", "1e4", "only -inf", "column stride"):
        assert text in names, text
    assert any(c["x"].shape[1] % c["block"] for c in cases)  # a partial last block
    all_inf = next(c for c in cases if "only -inf" in c["name"])
    assert torch.isnan(torch.softmax(all_inf["x"].double(), -1)).any()


# --------------------------------------------------------------------------------------------
# Exercises 4.2 and 4.3: plain Python answers
# --------------------------------------------------------------------------------------------


def merge_right(m1, d1, m2, d2):
    m = max(m1, m2)
    if m == -math.inf:
        return -math.inf, 0.0
    return m, d1 * math.exp(m1 - m) + d2 * math.exp(m2 - m)


def merge_no_empty(m1, d1, m2, d2):
    m = max(m1, m2)
    return m, d1 * math.exp(m1 - m) + d2 * math.exp(m2 - m)


CASES = [
    (lesson04.check_4_2, merge_right, merge_no_empty, "empty part"),
    (lesson04.check_4_2, merge_right, lambda m1, d1, m2, d2: (max(m1, m2), d1 + d2), "rescale"),
    (lesson04.check_4_2, merge_right, lambda m1, d1, m2, d2: (min(m1, m2), d1 + d2), "larger of the two"),
    (lesson04.check_4_3, lesson04.stash_traffic_answer, lambda M, N: (M * N, 2 * M * N), "reads"),
    (lesson04.check_4_3, lesson04.stash_traffic_answer, lambda M, N: (2 * M * N, M * N), "writes"),
]


@pytest.mark.parametrize("checker, right, wrong, hint", CASES,
                         ids=[f"{c.__name__}-{i}" for i, (c, *_rest) in enumerate(CASES)])
def test_checkers(checker, right, wrong, hint, capsys):
    assert_checker_contract(capsys, checker, right, wrong, hint)
