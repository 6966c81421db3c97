"""Lesson 03's module: the replay of one fused program, the block tables, the recorded H100 data and
what the lesson prints from it, the figures, and every exercise checker against the right answer,
the untouched template and the plausible wrong answers (each must get "wrong" with its hint, and an
out-of-bounds store must be reported without killing the process).

Every checker must print exactly one line and never raise, whatever the learner wrote.
"""

from __future__ import annotations

import math
import re

import helpers
import matplotlib
import pytest
import torch
import triton
import triton.language as tl
from helpers import gpu_data, lesson03
from helpers.mode import DEVICE
from checking import _raises, _untouched, assert_checker_contract, status, verdict


# --------------------------------------------------------------------------------------------
# The kernel, replayed; block layouts; correctness
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n, block, pad", [(1, 1, 0), (5, 8, 3), (781, 1024, 243), (1024, 1024, 0), (1025, 2048, 1023)])
def test_block_layout(n, block, pad):
    b = lesson03.block_layout(n)
    assert (b["BLOCK_SIZE"], b["padding"]) == (block, pad)
    assert b["threads"] == 32 * b["num_warps"] == 32 * helpers.num_warps_for(block)


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "8"])
def test_block_layout_rejects_bad_input(bad):
    with pytest.raises(ValueError):
        lesson03.block_layout(bad)


def test_replay_matches_the_kernel_on_every_row():
    torch.manual_seed(3)
    x = torch.randn(4, 11) * 3
    y = helpers.softmax_fused(x.to(DEVICE)).cpu()
    for row in range(4):
        r = lesson03.replay_program(x, row)
        assert r["BLOCK_SIZE"] == 16 and r["mask"].sum() == 11
        assert torch.isinf(r["x"][11:]).all() and (r["numerator"][11:] == 0).all()
        torch.testing.assert_close(r["stored"], y[row], atol=1e-6, rtol=1e-5)


def test_print_replay_says_same(capsys):
    lesson03.print_replay(torch.tensor([[0.5, -1.0, 2.0]]), 0)
    out = capsys.readouterr().out
    assert "(same: True)" in out and "mask = cols < n_cols               -> [T, T, T, F]" in out


def test_check_shapes_passes_and_uses_small_shapes_on_cpu(capsys):
    assert lesson03.check_shapes(helpers.softmax_fused, shapes=[(3, 5), (1, 4), (4, 1)])
    if not helpers.ON_GPU:
        assert sum(M for M, _ in lesson03.correctness_shapes()) < 600  # the interpreter: ~10 ms a row


@pytest.mark.parametrize("err, text", [(0.0, "exact"), (1.8e-8, "< 1e-07"), (1e-7, "< 1e-06"), (5.0, "< 1e+01"),
                                       (float("nan"), "NaN"), (float("inf"), "inf")])
def test_round_up_err(err, text):
    assert lesson03.round_up_err(err) == text


def test_traffic_comparison(capsys):
    lesson03.print_traffic_comparison(M=4096, N=4096)
    assert "4.00x fewer bytes" in capsys.readouterr().out


# --------------------------------------------------------------------------------------------
# Recorded data: the H100, GPU time as the headline, eager beside it
# --------------------------------------------------------------------------------------------

LOADERS = [
    (lesson03.bandwidth_data, {"dtype", "M", "N", "provider", "graph_frac", "frac_of_copy", "graph_spread", "spread"}),
    (lesson03.limits_data, {"dtype", "N", "num_warps", "n_regs", "n_spills", "graph_frac", "frac_of_copy", "status"}),
    (lesson03.gpu_facts, None),
]


@pytest.mark.parametrize("loader, columns", LOADERS, ids=[f.__qualname__ for f, _ in LOADERS])
def test_recorded_loaders_return_h100_rows_with_provenance(loader, columns):
    rows, meta = loader(live=False)
    if columns:
        assert rows and columns <= set(rows[0])
    for key in ("gpu", "torch", "triton", "date", "commit"):
        assert meta.get(key), key
    assert "H100" in meta["gpu"]
    assert gpu_data.provenance_line(meta).startswith("Recorded on NVIDIA H100")


