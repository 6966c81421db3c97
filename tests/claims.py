"""Reading a lesson's notebook in its tests: its prose, and the one markdown or code cell that holds a phrase.

The numbers the prose quotes are checked by tests/test_claims.py, against the lesson's own ``claims`` dict; these
helpers serve the tests of what the lessons' cells and text say otherwise (structure, code, wording).
"""

from __future__ import annotations

import json
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def notebook(lesson: str) -> dict:
    """The notebook whose file name starts with ``lesson``: '03' is lesson 03, '03d' its deep dive, '06_split' ..."""
    found = sorted(NOTEBOOKS.glob(f"{lesson}_*.ipynb" if len(lesson) == 2 else f"{lesson}*.ipynb"))
    assert len(found) == 1, f"expected one notebook for {lesson!r}, found {[p.name for p in found]}"
    return json.loads(found[0].read_text())


def prose(lesson: str) -> str:
    """All markdown of a lesson, cells joined by blank lines."""
    return "\n\n".join("".join(c["source"]) for c in notebook(lesson)["cells"] if c["cell_type"] == "markdown")


def cell_with(lesson: str, phrase: str) -> str:
    """The one markdown cell of a lesson that contains ``phrase``."""
    cells = ["".join(c["source"]) for c in notebook(lesson)["cells"] if c["cell_type"] == "markdown"]
    hits = [c for c in cells if phrase in c]
    assert len(hits) == 1, f"{lesson}: expected one markdown cell containing {phrase!r}, found {len(hits)}"
    return hits[0]


def code_cell_with(lesson: str, phrase: str) -> str:
    """The one code cell of a lesson whose source contains ``phrase``."""
    cells = ["".join(c["source"]) for c in notebook(lesson)["cells"] if c["cell_type"] == "code"]
    hits = [c for c in cells if phrase in c]
    assert len(hits) == 1, f"{lesson}: expected one code cell containing {phrase!r}, found {len(hits)}"
    return hits[0]
