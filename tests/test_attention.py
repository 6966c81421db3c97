"""helpers.attention (lesson 07's kernel): the contract of torch.nn.functional.scaled_dot_product_attention.

Against float64 SDPA on irregular shapes (Sq != Sk, lengths that are not multiples of the blocks),
fp32 / fp16 / bf16, causal, the LSE, the scale, large scores, every layout of strides (views,
transposes, expanded and copied leading dims), empty inputs, bad inputs and their messages, and
inputs never modified. Sizes stay small: the kernel runs in Triton's interpreter on the CPU; on a
GPU the same tests run compiled (HYPOTHESIS_PROFILE=gpu python -m pytest tests/test_attention.py).
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from compiling import compile_report

import helpers
from helpers import DEVICE
from helpers._versions import _parse as _parse_version

A = importlib.import_module("helpers.kernels.attention")
ROOT = Path(__file__).resolve().parent.parent

#: (atol, rtol) against float64, by dtype: one rounding of the output (the interpreter truncates
#: fp32 -> bf16, one ulp), and on a GPU one rounding of the probabilities before p @ v.
TOL = {torch.float32: (3e-5, 3e-5), torch.float16: (4e-3, 4e-3), torch.bfloat16: (3e-2, 2e-2)}


def reference(q, k, v, causal=False, scale=None):
    """(out, lse) in float64 on the CPU."""
    q64, k64, v64 = (t.detach().cpu().double() for t in (q, k, v))
    out = F.scaled_dot_product_attention(q64, k64, v64, is_causal=causal, scale=scale)
    s = (q64 @ k64.transpose(-2, -1)) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), float("-inf"))
    return out, torch.logsumexp(s, dim=-1)


def score_tol(q, k, v, scale=None):
    """What fp32 scores of this size can be off by, times the values' size."""
    scale = abs(1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    s = (q.detach().cpu().double().abs() @ k.detach().cpu().double().abs().transpose(-2, -1)).max().item() * scale
    return 2.0**-24 * s * v.detach().abs().max().item()


def assert_close(out, lse, q, k, v, causal=False, scale=None):
    ref, ref_lse = reference(q, k, v, causal, scale)
    atol, rtol = TOL[q.dtype]
    atol += score_tol(q, k, v, scale)
    assert out.shape == q.shape and out.dtype == q.dtype and out.device == q.device
    torch.testing.assert_close(out.cpu().double(), ref, atol=atol, rtol=rtol)
    if lse is not None:
        assert lse.shape == q.shape[:-1] and lse.dtype == torch.float32 and lse.device == q.device
        torch.testing.assert_close(lse.cpu().double(), ref_lse, atol=1e-4 + score_tol(q, k, v, scale), rtol=1e-5)


def make(lead, sq, sk, d, dtype=torch.float32, seed=0, amp=1.0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(*lead, n, d, generator=g) for n in (sq, sk, sk))
    return (q * amp).to(dtype).to(DEVICE), (k * amp).to(dtype).to(DEVICE), v.to(dtype).to(DEVICE)


DTYPES = [torch.float32, torch.float16, torch.bfloat16]

# --------------------------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------------------------

SHAPES = [  # (leading dims, Sq, Sk, D)
    ((2,), 50, 70, 16),  # Sq != Sk, neither a multiple of the blocks
    ((1, 3), 33, 100, 32),
    ((2,), 64, 64, 64),  # exact multiples
    ((), 17, 5, 128),  # fewer keys than one block, no leading dims
    ((2,), 1, 129, 64),  # a single query (decoding)
    ((1,), 100, 1, 16),  # a single key
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}x{s[2]}xD{s[3]}")
def test_matches_float64_sdpa(shape, dtype):
    q, k, v = make(*shape, dtype=dtype, seed=sum(shape[1:]))
    out, lse = helpers.attention(q, k, v, return_lse=True)
    assert_close(out, lse, q, k, v)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("S", [1, 7, 16, 33, 77])
def test_causal(S, dtype):
    q, k, v = make((2,), S, S, 32, dtype=dtype, seed=S)
    out, lse = helpers.attention(q, k, v, causal=True, return_lse=True)
    assert_close(out, lse, q, k, v, causal=True)


def test_causal_first_row_sees_only_its_own_key():
    q, k, v = make((3,), 20, 20, 16, seed=3)
    out, lse = helpers.attention(q, k, v, causal=True, return_lse=True)
    torch.testing.assert_close(out[:, 0], v[:, 0], atol=1e-6, rtol=0)
    s00 = (q[:, 0] * k[:, 0]).sum(-1) / 4.0
    torch.testing.assert_close(lse[:, 0], s00, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("scale", [None, 0.3, 1, -0.5, 0.0, 2.5])
def test_scale(scale):
    q, k, v = make((2,), 21, 40, 32, seed=5)
    out, lse = helpers.attention(q, k, v, scale=scale, return_lse=True)
    assert_close(out, lse, q, k, v, scale=scale)
    if scale == 0.0:  # every score 0: the plain average of the values
        torch.testing.assert_close(out, v.mean(dim=-2, keepdim=True).expand_as(out), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_large_scores(dtype, causal):
    # scores of +-1e4: the softmax is nearly one-hot; nothing may overflow, even in fp16 inputs
    q, k, v = make((2,), 40, 40, 64, dtype=dtype, seed=11, amp=40.0)
    out, lse = helpers.attention(q, k, v, causal=causal, return_lse=True)
    assert torch.isfinite(out).all() and torch.isfinite(lse).all()
    assert_close(out, lse, q, k, v, causal=causal)


def test_lse_is_a_natural_log_and_merges():
    q, k, v = make((2,), 9, 60, 32, seed=8)
    o1, l1 = helpers.attention(q, k[:, :25], v[:, :25], return_lse=True)
    o2, l2 = helpers.attention(q, k[:, 25:], v[:, 25:], return_lse=True)
    full, lse = helpers.attention(q, k, v, return_lse=True)
    merged_lse = torch.logaddexp(l1, l2)
    merged = o1 * torch.exp(l1 - merged_lse)[..., None] + o2 * torch.exp(l2 - merged_lse)[..., None]
    torch.testing.assert_close(merged_lse, lse, atol=1e-5, rtol=1e-6)
    torch.testing.assert_close(merged, full, atol=1e-5, rtol=1e-5)


def test_return_lse_false_gives_the_same_output():
    q, k, v = make((2,), 30, 45, 16, seed=2)
    out = helpers.attention(q, k, v)
    out2, _ = helpers.attention(q, k, v, return_lse=True)
    assert isinstance(out, torch.Tensor)
    assert torch.equal(out, out2)


def test_naive_attention_matches_reference():
    for causal in (False, True):
        q, k, v = make((2, 2), 12, 12, 16, seed=4)
        ref, _ = reference(q, k, v, causal)
        torch.testing.assert_close(
            helpers.kernels.naive_attention(q, k, v, causal=causal).double().cpu(), ref.cpu(), atol=1e-5, rtol=1e-5
        )


# --------------------------------------------------------------------------------------------
# The tensor-descriptor kernel (attention_fwd_tma_kernel): the GPU path for fp16 / bf16 on Hopper.
# Forced here with small tiles, so that it runs in the interpreter too and loops over several
# blocks; on a GPU the same tests run it compiled.
# --------------------------------------------------------------------------------------------


def planned(plan):
    """A plan's one launch and its info, as attributes (grid, args, constexprs, kernel, config, copy)."""
    (launch,) = plan.launches
    return types.SimpleNamespace(grid=launch.grid, args=launch.args, constexprs=launch.constexprs, **plan.info)


TMA_SMALL = [A.TmaConfig(32, 16, 4, 1, False), A.TmaConfig(16, 32, 4, 2, True)]


def run_kernel(kernel, q, k, v, causal=False, scale=None, config=None):
    plan = A.attention_plan(q, k, v, causal, scale, True, config=config, kernel=kernel)
    assert plan.info["kernel"] == kernel
    return A.attention_call(plan, q, k, v)(q, k, v)


@pytest.mark.parametrize(
    "config", TMA_SMALL, ids=lambda c: f"{c.block_m}x{c.block_n}{'ws' if c.warp_specialize else ''}"
)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    "shape",
    [((2,), 50, 70, 16), ((1, 3), 77, 77, 32), ((2,), 64, 64, 64), ((), 17, 5, 128), ((2,), 1, 129, 64)],
    ids=lambda s: f"{s[0]}x{s[1]}x{s[2]}xD{s[3]}",
)
def test_tma_kernel_matches_float64(shape, causal, dtype, config):
    lead, sq, sk, d = shape
    if causal and sq != sk:
        sk = sq
    q, k, v = make(lead, sq, sk, d, dtype=dtype, seed=sq + sk + d)
    out, lse = run_kernel("tma", q, k, v, causal, config=config)
    assert_close(out, lse, q, k, v, causal=causal)


@pytest.mark.parametrize("scale", [None, -0.5, 0.0])
@pytest.mark.parametrize("causal", [False, True])
def test_tma_and_pointer_kernels_agree(causal, scale):
    """The two kernels compute the same thing (a negative scale takes the TMA kernel's row-min branch)."""
    q, k, v = make((2, 2), 45, 45, 32, dtype=torch.float16, seed=9, amp=3.0)
    out_t, lse_t = run_kernel("tma", q, k, v, causal, scale, config=TMA_SMALL[0])
    out_p, lse_p = run_kernel("pointer", q, k, v, causal, scale)
    torch.testing.assert_close(out_t.double(), out_p.double(), atol=4e-3, rtol=4e-3)
    torch.testing.assert_close(lse_t, lse_p, atol=1e-3, rtol=1e-4)
    if not (causal and scale is not None and scale <= 0):  # float64 SDPA gives NaN for a scale <= 0 with a mask
        assert_close(out_t, lse_t, q, k, v, causal=causal, scale=scale)


def test_tma_kernel_large_scores():
    q, k, v = make((2,), 40, 40, 64, dtype=torch.float16, seed=11, amp=40.0)
    out, lse = run_kernel("tma", q, k, v, True, config=TMA_SMALL[0])
    assert torch.isfinite(out).all() and torch.isfinite(lse).all()
    assert_close(out, lse, q, k, v, causal=True)


def test_which_kernel_the_plan_picks():
    """The TMA kernel only where a descriptor can address the inputs: 16-bit dtypes, last stride 1,
    other strides multiples of 16 bytes, 16-byte aligned data, a GPU of compute capability >= 9."""
    q, k, v = make((2,), 40, 40, 64, dtype=torch.float16)
    meta = lambda *shape: torch.empty(shape, device="meta", dtype=torch.float16)  # noqa: E731
    views = (meta(2, 40, 64),) * 3
    assert A.tma_eligible(q, views, [(2560, 0)] * 3, interpreter=True) is False
    assert A.tma_eligible(q.float(), views, [(2560, 0)] * 3, interpreter=False) is False
    on_hopper = q.device.type == "cuda" and torch.cuda.get_device_capability(q.device)[0] >= 9
    assert A.tma_eligible(q, views, [(2560, 0)] * 3, interpreter=False) is on_hopper
    assert A.tma_eligible(q, (meta(2, 40, 68)[..., :64],) * 3, [(40 * 68, 0)] * 3, interpreter=False) is False
    for d, causal in ((64, False), (64, True), (128, False), (128, True)):
        q, k, v = make((2,), 40, 40, d, dtype=torch.float16)
        use = on_hopper and not A.INTERPRETER and A.tma_config(q.dtype, d, causal) is not None
        assert planned(A.attention_plan(q, k, v, causal)).kernel == ("tma" if use else "pointer")
    assert A.tma_config(torch.float16, 128, False) is not None  # the table names the TMA kernel somewhere
    assert planned(A.attention_plan(q.float(), k.float(), v.float())).kernel == "pointer"
    with pytest.raises(ValueError, match="kernel must be"):
        A.attention_plan(q, k, v, kernel="cuda")
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        A.attention_plan(q.float(), k.float(), v.float(), kernel="tma")


# --------------------------------------------------------------------------------------------
# Layouts: strides, views, expanded and copied leading dims
# --------------------------------------------------------------------------------------------


def test_transposed_bshd_layout_needs_no_copy():
    B, S, H, D = 2, 37, 3, 32
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, S, H, D, generator=g).to(DEVICE).transpose(1, 2) for _ in range(3))
    plan = planned(A.attention_plan(q, k, v))
    assert not plan.copy and plan.grid == (math.ceil(S / plan.config.block_m), H, B) and plan.args[-3:-1] == (H, 1)
    out, lse = helpers.attention(q, k, v, return_lse=True)
    assert out.is_contiguous()
    assert_close(out, lse, q, k, v)


