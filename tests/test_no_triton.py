"""The course without Triton (macOS, Windows: Triton publishes no build there).

``import helpers`` works, lessons 01-02 work, and everything that needs a kernel says so in one
line (``KernelsUnavailable``): the kernel names of ``helpers``, its kernel modules, and the first
cell of a kernel lesson (``helpers.require_kernels("lesson 03")``), shown by Jupyter without a
traceback. These tests hide Triton in a subprocess or a Jupyter kernel (tests/no_triton/ first on
PYTHONPATH), so they run in ``make test`` as well as in ``make test-no-triton``.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import helpers
from helpers import mode

ROOT = Path(__file__).resolve().parent.parent
HIDE = ROOT / "tests" / "no_triton"
KERNEL_LESSONS = sorted(
    p for p in (ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb") if int(p.name[:2]) >= 3
)  # + deep dives
HELPERS_MODULES = sorted(
    "helpers." + (p.stem if p.parent.name == "helpers" else f"kernels.{p.stem}")
    for p in [*(ROOT / "helpers").glob("*.py"), *(ROOT / "helpers" / "kernels").glob("*.py")]
    if p.stem != "__init__"
) + ["helpers.kernels"]


def hidden_env() -> dict:
    """This environment with Triton hidden (and the course importable)."""
    path = os.pathsep.join([str(HIDE), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return {**env, "PYTHONPATH": path}


def run_hidden(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=hidden_env(), cwd=ROOT, timeout=300
    )


# ------------------------------------------------------------------------------------------
# import helpers without Triton
# ------------------------------------------------------------------------------------------

PROBE = r"""
import json, importlib, sys
import helpers
out = {"has_triton": helpers.HAS_TRITON, "banner": helpers.banner(), "describe": helpers.describe(),
       "triton_loaded": "triton" in sys.modules and sys.modules["triton"] is not None, "modules": {}, "names": {}}
for name in MODULES:
    try:
        importlib.import_module(name)
        out["modules"][name] = "ok"
    except helpers.KernelsUnavailable as e:
        out["modules"][name] = "KernelsUnavailable: " + str(e)
    except Exception as e:
        out["modules"][name] = f"{type(e).__name__}: {e}"
for name in helpers.KERNEL_NAMES:
    try:
        getattr(helpers, name)
        out["names"][name] = "ok"
    except helpers.KernelsUnavailable as e:
        out["names"][name] = "KernelsUnavailable: " + str(e)
try:
    exec("from helpers import softmax")
    out["from_import"] = "ok"
except helpers.KernelsUnavailable as e:
    out["from_import"] = "KernelsUnavailable: " + str(e)
ns = {}
exec("from helpers import *", ns)
out["star"] = sorted(k for k in ns if not k.startswith("__"))
out["hasattr_lesson03"] = hasattr(helpers, "lesson03")
from helpers import gpu_data, lesson01, lesson02
out["provenance_triton"] = gpu_data.provenance("x")["triton"]
import torch
x = torch.tensor([[1000.0, 1001.0, 1002.0]])
out["stable"] = helpers.stable_softmax(x).tolist()
try:
    helpers.require_kernels("lesson 03")
    out["require"] = "quiet"
except helpers.KernelsUnavailable as e:
    out["require"] = "KernelsUnavailable: " + str(e)
