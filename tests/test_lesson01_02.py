"""The lesson modules of lessons 01 and 02: exercise checkers, traffic numbers, the trace, the
float16 thresholds and the figures, and the notebooks' table cells built on them.

Every checker must print exactly one line and never raise, whatever the learner wrote: a right
answer gives "correct", an untouched template (``raise NotImplementedError``) "not yet", a wrong
answer or an exception "wrong".
"""

from __future__ import annotations

import math

import matplotlib
import pandas as pd
import pytest
import torch
from checking import _raises, _untouched
from claims import code_cell_with

import helpers
from helpers import data, lesson01, lesson02, lesson02_exercises
from helpers.exercises import fmt
from helpers.traffic import kernel_traffic


def _run_cell(phrase: str, lesson: str = "02", **names) -> dict:
    """Run the lesson's code cell that contains ``phrase`` (what it prints goes to capsys); its namespace."""
    ns = {
        "torch": torch,
        "helpers": helpers,
        "pd": pd,
        "data": data,
        "fmt": fmt,
        "lesson01": lesson01,
        "lesson02": lesson02,
        **names,
    }
    exec(code_cell_with(lesson, phrase), ns)
    return ns


# --------------------------------------------------------------------------------------------
# Attempts for every exercise: right, untouched, wrong, raising.
# --------------------------------------------------------------------------------------------


def softmax_1d_right(x):
    e = torch.exp(x)
    return e / e.sum()


def three_op_right(M, N):
    return M * N + M * N + (M * N + M), M * N + M + M * N


def shift_right(f, x):
    return all(torch.allclose(f(x + c), f(x)) for c in (-3.0, 0.5, 7.0))


def lse_right(x):
    m = x.max(dim=-1, keepdim=True).values
    return (m + torch.log(torch.exp(x - m).sum(dim=-1, keepdim=True))).squeeze(-1)


def temperature_right(x, T):
    z = x / T
    z = z - z.max(dim=-1, keepdim=True).values
    e = torch.exp(z)
    return e / e.sum(dim=-1, keepdim=True)


def log_softmax_right(x):
    z = x - x.max(dim=-1, keepdim=True).values
    return z - torch.log(torch.exp(z).sum(dim=-1, keepdim=True))


CHECKERS = {
    "1.1": (lesson01.check_1_1, softmax_1d_right, lambda x: torch.exp(x)),
    "1.2": (lesson01.check_1_2, three_op_right, lambda M, N: (5 * M * N + 2 * M, 3 * M * N + 2 * M)),
    "1.3": (lesson01.check_1_3, shift_right, lambda f, x: True),
    "2.1": (lesson02_exercises.check_2_1, lse_right, lambda x: torch.log(torch.exp(x).sum(dim=-1))),
    "2.2": (lesson02_exercises.check_2_2, temperature_right, lambda x, T: helpers.naive_softmax(x / T)),
    "2.3": (lesson02_exercises.check_2_3, log_softmax_right, lambda x: torch.log(helpers.stable_softmax(x))),
    "2.4": (lesson02_exercises.check_2_4, lambda x, m: masked_right(x, m), lambda x, m: torch.softmax(x, dim=-1)),
}


def _run(capsys, checker, attempt) -> str:
    result = checker(attempt)
    assert result is None, "a checker returns nothing (so a notebook cell shows only its line)"
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) == 1, f"expected exactly one line, got {out!r}"
    return lines[0]


@pytest.mark.parametrize("ex", list(CHECKERS))
def test_checker_right(capsys, ex):
    checker, right, _ = CHECKERS[ex]
    line = _run(capsys, checker, right)
    assert line.startswith(f"Exercise {ex} (") and "): correct" in line, line


@pytest.mark.parametrize("ex", list(CHECKERS))
def test_checker_untouched(capsys, ex):
    checker, _, _ = CHECKERS[ex]
    line = _run(capsys, checker, _untouched)
    assert "): not yet: replace `raise NotImplementedError`" in line, line


@pytest.mark.parametrize("ex", list(CHECKERS))
@pytest.mark.parametrize("value", [None, ...])
def test_checker_unattempted_value(capsys, ex, value):
    checker, _, _ = CHECKERS[ex]
    line = _run(capsys, checker, value)
    assert "): not yet" in line, line


@pytest.mark.parametrize("ex", list(CHECKERS))
def test_checker_wrong(capsys, ex):
    checker, _, wrong = CHECKERS[ex]
    line = _run(capsys, checker, wrong)
    assert "): wrong: " in line, line
    assert "raised" not in line, line


@pytest.mark.parametrize("ex", list(CHECKERS))
def test_checker_exception(capsys, ex):
    checker, _, _ = CHECKERS[ex]
    line = _run(capsys, checker, _raises)
    assert line.endswith("): wrong: your code raised ZeroDivisionError: division by zero"), line


@pytest.mark.parametrize("ex", list(CHECKERS))
def test_checker_missing_return(capsys, ex):
    checker, _, _ = CHECKERS[ex]
    line = _run(capsys, checker, lambda *a: None)
    assert "wrong: your function returned None" in line, line


@pytest.mark.parametrize("ex", list(CHECKERS))
def test_checker_not_a_function(capsys, ex):
    checker, _, _ = CHECKERS[ex]
    line = _run(capsys, checker, 42)
    assert "wrong: expected a function, got int" in line, line


@pytest.mark.parametrize("ex", ["1.1", "2.1", "2.3", "2.4"])
def test_checker_catches_input_modification(capsys, ex):
    checker, right, _ = CHECKERS[ex]

    def modifies(x, *rest):
        out = right(x.clone(), *rest)
        x.add_(1.0)
        return out

    line = _run(capsys, checker, modifies)
    assert "wrong: your function changed its input" in line, line


