"""Check the installed versions before anything heavy is imported: a version outside the supported
range (``requirements.txt``'s; keep the two in step) gets one clear message at the first ``import
helpers`` instead of a deep traceback later. Triton is optional (Linux builds only: lessons 01-02
run without it), but an installed one must be in range.
"""

from __future__ import annotations

import os
from importlib import metadata

#: name -> (lowest supported, first unsupported), as (major, minor)
SUPPORTED = {
    "torch": ((2, 5), (2, 15)),
    "triton": ((3, 6), (3, 10)),
    "numpy": ((1, 26), (3, 0)),
}

#: Packages the course runs without (then ``helpers.HAS_TRITON`` is False and the kernels are missing).
OPTIONAL = ("triton",)


class UnsupportedVersionError(ImportError):
    """An installed package is outside the range the course supports."""


def _parse(version: str) -> tuple[int, int]:
    """'2.11.0+cu128' -> (2, 11); digits only ('0rc1' -> 1), a missing part is 0."""
    nums = [int("".join(ch for ch in p if ch.isdigit()) or 0) for p in version.split("+")[0].split(".")[:2]]
    return (nums + [0, 0])[0], (nums + [0, 0])[1]


def _fmt(v: tuple[int, int]) -> str:
    return f"{v[0]}.{v[1]}"


def installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def problems(versions: dict[str, str | None] | None = None, interpret: bool | None = None) -> list[str]:
    """What is wrong with the given (default: installed) versions, one sentence each."""
    if versions is None:
        versions = {name: installed(name) for name in SUPPORTED}
    if interpret is None:
        interpret = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
    out = []
    for name, (lo, hi) in SUPPORTED.items():
        v = versions.get(name)
        if v is None:
            if name in OPTIONAL:
                continue
            out.append(f"{name} is not installed: run `pip install -r requirements.txt` (or `make venv`).")
            continue
        if not (lo <= _parse(v) < hi):
            out.append(
                f"{name} {v} is outside the supported range >={_fmt(lo)},<{_fmt(hi)}: "
                f"install a supported version with `pip install -r requirements.txt`."
            )
    tv, nv = versions.get("triton"), versions.get("numpy")
    if tv and nv and _parse(tv) <= (3, 6) and _parse(nv) >= (2, 4):
        # Only the interpreter uses NumPy; a compiled run on a GPU is unaffected.
        try:
            import torch

            cpu_only = not torch.cuda.is_available()
        except Exception:  # pragma: no cover - torch itself broken
            cpu_only = True
        if interpret or cpu_only:
            out.append(
                f"triton {tv}'s interpreter breaks with numpy {nv} (>= 2.4): install `numpy<2.4` "
                f"or a newer triton (`pip install -r requirements.txt`)."
            )
    return out


def check_versions() -> None:
    """Raise UnsupportedVersionError listing every problem, or return quietly.

    Set ``SOFTMAX_COURSE_SKIP_VERSION_CHECK=1`` to try an unsupported combination anyway.
    """
    if os.environ.get("SOFTMAX_COURSE_SKIP_VERSION_CHECK") == "1":
        return
    found = problems()
    if found:
        raise UnsupportedVersionError(
            "The softmax course cannot start with these packages:\n  - "
            + "\n  - ".join(found)
            + "\n(Set SOFTMAX_COURSE_SKIP_VERSION_CHECK=1 to try anyway.)"
        )