def test_expanded_keys_and_values_stride_zero():
    q, _, _ = make((2, 4), 19, 19, 16, seed=6)
    k1, v1 = (torch.randn(2, 1, 23, 16).to(DEVICE) for _ in range(2))
    k, v = k1.expand(2, 4, 23, 16), v1.expand(2, 4, 23, 16)
    assert not planned(A.attention_plan(q, k, v)).copy
    out, lse = helpers.attention(q, k, v, return_lse=True)
    assert_close(out, lse, q, k, v)


def test_non_unit_head_dim_stride_and_sliced_sequence():
    g = torch.Generator().manual_seed(1)
    big = torch.randn(2, 50, 64, generator=g).to(DEVICE)
    q = big[:, 3:40, ::2]  # stride 2 along D, an offset along the sequence
    k = torch.randn(2, 60, 32, generator=g).to(DEVICE)[:, ::2]  # every other key
    v = torch.randn(2, 32, 30, generator=g).to(DEVICE).transpose(-2, -1)  # D-major values
    out, lse = helpers.attention(q, k, v, return_lse=True)
    assert_close(out, lse, q, k, v)


def test_leading_dims_that_no_split_addresses_are_copied():
    g = torch.Generator().manual_seed(2)
    q = torch.randn(3, 2, 4, 11, 16, generator=g).to(DEVICE).permute(1, 0, 2, 3, 4)  # (2, 3, 4): strides do not merge
    k, v = (torch.randn(2, 3, 4, 13, 16, generator=g).to(DEVICE) for _ in range(2))
    assert planned(A.attention_plan(q, k, v)).copy
    out, lse = helpers.attention(q, k, v, return_lse=True)
    assert_close(out, lse, q, k, v)


