"""The lesson modules of lessons 03-05: the replay of one fused program, the online trace against
the kernel, the hard rows, the occupancy arithmetic, the data loaders, the figures, and every
exercise checker (right, untouched, wrong and raising attempts).

Every checker must print exactly one line and never raise, whatever the learner wrote.
"""

from __future__ import annotations

import math

import helpers
import matplotlib
import pytest
import torch
import triton
import triton.language as tl
from helpers import gpu_data, lesson03, lesson04, lesson05
from helpers.mode import DEVICE


def verdict(capsys, checker, attempt) -> str:
    checker(attempt)
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1, out
    return out[0]


def status(line: str) -> str:
    return line.split("): ", 1)[1]


def _untouched(*args):
    raise NotImplementedError


def _raises(*args):
    return 1 / 0


# --------------------------------------------------------------------------------------------
# Lesson 03
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
# Recorded data, provenance and figures
# --------------------------------------------------------------------------------------------

LOADERS = [
    (lesson03.bandwidth_data, {"dtype", "M", "N", "provider", "gbps", "frac_of_copy"}),
    (lesson03.limits_data, {"dtype", "N", "num_warps", "n_regs", "n_spills", "frac_of_copy", "status"}),
    (lesson04.rows_grow_data, {"dtype", "M", "N", "provider", "frac_of_copy", "status"}),
    (lesson05.occupancy_data, {"num_warps", "num_stages", "n_regs", "shared", "programs_per_sm", "limited_by"}),
    (lesson05.programs_data, {"num_programs", "occupancy_programs", "frac_of_copy"}),
    (lesson05.tuning_data, {"num_warps", "num_stages", "n_regs", "n_spills", "shared", "programs_per_sm", "limited_by"}),
    (lesson05.final_data, {"dtype", "M", "N", "provider", "gbps", "frac_of_copy", "status"}),
]


@pytest.mark.parametrize("loader, columns", LOADERS, ids=[f.__qualname__ for f, _ in LOADERS])
def test_recorded_loaders_return_rows_with_provenance(loader, columns):
    rows, meta = loader(live=False)
    assert rows and columns <= set(rows[0])
    for key in ("gpu", "torch", "triton", "date", "commit"):
        assert meta.get(key), key
    assert gpu_data.provenance_line(meta).startswith("Recorded on ")


def test_device_props_recorded():
    props, meta = lesson05.device_props(live=False)
    assert props["sm_count"] > 0 and props["warp_size"] == 32 and meta["gpu"]


@pytest.mark.skipif(helpers.ON_GPU, reason="checks the CPU refusal")
@pytest.mark.parametrize("loader", [f for f, _ in LOADERS] + [lesson05.device_props])
def test_live_loaders_refuse_without_a_gpu(loader):
    with pytest.raises(RuntimeError, match="GPU"):
        loader(live=True)


def test_bandwidth_rows_are_the_m4096_providers():
    rows, _ = lesson03.bandwidth_data(live=False)
    assert {r["M"] for r in rows} == {4096}
    assert {r["provider"] for r in rows} <= set(lesson03.BANDWIDTH_PROVIDERS)


FIGURE_FUNCS = {**lesson03.FIGURES, **lesson04.FIGURES, **lesson05.FIGURES}


@pytest.mark.parametrize("name", sorted(FIGURE_FUNCS))
def test_figures_are_figures(name):
    fig = FIGURE_FUNCS[name]()
    try:
        assert isinstance(fig, matplotlib.figure.Figure)
        assert fig.axes
    finally:
        matplotlib.pyplot.close(fig)


def test_figure_names_are_prefixed_by_their_lesson():
    for mod, prefix in ((lesson03, "03_"), (lesson04, "04_"), (lesson05, "05_")):
        assert mod.FIGURES and all(k.startswith(prefix) for k in mod.FIGURES)


def test_plots_accept_given_rows():
    rows, meta = lesson04.rows_grow_data(live=False)
    fig = lesson04.plot_rows_grow(rows[:15], meta)
    matplotlib.pyplot.close(fig)
    rows, meta = lesson05.final_data(live=False)
    only32 = [r for r in rows if r["dtype"] == "float32"]
    fig = lesson05.plot_final(only32, meta)
    assert len(fig.axes) == 1
    matplotlib.pyplot.close(fig)