def test_checker_1_2_names_what_is_off(capsys):
    line = _run(capsys, lesson01.check_1_2, lambda M, N: (3 * M * N + M, 2 * M * N))
    assert "the writes are off" in line and "the reads are off" not in line and "the reads and" not in line, line
    line = _run(capsys, lesson01.check_1_2, lambda M, N: 7)
    assert "return a pair (reads, writes)" in line, line


def test_checker_1_3_needs_a_nonzero_shift(capsys):
    line = _run(capsys, lesson01.check_1_3, lambda f, x: torch.allclose(f(x + 0.0), f(x)))
    assert "is shift-invariant, but it is not" in line, line
    line = _run(capsys, lesson01.check_1_3, lambda f, x: torch.tensor(True))
    assert "wrong" in line, line  # a 0-d bool tensor is accepted as an answer, and this one is wrong
    line = _run(capsys, lesson01.check_1_3, lambda f, x: "yes")
    assert "return True or False" in line, line


def test_checker_2_1_shape(capsys):
    line = _run(capsys, lesson02_exercises.check_2_1, lambda x: torch.logsumexp(x, dim=-1, keepdim=True))
    assert "expected shape" in line and "one value per row" in line, line


def test_three_op_answer():
    assert lesson01.three_op_traffic_answer(2, 3) == (20, 14)
    assert lesson01.three_op_traffic_answer(2, 3) == three_op_right(2, 3)


# --------------------------------------------------------------------------------------------
# Lesson 01: traffic and intensity
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("M,N", [(1, 1), (3, 5), (4096, 1024)])
def test_traffic_rows(M, N):
    rows = lesson01.traffic_rows(M, N)
    assert [r["name"] for r in rows] == ["max", "subtract", "exp", "sum", "divide", "naive total", "fused kernel"]
    ops, naive, fused = rows[:5], rows[5], rows[6]
    MN = M * N
    assert [(r["reads"], r["writes"]) for r in ops] == [
        (MN, M),
        (MN + M, MN),
        (MN, MN),
        (MN, M),
        (MN + M, MN),
    ]
    assert (naive["reads"], naive["writes"]) == (5 * MN + 2 * M, 3 * MN + 2 * M)
    assert (fused["reads"], fused["writes"]) == (MN, MN)
    assert sum(r["reads"] for r in ops) == naive["reads"]
    assert sum(r["writes"] for r in ops) == naive["writes"]
    assert naive == {**naive, **kernel_traffic("naive", M, N)}


def test_traffic_table_cell(capsys):
    ns = _run_cell("lesson01.traffic_rows(M=4096, N=1024)", "01")
    t = ns["traffic"]
    assert t.loc["naive total", ["reads", "writes"]].tolist() == [20_979_712, 12_591_104]
    assert t.loc["naive total", ["reads MB", "writes MB"]].round(1).tolist() == [83.9, 50.4]
    assert t.loc["fused kernel", ["reads", "writes", "reads MB"]].round(1).tolist() == [4_194_304, 4_194_304, 16.8]
    assert capsys.readouterr().out.strip() == "naive / fused traffic: 4.00x"
    assert "20,979,712" in repr(data.show(t, digits=1))


def test_recorded_gpu_comes_from_device_props():
    """Lesson 01's peaks are the recorded H100's (figures/data/device_props.csv), not typed in."""
    from helpers import gpu_data

    props, meta = gpu_data.read_csv("device_props")
    g = lesson01.recorded_gpu()
    p = props[0]
    assert g["full_name"] == p["name"] and "H100" in g["name"]
    assert g["bytes_per_s"] == pytest.approx(p["dram_peak_gbps"] * 1e9)
    assert g["copy_bytes_per_s"] == pytest.approx(p["copy_gbps_1GiB"] * 1e9)
    assert g["copy_graph_bytes_per_s"] == pytest.approx(p["copy_graph_gbps_1GiB"] * 1e9)
    assert g["fp32_flops"] == pytest.approx(p["sm_count"] * 128 * 2 * 1.98e9)
    assert g["provenance"] == data.provenance(data.load("device_props")) and "commit" not in g["provenance"]
    # the datasheet (3.35 TB/s, about 67 TFLOP/s) agrees: context only
    assert g["bytes_per_s"] == pytest.approx(3.35e12, rel=0.01)
    assert g["fp32_flops"] == pytest.approx(67e12, rel=0.01)


def test_gpu_cell(capsys):
    ns = _run_cell("gpu = lesson01.recorded_gpu()", "01")
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("device_props.csv: NVIDIA H100 80GB HBM3") and "commit" not in out[0]
    assert out[1] == "fp32 arithmetic: 132 SMs x 128 lanes x 2 FLOP x 1.98 GHz = 66.9 TFLOP/s"
    bw = ns["bandwidth"]
    assert bw["GB/s"].tolist() == [3352, 2999, 2432]
    assert bw["of the peak"].round(2).tolist() == [1.0, 0.89, 0.73]
    assert "eager time" in bw.index[1] and "GPU time" in bw.index[2]


def test_intensity_and_ridge():
    assert lesson01.ridge_point() == pytest.approx(66.9e12 / 3352.3e9, rel=1e-3)
    assert round(lesson01.ridge_point()) == 20
    assert lesson01.ridge_point({"fp32_flops": 10.0, "bytes_per_s": 4.0}) == 2.5
    assert lesson01.softmax_intensity("fused", element_size=4) == pytest.approx(5 / 8)
    # naive: 8MN + 4M elements of 4 bytes for 5MN FLOPs
    M = N = 4096
    assert lesson01.softmax_intensity("naive", 4, M, N) == pytest.approx(5 * M * N / ((8 * M * N + 4 * M) * 4))
    assert lesson01.softmax_intensity("fused", element_size=2) == pytest.approx(5 / 4)
    assert lesson01.softmax_intensity("fused") < lesson01.ridge_point() / 30