def test_five_dims_and_two_dims():
    q, k, v = make((2, 1, 3), 9, 14, 16, seed=9)
    out, lse = helpers.attention(q, k, v, return_lse=True)
    assert_close(out, lse, q, k, v)
    out, lse = helpers.attention(q[0, 0, 0], k[0, 0, 0], v[0, 0, 0], return_lse=True)
    assert_close(out, lse, q[0, 0, 0], k[0, 0, 0], v[0, 0, 0])


def test_no_input_is_modified_and_outputs_are_new():
    q, k, v = make((2,), 20, 30, 32, dtype=torch.float16, seed=12)
    before = [t.clone() for t in (q, k, v)]
    out, lse = helpers.attention(q, k, v, return_lse=True)
    out2 = helpers.attention(q, k, v, causal=False, scale=0.2)
    for t, b in zip((q, k, v), before):
        assert torch.equal(t, b)
    for t in (q, k, v):
        assert out.data_ptr() != t.data_ptr() and out2.data_ptr() != t.data_ptr()


# --------------------------------------------------------------------------------------------
# Empty inputs
# --------------------------------------------------------------------------------------------


def test_no_queries_or_no_heads():
    for lead, sq in (((2,), 0), ((0,), 5)):
        q, k, v = make(lead, sq, 7, 16)
        out, lse = helpers.attention(q, k, v, return_lse=True)
        assert out.shape == q.shape and lse.shape == q.shape[:-1]


