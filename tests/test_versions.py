"""helpers._versions: one clear message at import for an unsupported install."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import _versions

ROOT = Path(__file__).resolve().parent.parent
OK = {"torch": "2.13.0+cpu", "triton": "3.9.0", "numpy": "2.3.5"}


def problems(interpret=True, **versions):
    return _versions.problems({**OK, **versions}, interpret=interpret)


def test_supported_versions_have_no_problems():
    assert problems() == []
    assert problems(interpret=False) == []


@pytest.mark.parametrize(
    "versions",
    [
        {"torch": "2.5.0"},
        {"torch": "2.14.99"},
        {"torch": "2.6.0a0+git1234abc"},
        {"torch": "2.11.0+cu130"},
        {"triton": "3.6.0"},
        {"triton": "3.9.5"},
        {"triton": "3.8.0rc1"},
        {"numpy": "1.26.4"},
        {"numpy": "2.99.0"},
        {"triton": "3.6.0", "numpy": "2.3.5"},
        {"triton": "3.7.0", "numpy": "2.4.0"},
    ],
    ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items()),
)
def test_edges_of_the_supported_ranges(versions):
    assert problems(**versions) == []


#: package -> (its supported range, as the message writes it; versions outside it)
OUT_OF_RANGE = {
    "torch": (">=2.5,<2.15", ["2.4.1", "2.15.0", "3.0.0"]),
    "triton": (">=3.6,<3.10", ["3.5.1", "3.10.0", "2.3.1"]),
    "numpy": (">=1.26,<3.0", ["1.25.2", "3.0.0"]),
}


@pytest.mark.parametrize("name, version", [(name, v) for name, (_, vs) in OUT_OF_RANGE.items() for v in vs])
def test_out_of_range_is_one_problem_naming_the_package_range_and_fix(name, version):
    rng = OUT_OF_RANGE[name][0]
    found = problems(**{name: version})
    assert len(found) == 1, found
    msg = found[0]
    assert msg.startswith(f"{name} {version} ")
    assert rng in msg
    assert "pip install -r requirements.txt" in msg


def test_missing_package():
    found = _versions.problems({"torch": OK["torch"], "triton": OK["triton"]}, interpret=True)
    assert len(found) == 1 and "numpy is not installed" in found[0]
    assert "requirements.txt" in found[0]


def test_every_problem_is_listed():
    found = problems(torch="2.1.0", triton="3.0.0", numpy="1.20.0")
    assert [m.split()[0] for m in found] == ["torch", "triton", "numpy"]


@pytest.mark.parametrize("numpy_version", ["2.4.0", "2.4.2", "2.5.1"])
def test_triton_36_interpreter_with_numpy_24_is_flagged_with_the_fix(numpy_version):
    found = problems(triton="3.6.0", numpy=numpy_version, interpret=True)
    assert len(found) == 1, found
    msg = found[0]
    assert "triton 3.6.0" in msg and f"numpy {numpy_version}" in msg and "interpreter" in msg
    assert "numpy<2.4" in msg  # the fix, either one
    assert "newer triton" in msg


def test_triton_36_numpy_24_is_flagged_without_a_gpu_even_if_not_forced(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert len(problems(triton="3.6.0", numpy="2.4.0", interpret=False)) == 1


def test_triton_36_numpy_24_is_fine_for_compiled_gpu_runs(monkeypatch):
    """Only the interpreter uses NumPy: on a GPU without TRITON_INTERPRET the pair is fine
    (this is the combination the GPU machines ship)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert problems(triton="3.6.0", numpy="2.5.2", interpret=False) == []
    # ...but forcing the interpreter on that GPU machine brings the problem back
    assert len(problems(triton="3.6.0", numpy="2.5.2", interpret=True)) == 1