def test_time_estimate_cell(capsys):
    ns = _run_cell("t_math = lesson01.SOFTMAX_FLOPS_PER_ELEMENT", "01", gpu=lesson01.recorded_gpu())
    assert capsys.readouterr().out.strip() == "arithmetic: 83.9 MFLOP at 66.9 TFLOP/s -> 1.3 us"
    est = ns["estimate"].round(1)
    assert est.loc["naive total", ["MB", "us at the DRAM peak"]].tolist() == [536.9, 160.2]
    assert est.loc["fused kernel", ["MB", "us at the DRAM peak"]].tolist() == [134.2, 40.0]
    assert est["x the arithmetic"].round().tolist() == [128, 32]


# --------------------------------------------------------------------------------------------
# Lesson 02: thresholds, sweep, trace
# --------------------------------------------------------------------------------------------


def test_float16_overflow_threshold():
    below, above = lesson02.exp_overflow_threshold(torch.float16)
    assert below == 11.0859375 and above == 11.09375
    assert below < math.log(65504) < above
    assert torch.isfinite(torch.exp(torch.tensor(below, dtype=torch.float16)))
    assert torch.isinf(torch.exp(torch.tensor(above, dtype=torch.float16)))
    # consecutive float16 values: nothing lies between them
    assert (
        torch.tensor(above, dtype=torch.float16).view(torch.int16)
        - torch.tensor(below, dtype=torch.float16).view(torch.int16)
        == 1
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_overflow_threshold_near_log_max(dtype):
    below, above = lesson02.exp_overflow_threshold(dtype)
    ln_max = math.log(torch.finfo(dtype).max)
    assert below < above
    assert abs(below - ln_max) < 0.6 and abs(above - ln_max) < 0.6
    assert torch.isfinite(torch.exp(torch.tensor(below, dtype=dtype)))
    assert torch.isinf(torch.exp(torch.tensor(above, dtype=dtype)))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_underflow_threshold(dtype):
    keep, lost = lesson02.exp_underflow_threshold(dtype)
    assert lost < keep < 0
    assert torch.exp(torch.tensor(keep, dtype=dtype)) > 0
    assert torch.exp(torch.tensor(lost, dtype=dtype)) == 0
    fi = torch.finfo(dtype)
    # exp(x) rounds to 0 below half the smallest subnormal
    assert abs(keep - math.log(fi.smallest_normal * fi.eps / 2)) < 0.6


def test_threshold_rejects_bad_dtype():
    with pytest.raises(ValueError, match="dtype must be one of"):
        lesson02.exp_overflow_threshold(torch.int32)


def test_float16_sweep_regimes():
    d = lesson02.float16_row_sweep(8.0, 12.0)
    x = torch.tensor(d["x"])
    assert x[0] == 8.0 and x[-1] == 12.0 and len(x) == 513  # every float16 in [8, 12], spacing 2**-7
    naive, stable = torch.tensor(d["naive"]), torch.tensor(d["stable"])
    sum_over = math.log(65504) - math.log(1 + math.exp(-1) + math.exp(-2))
    ok, zeros, nan = x < sum_over - 0.01, (x > sum_over + 0.01) & (x < 11.08), x > 11.09
    assert torch.allclose(naive[ok], torch.tensor(0.6652), atol=2e-3)
    assert (naive[zeros] == 0).all()
    assert torch.isnan(naive[nan]).all()
    assert torch.allclose(stable, torch.tensor(0.6652), atol=2e-3)


def test_float16_sweep_cell():
    sweep = pd.DataFrame(_run_cell("sweep = []")["sweep"]).set_index("x (fp16)")
    assert len(sweep) == 8 and sweep.loc[10.0, ["exp(x)", "sum of exp"]].tolist() == [22032, 33120]
    assert sweep.loc[11.0, "naive softmax"] == "[0.0, 0.0, 0.0]"
    assert sweep.loc[12.0, "naive softmax"] == "[0.0, 0.0, nan]"
    assert sweep.loc[10.703125, "sum of exp"] == math.inf and sweep.loc[10.5, "naive softmax"] == "[0.09, 0.245, 0.666]"
    assert (sweep["stable softmax"] == "[0.09, 0.245, 0.666]").all()


def test_trace_values():
    steps = lesson02.softmax_trace(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    names = [s[0] for s in steps]
    assert names == ["input", "max", "shift", "exp", "sum", "normalize"]
    v = {s[0]: s[2] for s in steps}
    assert float(v["max"]) == 4.0
    assert v["shift"].tolist() == [-3.0, -2.0, -1.0, 0.0]
    assert torch.allclose(v["exp"], torch.exp(torch.tensor([-3.0, -2.0, -1.0, 0.0])))
    assert float(v["sum"]) == pytest.approx(1.5530, abs=1e-4)
    assert torch.allclose(v["normalize"], torch.tensor([0.0321, 0.0871, 0.2369, 0.6439]), atol=1e-4)

    naive = lesson02.softmax_trace(torch.tensor([1000.0, 1001.0, 1002.0]), stable=False)
    assert [s[0] for s in naive] == ["input", "exp", "sum", "normalize"]
    assert torch.isinf(naive[1][2]).all() and torch.isnan(naive[3][2]).all()


def test_trace_cells_are_rounded_and_stable():
    trace = _run_cell("def trace(x, stable=True)")["trace"]
    t = trace(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    assert [tuple(r) for r in t.reset_index().values] == [
        ("input", "x", "[1.0, 2.0, 3.0, 4.0]"),
        ("max", "m = max(x)", "4.0"),
        ("shift", "z = x - m", "[-3.0, -2.0, -1.0, 0.0]"),
        ("exp", "e = exp(z)", "[0.0498, 0.1353, 0.3679, 1.0]"),
        ("sum", "s = sum(e)", "1.553"),
        ("normalize", "y = e / s", "[0.0321, 0.0871, 0.2369, 0.6439]"),
        ("check", "sum of y", "1.0"),
    ]
    x = _run_cell("x = torch.tensor([1000.0, 1001.0, 1002.0])\ndata.show(pd.concat(", trace=trace)["x"]
    assert x.tolist() == [1000.0, 1001.0, 1002.0]
    naive, stable = trace(x, stable=False), trace(x)
    assert naive.loc["normalize", "value"] == "[nan, nan, nan]" and naive.loc["check", "value"] == "nan"
    assert stable.loc["normalize", "value"] == "[0.09, 0.2447, 0.6652]" and stable.loc["check", "value"] == "1.0"


def test_trace_rejects_2d():
    with pytest.raises(ValueError, match="1-D"):
        lesson02.softmax_trace(torch.ones(2, 3))


def test_overflow_and_underflow_tables(capsys):
    _run_cell("lesson02.exp_overflow_threshold(dtype)")
    _run_cell("lesson02.exp_underflow_threshold(dtype)")
    out = capsys.readouterr().out
    assert "x = 11.0859375" in out and "x = 11.09375" in out
    assert "x = -17.34375" in out


# --------------------------------------------------------------------------------------------
# Lesson 02: 16-bit inputs, stable_softmax in float32, the float16 denominator
# --------------------------------------------------------------------------------------------


def _bf16_row():
    torch.manual_seed(0)
    return torch.randn(1, 4096).to(torch.bfloat16)


def _max_rel(y, x):
    ref = torch.softmax(x.double(), dim=-1)
    return float(((y.double() - ref).abs() / ref).max())


def test_stable_softmax_computes_16_bit_inputs_in_float32():
    """helpers.stable_softmax(bf16) is within bfloat16's tolerance of the float64 softmax, in
    relative terms too; the old version (computed in bf16, lesson02.softmax_in_dtype) is not."""
    x = _bf16_row()
    tol = helpers.TOLERANCES[torch.bfloat16]
    y = helpers.stable_softmax(x)
    assert y.dtype == torch.bfloat16 and y.shape == x.shape
    helpers.assert_matches_reference(y, x)
    assert _max_rel(y, x) <= tol["rtol"]
    assert _max_rel(lesson02.softmax_in_dtype(x), x) > tol["rtol"]  # 2.1%: x - max rounded to 8 bits
    # as torch.softmax computes it (float32 inside), to the last bit of bf16
    assert _max_rel(y, x) == pytest.approx(_max_rel(torch.softmax(x, dim=-1), x), rel=0.05)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_stable_softmax_16_bit_returns_the_input_dtype_and_leaves_it_alone(dtype):
    x = (torch.randn(3, 50) * 4).to(dtype)
    before = x.clone()
    y = helpers.stable_softmax(x)
    assert y.dtype == dtype and torch.equal(x, before)
    torch.testing.assert_close(y, torch.softmax(x.float(), dim=-1).to(dtype))


def test_float64_and_float32_are_computed_in_their_own_type():
    x = torch.randn(2, 7, dtype=torch.float64)
    assert helpers.stable_softmax(x).dtype == torch.float64
    torch.testing.assert_close(helpers.stable_softmax(x), torch.softmax(x, -1), rtol=1e-12, atol=1e-14)


def test_bfloat16_errors_and_print(capsys):
    e = lesson02.bfloat16_errors(_bf16_row())
    assert e["bfloat16"] > 0.016 > e["float32"] and e["float32"] < 0.005 and e["torch.softmax"] < 0.005
    assert e["shift_exact"] != e["shift_bf16"] and abs(e["shift_exact"] - e["shift_bf16"]) < abs(e["shift_exact"]) / 128
    _run_cell("errors = lesson02.bfloat16_errors(xb)")  # the notebook's row: _bf16_row()
    out = capsys.readouterr().out.splitlines()
    assert "computed in bfloat16" in out[1] and "beyond" in out[1]
    assert "within" in out[2] and "within" in out[3]
    with pytest.raises(ValueError, match="bfloat16"):
        lesson02.bfloat16_errors(torch.zeros(3))


def test_float16_denominator_overflows_past_65504():
    """The lesson's corrected claim: the denominator is at most N, and in float16 a long row of
    equal scores overflows it (the sum of its exps is inf, every probability 0)."""
    x = torch.zeros(1, 65536, dtype=torch.float16)
    assert torch.isinf(torch.exp(x - x.max()).sum())
    assert (lesson02.softmax_in_dtype(x) == 0).all()
    y = helpers.stable_softmax(x)
    assert y.dtype == torch.float16 and torch.allclose(y.float(), torch.full_like(y.float(), 1 / 65536))
    small = torch.zeros(1, 60000, dtype=torch.float16)  # below 65504 the float16 sum is finite
    assert torch.isfinite(torch.exp(small).sum()) and (lesson02.softmax_in_dtype(small) > 0).all()


def test_print_float16_long_row(capsys):
    _run_cell("zeros = torch.zeros(1, n, dtype=torch.float16)")
    out = capsys.readouterr().out.splitlines()
    assert "65,536 zeros" in out[0]
    assert "sum of exp(x - max) = inf" in out[1] and "row sum 0" in out[1]
    assert "sum of exp(x - max) = 65536" in out[2] and "row sum 1" in out[2]


def test_softmax_in_dtype_is_the_shift_in_the_inputs_type():
    x16 = torch.tensor([10.0, 11.0, 12.0], dtype=torch.float16)
    y = lesson02.softmax_in_dtype(x16)
    assert y.dtype == torch.float16 and torch.isfinite(y).all()  # the shift alone avoids overflow in float16
    assert torch.isnan(helpers.naive_softmax(x16)).any()


# --------------------------------------------------------------------------------------------
# Exercise 2.4: the masked softmax and its checker
# --------------------------------------------------------------------------------------------

NEG_INF = float("-inf")


def masked_right(x, mask):
    z = x.masked_fill(~mask, NEG_INF)
    m = z.max(dim=-1, keepdim=True).values
    m = m.masked_fill(m == NEG_INF, 0.0)
    e = torch.exp(z - m)
    s = e.sum(dim=-1, keepdim=True)
    return e / s.masked_fill(s == 0, 1.0)


def masked_right_nan_to_num(x, mask):
    return torch.softmax(x.masked_fill(~mask, NEG_INF), dim=-1).nan_to_num(0.0)


MASKED_WRONG = {
    # torch.softmax as is: a fully masked row is NaN
    "nan_row": (lambda x, m: torch.softmax(x.masked_fill(~m, NEG_INF), dim=-1), "came out NaN"),
    "mask_inverted": (lambda x, m: masked_right(x, ~m), "inverted"),
    "mask_after_softmax": (lambda x, m: torch.softmax(x, dim=-1) * m, "after the softmax"),
    "minus_1e9": (lambda x, m: torch.softmax(x.masked_fill(~m, -1e9), dim=-1), "-1e9"),
    "finfo_min": (lambda x, m: torch.softmax(x.masked_fill(~m, torch.finfo(x.dtype).min), dim=-1), "uniform"),
    "no_max_shift": (
        lambda x, m: (
            torch.exp(x.masked_fill(~m, NEG_INF)) / torch.exp(x.masked_fill(~m, NEG_INF)).sum(-1, keepdim=True)
        ).nan_to_num(0.0),
        "did exp overflow",
    ),
    "masked_with_zero": (lambda x, m: torch.softmax(x.masked_fill(~m, 0.0), dim=-1), "must get probability 0"),
    "float32_out": (lambda x, m: masked_right(x.float(), m), "return the input's dtype"),
}


def _inplace(x, mask):
    x.masked_fill_(~mask, NEG_INF)
    return masked_right_nan_to_num(x, mask)


def _mask_inplace(x, mask):
    out = masked_right(x, mask)
    mask.fill_(True)
    return out


@pytest.mark.parametrize("right", [masked_right, masked_right_nan_to_num])
def test_checker_2_4_right(capsys, right):
    line = _run(capsys, lesson02_exercises.check_2_4, right)
    assert "): correct" in line and "fully masked row gives zeros" in line, line


def test_checker_2_4_modifying_the_input_or_the_mask(capsys):
    line = _run(capsys, lesson02_exercises.check_2_4, _inplace)
    assert "wrong: your function changed its input" in line and "masked_fill_" in line, line
    line = _run(capsys, lesson02_exercises.check_2_4, _mask_inplace)
    assert "wrong: your function changed the mask" in line, line


def test_masked_softmax_answer():
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[True, False, True], [False, False, False]])
    want = lesson02_exercises.masked_softmax_answer(x, mask)
    assert want[1].tolist() == [0.0, 0.0, 0.0]
    assert want[0, 1] == 0 and want[0].sum() == pytest.approx(1.0)
    assert torch.isnan(torch.softmax(torch.full((3,), NEG_INF), -1)).all()  # what torch does instead
    cases = lesson02_exercises._masked_cases()
    assert any((~m.any(dim=-1)).any() for _, m in cases), "a fully masked row is among the cases"
    assert any(x.dtype == torch.float16 for x, _ in cases) and {x.dim() for x, _ in cases} == {1, 2, 3}


# --------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,fn", [*lesson01.FIGURES.items(), *lesson02.FIGURES.items()], ids=lambda v: v if isinstance(v, str) else ""
)
def test_figures(name, fn):
    import matplotlib.pyplot as plt

    assert name[:3] in ("01_", "02_")
    fig = fn()
    try:
        assert isinstance(fig, matplotlib.figure.Figure)
        assert fig.axes
    finally:
        plt.close(fig)


