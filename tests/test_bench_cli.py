"""The benchmark's command line on a machine without a GPU: a clear message and exit status 2."""

import subprocess
import sys
from pathlib import Path

import pytest

import helpers

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(helpers.ON_GPU, reason="on a GPU the benchmark runs for real")
@pytest.mark.parametrize("what", ["sweep", "lessons", "tune"])
def test_bench_without_a_gpu_says_so(what):
    r = subprocess.run([sys.executable, "-m", "helpers.bench", what], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "needs an NVIDIA GPU" in r.stderr and "figures/data/" in r.stderr


def test_bench_summary_compares_softmax_with_the_best_peer():
    from helpers.bench import summary

    rows = [
        dict(dtype="float32", M=4, N=8, provider="torch_softmax", frac_of_copy=0.5),
        dict(dtype="float32", M=4, N=8, provider="torch_compile", frac_of_copy=0.75),
        dict(dtype="float32", M=4, N=8, provider="softmax", frac_of_copy=0.9),
    ]
    line = summary(rows).splitlines()[1].split()
    assert line[-1] == "torch_compile" and float(line[-2]) == 0.75 and float(line[-3]) == 0.9
