"""The course's notebooks, as the tools and tests find them.

- A **core lesson** is `notebooks/NN_name.ipynb`: one idea, a teaching kernel, a plain launch, the measurement that
  proves the point, and exercises, within the time its first cell states (at most 90 minutes).
- Its optional **deep dive** is `notebooks/NNd_name.ipynb`, listed right after it: the engineering that makes the
  library fast (production kernels, tuning, A/B investigations, launch internals). A core lesson never needs it.

    import course
    course.lessons()       # the core lessons, in order
    course.deep_dives()    # the deep dives, in order
    course.notebooks()     # both, each deep dive after its lesson
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"
CORE_GLOB = "[0-9][0-9]_*.ipynb"
DEEP_GLOB = "[0-9][0-9]d_*.ipynb"
_NAME = re.compile(r"^(\d\d)(d?)_")


def lessons(root: Path = ROOT) -> list[Path]:
    return sorted((root / "notebooks").glob(CORE_GLOB))


def deep_dives(root: Path = ROOT) -> list[Path]:
    return sorted((root / "notebooks").glob(DEEP_GLOB))


def notebooks(root: Path = ROOT) -> list[Path]:
    """Core lessons and deep dives, each deep dive right after its lesson."""
    return sorted(lessons(root) + deep_dives(root), key=lambda p: (number(p), is_deep_dive(p)))


def number(path: Path) -> int:
    """The lesson a notebook belongs to: 5 for 05_persistent_softmax.ipynb and for 05d_persistent_in_depth.ipynb."""
    m = _NAME.match(Path(path).name)
    if not m:
        raise ValueError(f"{path}: not a course notebook (NN_name.ipynb or NNd_name.ipynb)")
    return int(m.group(1))


def is_deep_dive(path: Path) -> bool:
    m = _NAME.match(Path(path).name)
    return bool(m and m.group(2))


def lesson_of(deep_dive: Path, root: Path = ROOT) -> Path | None:
    """The core lesson a deep dive follows."""
    return next((p for p in lessons(root) if number(p) == number(deep_dive)), None)
