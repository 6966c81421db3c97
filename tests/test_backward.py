"""The softmax backward (lesson 08): the Triton kernels, ``helpers.softmax_backward``, the operator
``torch.ops.softmax_course.*`` behind ``helpers.softmax``'s autograd and ``torch.compile`` support,
the cheap no-grad path, bad inputs, and the GPU benchmark's logic (tools/backward_bench.py, run on the
CPU with fake timers).

Sizes stay small: under the interpreter every program of a kernel costs milliseconds.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import backward_bench  # tools/backward_bench.py
import pytest
import torch
from compiling import compile_report

import helpers
import helpers.rowwise
from helpers import gpu_data, lesson08
from helpers.kernels import dispatch
from helpers.kernels.backward import (
    BACKWARD_TILED_MAX_COLS,
    backward_plan,
    softmax_backward_coop,
    softmax_backward_looped,
    softmax_backward_tiled,
)
from helpers.mode import DEVICE

ROOT = Path(__file__).resolve().parent.parent
TOL = {
    torch.float32: (1e-6, 1e-5),
    torch.float16: (2e-3, 1e-2),
    torch.bfloat16: (1.6e-2, 5e-2),
    torch.float64: (1e-12, 1e-10),
}


def formula(y, dy):
    y64, dy64 = y.double(), dy.double()
    return y64 * (dy64 - (y64 * dy64).sum(-1, keepdim=True))


def pair(shape, dtype=torch.float32, seed=0, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    y = torch.softmax(torch.randn(shape, generator=g) * scale, dim=-1).to(dtype).to(DEVICE)
    dy = torch.randn(shape, generator=g).to(dtype).to(DEVICE)
    return y, dy


def assert_backward_ok(dx, y, dy):
    assert dx.shape == y.shape and dx.dtype == y.dtype and dx.device == y.device
    ref = formula(y, dy)
    atol, _ = TOL[y.dtype]
    scale = ref.abs().max().item() or 1.0
    err = (dx.double() - ref).abs().max().item()
    assert err <= atol * scale + 1e-12, f"max error {err:.2e} (largest |dx| {scale:.2e})"


# --------------------------------------------------------------------------------------------
# helpers.softmax_backward and its kernels
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (7, 33), (2, 3, 17), (40,)])
def test_backward_matches_the_formula(shape, dtype):
    y, dy = pair(shape, dtype)
    assert_backward_ok(helpers.softmax_backward(y, dy), y, dy)


@pytest.mark.parametrize(
    "fn",
    [softmax_backward_tiled, lambda y, dy: softmax_backward_looped(y, dy, 16), softmax_backward_looped],
    ids=["tiled", "looped16", "looped"],
)
@pytest.mark.parametrize("shape", [(5, 37), (130, 8), (3, 1), (2, 100)])
def test_both_kernels(fn, shape):
    y, dy = pair(shape)
    assert_backward_ok(fn(y, dy), y, dy)


def test_tile_shapes_and_partial_tiles():
    for block_m in (1, 2, 4, 8):
        y, dy = pair((7, 20), seed=block_m)
        assert_backward_ok(softmax_backward_tiled(y, dy, block_m), y, dy)


def test_strided_and_non_contiguous_inputs():
    g = torch.Generator().manual_seed(5)
    # y read through a transposed view (each column of the original is a softmax)
    yt = torch.softmax(torch.randn(30, 20, generator=g), dim=0).t().to(DEVICE)
    dyt = torch.randn(30, 20, generator=g).t().to(DEVICE)
    assert_backward_ok(helpers.softmax_backward(yt, dyt), yt, dyt)
    # every other column (column stride 2), and dy contiguous
    y2 = torch.softmax(torch.randn(6, 40, generator=g), -1).to(DEVICE)[:, ::2]
    dy2 = torch.randn(6, 20, generator=g).to(DEVICE)
    assert_backward_ok(helpers.softmax_backward(y2, dy2), y2, dy2)
    # 3-D inputs whose leading dimensions do not merge (a copy), for y and for dy in turn
    y3 = torch.softmax(torch.randn(4, 3, 9, generator=g), -1).transpose(0, 1).to(DEVICE)
    dy3 = torch.randn(3, 4, 9, generator=g).to(DEVICE)
    assert_backward_ok(helpers.softmax_backward(y3, dy3), y3, dy3)
    y4 = torch.softmax(torch.randn(3, 4, 9, generator=g), -1).to(DEVICE)
    dy4 = torch.randn(4, 3, 9, generator=g).transpose(0, 1).to(DEVICE)
    assert_backward_ok(helpers.softmax_backward(y4, dy4), y4, dy4)


def test_expanded_dy_the_gradient_of_a_sum():
    y, _ = pair((2, 3, 8))
    ones = torch.ones(1, device=DEVICE).expand(2, 3, 8)  # strides (0, 0, 0)
    dx = helpers.softmax_backward(y, ones)
    assert dx.abs().max().item() < 1e-6  # y * (1 - sum(y)) = 0
    row = torch.randn(8, device=DEVICE).expand(2, 3, 8)  # one dy row for all (row stride 0)
    assert_backward_ok(helpers.softmax_backward(y, row), y, row)


def test_long_rows_are_split_across_programs():
    y, dy = pair((1, BACKWARD_TILED_MAX_COLS + 5), scale=1.0)
    plan = helpers.kernels.backward._backward.plan(y, dy)
    if helpers.ON_GPU:  # one cooperative launch, every slice of the row resident at once
        assert plan.launches[0].kernel is helpers.kernels.softmax_backward_coop_kernel
        assert plan.launches[0].cooperative and plan.info["slices"] > 1
    else:  # the interpreter runs programs one after another: the looped kernel computes the same
        assert plan.delegate is softmax_backward_looped
    assert_backward_ok(helpers.softmax_backward(y, dy), y, dy)
    y, dy = pair((2, 64))
    assert (
        backward_plan(helpers.rowwise.Rows.of(y, dy)).launches[0].kernel
        is helpers.kernels.softmax_backward_tiled_kernel
    )


def test_the_tile_rule_and_its_exceptions():
    """backward_tiled_config batches short rows to 4096 elements at about 16 a thread; a row of 64 KiB or
    more of each input (rounded up to a power of two) takes 8 warps, float32 from 8193 columns and 16-bit
    types from 16385; rows that fit go to the split only where the tile spills (rows of 16385 to 32768
    columns, any dtype) and while the split launches at most SPLIT_PROGRAMS_PER_SM (3) programs an SM."""
    from helpers.kernels.backward import backward_splits_few_rows, backward_tiled_config

    assert backward_tiled_config(1024, 4) == (4, 8) and backward_tiled_config(100, 2) == (32, 8)
    assert backward_tiled_config(8192, 4) == (1, 16) and backward_tiled_config(8192, 2) == (1, 16)
    for n in (8193, 12672, 16384):
        assert backward_tiled_config(n, 4) == (1, 8)
        assert backward_tiled_config(n, 2) == (1, 32)  # 32 KiB of 16-bit values a row: 32 warps
    for n in (16385, 32000, 32768):
        assert backward_tiled_config(n, 4) == (1, 8) and backward_tiled_config(n, 2) == (1, 8)
    for n in (8193, 32768):
        assert backward_tiled_config(n, 8)[1] == 32  # float64 keeps 32 (8 warps would spill its doubles)
    # 32000 columns are 8 slices: 3 x 132 = 396 programs allow 49 rows, not 50
    assert backward_splits_few_rows(1, 32000, 4, 132) and backward_splits_few_rows(49, 32000, 2, 132)
    assert not backward_splits_few_rows(50, 32000, 4, 132) and not backward_splits_few_rows(64, 32000, 2, 132)
    assert backward_splits_few_rows(1, 16385, 2, 132) and backward_splits_few_rows(1, 16385, 4, 132)
    for n in (4096, 4097, 8192, 12672, 16384):  # the tile holds these rows without spilling: never split
        for size in (2, 4):
            assert not backward_splits_few_rows(1, n, size, 132)
    assert not backward_splits_few_rows(4096, 32768, 4, 132)
    y, dy = pair((8, 32000), scale=1.0)
    plan = backward_plan(helpers.rowwise.Rows.of(y, dy))
    if helpers.ON_GPU:  # 8 rows x 8 slices <= the SMs of any GPU the course runs on
        assert plan.launches[0].kernel is helpers.kernels.softmax_backward_coop_kernel
    else:  # the interpreter keeps the tiled kernel (the split would hand over to the looped one)
        assert plan.launches[0].kernel is helpers.kernels.softmax_backward_tiled_kernel
        assert plan.launches[0].num_warps == 8
    assert_backward_ok(helpers.softmax_backward(y, dy), y, dy)


_COMPILE_TILE = r"""
import json, os, re, subprocess, sys
os.environ.pop("TRITON_INTERPRET", None)
import triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
src = open(sys.argv[1]).read()
start = src.index("@triton.jit\ndef softmax_backward_tiled_kernel")
end = src.index("@triton.jit\ndef softmax_backward_looped_kernel")
open(os.path.join(sys.argv[2], "tile_kernel_only.py"), "w").write("import triton\nimport triton.language as tl\n\n" + src[start:end])
sys.path.insert(0, sys.argv[2])
import tile_kernel_only as K
ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas-blackwell")
ints = ["y_row_stride", "dy_row_stride", "dx_row_stride", "n_rows", "n_cols"]
out = []
for block_n, warps in json.loads(sys.argv[3]):
    sig = {"dx_ptr": "*fp32", "y_ptr": "*fp32", "dy_ptr": "*fp32", **{n: "i32" for n in ints},
           **{n: "constexpr" for n in ("y_col_stride", "dy_col_stride", "BLOCK_M", "BLOCK_N", "ACC")}}
    consts = dict(y_col_stride=1, dy_col_stride=1, BLOCK_M=1, BLOCK_N=block_n, ACC=tl.float32)
    k = triton.compile(ASTSource(fn=K.softmax_backward_tiled_kernel, signature=sig, constexprs=consts,
                                 attrs={(i,): [["tt.divisibility", 16]] for i in (0, 1, 2, 3, 5, 7, 8, 9)}),
                       target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps))
    ptx = os.path.join(sys.argv[2], "k.ptx")
    open(ptx, "w").write(k.asm["ptx"])
    r = subprocess.run([ptxas, "-v", "--gpu-name", "sm_90a", ptx, "-o", ptx + ".cubin"], capture_output=True, text=True)
    m = re.search(r"(\d+) bytes spill stores", r.stderr)
    out.append({"block_n": block_n, "warps": warps, "spills": int(m.group(1)) if m else None})