def test_traffic_figure_data():
    import matplotlib.pyplot as plt

    fig = lesson01.plot_naive_traffic(M=64, N=32)
    try:
        ax_ops, ax_tot = fig.axes
        # bars: 5 reads then 5 writes (stacked on the reads), in units of MN
        heights = [p.get_height() for p in ax_ops.patches]
        MN = 64 * 32
        assert heights[:5] == pytest.approx([1, 1 + 64 / MN, 1, 1, 1 + 64 / MN])
        assert heights[5:] == pytest.approx([64 / MN, 1, 1, 64 / MN, 1])
        tot = [p.get_height() for p in ax_tot.patches]
        assert tot == pytest.approx([5 + 2 * 64 / MN, 1, 3 + 2 * 64 / MN, 1])
    finally:
        plt.close(fig)


def test_float16_figure_marks_inf_and_nan_on_bands_not_as_values():
    """inf and NaN are drawn on a band of their own above each panel, at the x where they occur; the value
    panels draw finite values only."""
    import matplotlib.pyplot as plt
    import numpy as np

    d = lesson02.float16_row_sweep(8.0, 12.0)
    x, e16, naive = (np.array(d[k]) for k in ("x", "exp", "naive"))
    fig = lesson02.plot_float16_overflow()
    try:
        band_inf, band_nan, ax_exp, ax_p = fig.axes
        assert [t.get_text() for t in band_inf.get_yticklabels()] == ["inf"]
        assert [t.get_text() for t in band_nan.get_yticklabels()] == ["NaN"]
        (inf_marks,) = band_inf.get_lines()[:1]
        assert np.array_equal(inf_marks.get_xdata(), x[~np.isfinite(e16)])
        (nan_marks,) = band_nan.get_lines()[:1]
        assert np.array_equal(nan_marks.get_xdata(), x[np.isnan(naive)]) and np.isnan(naive).any()
        for ax in (ax_exp, ax_p):
            for line in ax.get_lines():
                assert np.isfinite(np.asarray(line.get_ydata(), dtype=float)).all(), line.get_label()
        lo, hi = ax_p.get_ylim()
        assert all(lo <= y <= hi for line in ax_p.get_lines() for y in line.get_ydata())  # nothing clipped
    finally:
        plt.close(fig)


