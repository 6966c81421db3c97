"""Every committed figure is what `make figures` (tools/figures.py) draws from the data it cites: each PNG under
figures/ has a drawing function, and a figure drawn now matches its PNG (matplotlib's own image comparison, with the
pinned matplotlib of constraints.txt; a stale PNG fails here: run `make figures`)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from matplotlib.testing.compare import compare_images

import figures as figure_tool
import helpers  # noqa: F401  (first: interpreter or GPU)

ROOT = Path(__file__).resolve().parent.parent
FIGS = figure_tool.all_figures()  # without Triton: the lessons 01-02 and the README's that import without it


def test_every_committed_figure_has_a_drawing_function():
    committed = {p.stem for p in (ROOT / "figures").glob("*.png")}
    if not helpers.HAS_TRITON:
        pytest.skip("the kernel lessons' figures need their modules, which need Triton")
    assert committed == set(FIGS), (
        f"drawn but not committed: {sorted(set(FIGS) - committed)}; committed but "
        f"drawn by nothing: {sorted(committed - set(FIGS))}"
    )


@pytest.mark.parametrize("name", sorted(FIGS))
def test_a_committed_figure_matches_its_redraw(name, tmp_path):
    fig = FIGS[name]()
    try:
        drawn = tmp_path / f"{name}.png"
        drawn.write_bytes(helpers.plots.png_bytes(fig))
    finally:
        plt.close(fig)
    committed = ROOT / "figures" / f"{name}.png"
    assert committed.exists(), f"figures/{name}.png is missing: run `make figures`"
    diff = compare_images(str(committed), str(drawn), tol=2)
    assert diff is None, f"figures/{name}.png no longer matches what its data draw (run `make figures`): {diff}"
