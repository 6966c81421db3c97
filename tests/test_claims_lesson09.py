"""Lesson 09's prose quotes the recorded peers (figures/data/sampling_peers_h100.csv): each number is
re-derived here with the lesson's own pandas lines."""

from __future__ import annotations

from claims import cell_with, code_cell_with, quotes
from helpers import data

CLAIM = "reaches 0.013 to"


def _peers():
    return data.load("sampling_peers", gpu="h100")


def test_softmax_topk_fraction_of_one_read_at_many_rows():
    big = _peers().query("M >= 64 and provider == 'torch_softmax_topk'")
    text = cell_with("09", CLAIM)
    quotes(text, f"{big.frac_of_one_read.min():.3f} to {big.frac_of_one_read.max():.3f} of one read", "{}")


def test_hugging_face_chain_range():
    hf = _peers().query("provider == 'torch_hf_sample'")
    quotes(cell_with("09", CLAIM), f"{round(hf.ms.min() * 1000)} µs to {round(hf.ms.max(), 1)} ms", "{}")


def test_few_rows_copy_and_pytorch_floor():
    few = _peers().query("M <= 8").assign(us=lambda d: d.ms * 1000)
    copy = few.provider == "copy"
    text = cell_with("09", CLAIM)
    quotes(text, f"the copy takes {few[copy].us.min():.1f} to {few[copy].us.max():.1f} µs", "{}")
    quotes(text, f"spends {few[~copy].us.min():.0f} µs or more", "{}")


def test_the_derivations_are_in_sight():
    cell = code_cell_with("09", 'provider == \'torch_softmax_topk\'"')
    assert "frac_of_one_read.min()" in cell and "hf.ms.min()" in cell and "few[~copy].us.min()" in cell
