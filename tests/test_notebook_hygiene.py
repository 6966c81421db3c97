"""Static checks on every lesson notebook (notebooks/NN_*.ipynb), one test per notebook and rule.

The stored outputs are what learners and the HTML pages see and what nbval compares against in
CI, so they must be tidy, deterministic, free of machine paths, and from the CPU path.
See docs/CONVENTIONS.md. With no notebooks yet, every test here is skipped (empty parameter set).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: SOFTMAX_COURSE_NOTEBOOKS points the checks at another folder (used to test the tests).
NOTEBOOK_DIR = Path(os.environ.get("SOFTMAX_COURSE_NOTEBOOKS", ROOT / "notebooks"))
LESSONS = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))  # the core lessons (tools/course.py)
DEEP_DIVES = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]d_*.ipynb"))  # their optional deep dives
NOTEBOOKS = LESSONS + DEEP_DIVES

_spec = importlib.util.spec_from_file_location("nbtidy", ROOT / "tools" / "nbtidy.py")
nbtidy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(nbtidy)

# Output MIME types holding binary data as base64 (which can contain "/work/" by chance).
BINARY_MIME = ("image/png", "image/jpeg", "image/gif", "application/pdf")

MACHINE_PATHS = re.compile(r"(/work/|/root/|/home/|/tmp/|/Users/|[A-Za-z]:\\\\Users\\\\|site-packages)")
# (recorded data may name its GPU: "Recorded on NVIDIA H200 ..." is CPU output)
GPU_TEXT = re.compile(r"device='cuda|cuda:\d|Kernels run on: GPU")
NBVAL_MARKER = re.compile(r"#\s*NBVAL_", re.IGNORECASE)
TIMING_NUMBER = re.compile(r"\d+(\.\d+)?\s*(ns|µs|us|ms|s|sec|secs|seconds|minutes|min)\b")
TIMING_WORD = re.compile(r"\b(took|elapsed|time|timing|timed|wall|runtime|duration|per call)\b", re.IGNORECASE)


def _nb_id(p: Path) -> str:
    return p.stem


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def source(cell) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def tags(cell) -> set:
    return set(cell.get("metadata", {}).get("tags", []))


def output_texts(cell):
    """Every text a code cell's outputs hold (streams, text MIME types, error tracebacks)."""
    for out in cell.get("outputs", []):
        kind = out.get("output_type")
        if kind == "stream":
            t = out.get("text", "")
            yield "".join(t) if isinstance(t, list) else t
        elif kind in ("execute_result", "display_data"):
            for mime, data in out.get("data", {}).items():
                if mime in BINARY_MIME:
                    continue
                if isinstance(data, (dict, list)) and mime.endswith("json"):
                    yield json.dumps(data)
                else:
                    yield "".join(data) if isinstance(data, list) else str(data)
        elif kind == "error":
            yield "\n".join(out.get("traceback", [])) + f"\n{out.get('ename')}: {out.get('evalue')}"