def test_bfloat16_running_sum_stalls_where_torch_sum_does_not(capsys):
    running, summed = lesson02.bfloat16_running_sum(2048, 512)
    assert running == 0.5 and summed == 4.0  # stuck once 1/512 is 1/256 of the running sum
    _run_cell("lesson02.bfloat16_running_sum(2048, 512)")
    assert capsys.readouterr().out.strip() == (
        "2048 terms of 1/512 in bfloat16: a running sum kept in bfloat16 gives 0.5, torch.sum gives 4, exactly 4"
    )


# --------------------------------------------------------------------------------------------
# One test per plausible wrong answer: "wrong", with the hint that names the mistake. Written as a
# learner would write them (not taken from the checkers' own lists).
# --------------------------------------------------------------------------------------------


def _lse_shift(shift, add_back=True):
    def lse(x):
        m = shift(x)
        s = torch.log(torch.exp(x - m).sum(dim=-1, keepdim=True))
        return (m + s if add_back else s).squeeze(-1)

    return lse


LSE_WRONG = {
    "no_shift": (lambda x: torch.log(torch.exp(x).sum(dim=-1)), "without a shift exp(x) overflows"),
    "not_added_back": (_lse_shift(lambda x: x.max(dim=-1, keepdim=True).values, add_back=False), "did not add it back"),
    "abs_max": (_lse_shift(lambda x: x.abs().max(dim=-1, keepdim=True).values), "the largest |x| is not the maximum"),
    "min": (_lse_shift(lambda x: x.min(dim=-1, keepdim=True).values), "shifting by the row minimum"),
    "first": (_lse_shift(lambda x: x[..., :1]), "shifting by the row's first element"),
    "mean": (_lse_shift(lambda x: x.mean(dim=-1, keepdim=True)), "shifting by the row mean"),
    "global_max": (_lse_shift(lambda x: x.max()), "one maximum for the whole tensor"),
    "mean_in_float64": (
        lambda x: _lse_shift(lambda z: z.mean(dim=-1, keepdim=True))(x.double()).to(x.dtype),
        "did exp overflow, or underflow to 0?",
    ),
    "min_in_float64": (
        lambda x: _lse_shift(lambda z: z.min(dim=-1, keepdim=True).values)(x.double()).to(x.dtype),
        "did exp overflow, or underflow to 0?",
    ),
}


