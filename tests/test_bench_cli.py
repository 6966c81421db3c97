"""The benchmark's command line on a machine without a GPU: a clear message and exit status 2."""

import subprocess
import sys
from pathlib import Path

import pytest

import helpers

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(helpers.ON_GPU, reason="on a GPU the benchmark runs for real")
@pytest.mark.needs_triton  # `python -m helpers.bench` imports Triton
@pytest.mark.parametrize("what", ["sweep", "lessons", "tune"])
def test_bench_without_a_gpu_says_so(what):
    r = subprocess.run([sys.executable, "-m", "helpers.bench", what], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "needs an NVIDIA GPU" in r.stderr and "figures/data/" in r.stderr


def test_bench_summary_compares_softmax_with_the_best_peer():
    """GPU time and eager time are compared separately: the best peer of each may differ."""
    from helpers.bench import summary

    row = lambda p, g, e: dict(dtype="float32", M=4, N=8, provider=p, graph_frac=g, frac_of_copy=e, host_us=7.0,
                               status="ok")
    rows = [row("torch_softmax", 0.5, 0.8), row("torch_compile", 0.75, 0.6), row("liger", 0.7, 0.5),
            row("softmax", 0.9, 0.95), dict(row("triton_tutorial", 0.99, 0.99), status="failed: x")]
    line = summary(rows).splitlines()[1]
    assert "0.900 0.950" in line
    assert "0.750 (torch_compile)" in line and "0.800 (torch_softmax)" in line  # a failed peer never counts
