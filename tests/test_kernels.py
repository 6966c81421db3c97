"""Every Triton softmax kernel of the course against torch.softmax (computed in float64).

The contract (helpers/kernels.py): a floating tensor of any shape with at least one dimension ->
softmax over the last dimension, same shape/dtype/device, input never modified; any strides;
empty tensors come back empty; special values as torch.softmax has them (NaN rows for +inf or
NaN, NaN for an all -inf row).

Sizes are small: under Triton's interpreter every program is executed in Python (a few ms each).
Inputs are generated on the CPU from a seed and moved to ``helpers.DEVICE``, so the same numbers
are tested on a GPU.
"""

from __future__ import annotations

import functools

import pytest
import torch

import helpers
import helpers.kernels as K
from helpers import DEVICE, MAX_FUSED_COLS, TOLERANCES

INF, NAN = float("inf"), float("nan")

#: The public kernels, each with its default arguments.
KERNELS = {
    "fused": helpers.softmax_fused,
    "three_pass": helpers.softmax_three_pass,
    "online": helpers.softmax_online,
    "persistent": helpers.softmax_persistent,
    "softmax": helpers.softmax,
}
# Kernels added as the course grows (lesson 05's tiled fast path, lesson 06's split rows) are
# tested as soon as helpers.kernels defines them.
for _extra in ("softmax_tiled", "softmax_split", "softmax_split_coop"):
    if hasattr(K, _extra):
        KERNELS[_extra.replace("softmax_", "")] = getattr(K, _extra)

#: The kernels plus the variants that exercise their loops on small rows: a looped kernel with a
#: block smaller than the row, a persistent grid smaller than the number of rows.
VARIANTS = {
    **KERNELS,
    "three_pass[bs=4]": functools.partial(helpers.softmax_three_pass, block_size=4),
    "online[bs=4]": functools.partial(helpers.softmax_online, block_size=4),
    "persistent[P=2]": functools.partial(helpers.softmax_persistent, num_programs=2),
}
if hasattr(K, "softmax_tiled"):
    VARIANTS["tiled[bm=2]"] = functools.partial(K.softmax_tiled, block_m=2)
if hasattr(K, "softmax_split"):
    VARIANTS["split[slices=2,bs=2]"] = functools.partial(K.softmax_split, slices=2, block_size=2)
if hasattr(K, "softmax_split_coop"):  # (under the interpreter it falls back to softmax_split)
    VARIANTS["split_coop[slice=4]"] = functools.partial(K.softmax_split_coop, slice_cols=4)

LOOPED = {"three_pass": helpers.softmax_three_pass, "online": helpers.softmax_online}
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