# --------------------------------------------------------------------------------------------
# Lesson 04: the online trace
# --------------------------------------------------------------------------------------------


def test_worked_trace_has_block_maxima_3_5_2():
    x, b = lesson04.trace_example()
    steps = lesson04.online_trace(x, b)
    assert [s["block_max"] for s in steps] == [3.0, 5.0, 2.0]
    assert [s["m_new"] for s in steps] == [3.0, 5.0, 5.0]
    assert steps[0]["d_old"] == 0.0
    assert steps[1]["alpha"] == pytest.approx(math.exp(-2))
    assert steps[2]["alpha"] == 1.0
    x64 = x.double()
    assert steps[-1]["d_new"] == pytest.approx(float(torch.exp(x64 - 5).sum()), rel=1e-12)


def test_worked_trace_equals_the_kernel(capsys):
    x, b = lesson04.trace_example()
    assert lesson04.check_trace_against_kernel(x, b) < 1e-6
    kernel = helpers.softmax_online(x[None].to(DEVICE), block_size=b)[0].cpu().double()
    torch.testing.assert_close(lesson04.trace_softmax(x, lesson04.online_trace(x, b)), kernel, atol=1e-7, rtol=1e-6)


@pytest.mark.parametrize("block", [1, 2, 8, 64])
def test_trace_equals_kernel_on_random_rows(block):
    g = torch.Generator().manual_seed(block)
    x = torch.randn(50, generator=g) * 4
    steps = lesson04.online_trace(x, block)
    assert steps[-1]["m_new"] == float(x.max())
    kernel = helpers.softmax_online(x[None].to(DEVICE), block_size=block)[0].cpu().double()
    torch.testing.assert_close(lesson04.trace_softmax(x, steps), kernel, atol=1e-6, rtol=1e-5)


def test_trace_without_rescale_is_wrong():
    x, b = lesson04.trace_example()
    good = lesson04.online_trace(x, b)[-1]["d_new"]
    bad = lesson04.online_trace(x, b, rescale=False)[-1]["d_new"]
    assert bad > good * 1.5


def test_trace_handles_leading_neg_inf_blocks():
    x = torch.tensor([float("-inf")] * 4 + [1.0, 2.0])
    steps = lesson04.online_trace(x, 2)
    assert steps[0]["m_new"] == float("-inf") and steps[0]["d_new"] == 0.0
    assert not math.isnan(steps[-1]["d_new"])


@pytest.mark.parametrize("bad", [torch.zeros(2, 3), torch.zeros(0)])
def test_trace_rejects_bad_rows(bad):
    with pytest.raises(ValueError):
        lesson04.online_trace(bad, 2)


def test_hard_rows_pass(capsys):
    assert lesson04.run_hard_rows(block_size=16, n_cols=40)
    assert "NaN (right)" in capsys.readouterr().out


def test_online_attention_matches_softmax_times_v():
    g = torch.Generator().manual_seed(7)
    s = torch.randn(13, generator=g, dtype=torch.float64) * 3
    V = torch.randn(13, 4, generator=g, dtype=torch.float64)
    for b in (1, 3, 13):
        torch.testing.assert_close(lesson04.online_attention(s, V, b), torch.softmax(s, 0) @ V)


def test_traffic_table_fractions(capsys):
    lesson04.print_traffic_table(M=8, N=16)
    out = capsys.readouterr().out
    assert "0.500" in out and "0.667" in out and "1.000" in out


# --------------------------------------------------------------------------------------------
# Lesson 05: grid-stride loop, occupancy, waves
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n_rows, P", [(10, 3), (7, 7), (5, 9), (100, 1)])
def test_grid_stride_covers_every_row_once(n_rows, P):
    rows = sorted(r for p in range(P) for r in lesson05.rows_of_program(p, n_rows, P))
    assert rows == list(range(n_rows))


def test_persistent_any_grid_size(capsys):
    assert lesson05.check_program_counts(M=6, N=20, counts=(1, 4, 9))


PROPS = {"sm_count": 132, "regs_per_sm": 65536, "shared_per_sm": 233472, "max_threads_per_sm": 2048,
         "max_blocks_per_sm": 32, "warp_size": 32}


