"""What the compile-for-a-GPU tests share: a script run in a fresh Python, with the interpreter off, that compiles a
kernel module for a CUDA target with the installed Triton (no GPU needed) and prints a JSON report as its last line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def compile_report(script: str, module_path, tmp_path, cases):
    """Run ``script`` (``python -c script module_path tmp_path json(cases)``) and return its report; skip where this
    Triton has no CUDA target."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    r = subprocess.run(
        [sys.executable, "-c", script, str(module_path), str(tmp_path), json.dumps(cases)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    if r.returncode != 0 and ("GPUTarget" in r.stderr or "No module named" in r.stderr):
        pytest.skip("this Triton cannot compile for a CUDA target here: " + r.stderr.strip().splitlines()[-1])
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])