def code_cells(nb):
    return [(i, c) for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"]


def where(path, i, cell) -> str:
    head = source(cell).strip().splitlines()[:1]
    return f"{path.name} cell {i} ({head[0][:60] if head else 'empty'!r})"


def outputs(path):
    """(where the cell is, the cell, a text) for every text that the outputs of the notebook's code cells hold."""
    for i, cell in code_cells(load(path)):
        for text in output_texts(cell):
            yield where(path, i, cell), cell, text


notebooks = pytest.mark.parametrize("path", NOTEBOOKS, ids=_nb_id)
lessons = pytest.mark.parametrize("path", LESSONS, ids=_nb_id)
deep_dives = pytest.mark.parametrize("path", DEEP_DIVES, ids=_nb_id)


@notebooks
def test_json_is_tidy(path):
    text = path.read_text(encoding="utf-8")
    tidy = nbtidy.dumps(nbtidy.tidy(json.loads(text)))
    assert tidy == text, f"{path.name} is not tidy: run `make tidy` (or `make execute`)"


def test_tidy_joins_a_cells_consecutive_streams_of_one_name():
    out = lambda name, text: {"output_type": "stream", "name": name, "text": text}
    shown = {"output_type": "display_data", "data": {"text/plain": "x"}, "metadata": {"a": 1}}
    cell = {
        "cell_type": "code",
        "source": "",
        "metadata": {},
        "execution_count": 3,
        "outputs": [
            out("stdout", "a\n"),
            out("stdout", ["b", "\n"]),
            out("stderr", "w\n"),
            out("stdout", "c\n"),
            shown,
            out("stdout", "d\n"),
        ],
    }
    got = nbtidy.tidy({"cells": [cell], "metadata": {}})["cells"][0]["outputs"]
    assert [(o.get("name"), o.get("text")) for o in got] == [
        ("stdout", "a\nb\n"),
        ("stderr", "w\n"),
        ("stdout", "c\n"),
        (None, None),
        ("stdout", "d\n"),
    ]


@notebooks
def test_kernelspec_is_python3(path):
    nb = load(path)
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    assert nb.get("nbformat") == 4


@notebooks
def test_code_cells_with_outputs_have_an_execution_count(path):
    nb = load(path)
    for i, cell in code_cells(nb):
        if cell.get("outputs"):
            assert cell.get("execution_count") is not None, where(path, i, cell)


@notebooks
def test_notebook_has_been_executed(path):
    """The stored outputs are the expected results nbval compares with: a notebook whose code
    cells all lack outputs has not been run (`make execute`)."""
    nb = load(path)
    counts = [c.get("execution_count") for _, c in code_cells(nb)]
    assert any(n is not None for n in counts), f"{path.name} has never been executed: run `make execute`"


@notebooks
def test_no_error_outputs(path):
    nb = load(path)
    for i, cell in code_cells(nb):
        if "raises-exception" in tags(cell):
            continue
        for out in cell.get("outputs", []):
            assert out.get("output_type") != "error", f"{where(path, i, cell)} stored an error: {out.get('ename')}"
            if out.get("output_type") == "stream" and out.get("name") == "stderr":
                text = "".join(out.get("text", ""))
                assert "Traceback" not in text and "Warning" not in text, f"{where(path, i, cell)} stderr: {text[:200]}"


@notebooks
def test_outputs_hold_no_machine_paths(path):
    for at, _, text in outputs(path):
        m = MACHINE_PATHS.search(text)
        assert not m, (
            f"{at} output shows a machine path {m.group(0)!r}: {text[max(0, m.start() - 60) : m.end() + 60]!r}"
        )


@notebooks
def test_outputs_come_from_the_cpu_path(path):
    """Outputs stored in the repository come from the CPU run (a GPU run must not be committed)."""
    for at, cell, text in outputs(path):
        m = GPU_TEXT.search(text)
        if m and "nbval-ignore-output" not in tags(cell):
            pytest.fail(f"{at} output looks like a GPU run ({m.group(0)!r}): re-execute on the CPU (`make execute`)")
        assert "device='cuda" not in text and "cuda:0" not in text, at


@notebooks
def test_no_figure_reprs_in_outputs(path):
    for at, _, text in outputs(path):
        assert "<Figure size" not in text, f"{at}: display figures with helpers.plots.show(fig)"
        assert not re.search(r"<matplotlib\.\w+", text), f"{at} stores a matplotlib repr"


@notebooks
def test_no_nbval_comment_markers(path):
    """nbval is driven by cell tags; `# NBVAL_...` comments would leak into the HTML."""
    nb = load(path)
    for i, cell in enumerate(nb["cells"]):
        assert not NBVAL_MARKER.search(source(cell)), f"{where(path, i, cell)}: use a cell tag instead"


@notebooks
def test_no_timings_in_untagged_outputs(path):
    """Timings differ on every run: cells that print them carry the nbval-ignore-output tag."""
    for at, cell, text in outputs(path):
        if tags(cell) & {"nbval-ignore-output", "nbval-skip"}:
            continue
        for line in text.splitlines():
            if TIMING_NUMBER.search(line) and TIMING_WORD.search(line):
                pytest.fail(f"{at} prints a timing without the nbval-ignore-output tag: {line!r}")


@notebooks
def test_no_memory_addresses_or_object_reprs(path):
    """Addresses change per run (nbval sanitizes 0x..., but the HTML would show them)."""
    for at, _, text in outputs(path):
        assert not re.search(r" at 0x[0-9a-fA-F]{6,}", text), f"{at} prints an object address"


@notebooks
def test_first_cell_is_the_lesson_header(path):
    nb = load(path)
    first = nb["cells"][0]
    assert first["cell_type"] == "markdown"
    text = source(first)
    assert text.startswith("# "), "the first cell starts with the lesson title ('# NN · Title')"
    assert re.match(rf"# {path.name[:2]} · \S", text), f"the title starts with '# {path.name[:2]} · '"
    assert "**Time:**" in text
    fields = ("**What you'll do:**", "**What you'll learn:**", "**What you'll need:**") if path in LESSONS else ()
    for field in fields:
        assert field in text, f"the header lacks {field}"
    assert re.search(r"^> \S", text, re.MULTILINE), "the header has a '> summary' line for the index page"


@notebooks
def test_second_cell_prints_the_banner(path):
    nb = load(path)
    second = nb["cells"][1]
    assert second["cell_type"] == "code"
    assert "import helpers" in source(second) and "helpers.banner()" in source(second)


@lessons
def test_links_to_the_next_lesson(path):
    number = int(path.name[:2])
    nexts = sorted(NOTEBOOK_DIR.glob(f"{number + 1:02d}_*.ipynb"))
    if not nexts:
        pytest.skip(f"no lesson {number + 1:02d} yet")
    nb = load(path)
    markdown = "\n".join(source(c) for c in nb["cells"] if c["cell_type"] == "markdown")
    assert f"]({nexts[0].name})" in markdown, f"{path.name} should end with a link to {nexts[0].name}"


@lessons
def test_ends_with_key_points_and_try_on_your_own(path):
    nb = load(path)
    markdown = "\n".join(source(c) for c in nb["cells"] if c["cell_type"] == "markdown")
    assert "## Key points" in markdown and "## Try on your own" in markdown


@notebooks
def test_exercises_have_template_checker_and_solution(path):
    """`## Exercise N.k` heading, then a template raising NotImplementedError, a checker cell, and
    a markdown cell tagged `solution` with the solution inside <details>."""
    nb = load(path)
    cells = nb["cells"]
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "markdown" or not re.match(r"## Exercise \d+\.\d+", source(cell)):
            continue
        rest = cells[i + 1 :]
        following_code = [c for c in rest[:4] if c["cell_type"] == "code"]
        assert any("NotImplementedError" in source(c) for c in following_code), (
            f"{where(path, i, cell)}: the template should start as `raise NotImplementedError`"
        )
        solution = next((c for c in rest if "solution" in tags(c)), None)
        assert solution is not None, f"{where(path, i, cell)}: no cell tagged 'solution' follows"
        assert solution["cell_type"] == "markdown"
        assert "<details><summary>Show a solution</summary>" in source(solution)
        assert "</details>" in source(solution)


@notebooks
def test_solution_cells_are_markdown_in_details(path):
    nb = load(path)
    for i, cell in enumerate(nb["cells"]):
        if "solution" in tags(cell):
            assert cell["cell_type"] == "markdown", where(path, i, cell)
            assert "<details>" in source(cell) and "</details>" in source(cell), where(path, i, cell)


@notebooks
def test_cell_tags_are_known(path):
    known = {
        "nbval-ignore-output",
        "nbval-skip",
        "solution",
        "raises-exception",
        "nbval-raises-exception",
        "hide-input",
        "hide-output",
    }  # no "instructor": docs/instructor-guide.md
    nb = load(path)
    for i, cell in enumerate(nb["cells"]):
        unknown = tags(cell) - known
        assert not unknown, f"{where(path, i, cell)} has unknown tags {sorted(unknown)}"


# ---- Two depths: a core lesson a reader can finish in the time it states, and its optional deep dive ------------

WORDS_PER_MINUTE = 130  # careful reading of technical prose
MINUTES_PER_EXERCISE = 8  # a floor, not a target
MAX_WORDS, MAX_CODE_LINES, MAX_MINUTES = 4000, 250, 90


def budget(path: Path) -> dict:
    """A core lesson's size and times, as the before-stop check counts them: prose words (solutions in <details> not
    counted), code lines, exercises, and the minutes its header states (teaching + exercises)."""
    cells = load(path)["cells"]
    md = "\n".join(source(c) for c in cells if c["cell_type"] == "markdown")
    words = len(re.sub(r"(?s)<details>.*?</details>", " ", md).split())
    code = sum(len(source(c).splitlines()) for c in cells if c["cell_type"] == "code")
    exercises = len(re.findall(r"(?m)^#+ .*Exercise \d", md))
    line = next((l for l in source(cells[0]).splitlines() if "**Time:**" in l), "")
    stated = sum(int(m) for m in re.findall(r"(\d+)\s*min", line)) if re.search(r"(?i)teach", line) else 0
    return {
        "words": words,
        "code": code,
        "exercises": exercises,
        "stated": stated,
        "honest": words / WORDS_PER_MINUTE + MINUTES_PER_EXERCISE * exercises,
        "line": line,
    }


def test_budget_counts_words_code_and_the_stated_time(tmp_path):
    md = lambda s: {"cell_type": "markdown", "source": s, "metadata": {}}  # noqa: E731
    cells = [
        md("# 01 · T\n\n**Time:** teaching 20 min, exercises 16 min.\n\none two three"),
        md("## Exercise 1.1: x"),
        md("<details><summary>Show a solution</summary>hidden words</details>"),
        {"cell_type": "code", "source": "a = 1\nb = 2", "metadata": {}, "outputs": [], "execution_count": None},
    ]
    p = tmp_path / "01_t.ipynb"
    p.write_text(json.dumps({"cells": cells}))
    b = budget(p)
    assert (b["words"], b["code"], b["exercises"], b["stated"]) == (18, 2, 1, 36)


@lessons
def test_a_core_lesson_fits_the_time_it_states(path):
    b = budget(path)
    fits = (
        b["words"] <= MAX_WORDS
        and b["code"] <= MAX_CODE_LINES
        and b["stated"] <= MAX_MINUTES
        and b["stated"] >= b["honest"] - 0.5
    )
    what = (
        f"{path.name}: {b['words']} words (at most {MAX_WORDS}), {b['code']} lines of code (at most "
        f"{MAX_CODE_LINES}), {b['exercises']} exercises, time stated {b['stated']} min in {b['line']!r} "
        f"(honest: at least {b['honest']:.0f} = words / {WORDS_PER_MINUTE} + {MINUTES_PER_EXERCISE} per exercise, "
        f"at most {MAX_MINUTES}; state it as '**Time:** teaching N min, exercises M min.')"
    )
    assert fits, what


@lessons
def test_a_core_lesson_points_to_its_deep_dive(path):
    """Where a lesson has a deep dive, its end links it as optional under a 'Going further' heading."""
    deep = [p for p in DEEP_DIVES if p.name[:2] == path.name[:2]]
    if not deep:
        pytest.skip(f"{path.name} has no deep dive")
    cells = load(path)["cells"]
    tail = "\n".join(source(c) for c in cells[-4:] if c["cell_type"] == "markdown")
    assert "## Going further" in tail and f"]({deep[0].name})" in tail and "optional" in tail.lower(), (
        f"{path.name}: end with '## Going further', linking {deep[0].name} as optional"
    )


@deep_dives
def test_a_deep_dive_follows_its_lesson(path):
    core = [p for p in LESSONS if p.name[:2] == path.name[:2]]
    assert core, f"{path.name} has no lesson {path.name[:2]} to follow"
    first = source(load(path)["cells"][0])
    assert f"]({core[0].name})" in first, f"{path.name}: its first cell links back to {core[0].name}"


@notebooks
def test_no_instructor_notes_in_a_notebook(path):
    """Instructor notes live in docs/instructor-guide.md: JupyterLab would show a learner every cell."""
    for i, cell in enumerate(load(path)["cells"]):
        assert "instructor note" not in source(cell).lower(), (
            f"{where(path, i, cell)}: move it to docs/instructor-guide.md"
        )