@pytest.mark.parametrize("n_regs, shared, warps, per_sm, limit", [
    # 72 regs * 32 = 2304 per warp (a multiple of 256): 65536 // 2304 = 28; 233472 // 12288 = 19
    (72, 12288, 1, 19, "shared memory"),
    # 23 * 32 = 736 -> 768 per warp, * 8 = 6144: 10 by registers; 2048 // 256 = 8 by threads
    (23, 32, 8, 8, "threads"),
    # 180 * 32 = 5760 -> 5888, * 4 = 23552: 65536 // 23552 = 2
    (180, 16, 4, 2, "registers"),
    # 58 * 32 = 1856 -> 2048: 32 by registers, and 32 block slots: a tie, registers first
    (58, 0, 1, 32, "registers"),
    # 16 * 32 = 512: 128 by registers, 64 by threads: the 32 block slots bind
    (16, 16, 1, 32, "blocks"),
])
def test_occupancy_matches_hand_calculation(n_regs, shared, warps, per_sm, limit, capsys):
    occ = lesson05.explain_occupancy(n_regs, shared, warps, PROPS)
    assert (occ["programs_per_sm"], occ["limited_by"]) == (per_sm, limit)
    assert f"-> {per_sm} programs per SM, limited by {limit}" in capsys.readouterr().out
    assert lesson05.programs_by_registers_answer(n_regs, warps) == occ["limits"]["registers"]


def test_occupancy_table_agrees_with_the_recorded_run(capsys):
    rows, _ = lesson05.occupancy_data(live=False)
    props, _ = lesson05.device_props(live=False)
    assert len(rows) == len(lesson05.OCCUPANCY_PICKS)
    assert lesson05.print_occupancy_table(rows, props)
    assert {r["limited_by"] for r in rows} >= {"registers", "shared memory", "threads"}


@pytest.mark.parametrize("n, r, want", [(65536, 2112, (32, 64)), (2112, 2112, (1, 2112)), (132, 2112, (1, 132)),
                                        (4225, 2112, (3, 1)), (1, 1, (1, 1))])
def test_waves(n, r, want):
    assert lesson05.waves_answer(n, r) == want


def test_bytes_in_flight(capsys):
    rows = lesson05.print_bytes_in_flight(4000.0, 100, 4000, latency_ns=500)
    assert rows == pytest.approx(5.0)  # 4000 GB/s * 500 ns = 2 MB, / 100 SMs = 20 kB = 5 rows


# --------------------------------------------------------------------------------------------
# Exercise checkers: right, untouched, wrong, raising
# --------------------------------------------------------------------------------------------


def block_and_padding_right(n):
    b = 1
    while b < n:
        b *= 2
    return b, b - n


def predicted_ms_right(M, N, es, gbps):
    return 2 * M * N * es / (gbps * 1e9) * 1e3


def merge_right(m1, d1, m2, d2):
    m = max(m1, m2)
    if m == -math.inf:
        return -math.inf, 0.0
    return m, d1 * math.exp(m1 - m) + d2 * math.exp(m2 - m)


def merge_no_empty(m1, d1, m2, d2):
    m = max(m1, m2)
    return m, d1 * math.exp(m1 - m) + d2 * math.exp(m2 - m)


def update_right(m, d, block):
    m_new = max(m, block.max().item())
    if m_new == -math.inf:
        return m_new, d
    return m_new, d * math.exp(m - m_new) + torch.exp(block - m_new).sum().item()


def update_no_rescale(m, d, block):
    m_new = max(m, block.max().item())
    if m_new == -math.inf:
        return m_new, d
    return m_new, d + torch.exp(block - m_new).sum().item()


def update_no_neg_inf(m, d, block):
    m_new = max(m, block.max().item())
    return m_new, d * math.exp(m - m_new) + torch.exp(block - m_new).sum().item()


def regs_right(n_regs, w, regs_per_sm, warp):
    return regs_per_sm // (-(-n_regs * warp // 256) * 256 * w)