def randn(*shape, dtype=torch.float32, seed=0, scale=1.0):
    """Seeded normal values made on the CPU in float64, then cast and moved to helpers.DEVICE."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(DEVICE, dtype)


def expected(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.detach().to("cpu", torch.float64), dim=-1)


def assert_softmax(out, x):
    """``out`` is softmax(x): a tensor of x's shape, dtype and device, close to the float64 reference
    with the dtype's tolerance, NaN exactly where the reference has NaN."""
    assert isinstance(out, torch.Tensor), f"expected a tensor, got {type(out).__name__}"
    assert out.shape == x.shape, f"shape {tuple(out.shape)} != input shape {tuple(x.shape)}"
    assert out.dtype == x.dtype, f"dtype {out.dtype} != input dtype {x.dtype}"
    assert out.device == x.device, f"device {out.device} != input device {x.device}"
    torch.testing.assert_close(
        out.detach().to("cpu", torch.float64), expected(x), equal_nan=True, **TOLERANCES[x.dtype]
    )


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bits of a tensor (NaN payloads included), for bit-for-bit comparisons."""
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.detach().contiguous().view(ints).cpu()


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(bits(a), bits(b))


# ------------------------------------------------------------------------------------------
# Shapes and dtypes
# ------------------------------------------------------------------------------------------

SHAPES = [(1, 4), (4, 1), (1, 1), (3, 7), (128, 256), (5, 1000), (2, 3, 33), (17,)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", KERNELS)
def test_shapes(name, shape):
    x = randn(*shape, seed=len(shape) * 1000 + shape[-1])
    assert_softmax(KERNELS[name](x), x)


@pytest.mark.parametrize(
    "shape, block_size",
    [((3, 100), 16), ((2, 9), 1), ((2, 32), 32), ((2, 33), 64), ((2, 3, 40), 8)],
    ids=["100cols-bs16", "9cols-bs1", "bs-equals-row", "bs-longer-than-row", "batched-bs8"],
)
@pytest.mark.parametrize("name", LOOPED)
def test_looped_rows_longer_than_one_block(name, shape, block_size):
    x = randn(*shape, seed=7, scale=3.0)
    assert_softmax(LOOPED[name](x, block_size=block_size), x)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("name", VARIANTS)
def test_dtypes(name, dtype):
    x = randn(3, 33, dtype=dtype, seed=3, scale=4.0)
    out = VARIANTS[name](x)
    assert_softmax(out, x)
    # computed in fp32 (fp64 for fp64) inside: every row still sums to 1 at the dtype's precision
    sums = out.to(torch.float64).sum(-1).cpu()
    torch.testing.assert_close(sums, torch.ones_like(sums), atol=TOLERANCES[dtype]["rtol"] * 2, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("name", KERNELS)
def test_half_inputs_are_computed_in_fp32(name, dtype):
    """Large half-precision inputs: exp in fp16 would overflow (exp(12) > 65504) and the sum of many
    fp16 terms would lose bits; computed in fp32 the result is within one rounding of the truth."""
    x = randn(4, 300, dtype=dtype, seed=11, scale=8.0)
    assert_softmax(KERNELS[name](x), x)


# ------------------------------------------------------------------------------------------
# Strides
# ------------------------------------------------------------------------------------------


def _strided(kind: str, dtype=torch.float32):
    """(x, base): a strided view x of a base tensor whose other elements are NaN (read one of
    them and the row turns NaN)."""
    g = torch.Generator().manual_seed(sum(map(ord, kind)))

    def vals(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    if kind == "transposed":  # row stride 1, column stride 7
        base = vals(9, 7).to(DEVICE, dtype)
        return base.t(), base
    if kind == "column_slice":  # x[:, ::2]: column stride 2
        base = torch.full((4, 20), NAN, dtype=torch.float64)
        base[:, ::2] = vals(4, 10)
        base = base.to(DEVICE, dtype)
        return base[:, ::2], base
    if kind == "column_slice_offset":  # x[:, 1::3]: the row does not start at the base's row
        base = torch.full((5, 24), NAN, dtype=torch.float64)
        base[:, 1::3] = vals(5, 8)
        base = base.to(DEVICE, dtype)
        return base[:, 1::3], base
    if kind == "row_slice":  # x[::2]: row stride twice the row length
        base = torch.full((8, 11), NAN, dtype=torch.float64)
        base[::2] = vals(4, 11)
        base = base.to(DEVICE, dtype)
        return base[::2], base
    if kind == "expanded":  # row stride 0: every row is the same memory
        base = vals(1, 13).to(DEVICE, dtype)
        return base.expand(4, 13), base
    if kind == "batched_permuted":  # leading dims that cannot be merged into one stride
        base = vals(2, 3, 10).to(DEVICE, dtype)
        return base.permute(1, 0, 2), base
    if kind == "batched_column_stride":  # x[:, :, ::3]: mergeable leading dims, column stride 3
        base = torch.full((2, 3, 27), NAN, dtype=torch.float64)
        base[:, :, ::3] = vals(2, 3, 9)
        base = base.to(DEVICE, dtype)
        return base[:, :, ::3], base
    if kind == "batched_unmergeable_column_stride":  # x[:, ::2, ::3]: neither merges nor is unit
        base = torch.full((2, 5, 27), NAN, dtype=torch.float64)
        base[:, ::2, ::3] = vals(2, 3, 9)
        base = base.to(DEVICE, dtype)
        return base[:, ::2, ::3], base
    if kind == "batched_transposed":  # last dim strided inside a batch
        base = vals(2, 6, 5).to(DEVICE, dtype)
        return base.transpose(1, 2), base
    raise AssertionError(kind)


STRIDED = [
    "transposed",
    "column_slice",
    "column_slice_offset",
    "row_slice",
    "expanded",
    "batched_permuted",
    "batched_column_stride",
    "batched_unmergeable_column_stride",
    "batched_transposed",
]


@pytest.mark.parametrize("kind", STRIDED)
@pytest.mark.parametrize("name", VARIANTS)
def test_strided_inputs(name, kind):
    x, base = _strided(kind)
    assert not x.is_contiguous()
    before = base.clone()
    out = VARIANTS[name](x)
    assert_softmax(out, x)
    assert same_bits(base, before), "the kernel wrote into its input's storage"


@pytest.mark.parametrize("name", KERNELS)
def test_strided_half_input(name):
    x, _ = _strided("column_slice", dtype=torch.float16)
    assert_softmax(KERNELS[name](x), x)


# ------------------------------------------------------------------------------------------
# Empty tensors
# ------------------------------------------------------------------------------------------

EMPTY = [(0, 5), (5, 0), (0, 0), (2, 0, 3), (0, 2, 3)]


def _assert_empty_result(out, x):
    assert out.shape == x.shape and out.dtype == x.dtype and out.device == x.device
    assert out.numel() == 0
    assert torch.equal(out.cpu(), torch.softmax(x.cpu(), dim=-1))


@pytest.mark.parametrize("shape", EMPTY, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", VARIANTS)
def test_empty_tensors(name, shape):
    x = torch.empty(shape, device=DEVICE)
    _assert_empty_result(VARIANTS[name](x), x)


@pytest.mark.parametrize("name", KERNELS)
def test_empty_tensors_with_zero_length_rows_beyond_2d(name):
    """Shapes (0,) and (2, 3, 0): no rows of length 0 can be counted with view(-1, 0)."""
    for shape in [(0,), (2, 3, 0)]:
        x = torch.empty(shape, device=DEVICE)
        _assert_empty_result(KERNELS[name](x), x)


# ------------------------------------------------------------------------------------------
# Special values
# ------------------------------------------------------------------------------------------

#: 8 columns, so a block of 4 puts the special values in different blocks.
SPECIAL_ROWS = [
    [1.0, INF, 2.0, 3.0, 0.0, 0.0, 0.0, 0.0],  # +inf: torch gives a NaN row
    [1.0, -INF, 2.0, -INF, 0.0, 5.0, -INF, 1.0],  # some -inf: exact zeros there
    [-INF] * 8,  # all -inf: NaN row (as torch)
    [1.0, 2.0, NAN, 3.0, 4.0, 5.0, 6.0, 7.0],  # NaN: NaN row
    [INF, INF, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # two +inf: NaN row
    [-INF, -INF, -INF, -INF, 1.0, 2.0, 3.0, 4.0],  # first block all -inf
    [1.0, 2.0, 3.0, 4.0, -INF, -INF, -INF, -INF],  # last block all -inf
    [-INF, -INF, -INF, -INF, NAN, -INF, -INF, -INF],  # only -inf and NaN: NaN row
    [-INF, -INF, -INF, -INF, -INF, -INF, -INF, 5.0],  # one finite value: one-hot
    [-INF, -INF, -INF, INF, 1.0, 2.0, 3.0, 4.0],  # -inf then +inf: NaN row
    [3e38, -3e38, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0],  # huge finite (inf once cast to half)
    [NAN, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0],  # NaN in the first block beside finite values
    [NAN, -INF, -INF, -INF, 1.0, 2.0, 3.0, 4.0],  # NaN in a block before any finite value
    [-80.0, -70.0, -60.0, -50.0, -40.0, -30.0, -20.0, -10.0],  # all far below zero
]


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64], ids=lambda d: str(d).replace("torch.", "")
)
@pytest.mark.parametrize("name", VARIANTS)
def test_special_values(name, dtype):
    x = torch.tensor(SPECIAL_ROWS, dtype=torch.float64).to(DEVICE, dtype)
    assert_softmax(VARIANTS[name](x), x)


@pytest.mark.parametrize(
    "row, block_size",
    [
        ([NAN, 1.0], 1),
        ([NAN, -INF, 1.0, 2.0], 2),
        ([NAN, NAN, 1.0, 2.0], 2),
        ([-INF, NAN, -INF, -INF, 0.5, 1.5, 2.5, 3.5], 4),
    ],
    ids=["nan-alone-in-first-block", "nan-beside-neg-inf", "nan-block", "nan-in-block-of-neg-inf"],
)
@pytest.mark.parametrize("name", LOOPED)
def test_nan_in_a_block_seen_before_any_finite_value(name, row, block_size):
    """A NaN anywhere makes torch's whole row NaN. Max reductions ignore NaN (tl.max/tl.maximum
    without propagate_nan, on the GPU and in the interpreter alike), so a NaN met while the running
    max is still -inf must not be dropped from the sum."""
    x = torch.tensor([row], dtype=torch.float32, device=DEVICE)
    out = LOOPED[name](x, block_size=block_size)
    assert torch.isnan(out).all(), f"expected a NaN row (as torch.softmax), got {out.tolist()}"


def _late_max_rows(dtype):
    """Rows of 100 columns (blocks of 16) whose maximum shows up late."""
    g = torch.Generator().manual_seed(5)
    n, bs = 100, 16
    rows = torch.randn(6, n, generator=g, dtype=torch.float64)
    rows[0] += 3.0 * (torch.arange(n) // bs)  # the max grows in every block
    big = 60000.0 if dtype == torch.float16 else 1000.0
    rows[1, 90] = big  # one far larger value in a late block
    rows[2, 99] = 20.0  # the max in the last, partial block
    rows[3] -= 3.0 * (torch.arange(n) // bs)  # the max in the first block (no rescaling)
    rows[4, :64] = -INF  # the first four blocks all -inf
    rows[5] = torch.linspace(-30.0, 12.0, n, dtype=torch.float64)  # smooth climb over ~40 nats
    return rows.to(DEVICE, dtype), bs


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16], ids=["float32", "float64", "float16"])
@pytest.mark.parametrize("name", LOOPED)
def test_late_block_with_larger_max(name, dtype):
    """The online kernel rescales its running sum when a later block raises the max. Checked with
    the usual tolerance, with row sums, and in the log domain (relative error of tiny outputs,
    which an absolute tolerance would let pass)."""
    x, bs = _late_max_rows(dtype)
    out = LOOPED[name](x, block_size=bs)
    assert_softmax(out, x)
    got = out.to("cpu", torch.float64)
    sums = got.sum(-1)
    torch.testing.assert_close(sums, torch.ones_like(sums), atol=2 * TOLERANCES[dtype]["rtol"], rtol=0)
    if dtype != torch.float16:
        ref = expected(x)
        keep = ref > 1e-30
        rel_log = {torch.float32: 1e-4, torch.float64: 1e-9}[dtype]
        torch.testing.assert_close(got[keep].log(), ref[keep].log(), atol=rel_log, rtol=0)


# ------------------------------------------------------------------------------------------
# Input untouched, output a fresh tensor
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("name", VARIANTS)
def test_input_is_not_modified(name, dtype):
    base = randn(4, 24, dtype=dtype, seed=9)
    base[0, 3] = -INF
    base[1, 5] = NAN
    base[2] = -INF
    x = base[:, ::2]  # a view: the kernel must not write into the base either
    before = base.clone()
    out = VARIANTS[name](x)
    assert same_bits(base, before), "the input (or its base tensor) was modified"
    assert out.untyped_storage().data_ptr() != base.untyped_storage().data_ptr()
    assert_softmax(out, x)


@pytest.mark.parametrize("name", VARIANTS)
def test_output_is_a_new_tensor_of_same_shape_dtype_device(name):
    x = randn(2, 3, 5, seed=2)
    out = VARIANTS[name](x)
    assert out is not x
    assert out.data_ptr() != x.data_ptr()
    assert (out.shape, out.dtype, out.device) == (x.shape, x.dtype, x.device)
    assert not out.requires_grad
    out.zero_()  # writing the output leaves the input alone
    assert torch.isfinite(x).all() and (x != 0).all()


# ------------------------------------------------------------------------------------------
# The persistent grid
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_programs", [1, 2, 3, 5, 7, 64], ids=lambda p: f"P={p}")
def test_persistent_num_programs(num_programs):
    """Fewer programs than rows (the grid-stride loop takes several rows each, unevenly), exactly
    as many, and more than rows (the grid is capped at the number of rows)."""
    x = randn(5, 33, seed=num_programs)
    assert_softmax(helpers.softmax_persistent(x, num_programs=num_programs), x)


@pytest.mark.parametrize(
    "kwargs",
    [dict(num_warps=1), dict(num_warps=2, num_stages=1), dict(num_stages=3)],
    ids=["warps1", "warps2-stages1", "stages3"],
)
def test_persistent_launch_options(kwargs):
    x = randn(6, 40, seed=4)
    assert_softmax(helpers.softmax_persistent(x, num_programs=2, **kwargs), x)


def test_persistent_single_row_more_programs():
    x = randn(1, 50, seed=1)
    assert_softmax(helpers.softmax_persistent(x, num_programs=3), x)


def test_interpreter_programs_is_odd_and_used_by_default():
    """Under the interpreter the default grid is INTERPRETER_PROGRAMS (odd, so rows split unevenly)."""
    assert helpers.INTERPRETER_PROGRAMS >= 2 and helpers.INTERPRETER_PROGRAMS % 2 == 1
    x = randn(helpers.INTERPRETER_PROGRAMS * 2 + 1, 9, seed=12)
    assert_softmax(helpers.softmax_persistent(x), x)


# ------------------------------------------------------------------------------------------
# Rows longer than the single-block kernels accept
# ------------------------------------------------------------------------------------------


class _NoLaunch:
    """Stands in for a kernel that must not be launched."""

    def __getitem__(self, grid):
        raise AssertionError("the kernel was launched; the length check must come first")

    def warmup(self, *a, **k):
        raise AssertionError("the kernel was compiled; the length check must come first")


@pytest.mark.parametrize(
    "name, kernel_attr",
    [("fused", "softmax_fused_kernel"), ("persistent", "softmax_persistent_kernel")],
)
def test_single_block_kernels_reject_long_rows_before_launch(name, kernel_attr, monkeypatch):
    monkeypatch.setattr(K, kernel_attr, _NoLaunch())
    x = torch.zeros(1, MAX_FUSED_COLS + 1, device=DEVICE)
    with pytest.raises(ValueError) as info:
        KERNELS[name](x)
    msg = str(info.value)
    assert "softmax_online" in msg
    assert str(MAX_FUSED_COLS) in msg and str(MAX_FUSED_COLS + 1) in msg


@pytest.mark.parametrize("name", ["fused", "persistent"])
def test_single_block_kernels_accept_rows_at_the_limit_edge(name):
    """A row of exactly MAX_FUSED_COLS passes the check: the plan is made, with one launch of the
    whole row in one block (the launch itself would be too slow for the interpreter)."""
    from helpers.rowwise import Rows

    x = torch.zeros(2, MAX_FUSED_COLS, device=DEVICE)
    plan = K.persistent_plan(Rows.of(x), 2) if name == "persistent" else K.fused_plan(Rows.of(x))
    (launch,) = plan.launches
    assert launch.constexprs["BLOCK_SIZE"] == MAX_FUSED_COLS


@pytest.mark.parametrize("name", LOOPED)
def test_looped_kernels_take_rows_longer_than_max_fused_cols(name):
    x = randn(1, MAX_FUSED_COLS + 1, seed=21, scale=2.0)
    assert_softmax(LOOPED[name](x), x)


@pytest.mark.parametrize(
    "n_cols", [MAX_FUSED_COLS + 1, MAX_FUSED_COLS // 2 + 1], ids=["past-max-fused", "half-max-fused"]
)
def test_softmax_takes_long_rows(n_cols):
    """helpers.softmax serves any row length, whichever kernel it picks for long rows."""
    x = randn(2, n_cols, seed=22, scale=2.0)
    assert_softmax(helpers.softmax(x), x)


@pytest.mark.parametrize("special", [NAN, INF, -INF], ids=["nan", "inf", "-inf"])
def test_softmax_long_rows_with_special_values(special):
    """Long rows take a different path in helpers.softmax; special values still behave as in torch."""
    x = randn(2, MAX_FUSED_COLS // 2 + 1, seed=24)
    x[0, 5] = special
    x[1, -3] = special
    assert_softmax(helpers.softmax(x), x)


def test_num_warps_for_grows_with_the_block():
    assert helpers.num_warps_for(16) == 4
    assert helpers.num_warps_for(2048) == 8
    assert helpers.num_warps_for(8192) == 16
    warps = [helpers.num_warps_for(2**k) for k in range(0, 17)]
    assert warps == sorted(warps) and set(warps) <= {1, 2, 4, 8, 16, 32}


def test_persistent_plan_drops_its_staging_when_a_row_does_not_fit_in_shared_memory(monkeypatch):
    """float32 rows of 65536 columns with 2 stages ask for 256 KiB of shared memory, more than an H100 or H200
    gives a program: the plan then loads each row when it is reached (NUM_STAGES = 1) rather than raising
    Triton's OutOfResources; with 1 stage asked for, the error stands. The compile is stood in for (CPU)."""
    from triton.runtime.errors import OutOfResources

    import helpers.kernels.persistent as P
    from helpers.rowwise import Rows

    compiled = []

    class Kernel:
        def warmup(self, *args, **kwargs):
            compiled.append(kwargs["NUM_STAGES"])
            return kwargs["NUM_STAGES"]

    def occupancy(stages, num_warps):
        if stages > 1:
            raise OutOfResources(262208, 232448, "shared memory")
        return {"programs": 7}

    monkeypatch.setattr(P, "ON_GPU", True)
    monkeypatch.setattr(P, "softmax_persistent_kernel", Kernel())
    monkeypatch.setattr(P, "compiled_occupancy", occupancy)
    x = torch.zeros(20, MAX_FUSED_COLS)
    plan = P.persistent_plan(Rows.of(x))
    (launch,) = plan.launches
    assert compiled == [2, 1] and launch.constexprs["NUM_STAGES"] == 1 and launch.grid == (7,)

    def no_room(stages, num_warps):
        raise OutOfResources(262208, 232448, "shared memory")

    monkeypatch.setattr(P, "compiled_occupancy", no_room)
    with pytest.raises(OutOfResources):
        P.persistent_plan(Rows.of(x), num_stages=1)
