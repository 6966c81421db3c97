"""Each lesson notebook survives what learners do to it.

1. "Restart and run all": a fresh kernel (working directory notebooks/) runs every code cell in
   order without an error.
2. "Run any cell twice": in that same kernel, every code cell is run a second time, in order,
   without an error (no cell may depend on running exactly once: deleting a name, consuming an
   iterator, appending to a list that a later check counts, ...).

One kernel per notebook. Cells tagged ``nbval-skip`` (cannot run in CI) are skipped in both passes;
cells tagged ``raises-exception`` may raise. Marked ``slow``: part of ``make test``; deselect with
``-m "not slow"`` while iterating on something else.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = Path(os.environ.get("SOFTMAX_COURSE_NOTEBOOKS", ROOT / "notebooks"))
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb")) + sorted(NOTEBOOK_DIR.glob("[0-9][0-9]d_*.ipynb"))

CELL_TIMEOUT = 300  # seconds, as nbval's --nbval-cell-timeout in the Makefile


def _runnable(cell) -> bool:
    return cell.cell_type == "code" and "nbval-skip" not in cell.get("metadata", {}).get("tags", [])


def _head(cell) -> str:
    lines = cell.source.strip().splitlines()
    return lines[0][:70] if lines else "(empty)"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_run_all_then_each_cell_again(path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=CELL_TIMEOUT,
        kernel_name="python3",
        allow_errors=False,
        resources={"metadata": {"path": str(path.parent)}},
    )
    cells = [(i, c) for i, c in enumerate(nb.cells) if _runnable(c)]
    assert cells, f"{path.name} has no code cells"
    with client.setup_kernel():
        for run in ("first run (restart and run all)", "second run (each cell again)"):
            for i, cell in cells:
                try:
                    client.execute_cell(cell, i)
                except CellExecutionError as e:
                    plain = re.sub(r"\x1b\[[0-9;]*m", "", str(e))  # the traceback's ANSI colours
                    pytest.fail(f"{path.name}, {run}: cell {i} ({_head(cell)!r}) raised:\n{plain}", pytrace=False)
