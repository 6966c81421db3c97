"""helpers.exercises: a checker prints exactly one deterministic line and never raises."""

from __future__ import annotations

import pytest
import torch
from helpers import exercises as ex
from helpers.exercises import CORRECT, NOT_YET, WRONG, Wrong, check, expect_close, fmt


def run(capsys, attempt, trial, **kw):
    v = check("1.1", "softmax by hand", attempt, trial, **kw)
    out = capsys.readouterr().out
    return v, out


def assert_one_line(out, v):
    assert out.count("\n") == 1 and out.endswith("\n"), repr(out)
    assert out == v.line + "\n"
    assert out.startswith("Exercise 1.1 (softmax by hand): ")


def softmax_trial(f):
    x = torch.tensor([[1.0, 2.0]])
    return f"max abs error {expect_close(f(x), torch.softmax(x, -1), inputs=x):.1e}"


@pytest.mark.parametrize("attempt", [None, Ellipsis, NotImplemented], ids=["None", "Ellipsis", "NotImplemented"])
def test_unattempted_is_not_yet(capsys, attempt):
    called = []
    v, out = run(capsys, attempt, lambda a: called.append(a))
    assert_one_line(out, v)
    assert v.status == NOT_YET and not v.ok
    assert called == [], "the trial must not run on an unattempted answer"
    assert out == "Exercise 1.1 (softmax by hand): not yet: fill in your answer above, then run this cell again\n"


def test_template_raising_not_implemented_is_not_yet(capsys):
    def template(x):
        raise NotImplementedError  # your code here

    v, out = run(capsys, template, softmax_trial)
    assert_one_line(out, v)
    assert v.status == NOT_YET
    assert "replace `raise NotImplementedError` with your code" in out


def test_function_returning_none_or_ellipsis_is_not_yet(capsys):
    for ret in (None, ...):
        v, out = run(capsys, lambda x, r=ret: r, softmax_trial)
        assert_one_line(out, v)
        assert v.status == NOT_YET


def test_wrong_answer(capsys):
    v, out = run(capsys, lambda x: torch.full_like(x, 0.5), softmax_trial)
    assert_one_line(out, v)
    assert v.status == WRONG and not v.ok
    assert out == (
        "Exercise 1.1 (softmax by hand): wrong: on input [[1.0, 2.0]] "
        "expected [[0.2689, 0.7311]], got [[0.5, 0.5]]\n"
    )


def test_wrong_raised_by_the_trial(capsys):
    def trial(a):
        raise Wrong("your function returned a list, not a tensor")

    v, out = run(capsys, lambda x: [0.5], trial)
    assert_one_line(out, v)
    assert v.status == WRONG and v.detail == "your function returned a list, not a tensor"


@pytest.mark.parametrize(
    "exc, expected",
    [
        (ZeroDivisionError("division by zero"), "your code raised ZeroDivisionError: division by zero"),
        (ValueError(""), "your code raised ValueError"),
        (RuntimeError("first line\nsecond line\nthird"), "your code raised RuntimeError: first line"),
        (KeyError("dim"), "your code raised KeyError: 'dim'"),
        (IndexError("  padded  "), "your code raised IndexError: padded"),
    ],
    ids=["zero-division", "no-message", "multi-line", "key-error", "padded"],
)
def test_any_other_exception_is_wrong_and_never_crashes(capsys, exc, expected):
    def attempt(x):
        raise exc

    v, out = run(capsys, attempt, softmax_trial)
    assert_one_line(out, v)
    assert v.status == WRONG
    assert v.detail == expected


def test_exception_in_the_trial_itself_is_reported_not_raised(capsys):
    v, out = run(capsys, 42, lambda a: a.no_such_attribute)
    assert_one_line(out, v)
    assert v.status == WRONG and "AttributeError" in v.detail


def test_correct(capsys):
    v, out = run(capsys, lambda x: torch.softmax(x, -1), softmax_trial)
    assert_one_line(out, v)
    assert v.status == CORRECT and v.ok
    assert out.startswith("Exercise 1.1 (softmax by hand): correct: max abs error ")


def test_correct_without_detail(capsys):
    v, out = run(capsys, 3, lambda a: None)
    assert out == "Exercise 1.1 (softmax by hand): correct\n"
    assert str(v) == v.line == out.rstrip("\n")


def test_show_false_prints_nothing(capsys):
    v, out = run(capsys, lambda x: torch.softmax(x, -1), softmax_trial, show=False)
    assert out == "" and v.ok


def test_the_line_is_deterministic(capsys):
    lines = set()
    for _ in range(3):
        _, out = run(capsys, lambda x: torch.full_like(x, 0.5), softmax_trial)
        lines.add(out)
    assert len(lines) == 1


