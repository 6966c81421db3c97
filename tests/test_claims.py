"""Each number a lesson's prose quotes lives in one place: the lesson's ``claims`` dict.

A notebook that reads recorded data starts ``claims = {}`` in a code cell. The visible cell that derives a number
the text quotes puts it there, as the text writes it: ``claims["naive / fused, GPU time"] = f"{lo:.1f} to {hi:.1f}
times"`` (or ``claims |= {...}`` for several). One cell near the end shows the dict: its source is just ``claims``.

nbval re-runs every notebook and fails when a stored output differs from what the cell computes now, so the shown
dict is what the data give. This file checks the rest, for every entry of every notebook: the text quotes it. No
number is derived here: a test that re-derived it would be a third copy of the notebook's lines.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
MAX_LINE = 120  # characters, as ruff's line-length for the package
MAX_VALUE = 100  # characters of one entry: the number and the few words around it that pin it in the text
LESSONS = sorted(NOTEBOOKS.glob("[0-9][0-9]*_*.ipynb"))


def source(cell: dict) -> str:
    return "".join(cell["source"])


def markdown(nb: dict) -> str:
    """The notebook's prose, whitespace folded to single spaces (a quoted phrase may wrap across lines)."""
    return " ".join(" ".join(source(c) for c in nb["cells"] if c["cell_type"] == "markdown").split())


def shown(nb: dict) -> dict | None:
    """The dict the notebook's ``claims`` cell shows in its stored output, or None if it has no such cell."""
    cells = [c for c in nb["cells"] if c["cell_type"] == "code" and source(c).strip() == "claims"]
    if not cells:
        return None
    assert len(cells) == 1, f"one cell shows claims; found {len(cells)}"
    results = [o for o in cells[0].get("outputs", []) if o.get("output_type") == "execute_result"]
    assert results, "the cell `claims` has no stored output: re-execute the notebook (tools/execute_notebooks.py)"
    text = results[0]["data"]["text/plain"]
    value = ast.literal_eval(text if isinstance(text, str) else "".join(text))
    assert isinstance(value, dict), f"`claims` shows a {type(value).__name__}, not a dict"
    return value


def _computed(node: ast.expr) -> bool:
    """A value computed from the data: not a literal, and an f-string with at least one field."""
    if isinstance(node, ast.Constant):
        return False
    if isinstance(node, ast.JoinedStr):
        return any(isinstance(v, ast.FormattedValue) for v in node.values)
    return True


def _trees(nb: dict):
    """(cell index, parsed source) of each code cell, IPython's % and ! lines left out."""
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            lines = [ln for ln in source(cell).splitlines() if not ln.lstrip().startswith(("%", "!"))]
            yield i, ast.parse("\n".join(lines)), lines


