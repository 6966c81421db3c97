"""Where the course's kernels run: a real GPU, or Triton's interpreter on the CPU.

This module must be imported before any ``@triton.jit`` function is decorated: Triton
decides at decoration time whether a kernel is compiled or interpreted, from the
environment variable ``TRITON_INTERPRET``. ``helpers/__init__.py`` imports it first.

Rules:
- ``TRITON_INTERPRET=1`` already set by the user: interpreter, whatever hardware exists.
- otherwise, PyTorch sees a CUDA GPU: compiled kernels on that GPU.
- otherwise: interpreter on the CPU (``TRITON_INTERPRET`` is set here, for this process).
"""

from __future__ import annotations

import os
import sys
import warnings

from ._versions import check_versions

check_versions()

import torch  # noqa: E402  (after the version check, so a bad install gets a clear message)

_forced = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
_has_gpu = torch.cuda.is_available()

if _forced or not _has_gpu:
    if not _forced and "triton.language" in sys.modules:
        # Triton's own @jit helpers (tl.max, tl.sum, ...) were decorated for compilation already.
        raise ImportError(
            "Triton was imported before helpers on a machine without a GPU, so its kernels cannot "
            "switch to the interpreter any more: restart the kernel and run `import helpers` before "
            "`import triton` (or set TRITON_INTERPRET=1 before starting Python)."
        )
    os.environ["TRITON_INTERPRET"] = "1"
    MODE = "interpreter"
    DEVICE = torch.device("cpu")
else:
    MODE = "gpu"
    DEVICE = torch.device("cuda")

import triton  # noqa: E402

# The interpreter evaluates kernels with NumPy, which warns on IEEE results the kernels rely on
# (-inf - -inf = NaN for an all -inf row, exp overflow). The GPU is silent; so is the interpreter.
warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\.runtime\.interpreter")

#: True when kernels run under Triton's interpreter (on the CPU).
INTERPRETER = MODE == "interpreter"
#: True when kernels are compiled for a real GPU.
ON_GPU = MODE == "gpu"


def _major_minor(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


def gpu_name() -> str | None:
    """The GPU's name when running on one, else None."""
    return torch.cuda.get_device_name(DEVICE) if ON_GPU else None


def banner() -> str:
    """One line for the top of every notebook: the mode and the versions in use.

    On the CPU it is the same on every machine that installed the course's pinned
    versions (``make test`` does), so it can stay in a notebook's stored output.
    """
    where = f"GPU ({gpu_name()})" if ON_GPU else "Triton interpreter on the CPU (no GPU)"
    return (
        f"Kernels run on: {where} | torch {_major_minor(torch.__version__)} | "
        f"triton {_major_minor(triton.__version__)} | python {sys.version_info.major}.{sys.version_info.minor}"
    )


def describe() -> str:
    """A few sentences on what the active mode means for the lessons."""
    if ON_GPU:
        return (
            "Kernels are compiled for the GPU. Bandwidth and compiler figures are measured live "
            "in this run."
        )
    return (
        "No GPU here: every @triton.jit kernel runs in Triton's interpreter, which executes the same "
        "code with NumPy on the CPU. Results are exact, sizes are kept small, and the GPU-only figures "
        "(bandwidth, registers, shared memory) come from recorded runs under figures/data/."
    )
