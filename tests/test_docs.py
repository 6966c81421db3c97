"""The repository's own documents: PERFORMANCE.md is where things stand (at most 300 lines, no lab journal), and the
tables it shares with the README are what tools/bench_table.py generates from figures/data/ today."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_performance_md_is_short_and_current():
    text = (ROOT / "PERFORMANCE.md").read_text()
    assert len(text.splitlines()) <= 300, "PERFORMANCE.md holds where things stand, in at most 300 lines"
    journal = re.findall(r"(?i)\bsessions?\b|\bwip/|tried, not kept|\bscratch\b", text)
    assert not journal, f"the journal belongs in git history, not PERFORMANCE.md: {sorted(set(journal))}"
    for marker in ("bench-table", "bench-targets", "bench-backward", "bench-attention", "bench-sampling"):
        assert f"<!-- {marker}:start -->" in text, marker


def _check_with(tool: str, timeout: int):
    """Run ``python tools/<tool> --check`` from the checkout; it exits 0 when what it writes is current."""
    r = subprocess.run(
        [sys.executable, str(ROOT / "tools" / tool), "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_generated_tables_match_the_recordings():
    _check_with("bench_table.py", 120)


def test_every_tool_is_named_in_the_docs():
    """tools/ holds what a user or maintainer runs, each named in docs/CONVENTIONS.md's table (one-off probes are
    deleted: git history keeps them)."""
    conventions = (ROOT / "docs" / "CONVENTIONS.md").read_text()
    tools = sorted(p.relative_to(ROOT / "tools").as_posix() for p in (ROOT / "tools").rglob("*.py"))
    unnamed = [t for t in tools if f"`{t}`" not in conventions and f"`{Path(t).name}`" not in conventions]
    assert not unnamed, f"name these in docs/CONVENTIONS.md's Tools table, or delete them: {unnamed}"


def test_the_readme_lesson_table_and_workshop_plan_come_from_the_lessons():
    """README's lesson table and workshop plan are written by tools/course.py from each lesson's first cell (its
    title, summary and stated time): they agree with the lessons."""
    _check_with("course.py", 60)


def test_bench_runs_keeps_only_what_is_loaded_or_cited():
    """figures/data/bench_runs/ holds the runs a lesson, PERFORMANCE.md, a recording's header or a test loads or cites
    (by name, or by a pattern: bench_h100_*.csv, the earlier sweeps lesson 05 reads); receipts nobody reads live in
    git history."""
    texts = [p.read_text() for p in (ROOT / "notebooks").glob("*.ipynb")]
    texts += [(ROOT / "PERFORMANCE.md").read_text(), *(p.read_text() for p in (ROOT / "docs").glob("*.md"))]
    texts += [p.read_text() for p in (ROOT / "figures" / "data").glob("*.csv")]
    texts += [p.read_text() for d in ("tests", "helpers", "tools") for p in (ROOT / d).glob("*.py")]
    text = "\n".join(texts)
    # bench_runs/<prefix>* or .glob("<prefix>*"): every file of that prefix counts as cited
    prefixes = set(re.findall(r"bench_runs/([A-Za-z0-9_]+?)(?:\*|\{|<)", text))
    prefixes |= set(re.findall(r'glob\(f?"([A-Za-z0-9_]+?)(?:\{gpu\}_)?\*\.csv"\)', text))
    prefixes |= set(re.findall(r"bench_runs/([A-Za-z0-9_]+_)\"", text))
    unread = [
        p.name
        for p in sorted((ROOT / "figures" / "data" / "bench_runs").iterdir())
        if p.stem not in text and not any(p.name.startswith(pre) for pre in prefixes)
    ]
    assert not unread, f"nothing loads or cites these runs (git history keeps them; delete them): {unread}"
