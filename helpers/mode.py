"""Where the course's kernels run: a real GPU, Triton's interpreter on the CPU, or nowhere.

Imported first by ``helpers/__init__.py``, before any ``@triton.jit`` function is decorated:
Triton decides at decoration time, from ``TRITON_INTERPRET``, whether a kernel is compiled or
interpreted. ``TRITON_INTERPRET=1`` set by the user: the interpreter; else a CUDA GPU that PyTorch
sees: compiled kernels; else the interpreter on the CPU (``TRITON_INTERPRET`` is set here).

Triton publishes builds for Linux only. Without it ``import helpers`` still works (lessons 01-02,
the reference, traffic, plots, recorded data, exercises); ``HAS_TRITON`` is False and the kernel
modules raise ``KernelsUnavailable``, one line saying what the platform lacks and where the kernel
lessons run. A kernel lesson's first cell calls ``helpers.require_kernels("lesson 03")``.
"""

from __future__ import annotations

import os
import platform
import re
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

# Compiled, Triton fuses a * b + c into one FMA unless told not to. The course's kernels are written and
# measured with that on (lesson 05's exp2, lesson 07's "one FMA a score"), Triton's default through 3.9;
# 3.9 warns at its first compile that 3.10 will turn it off by default. Keep it on, so that the kernels
# compile as they were measured and no warning lands in a lesson; a value the user set stays.
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

try:
    import triton  # noqa: E402
except Exception as _e:  # not installed (macOS, Windows), or an install that cannot load
    triton = None
    #: Why ``import triton`` failed (None when it worked).
    TRITON_ERROR: str | None = f"{type(_e).__name__}: {_e}"
else:
    TRITON_ERROR = None

#: True when Triton imports, so the course's kernels exist (compiled or interpreted).
HAS_TRITON = triton is not None

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


def triton_version() -> str:
    """The imported Triton's version, or 'not installed' (provenance of a measurement)."""
    return triton.__version__ if HAS_TRITON else "not installed"


#: The platforms Triton publishes wheels for (PyPI, triton 3.6-3.9): ``platform.machine()`` on Linux.
TRITON_LINUX_MACHINES = ("x86_64", "aarch64")

#: Where the kernel lessons run when this machine cannot: one sentence, the same everywhere.
WHERE_KERNELS_RUN = (
    "lessons 01-02 run here; for the kernel lessons (03-08) use Linux, WSL2 on Windows, a Linux "
    'GPU machine reached over SSH (README, "On a remote GPU machine": `make lab ARGS="--port 8888"` '
    "there and an SSH tunnel), or a cloud notebook such as Colab (clone the course there and run "
    "`pip install -r requirements.txt`)"
)


def platform_lacks_triton(system: str | None = None, machine: str | None = None) -> str | None:
    """'macOS', 'Windows', 'Linux on ppc64le', ...: a platform Triton publishes no build for,
    or None where it does (Linux on x86_64 or aarch64)."""
    system = platform.system() if system is None else system
    machine = (platform.machine() if machine is None else machine).lower()
    if system == "Darwin":
        return "macOS"
    if system == "Windows" or system.startswith(("CYGWIN", "MSYS", "MINGW")):
        return "Windows"
    if system == "Linux":
        return None if machine in TRITON_LINUX_MACHINES or machine == "amd64" else f"Linux on {machine}"
    return system or "this platform"


def kernels_unavailable_message(
    what: str = "The course's kernels",
    *,
    system: str | None = None,
    machine: str | None = None,
    error: str | None = None,
) -> str:
    """One line: what needs Triton, why this machine has none, and where to go instead."""
    what = what[:1].upper() + what[1:]
    lacks = platform_lacks_triton(system, machine)
    if lacks is not None:
        return f"{what} needs Triton, which publishes no build for {lacks}: {WHERE_KERNELS_RUN}."
    error = TRITON_ERROR if error is None else error
    why = f" ({error})" if error else ""
    return (
        f"{what} needs Triton, and `import triton` fails in this Python{why}: install the course's "
        f"packages with `pip install -r requirements.txt` (or `make venv`) and restart the kernel."
    )


