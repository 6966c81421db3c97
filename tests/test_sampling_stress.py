"""tools/sampling_stress.py: its checks reject the wrong results they exist for, and a short run passes (on a CPU
under the interpreter, with small shapes; on a GPU for SAMPLING_STRESS_SECONDS, 30 by default)."""

from __future__ import annotations

import os

import pytest
import sampling_stress as stress
import torch

import helpers  # noqa: F401  (first: interpreter or GPU)
from helpers.kernels import sampling_step
from helpers.mode import DEVICE, ON_GPU


def _x():
    x = torch.tensor(
        [
            [0.5, 2.0, 2.0, -1.0, float("-inf"), 1.0],
            [0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            [1.0, float("nan"), 0.0, 0.0, 0.0, 0.0],
        ],
        device=DEVICE,
    )
    return x


def test_sample_checks_accept_the_right_draws():
    x = _x()
    stress.check_sample(x, torch.tensor([1, 3, -1], device=DEVICE), 1.0, None, None)  # any column of probability > 0
    stress.check_sample(x, torch.tensor([2, 1, -1], device=DEVICE), 1.0, 2, None)  # row 0: columns 1 and 2
    stress.check_sample(x, torch.tensor([1, 0, -1], device=DEVICE), 0, None, None)  # greedy: the lower of the tied


@pytest.mark.parametrize(
    "ids, temperature, top_k, top_p, why",
    [
        ([5, 0, -1], 1.0, 2, None, "outside the top k"),
        ([1, 2, -1], 1.0, 2, None, "ties: row 1's top 2 are columns 0 and 1"),
        ([4, 0, -1], 1.0, None, None, "a column of probability 0 (-inf)"),
        ([1, 0, 0], 1.0, None, None, "a row with a NaN draws -1"),
        ([2, 0, -1], 0, None, None, "greedy takes the lower of two tied maxima"),
        ([5, 0, -1], 1.0, None, 0.5, "outside the nucleus (columns 1 and 2 hold 0.76)"),
    ],
)
def test_sample_checks_reject_wrong_draws(ids, temperature, top_k, top_p, why):
    with pytest.raises(stress.WrongResult):
        stress.check_sample(_x(), torch.tensor(ids, device=DEVICE), temperature, top_k, top_p)


def test_topk_checks_reject_wrong_columns_and_probabilities():
    x = _x()[:2]
    p = torch.softmax(x.double(), -1)
    right = torch.tensor([[1, 2, 5], [0, 1, 2]], device=DEVICE)
    stress.check_topk(x, p.gather(-1, right).float(), right, 3)
    for wrong in ([[2, 1, 5], [0, 1, 2]], [[1, 2, 5], [0, 1, 3]]):  # tied columns swapped; a tie not the lowest
        idx = torch.tensor(wrong, device=DEVICE)
        with pytest.raises(stress.WrongResult, match="columns"):
            stress.check_topk(x, p.gather(-1, idx).float(), idx, 3)
    with pytest.raises(stress.WrongResult, match="probabilities"):
        stress.check_topk(x, p.gather(-1, right).float() * 1.01, right, 3)


def test_a_run_catches_a_sampler_that_draws_outside_the_top_k():
    def off_by_one(x, top_k=None, **kw):  # the column just past the top k (or the least likely one)
        order = stress.stable_order(x)
        return order[:, min(top_k, x.shape[1] - 1)] if top_k else order[:, -1]

    with pytest.raises(stress.WrongResult, match="drew column"):
        stress.run(calls=60, small=True, seed=3, fns={"sample": off_by_one}, log=lambda *_: None)


@pytest.mark.skipif(ON_GPU, reason="on a GPU the timed run below runs instead")
def test_a_short_run_on_the_interpreter_passes():
    counts = stress.run(calls=10, small=True, seed=0, log=lambda *_: None)
    assert sum(c["calls"] for c in counts.values()) > 0


@pytest.mark.skipif(not ON_GPU, reason="needs a GPU: a timed run of the compiled kernels")
def test_a_timed_run_on_the_gpu_passes(monkeypatch):
    monkeypatch.setattr(helpers.launch, "MAX_ENTRIES", 24)  # the ready functions dropped and made again
    counts = stress.run(seconds=float(os.environ.get("SAMPLING_STRESS_SECONDS", 30)), log=lambda *_: None)
    paths = set(counts)
    assert {"sample top_k lanes", "sample top_k per_program", "softmax_topk lanes"} <= paths, paths
    assert sampling_step.MAX_K == 1024
