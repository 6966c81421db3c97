"""Provenance of recorded data: the commit it names (``helpers.gpu_data._commit``).

The course's own commit, only when the course's folder is the top of its own git checkout; a copy
of the course inside another repository names 'unknown' (never the other repository's commit);
``SOFTMAX_COURSE_COMMIT`` overrides both (a copy sent to a GPU machine without its .git).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import gpu_data

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def git(*args, cwd) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def nested_copy(tmp_path):
    """An outer git repository with a commit, and a copy of the course's helpers/ in a subfolder."""
    outer = tmp_path / "outer"
    outer.mkdir()
    git("init", "-q", cwd=outer)
    (outer / "README").write_text("another project\n")
    git("add", "README", cwd=outer)
    git("commit", "-q", "-m", "outer", cwd=outer)
    course = outer / "vendor" / "softmax-course"
    shutil.copytree(ROOT / "helpers", course / "helpers", ignore=shutil.ignore_patterns("__pycache__"))
    return outer, course


def commit_of_copy(course: Path, **env) -> tuple[str, str]:
    """(commit, helpers' file) as the copy's own gpu_data names them, in a fresh process."""
    code = "import helpers.gpu_data as g; print(g._commit()); print(g.__file__)"
    full = {k: v for k, v in os.environ.items() if k != "SOFTMAX_COURSE_COMMIT"}
    full.update(env, PYTHONPATH=os.pathsep.join([str(course), *filter(None, [os.environ.get("PYTHONPATH")])]))
    r = subprocess.run([sys.executable, "-c", code], cwd=course, env=full, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    commit, path = r.stdout.strip().splitlines()[-2:]
    return commit, path


def test_a_copy_inside_another_repository_names_unknown(nested_copy):
    outer, course = nested_copy
    outer_head = git("rev-parse", "--short", "HEAD", cwd=outer)
    commit, path = commit_of_copy(course)
    assert Path(path).resolve().is_relative_to(course.resolve()), path  # the copy was imported, not the checkout
    assert commit == "unknown" and commit != outer_head
    assert gpu_data._commit(course) == "unknown"


def test_the_environment_variable_wins(nested_copy, monkeypatch):
    _, course = nested_copy
    assert commit_of_copy(course, SOFTMAX_COURSE_COMMIT="abc1234")[0] == "abc1234"
    monkeypatch.setenv("SOFTMAX_COURSE_COMMIT", "def5678")
    assert gpu_data._commit() == "def5678"
    assert gpu_data.provenance("x")["commit"] == "def5678"


def test_the_course_checkout_names_its_short_head(monkeypatch):
    monkeypatch.delenv("SOFTMAX_COURSE_COMMIT", raising=False)
    try:
        top = git("rev-parse", "--show-toplevel", cwd=ROOT)
    except subprocess.CalledProcessError:
        pytest.skip("the course is not a git checkout here")
    if Path(top).resolve() != ROOT.resolve():
        pytest.skip("the course is a folder of another checkout here")
    assert gpu_data._commit() == git("rev-parse", "--short", "HEAD", cwd=ROOT) != "unknown"


def test_a_folder_outside_any_repository_names_unknown(tmp_path, monkeypatch):
    monkeypatch.delenv("SOFTMAX_COURSE_COMMIT", raising=False)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # no repository above tmp_path counts
    assert gpu_data._commit(tmp_path) == "unknown"


def test_the_provenance_line_a_lesson_prints_carries_no_history():
    """Lessons print data.provenance(recording): GPU, versions, date and command. How a file was assembled
    (commits, branches, runs kept under bench_runs/, a probe not kept in the course) belongs in its other header
    lines (commit, notes), or a
    lesson re-executed would print the course's history (lesson 06 once stored such a line, and its claims
    test failed as soon as the cell ran again)."""
    import re

    from helpers import data

    commit = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
    found = {}
    for path in sorted(gpu_data.DATA_DIR.glob("*.csv")):
        line = data.provenance(data.load(str(path)))
        bad = commit.findall(line) + [w for w in ("bench_runs", "wip/", "branch ", "scratch_") if w in line]
        if bad:
            found[path.name] = bad
    assert not found, found