class KernelsUnavailable(ModuleNotFoundError):
    """Triton is missing, so the course's kernels are too. Shown in Jupyter as its one-line
    message, without a traceback (IPython calls ``_render_traceback_``)."""

    def __init__(self, what: str = "The course's kernels"):
        super().__init__(kernels_unavailable_message(what), name="triton")

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


def require_kernels(what: str = "This lesson") -> None:
    """Return quietly where Triton is available; else stop the cell with one line saying what
    the platform lacks and where the kernel lessons run (a kernel lesson's first cell calls it)."""
    __tracebackhide__ = True  # noqa: F841  (pytest: the line, not this frame)
    if not HAS_TRITON:
        raise KernelsUnavailable(what)


#: helpers' modules that need Triton (they import it, or a module that does).
KERNEL_MODULES = (
    "helpers.launch",
    "helpers.triton_compat",
    "helpers.rowwise",
    "helpers.kernels",
    "helpers.ops",
    "helpers.measure",
    "helpers.tuning",
    "helpers.peers",
)
_KERNEL_LESSON = re.compile(r"helpers\.lesson(0[3-9]|[1-9]\d)(_exercises)?$")


def is_kernel_module(fullname: str) -> bool:
    """True for a helpers module that needs Triton: ``KERNEL_MODULES``, their submodules, and the
    kernel lessons' modules (helpers.lesson03 and up, and their checkers: helpers.lesson03_exercises ...)."""
    return bool(_KERNEL_LESSON.match(fullname)) or any(
        fullname == m or fullname.startswith(m + ".") for m in KERNEL_MODULES
    )


class _KernelModuleGuard:
    """Without Triton: importing a kernel module of helpers raises ``KernelsUnavailable`` (one
    line) instead of a traceback ending in ``import triton`` deep inside the package."""

    def find_spec(self, fullname, path=None, target=None):
        if is_kernel_module(fullname):
            raise KernelsUnavailable(f"`{fullname}`")
        return None


if not HAS_TRITON and not any(isinstance(f, _KernelModuleGuard) for f in sys.meta_path):
    sys.meta_path.insert(0, _KernelModuleGuard())


def banner() -> str:
    """One line for the top of every notebook: the mode and the versions in use (on the CPU, the same
    on every machine with the course's pinned versions, so it can stay in a stored output)."""
    py = f"python {sys.version_info.major}.{sys.version_info.minor}"
    if not HAS_TRITON:
        return f"Kernels run on: nothing here (no Triton: lessons 01-02 only) | torch {_major_minor(torch.__version__)} | {py}"
    where = f"GPU ({gpu_name()})" if ON_GPU else "Triton interpreter on the CPU (no GPU)"
    return (
        f"Kernels run on: {where} | torch {_major_minor(torch.__version__)} | "
        f"triton {_major_minor(triton.__version__)} | {py}"
    )


def describe() -> str:
    """A few sentences on what the active mode means for the lessons."""
    if not HAS_TRITON:
        return (
            "No Triton here, so no kernels: lessons 01-02 (plain PyTorch) run, and each kernel lesson stops at its "
            f"first cell with one line. {kernels_unavailable_message('Every kernel lesson')}"
        )
    if ON_GPU:
        return (
            "Kernels are compiled for the GPU, where tl.exp is a fast approximate exponential. Bandwidth and "
            "compiler figures are measured live in this run."
        )
    return (
        "No GPU here: every @triton.jit kernel runs in Triton's interpreter, which executes the same code with "
        "NumPy on the CPU, in float32 (float64 for float64 inputs); compiled on a GPU, tl.exp is a fast "
        "approximate exponential instead. Both are checked against the float64 reference within each dtype's "
        "tolerance. Sizes are kept small here, and the GPU-only figures (bandwidth, registers, shared memory) "
        "come from recorded runs under figures/data/."
    )