@pytest.mark.skipif(helpers.ON_GPU, reason="checks the CPU refusal")
@pytest.mark.parametrize("loader", [f for f, _ in LOADERS])
def test_live_loaders_refuse_without_a_gpu(loader):
    with pytest.raises(RuntimeError, match="GPU"):
        loader(live=True)


def test_gpu_facts_print_the_terms_with_the_h100s_numbers(capsys):
    props, _ = lesson03.gpu_facts(live=False)
    lesson03.print_gpu_facts(props)
    out = capsys.readouterr().out
    for text in ("SMs", "registers per SM", "shared memory per SM", "L2 cache", "DRAM peak", "copy_(x) of 1 GiB, eager",
                 "from a CUDA graph"):
        assert text in out, text
    assert f"{props['sm_count']}" in out and f"{props['l2_bytes'] / 2**20:.0f} MiB" in out
    assert f"{props['copy_gbps_1GiB']:,.0f} GB/s" in out


def test_bandwidth_rows_are_the_m4096_providers():
    rows, _ = lesson03.bandwidth_data(live=False)
    assert {r["M"] for r in rows} == {4096}
    assert {r["provider"] for r in rows} == set(lesson03.BANDWIDTH_PROVIDERS)


def test_bandwidth_table_shows_gpu_time_first_and_eager_in_brackets(capsys):
    rows, _ = lesson03.bandwidth_data(live=False)
    lesson03.print_bandwidth_table(rows, "float32")
    out = capsys.readouterr().out
    r = next(r for r in rows if r["N"] == 1024 and r["provider"] == "fused" and r["dtype"] == "float32")
    assert f"{r['graph_frac']:.2f} ({r['frac_of_copy']:.2f})" in out


def test_speedup_summary_is_computed_from_the_rows(capsys):
    rows, _ = lesson03.bandwidth_data(live=False)
    lesson03.speedup_summary(rows, "float32")
    out = capsys.readouterr().out.splitlines()
    quiet = lambda r, k: r[k] <= lesson03.SPREAD_LIMIT  # noqa: E731
    by = {(r["N"], r["provider"]): r for r in rows if r["dtype"] == "float32"}
    ns = sorted({n for n, _ in by})
    g = lambda n, p: by[n, p] if quiet(by[n, p], "graph_spread") else None  # noqa: E731
    naive = [g(n, "torch_naive")["graph_ms"] / g(n, "fused")["graph_ms"] for n in ns if g(n, "torch_naive") and g(n, "fused")]
    torch_r = {n: g(n, "torch_softmax")["graph_ms"] / g(n, "fused")["graph_ms"] for n in ns
               if g(n, "torch_softmax") and g(n, "fused")}
    assert out[0].startswith("GPU time:") and out[1].startswith("eager")
    assert f"{min(naive):.1f}x to {max(naive):.1f}x faster" in out[0]
    assert f"{min(torch_r.values()):.2f}x to {max(torch_r.values()):.2f}x the speed" in out[0]
    behind = [n for n, v in torch_r.items() if v < 1]
    assert (f"behind at N = {', '.join(map(str, behind))}" if behind else "never behind") in out[0]
    e = lambda n, p: by[n, p] if quiet(by[n, p], "spread") else None  # noqa: E731
    naive_e = [e(n, "torch_naive")["ms"] / e(n, "fused")["ms"] for n in ns if e(n, "torch_naive") and e(n, "fused")]
    assert f"{min(naive_e):.1f}x to {max(naive_e):.1f}x faster" in out[1]
    assert "largest spread" in out[2]


