"""tools/lab.py, what `make lab` runs: the JupyterLab command it builds on each kind of machine.

The browser test tests/browser/test_lab.mjs (`make test-lab`) starts it for real."""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "lab.py"

_spec = importlib.util.spec_from_file_location("course_lab", SCRIPT)
lab = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lab)

NB_DIR = f"--notebook-dir={ROOT / 'notebooks'}"


def cmd(args=(), *, root=False, display=True):
    return lab.build_command(list(args), root=root, display=display, python="py")


def test_a_laptop_gets_plain_jupyterlab_on_the_notebooks():
    assert cmd() == ["py", "-m", "jupyterlab", NB_DIR]


def test_allow_root_only_as_root():
    assert "--allow-root" in cmd(root=True)
    assert "--allow-root" not in cmd(root=False)


def test_no_browser_only_without_a_display():
    assert "--no-browser" in cmd(display=False)
    assert "--no-browser" not in cmd(display=True)


def test_extra_arguments_come_last_in_order():
    extra = ["--port", "8890", "--ip", "0.0.0.0", "--IdentityProvider.token=abc"]
    c = cmd(extra, root=True, display=False)
    assert c[-len(extra) :] == extra
    assert c[: -len(extra)] == ["py", "-m", "jupyterlab", NB_DIR, "--allow-root", "--no-browser"]


@pytest.mark.parametrize("given", ["--notebook-dir=/tmp/x", "--ServerApp.root_dir=/tmp/x", "--notebook-dir"])
def test_a_directory_given_replaces_notebooks(given):
    # JupyterLab refuses two root directories, so ours is left out
    c = cmd([given])
    assert NB_DIR not in c and c[-1] == given


@pytest.mark.parametrize("given", ["--ServerApp.open_browser=True", "--no-browser"])
def test_a_browser_choice_given_wins(given):
    c = cmd([given], display=False)
    assert c.count("--no-browser") == (given == "--no-browser")
    assert c[-1] == given


@pytest.mark.parametrize(
    "platform, environ, expected",
    [
        ("linux", {}, False),
        ("linux", {"DISPLAY": ""}, False),
        ("linux", {"DISPLAY": ":0"}, True),
        ("linux", {"WAYLAND_DISPLAY": "wayland-0"}, True),
        ("freebsd14", {}, False),
        ("darwin", {}, True),
        ("win32", {}, True),
    ],
)
def test_has_display(platform, environ, expected):
    assert lab.has_display(platform, environ) is expected


def test_is_root_follows_the_effective_uid(monkeypatch):
    monkeypatch.setattr(lab.os, "geteuid", lambda: 0, raising=False)
    assert lab.is_root()
    monkeypatch.setattr(lab.os, "geteuid", lambda: 1000, raising=False)
    assert not lab.is_root()
    monkeypatch.delattr(lab.os, "geteuid", raising=False)  # Windows
    assert not lab.is_root()


def test_the_makefiles_agg_backend_is_dropped_for_the_kernels():
    assert "MPLBACKEND" not in lab.lab_env({"MPLBACKEND": "Agg", "HOME": "/h"})
    assert lab.lab_env({"MPLBACKEND": "module://x"})["MPLBACKEND"] == "module://x"


def _stdout(command: list, cwd, env_drop: tuple, **env_update) -> str:
    """What ``command`` prints, run in ``cwd`` with this environment less ``env_drop``, plus ``env_update``."""
    env = {k: v for k, v in os.environ.items() if k not in env_drop} | env_update
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=True).stdout


def _print_command(env_update, *args, cwd):
    command = [sys.executable, str(SCRIPT), "--print-command", *args]
    return shlex.split(_stdout(command, cwd, ("DISPLAY", "WAYLAND_DISPLAY"), **env_update))


@pytest.mark.skipif(os.name != "posix" or sys.platform == "darwin", reason="the display check is for Linux/BSD")
def test_print_command_here(tmp_path):
    root = os.geteuid() == 0
    headless = _print_command({}, "--port", "8890", cwd=tmp_path)  # from any working directory
    assert headless[:3] == [sys.executable, "-m", "jupyterlab"]
    assert NB_DIR in headless and headless[-2:] == ["--port", "8890"]
    assert ("--allow-root" in headless) is root
    assert "--no-browser" in headless
    assert "--no-browser" not in _print_command({"DISPLAY": ":0"}, cwd=tmp_path)


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_lab_passes_args_to_the_script():
    # -n: print, do not run; -o: do not (re)build the venv for this
    make_lab = ["make", "-n", "--no-print-directory", "-o", ".venv/.installed-stamp", "lab"]
    out = _stdout([*make_lab, "ARGS=--port 8890 --ip 0.0.0.0"], ROOT, ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "ARGS"))
    lines = [line for line in out.splitlines() if "tools/lab.py" in line]
    assert len(lines) == 1 and lines[0].endswith("tools/lab.py --port 8890 --ip 0.0.0.0"), out
