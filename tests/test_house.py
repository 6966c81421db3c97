"""The course's house rules, checked: kernels are the lessons' own cells (exported, never edited by
hand), lessons are siblings (no lesson's modules import another lesson's), one module per kernel family."""

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import export  # noqa: E402

KERNEL_LESSONS = sorted(p for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb") if int(p.name[:2]) >= 3)
DEEP_DIVES = sorted((ROOT / "notebooks").glob("[0-9][0-9]d_*.ipynb"))


def test_generated_kernel_modules_match_the_notebooks():
    assert export.problems() == []


def test_every_kernel_lesson_exports_its_kernels():
    """A kernel lesson, or its deep dive where the production version is taught there, exports its kernels."""
    for nb in KERNEL_LESSONS:
        own = [nb] + [d for d in DEEP_DIVES if d.name[:2] == nb.name[:2]]
        cells = [c for p in own for c in export.export_cells(p)]
        assert cells, (
            f"{nb.name} (or its deep dive) has no `#| export:` cell: its kernels must be written in the lesson"
        )
        assert any("@triton.jit" in code for _, code in cells), f"{nb.name} (or its deep dive) exports no Triton kernel"


def _jit_functions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    out = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            for d in node.decorator_list:
                target = d.func if isinstance(d, ast.Call) else d
                if ast.unparse(target) in ("triton.jit", "jit"):
                    out.append(node.name)
    return out


def test_every_library_kernel_comes_from_a_lesson():
    """Each @triton.jit kernel of helpers/kernels/ lives in a module generated from a notebook."""
    generated = set(export.generated_files())
    for path in sorted((ROOT / "helpers" / "kernels").glob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        kernels = _jit_functions(path)
        if kernels:
            assert rel in generated, f"{rel} defines {kernels} but is not exported from a lesson"


def test_an_edit_to_a_lesson_kernel_makes_the_library_stale(tmp_path):
    """The check is mechanical: change a notebook's kernel cell and the library no longer matches."""
    for sub in ("notebooks", "helpers"):
        shutil.copytree(ROOT / sub, tmp_path / sub, ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
    nb_path = tmp_path / "notebooks" / "03_fused_softmax.ipynb"
    nb = json.loads(nb_path.read_text())
    cell = next(
        c for c in nb["cells"] if c["cell_type"] == "code" and "def softmax_fused_kernel(" in "".join(c["source"])
    )
    src = "".join(cell["source"])
    assert "x - row_max" in src
    cell["source"] = src.replace("x - row_max", "x")  # the classic experiment: no max shift
    nb_path.write_text(json.dumps(nb))
    found = export.problems(tmp_path)
    assert len(found) == 1 and "helpers/kernels/fused.py differs" in found[0] and "row_max" in found[0]
    assert export.write(tmp_path) == ["helpers/kernels/fused.py"]
    assert export.problems(tmp_path) == []


def test_the_export_command_checks(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "export.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


def test_a_target_exported_from_two_notebooks_is_refused(tmp_path):
    (tmp_path / "notebooks").mkdir()
    cell = {"cell_type": "code", "source": "#| export: helpers/kernels/x.py\nA = 1\n", "metadata": {}, "outputs": []}
    for name in ("03_a.ipynb", "04_b.ipynb"):
        (tmp_path / "notebooks" / name).write_text(json.dumps({"cells": [cell]}))
    with pytest.raises(ValueError, match="one lesson"):
        export.modules(tmp_path)


def test_a_lesson_and_its_deep_dive_export_one_module_in_order(tmp_path):
    (tmp_path / "notebooks").mkdir()
    for name, line in (("03_a.ipynb", "KERNEL = 1"), ("03d_a_in_depth.ipynb", "WRAPPER = 2")):
        cell = {
            "cell_type": "code",
            "source": f"#| export: helpers/kernels/x.py\n{line}\n",
            "metadata": {},
            "outputs": [],
        }
        (tmp_path / "notebooks" / name).write_text(json.dumps({"cells": [cell]}))
    text = export.modules(tmp_path)["helpers/kernels/x.py"]
    assert text.index("KERNEL = 1") < text.index("WRAPPER = 2")


def _imports(path: Path) -> set[str]:
    """Modules a file imports, absolute ('helpers.lesson03') whatever the import's form."""
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from . import x / from .lesson03 import y
                base = "helpers" + (("." + base) if base else "")
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names}
    return out


#: A lesson's modules: helpers/lessonNN.py (what the lesson shows) and helpers/lessonNN_exercises.py (its checkers).
LESSON_MODULE = re.compile(r"lesson(\d\d)(_exercises)?")


def _lesson_modules() -> dict[str, tuple[Path, str]]:
    """'helpers.lesson05_exercises' -> (its path, '05'), for every lesson module of helpers/."""
    found = {}
    for path in sorted((ROOT / "helpers").glob("lesson*.py")):
        m = LESSON_MODULE.fullmatch(path.stem)
        assert m, f"{path.name}: a lesson's modules are lessonNN.py and lessonNN_exercises.py"
        found[f"helpers.{path.stem}"] = (path, m.group(1))
    return found


def _reaches(imported: set[str], modules) -> list[str]:
    return sorted(m for m in imported if any(m == o or m.startswith(o + ".") for o in modules))


def test_lessons_are_siblings():
    """No lesson module imports another lesson's (what two lessons share lives in a shared layer). A lesson's
    exercise checkers, helpers/lessonNN_exercises.py, are part of lesson NN: they may import helpers.lessonNN,
    and helpers.lessonNN never imports them (the checkers sit above what the lesson shows)."""
    lessons = _lesson_modules()
    assert lessons
    for name, (path, nn) in lessons.items():
        others = {o for o, (_, other) in lessons.items() if other != nn}
        bad = _reaches(_imports(path), others)
        assert not bad, f"{path.name} imports another lesson: {bad}"
        if name.endswith("_exercises"):
            assert name.removesuffix("_exercises") in lessons, f"{path.name} has no lesson module beside it"
        else:
            bad = _reaches(_imports(path), {name + "_exercises"})
            assert not bad, f"{path.name} imports its own exercise checkers: {bad}"


def test_shared_layers_import_no_lesson():
    """Kernels, launch, measurement, plots, data and exercises never depend on a lesson (the
    benchmark harness, tools/bench.py, which records what lessons measure, is above them)."""
    lessons = _lesson_modules()
    for path in sorted((ROOT / "helpers").rglob("*.py")):
        if f"helpers.{path.stem}" in lessons and path.parent == ROOT / "helpers":
            continue
        bad = sorted(m for m in _imports(path) if m.startswith("helpers.lesson"))
        assert not bad, f"{path.relative_to(ROOT)} imports a lesson: {bad}"


def test_helpers_import_no_tool():
    """The maintainers' scripts (tools/: benchmarks, figures) use helpers, never the other way round:
    a learner's helpers work without them."""
    scripts = {p.stem for p in (ROOT / "tools").glob("*.py")}
    assert {"bench", "backward_bench", "attention_bench", "bench_plots"} <= scripts
    for path in sorted((ROOT / "helpers").rglob("*.py")):
        bad = sorted(m for m in _imports(path) if m.split(".")[0] in scripts | {"tools"})
        assert not bad, f"{path.relative_to(ROOT)} imports a tool: {bad}"


def test_one_module_per_kernel_family():
    import helpers.kernels as K

    assert K.softmax_fused_kernel.fn.__module__ == "helpers.kernels.fused"
    assert {K.softmax_online_kernel.fn.__module__, K.softmax_three_pass_kernel.fn.__module__} == {
        "helpers.kernels.online"
    }
    assert {K.softmax_persistent_kernel.fn.__module__, K.softmax_tiled_kernel.fn.__module__} == {
        "helpers.kernels.persistent"
    }
    assert {K.softmax_split_stats_kernel.fn.__module__, K.softmax_split_coop_kernel.fn.__module__} == {
        "helpers.kernels.split"
    }
    assert K.softmax.__module__ == "helpers.kernels.dispatch"


def test_the_formatter_leaves_exactly_the_generated_modules():
    """pyproject.toml's [tool.ruff.format] exclude lists every module tools/export.py writes, and nothing else of
    helpers/: the lessons keep their layout, and every hand-written module is formatted."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 on

    exclude = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["format"]["exclude"]
    listed = {p for p in exclude if p.startswith("helpers/")}
    assert listed == set(export.generated_files())