print("JSON" + json.dumps(out))
"""


@pytest.fixture(scope="module")
def probe() -> dict:
    r = run_hidden(f"MODULES = {HELPERS_MODULES!r}\n" + PROBE)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.split("JSON", 1)[1])


def test_helpers_imports_without_triton(probe):
    assert probe["has_triton"] is False
    assert not probe["triton_loaded"]
    assert probe["banner"].startswith("Kernels run on: nothing here (no Triton: lessons 01-02 only) | torch ")
    assert "lessons 01-02" in probe["describe"] and "needs Triton" in probe["describe"]
    assert probe["provenance_triton"] == "not installed"
    assert probe["stable"][0][2] == pytest.approx(0.6652, abs=1e-4)


def test_every_module_that_needs_no_triton_imports(probe):
    for name, result in probe["modules"].items():
        if mode.is_kernel_module(name):
            assert result.startswith(f"KernelsUnavailable: `{name}` needs Triton") or result.startswith(
                "KernelsUnavailable: `helpers.kernels` needs Triton"
            ), (name, result)  # a submodule: its package first
        else:
            assert result == "ok", (name, result)
    for must in (
        "helpers.mode",
        "helpers.reference",
        "helpers.traffic",
        "helpers.plots",
        "helpers.exercises",
        "helpers.gpu_data",
        "helpers.lesson01",
        "helpers.lesson02",
        "helpers.lesson02_exercises",
        "helpers.checks",
        "helpers.device",
    ):
        assert probe["modules"][must] == "ok", must


def test_kernel_names_raise_one_clear_message(probe):
    assert set(probe["names"]) == set(helpers.KERNEL_NAMES)
    for name, result in probe["names"].items():
        assert result.startswith(f"KernelsUnavailable: `helpers.{name}` needs Triton"), result
        assert "\n" not in result and "pip install -r requirements.txt" in result
    assert probe["from_import"].startswith("KernelsUnavailable: `helpers.softmax` needs Triton")
    assert probe["require"].startswith("KernelsUnavailable: Lesson 03 needs Triton")
    assert probe["hasattr_lesson03"] is False  # a plain attribute lookup of a submodule stays an AttributeError


def test_star_import_has_no_kernel_names(probe):
    star = set(probe["star"])
    assert not star & set(helpers.KERNEL_NAMES)
    assert {"stable_softmax", "reference_softmax", "banner", "HAS_TRITON", "require_kernels"} <= star


def test_the_kernel_module_list_names_only_modules_that_need_triton():
    """Each module the guard blocks imports Triton, or another blocked module, at its top: so the
    guard never hides a module that would have worked (and the probe above shows the others work). A kernel
    lesson's checkers (helpers.lessonNN_exercises) stop with their lesson, whose notebook stops at its first
    cell without Triton, even where a checker itself (lesson 09's merge, 9.1) would not need it. A submodule of a
    blocked package (helpers.kernels.attention_checks) is imported through that package."""
    for name in HELPERS_MODULES:
        if not mode.is_kernel_module(name) or name == "helpers.kernels":
            continue
        if name.endswith("_exercises") and mode.is_kernel_module(name.removesuffix("_exercises")):
            continue
        if mode.is_kernel_module(name.rsplit(".", 1)[0]):  # imported through its package (helpers.kernels), which
            continue  # needs Triton itself: it would not have worked
        path = ROOT / Path(*name.split(".")).with_suffix(".py")
        tree = ast.parse(path.read_text())
        imported = set()
        for node in tree.body:
            if isinstance(node, ast.Import):
                imported |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = name.rsplit(".", node.level)[0]
                    base = f"{pkg}.{base}" if base else pkg
                imported.add(base)
                imported |= {f"{base}.{a.name}" for a in node.names}
        assert any(
            m == "triton" or m.startswith("triton.") or (mode.is_kernel_module(m) and m != name) for m in imported
        ), f"{name} is blocked without Triton but imports neither triton nor a kernel module"


def test_with_triton_nothing_changes():
    if not helpers.HAS_TRITON:
        pytest.skip("Triton is hidden or missing in this run")
    assert helpers.require_kernels("lesson 03") is None
    assert callable(helpers.softmax) and "softmax" in helpers.__all__
    assert not any(type(f).__name__ == "_KernelModuleGuard" for f in sys.meta_path)
    assert helpers.__all__[:6] == ["DEVICE", "INTERPRETER", "MODE", "ON_GPU", "banner", "describe"]


# ------------------------------------------------------------------------------------------
# The message: what the platform lacks, where to go
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "system, machine, lacks",
    [
        ("Darwin", "arm64", "macOS"),
        ("Darwin", "x86_64", "macOS"),
        ("Windows", "AMD64", "Windows"),
        ("Linux", "ppc64le", "Linux on ppc64le"),
        ("Linux", "x86_64", None),
        ("Linux", "aarch64", None),
    ],
)
def test_platform_lacks_triton(system, machine, lacks):
    assert mode.platform_lacks_triton(system, machine) == lacks


@pytest.mark.parametrize("system", ["Darwin", "Windows"])
def test_message_where_triton_has_no_build(system):
    msg = mode.kernels_unavailable_message("lesson 03", system=system, machine="arm64", error="x")
    assert msg.startswith("Lesson 03 needs Triton, which publishes no build for ")
    for where in (
        "lessons 01-02 run here",
        "Linux",
        "WSL2",
        "SSH",
        "make lab ARGS=",
        "Colab",
        "pip install -r requirements.txt",
        "README",
    ):
        assert where in msg, where
    assert "\n" not in msg


def test_message_where_triton_could_be_installed():
    msg = mode.kernels_unavailable_message(
        "`helpers.softmax`", system="Linux", machine="x86_64", error="ImportError: libcuda.so: cannot open"
    )
    assert msg.startswith(
        "`helpers.softmax` needs Triton, and `import triton` fails in this Python "
        "(ImportError: libcuda.so: cannot open)"
    )
    assert "pip install -r requirements.txt" in msg and "WSL2" not in msg


def test_kernels_unavailable_is_an_import_error_shown_as_one_line():
    e = mode.KernelsUnavailable("lesson 03")
    assert isinstance(e, ModuleNotFoundError) and e.name == "triton"
    assert e._render_traceback_() == [f"KernelsUnavailable: {e}"]


# ------------------------------------------------------------------------------------------
# A kernel lesson's first cell in Jupyter, Triton hidden: one line, no traceback
# ------------------------------------------------------------------------------------------

#: The line the kernel lessons' first code cell carries, after `import helpers`.
REQUIRE = re.compile(r'^helpers\.require_kernels\("lesson (\d\d)"\)', re.MULTILINE)


def _first_code_cell(path: Path) -> str:
    nb = json.loads(path.read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"] if c["cell_type"] == "code")
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


@pytest.fixture(scope="module")
def hidden_kernel():
    """A Jupyter kernel (started as JupyterLab starts one) in which `import triton` fails."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.v4.new_notebook()
    client = nbclient.NotebookClient(
        nb,
        timeout=300,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(ROOT / "notebooks")}},
    )
    with client.setup_kernel(env=hidden_env()):
        yield client, nbformat


