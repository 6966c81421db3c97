"""Lesson 09 teaches its top-k as two short kernels with a plain launch (`softmax_topk_two_kernels`); the library's
`softmax_topk` runs the deep dive's production kernels. The lesson's own cells, taken from the notebook, must give
what the library gives on the same inputs: the same columns, the same probabilities up to float32 rounding."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
import torch

import helpers  # noqa: F401  (first: interpreter or GPU)
from helpers import lesson09
from helpers.kernels import sampling
from helpers.mode import DEVICE

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "09_vocab_sampling.ipynb"
CELLS = ("def topk_keys(", "def topk_slice_kernel(", "def topk_merge_kernel(", "def softmax_topk_two_kernels(")


@pytest.fixture(scope="module")
def lesson(tmp_path_factory):
    """The lesson's cells (the keys, its two kernels and their launch) as a module: Triton reads kernels' source."""
    code = ["".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == "code"]
    found = []
    for start in CELLS:
        hits = [c for c in code if start in c]
        assert len(hits) == 1, f"expected one code cell of lesson 09 defining {start!r}, found {len(hits)}"
        found.append("\n".join(line for line in hits[0].splitlines() if not line.startswith("#| export:")))
    folder = tmp_path_factory.mktemp("lesson09_cells")
    (folder / "lesson09_cells.py").write_text(
        "import torch\nimport triton\nimport triton.language as tl\n\n\n" + "\n\n\n".join(found) + "\n"
    )
    import sys

    sys.path.insert(0, str(folder))
    try:
        yield importlib.import_module("lesson09_cells")
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("lesson09_cells", None)


def _cases():
    g = torch.Generator().manual_seed(3)
    flat = torch.zeros(2, 700)
    flat[1, ::5] = 1.0  # many ties at the top: the lower column first on every path
    return lesson09.topk_cases() + [
        ("3 rows of 1000, k = 50", torch.randn(3, 1000, generator=g) * 3, 50),
        ("a rising row, k = 64", torch.linspace(-300, 300, 900).reshape(1, 900), 64),
        ("ties, k = 20", flat, 20),
        ("bfloat16, 2 rows of 2000, k = 50", (torch.randn(2, 2000, generator=g) * 3).to(torch.bfloat16), 50),
    ]


@pytest.mark.parametrize("name, x, k", _cases(), ids=[c[0] for c in _cases()])
def test_the_lessons_two_kernels_agree_with_the_library(lesson, name, x, k):
    x = x.to(DEVICE)
    mine_p, mine_i = lesson.softmax_topk_two_kernels(x, k)
    for library in (sampling.softmax_topk, sampling.topk_per_program, sampling.topk_by_lanes):
        lib_p, lib_i = library(x, k)
        assert mine_p.shape == lib_p.shape and mine_p.dtype == lib_p.dtype, (name, library.__name__)
        assert torch.equal(mine_i.cpu(), lib_i.cpu()), (name, library.__name__)
        tol = dict(rtol=1e-2, atol=1e-3) if x.dtype == torch.bfloat16 else dict(rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(mine_p.float().cpu(), lib_p.float().cpu(), equal_nan=True, **tol)


def test_the_lessons_two_kernels_against_float64_and_other_cuts(lesson):
    assert lesson09.check_softmax_topk(lesson.softmax_topk_two_kernels)
    x = (torch.randn(2, 1500, generator=torch.Generator().manual_seed(4)) * 3).to(DEVICE)
    want = lesson.softmax_topk_two_kernels(x, 10)
    for slices, block in ((1, 128), (7, 64), (16, 32)):  # other cuts of the same rows: the same top 10
        got = lesson.softmax_topk_two_kernels(x, 10, slices=slices, BLOCK=block)
        assert torch.equal(got[1], want[1]), (slices, block)
        torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-7)