def _functions(nb: dict) -> set[str]:
    """The names the notebook's cells bind to a function of their own (def or lambda)."""
    names = set()
    for _, tree, _ in _trees(nb):
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Lambda):
                names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def assigned(nb: dict) -> dict[str, int]:
    """Each key the code cells put into ``claims``, with the index of the cell that does it. Raises AssertionError for
    a key put twice, a key that is not a plain string, a value written as a literal rather than computed, a value
    composed by a function of the notebook's own (the text is written in the markdown, not by code), or a statement
    with a line over MAX_LINE characters."""
    keys: dict[str, int] = {}
    functions = _functions(nb)
    for i, tree, lines in _trees(nb):
        pairs = []
        for node in ast.walk(tree):
            puts = False
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == "claims":
                        pairs.append((t.slice, node.value))
                        puts = True
            elif isinstance(node, ast.AugAssign) and getattr(node.target, "id", None) == "claims":
                assert isinstance(node.value, ast.Dict), f"cell {i}: write `claims |= {{...}}` with a dict literal"
                pairs += list(zip(node.value.keys, node.value.values))
                puts = True
            if puts:
                long = [ln for ln in lines[node.lineno - 1 : node.end_lineno] if len(ln) > MAX_LINE]
                assert not long, f"cell {i}: a line that puts claims is over {MAX_LINE} characters: {long[0][:80]}..."
        for key, value in pairs:
            assert isinstance(key, ast.Constant) and isinstance(key.value, str), f"cell {i}: a claims key is a string"
            assert key.value not in keys, f"{key.value!r} is put into claims twice (cells {keys[key.value]} and {i})"
            assert _computed(value), f"cell {i}: claims[{key.value!r}] is written out, not computed from the data"
            called = {n.func.id for n in ast.walk(value) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
            assert not called & functions, (
                f"cell {i}: claims[{key.value!r}] is composed by the notebook's own {sorted(called & functions)}: "
                "put the number, formatted, and let the markdown say the words"
            )
            keys[key.value] = i
    return keys


def check(nb: dict) -> None:
    """Everything this file asks of one notebook but the quotes themselves (test_the_text_quotes_each_claim)."""
    claims = shown(nb)
    uses_data = any("data.load(" in source(c) for c in nb["cells"] if c["cell_type"] == "code")
    if claims is None:
        assert not uses_data, "the notebook reads recorded data but has no cell `claims` showing what its text quotes"
        return
    keys = assigned(nb)
    assert claims, "`claims` is empty: put each number the text quotes into it where a cell derives it"
    assert set(claims) == set(keys), (
        f"the shown claims and the cells that put them differ: shown only {sorted(set(claims) - set(keys))}, "
        f"put only {sorted(set(keys) - set(claims))}"
    )
    code = [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"]
    starts = [
        i for i in code if any(ln.split("#")[0].strip() == "claims = {}" for ln in source(nb["cells"][i]).splitlines())
    ]
    assert len(starts) == 1, f"one cell starts `claims = {{}}`; found {len(starts)}"
    last = next(i for i in code if source(nb["cells"][i]).strip() == "claims")
    assert starts[0] < min(keys.values()) and max(keys.values()) < last, (
        "`claims = {}` comes before the cells that fill it, and the cell that shows it after them"
    )
    for key, value in claims.items():
        assert isinstance(value, str) and value.strip(), f"claims[{key!r}] should be the text as quoted, got {value!r}"
        assert len(value) <= MAX_VALUE, (
            f"claims[{key!r}] is {len(value)} characters: an entry is the number and the few words around it, not a "
            f"sentence (at most {MAX_VALUE}): {value[:120]!r}"
        )


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_claims_are_put_where_they_are_derived_and_shown(path):
    check(_load(path))


def _entries():
    for path in LESSONS:
        try:
            claims = shown(_load(path)) or {}
        except (AssertionError, SyntaxError, ValueError):  # test_claims_are_put_where_... says what is wrong
            continue
        for key, value in claims.items():
            yield pytest.param(path, key, value, id=f"{path.stem[:3].rstrip('_')}: {key}")


def quoted(nb: dict, key: str, value: str) -> None:
    """Assert that the notebook's text quotes ``value``, the entry ``key`` of its claims."""
    assert " ".join(value.split()) in markdown(nb), (
        f"claims[{key!r}] is {value!r} (from the data, as the cell that derives it writes it), but the text does "
        f"not quote it: correct the number in the markdown, or the cell if the text is right"
    )


@pytest.mark.parametrize("path, key, value", list(_entries()))
def test_the_text_quotes_each_claim(path, key, value):
    quoted(_load(path), key, value)


def test_every_notebook_that_reads_recorded_data_has_claims():
    with_claims = [p.stem[:3] for p in LESSONS if shown(_load(p)) is not None]
    assert len(with_claims) >= 14, with_claims  # 03 to 09 and their deep dives


# ---- the checks themselves, on small notebooks: each fails on the mistake it is for --------------------------------


def _nb(*cells: tuple[str, str], shows: str | None = None) -> dict:
    out = []
    for kind, text in cells:
        cell = {"cell_type": kind, "source": text, "metadata": {}}
        if kind == "code":
            outputs = []
            if text.strip() == "claims":
                outputs = [{"output_type": "execute_result", "data": {"text/plain": shows}, "metadata": {}}]
            cell |= {"outputs": outputs, "execution_count": None}
        out.append(cell)
    return {"cells": out}


GOOD = (
    ("code", "claims = {}  # what the text quotes\nx = data.load('bench')"),
    ("code", 'lo, hi = 4.46, 6.76\nclaims["speed-up"] = f"{lo:.1f} to {hi:.1f} times"'),
    ("markdown", "The fused kernel is\n4.5 to 6.8 times faster."),
    ("code", "claims"),
)


def test_a_right_notebook_passes():
    nb = _nb(*GOOD, shows="{'speed-up': '4.5 to 6.8 times'}")
    check(nb)
    assert shown(nb) == {"speed-up": "4.5 to 6.8 times"}
    quoted(nb, "speed-up", "4.5 to 6.8 times")  # across the markdown's line break


def test_text_that_quotes_another_number_fails():
    nb = _nb(*GOOD, shows="{'speed-up': '4.4 to 6.8 times'}")
    check(nb)  # well formed ...
    with pytest.raises(AssertionError, match="does not quote it"):
        quoted(nb, "speed-up", shown(nb)["speed-up"])  # ... but the data say 4.4 where the text says 4.5


@pytest.mark.parametrize(
    "cells, shows, says",
    [
        (GOOD[:3] + (("code", "claims"),), "{}", "empty"),
        (GOOD[:1] + (("code", 'claims["speed-up"] = "4.5 to 6.8 times"'),) + GOOD[2:], None, "not computed"),
        (GOOD[:1] + (("code", 'claims["speed-up"] = f"4.5 to 6.8 times"'),) + GOOD[2:], None, "not computed"),
        (GOOD + (("code", 'claims["speed-up"] = f"{1:.1f}"'),), None, "twice"),
        (GOOD[:3], None, "no cell `claims`"),
        ((GOOD[1], GOOD[0]) + GOOD[2:], None, "comes before"),
        (GOOD[:2] + (("code", 'claims |= {"other": f"{2:.1f}"}'),) + GOOD[2:], None, "differ"),
    ],
    ids=["empty", "literal", "f-string without a field", "put twice", "no claims cell", "order", "not shown"],
)
def test_each_mistake_fails(cells, shows, says):
    nb = _nb(*cells, shows=shows or "{'speed-up': '4.5 to 6.8 times'}")
    with pytest.raises(AssertionError, match=says):
        check(nb)
