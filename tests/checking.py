"""What the checker tests of every lesson share: run a checker on an attempt and read its one line."""


def verdict(capsys, checker, attempt) -> str:
    """Run ``checker(attempt)`` and return the verdict line it printed. A checker prints exactly one, but for a
    correct Triton kernel run under the interpreter, which gets a second: its traffic (helpers.traffic), printed
    exactly when the check launched the learner's kernel."""
    from helpers import exercises

    checker(attempt)
    out = capsys.readouterr().out.strip().splitlines()
    launched = bool(exercises.TRAFFIC)
    if out and "): correct" in out[0] and launched:
        assert len(out) == 2 and out[1].startswith("Traffic: your kernel reads its input"), out
    else:
        assert len(out) == 1, out
    return out[0]


def status(line: str) -> str:
    """'correct: ...', 'not yet: ...' or 'wrong: ...' from a verdict line."""
    return line.split("): ", 1)[1]


def _untouched(*args):
    """An attempt as the template leaves it."""
    raise NotImplementedError


def _raises(*args):
    """An attempt whose code fails."""
    return 1 / 0


def assert_checker_contract(capsys, checker, right, wrong, hint: str) -> None:
    """What every checker owes the learner: "correct" for the right answer, "not yet" for the untouched
    template (or None), "wrong" with ``hint`` for a plausible wrong answer, "wrong: your code raised"
    for code that fails, "wrong" for a missing return; one line each time, never an exception."""
    assert status(verdict(capsys, checker, right)).startswith("correct")
    assert status(verdict(capsys, checker, _untouched)).startswith("not yet")
    assert status(verdict(capsys, checker, None)).startswith("not yet")
    line = verdict(capsys, checker, wrong)
    assert status(line).startswith("wrong") and hint in line, line
    line = verdict(capsys, checker, _raises)
    assert status(line).startswith("wrong: your code raised ZeroDivisionError"), line
    assert status(verdict(capsys, checker, lambda *a: None)).startswith("wrong")


def module_from(src: str, name: str, folder, namespace: dict | None = None):
    """``src`` imported as module ``name`` from a file in ``folder``: Triton, and a checker that reads a kernel's
    source, read a kernel back from its file. ``namespace``: names the module has before its source runs."""
    import importlib.util
    from pathlib import Path

    path = Path(folder) / f"{name}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    module.__dict__.update(namespace or {})
    spec.loader.exec_module(module)
    return module


def assert_solutions_correct(capsys, lesson: str, folder, checkers: dict) -> None:
    """Lesson ``lesson``'s solution cells (the ```python blocks of its cells tagged `solution`, one per exercise),
    imported as one module from a file in ``folder`` as a learner would paste them below the notebook's imports of
    torch, triton and tl: each function or kernel named in ``checkers`` is "correct" by its checker."""
    import re

    from claims import notebook

    cells = [c for c in notebook(lesson)["cells"] if "solution" in c.get("metadata", {}).get("tags", [])]
    code = [m for c in cells for m in re.findall(r"```python\n(.*?)```", "".join(c["source"]), re.S)]
    assert len(code) == len(checkers), f"lesson {lesson}: expected {len(checkers)} solution blocks, found {len(code)}"
    header = "import torch\nimport triton\nimport triton.language as tl\n\n"
    solutions = module_from(header + "\n\n".join(code), f"lesson{lesson}_solutions", folder)
    for name, checker in checkers.items():
        line = verdict(capsys, checker, getattr(solutions, name))
        assert status(line).startswith("correct"), line


def variant(kernel, name: str, changes: dict, folder=None):
    """A copy of the @triton.jit ``kernel`` named ``name``, with lines changed: a wrong answer written as the lines
    where it differs from the right one. Each key of ``changes`` is a whole line of the kernel (without its
    indent) that must occur once; its value replaces it (several lines: joined by newlines, each at the line's
    indent; None drops it). The copy is compiled from a file in ``folder`` (a new temporary folder by default,
    gone when the process ends): Triton, and a checker that reads a kernel's source, read it back from there. The
    copy sees the names of the kernel's module (the helpers it calls)."""
    import atexit
    import inspect
    import re
    import shutil
    import tempfile

    lines = inspect.getsource(kernel.fn).splitlines()
    for old, new in changes.items():
        at = [i for i, line in enumerate(lines) if line.strip() == old]
        assert len(at) == 1, f"{kernel.fn.__name__}: expected the line {old!r} once, found it {len(at)} times"
        indent = lines[at[0]][: len(lines[at[0]]) - len(lines[at[0]].lstrip())]
        lines[at[0] : at[0] + 1] = [] if new is None else [indent + n for n in new.split("\n")]
    src = re.sub(rf"\bdef {kernel.fn.__name__}\(", f"def {name}(", "\n".join(lines), count=1)
    if folder is None:
        folder = tempfile.mkdtemp(prefix="kernel_variants_")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
    # the names the kernel's own module gives it (helper @triton.jit functions, constants), for the copy to call
    names = {k: v for k, v in kernel.fn.__globals__.items() if not k.startswith("__")}
    module = module_from("import triton\nimport triton.language as tl\n\n\n" + src + "\n", name, folder, names)
    return getattr(module, name)


def assert_figure(draw) -> None:
    """``draw()`` returns a matplotlib figure with axes; the figure is closed, whether or not it does."""
    import matplotlib.figure
    import matplotlib.pyplot as plt

    fig = draw()
    try:
        assert isinstance(fig, matplotlib.figure.Figure) and fig.axes
    finally:
        plt.close(fig)
