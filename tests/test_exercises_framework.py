"""helpers.exercises: a checker prints exactly one deterministic line and never raises."""

from __future__ import annotations

import os
import time

import pytest
import torch

import helpers
from helpers import exercises as ex
from helpers.exercises import CORRECT, NOT_YET, WRONG, Wrong, check, expect_close, fmt, fmt_pair


def run(capsys, attempt, trial, **kw):
    v = check("1.1", "softmax by hand", attempt, trial, **kw)
    out = capsys.readouterr().out
    return v, out


def assert_one_line(out, v):
    assert out.count("\n") == 1 and out.endswith("\n"), repr(out)
    assert out == v.line + "\n"
    assert out.startswith("Exercise 1.1 (softmax by hand): ")


def softmax_trial(f):
    x = torch.tensor([[1.0, 2.0]])
    return f"max abs error {expect_close(f(x), torch.softmax(x, -1), inputs=x):.1e}"


@pytest.mark.parametrize("attempt", [None, Ellipsis, NotImplemented], ids=["None", "Ellipsis", "NotImplemented"])
def test_unattempted_is_not_yet(capsys, attempt):
    called = []
    v, out = run(capsys, attempt, lambda a: called.append(a))
    assert_one_line(out, v)
    assert v.status == NOT_YET and not v.ok
    assert called == [], "the trial must not run on an unattempted answer"
    assert out == "Exercise 1.1 (softmax by hand): not yet: fill in your answer above, then run this cell again\n"


def test_template_raising_not_implemented_is_not_yet(capsys):
    def template(x):
        raise NotImplementedError  # your code here

    v, out = run(capsys, template, softmax_trial)
    assert_one_line(out, v)
    assert v.status == NOT_YET
    assert "replace `raise NotImplementedError` with your code" in out


def test_function_returning_none_or_ellipsis_is_not_yet(capsys):
    for ret in (None, ...):
        v, out = run(capsys, lambda x, r=ret: r, softmax_trial)
        assert_one_line(out, v)
        assert v.status == NOT_YET


def test_wrong_answer(capsys):
    v, out = run(capsys, lambda x: torch.full_like(x, 0.5), softmax_trial)
    assert_one_line(out, v)
    assert v.status == WRONG and not v.ok
    assert out == (
        "Exercise 1.1 (softmax by hand): wrong: on input [[1.0, 2.0]] expected [[0.2689, 0.7311]], got [[0.5, 0.5]]\n"
    )


def test_wrong_raised_by_the_trial(capsys):
    def trial(a):
        raise Wrong("your function returned a list, not a tensor")

    v, out = run(capsys, lambda x: [0.5], trial)
    assert_one_line(out, v)
    assert v.status == WRONG and v.detail == "your function returned a list, not a tensor"


@pytest.mark.parametrize(
    "exc, expected",
    [
        (ZeroDivisionError("division by zero"), "your code raised ZeroDivisionError: division by zero"),
        (ValueError(""), "your code raised ValueError"),
        (RuntimeError("first line\nsecond line\nthird"), "your code raised RuntimeError: first line"),
        (KeyError("dim"), "your code raised KeyError: 'dim'"),
        (IndexError("  padded  "), "your code raised IndexError: padded"),
    ],
    ids=["zero-division", "no-message", "multi-line", "key-error", "padded"],
)
def test_any_other_exception_is_wrong_and_never_crashes(capsys, exc, expected):
    def attempt(x):
        raise exc

    v, out = run(capsys, attempt, softmax_trial)
    assert_one_line(out, v)
    assert v.status == WRONG
    assert v.detail == expected


def test_exception_in_the_trial_itself_is_reported_not_raised(capsys):
    v, out = run(capsys, 42, lambda a: a.no_such_attribute)
    assert_one_line(out, v)
    assert v.status == WRONG and "AttributeError" in v.detail


def test_correct(capsys):
    v, out = run(capsys, lambda x: torch.softmax(x, -1), softmax_trial)
    assert_one_line(out, v)
    assert v.status == CORRECT and v.ok
    assert out.startswith("Exercise 1.1 (softmax by hand): correct: max abs error ")


def test_correct_without_detail(capsys):
    v, out = run(capsys, 3, lambda a: None)
    assert out == "Exercise 1.1 (softmax by hand): correct\n"
    assert str(v) == v.line == out.rstrip("\n")