@pytest.mark.parametrize(
    "right",
    [
        lse_right,
        lambda x: torch.logsumexp(x, dim=-1),
        lambda x: torch.logsumexp(x.float(), dim=-1).to(x.dtype),
        lambda x: _lse_shift(lambda z: z.max(dim=-1, keepdim=True).values)(x.double()),
    ],
)
def test_checker_2_1_right_answers(capsys, right):
    assert "): correct" in _run(capsys, lesson02_exercises.check_2_1, right)


def test_checker_2_1_rows_overflow_every_shift_but_the_max():
    """Each float32 row overflows or underflows a shift by its mean, first element or minimum (in its
    dtype), and the wide rows do so even in float64."""
    cases = lesson02_exercises._lse_cases()
    shifts = {
        "mean": lambda x: x.mean(dim=-1, keepdim=True),
        "first": lambda x: x[..., :1],
        "min": lambda x: x.min(dim=-1, keepdim=True).values,
    }
    for name, shift in shifts.items():
        for dtype in (torch.float32, torch.float16, torch.float64):
            rows = [x for x in cases if x.dtype == (torch.float16 if dtype == torch.float16 else torch.float32)]
            bad = [x for x in rows if not torch.isfinite(_lse_shift(shift)(x.to(dtype))).all()]
            assert bad, f"no {dtype} row overflows a shift by the {name}"


def _softmax_t(shift, scale=lambda x, T: x / T):
    def f(x, T):
        z = scale(x, T)
        e = torch.exp(z - shift(z))
        return e / e.sum(dim=-1, keepdim=True)

    return f


TEMPERATURE_WRONG = {
    "times_T": (_softmax_t(lambda z: z.max(dim=-1, keepdim=True).values, lambda x, T: x * T), "not softmax(x * T)"),
    "divide_after": (lambda x, T: torch.softmax(x, dim=-1) / T, "not the probabilities after it"),
    "no_shift": (lambda x, T: helpers.naive_softmax(x / T), "exp(x / T) overflows"),
}
# The wrong shifts both 2.2 and 2.3 must name: (name, the shift of a row, the hint)
WRONG_SHIFTS = [
    ("min", lambda z: z.min(dim=-1, keepdim=True).values, "shifting by the row minimum"),
    ("first", lambda z: z[..., :1], "shifting by the row's first element"),
    ("mean", lambda z: z.mean(dim=-1, keepdim=True), "shifting by the row mean"),
    ("global_max", lambda z: z.max(), "one maximum for the whole tensor"),
]
TEMPERATURE_WRONG.update({name: (_softmax_t(shift), hint) for name, shift, hint in WRONG_SHIFTS})


