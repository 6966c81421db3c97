"""tools/sampling_flashinfer.py (FlashInfer beside lesson 09's `sample`): its guard without a GPU, and the
exact distribution its --check compares FlashInfer's and the course's draws with (lesson09.exact_probs at its
temperature, top-k and top-p)."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import helpers

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.needs_triton  # the script imports the course's kernels (helpers.lesson09)


@pytest.mark.skipif(helpers.ON_GPU, reason="on a GPU the script measures for real")
def test_without_a_gpu_it_says_so():
    r = subprocess.run(
        [sys.executable, "tools/sampling_flashinfer.py"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 2 and "has none" in r.stderr


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_checks_distribution_is_the_top_k_then_top_p_distribution(seed):
    sys.path.insert(0, str(ROOT / "tools"))
    import sampling_flashinfer as sf

    from helpers import lesson09

    row = torch.randn(300, generator=torch.Generator().manual_seed(seed)) * (1 + 2 * seed)
    q = lesson09.exact_probs(row, sf.T, sf.K, sf.P)
    p = torch.softmax(row.double() / sf.T, -1)
    kept = q > 0
    assert abs(q.sum().item() - 1) < 1e-12 and 1 <= kept.sum() <= sf.K
    assert kept[p.argmax()]  # the most probable token always stays
    top = p.topk(sf.K).values / p.topk(sf.K).values.sum()  # the top K, renormalized
    n = int(kept.sum())
    assert top[:n].sum() >= sf.P and (n == 1 or top[: n - 1].sum() < sf.P)  # the smallest nucleus of mass P
    assert torch.allclose(q[kept].sort(descending=True).values, top[:n] / top[:n].sum())
    assert (p[kept].min() >= p[~kept].max()) if (~kept).any() else True  # no token kept below one dropped


def test_flashinfer_draws_pass_device_seed_and_offset_and_scale_once():
    """helpers.lesson09.flashinfer_draws, the one definition the benchmark and lesson09.providers use: every call
    gets the same seed and offset tensors (graph-safe), the logits divided by the temperature in float32, the
    prescaled version divides once per tensor, and the caller's logits are never modified."""
    from helpers import lesson09

    calls = []

    class FakeFlashInfer:
        @staticmethod
        def top_k_top_p_sampling_from_logits(z, k, p, seed=None, offset=None):
            calls.append((z, k, p, seed, offset))
            return z.argmax(-1)

    draws = lesson09.flashinfer_draws(FakeFlashInfer)
    x = (torch.randn(3, 100, generator=torch.Generator().manual_seed(0)) * 3).to(helpers.DEVICE, torch.bfloat16)
    before = x.clone()
    draws["flashinfer_sample"](x)
    draws["flashinfer_sample_scaled"](x)
    draws["flashinfer_sample_scaled"](x)
    assert torch.equal(x, before) and len(calls) == 3
    z, k, p, seed, offset = calls[0]
    assert (k, p) == (50, 0.9) and z.dtype == torch.float32 and torch.allclose(z, x.float() / 0.7)
    assert all(c[3] is seed and c[4] is offset and torch.is_tensor(seed) for c in calls)
    assert calls[1][0] is calls[2][0] and calls[1][0] is not calls[0][0]  # scaled once, outside the timed call
