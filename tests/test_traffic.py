"""helpers.traffic's counter: the bytes a kernel moves, counted in Triton's interpreter, equal the analytic count for
the course's kernels and for wrong ones (a kernel that loads x twice shows 2x; masked lanes don't count; strided rows
and int64 offsets; loops; atomics), and leave the results unchanged. Then the prediction from the recorded copies."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

import helpers  # noqa: F401  (first: interpreter or GPU)
from helpers import traffic
from helpers.mode import ON_GPU

pytestmark = pytest.mark.skipif(ON_GPU, reason="counting runs under the interpreter (TRITON_INTERPRET=1)")


def test_the_interpreter_has_what_the_counter_wraps():
    """The counter wraps these methods of Triton's interpreter builder (not a public API): present in Triton 3.6 to
    3.9. A Triton that renames one fails here first, with the version to look at."""
    from triton.runtime import interpreter

    missing = [h for h in traffic.HOOKS if not hasattr(interpreter.interpreter_builder, h)]
    assert not missing, f"Triton {triton.__version__}'s interpreter has no {missing}: update helpers.traffic"


@triton.jit
def one_pass(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # int64 offsets
    cols = tl.arange(0, BLOCK)
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=cols < n_cols, other=-float("inf"))
    e = tl.exp(x - tl.max(x, 0))
    tl.store(out_ptr + row * out_row_stride + cols, e / tl.sum(e, 0), mask=cols < n_cols)


@triton.jit
def loads_twice(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    m = tl.max(tl.load(in_ptr + row * in_row_stride + cols, mask=cols < n_cols, other=-float("inf")), 0)
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=cols < n_cols, other=-float("inf"))  # the row again
    e = tl.exp(x - m)
    tl.store(out_ptr + row * out_row_stride + cols, e / tl.sum(e, 0), mask=cols < n_cols)


@triton.jit
def looped_sum(out_ptr, in_ptr, in_row_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros((BLOCK,), tl.float32)
    for off in tl.range(0, n_cols, BLOCK):  # a tl.range loop, the last block masked
        cols = off + tl.arange(0, BLOCK)
        acc += tl.load(in_ptr + row * in_row_stride + cols, mask=cols < n_cols, other=0.0)
    tl.atomic_add(out_ptr, tl.sum(acc, 0))  # one atomic a program: reads and writes 4 bytes


def _rows(M=3, N=37, stride=None, dtype=torch.float32):
    base = torch.randn(M, stride or N, generator=torch.Generator().manual_seed(M * N)).to(dtype)
    return base[:, :N]


@pytest.mark.parametrize("kernel, times", [(one_pass, 1), (loads_twice, 2)])
def test_reads_count_every_pass_and_writes_once(kernel, times):
    x = _rows()
    y = torch.empty_like(x)
    with traffic.counting(x=x, y=y) as t:
        kernel[(3,)](y, x, x.stride(0), y.stride(0), 37, BLOCK=64)
    assert t.read["x"] == times * 3 * 37 * 4 and t.written["y"] == 3 * 37 * 4  # masked lanes (37..63) not counted
    assert t.times_read("x") == times and t.times_written("y") == 1
    assert t.read["(other)"] == t.written["(other)"] == 0 and t.programs == 3
    assert torch.allclose(y, torch.softmax(x, -1), atol=1e-6)  # results unchanged


def test_strided_rows_count_only_the_rows_elements():
    x = _rows(stride=50)  # rows 50 apart, 37 used: the 13 between are never read
    y = torch.empty(3, 37, dtype=torch.bfloat16)
    with traffic.counting(x=x, y=y) as t:
        one_pass[(3,)](y, x, x.stride(0), y.stride(0), 37, BLOCK=64)
    assert t.read["x"] == 3 * 37 * 4 and t.written["y"] == 3 * 37 * 2  # the element size of each pointer
    assert t.table().loc["x", "times read"] == 1.0


def test_loops_and_atomics():
    x = _rows(M=2, N=100)
    out = torch.zeros(1)
    with traffic.counting(x=x, out=out) as t:
        looped_sum[(2,)](out, x, x.stride(0), 100, BLOCK=32)
    assert t.read["x"] == 2 * 100 * 4
    assert t.read["out"] == t.written["out"] == 2 * 4
    assert torch.allclose(out, x.sum().reshape(1), rtol=1e-5)


def test_the_course_kernels_move_what_lesson_01_counts():
    """The library's wrappers, counted by the bytes of their input (their output is made inside: "(other)"), against
    helpers.traffic.kernel_traffic's analytic passes."""
    x = torch.randn(4, 3000, generator=torch.Generator().manual_seed(0))
    for name, fn in (
        ("fused", helpers.softmax_fused),
        ("online", helpers.softmax_online),
        ("three_pass", helpers.softmax_three_pass),
    ):
        with traffic.counting(x=x) as t:
            y = fn(x)
        want = traffic.kernel_traffic(name, 4, 3000)
        assert t.read["x"] == want["reads"] * 4 and t.written["(other)"] == want["writes"] * 4, name
        assert torch.allclose(y, torch.softmax(x, -1), atol=1e-6), name


def test_counting_refuses_what_it_cannot_count(monkeypatch):
    with pytest.raises(TypeError, match="must be a tensor"):
        traffic.counting(x=[1, 2, 3])
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        with traffic.counting(x=torch.zeros(2)):
            pass


def test_the_builder_is_restored_after_counting():
    from triton.runtime import interpreter

    before = {h: interpreter.interpreter_builder.__dict__.get(h) for h in traffic.HOOKS}
    with pytest.raises(ZeroDivisionError):
        with traffic.counting(x=torch.zeros(2)):
            1 / 0
    assert {h: interpreter.interpreter_builder.__dict__.get(h) for h in traffic.HOOKS} == before


def test_predict_uses_the_recorded_copy_at_the_same_bytes():
    speeds = traffic.copy_speeds("h200")
    row = speeds.iloc[len(speeds) // 2]
    p = traffic.predict(int(row["bytes"]), "h200")
    same = speeds[speeds.bytes == row["bytes"]]["GB/s"].median()
    assert p["GB/s"] == pytest.approx(same) and p["us"] == pytest.approx(row["bytes"] / same / 1e3)
    assert traffic.predict(2 * int(row["bytes"]), "h200")["us"] > p["us"]
    assert "few programs" in traffic.predict(int(row["bytes"]), "h200", programs=8)["caveats"]
    assert "outside the recorded copies" in traffic.predict(100, "h200")["caveats"]
    assert "in L2" in traffic.predict(int(row["bytes"]), "h200", tensors_read=1 << 20)["caveats"]
    assert "in L2" not in traffic.predict(3 << 30, "h200", tensors_read=2 << 30)["caveats"]
    for bad in (0, -5, 1.5, True):
        with pytest.raises(ValueError, match="positive int"):
            traffic.predict(bad)
