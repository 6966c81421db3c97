"""The cooperative split kernel never returns a silently wrong result: a program that gives up
waiting for its row's other slices (MAX_SPIN polls) reads the whole row and computes the row's
statistics itself, and counts the event. Forced here with a tiny spin limit: under the interpreter
programs run one after another, so every program but the last of each row gives up."""

import pytest
import torch
import triton

import helpers
from helpers.kernels import softmax_split_coop_kernel
from helpers.mode import DEVICE


def _launch(x, slice_cols, rows_per_round, max_spin):
    M, N = x.shape
    n_slices = triton.cdiv(N, slice_cols)
    out = torch.full_like(x, float("nan"))
    ws = torch.zeros(2 * M * n_slices + M + 1, dtype=torch.int32, device=DEVICE)
    counts = ws[2 * M * n_slices:]  # after the (m, d) pairs: a counter per row, then the timeouts
    softmax_split_coop_kernel[(rows_per_round * n_slices,)](
        out, x, ws, x.stride(0), x.stride(1), out.stride(0), M, N, n_slices, rows_per_round,
        SLICE=slice_cols, SLICES_P2=triton.next_power_of_2(n_slices), MAX_SPIN=max_spin,
        **({"launch_cooperative_grid": True} if helpers.ON_GPU else {}))
    return out, counts


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_timed_out_wait_still_gives_the_right_answer(dtype):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(5, 300, generator=g) * 5).to(dtype)
    x[1] = float("-inf")          # a row of -inf: NaN, as torch.softmax
    x[2, :100] = float("-inf")    # a row whose first slices are all -inf
    x[3, 7] = 1e4                 # a huge spread
    x = x.to(DEVICE)
    out, counts = _launch(x, slice_cols=64, rows_per_round=2, max_spin=1)
    helpers.assert_matches_reference(out, x)
    timeouts = int(counts[-1])
    if helpers.INTERPRETER:  # every program but the last of each row and round gave up
        assert timeouts == 5 * 5 - 5
    assert counts[:-1].tolist() == [5] * 5  # every slice was still counted in


def test_a_healthy_launch_never_times_out():
    """The wrapper's spin limit is far above what a resident grid needs: no program gives up."""
    if not helpers.ON_GPU:
        pytest.skip("the interpreter runs programs one after another: only a GPU runs them concurrently")
    x = torch.randn(8, 1 << 20, device=DEVICE)
    out, counts = _launch(x, slice_cols=8192, rows_per_round=1, max_spin=helpers.kernels.MAX_SPIN)
    helpers.assert_matches_reference(out, x)
    assert int(counts[-1]) == 0