def test_show_false_prints_nothing(capsys):
    v, out = run(capsys, lambda x: torch.softmax(x, -1), softmax_trial, show=False)
    assert out == "" and v.ok


def test_the_line_is_deterministic(capsys):
    lines = set()
    for _ in range(3):
        _, out = run(capsys, lambda x: torch.full_like(x, 0.5), softmax_trial)
        lines.add(out)
    assert len(lines) == 1


def test_a_multi_line_wrong_message_still_prints_one_line(capsys):
    """A trial may quote the learner's value in Wrong (a 2-D tensor's repr spans lines); the
    verdict is still one line, as the module promises."""
    got = torch.zeros(2, 2)

    def trial(a):
        raise Wrong(f"expected a probability distribution, got {got}")

    v, out = run(capsys, got, trial)
    assert out.count("\n") == 1, f"printed {out.count(chr(10))} lines: {out!r}"


# ------------------------------------------------------------------------------------------
# expect_close
# ------------------------------------------------------------------------------------------


EXPECTED = torch.tensor([[0.25, 0.75]])


def test_expect_close_returns_the_max_abs_error():
    got = torch.tensor([[0.25 + 1e-6, 0.75]], dtype=torch.float64)
    assert expect_close(got, EXPECTED) == pytest.approx(1e-6, rel=1e-3)
    assert expect_close(EXPECTED.clone(), EXPECTED) == 0.0


@pytest.mark.parametrize("got", [None, Ellipsis], ids=["None", "Ellipsis"])
def test_expect_close_unattempted_is_not_implemented(got):
    with pytest.raises(NotImplementedError):
        expect_close(got, EXPECTED)


@pytest.mark.parametrize(
    "got, words",
    [
        ([[0.25, 0.75]], "expected a torch.Tensor, got list"),
        (0.5, "expected a torch.Tensor, got float"),
        (torch.tensor([0.25, 0.75]), "expected shape (1, 2), got (2,)"),
        (torch.tensor([[0.5, 0.5]]), "expected [[0.25, 0.75]], got [[0.5, 0.5]]"),
        (torch.tensor([[float("nan"), 0.75]]), "NaN in different places"),
        (torch.tensor([[float("inf"), 0.75]]), "expected [[0.25, 0.75]], got [[inf, 0.75]]"),
    ],
)
def test_expect_close_wrong(got, words):
    with pytest.raises(Wrong) as info:
        expect_close(got, EXPECTED)
    assert words in str(info.value)


def test_expect_close_names_the_input_and_what():
    x = torch.tensor([[0.0, 1.0986]])
    with pytest.raises(Wrong, match=r"^on input \[\[0.0, 1.0986\]\] expected"):
        expect_close(torch.tensor([[0.5, 0.5]]), EXPECTED, inputs=x)
    with pytest.raises(Wrong, match=r"expected a torch.Tensor for the output, got int"):
        expect_close(3, EXPECTED, what=" for the output")


def test_expect_close_tolerances():
    base = torch.tensor([[1.0, 100.0]], dtype=torch.float64)
    expect_close(base + torch.tensor([[0.0, 0.009]], dtype=torch.float64), base, atol=1e-3, rtol=1e-4)
    with pytest.raises(Wrong):
        expect_close(base + torch.tensor([[0.0, 0.012]], dtype=torch.float64), base, atol=1e-3, rtol=1e-4)


def test_expect_close_matching_nans():
    e = torch.tensor([[float("nan"), float("nan")], [0.5, 0.5]])
    assert expect_close(e.clone(), e) == 0.0
    assert expect_close(torch.full((1, 2), float("nan")), torch.full((1, 2), float("nan"))) == 0.0


def test_expect_close_does_not_modify_its_arguments():
    got = torch.tensor([[0.25, 0.75]], dtype=torch.float16)
    exp = EXPECTED.clone()
    expect_close(got, exp, atol=1e-3)
    assert got.dtype == torch.float16 and torch.equal(exp, EXPECTED)


# ------------------------------------------------------------------------------------------
# fmt
# ------------------------------------------------------------------------------------------