def binding_right(n_regs, shared, w, props):
    lim = {"registers": regs_right(n_regs, w, props["regs_per_sm"], props["warp_size"]),
           "threads": props["max_threads_per_sm"] // (w * props["warp_size"]),
           "blocks": props["max_blocks_per_sm"]}
    if shared:
        lim["shared memory"] = props["shared_per_sm"] // shared
    return min(lim, key=lim.get)


CASES = [
    # (checker, right, wrong, expected text in the wrong verdict)
    (lesson03.check_3_1, block_and_padding_right, lambda n: (n, 0), "BLOCK_SIZE"),
    (lesson03.check_3_1, block_and_padding_right, lambda n: (triton.next_power_of_2(n), n), "padding ="),
    (lesson03.check_3_3, predicted_ms_right, lambda M, N, es, gb: M * N * es / (gb * 1e9) * 1e3, "count the write"),
    (lesson03.check_3_3, predicted_ms_right, lambda M, N, es, gb: 2 * M * N * es / (gb * 2**30) * 1e3, "10**9"),
    (lesson04.check_4_1, merge_right, merge_no_empty, "empty part"),
    (lesson04.check_4_1, merge_right, lambda m1, d1, m2, d2: (max(m1, m2), d1 + d2), "rescale"),
    (lesson04.check_4_2, update_right, update_no_rescale, "rescale the old d"),
    (lesson04.check_4_2, update_right, update_no_neg_inf, "-inf"),
    (lesson04.check_4_3, lesson04.stash_traffic_answer, lambda M, N: (M * N, 2 * M * N), "reads"),
    (lesson05.check_5_1, regs_right, lambda n, w, r, ws: r // (n * ws * w), "multiple of 256"),
    (lesson05.check_5_2, lesson05.waves_answer, lambda n, r: (n // r, n % r), "round up"),
    (lesson05.check_5_3, binding_right, lambda *a: "registers", "you said 'registers'"),
    (lesson05.check_5_3, binding_right, lambda *a: "smem", "is not one of"),
]


@pytest.mark.parametrize("checker, right, wrong, hint", CASES,
                         ids=[f"{c.__name__}-{i}" for i, (c, *_rest) in enumerate(CASES)])
def test_checkers(checker, right, wrong, hint, capsys):
    assert status(verdict(capsys, checker, right)).startswith("correct")
    assert status(verdict(capsys, checker, _untouched)).startswith("not yet")
    assert status(verdict(capsys, checker, None)).startswith("not yet")
    line = verdict(capsys, checker, wrong)
    assert status(line).startswith("wrong") and hint in line, line
    line = verdict(capsys, checker, _raises)
    assert status(line).startswith("wrong: your code raised ZeroDivisionError"), line
    assert status(verdict(capsys, checker, lambda *a: None)).startswith("wrong")


def test_checker_3_3_quotes_the_recorded_run(capsys):
    line = verdict(capsys, lesson03.check_3_3, predicted_ms_right)
    assert "the fused kernel took" in line


# Exercise 3.2 takes a Triton kernel: these are defined here, after `helpers` chose the mode.


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
def scaled_forgets_scale(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, scale, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf"))
    num = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * out_row_stride + cols, num / tl.sum(num, axis=0), mask=mask)


@triton.jit
def scaled_bad_index(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, scale, BLOCK_SIZE: tl.constexpr):
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(in_ptr + cols + undefined_name)  # noqa: F821
    tl.store(out_ptr + cols, x)


def test_checker_3_2(capsys):
    assert status(verdict(capsys, lesson03.check_3_2, scaled_right)).startswith("correct")
    assert status(verdict(capsys, lesson03.check_3_2, scaled_untouched)).startswith("not yet")
    assert status(verdict(capsys, lesson03.check_3_2, None)).startswith("not yet")
    line = verdict(capsys, lesson03.check_3_2, scaled_pads_before_scaling)
    assert status(line).startswith("wrong") and "scale < 0" in line, line
    line = verdict(capsys, lesson03.check_3_2, scaled_forgets_scale)
    assert status(line).startswith("wrong") and "softmax(x * scale)" in line, line
    line = verdict(capsys, lesson03.check_3_2, scaled_bad_index)
    assert status(line).startswith("wrong") and "raised" in line, line
    line = verdict(capsys, lesson03.check_3_2, lambda *a: None)
    assert status(line).startswith("wrong") and "@triton.jit" in line, line
