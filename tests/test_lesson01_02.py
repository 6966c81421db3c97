"""The lesson modules of lessons 01 and 02: exercise checkers, traffic numbers, the printed trace,
the float16 thresholds and the figures.

Every checker must print exactly one line and never raise, whatever the learner wrote: a right
answer gives "correct", an untouched template (``raise NotImplementedError``) "not yet", a wrong
answer or an exception "wrong".
"""

from __future__ import annotations

import math

import helpers
import matplotlib
import pytest
import torch
from helpers import lesson01, lesson02
from helpers.traffic import kernel_traffic

# --------------------------------------------------------------------------------------------
# Attempts for every exercise: right, untouched, wrong, raising.
# --------------------------------------------------------------------------------------------


def _untouched(*args):
    raise NotImplementedError


def _raises(*args):
    return 1 / 0


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
    "2.1": (lesson02.check_2_1, lse_right, lambda x: torch.log(torch.exp(x).sum(dim=-1))),
    "2.2": (lesson02.check_2_2, temperature_right, lambda x, T: helpers.naive_softmax(x / T)),
    "2.3": (lesson02.check_2_3, log_softmax_right, lambda x: torch.log(helpers.stable_softmax(x))),
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


@pytest.mark.parametrize("ex", ["1.1", "2.1", "2.3"])
def test_checker_catches_input_modification(capsys, ex):
    checker, right, _ = CHECKERS[ex]

    def modifies(x):
        out = right(x.clone())
        x.add_(1.0)
        return out

    line = _run(capsys, checker, modifies)
    assert "wrong: your function changed its input" in line, line


def test_checker_1_2_names_what_is_off(capsys):
    line = _run(capsys, lesson01.check_1_2, lambda M, N: (3 * M * N + M, 2 * M * N))
    assert "the writes are off" in line and "reads" not in line.split("the writes")[1], line
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
    line = _run(capsys, lesson02.check_2_1, lambda x: torch.logsumexp(x, dim=-1, keepdim=True))
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
        (MN, M), (MN + M, MN), (MN, MN), (MN, M), (MN + M, MN),
    ]
    assert (naive["reads"], naive["writes"]) == (5 * MN + 2 * M, 3 * MN + 2 * M)
    assert (fused["reads"], fused["writes"]) == (MN, MN)
    assert sum(r["reads"] for r in ops) == naive["reads"]
    assert sum(r["writes"] for r in ops) == naive["writes"]
    assert naive == {**naive, **kernel_traffic("naive", M, N)}


def test_print_traffic_table(capsys):
    lesson01.print_traffic_table(4096, 1024)
    out = capsys.readouterr().out
    assert "naive total     20,979,712   12,591,104      83.9      50.4" in out
    assert "fused kernel     4,194,304    4,194,304      16.8      16.8" in out
    assert out.rstrip().endswith("naive / fused traffic: 4.00x")


def test_intensity_and_ridge():
    assert lesson01.ridge_point() == pytest.approx(20.0)
    assert lesson01.softmax_intensity("fused", element_size=4) == pytest.approx(5 / 8)
    # naive: 8MN + 4M elements of 4 bytes for 5MN FLOPs
    M = N = 4096
    assert lesson01.softmax_intensity("naive", 4, M, N) == pytest.approx(5 * M * N / ((8 * M * N + 4 * M) * 4))
    assert lesson01.softmax_intensity("fused", element_size=2) == pytest.approx(5 / 4)
    assert lesson01.softmax_intensity("fused") < lesson01.ridge_point() / 30


def test_print_time_estimate(capsys):
    lesson01.print_time_estimate(4096, 4096)
    out = capsys.readouterr().out
    assert "83.9 MFLOP" in out and "1.3 us" in out
    assert "536.9 MB" in out and "160.3 us" in out
    assert "134.2 MB" in out and "40.1 us" in out


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
    assert torch.tensor(above, dtype=torch.float16).view(torch.int16) - torch.tensor(below, dtype=torch.float16).view(torch.int16) == 1


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


def test_print_float16_sweep(capsys):
    lesson02.print_float16_sweep((10.0, 11.0, 12.0))
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4
    assert lines[1].split()[:3] == ["10.0000", "22032", "33120"]
    assert "[0.0, 0.0, 0.0]" in lines[2] and "[0.0, 0.0, nan]" in lines[3]
    assert all(line.rstrip().endswith("[0.09, 0.245, 0.666]") for line in lines[1:])


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


def test_print_trace_is_rounded_and_stable(capsys):
    lesson02.print_trace(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    out = capsys.readouterr().out
    assert out.splitlines() == [
        "softmax, stable (max shift), in float32",
        "     input      x              [1.0, 2.0, 3.0, 4.0]",
        "  1. max        m = max(x)     4.0",
        "  2. shift      z = x - m      [-3.0, -2.0, -1.0, 0.0]",
        "  3. exp        e = exp(z)     [0.0498, 0.1353, 0.3679, 1.0]",
        "  4. sum        s = sum(e)     1.553",
        "  5. normalize  y = e / s      [0.0321, 0.0871, 0.2369, 0.6439]",
        "     sum of y = 1.0",
    ]


def test_trace_rejects_2d():
    with pytest.raises(ValueError, match="1-D"):
        lesson02.softmax_trace(torch.ones(2, 3))


def test_overflow_and_underflow_tables(capsys):
    lesson02.print_overflow_table()
    lesson02.print_underflow_table()
    out = capsys.readouterr().out
    assert "x = 11.0859375" in out and "x = 11.09375" in out
    assert "x = -17.34375" in out


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