def test_no_conclusion_of_lesson_03_rests_on_a_spread_over_10_percent(capsys):
    """A cell whose rounds spread over the limit is left out of the summary lines and named; the
    largest spread the lines rest on is within the limit (recorded data and a made-up noisy cell)."""
    rows, _ = lesson03.bandwidth_data(live=False)
    noisy = [dict(r) for r in rows]
    victim = next(r for r in noisy if r["dtype"] == "float32" and r["provider"] == "torch_naive" and r["N"] == 1024)
    victim["spread"], victim["ms"] = 3.0, victim["ms"] * 100  # one wild eager round: a huge "speed-up" if used
    for data in (rows, noisy):
        lesson03.speedup_summary(data, "float32")
        out = capsys.readouterr().out
        worst = re.search(r"rest on: ([\d.]+)% \(GPU time\), ([\d.]+)% \(eager\)", out)
        assert worst and float(worst[1]) <= 100 * lesson03.SPREAD_LIMIT and float(worst[2]) <= 100 * lesson03.SPREAD_LIMIT, out
    assert "naive PyTorch (01) at N = 1024 (eager, rounds spread 300%)" in out
    assert "faster" in out and "x to 100" not in out.splitlines()[1]


def test_spread_over_the_limit_is_marked():
    row = dict(status="ok", graph_frac=0.5, frac_of_copy=0.6, graph_spread=0.2, spread=0.01)
    assert lesson03._cell(row) == "0.50* (0.60)"


def test_small_shape_is_every_provider_at_4096x256(capsys):
    rows, meta = lesson03.small_shape_rows()
    assert {(r["M"], r["N"], r["dtype"]) for r in rows} == {(4096, 256, "float32")}
    assert set(lesson03.TRITON_PROVIDERS) <= {r["provider"] for r in rows}
    lesson03.print_small_shape(rows)
    out = capsys.readouterr().out
    assert "y.copy_(x)" in out and "Liger-Kernel" in out and "host µs" in out


def test_ncu_row_of_the_small_case(capsys):
    row, meta = lesson03.ncu_row("small_fp32_256")
    assert row["kernel"] == "softmax_tiled_kernel" and "H100" in meta["gpu"]
    props, _ = lesson03.gpu_facts(live=False)
    lesson03.print_ncu(row, props)
    out = capsys.readouterr().out
    assert f"{row['dram_pct_of_peak']:.1f}% of its peak" in out
    assert f"{row['achieved_occupancy_pct']:.1f}%" in out


def test_above_one_shows_l2_fits_and_the_slow_graph_copy(capsys):
    rows, _ = lesson03.bandwidth_data(live=False)
    props, _ = lesson03.gpu_facts(live=False)
    lesson03.print_above_one(rows, props, "float32")
    lines = capsys.readouterr().out.splitlines()[2:]
    fits = {int(line.split()[0]): line.split()[2] for line in lines}
    for n, f in fits.items():
        assert f == ("yes" if 2 * 4096 * n * 4 <= props["l2_bytes"] else "no")
    # what the lesson's prose says: copy above the DRAM peak only where the data fits in L2, and the
    # copy replayed from a graph slower than eager at the largest size
    copy = {r["N"]: r for r in rows if r["provider"] == "copy" and r["dtype"] == "float32"}
    for n, r in copy.items():
        if r["graph_gbps"] > props["dram_peak_gbps"]:
            assert 2 * 4096 * n * 4 <= props["l2_bytes"]
    big = copy[max(copy)]
    assert big["graph_gbps"] < big["gbps"]
    assert props["copy_graph_gbps_1GiB"] < props["copy_gbps_1GiB"]


def test_limits_table_and_summary(capsys):
    rows, _ = lesson03.limits_data(live=False)
    lesson03.print_limits_table(rows, "float32")
    lesson03.summarize_limits(rows)
    lesson03.print_short_rows(rows)
    out = capsys.readouterr().out
    assert "first spill at N = 65536" in out and "frac GPU" in out and "bytes a row" in out


def test_limits_rows_keeps_its_name_for_the_benchmark():
    from helpers import bench  # noqa: F401  (bench.lessons calls lesson03.limits_rows)

    assert callable(lesson03.limits_rows)
    if not helpers.ON_GPU:
        with pytest.raises(RuntimeError, match="GPU"):
            lesson03.limits_rows()


def test_register_cap_from_the_recorded_props():
    props, _ = lesson03.gpu_facts(live=False)
    assert lesson03.register_cap(16) == props["regs_per_sm"] // (32 * 16)