print(json.dumps(out))
"""


def test_the_float32_long_row_tile_compiles_for_an_h100(tmp_path):
    """Lesson 08's claims about the float32 one-row tile, compiled for sm_90a by this Triton (no GPU
    needed): at 8 warps a row of 16384 columns stays in registers; at 32768 columns (y and dy fill an SM's
    65536 registers) every warp count spills a few bytes a thread, 8 warps no more than 128."""
    if helpers.ON_GPU:
        pytest.skip("compiles for sm_90a without a GPU")
    pytest.importorskip("triton.backends.nvidia")
    cases = [[16384, 8], [32768, 8], [32768, 16], [32768, 32]]
    report = compile_report(_COMPILE_TILE, ROOT / "helpers" / "kernels" / "backward.py", tmp_path, cases)
    got = {(c["block_n"], c["warps"]): c["spills"] for c in report}
    if None in got.values():
        pytest.skip("no ptxas to count spills with")
    assert got[(16384, 8)] == 0, got
    assert all(got[(32768, w)] > 0 for w in (8, 16, 32)), got
    assert got[(32768, 8)] <= 128, got


def test_the_split_backward_everywhere_it_runs():
    # On the CPU it hands over to the looped kernel; float64 does so on a GPU too.
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        y, dy = pair((3, 50), dtype)
        assert_backward_ok(softmax_backward_coop(y, dy), y, dy)
        assert_backward_ok(softmax_backward_coop(y, dy, 16, 1), y, dy)


@pytest.mark.skipif(not helpers.ON_GPU, reason="the cooperative launch runs on a GPU only")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 40001), (3, 65536), (5, 70001), (300, 40000), (2, 3, 131071), (1, 1 << 20)])
def test_the_cooperative_backward_on_a_gpu(shape, dtype):
    # irregular lengths (a partial last slice), several rounds per program (300 rows), leading dims
    y, dy = pair(shape, dtype, scale=1.0)
    assert_backward_ok(helpers.softmax_backward(y, dy), y, dy)
    for slice_cols, warps in ((1024, 1), (2048, 4), (16384, 16)):
        assert_backward_ok(softmax_backward_coop(y, dy, slice_cols, warps), y, dy)


@pytest.mark.skipif(not helpers.ON_GPU, reason="the cooperative launch runs on a GPU only")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape,slice_cols,warps", [((16, 200000), None, None), ((64, 48 * 1024 - 300), 1024, 8)])
def test_warps_that_hold_the_same_slots_agree(shape, slice_cols, warps, dtype):
    # 49 and 48 slices (SLICES_P2 = 64) over 128 and 256 threads, the first the default configuration of a
    # vocabulary-sized row: several warps hold a copy of each slot, each loaded at its own moment. Compiled by
    # Triton 3.9, the wait whose verdict was not a vote gave wrong rows in 136 to 200 of 200 launches at these
    # configurations on an H200 (figures/data/bench_runs/coop_wait_vote_h200.csv; Triton 3.6 reads one copy,
    # and passed either way).
    y, dy = pair(shape, dtype, scale=1.0)
    dy = dy + 1  # a row dot far from 0, so that a dot missing a slice's part is far off
    plan = helpers.kernels.backward._backward_coop.plan(y, dy, slice_cols, warps)
    assert 32 < plan.info["slices"] <= 64  # SLICES_P2 = 64
    for _ in range(50):
        assert_backward_ok(softmax_backward_coop(y, dy, slice_cols, warps), y, dy)


@pytest.mark.skipif(not helpers.ON_GPU, reason="the cooperative launch runs on a GPU only")
def test_the_cooperative_backward_reads_through_strides():
    g = torch.Generator().manual_seed(3)
    y = torch.softmax(torch.randn(4, 2 * 40000, generator=g), -1).to(DEVICE)[:, ::2]  # column stride 2
    dy = torch.randn(40000, 4, generator=g).to(DEVICE).t()  # a transposed view
    assert_backward_ok(helpers.softmax_backward(y, dy), y, dy)
    row = torch.randn(40000, device=DEVICE).expand(4, 40000)  # row stride 0
    assert_backward_ok(helpers.softmax_backward(y, row), y, row)


def test_looped_kernel_over_many_blocks():
    y, dy = pair((3, 1000), scale=1.0)
    for block in (32, 128, 1024):
        assert_backward_ok(softmax_backward_looped(y, dy, block), y, dy)


def test_empty_inputs():
    for shape in [(0, 5), (3, 0)]:
        y = torch.empty(shape, device=DEVICE)
        out = helpers.softmax_backward(y, torch.empty(shape, device=DEVICE))
        assert out.shape == y.shape


def test_inputs_are_never_modified():
    y, dy = pair((4, 21))
    y0, dy0 = y.clone(), dy.clone()
    helpers.softmax_backward(y, dy)
    softmax_backward_looped(y, dy, 8)
    assert torch.equal(y, y0) and torch.equal(dy, dy0)
    x = torch.randn(4, 21, device=DEVICE, requires_grad=True)
    x0 = x.detach().clone()
    (helpers.softmax(x) * 2).sum().backward()
    assert torch.equal(x.detach(), x0)


def test_the_plan_is_cached_per_kind_of_tensor():
    y, dy = pair((3, 12))
    wrapper = helpers.kernels.backward._backward
    helpers.softmax_backward(y, dy)
    n = len(wrapper.cache)
    y2, dy2 = pair((3, 12), seed=9)
    assert_backward_ok(helpers.softmax_backward(y2, dy2), y2, dy2)
    assert len(wrapper.cache) == n


# --------------------------------------------------------------------------------------------
# Bad inputs: clear errors that say what to do
# --------------------------------------------------------------------------------------------


def test_bad_inputs_and_their_messages(wrong_device_tensor):
    y, dy = pair((3, 4))
    with pytest.raises(ValueError, match=r"dy has shape \(4, 3\) but y has shape \(3, 4\)"):
        helpers.softmax_backward(y, dy.t().contiguous())
    with pytest.raises(TypeError, match=r"dy\.to\(y\.dtype\)"):
        helpers.softmax_backward(y, dy.double())
    with pytest.raises(TypeError, match="floating"):
        helpers.softmax_backward(y, torch.ones(3, 4, dtype=torch.int64, device=DEVICE))
    with pytest.raises(TypeError, match="floating"):
        helpers.softmax_backward(torch.ones(3, 4, dtype=torch.int32, device=DEVICE), dy)
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        helpers.softmax_backward([[0.5, 0.5]], dy)
    with pytest.raises(TypeError, match="dy must be a torch.Tensor"):
        helpers.softmax_backward(y, 1.0)
    with pytest.raises(ValueError, match="0-d"):
        helpers.softmax_backward(torch.tensor(1.0, device=DEVICE), torch.tensor(1.0, device=DEVICE))
    with pytest.raises(ValueError, match=r"dy is on device 'meta' but y is on .*dy\.to\(y\.device\)"):
        helpers.softmax_backward(y, wrong_device_tensor)
    with pytest.raises(ValueError, match="kernels run on"):
        helpers.softmax_backward(wrong_device_tensor, wrong_device_tensor)


def test_bad_options():
    y, dy = pair((3, 4))
    with pytest.raises(ValueError, match="power of two"):
        softmax_backward_tiled(y, dy, 3)
    with pytest.raises(ValueError, match="block_m must be a positive int"):
        softmax_backward_tiled(y, dy, 0)
    with pytest.raises(ValueError, match="power of two"):
        softmax_backward_looped(y, dy, 24)
    with pytest.raises(TypeError, match="block_size must be an int"):
        softmax_backward_looped(y, dy, 16.0)
    with pytest.raises(ValueError, match="slice_cols must be a power of two"):
        softmax_backward_coop(y, dy, 24)
    with pytest.raises(ValueError, match="num_warps must be a positive int"):
        softmax_backward_coop(y, dy, 16, 0)
    long_y = torch.empty(1, BACKWARD_TILED_MAX_COLS + 1, device=DEVICE)
    with pytest.raises(ValueError, match="helpers.softmax_backward"):
        softmax_backward_tiled(long_y, long_y)


def test_softmax_bad_inputs_still_get_clear_errors(wrong_device_tensor):
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        helpers.softmax([1.0, 2.0])
    with pytest.raises(ValueError, match="0-d"):
        helpers.softmax(torch.tensor(1.0, device=DEVICE, requires_grad=True))
    with pytest.raises(ValueError, match="kernels run on"):
        helpers.softmax(wrong_device_tensor.requires_grad_())


# --------------------------------------------------------------------------------------------
# Autograd through helpers.softmax (the operator)
# --------------------------------------------------------------------------------------------


def test_gradcheck_float64():
    x = torch.randn(2, 5, dtype=torch.float64, device=DEVICE, requires_grad=True)
    assert torch.autograd.gradcheck(helpers.softmax, (x,))


def test_gradgradcheck_float64():
    x = torch.randn(2, 4, dtype=torch.float64, device=DEVICE, requires_grad=True)
    assert torch.autograd.gradgradcheck(helpers.softmax, (x,))


def test_operators_pass_opcheck():
    x = torch.randn(3, 7, device=DEVICE, requires_grad=True)
    for name, res in torch.library.opcheck(torch.ops.softmax_course.softmax.default, (x,)).items():
        assert res == "SUCCESS", name
    y, dy = pair((3, 7))
    args = (y.requires_grad_(), dy.requires_grad_())
    for name, res in torch.library.opcheck(torch.ops.softmax_course.softmax_backward.default, args).items():
        assert res == "SUCCESS", name


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(3, 5), (2, 3, 17)])
def test_values_and_gradients_match_torch(shape, dtype):
    g = torch.Generator().manual_seed(7)
    x0 = (torch.randn(shape, generator=g) * 2).to(dtype).to(DEVICE)
    w = torch.randn(shape[-1], generator=g).to(dtype).to(DEVICE)
    x1, x2 = x0.clone().requires_grad_(), x0.clone().requires_grad_()
    y1 = helpers.softmax(x1)
    (y1 * w).sum().backward()
    y2 = torch.softmax(x2.float(), dim=-1).to(dtype)  # torch's reference, computed in fp32 like ours
    (y2 * w).sum().backward()
    atol, rtol = TOL[dtype]
    assert type(y1.grad_fn).__name__ == "SoftmaxFunctionBackward"
    torch.testing.assert_close(y1, y2, atol=atol, rtol=rtol)
    torch.testing.assert_close(x1.grad.float(), x2.grad.float(), atol=max(atol, 1e-6) * 4, rtol=rtol * 4)


def test_a_non_contiguous_input_and_grad():
    x = torch.randn(12, 7, device=DEVICE).t().requires_grad_()  # (7, 12), strides (1, 7)
    gy = torch.randn(12, 7, device=DEVICE).t()
    y = helpers.softmax(x)
    (dx,) = torch.autograd.grad(y, x, gy)
    x2 = x.detach().clone().requires_grad_()
    (dx2,) = torch.autograd.grad(torch.softmax(x2, -1), x2, gy)
    torch.testing.assert_close(dx, dx2, atol=1e-6, rtol=1e-5)


# --------------------------------------------------------------------------------------------
# The no-grad fast path
# --------------------------------------------------------------------------------------------


class Spy:
    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, x):
        self.calls += 1
        return self.fn(x)


def test_the_no_grad_path_launches_directly(monkeypatch):
    spy = Spy(dispatch._softmax)
    monkeypatch.setattr(dispatch, "_softmax", spy)
    x = torch.randn(3, 9, device=DEVICE)
    ref = torch.softmax(x.double(), -1)
    cases = [(x, None), (x.clone().requires_grad_(), "no_grad"), (x.clone().requires_grad_(), "inference")]
    for t, mode in cases:
        if mode == "no_grad":
            with torch.no_grad():
                y = helpers.softmax(t)
        elif mode == "inference":
            with torch.inference_mode():
                y = helpers.softmax(t)
        else:
            y = helpers.softmax(t)
        assert y.grad_fn is None
        torch.testing.assert_close(y.double(), ref, atol=1e-6, rtol=1e-5)
    assert spy.calls == len(cases)
    y = helpers.softmax(x.clone().requires_grad_())  # eager autograd: the Function, around the same kernels
    assert spy.calls == len(cases) + 1 and type(y.grad_fn).__name__ == "SoftmaxFunctionBackward"


def test_eager_function_and_operator_agree():
    """helpers.softmax's eager autograd (SoftmaxFunction) and the operator torch.compile uses give
    the same values, gradients and second derivatives."""
    g = torch.Generator().manual_seed(4)
    x0 = torch.randn(3, 11, generator=g, dtype=torch.float64).to(DEVICE)
    v = torch.randn(3, 11, generator=g, dtype=torch.float64).to(DEVICE)
    outs = []
    for fn in (helpers.softmax, torch.ops.softmax_course.softmax):
        x = x0.clone().requires_grad_()
        y = fn(x)
        (gx,) = torch.autograd.grad((y * v).sum(), x, create_graph=True)
        (ggx,) = torch.autograd.grad((gx * v).sum(), x)
        outs.append((y.detach(), gx.detach(), ggx))
    for a, b in zip(*outs):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-10)
    x = x0.clone().requires_grad_()
    (gx,) = torch.autograd.grad((torch.softmax(x, -1) * v).sum(), x, create_graph=True)
    (ggx,) = torch.autograd.grad((gx * v).sum(), x)
    torch.testing.assert_close(outs[0][2], ggx, atol=1e-12, rtol=1e-10)


# --------------------------------------------------------------------------------------------
# torch.compile
# --------------------------------------------------------------------------------------------


def test_compile_fullgraph_values_and_gradients():
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(11)
    x0 = torch.randn(2, 3, 10, generator=g).to(DEVICE)
    w = torch.randn(10, generator=g).to(DEVICE)

    def f(x, sm):
        return (sm(x) * w).sum()

    compiled = torch.compile(lambda x: f(x, helpers.softmax), fullgraph=True, backend="aot_eager")
    x1, x2 = x0.clone().requires_grad_(), x0.clone().requires_grad_()
    v1 = compiled(x1)
    v1.backward()
    v2 = f(x2, lambda t: torch.softmax(t, -1))
    v2.backward()
    torch.testing.assert_close(v1, v2, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(x1.grad, x2.grad, atol=1e-6, rtol=1e-5)


def test_compile_sees_one_node_each_way_and_no_graph_break():
    x = torch.randn(3, 6, device=DEVICE, requires_grad=True)
    w = torch.randn(6, device=DEVICE)
    _, graphs = lesson08.compiled_graphs(lambda x, w: (helpers.softmax(x) * w).sum(), x, w)
    fw = [str(n.target) for n in graphs["forward"].graph.nodes if n.op == "call_function"]
    bw = [str(n.target) for n in graphs["backward"].graph.nodes if n.op == "call_function"]
    assert fw.count("softmax_course.softmax.default") == 1
    assert bw.count("softmax_course.softmax_backward.default") == 1
    explained = torch._dynamo.explain(lambda x: helpers.softmax(x) * 2)(x)
    assert explained.graph_break_count == 0 and explained.graph_count == 1


def test_compile_without_grad_still_uses_the_operator():
    torch._dynamo.reset()
    x = torch.randn(4, 5, device=DEVICE)
    f = torch.compile(lambda t: helpers.softmax(t) + 1, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(f(x), torch.softmax(x, -1) + 1, atol=1e-6, rtol=1e-5)


# --------------------------------------------------------------------------------------------
# The GPU benchmark's logic, on the CPU with fake timers
# --------------------------------------------------------------------------------------------


def test_bench_rows_fractions_and_failures():
    times = {"copy": 2.0, "course": 3.0, "torch_backward": 6.0, "wrong": 1.0}
    provs = dict(backward_bench.providers())
    provs = {k: provs[k] for k in ("copy", "course", "torch_backward")}
    provs["wrong"] = lambda y, dy, out: y * dy  # forgets the - sum(y * dy) term
    order = []

    def timing(key):
        def t(call):
            call()  # sets current[0] to the provider being timed
            order.append(key)
            return times[current[0]] * (1000 if key == "host_us" else 1)

        return t

    current = [None]
    wrapped = {}
    for name, fn in provs.items():

        def w(y, dy, out, fn=fn, name=name):
            current[0] = name
            return fn(y, dy, out)

        wrapped[name] = w
    timers = {"ms": timing("ms"), "graph_ms": timing("graph_ms"), "host_us": timing("host_us")}
    rows = backward_bench.measure(4, 33, torch.float32, wrapped, timers=timers, device=DEVICE)
    by = {r["provider"]: r for r in rows}
    assert [tuple(r.keys()) for r in rows] == [backward_bench.COLUMNS] * 4
    assert by["copy"]["frac_of_copy"] == 1.0 and by["copy"]["status"] == "ok"
    assert by["course"]["status"] == "ok" and by["course"]["max_err"] < 1e-6
    assert math.isclose(by["course"]["frac_of_copy"], 1.5 * 2.0 / 3.0)
    assert math.isclose(by["torch_backward"]["graph_frac"], 1.5 * 2.0 / 6.0)
    assert by["course"]["host_us"] == 3000.0
    assert by["wrong"]["status"].startswith("wrong") and math.isnan(by["wrong"]["ms"])
    assert len(order) == 3 * 3 * backward_bench.ROUNDS  # three timers for each of the three right providers, per round
    assert by["course"]["spread"] == 0.0 and by["course"]["graph_spread"] == 0.0 and math.isnan(by["wrong"]["spread"])


def test_bench_spread_is_max_minus_min_over_the_median_of_the_rounds():
    ticks = iter([1.0, 2.0, 1.2, 1.0, 1.1, 1.0] * 10)  # copy and course alternate: copy 1.0/1.2/1.1, course 2.0/1.0/1.0
    provs = {k: v for k, v in backward_bench.providers().items() if k in ("copy", "course")}
    rows = backward_bench.measure(
        2, 16, torch.float32, provs, timers={"graph_ms": lambda call: next(ticks)}, device=DEVICE
    )
    by = {r["provider"]: r for r in rows}
    assert by["copy"]["graph_ms"] == 1.1 and math.isclose(by["copy"]["graph_spread"], (1.2 - 1.0) / 1.1, abs_tol=1e-6)
    assert by["course"]["graph_ms"] == 1.0 and math.isclose(by["course"]["graph_spread"], 1.0)
    assert math.isclose(by["course"]["graph_frac"], 1.5 * 1.1 / 1.0, abs_tol=1e-6) and math.isnan(
        by["course"]["spread"]
    )


def test_bench_a_failing_timer_is_reported_not_raised():
    def boom(call):
        raise RuntimeError("capture failed")

    rows = backward_bench.measure(
        2, 16, torch.float32, timers={"ms": lambda call: 1.0, "graph_ms": boom}, device=DEVICE
    )
    for r in rows:
        assert r["ms"] == 1.0 and math.isnan(r["graph_ms"]) and "capture failed" in r["status"]
        assert math.isnan(r["graph_frac"])


def test_bench_bfloat16_tolerance_accepts_the_course_and_torch():
    rows = backward_bench.measure(3, 50, torch.bfloat16, timers={}, device=DEVICE)
    assert all(r["status"] == "ok" for r in rows), [(r["provider"], r["status"]) for r in rows]


@pytest.mark.skipif(helpers.ON_GPU, reason="on a GPU the benchmark runs for real")
def test_bench_without_a_gpu_says_so(tmp_path):
    out = tmp_path / "backward.csv"
    r = subprocess.run(
        [sys.executable, "tools/backward_bench.py", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 2 and "needs an NVIDIA GPU" in r.stderr and not out.exists()


def test_the_recordings_are_not_faked():
    """figures/data/backward_<gpu>.csv come from GPU runs of the benchmark (named helpers.backward_bench before
    it moved to tools/), with a spread for every timing."""
    paths = sorted(gpu_data.DATA_DIR.glob("backward_h[0-9]*.csv"))  # the benchmark's, one per GPU
    assert {p.name for p in paths} >= {"backward_h100.csv", "backward_h200.csv"}
    probes = sorted(gpu_data.DATA_DIR.glob("backward_boundary_*.csv")) + sorted(
        gpu_data.DATA_DIR.glob("backward_rows_*.csv")
    )
    assert len(probes) >= 4
    for p in probes:  # lesson 08's probes of the split boundary and of the rows that fit
        rows, meta = gpu_data.read_csv(p)
        assert "CPU" not in meta.get("gpu", "CPU") and rows, p.name
        assert all(math.isfinite(float(r["graph_spread"])) for r in rows), p.name
    for p in paths:
        rows, meta = gpu_data.read_csv(p)
        assert "backward_bench" in meta.get("command", "") and "CPU" not in meta.get("gpu", "CPU"), p.name
        ok = [r for r in rows if r["status"] == "ok"]
        assert ok and all(math.isfinite(float(r["graph_spread"])) for r in ok), p.name
        # the one provider allowed to fail: Liger, which refuses rows over 65536 columns
        refused = [r for r in rows if r["status"] != "ok"]
        assert all(
            r["provider"] == "liger_backward" and int(r["N"]) > 65536 and "65536" in r["status"] for r in refused
        ), p.name


def test_bench_gpu_timers_reach_helpers_measure(monkeypatch):
    """The benchmark's own timers call helpers.measure's (a module-level name once shadowed them, and
    every GPU timing of the live lesson failed): each one, with measure's timer faked, returns the
    fake's number for the call it was given."""
    from helpers import measure

    seen = []
    monkeypatch.setattr(measure, "eager_ms", lambda fn, rep=0: seen.append(("ms", fn)) or 1.5)
    monkeypatch.setattr(measure, "gpu_ms", lambda fn, rep=0: seen.append(("graph_ms", fn)) or 2.5)
    monkeypatch.setattr(measure, "host_us", lambda fn, **kw: seen.append(("host_us", fn)) or 3.5)
    call = lambda: None  # noqa: E731
    got = {k: t(call) for k, t in backward_bench.GPU_TIMERS.items()}
    assert got == {"ms": 1.5, "graph_ms": 2.5, "host_us": 3.5}
    assert seen == [("ms", call), ("graph_ms", call), ("host_us", call)]


def test_bench_providers_names_a_subset_and_refuses_unknown_names(monkeypatch):
    seen = []
    monkeypatch.setattr(backward_bench, "warm_up_gpu", lambda: None)
    monkeypatch.setattr(backward_bench, "measure", lambda M, N, dtype, provs, group: seen.append(sorted(provs)) or [])
    backward_bench.sweep(groups=("long",), dtypes=("float32",), names=["course"])
    assert seen == [["copy", "course"]] * len(backward_bench.SHAPES["long"])  # the copy always comes along
    with pytest.raises(SystemExit, match="unknown or unavailable providers \\['nope'\\]"):
        backward_bench.sweep(groups=("long",), names=["course", "nope"])