def test_fmt():
    assert fmt(torch.tensor([[1.0, 2.0 / 3.0]])) == "[[1.0, 0.6667]]"
    assert fmt(torch.tensor([1, 2, 3])) == "[1, 2, 3]"
    assert fmt(torch.arange(9.0).view(3, 3)) == "tensor of shape (3, 3): [0.0, 1.0, 2.0, ..., 8.0]"
    assert fmt(2.0 / 3.0, digits=2) == "0.67"
    assert fmt(torch.tensor(0.123456)) == "0.1235"
    assert fmt(torch.tensor([1.0], dtype=torch.bfloat16)) == "[1.0]"
    for text in (fmt(torch.ones(2)), fmt(torch.ones(20))):
        assert "device" not in text and "tensor(" not in text


def test_verdict_line():
    v = ex.Verdict("2.3", "online max", WRONG, "off by one")
    assert v.line == "Exercise 2.3 (online max): wrong: off by one" and not v.ok
    assert ex.Verdict("2.3", "online max", CORRECT).line == "Exercise 2.3 (online max): correct"


def test_fmt_pair_never_renders_two_different_values_alike():
    assert fmt_pair(torch.tensor([1.0, 0.50001]), torch.tensor([1.0, 0.50002])) == ("[1.0, 0.50001]", "[1.0, 0.50002]")
    assert fmt_pair(1.00000001, 1.00000002) == ("1.00000001", "1.00000002")
    e = torch.zeros(2, 3, 6, 8)
    g = e.clone()
    g[1, 2, 3, 4] = 1e-7
    a, b = fmt_pair(e, g)
    assert a == "0.0 at index [1, 2, 3, 4]" and b == "1e-07", (a, b)


@pytest.mark.parametrize("seed", range(20))
def test_expect_close_never_says_the_same_for_expected_and_got(seed):
    g = torch.Generator().manual_seed(seed)
    shape = [(3,), (2, 3), (2, 3, 6, 8)][seed % 3]
    e = torch.randn(shape, generator=g)
    got = e.clone()
    i = int(torch.randint(got.numel(), (1,), generator=g))
    got.view(-1)[i] += [1e-3, 1e3, float("nan"), float("inf")][seed % 4]
    with pytest.raises(Wrong) as info:
        expect_close(got, e, atol=1e-6, rtol=0)
    msg = str(info.value)
    if "expected" in msg and ", got" in msg and "NaN" not in msg:
        said_e = msg.split("expected ", 1)[1].split(", got ")[0]
        said_g = msg.split(", got ", 1)[1].split(" (")[0]
        assert said_e.split(" at index")[0] != said_g, msg


def test_expect_close_names_the_first_wrong_element_of_a_big_tensor():
    e = torch.zeros(2, 3, 6, 8)
    got = e.clone()
    got[1, 0, 2, 5] = 0.5
    got[1, 1, 0, 0] = 2.0
    with pytest.raises(Wrong) as info:
        expect_close(got, e)
    assert str(info.value) == ("at index [1, 0, 2, 5] expected 0.0, got 0.5 (max abs error 2, 2 of 288 elements wrong)")


def test_expect_close_says_where_a_nan_is():
    e = torch.ones(4, 5)
    got = e.clone()
    got[2, 3] = float("nan")
    with pytest.raises(Wrong, match=r"^got NaN at index \[2, 3\], where 1.0 was expected$"):
        expect_close(got, e)
    e2 = e.clone()
    e2[0, 1] = float("nan")
    e2[3, 4] = float("nan")
    with pytest.raises(Wrong, match=r"^expected NaN at index \[0, 1\], got 1.0 \(1 more element\(s\) like it\)$"):
        expect_close(e, e2)


# ------------------------------------------------------------------------------------------
# call_attempt's time limit
# ------------------------------------------------------------------------------------------


IGNORING_SIGINT = r"""
import signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a script's background job or nohup leaves it
import helpers
from helpers import exercises as ex

def hangs(x):
    while True:
        x = x + 1

t0 = time.perf_counter()
try:
    ex.call_attempt(hangs, 1, timeout=1.0)
except ex.Wrong as e:
    print("stopped:", str(e).splitlines()[0], round(time.perf_counter() - t0))
print("SIGINT ignored again:", signal.getsignal(signal.SIGINT) is signal.SIG_IGN)
"""