def test_no_keys_gives_zeros_like_sdpa():
    q, k, v = make((2,), 5, 0, 16)
    out, lse = helpers.attention(q, k, v, return_lse=True)
    torch.testing.assert_close(out.cpu(), F.scaled_dot_product_attention(q.cpu(), k.cpu(), v.cpu()))
    assert (out == 0).all() and (lse == float("-inf")).all()


# --------------------------------------------------------------------------------------------
# The plan and its cache
# --------------------------------------------------------------------------------------------


def test_plan_grid_and_config():
    q, k, v = make((2, 3), 70, 50, 64, dtype=torch.float16)
    p = planned(A.attention_plan(q, k, v, causal=False))
    tma = A.tma_config(torch.float16, 64, False)
    assert p.kernel == ("tma" if tma and A.tma_eligible(q, (q, k, v), [(0, 0)] * 3) else "pointer")
    c = tma if p.kernel == "tma" else A.attention_config(torch.float16, 64)
    assert p.config == c and p.grid == (math.ceil(70 / c.block_m), 6, 1)  # the 3-D grid: not causal
    assert p.args[-3:-1] == (6, 1)  # n_heads (the leading dims merge into one), heads per group (unused: 1)
    assert p.constexprs["GROUPED"] is False
    assert p.constexprs["HEAD_DIM"] == 64 and p.constexprs["CAUSAL"] is False
    assert p.args[-1] == pytest.approx(A.LOG2E / 8)  # scale * log2(e)
    for dtype in DTYPES:
        cfg = A.attention_config(dtype, 128)
        assert cfg.block_m >= 16 and cfg.block_n >= 16 and cfg.block_m & (cfg.block_m - 1) == 0


def test_heads_per_group():
    """Causal grids order their programs longest first over groups of heads whose K and V take at most
    GROUP_KV_BYTES; without a mask every program has the same work and the heads go one by one."""
    hpg = A.heads_per_group
    assert A.GROUP_KV_BYTES == 16 * 2**20
    assert hpg(4096, 64, 2, False, 64) == 1
    assert [hpg(4096, 64, 2, True, 64), hpg(4096, 128, 2, True, 64), hpg(16384, 128, 2, True, 64)] == [16, 8, 2]
    assert hpg(64, 16, 2, True, 6) == 6  # never more than there are heads
    assert hpg(2**22, 128, 4, True, 64) == 1  # never fewer than one
    q, k, v = make((2, 3), 40, 40, 16)
    assert planned(A.attention_plan(q, k, v, causal=True)).args[-3:-1] == (6, hpg(40, 16, 4, True, 6))
    with pytest.raises(ValueError, match="group must be a positive int"):
        A.attention_plan(q, k, v, causal=True, group=0)