def _run(hidden_kernel, source: str) -> list[dict]:
    client, nbformat = hidden_kernel
    cell = nbformat.v4.new_code_cell(source)
    client.nb.cells.append(cell)
    client.execute_cell(cell, len(client.nb.cells) - 1)
    return cell.outputs


def _one_line_error(outputs, starts: str) -> str:
    errors = [o for o in outputs if o["output_type"] == "error"]
    assert len(errors) == 1, outputs
    err = errors[0]
    assert err["ename"] == "KernelsUnavailable"
    assert len(err["traceback"]) == 1, err["traceback"]  # the message alone, no frames
    line = err["traceback"][0]
    assert line.startswith(f"KernelsUnavailable: {starts}") and "\n" not in line, line
    assert not [o for o in outputs if o["output_type"] == "stream" and "not reached" in o.get("text", "")]
    return line


@pytest.mark.slow
def test_a_kernel_lessons_first_cell_stops_with_one_line(hidden_kernel):
    outputs = _run(
        hidden_kernel,
        "import helpers  # first: it decides whether kernels are compiled for a GPU or interpreted\n"
        'helpers.require_kernels("lesson 03")\n'
        'import triton\nprint("not reached")',
    )
    line = _one_line_error(outputs, "Lesson 03 needs Triton")
    assert "pip install -r requirements.txt" in line


@pytest.mark.slow
def test_lessons_01_02_setup_runs_and_kernel_names_stop_with_one_line(hidden_kernel):
    outputs = _run(
        hidden_kernel,
        "import helpers\nfrom helpers import lesson01, lesson02, lesson02_exercises, plots\nprint(helpers.banner())",
    )
    assert [o["output_type"] for o in outputs] == ["stream"]
    assert outputs[0]["text"].startswith("Kernels run on: nothing here (no Triton")
    _one_line_error(_run(hidden_kernel, "from helpers import lesson04"), "`helpers.lesson04` needs Triton")
    _one_line_error(_run(hidden_kernel, "helpers.softmax"), "`helpers.softmax` needs Triton")


@pytest.mark.slow
@pytest.mark.parametrize("name", [p.name for p in KERNEL_LESSONS])
def test_each_kernel_lesson_stops_at_its_first_cell(hidden_kernel, name):
    source = _first_code_cell(ROOT / "notebooks" / name)
    m = REQUIRE.search(source)
    if not m:
        pytest.skip(f'{name}\'s first code cell does not call helpers.require_kernels("lesson {name[:2]}") yet')
    assert m.group(1) == name[:2]
    before = source[: m.start()]
    assert "import triton" not in before and re.search(r"^import helpers\b", before, re.MULTILINE)
    _one_line_error(_run(hidden_kernel, source), f"Lesson {name[:2]} needs Triton")