@pytest.mark.parametrize("name", sorted(lesson03.FIGURES))
def test_figures_are_figures(name):
    fig = lesson03.FIGURES[name]()
    try:
        assert isinstance(fig, matplotlib.figure.Figure)
        assert fig.axes
    finally:
        matplotlib.pyplot.close(fig)


def test_figure_names_are_prefixed_by_their_lesson():
    assert lesson03.FIGURES and all(k.startswith("03_") for k in lesson03.FIGURES)


# --------------------------------------------------------------------------------------------
# Exercise 3.1, 3.4: plain Python answers
# --------------------------------------------------------------------------------------------


def block_and_padding_right(n):
    b = 1
    while b < n:
        b *= 2
    return b, b - n


def predicted_ms_right(M, N, es, gbps):
    return 2 * M * N * es / (gbps * 1e9) * 1e3


CASES = [
    (lesson03.check_3_1, block_and_padding_right, lambda n: (n, 0), "BLOCK_SIZE"),
    (lesson03.check_3_1, block_and_padding_right, lambda n: (triton.next_power_of_2(n), n), "padding ="),
    (lesson03.check_3_4, predicted_ms_right, lambda M, N, es, gb: M * N * es / (gb * 1e9) * 1e3, "count the write"),
    (lesson03.check_3_4, predicted_ms_right, lambda M, N, es, gb: 2 * M * N * es / (gb * 2**30) * 1e3, "10**9"),
    (lesson03.check_3_4, predicted_ms_right, lambda M, N, es, gb: 2 * M * N * es / (gb * 1e9), "seconds"),
]


@pytest.mark.parametrize("checker, right, wrong, hint", CASES,
                         ids=[f"{c.__name__}-{i}" for i, (c, *_rest) in enumerate(CASES)])
def test_checkers(checker, right, wrong, hint, capsys):
    assert_checker_contract(capsys, checker, right, wrong, hint)


def test_checker_3_4_quotes_the_recorded_h100_run(capsys):
    line = verdict(capsys, lesson03.check_3_4, predicted_ms_right)
    assert "the H100's copy bandwidth" in line and "in GPU time" in line and "eager" in line


# --------------------------------------------------------------------------------------------
# Exercise 3.2: a column softmax through strides (the learner launches the fused kernel)
# --------------------------------------------------------------------------------------------


def dim0_right(x, out, kernel):
    M, N = x.shape
    kernel[(N,)](out, x, x.stride(1), x.stride(0), out.stride(0), M,
                 BLOCK_SIZE=triton.next_power_of_2(M), ACC=tl.float32)


def dim0_right_transposed_view(x, out, kernel):
    xt = x.t()  # a view: the same memory, so not a copy
    kernel[(xt.shape[0],)](out, xt, xt.stride(0), xt.stride(1), out.stride(0), xt.shape[1],
                           BLOCK_SIZE=triton.next_power_of_2(xt.shape[1]), ACC=tl.float32, num_warps=1)


def dim0_strides_not_swapped(x, out, kernel):
    M, N = x.shape
    kernel[(N,)](out, x, x.stride(0), x.stride(1), out.stride(0), M,
                 BLOCK_SIZE=triton.next_power_of_2(M), ACC=tl.float32)


def dim0_counts_swapped(x, out, kernel):
    M, N = x.shape
    kernel[(M,)](out, x, x.stride(1), x.stride(0), out.stride(0), N,
                 BLOCK_SIZE=triton.next_power_of_2(N), ACC=tl.float32)


def dim0_copy(x, out, kernel):
    xt = x.t().contiguous()
    kernel[(xt.shape[0],)](out, xt, xt.stride(0), xt.stride(1), out.stride(0), xt.shape[1],
                           BLOCK_SIZE=triton.next_power_of_2(xt.shape[1]), ACC=tl.float32)


def dim0_clone(x, out, kernel):
    dim0_right(x.clone(), out, kernel)