def test_the_plan_picks_the_grid(monkeypatch):
    """Causal with at most GROUPED_MAX_SEQ queries: the 1-D grid in heads_per_group's groups. Longer,
    or without a mask: the 3-D grid (query blocks, H, Z). A group passed in always gives the 1-D grid."""
    assert A.GROUPED_MAX_SEQ == 8192
    q, k, v = make((2, 3), 40, 40, 16)
    num_m = math.ceil(40 / A.attention_config(q.dtype, 16).block_m)
    p = planned(A.attention_plan(q, k, v, causal=True))
    assert p.grid == (num_m * 6,) and p.constexprs["GROUPED"] is True
    assert p.args[-2] == A.heads_per_group(40, 16, 4, True, 6)
    p = planned(A.attention_plan(q, k, v, causal=False))
    assert p.grid == (num_m, 6, 1) and p.constexprs["GROUPED"] is False
    p = planned(A.attention_plan(q, k, v, causal=False, group=2))
    assert p.grid == (num_m * 6,) and p.constexprs["GROUPED"] is True and p.args[-2] == 2
    monkeypatch.setattr(A, "GROUPED_MAX_SEQ", 39)  # 40 queries: past the bound
    p = planned(A.attention_plan(q, k, v, causal=True))
    assert p.grid == (num_m, 6, 1) and p.constexprs["GROUPED"] is False
    monkeypatch.undo()
    for S, grouped in ((A.GROUPED_MAX_SEQ, True), (A.GROUPED_MAX_SEQ + 1, False)):  # at the bound, past it
        q, k, v = make((1, 2), S, S, 16)
        assert planned(A.attention_plan(q, k, v, causal=True)).constexprs["GROUPED"] is grouped


@pytest.mark.parametrize("kernel", ["pointer", "tma"])
def test_the_3d_grid_causal(kernel, monkeypatch):
    """Causal inputs longer than GROUPED_MAX_SEQ run the 3-D grid; lowered here so that the
    interpreter runs it, in both kernels, against float64."""
    monkeypatch.setattr(A, "GROUPED_MAX_SEQ", 16)
    q, k, v = make((2, 3), 45, 45, 32, dtype=torch.float16, seed=13)
    plan = A.attention_plan(q, k, v, True, None, True, config=TMA_SMALL[0] if kernel == "tma" else None, kernel=kernel)
    assert len(planned(plan).grid) == 3 and planned(plan).constexprs["GROUPED"] is False
    out, lse = A.attention_call(plan, q, k, v)(q, k, v)
    assert_close(out, lse, q, k, v, causal=True)


query_block_and_head = A.query_block_and_head
program_block = A.program_block


@triton.jit
def _block_kernel(out_ptr, num_m, n_heads, CAUSAL: tl.constexpr):
    pid = tl.program_id(0) + tl.num_programs(0) * (tl.program_id(1) + tl.num_programs(1) * tl.program_id(2))
    start_m, h, z = program_block(num_m, n_heads, 1, CAUSAL, False)
    tl.store(out_ptr + 3 * pid, start_m)
    tl.store(out_ptr + 3 * pid + 1, h)
    tl.store(out_ptr + 3 * pid + 2, z)


@pytest.mark.parametrize("causal", [False, True])
def test_the_3d_grid_covers_every_block_once(causal):
    """program_block on the 3-D grid (query blocks, H, Z): every (query block, head, batch element)
    once, a head's query blocks along the first dimension, in order or, causal, last first."""
    num_m, H, Z = 5, 3, 2
    got = torch.zeros(num_m * H * Z * 3, dtype=torch.int32, device=DEVICE)
    _block_kernel[(num_m, H, Z)](got, num_m, H, CAUSAL=causal)
    triples = [tuple(t) for t in got.view(-1, 3).tolist()]
    assert sorted(triples) == [(m, h, z) for m in range(num_m) for h in range(H) for z in range(Z)]
    for i in range(0, len(triples), num_m):  # one head at a time along the first dimension
        head = triples[i : i + num_m]
        assert len({(h, z) for _, h, z in head}) == 1
        assert [m for m, _, _ in head] == sorted(range(num_m), reverse=causal)


@triton.jit
def _order_kernel(out_ptr, num_m, group, CAUSAL: tl.constexpr):
    pid = tl.program_id(0)
    start_m, hz = query_block_and_head(pid, num_m, group, CAUSAL)
    tl.store(out_ptr + 2 * pid, start_m)
    tl.store(out_ptr + 2 * pid + 1, hz)


@pytest.mark.parametrize("num_m, n_hz, group", [(5, 6, 1), (5, 6, 4), (3, 7, 7), (4, 6, 100), (1, 3, 2)])
@pytest.mark.parametrize("causal", [False, True])
def test_program_order_covers_every_block_once(num_m, n_hz, group, causal):
    """query_block_and_head maps the 1-D grid onto every (query block, head) exactly once, a group's
    programs consecutive, and, causal, each group's last query blocks (the longest programs) first."""
    got = torch.zeros(num_m * n_hz * 2, dtype=torch.int32, device=DEVICE)
    _order_kernel[(num_m * n_hz,)](got, num_m, group, CAUSAL=causal)
    pairs = [tuple(p) for p in got.view(-1, 2).tolist()]
    assert sorted(pairs) == [(m, h) for m in range(num_m) for h in range(n_hz)]
    size = min(group, n_hz)
    for first in range(0, n_hz, size):  # one group after another
        part = pairs[first * num_m : (first + min(size, n_hz - first)) * num_m]
        assert {h for _, h in part} == set(range(first, min(first + size, n_hz)))
        blocks = [m for m, _ in part]
        assert blocks == sorted(blocks, reverse=causal)


