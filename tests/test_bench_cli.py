"""The benchmark's command line (tools/bench.py, `make bench`) on a machine without a GPU: a clear
message and exit status 2; its summary, and its figures (tools/bench_plots.py, in `make figures`)."""

import subprocess
import sys
from pathlib import Path

import pytest

import helpers

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(helpers.ON_GPU, reason="on a GPU the benchmark runs for real")
@pytest.mark.needs_triton  # `python tools/bench.py` imports Triton
@pytest.mark.parametrize("what", ["sweep", "lessons", "tune"])
def test_bench_without_a_gpu_says_so(what):
    r = subprocess.run([sys.executable, "tools/bench.py", what], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "needs an NVIDIA GPU" in r.stderr and "figures/data/" in r.stderr


def test_bench_summary_compares_softmax_with_the_best_peer():
    """GPU time and eager time are compared separately: the best peer of each may differ."""
    from bench import summary

    row = lambda p, g, e: dict(
        dtype="float32", M=4, N=8, provider=p, graph_frac=g, frac_of_copy=e, host_us=7.0, status="ok"
    )
    rows = [
        row("torch_softmax", 0.5, 0.8),
        row("torch_compile", 0.75, 0.6),
        row("liger", 0.7, 0.5),
        row("softmax", 0.9, 0.95),
        dict(row("triton_tutorial", 0.99, 0.99), status="failed: x"),
    ]
    line = summary(rows).splitlines()[1]
    assert "0.900 0.950" in line
    assert "0.750 (torch_compile)" in line and "0.800 (torch_softmax)" in line  # a failed peer never counts


@pytest.mark.needs_triton  # the kernel lessons' figures import Triton
def test_make_figures_finds_every_lessons_figures_and_the_benchmarks():
    """`make figures` (tools/figures.py) draws each lesson module's FIGURES and tools/bench_plots.py's."""
    import bench_plots

    import figures
    from helpers import lesson01, lesson08

    names = set(figures.all_figures())
    assert set(bench_plots.FIGURES) | set(lesson01.FIGURES) | set(lesson08.FIGURES) <= names
    assert figures.main(["no_such_figure"]) == 2