def test_the_time_limit_holds_where_sigint_is_ignored():
    """A process that inherited SIGINT ignored (started in the background by a script, or under nohup): the
    watchdog's interrupt would do nothing, and a function that never returns would hang the check. The time
    limit puts Python's handler in place for the call, stops it, and leaves the signal as it found it."""
    import os
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-c", IGNORING_SIGINT], capture_output=True, text=True, timeout=60, env=os.environ.copy()
    )
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.strip().splitlines()
    assert lines[0].startswith("stopped: your function did not finish within 1 s") and int(lines[0].split()[-1]) < 5
    assert lines[1] == "SIGINT ignored again: True"


def test_a_function_that_does_not_return_is_stopped(capsys):
    def hangs(x):
        while True:
            x = x + 1

    t0 = time.perf_counter()
    v, out = run(capsys, hangs, lambda f: ex.call_attempt(f, 1, timeout=1.0))
    assert time.perf_counter() - t0 < 5
    assert v.status == WRONG and v.detail.startswith("your function did not finish within 1 s"), out
    v, out = run(capsys, lambda x: torch.softmax(x, -1), softmax_trial)  # and the next check works
    assert v.ok


def test_the_users_own_interrupt_is_not_a_time_out():
    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ex.call_attempt(interrupted, timeout=5.0)


def test_a_function_that_returns_in_time_is_not_interrupted_later():
    assert ex.call_attempt(lambda: 3, timeout=0.2) == 3
    time.sleep(0.5)  # the watchdog is gone: nothing interrupts this sleep


# ------------------------------------------------------------------------------------------
# Learner kernels run in a child worker process (helpers.sandbox, helpers.sandbox_worker)
# ------------------------------------------------------------------------------------------