def _log_softmax(shift, subtract=True):
    def f(x):
        m = shift(x)
        s = torch.log(torch.exp(x - m).sum(dim=-1, keepdim=True))
        return x - m - s if subtract else x - s

    return f


LOG_SOFTMAX_WRONG = {
    "shift_left_in": (
        _log_softmax(lambda x: x.max(dim=-1, keepdim=True).values, subtract=False),
        "off by the row maximum",
    ),
    "no_shift": (lambda x: x - torch.log(torch.exp(x).sum(dim=-1, keepdim=True)), "without a shift exp(x) overflows"),
    "abs_max": (_log_softmax(lambda x: x.abs().max(dim=-1, keepdim=True).values), "the largest |x| is not the maximum"),
    "log_of_softmax": (lambda x: torch.log(helpers.stable_softmax(x)), "log(softmax(x))"),
    "log_of_torch_softmax": (lambda x: torch.log(torch.softmax(x, dim=-1)), "log(softmax(x))"),
}
LOG_SOFTMAX_WRONG.update({name: (_log_softmax(shift), hint) for name, shift, hint in WRONG_SHIFTS})


def _max_before_masking(x, mask):
    e = torch.exp(x.masked_fill(~mask, NEG_INF) - x.max(dim=-1, keepdim=True).values)
    return (e / e.sum(dim=-1, keepdim=True)).nan_to_num(0.0)


def test_checker_2_4_max_taken_before_masking(capsys):
    line = _run(capsys, lesson02_exercises.check_2_4, _max_before_masking)
    assert "): wrong: " in line and "take the maximum after masking" in line, line


SOFTMAX_1D_WRONG = {
    "exp_only": (torch.exp, "divide it by its sum"),
    "no_exp": (lambda x: x / x.sum(), "skips the exponential"),
    "divide_by_max": (lambda x: torch.exp(x) / torch.exp(x).max(), "not by their maximum"),
    "shift_only": (lambda x: torch.exp(x - x.max()), "not by their maximum"),
    "divide_by_sum_of_x": (lambda x: torch.exp(x) / x.sum(), "not by the sum of x"),
}


#: exercise -> (its checker, its plausible wrong answers: name -> (the answer, the words of its hint))
WRONG_ANSWERS = {
    "1.1": (lesson01.check_1_1, SOFTMAX_1D_WRONG),
    "2.1": (lesson02_exercises.check_2_1, LSE_WRONG),
    "2.2": (lesson02_exercises.check_2_2, TEMPERATURE_WRONG),
    "2.3": (lesson02_exercises.check_2_3, LOG_SOFTMAX_WRONG),
    "2.4": (lesson02_exercises.check_2_4, MASKED_WRONG),
}


@pytest.mark.parametrize("ex, name", [(ex, name) for ex, (_, wrong) in WRONG_ANSWERS.items() for name in wrong])
def test_checker_wrong_answers(capsys, ex, name):
    checker, wrong = WRONG_ANSWERS[ex]
    fn, hint = wrong[name]
    line = _run(capsys, checker, fn)
    assert "): wrong: " in line and hint in line, line


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: torch.softmax(x, -1),
        lambda x: torch.softmax(x, dim=0),
        lambda x: torch.nn.functional.softmax(x, dim=-1),
        lambda x: x.softmax(-1),
        lambda x: torch.nn.Softmax(dim=-1)(x),
        lambda x: torch.special.softmax(x, 0),
        lambda x: torch.exp(torch.log_softmax(x, -1)),
        lambda x: torch.softmax(x, -1) + 1e-3,  # wrong and ready-made: the rule comes first
    ],
    ids=[
        "torch.softmax",
        "torch.softmax dim=0",
        "F.softmax",
        "Tensor.softmax",
        "nn.Softmax",
        "special.softmax",
        "exp of log_softmax",
        "wrong too",
    ],
)
def test_checker_1_1_rejects_pytorchs_own_softmax(capsys, fn):
    line = _run(capsys, lesson01.check_1_1, fn)
    assert "): wrong: your function calls PyTorch's own" in line, line
    assert "write softmax yourself from exp, sum and divide" in line, line


@pytest.mark.parametrize(
    "fn",
    [
        softmax_1d_right,
        lambda x: x.exp() / x.exp().sum(),
        lambda x: torch.exp(x - x.max()) / torch.exp(x - x.max()).sum(),
        lambda x: torch.div(torch.exp(x), torch.sum(torch.exp(x), dim=-1, keepdim=True)),
        lambda x: helpers.naive_softmax(x.clone()),
    ],
    ids=["exp/sum", "methods", "shifted", "torch.div", "via helpers"],
)
def test_checker_1_1_right_answers(capsys, fn):
    assert "): correct" in _run(capsys, lesson01.check_1_1, fn)


def test_checker_1_1_watch_ends_with_the_call(capsys):
    """The check for PyTorch's softmax watches the learner's call only: the checker's own softmax and what the
    notebook runs afterwards are not counted, and the watch is gone once the checker returns."""
    assert "): wrong: your function calls" in _run(capsys, lesson01.check_1_1, lambda x: torch.softmax(x, -1))
    assert "): correct" in _run(capsys, lesson01.check_1_1, softmax_1d_right)
    modes = getattr(torch.overrides, "_get_current_function_mode_stack", None)  # private: checked where it exists
    assert modes is None or not modes()