def test_a_multi_line_wrong_message_still_prints_one_line(capsys):
    """A trial may quote the learner's value in Wrong (a 2-D tensor's repr spans lines); the
    verdict is still one line, as the module promises."""
    got = torch.zeros(2, 2)

    def trial(a):
        raise Wrong(f"expected a probability distribution, got {got}")

    v, out = run(capsys, got, trial)
    assert out.count("\n") == 1, f"printed {out.count(chr(10))} lines: {out!r}"


# ------------------------------------------------------------------------------------------
# expect_close
# ------------------------------------------------------------------------------------------


EXPECTED = torch.tensor([[0.25, 0.75]])


def test_expect_close_returns_the_max_abs_error():
    got = torch.tensor([[0.25 + 1e-6, 0.75]], dtype=torch.float64)
    assert expect_close(got, EXPECTED) == pytest.approx(1e-6, rel=1e-3)
    assert expect_close(EXPECTED.clone(), EXPECTED) == 0.0


@pytest.mark.parametrize("got", [None, Ellipsis], ids=["None", "Ellipsis"])
def test_expect_close_unattempted_is_not_implemented(got):
    with pytest.raises(NotImplementedError):
        expect_close(got, EXPECTED)


@pytest.mark.parametrize("got, words", [
    ([[0.25, 0.75]], "expected a torch.Tensor, got list"),
    (0.5, "expected a torch.Tensor, got float"),
    (torch.tensor([0.25, 0.75]), "expected shape (1, 2), got (2,)"),
    (torch.tensor([[0.5, 0.5]]), "expected [[0.25, 0.75]], got [[0.5, 0.5]]"),
    (torch.tensor([[float("nan"), 0.75]]), "NaN in different places"),
    (torch.tensor([[float("inf"), 0.75]]), "expected [[0.25, 0.75]], got [[inf, 0.75]]"),
])
def test_expect_close_wrong(got, words):
    with pytest.raises(Wrong) as info:
        expect_close(got, EXPECTED)
    assert words in str(info.value)


def test_expect_close_names_the_input_and_what():
    x = torch.tensor([[0.0, 1.0986]])
    with pytest.raises(Wrong, match=r"^on input \[\[0.0, 1.0986\]\] expected"):
        expect_close(torch.tensor([[0.5, 0.5]]), EXPECTED, inputs=x)
    with pytest.raises(Wrong, match=r"expected a torch.Tensor for the output, got int"):
        expect_close(3, EXPECTED, what=" for the output")


def test_expect_close_tolerances():
    base = torch.tensor([[1.0, 100.0]], dtype=torch.float64)
    expect_close(base + torch.tensor([[0.0, 0.009]], dtype=torch.float64), base, atol=1e-3, rtol=1e-4)
    with pytest.raises(Wrong):
        expect_close(base + torch.tensor([[0.0, 0.012]], dtype=torch.float64), base, atol=1e-3, rtol=1e-4)


def test_expect_close_matching_nans():
    e = torch.tensor([[float("nan"), float("nan")], [0.5, 0.5]])
    assert expect_close(e.clone(), e) == 0.0
    assert expect_close(torch.full((1, 2), float("nan")), torch.full((1, 2), float("nan"))) == 0.0


def test_expect_close_does_not_modify_its_arguments():
    got = torch.tensor([[0.25, 0.75]], dtype=torch.float16)
    exp = EXPECTED.clone()
    expect_close(got, exp, atol=1e-3)
    assert got.dtype == torch.float16 and torch.equal(exp, EXPECTED)


# ------------------------------------------------------------------------------------------
# fmt
# ------------------------------------------------------------------------------------------


def test_fmt():
    assert fmt(torch.tensor([[1.0, 2.0 / 3.0]])) == "[[1.0, 0.6667]]"
    assert fmt(torch.tensor([1, 2, 3])) == "[1, 2, 3]"
    assert fmt(torch.zeros(3, 3)) == "tensor of shape (3, 3)"
    assert fmt(2.0 / 3.0, digits=2) == "0.67"
    assert fmt(torch.tensor(0.123456)) == "0.1235"
    assert fmt(torch.tensor([1.0], dtype=torch.bfloat16)) == "[1.0]"
    for text in (fmt(torch.ones(2)), fmt(torch.ones(20))):
        assert "device" not in text and "tensor(" not in text


def test_verdict_line():
    v = ex.Verdict("2.3", "online max", WRONG, "off by one")
    assert v.line == "Exercise 2.3 (online max): wrong: off by one" and not v.ok
    assert ex.Verdict("2.3", "online max", CORRECT).line == "Exercise 2.3 (online max): correct"
