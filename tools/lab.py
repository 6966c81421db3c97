"""Start JupyterLab on the course's notebooks: what `make lab` runs.

Usage: python tools/lab.py [--print-command] [JUPYTERLAB_ARGUMENT ...]
       make lab ARGS="--port 8890 --ip 0.0.0.0"

Runs `python -m jupyterlab` with this interpreter (the course's .venv under make) and adds:

- ``--notebook-dir=<repository>/notebooks``, unless the arguments choose a directory themselves
  (``--notebook-dir``, ``--ServerApp.root_dir``, ...); it works from any working directory;
- ``--allow-root`` when running as root (a container, a rented GPU machine): JupyterLab refuses
  to start as root without it;
- ``--no-browser`` on a machine without a display: Linux and the BSDs with neither ``$DISPLAY``
  nor ``$WAYLAND_DISPLAY`` (a server, a container, an SSH session). JupyterLab then prints the URL
  with its token; open it in a browser, through an SSH tunnel from another machine if needed
  (README, "Start"). macOS and Windows always open the browser. Arguments that choose the browser
  themselves (``--no-browser``, ``--ServerApp.open_browser=...``) win.

Every other argument goes to JupyterLab as given, after the ones above.

The Makefile exports ``MPLBACKEND=Agg`` for the tests. It is dropped here: ipykernel picks the
inline backend only when ``MPLBACKEND`` is unset, so that ``plt.show()`` draws in the notebook.

``--print-command`` prints the command (shell-quoted) instead of running it.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"

# arguments that choose the served directory, or whether a browser opens (prefixes, before any "=")
_DIR_OPTIONS = (
    "--notebook-dir",
    "--ServerApp.root_dir",
    "--ServerApp.notebook_dir",
    "--NotebookApp.notebook_dir",
    "--LabApp.notebook_dir",
)
_BROWSER_OPTIONS = (
    "--no-browser",
    "--ServerApp.open_browser",
    "--ExtensionApp.open_browser",
    "--LabApp.open_browser",
    "--NotebookApp.open_browser",
)


def is_root() -> bool:
    """True when the effective user id is 0 (`id -u` prints 0). Never on Windows."""
    geteuid = getattr(os, "geteuid", None)
    return geteuid is not None and geteuid() == 0


def has_display(platform: str | None = None, environ: dict[str, str] | None = None) -> bool:
    """Whether a browser can open here: always on macOS and Windows; elsewhere (Linux, BSD)
    only with an X11 ($DISPLAY) or Wayland ($WAYLAND_DISPLAY) display."""
    platform = sys.platform if platform is None else platform
    environ = os.environ if environ is None else environ
    if platform == "darwin" or platform.startswith(("win", "cygwin", "msys")):
        return True
    return bool(environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY"))


def _given(args: list[str], options: tuple[str, ...]) -> bool:
    return any(a.split("=", 1)[0] in options for a in args)


def build_command(
    args: list[str], *, root: bool, display: bool, python: str | None = None, notebooks: Path = NOTEBOOKS
) -> list[str]:
    """The JupyterLab command line for the extra arguments `args`."""
    cmd = [python or sys.executable, "-m", "jupyterlab"]
    if not _given(args, _DIR_OPTIONS):
        cmd.append(f"--notebook-dir={notebooks}")
    if root:
        cmd.append("--allow-root")
    if not display and not _given(args, _BROWSER_OPTIONS):
        cmd.append("--no-browser")
    return cmd + list(args)


def lab_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for JupyterLab: this one without the Makefile's MPLBACKEND=Agg."""
    env = dict(os.environ if environ is None else environ)
    if env.get("MPLBACKEND", "").lower() == "agg":
        del env["MPLBACKEND"]
    return env


def main(argv: list[str]) -> int:
    print_only = "--print-command" in argv
    args = [a for a in argv if a != "--print-command"]
    display = has_display()
    cmd = build_command(args, root=is_root(), display=display)
    if print_only:
        print(shlex.join(cmd) if os.name == "posix" else subprocess.list2cmdline(cmd))
        return 0
    if not display and not _given(args, _BROWSER_OPTIONS):
        print(
            "tools/lab.py: no display here, so no browser opens. Open the URL with the token that "
            "JupyterLab prints below (from another machine: an SSH tunnel, see README 'Start').",
            file=sys.stderr,
            flush=True,
        )
    env = lab_env()
    if os.name == "posix":
        # replace this process: Ctrl-C and signals reach JupyterLab directly
        os.execve(cmd[0], cmd, env)
    return subprocess.call(cmd, env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