def test_interpret_defaults_to_the_environment(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    versions = {**OK, "triton": "3.6.0", "numpy": "2.4.0"}
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert len(_versions.problems(versions)) == 1
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert _versions.problems(versions) == []


def test_installed_versions_are_supported():
    """The environment running the tests is a supported one (else helpers would not import)."""
    assert _versions.problems() == []
    assert _versions.installed("torch") and _versions.installed("no-such-package-xyz") is None


def test_check_versions_raises_listing_every_problem(monkeypatch):
    monkeypatch.delenv("SOFTMAX_COURSE_SKIP_VERSION_CHECK", raising=False)
    monkeypatch.setattr(_versions, "problems", lambda: ["torch 1.0 is too old: fix A.", "numpy is broken: fix B."])
    with pytest.raises(_versions.UnsupportedVersionError) as info:
        _versions.check_versions()
    assert isinstance(info.value, ImportError)  # so `import helpers` fails as an import should
    msg = str(info.value)
    assert "fix A." in msg and "fix B." in msg
    assert "SOFTMAX_COURSE_SKIP_VERSION_CHECK=1" in msg


def test_check_versions_quiet_when_all_is_well(monkeypatch):
    monkeypatch.delenv("SOFTMAX_COURSE_SKIP_VERSION_CHECK", raising=False)
    monkeypatch.setattr(_versions, "problems", lambda: [])
    assert _versions.check_versions() is None


def test_skip_variable_skips_the_check(monkeypatch):
    called = []

    def fake():
        called.append(1)
        return ["would fail"]

    monkeypatch.setattr(_versions, "problems", fake)
    monkeypatch.setenv("SOFTMAX_COURSE_SKIP_VERSION_CHECK", "1")
    assert _versions.check_versions() is None
    assert called == []


def test_import_helpers_fails_with_the_message_in_a_fresh_process():
    """End to end: with an unsupported torch installed, `import helpers` raises
    UnsupportedVersionError (before importing torch), and the skip variable lets it through."""
    code = (
        "import importlib.metadata as m\n"
        "real = m.version\n"
        "m.version = lambda name: '1.0.0' if name == 'torch' else real(name)\n"
        "try:\n"
        "    import helpers\n"
        "    print('IMPORTED', helpers.MODE)\n"
        "except ImportError as e:\n"
        "    print('RAISED', type(e).__name__, e)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "SOFTMAX_COURSE_SKIP_VERSION_CHECK"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert "RAISED UnsupportedVersionError" in out.stdout, out.stdout + out.stderr
    assert "torch 1.0.0 is outside the supported range" in out.stdout
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={**env, "SOFTMAX_COURSE_SKIP_VERSION_CHECK": "1"},
    )
    assert "IMPORTED" in out.stdout, out.stdout + out.stderr


def test_triton_is_optional_but_checked_when_installed():
    """Triton publishes no build for macOS or Windows: without it helpers imports (lessons 01-02
    run); an installed Triton outside the range is still a problem."""
    assert "triton" in _versions.OPTIONAL
    assert _versions.problems({"torch": OK["torch"], "triton": None, "numpy": OK["numpy"]}, interpret=True) == []
    assert len(problems(triton="3.5.0")) == 1


def test_requirements_install_triton_only_where_it_has_wheels():
    """requirements.txt's marker: Linux on x86_64 or aarch64 (triton 3.6-3.9 publish wheels for
    nothing else), so `pip install -r requirements.txt` works on macOS and Windows."""
    from pathlib import Path

    from packaging.requirements import Requirement

    root = Path(__file__).resolve().parent.parent
    lines = [ln.split(" #")[0].strip() for ln in (root / "requirements.txt").read_text().splitlines()]
    (line,) = [ln for ln in lines if ln.startswith("triton")]
    req = Requirement(line)
    lo, hi = (_versions._fmt(v) for v in _versions.SUPPORTED["triton"])
    assert set(str(req.specifier).split(",")) == {f">={lo}", f"<{hi}"}  # the range helpers checks
    for system, machine, wanted in [
        ("linux", "x86_64", True),
        ("linux", "aarch64", True),
        ("darwin", "arm64", False),
        ("darwin", "x86_64", False),
        ("win32", "AMD64", False),
        ("linux", "ppc64le", False),
    ]:
        env = {"sys_platform": system, "platform_machine": machine}
        assert req.marker.evaluate(env) is wanted, (system, machine)
    # the same platforms as helpers.mode names when it explains a missing Triton
    from helpers import mode

    for system, machine in [("Linux", "x86_64"), ("Linux", "aarch64"), ("Darwin", "arm64"), ("Windows", "AMD64")]:
        env = {
            "sys_platform": {"Linux": "linux", "Darwin": "darwin", "Windows": "win32"}[system],
            "platform_machine": machine,
        }
        assert req.marker.evaluate(env) == (mode.platform_lacks_triton(system, machine) is None)


_FMA = r"""
import os, subprocess, sys, warnings
import helpers  # on the CPU it also sets TRITON_INTERPRET=1, so this process compiles nothing
import triton
knob = getattr(getattr(triton, "knobs", None), "language", None)
if hasattr(knob, "fp_fusion_enabled"):  # Triton 3.9: what a compile asks, and where it warns
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        print("knob", knob.fp_fusion_enabled(None))
# A process started from here (a lesson's sandbox worker) inherits the setting: it compiles for sm_90.
env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
r = subprocess.run([sys.executable, "-W", "error", sys.argv[1]], capture_output=True, text=True, env=env)
print(r.stdout.strip() or r.stderr.strip().splitlines()[-1], os.environ["TRITON_DEFAULT_FP_FUSION"])
"""

_MUL_ADD = r"""
import triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


@triton.jit
def mul_add(x_ptr, y_ptr, z_ptr, out_ptr):
    i = tl.arange(0, 32)
    tl.store(out_ptr + i, tl.load(x_ptr + i) * tl.load(y_ptr + i) + tl.load(z_ptr + i))


k = triton.compile(ASTSource(fn=mul_add, signature={n: "*fp32" for n in ("x_ptr", "y_ptr", "z_ptr", "out_ptr")},
                             constexprs={}), target=GPUTarget("cuda", 90, 32))
print("fma" if "fma.rn.f32" in k.asm["ptx"] else "no-fma")
"""


@pytest.mark.needs_triton
@pytest.mark.parametrize("preset", [None, "0"])
def test_kernels_compile_with_fp_fusion_on_unless_the_user_says_otherwise(preset, tmp_path):
    """`import helpers` keeps Triton's FP fusion (a * b + c as one FMA) on, as the kernels were measured: Triton
    3.9 warns at the first compile that 3.10 turns it off by default, and a lesson would show that warning. A
    value the user set (TRITON_DEFAULT_FP_FUSION=0) stays. Compiled for sm_90 in a fresh process, no GPU needed."""
    pytest.importorskip("triton.backends.nvidia")
    if torch.cuda.is_available():
        pytest.skip("compiles for sm_90 without a GPU")
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_DEFAULT_FP_FUSION", "TRITON_INTERPRET")}
    if preset is not None:
        env["TRITON_DEFAULT_FP_FUSION"] = preset
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    (tmp_path / "fma.py").write_text(_FMA)
    (tmp_path / "mul_add.py").write_text(_MUL_ADD)  # Triton reads a kernel's source from its file
    out = subprocess.run(
        [sys.executable, str(tmp_path / "fma.py"), str(tmp_path / "mul_add.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    if "GPUTarget" in out.stdout + out.stderr:
        pytest.skip("this Triton cannot compile for a CUDA target here")
    assert out.returncode == 0, out.stderr[-3000:]
    on = preset is None
    knob = [line for line in out.stdout.splitlines() if line.startswith("knob")]
    assert knob in ([], [f"knob {on}"]), out.stdout  # no warning (an error here) where Triton has it
    assert out.stdout.splitlines()[-1].split() == (["fma", "1"] if on else ["no-fma", "0"]), out.stdout
