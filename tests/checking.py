"""What the checker tests of every lesson share: run a checker on an attempt and read its one line."""


def verdict(capsys, checker, attempt) -> str:
    """Run ``checker(attempt)`` and return the verdict line it printed. A checker prints exactly one, but for a
    correct Triton kernel run under the interpreter, which gets a second: its traffic (helpers.traffic), printed
    exactly when the check launched the learner's kernel."""
    from helpers import exercises

    checker(attempt)
    out = capsys.readouterr().out.strip().splitlines()
    launched = bool(exercises.TRAFFIC)
    if out and "): correct" in out[0] and launched:
        assert len(out) == 2 and out[1].startswith("Traffic: your kernel reads its input"), out
    else:
        assert len(out) == 1, out
    return out[0]


def status(line: str) -> str:
    """'correct: ...', 'not yet: ...' or 'wrong: ...' from a verdict line."""
    return line.split("): ", 1)[1]


def _untouched(*args):
    """An attempt as the template leaves it."""
    raise NotImplementedError


def _raises(*args):
    """An attempt whose code fails."""
    return 1 / 0


def assert_checker_contract(capsys, checker, right, wrong, hint: str) -> None:
    """What every checker owes the learner: "correct" for the right answer, "not yet" for the untouched
    template (or None), "wrong" with ``hint`` for a plausible wrong answer, "wrong: your code raised"
    for code that fails, "wrong" for a missing return; one line each time, never an exception."""
    assert status(verdict(capsys, checker, right)).startswith("correct")
    assert status(verdict(capsys, checker, _untouched)).startswith("not yet")
    assert status(verdict(capsys, checker, None)).startswith("not yet")
    line = verdict(capsys, checker, wrong)
    assert status(line).startswith("wrong") and hint in line, line
    line = verdict(capsys, checker, _raises)
    assert status(line).startswith("wrong: your code raised ZeroDivisionError"), line
    assert status(verdict(capsys, checker, lambda *a: None)).startswith("wrong")
