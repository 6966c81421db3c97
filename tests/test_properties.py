"""Property-based tests: every public softmax against torch.softmax on float64, on random inputs.

Random shapes (one row, one column, odd lengths, batch dimensions), random layouts (transposed,
column and row strides, unmergeable batch dimensions, stride-0 rows), dtypes fp32/fp16/bf16,
magnitudes from 1e-3 to 1e4, and rows holding +inf, -inf, NaN or nothing but -inf.

The reference is ``torch.softmax`` of the float64 upcast of the very tensor the function got
(already cast, so a half-precision input that overflowed to inf is compared as inf), with the
dtype's tolerance from ``helpers.TOLERANCES`` and NaN where the reference has NaN.

Examples per test come from the Hypothesis profile (tests/conftest.py; HYPOTHESIS_PROFILE=ci by
default, derandomized). Sizes are small under the interpreter, larger on a GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from hypothesis import given
from hypothesis import strategies as st

import helpers
import helpers.kernels as K
from helpers import DEVICE, TOLERANCES

INF, NAN = float("inf"), float("nan")

if helpers.ON_GPU:
    MAX_ROWS, MAX_COLS, MAX_BLOCKS = 64, 5000, 64  # total rows across batch dims, columns, blocks per row
else:
    MAX_ROWS, MAX_COLS, MAX_BLOCKS = 8, 48, 6

HALF_AND_FLOAT = [torch.float32, torch.float16, torch.bfloat16]
SCALES = [1e-3, 1e-2, 0.1, 1.0, 3.0, 10.0, 100.0, 1e3, 1e4]
LAYOUTS = ["contiguous", "transposed", "column_stride", "column_offset", "row_stride", "batch_permuted", "expanded"]
EDGE_COLS = [1, 2, 3, 15, 16, 17, 31, 32, 33]
SPECIAL_VALUES = {"inf": INF, "-inf": -INF, "nan": NAN}


@dataclass(frozen=True)
class Case:
    """One random input, described compactly (Hypothesis prints this when a test fails)."""

    dtype: torch.dtype
    batch: tuple
    rows: int
    cols: int
    layout: str
    scale: float
    seed: int
    specials: tuple = ()  # (kind, row, column) triples, each taken modulo the row/column count
    neg_inf_row: int | None = None  # a row made all -inf (modulo the row count)
    neg_inf_prefix: int = 0  # the first columns of every row made -inf (a looped kernel's first blocks)

    @property
    def shape(self):
        return (*self.batch, self.rows, self.cols)


@st.composite
def cases(draw, dtypes=HALF_AND_FLOAT, scales=SCALES, specials=tuple(SPECIAL_VALUES), layouts=LAYOUTS):
    dtype = draw(st.sampled_from(dtypes))
    batch = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    n_batch = math.prod(batch)
    rows = draw(st.integers(1, max(1, MAX_ROWS // n_batch)))
    cols = draw(st.one_of(st.sampled_from([c for c in EDGE_COLS if c <= MAX_COLS]), st.integers(1, MAX_COLS)))
    layout = draw(st.sampled_from([lay for lay in layouts if batch or lay != "batch_permuted"]))
    if layout == "expanded":
        rows = max(rows, 2)
    scale = draw(st.sampled_from(scales))
    seed = draw(st.integers(0, 2**32 - 1))
    chosen = ()
    neg_inf_row = None
    prefix = 0
    if specials:
        # columns near the start of a row are favoured: special values in the first blocks, before
        # the running max has seen a finite value, are where looped kernels go wrong
        col = st.integers(0, 3) | st.integers(0, 10**6)
        chosen = tuple(draw(st.lists(st.tuples(st.sampled_from(specials), st.integers(0, 10**6), col), max_size=4)))
        if "-inf" in specials:
            neg_inf_row = draw(st.none() | st.integers(0, 10**6))
            prefix = draw(st.just(0) | st.integers(0, cols))
    return Case(dtype, batch, rows, cols, layout, scale, seed, chosen, neg_inf_row, prefix)


def _values(case: Case) -> torch.Tensor:
    """The logical values of the input (on the CPU, already cast to the case's dtype)."""
    g = torch.Generator().manual_seed(case.seed)
    rows = 1 if case.layout == "expanded" else case.rows  # an expanded tensor repeats one row
    v = torch.randn(*case.batch, rows, case.cols, generator=g, dtype=torch.float64) * case.scale
    flat_rows = v.view(-1, case.cols)
    flat_rows[:, : case.neg_inf_prefix] = -INF
    if case.neg_inf_row is not None:
        flat_rows[case.neg_inf_row % flat_rows.shape[0]] = -INF
    for kind, row, col in case.specials:
        flat_rows[row % flat_rows.shape[0], col % case.cols] = SPECIAL_VALUES[kind]
    # Cast here: fp16 overflows to inf past 65504, and that inf is part of the input under test.
    return v.to(case.dtype)


def build(case: Case) -> torch.Tensor:
    """The input tensor on helpers.DEVICE, laid out as the case says. Memory between the strided
    elements holds NaN, so a kernel reading outside its row would turn the row NaN."""
    v = _values(case)
    B, R, C = case.batch, case.rows, case.cols

    def nan_base(shape):
        return torch.full(shape, NAN, dtype=case.dtype)

    if case.layout == "contiguous":
        return v.to(DEVICE)
    if case.layout == "transposed":
        return v.transpose(-1, -2).contiguous().to(DEVICE).transpose(-1, -2)
    if case.layout == "column_stride":
        base = nan_base((*B, R, 2 * C))
        base[..., ::2] = v
        return base.to(DEVICE)[..., ::2]
    if case.layout == "column_offset":
        base = nan_base((*B, R, 3 * C + 1))
        base[..., 1::3] = v
        return base.to(DEVICE)[..., 1::3]
    if case.layout == "row_stride":
        base = nan_base((*B, 2 * R, C))
        base[..., ::2, :] = v
        return base.to(DEVICE)[..., ::2, :]
    if case.layout == "batch_permuted":
        return v.movedim(-2, 0).contiguous().to(DEVICE).movedim(0, -2)
    if case.layout == "expanded":
        return v.to(DEVICE).expand(*B, R, C)
    raise AssertionError(case.layout)


def check(fn, case: Case, **kwargs):
    x = build(case)
    assert x.shape == case.shape
    before = x.clone()
    out = fn(x, **kwargs)
    assert out.shape == x.shape and out.dtype == x.dtype and out.device == x.device
    ref = torch.softmax(x.detach().to("cpu", torch.float64), dim=-1)
    torch.testing.assert_close(out.detach().to("cpu", torch.float64), ref, equal_nan=True, **TOLERANCES[x.dtype])
    torch.testing.assert_close(x, before, equal_nan=True, rtol=0, atol=0)  # input untouched


def block_sizes(cols: int):
    """Block sizes for the looped kernels: the default, and powers of two giving a few blocks."""
    return st.sampled_from(
        [None] + [b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256, 1024) if -(-cols // b) <= MAX_BLOCKS]
    )


# ------------------------------------------------------------------------------------------
# The PyTorch versions
# ------------------------------------------------------------------------------------------


@given(case=cases())
def test_stable_softmax(case):
    check(helpers.stable_softmax, case)


@given(case=cases(dtypes=[torch.float32, torch.float64], scales=[1e-3, 0.1, 1.0, 3.0, 10.0], specials=("-inf", "nan")))
def test_naive_softmax_where_it_cannot_overflow(case):
    """The naive version is meant to overflow for large inputs (and gives 0 beside +inf where torch
    gives NaN); for modest float32/float64 inputs it is a correct softmax."""
    check(helpers.naive_softmax, case)


@given(case=cases(specials=()), data=st.data())
def test_naive_softmax_rowwise(case, data):
    x = build(case).reshape(-1, case.cols)
    out = helpers.naive_softmax_rowwise(x)
    ref = torch.softmax(x.to("cpu", torch.float64), dim=-1)
    torch.testing.assert_close(out.to("cpu", torch.float64), ref, equal_nan=True, **TOLERANCES[x.dtype])


@given(case=cases())
def test_reference_softmax(case):
    x = build(case)
    ref = helpers.reference_softmax(x)
    assert ref.dtype == torch.float64 and ref.device.type == "cpu"
    torch.testing.assert_close(ref, torch.softmax(x.to("cpu", torch.float64), dim=-1), equal_nan=True, rtol=0, atol=0)


# ------------------------------------------------------------------------------------------
# The Triton kernels
# ------------------------------------------------------------------------------------------


@given(case=cases())
def test_softmax_fused(case):
    check(helpers.softmax_fused, case)


@given(case=cases(), data=st.data())
def test_softmax_three_pass(case, data):
    check(helpers.softmax_three_pass, case, block_size=data.draw(block_sizes(case.cols), label="block_size"))


@given(case=cases(), data=st.data())
def test_softmax_online(case, data):
    check(helpers.softmax_online, case, block_size=data.draw(block_sizes(case.cols), label="block_size"))


@given(case=cases(), data=st.data())
def test_softmax_persistent(case, data):
    num_programs = data.draw(st.sampled_from([None, 1, 2, 3, 4, 5, 8, 1000]), label="num_programs")
    check(helpers.softmax_persistent, case, num_programs=num_programs)


@given(case=cases())
def test_softmax(case):
    check(helpers.softmax, case)


if hasattr(K, "softmax_tiled"):

    @given(case=cases(), data=st.data())
    def test_softmax_tiled(case, data):
        block_m = data.draw(st.sampled_from([None, 1, 2, 4, 8]), label="block_m")
        check(K.softmax_tiled, case, block_m=block_m)


if hasattr(K, "softmax_split"):

    @given(case=cases(), data=st.data())
    def test_softmax_split(case, data):
        slices = data.draw(st.sampled_from([None, 1, 2, 3, 5]), label="slices")
        block_size = data.draw(block_sizes(case.cols), label="block_size")
        check(K.softmax_split, case, slices=slices, block_size=block_size)


if hasattr(K, "softmax_split_coop"):

    @given(case=cases(), data=st.data())
    def test_softmax_split_coop(case, data):
        slice_cols = data.draw(st.sampled_from([None, 4, 16, 64]), label="slice_cols")
        check(K.softmax_split_coop, case, slice_cols=slice_cols)
