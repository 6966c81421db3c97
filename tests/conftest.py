"""Shared test setup.

- ``helpers`` is imported first, so it chooses the mode (compiled GPU kernels, or Triton's
  interpreter on the CPU, where it sets ``TRITON_INTERPRET=1``) before anything decorates a kernel.
- Hypothesis profiles, chosen with the environment variable ``HYPOTHESIS_PROFILE``:
  ``ci`` (default): few examples, derandomized, so a CI run is reproducible and bounded in time;
  ``gpu``: many random examples, for a run on a real GPU (``HYPOTHESIS_PROFILE=gpu``);
  ``dev``: random examples with shrinking, for hunting a bug on the CPU.
- tools/ is on ``sys.path``: the maintainers' scripts (``bench``, ``backward_bench``, ``attention_bench``,
  ``bench_plots``, ``figures``) are imported by name, as they import each other when run.
- The ``slow`` marker: tests that execute whole notebooks in a Jupyter kernel. They run in
  ``make test``; deselect them locally with ``-m "not slow"``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, Phase, settings

import helpers  # noqa: F401  (must come first: it decides interpreter vs GPU)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]

# CI: bounded and reproducible. No shrinking: under the interpreter every example launches a
# kernel, and shrinking a failure can take minutes; the failing example is printed as found.
settings.register_profile(
    "ci",
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=_SLOW_OK,
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
)
# GPU: random examples, larger sizes (test_properties.py grows them on a GPU); about 3 minutes on an
# H200 for test_properties.py, most of it compiling kernels for new shapes.
settings.register_profile(
    "gpu",
    max_examples=150,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=_SLOW_OK,
)
settings.register_profile(
    "dev",
    max_examples=100,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=_SLOW_OK,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_configure(config):
    # helpers.mode silences these for the interpreter (NumPy warns on the IEEE results the kernels
    # rely on, e.g. -inf - -inf for an all -inf row); pytest's own warning capture brings them back.
    config.addinivalue_line("filterwarnings", r"ignore::RuntimeWarning:triton\.runtime\.interpreter")
    config.addinivalue_line(
        "markers",
        'slow: executes whole notebooks in a Jupyter kernel (part of `make test`; deselect locally with -m "not slow")',
    )


@pytest.fixture
def wrong_device_tensor():
    """A floating tensor on a device the course's kernels cannot serve in this mode.

    'meta' is wrong in both modes (and costs nothing); on a GPU a CPU tensor is wrong as well,
    but 'meta' keeps the test identical everywhere."""
    return torch.empty(3, 4, device="meta")