def dim0_wrong_out_stride(x, out, kernel):
    M, N = x.shape
    kernel[(N,)](out, x, x.stride(1), x.stride(0), 1, M, BLOCK_SIZE=triton.next_power_of_2(M), ACC=tl.float32)


def dim0_out_stride_of_x(x, out, kernel):
    M, N = x.shape
    kernel[(N,)](out, x, x.stride(1), x.stride(0), N, M, BLOCK_SIZE=triton.next_power_of_2(M), ACC=tl.float32)


def dim0_hardcoded_strides(x, out, kernel):
    M, N = x.shape
    kernel[(N,)](out, x, 1, N, out.stride(0), M, BLOCK_SIZE=triton.next_power_of_2(M), ACC=tl.float32)


def dim0_block_too_small(x, out, kernel):
    M, N = x.shape
    kernel[(N,)](out, x, x.stride(1), x.stride(0), out.stride(0), M,
                 BLOCK_SIZE=max(1, triton.next_power_of_2(M) // 2), ACC=tl.float32)


def dim0_no_launch(x, out, kernel):
    out.copy_(torch.softmax(x, dim=0).t())


def dim0_library(x, out, kernel):
    out.copy_(helpers.softmax_fused(x.t()))


def dim0_twice(x, out, kernel):
    dim0_right(x, out, kernel)
    dim0_right(x, out, kernel)


def test_checker_3_2_right_answers(capsys):
    assert status(verdict(capsys, lesson03.check_3_2, dim0_right)).startswith("correct")
    assert status(verdict(capsys, lesson03.check_3_2, dim0_right_transposed_view)).startswith("correct")


def test_checker_3_2_not_yet(capsys):
    assert status(verdict(capsys, lesson03.check_3_2, _untouched)).startswith("not yet")
    assert status(verdict(capsys, lesson03.check_3_2, None)).startswith("not yet")


@pytest.mark.parametrize("wrong, hint", [
    (dim0_strides_not_swapped, "x.stride(1)"),
    (dim0_counts_swapped, "one program per column"),
    (dim0_copy, "copy of x"),
    (dim0_clone, "copy of x"),
    (dim0_wrong_out_stride, "out_row_stride"),
    (dim0_out_stride_of_x, "out_row_stride"),
    (dim0_hardcoded_strides, "use x.stride()"),
    (dim0_block_too_small, "BLOCK_SIZE"),
    (dim0_no_launch, "never launched"),
    (dim0_library, "never launched"),
    (dim0_twice, "launch the kernel once"),
    (_raises, "ZeroDivisionError"),
    (lambda x, out, kernel: None, "never launched"),
    (42, "expected a function"),
], ids=lambda v: getattr(v, "__name__", str(v))[:30])
def test_checker_3_2_wrong_answers(wrong, hint, capsys):
    line = verdict(capsys, lesson03.check_3_2, wrong)
    assert status(line).startswith("wrong") and hint in line, line


# --------------------------------------------------------------------------------------------
# Exercise 3.3: a fused scaled softmax kernel (defined here, after `helpers` chose the mode)
# --------------------------------------------------------------------------------------------


@triton.jit
def scaled_right(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, scale, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    z = tl.where(mask, x * scale, -float("inf"))
    num = tl.exp(z - tl.max(z, axis=0))
    tl.store(out_ptr + row * out_row_stride + cols, num / tl.sum(num, axis=0), mask=mask)


@triton.jit
def scaled_untouched(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, scale, BLOCK_SIZE: tl.constexpr):
    raise NotImplementedError  # your code here


@triton.jit
def scaled_pads_before_scaling(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, scale,
                               BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf")) * scale
    num = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * out_row_stride + cols, num / tl.sum(num, axis=0), mask=mask)


@triton.jit
def scaled_max_before_scaling(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, scale,
                              BLOCK_SIZE: tl.constexpr):
    # padding handled right, but the shift is the max of x, taken before scaling
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    z = tl.where(mask, (x - tl.max(x, axis=0)) * scale, -float("inf"))
    num = tl.exp(z)
    tl.store(out_ptr + row * out_row_stride + cols, num / tl.sum(num, axis=0), mask=mask)


@triton.jit
def scaled_forgets_scale(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, scale, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf"))
    num = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * out_row_stride + cols, num / tl.sum(num, axis=0), mask=mask)


@triton.jit
def scaled_no_max_shift(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, scale, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    num = tl.where(mask, tl.exp(x * scale), 0.0)
    tl.store(out_ptr + row * out_row_stride + cols, num / tl.sum(num, axis=0), mask=mask)


@triton.jit
def scaled_no_store_mask(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, scale, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    z = tl.where(mask, x * scale, -float("inf"))
    num = tl.exp(z - tl.max(z, axis=0))
    tl.store(out_ptr + row * out_row_stride + cols, num / tl.sum(num, axis=0))  # no mask: writes the padding


@triton.jit
def scaled_far_store(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, scale, BLOCK_SIZE: tl.constexpr):
    # a wild store, millions of elements past the output: would corrupt the process without the guard
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + (row + 1) * 50_000_000 + cols, tl.zeros((BLOCK_SIZE,), tl.float32))


@triton.jit
def scaled_writes_input(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, scale, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    z = tl.where(mask, x * scale, -float("inf"))
    num = tl.exp(z - tl.max(z, axis=0))
    y = num / tl.sum(num, axis=0)
    tl.store(in_ptr + row * in_row_stride + cols, y, mask=mask)
    tl.store(out_ptr + row * out_row_stride + cols, y, mask=mask)


@triton.jit
def scaled_bad_index(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, scale, BLOCK_SIZE: tl.constexpr):
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(in_ptr + cols + undefined_name)  # noqa: F821
    tl.store(out_ptr + cols, x)


def test_checker_3_3_right_and_not_yet(capsys):
    assert status(verdict(capsys, lesson03.check_3_3, scaled_right)).startswith("correct")
    assert status(verdict(capsys, lesson03.check_3_3, scaled_untouched)).startswith("not yet")
    assert status(verdict(capsys, lesson03.check_3_3, None)).startswith("not yet")


@pytest.mark.parametrize("wrong, hint", [
    (scaled_pads_before_scaling, "-inf * scale is +inf"),
    (scaled_max_before_scaling, "the max of x * scale"),
    (scaled_forgets_scale, "softmax(x * scale)"),
    (scaled_no_max_shift, "subtract the row maximum"),
    (scaled_no_store_mask, "wrote past the end of its output"),
    (scaled_far_store, "out of bounds"),
    (scaled_writes_input, "changed its input"),
    (scaled_bad_index, "raised"),
    (lambda *a: None, "@triton.jit"),
], ids=lambda v: getattr(v, "__name__", None) or getattr(getattr(v, "fn", None), "__name__", "x"))
def test_checker_3_3_wrong_answers(wrong, hint, capsys):
    line = verdict(capsys, lesson03.check_3_3, wrong)
    assert status(line).startswith("wrong") and hint in line, line


def test_the_max_before_scaling_is_right_without_the_hostile_case():
    """The hostile case is what catches it: on a negative scale with a narrow spread, taking the max
    before scaling gives the right answer (softmax ignores a shift), so only a wide spread shows it."""
    x = torch.randn(4, 13, generator=torch.Generator().manual_seed(0))
    xd = x.to(DEVICE)
    got = torch.empty_like(xd)
    scaled_max_before_scaling[(4,)](got, xd, 13, 13, 13, -1.0, BLOCK_SIZE=16)
    torch.testing.assert_close(got.cpu().double(), torch.softmax(x.double() * -1.0, -1), atol=1e-6, rtol=1e-5)


def test_an_out_of_bounds_store_leaves_the_process_alive(capsys):
    """The far store is stopped before it touches memory; the checker reports it and this test
    (the same process) goes on to run a correct kernel."""
    line = verdict(capsys, lesson03.check_3_3, scaled_far_store)
    assert status(line).startswith("wrong")
    assert status(verdict(capsys, lesson03.check_3_3, scaled_right)).startswith("correct")
    assert math.isfinite(float(helpers.softmax_fused(torch.randn(2, 5, device=DEVICE)).sum()))
