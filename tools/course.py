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


# ---- The lessons' headers, and the README's table and workshop plan made from them -----------------------------

_TITLE = re.compile(r"^#\s+\d+\s*·\s*(.+?)\s*$", re.M)
_TIME = re.compile(r"^\*\*Time:\*\*\s*(.+?)\s*$", re.M)


def header(path: Path) -> dict:
    """A notebook's first cell: its title, its summary (the `> ` line) and the minutes its `**Time:**` line states
    (teaching + exercises for a lesson, "about N minutes" for a deep dive)."""
    import json

    cell = json.loads(Path(path).read_text())["cells"][0]
    src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
    time_text = _TIME.search(src).group(1).rstrip(".")
    summary = " ".join(line[1:].strip() for line in src.splitlines() if line.startswith(">"))
    return {
        "title": _TITLE.search(src).group(1),
        "summary": summary,
        "time": time_text,
        "minutes": sum(int(m) for m in re.findall(r"(\d+)\s*min", time_text)),
    }


def _hm(minutes: int) -> str:
    h, m = divmod(int(minutes), 60)
    return f"{h} h {m:02d}" if h else f"{m} min"


def lesson_table(root: Path = ROOT) -> str:
    rows = ["| # | Lesson | Time | Going further (optional) |", "|---|---|---|---|"]
    deep = {number(p): p for p in deep_dives(root)}
    for p in lessons(root):
        h = header(p)
        d = deep.get(number(p))
        further = f"[in depth](notebooks/{d.name}) ({_hm(header(d)['minutes'])})" if d else ""
        rows.append(
            f"| {number(p):02d} | [{h['title']}](notebooks/{p.name}): {h['summary']} | {h['time']} | {further} |"
        )
    return "\n".join(rows)


def workshop_plan(root: Path = ROOT) -> str:
    """A one-day and a two-day plan from the lessons' stated times (teaching + exercises, breaks not counted)."""
    t = {number(p): header(p)["minutes"] for p in lessons(root)}
    first = [n for n in sorted(t) if n <= 5]
    later = [n for n in sorted(t) if n > 5]
    core = sum(t[n] for n in first)
    one = [t[n] for n in later] or [0]
    names = lambda ns: ", ".join(f"{n:02d}" for n in ns)  # noqa: E731
    return "\n".join(
        [
            "| plan | lessons | time (teaching + exercises) |",
            "|---|---|---|",
            f"| one day | {names(first)}, then one of {names(later)} | {_hm(core + min(one))} to {_hm(core + max(one))} |",
            f"| two days, day 1 | {names(first)} | {_hm(core)} |",
            f"| two days, day 2 | {names(later)} | {_hm(sum(t[n] for n in later))} |",
            "",
            f"Each lesson states its time in its first cell: at least its words at 130 a minute plus 8 minutes an exercise, "
            f"at most 90 (a test checks it). Add breaks: about an hour a day. The deep dives are for afterwards, "
            f"{_hm(sum(header(p)['minutes'] for p in deep_dives(root)))} in all.",
        ]
    )


def fill(text: str, blocks: dict) -> str:
    for name, body in blocks.items():
        text = re.sub(
            rf"(<!-- {name}:start -->\n).*?(<!-- {name}:end -->)",
            lambda m: m.group(1) + body + "\n" + m.group(2),
            text,
            flags=re.S,
        )
    return text


def main(argv=None) -> int:
    """`python tools/course.py` writes the README's lesson table and workshop plan; `--check` only says if stale."""
    import sys

    argv = sys.argv[1:] if argv is None else argv
    readme = ROOT / "README.md"
    old = readme.read_text()
    new = fill(old, {"course-table": lesson_table(), "workshop": workshop_plan()})
    if new == old:
        return 0
    if "--check" in argv:
        print("README.md's lesson table or workshop plan is stale: run python tools/course.py")
        return 1
    readme.write_text(new)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
