"""Every exercise, in every lesson: template, then checker, then a collapsed solution, and no line of
the solution on screen before the learner has tried (not in an earlier cell's code, not in an output).

A solution line counts when it is specific enough to give the answer away: code (not a comment), at
least 30 characters once spaces are normalised, and not a line of the exercise's own template. A kernel
exercise extends the lesson's own kernel, so its boilerplate (which program am I, the column offsets,
the masked store) may have been on screen: the test fails when more than two of those lines, or more
than a third of them, were (the issue's cases: a kernel shown "minus the strides", a function shown
line for line).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

_NB = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(_NB.glob("[0-9][0-9]_*.ipynb")) + sorted(_NB.glob("[0-9][0-9]d_*.ipynb"))  # lessons, deep dives
HEADING = re.compile(r"^##+ Exercise (\d+\.\d+)", re.M)


def _src(cell) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _outputs(cell) -> str:
    out = []
    for o in cell.get("outputs", []):
        if "text" in o:
            out.append("".join(o["text"]) if isinstance(o["text"], list) else o["text"])
        for k, v in o.get("data", {}).items():
            if k.startswith("text/"):
                out.append("".join(v) if isinstance(v, list) else v)
    return "\n".join(out)


def _norm(line: str) -> str:
    return " ".join(line.split())


def _exercises(nb):
    """(exercise id, index of the template cell, index of the checker cell, solution text) per exercise."""
    cells = nb["cells"]
    found = []
    for i, c in enumerate(cells):
        m = HEADING.search(_src(c)) if c["cell_type"] == "markdown" else None
        if not m:
            continue
        sol = next(
            (j for j in range(i + 1, len(cells)) if "solution" in cells[j].get("metadata", {}).get("tags", [])), None
        )
        assert sol is not None, f"exercise {m.group(1)}: no cell tagged 'solution' after it"
        code = [j for j in range(i + 1, sol) if cells[j]["cell_type"] == "code"]
        assert len(code) >= 2, f"exercise {m.group(1)}: a template cell and a checker cell before the solution"
        found.append((m.group(1), code[0], code[-1], _src(cells[sol])))
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_solutions_are_collapsed_and_not_on_screen_before_their_checker(path):
    nb = json.loads(path.read_text())
    cells = nb["cells"]
    for ex, template, checker, solution in _exercises(nb):
        assert "<details" in solution and "Show a solution" in solution, f"{path.stem} {ex}: solution not collapsed"
        blocks = re.findall(r"```python\n(.*?)```", solution, re.S)
        template_lines = {_norm(line) for line in _src(cells[template]).splitlines()}
        lines = {_norm(line) for b in blocks for line in b.splitlines()}
        lines = {line for line in lines if len(line) >= 30 and not line.startswith("#") and line not in template_lines}
        shown_lines: set[str] = set()
        for k in range(checker):
            if k == template:
                continue
            c = cells[k]
            shown = (
                ("\n".join(_norm(line) for line in _src(c).splitlines()) if c["cell_type"] == "code" else "")
                + "\n"
                + "\n".join(_norm(line) for line in _outputs(c).splitlines())
            )
            shown_lines |= set(shown.splitlines())
        leaked = sorted(line for line in lines if line in shown_lines)
        assert len(leaked) <= max(2, len(lines) // 3), (
            f"{path.stem}: {len(leaked)} of the {len(lines)} lines of exercise {ex}'s solution are on screen "
            f"before its checker (cell {checker}): {leaked[:4]}"
        )


def test_every_kernel_lesson_has_an_exercise():
    for path in NOTEBOOKS:
        if path.name[:2] >= "03" and path.name[2] == "_":  # core lessons; a deep dive needs none
            assert _exercises(json.loads(path.read_text())), f"{path.stem} has no exercise"