#: Exercise 1.2's plausible wrong counts: the hint each must show.
THREE_OP_WRONG = {
    "divide_skips_the_sums": (
        lambda M, N: (3 * M * N, 2 * M * N + M),
        "the reads are off",
        "the divide also reads the M sums",
    ),
    "sum_writes_nothing": (
        lambda M, N: (3 * M * N + M, 2 * M * N),
        "the writes are off",
        "the sum writes its M results",
    ),
    "sums_never_in_dram": (
        lambda M, N: (3 * M * N, 2 * M * N),
        "the reads and the writes are off",
        "the M row sums go through DRAM",
    ),
    "broadcast_read_as_MN": (
        lambda M, N: (4 * M * N, 2 * M * N + M),
        "the reads are off",
        "denominator[:, None] is a view, not an M x N tensor",
    ),
    "broadcast_as_a_kernel": (
        lambda M, N: (3 * M * N + 2 * M, 2 * M * N + 2 * M),
        "the reads and the writes are off",
        "denominator[:, None] is a view, not a kernel",
    ),
    "numerator_read_once": (
        lambda M, N: (2 * M * N + M, 2 * M * N + M),
        "the reads are off",
        "every kernel reads its inputs from DRAM",
    ),
    "swapped": (
        lambda M, N: (2 * M * N + M, 3 * M * N + M),
        "the reads and the writes are off",
        "you swapped the reads and the writes",
    ),
    "five_op_count": (
        lambda M, N: (5 * M * N + 2 * M, 3 * M * N + 2 * M),
        "the reads and the writes are off",
        "the count of the five-line version",
    ),
    "bytes": (
        lambda M, N: (4 * (3 * M * N + M), 4 * (2 * M * N + M)),
        "the reads and the writes are off",
        "count elements, not bytes",
    ),
    "something_else": (
        lambda M, N: (3 * M * N + M, M * N),
        "the writes are off",
        "count each of the three lines as the max and the subtraction were counted above",
    ),
}


@pytest.mark.parametrize("name", THREE_OP_WRONG)
def test_checker_1_2_wrong_answers(capsys, name):
    fn, off, hint = THREE_OP_WRONG[name]
    line = _run(capsys, lesson01.check_1_2, fn)
    assert "): wrong: " in line and off in line and hint in line, line


@pytest.mark.parametrize(
    "fn", [three_op_right, lambda M, N: [3 * M * N + M, 2 * M * N + M], lambda M, N: (M * (3 * N + 1), M * (2 * N + 1))]
)
def test_checker_1_2_right_answers(capsys, fn):
    assert "): correct" in _run(capsys, lesson01.check_1_2, fn)


def _temperature_over(dim, shift=True):
    def f(x, T):
        z = x / T
        if shift:
            z = z - z.max(dim=dim, keepdim=True).values
        e = torch.exp(z)
        return e / e.sum(dim=dim, keepdim=True)

    return f


_COLUMNS_HINT = "softmax over the rows runs along the last dimension, dim=-1 (dim=1 on a matrix)"


@pytest.mark.parametrize(
    "fn", [_temperature_over(0), lambda x, T: torch.softmax(x / T, dim=0)], ids=["by hand", "torch.softmax"]
)
def test_checker_2_2_over_the_columns(capsys, fn):
    line = _run(capsys, lesson02_exercises.check_2_2, fn)
    assert "): wrong: " in line and "over dim=0, down each column" in line and _COLUMNS_HINT in line, line


def test_checker_2_2_dim_1_on_a_row(capsys):
    line = _run(capsys, lesson02_exercises.check_2_2, _temperature_over(1))
    assert "): wrong: " in line and "IndexError" in line and "the last dimension is dim=-1" in line, line


@pytest.mark.parametrize(
    "fn",
    [
        temperature_right,
        _temperature_over(-1),
        lambda x, T: torch.softmax(x / T, dim=-1),
        lambda x, T: helpers.stable_softmax(x / T),
    ],
)
def test_checker_2_2_right_answers(capsys, fn):
    assert "): correct" in _run(capsys, lesson02_exercises.check_2_2, fn)


def test_checker_2_3_over_the_columns(capsys):
    line = _run(capsys, lesson02_exercises.check_2_3, lambda x: torch.log_softmax(x, dim=0))
    assert "): wrong: " in line and _COLUMNS_HINT in line, line
    line = _run(capsys, lesson02_exercises.check_2_3, lambda x: torch.log_softmax(x, dim=1))
    assert "): wrong: " in line and "the last dimension is dim=-1" in line, line


def test_no_checker_of_lessons_01_02_says_the_same_for_expected_and_got(capsys):
    """A wrong answer's line never shows one rendering as both the expected and the got value."""
    import re

    attempts = [
        (lesson01.check_1_1, lambda x: softmax_1d_right(x) + 1e-5),
        (lesson02_exercises.check_2_1, lambda x: torch.logsumexp(x, -1) + 1e-3),
        (lesson02_exercises.check_2_3, lambda x: torch.log_softmax(x, -1) + 1e-4),
        (lesson02_exercises.check_2_4, lambda x, m: masked_right(x, m) * 1.0001),
    ]
    for checker, fn in attempts:
        line = _run(capsys, checker, fn)
        said = re.search(r"expected (.*?), got (.*?)(?:$|: | \()", line)
        assert "wrong" in line and said and said.group(1) != said.group(2), line


@pytest.mark.parametrize(
    "fn, hint",
    [
        (lambda f, x: all(torch.equal(f(x + c), f(x)) for c in (-3.0, 0.5, 7.0)), "compare with torch.allclose"),
        (lambda f, x: True, "is shift-invariant, but it is not"),
        (lambda f, x: False, "is not shift-invariant, but it is"),
    ],
)
def test_checker_1_3_wrong_answers(capsys, fn, hint):
    line = _run(capsys, lesson01.check_1_3, fn)
    assert "): wrong: " in line and hint in line, line