@pytest.mark.parametrize("group", [1, 2, 4, 6])
def test_any_group_gives_the_same_result(group):
    """The order of the programs changes nothing in the output, causal or not."""
    q, k, v = make((2, 3), 45, 45, 32, seed=11)
    for causal in (False, True):
        plan = A.attention_plan(q, k, v, causal=causal, return_lse=True, group=group)
        out, lse = A.attention_call(plan, q, k, v)(q, k, v)
        assert_close(out, lse, q, k, v, causal=causal)


def test_cache_is_keyed_on_the_kind_of_input():
    q, k, v = make((2,), 24, 31, 16, seed=21)
    A._ATTENTION.clear()
    a = helpers.attention(q, k, v)
    assert len(A._ATTENTION) == 1
    b = helpers.attention(q.clone(), k.clone(), v.clone())
    assert len(A._ATTENTION) == 1 and torch.equal(a, b)
    helpers.attention(q, k, v, scale=0.5)
    helpers.attention(q, k, v, causal=False, return_lse=True)
    helpers.attention(q[:, :10], k, v)
    assert len(A._ATTENTION) == 4
    with pytest.raises(ValueError, match="causal=True needs as many queries as keys"):
        helpers.attention(q, k, v, causal=True)  # a cached kind with a bad option still gets its error


