"""Pytest setup for the whole repository (tests/ and the notebooks under nbval): what runs where
Triton is missing.

Triton publishes no build for macOS or Windows. There ``import helpers`` still works (the mode, the
reference, traffic, plots, recorded data, exercises, lessons 01-02) and ``helpers.HAS_TRITON`` is
False. Then, with a reason printed for each skip (``pytest -rs``):

- a test module whose import needs Triton (``import triton``, ``helpers.kernels``, ``helpers.launch``,
  a kernel lesson's ``helpers.lesson03`` ..., or a kernel name such as ``helpers.softmax``) is
  skipped as a whole;
- a test that reaches a kernel while it runs (``KernelsUnavailable``, or ``import triton`` failing)
  is skipped, and so is a test marked ``needs_triton`` (one that runs a kernel module in a subprocess);
- the kernel lessons (notebooks 03-08) are skipped from nbval and from the tests that execute them.

With Triton installed nothing here changes anything. ``make test-no-triton`` runs the suite with
Triton hidden (tests/no_triton/ first on PYTHONPATH), as on a laptop without it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import helpers  # noqa: F401  (first: it decides interpreter vs GPU before anything imports triton)
from helpers import mode

NO_TRITON = not helpers.HAS_TRITON
REASON = "needs Triton's kernels, and this Python has no Triton"
_KERNEL_LESSON_NB = re.compile(r"^(0[3-9]|[1-9]\d)d?_.*\.ipynb$")  # a kernel lesson (03-09) or its deep dive


def is_kernel_lesson(path) -> bool:
    """notebooks/03_*.ipynb and up: the lessons that run Triton kernels."""
    return bool(_KERNEL_LESSON_NB.match(Path(str(path)).name))


class _NoTritonModule(pytest.Module):
    """A test module that fails to import for want of Triton is one skip, with the reason."""

    def _getobj(self):
        try:
            return super()._getobj()
        except pytest.Collector.CollectError as e:  # pytest wraps the import's ImportError (as __cause__)
            reason = _skip_reason(e.__cause__)
            if reason:
                raise pytest.skip.Exception(reason, allow_module_level=True) from None
            raise


def pytest_pycollect_makemodule(module_path, parent):
    if NO_TRITON:
        return _NoTritonModule.from_parent(parent, path=module_path)
    return None


def _skip_reason(exc) -> str | None:
    """Why a test cannot run here, if ``exc`` says it needs Triton; else None."""
    if isinstance(exc, helpers.KernelsUnavailable):
        return f"{REASON} ({str(exc).split(' needs Triton')[0]} needs it)"
    if isinstance(exc, ImportError) and "triton" in str(exc):
        return f"{REASON} ({exc})"
    return None


def _skip_if_triton_is_missing(e: Exception) -> None:
    reason = _skip_reason(e) if NO_TRITON else None
    if reason:
        pytest.skip(reason)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    try:
        return (yield)
    except Exception as e:
        _skip_if_triton_is_missing(e)
        raise


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    try:
        return (yield)
    except Exception as e:
        _skip_if_triton_is_missing(e)
        raise


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "needs_triton: the test needs Triton in a way the skips here cannot see (a subprocess "
        "running a kernel module): skipped where Triton is missing",
    )


def pytest_collection_modifyitems(config, items):
    if not NO_TRITON:
        return
    skip = pytest.mark.skip(reason=mode.kernels_unavailable_message("This kernel lesson"))
    needs = pytest.mark.skip(reason=f"{REASON} (marked needs_triton)")
    for item in items:
        if item.get_closest_marker("needs_triton"):
            item.add_marker(needs)
            continue
        if item.path.suffix == ".ipynb" and is_kernel_lesson(item.path):
            item.add_marker(skip)  # nbval's cells of notebooks 03-08
            continue
        params = getattr(getattr(item, "callspec", None), "params", {})
        executes = item.get_closest_marker("slow") is not None
        if executes and any(
            isinstance(v, Path) and v.suffix == ".ipynb" and is_kernel_lesson(v) for v in params.values()
        ):
            item.add_marker(skip)  # tests/test_notebooks_robust.py runs every cell of a kernel lesson
