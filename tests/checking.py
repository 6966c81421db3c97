"""What the checker tests of every lesson share: run a checker on an attempt and read its one line."""


def verdict(capsys, checker, attempt) -> str:
    """Run ``checker(attempt)`` and return the one line it printed (a checker prints exactly one)."""
    checker(attempt)
    out = capsys.readouterr().out.strip().splitlines()
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