def test_library_module_matches_the_notebook():
    spec = importlib.util.spec_from_file_location("export_tool", ROOT / "tools" / "export.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    problems = [p for p in tool.problems(ROOT) if "attention" in p]
    assert not problems, "\n".join(problems)


def test_exported_names():
    assert helpers.attention is A.attention and "attention" in helpers.__all__
    assert helpers.kernels.attention_checks.HEAD_DIMS == (16, 32, 64, 128)


# --------------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------------

GOOD = make((2,), 8, 9, 16)


def _bad(**kw):
    args = dict(zip("qkv", GOOD))
    args.update(kw)
    return args


BAD = {
    "q is a list": (_bad(q=[[1.0] * 16]), TypeError, r"q must be a torch.Tensor.*torch.tensor"),
    "v is None": (_bad(v=None), TypeError, r"v must be a torch.Tensor"),
    "integer q": (_bad(q=GOOD[0].long()), TypeError, r"q has dtype torch.int64.*float16, bfloat16 or float32"),
    "bool k": (_bad(k=GOOD[1].bool()), TypeError, r"k has dtype torch.bool"),
    "float64": (
        _bad(q=GOOD[0].double(), k=GOOD[1].double(), v=GOOD[2].double()),
        TypeError,
        r"q is float64.*q.float\(\)",
    ),
    "1-d q": (_bad(q=GOOD[0][0, 0]), ValueError, r"at least 2 dimensions.*unsqueeze"),
    "mixed devices": (_bad(k=torch.empty(2, 9, 16, device="meta")), ValueError, r"one device.*\.to\(q.device\)"),
    "mixed dtypes": (
        _bad(k=GOOD[1].half()),
        TypeError,
        r"one dtype.*torch.float32, torch.float16 and torch.float32.*k.to\(q.dtype\)",
    ),
    "head dims differ": (_bad(k=GOOD[1][..., :8]), ValueError, r"same head dim.*16, 8 and 16"),
    "v's head dim differs": (_bad(v=torch.cat([GOOD[2], GOOD[2]], -1)), ValueError, r"same head dim"),
    "unsupported D=48": (
        _bad(
            q=torch.zeros(2, 8, 48, device=DEVICE),
            k=torch.zeros(2, 9, 48, device=DEVICE),
            v=torch.zeros(2, 9, 48, device=DEVICE),
        ),
        ValueError,
        r"head dim 48 is not supported.*\(16, 32, 64, 128\).*pad q, k and v with zeros up to 64",
    ),
    "unsupported D=256": (
        _bad(
            q=torch.zeros(1, 4, 256, device=DEVICE),
            k=torch.zeros(1, 4, 256, device=DEVICE),
            v=torch.zeros(1, 4, 256, device=DEVICE),
        ),
        ValueError,
        r"head dim 256 is not supported",
    ),
    "k and v key counts": (_bad(v=GOOD[2][:, :5]), ValueError, r"same number of keys.*9 and 5"),
    "leading dims differ": (
        _bad(k=GOOD[1][:1], v=GOOD[2][:1]),
        ValueError,
        r"same leading dimensions.*\(2,\), \(1,\) and \(1,\).*expand",
    ),
    "causal not a bool": ({**_bad(), "causal": 1}, TypeError, r"causal must be True or False"),
    "causal with Sq != Sk": (
        {**_bad(), "causal": True},
        ValueError,
        r"causal=True needs as many queries as keys.*8.*9",
    ),
    "scale is nan": ({**_bad(), "scale": float("nan")}, ValueError, r"scale must be a finite number"),
    "scale is inf": ({**_bad(), "scale": float("inf")}, ValueError, r"scale must be a finite number"),
    "scale is a string": ({**_bad(), "scale": "0.1"}, ValueError, r"scale must be a finite number"),
    "scale is a bool": ({**_bad(), "scale": True}, ValueError, r"scale must be a finite number"),
    "return_lse not a bool": ({**_bad(), "return_lse": "yes"}, TypeError, r"return_lse must be True or False"),
    "sparse q": (_bad(q=GOOD[0].cpu().to_sparse()), TypeError, r"to_dense"),
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_bad_input_gets_a_clear_error(case):
    kwargs, exc, pattern = BAD[case]
    kwargs = dict(kwargs)
    q, k, v = kwargs.pop("q"), kwargs.pop("k"), kwargs.pop("v")
    with pytest.raises(exc, match=pattern):
        helpers.attention(q, k, v, **kwargs)
    with pytest.raises(exc, match=pattern):  # the same error the second time (nothing cached for it)
        helpers.attention(q, k, v, **kwargs)


def test_wrong_device(wrong_device_tensor):
    meta = torch.empty(2, 8, 16, device="meta")
    with pytest.raises(ValueError, match=r"on device 'meta'.*kernels run on"):
        helpers.attention(meta, meta, meta)
    if helpers.ON_GPU:
        q, k, v = GOOD
        with pytest.raises(ValueError, match=r"one device"):
            helpers.attention(q, k.cpu(), v)


# --------------------------------------------------------------------------------------------
# The kernel compiles for an H100 (sm_90) without a GPU, pipelined and without register spills
# --------------------------------------------------------------------------------------------

_COMPILE = r"""
import json, os, re, subprocess, sys
os.environ.pop("TRITON_INTERPRET", None)
import triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
src = open(sys.argv[1]).read()
start, end = src.index("@triton.jit\ndef attention_block_update"), src.index("from helpers.kernels.attention_checks")
path = os.path.join(sys.argv[2], "attention_kernel_only.py")
open(path, "w").write("import triton\nimport triton.language as tl\n\n" + src[start:end])
sys.path.insert(0, sys.argv[2])
import attention_kernel_only as K
try:  # the ptxas this Triton runs for sm_90 (3.6-3.8: ptxas; 3.9: ptxas-blackwell, the newer one)
    from triton.backends.nvidia.compiler import get_ptxas
    ptxas = get_ptxas(90).path
except Exception:  # a Triton that moved it: the newer of the two it ships
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas-blackwell")
names = ["stride_qz", "stride_qh", "stride_qm", "stride_qd", "stride_kz", "stride_kh", "stride_kn", "stride_kd",
         "stride_vz", "stride_vh", "stride_vn", "stride_vd", "seq_q", "seq_k", "n_heads", "heads_per_group"]
out = []
tma_names = [n for n in names if not n.endswith("d")]
for dt, d, causal, cfg, *more in json.loads(sys.argv[3]):
    grouped = more[0] if more else causal  # the 1-D grid (default: causal)
    masked = more[1] if len(more) > 1 else True  # the descriptor kernel's masked loop compiled in
    bm, bn, warps, stages = cfg[:4]
    ptr = {"float16": "*fp16", "bfloat16": "*bf16", "float32": "*fp32"}[dt]
    dot = {"float16": tl.float16, "bfloat16": tl.bfloat16, "float32": tl.float32}[dt]
    tma = len(cfg) == 5  # a TmaConfig: attention_fwd_tma_kernel
    sig = {"out_ptr": ptr, "lse_ptr": "*fp32", "q_ptr": ptr, "k_ptr": ptr, "v_ptr": ptr,
           **{n: "i32" for n in (tma_names if tma else names)}, "qk_scale": "fp32"}
    if tma:
        consts = dict(HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, GROUPED=grouped, WRITE_LSE=True, DOT=dot,
                      NEG_SCALE=False, WARP_SPECIALIZE=cfg[4], MASKED=masked)
        attrs = {(i,): [["tt.divisibility", 16]] for i in range(16)}
    else:
        consts = dict(HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, GROUPED=grouped, WRITE_LSE=True, DOT=dot,
                      PRECISION="ieee" if dt == "float32" else "tf32", stride_qd=1, stride_kd=1, stride_vd=1)
        # what a launch on 16-byte aligned, contiguous inputs tells the compiler
        attrs = {(i,): [["tt.divisibility", 16]] for i in (0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18)}
    sig.update({k: "constexpr" for k in consts})
    fn = K.attention_fwd_tma_kernel if tma else K.attention_fwd_kernel
    k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs),
                       target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps, num_stages=stages))
    spills = None
    if os.path.exists(ptxas):
        ptx = os.path.join(sys.argv[2], "k.ptx")
        open(ptx, "w").write(k.asm["ptx"])
        r = subprocess.run([ptxas, "-v", "--gpu-name", "sm_90a", ptx, "-o", ptx + ".cubin"], capture_output=True, text=True)
        m = re.search(r"(\d+) bytes spill stores", r.stderr)
        spills = int(m.group(1)) if m else None
    ttgir = k.asm["ttgir"]
    out.append({"dt": dt, "d": d, "causal": causal, "tma": tma, "masked": tma and masked, "shared": k.metadata.shared,
                "spills": spills,
                "async": ttgir.count("async_copy_global_to_local") + ttgir.count("async_tma_copy_global_to_local")})
print(json.dumps(out))
"""


def _compile_for_sm90(cases, tmp_path):
    """_COMPILE's report on each case, compiled for sm_90a by the installed Triton in a fresh process
    (no interpreter); skips where this Triton has no CUDA target."""
    return compile_report(_COMPILE, ROOT / "helpers" / "kernels" / "attention.py", tmp_path, cases)


#: What lesson 07 says the descriptor kernel's masked loop (causal attention, or keys that do not fill their
#: last block) may spill before Triton 3.9: "a few dozen bytes a thread" (3.6-3.8: 24 and 56 bytes at D = 128).
MASKED_SPILL_BYTES = 64


def _spills_allowed(case) -> int:
    """The spill bytes lesson 07 allows a compiled case: none, but a few dozen in the descriptor kernel's
    masked loop before Triton 3.9."""
    return MASKED_SPILL_BYTES if case["masked"] and _parse_version(triton.__version__) < (3, 9) else 0


def test_kernel_compiles_for_an_h100_without_spills(tmp_path):
    """The configurations attention_config and tma_config give a GPU, compiled for sm_90 by this
    Triton (no GPU needed): the K/V loads are pipelined (asynchronous copies, or TMA copies in the
    descriptor kernel), shared memory fits an H100's 227 KiB, and ptxas reports no register spills;
    but for the descriptor kernel's masked loop, which Triton 3.6 to 3.8 compile with a few dozen
    bytes of spills a thread (lesson 07 says so) and 3.9 without."""
    if helpers.ON_GPU:
        pytest.skip("on a GPU every other test compiles the kernel for real")
    pytest.importorskip("triton.backends.nvidia")
    cases = []
    for dt, d, causal in [
        (torch.float16, 64, False),
        (torch.bfloat16, 128, True),
        (torch.float16, 16, True),
        (torch.float32, 128, False),
        (torch.float32, 32, True),
    ]:
        cfg = A.attention_config(dt, d, interpreter=False)
        cases.append([str(dt).replace("torch.", ""), d, causal, list(cfg)])
    for dt in (torch.float16, torch.bfloat16):
        for d in (64, 128):
            for causal in (False, True):
                tma = A.tma_config(dt, d, causal)
                if tma is not None:
                    name = str(dt).replace("torch.", "")
                    cases.append([name, d, causal, list(tma)])  # the masked loop compiled in
                    if causal:  # long causal sequences: the 3-D grid
                        cases.append([name, d, causal, list(tma), False])
                    else:  # keys that fill their last block: no masked loop
                        cases.append([name, d, causal, list(tma), False, False])
    assert any(len(c[3]) == 5 for c in cases)
    got = _compile_for_sm90(cases, tmp_path)
    assert any(c["masked"] for c in got) and any(c["tma"] and not c["masked"] for c in got)
    for c in got:
        assert c["shared"] <= 227 * 1024, c
        assert c["async"] > 0, f"the K/V loads are not pipelined: {c}"
        assert c["spills"] is None or c["spills"] <= _spills_allowed(c), f"register spills: {c}"


def test_the_pointer_kernel_spills_at_the_descriptor_kernels_tile(tmp_path):
    """Why the descriptor kernel exists (lesson 07): at D = 128 and the tile tma_config gives it (4 warps),
    the pointer kernel, whose K/V loads take a tile of addresses in registers, spills hundreds of bytes a
    thread when compiled for sm_90a, while the descriptor kernel at the same tile spills none without its
    masked loop and, with it, none from Triton 3.9 on and at most a few dozen bytes before."""
    if helpers.ON_GPU:
        pytest.skip("compiles for sm_90a without a GPU")
    pytest.importorskip("triton.backends.nvidia")
    tile = list(A.tma_config(torch.float16, 128, False))
    cases = [["float16", 128, causal, cfg] for causal in (False, True) for cfg in (tile[:4], tile)]
    cases.append(["float16", 128, False, tile, False, False])
    got = _compile_for_sm90(cases, tmp_path)
    if any(c["spills"] is None for c in got):
        pytest.skip("no ptxas to count spills with")
    pointer, tma = [c for c in got if not c["tma"]], [c for c in got if c["tma"]]
    assert len(pointer) == 2 and len(tma) == 3
    assert all(c["spills"] >= 200 for c in pointer), pointer  # hundreds of bytes a thread
    assert all(c["spills"] <= _spills_allowed(c) for c in tma), tma