# What PyTorch says when a kernel makes the GPU fault (the worker's error text; the GPU run in
# figures/data/oob_gpu_demo_h100.csv showed the hint cut off in the middle of its URL).
CUDA_FAULT = (
    "CUDA error: an illegal memory access was encountered\nSearch for `cudaErrorIllegalAddress' in "
    "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information.\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
    "might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)


@pytest.mark.parametrize(
    "message",
    [
        CUDA_FAULT,
        " ".join(CUDA_FAULT.split()),
        "CUDA error: an illegal memory access was encountered. See https://x.org/a",
    ],
)
def test_a_gpu_fault_hint_keeps_the_errors_first_sentence_and_no_url(monkeypatch, message):
    from helpers import sandbox as sb

    def faulting_run(*args, **kwargs):
        raise sb.KernelCudaError(message)

    monkeypatch.setattr(sb, "run", faulting_run)
    with pytest.raises(Wrong) as info:
        ex.run_learner_kernel(lambda: None, (1,))
    assert str(info.value) == (
        "your kernel made the GPU fault (CUDA error: an illegal memory access was encountered): "
        "most likely an access outside its tensors: check the masks and the strides"
    )


triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

from helpers import DEVICE, sandbox, sandbox_worker  # noqa: E402

SCALE = tl.constexpr(2.0)

# A kernel that loops forever gets this long (seconds): short on the CPU; on a GPU the first
# launch also compiles the kernel.
HANG_LIMIT = 3.0 if DEVICE.type == "cpu" else 20.0


@triton.jit
def _twice(v):
    return v * SCALE


@triton.jit
def scale_kernel(out_ptr, in_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, _twice(tl.load(in_ptr + offs, mask=mask)), mask=mask)


@triton.jit
def unmasked_store_kernel(out_ptr, in_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(in_ptr + offs, mask=offs < n, other=0.0))


@triton.jit
def far_store_kernel(out_ptr, in_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs + (1 << 44), tl.load(in_ptr + offs, mask=mask), mask=mask)


@triton.jit
def row_sum_kernel(out_ptr, in_ptr, in_row_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(in_ptr + row * in_row_stride + offs, mask=offs < BLOCK)  # the mask forgets n_cols
    tl.store(out_ptr + row, tl.sum(x, axis=0))


@triton.jit
def endless_kernel(out_ptr, in_ptr, n, BLOCK: tl.constexpr):
    i = 0
    while i < n:
        tl.store(out_ptr + i, 1.0)
        i = i * 1


@triton.jit
def template_kernel(out_ptr, in_ptr, n, BLOCK: tl.constexpr):
    raise NotImplementedError  # your code here


@triton.jit
def printing_kernel(out_ptr, in_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.device_print("lane", offs)
    tl.store(out_ptr + offs, tl.load(in_ptr + offs, mask=mask), mask=mask)


def _cuda_context_works():
    """The test process's own device still computes (on a GPU: its CUDA context is alive)."""
    y = torch.arange(4.0, device=DEVICE) * 2
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()
    assert y.sum().item() == 12.0


def scale_trial(kernel, **kw):
    x = ex.guarded((10,), fill=1.5)
    out = ex.guarded((10,))
    ex.launch_learner_kernel(kernel, (1,), out, x, 10, BLOCK=16, outputs=(out,), where="on 10 elements", **kw)
    expect_close(out, torch.full((10,), 3.0, device=out.device))
    return "ok"


def test_the_worker_runs_a_right_kernel_and_copies_its_output_back(capsys):
    v, out = run(capsys, scale_kernel, scale_trial)
    assert v.line == "Exercise 1.1 (softmax by hand): correct: ok", out
    w = sandbox.worker()
    assert w.alive() and w.info["pid"] != os.getpid() and w.info["mode"] == helpers.MODE


def test_callable_grid_shared_storage_and_dtype_arguments():
    base = ex.guarded((20,), fill=1.0)
    x, out = base[:10], base[10:]  # two tensors of one storage: sent once, both copied back
    ex.run_learner_kernel(
        scale_kernel, lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),), out, x, 10, BLOCK=16, outputs=()
    )
    assert out.tolist() == [2.0] * 10 and x.tolist() == [1.0] * 10
    assert ex.guards_intact(base)


def test_an_out_of_bounds_store_near_the_output_is_wrong(capsys):
    v, out = run(capsys, unmasked_store_kernel, scale_trial)
    assert v.status == WRONG and "wrote past the end of its output" in v.detail, out
    _cuda_context_works()


def test_an_out_of_bounds_store_far_outside_is_wrong_and_the_process_lives_on(capsys):
    v, out = run(capsys, far_store_kernel, scale_trial)
    assert v.status == WRONG and "check the masks and the strides" in v.detail, out
    assert ("crashed the process that ran it" in v.detail) or ("made the GPU fault" in v.detail), out
    _cuda_context_works()
    v, out = run(capsys, scale_kernel, scale_trial)  # a new worker runs the next check
    assert v.ok, out


def test_a_read_past_the_end_of_a_row_reaches_the_output_as_nan(capsys):
    def trial(kernel):
        x = ex.guarded((3, 5), fill=1.0, row_stride=8)  # rows 8 apart, NaN in the 3 elements after each
        out = ex.guarded((3,), fill=0.0)
        ex.launch_learner_kernel(kernel, (3,), out, x, x.stride(0), 5, BLOCK=8, outputs=(out,), where="on 3 x 5")
        expect_close(out, torch.full((3,), 5.0, device=out.device))

    v, out = run(capsys, row_sum_kernel, trial)
    assert v.status == WRONG and "got [nan, nan, nan]" in v.detail, out


def test_a_kernel_that_never_finishes_is_stopped_and_the_next_check_works(capsys):
    t0 = time.perf_counter()
    v, out = run(capsys, endless_kernel, lambda k: scale_trial(k, timeout=HANG_LIMIT))
    assert time.perf_counter() - t0 < HANG_LIMIT + 10
    assert v.status == WRONG and f"your kernel did not finish within {HANG_LIMIT:g} s" in v.detail, out
    _cuda_context_works()
    v, out = run(capsys, scale_kernel, scale_trial)
    assert v.ok, out


def test_the_kernel_time_limit_has_a_module_default(monkeypatch):
    assert sandbox.KERNEL_TIMEOUT == (60.0 if helpers.INTERPRETER else 30.0)
    monkeypatch.setattr(ex, "KERNEL_TIMEOUT", HANG_LIMIT / 2)
    with pytest.raises(Wrong, match="did not finish within"):
        x, out = ex.guarded((4,), fill=1.0), ex.guarded((4,))
        ex.run_learner_kernel(endless_kernel, (1,), out, x, 4, BLOCK=4)


def test_an_untouched_kernel_template_is_not_yet(capsys):
    v, out = run(capsys, template_kernel, scale_trial)
    assert v.status == NOT_YET, out


def test_a_learner_error_in_the_kernel_is_reported_with_its_type(capsys):
    @triton.jit
    def undefined_name_kernel(out_ptr, in_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(in_ptr + offs, mask=offs < n) + no_such_name, mask=offs < n)  # noqa: F821

    v, out = run(capsys, undefined_name_kernel, scale_trial)
    assert (
        v.status == WRONG and v.detail.startswith("on 10 elements your kernel raised ") and "no_such_name" in v.detail
    )
    with pytest.raises(Exception) as info:  # run_learner_kernel re-raises it (same type name and message)
        x, o = ex.guarded((4,), fill=1.0), ex.guarded((4,))
        ex.run_learner_kernel(undefined_name_kernel, (1,), o, x, 4, BLOCK=4)
    assert not isinstance(info.value, (Wrong, NotImplementedError)) and "no_such_name" in str(info.value)


def test_what_the_kernel_prints_reaches_the_notebook(capsys):
    if not helpers.INTERPRETER:
        pytest.skip("a compiled kernel's device_print goes to the worker's own stdout")
    x, out = ex.guarded((4,), fill=1.0), ex.guarded((4,))
    ex.run_learner_kernel(printing_kernel, (1,), out, x, 4, BLOCK=4)
    assert "lane" in capsys.readouterr().out and out.tolist() == [1.0] * 4


def test_a_library_kernel_is_imported_by_name_not_sent_as_source():
    from helpers.kernels.fused import softmax_fused_kernel

    spec = sandbox.kernel_spec(softmax_fused_kernel)
    assert spec == ("import", "helpers.kernels.fused", "softmax_fused_kernel")
    spec = sandbox.kernel_spec(scale_kernel)
    assert spec[0] == "source" and spec[3]["_twice"][0] == "kernel" and "SCALE" in spec[3]["_twice"][1][3]


def test_no_private_triton_internals():
    import inspect as _inspect

    for mod in (ex, sandbox, sandbox_worker):
        src = _inspect.getsource(mod)
        for private in ("InterpreterBuilder", "triton.runtime.interpreter", "create_masked_load", "bounds_checked"):
            assert private not in src, f"{mod.__name__} uses {private}"


def test_an_interrupt_of_the_notebook_leaves_an_idle_worker_alone():
    """Jupyter's interrupt button signals the whole process group: the idle worker ignores it."""
    import signal

    w = sandbox.worker()
    pid = w.info["pid"]
    os.kill(pid, signal.SIGINT)
    time.sleep(0.3)
    x, out = ex.guarded((4,), fill=1.0), ex.guarded((4,))
    ex.run_learner_kernel(scale_kernel, (1,), out, x, 4, BLOCK=4)
    assert out.tolist() == [2.0] * 4 and sandbox.worker().info["pid"] == pid


# ---- The traffic line: a correct kernel, checked under the interpreter, is told the bytes it moved -------------------


def _softmax_trial(kernel):
    guarded, run_learner_kernel = ex.guarded, ex.run_learner_kernel
    x = guarded((3, 37), row_stride=40)
    y = guarded((3, 37), row_stride=48)
    x[:] = torch.randn(3, 37, generator=torch.Generator().manual_seed(0)).to(x.device)
    run_learner_kernel(kernel, (3,), y, x, x.stride(0), y.stride(0), 37, BLOCK=64, outputs=[y])
    expect_close(y, torch.softmax(x, -1))


@pytest.mark.skipif(helpers.ON_GPU, reason="the kernel's bytes are counted by the interpreter")
@pytest.mark.parametrize("name, reads, ratio", [("one_pass", "once", "1.00x"), ("loads_twice", "twice", "1.50x")])
def test_a_correct_kernel_is_told_its_traffic(capsys, name, reads, ratio):
    import test_traffic

    v = check("0.1", "softmax", getattr(test_traffic, name), _softmax_trial)
    out = capsys.readouterr().out.splitlines()
    assert v.ok and len(out) == 2 and out[1] == v.traffic
    assert f"reads its input {reads} and writes its output once: {ratio} the bytes of one pass" in v.traffic
    assert "µs on an H200" in v.traffic and "on an H100" in v.traffic


@pytest.mark.skipif(helpers.ON_GPU, reason="the kernel's bytes are counted by the interpreter")
def test_no_traffic_line_without_a_correct_kernel(capsys):
    import test_traffic

    def wrong(kernel):
        _softmax_trial(kernel)
        raise Wrong("for the test")

    assert not check("0.1", "softmax", test_traffic.one_pass, wrong).traffic
    assert not check("0.2", "python", lambda: 1, lambda f: None).traffic  # no kernel launched: no line
    assert len(capsys.readouterr().out.splitlines()) == 2
