"""Lesson 05's module: the grid-stride loop, the occupancy arithmetic and its check against the CUDA
driver, waves, the recorded H100 data the lesson prints (programs, tuning, the final comparison with
held-out shapes, tuning per GPU, host time), the figures, and every exercise checker against the
right answer, the untouched template and the plausible wrong answers.

Every checker must print exactly one line and never raise, whatever the learner wrote.
"""

from __future__ import annotations

import helpers
import matplotlib
import pytest
import torch
import triton
import triton.language as tl
from helpers import gpu_data, lesson05
from checking import _untouched, assert_checker_contract, status, verdict


PROPS = {"sm_count": 132, "regs_per_sm": 65536, "shared_per_sm": 233472, "max_threads_per_sm": 2048,
         "max_blocks_per_sm": 32, "warp_size": 32}

# --------------------------------------------------------------------------------------------
# Grid-stride loop, occupancy, waves
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n_rows, P", [(10, 3), (7, 7), (5, 9), (100, 1)])
def test_grid_stride_covers_every_row_once(n_rows, P):
    rows = sorted(r for p in range(P) for r in lesson05.rows_of_program(p, n_rows, P))
    assert rows == list(range(n_rows))


def test_persistent_any_grid_size(capsys):
    assert lesson05.check_program_counts(M=6, N=20, counts=(1, 4, 9))


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


def test_explain_occupancy_counts_the_reserved_shared_memory(capsys):
    occ = lesson05.explain_occupancy(72, 12288, 1, {**PROPS, "reserved_shared_per_block": 1024})
    assert occ["programs_per_sm"] == 17  # 233472 // (12288 + 1024)
    assert "(12,288 + 1,024 reserved by the driver) = 17 programs" in capsys.readouterr().out


def test_occupancy_check_against_the_driver(capsys):
    rows, meta = lesson05.occupancy_check_data(live=False)
    assert "H100" in meta["gpu"]
    with_ok, without_ok, n = lesson05.print_occupancy_check(rows)
    assert n == len(rows) and with_ok == n and without_ok < n
    out = capsys.readouterr().out
    assert f"without the reserve {without_ok} of {n}, with it {with_ok} of {n}" in out
    # e.g. 1024 columns, 1 warp, 4 stages: 19 without the reserve, 17 with it and from the driver
    r = next(r for r in rows if (r["N"], r["num_warps"], r["num_stages"]) == (1024, 1, 4))
    assert (r["without_reserved"], r["course"], r["cuda_api"]) == (19, 17, 17)


def test_the_course_formula_recomputes_the_recorded_course_column():
    rows, _ = lesson05.occupancy_check_data(live=False)
    props, _ = lesson05.device_props(live=False)
    for r in rows:
        assert helpers.occupancy(r["n_regs"], r["shared"], r["num_warps"], props)["programs_per_sm"] == r["course"]


def test_sweep_against_the_driver_and_the_partition_count(capsys):
    rows, _ = lesson05.tuning_data(live=False)
    props, _ = lesson05.device_props(live=False)
    cmp = lesson05.sweep_vs_driver(rows, props)
    assert cmp and all(c["by_partition"] == c["cuda_api"] for c in cmp)
    bad = [c for c in cmp if c["course"] != c["cuda_api"]]
    assert bad and all(c["limited_by"] == "registers" and c["course"] > c["cuda_api"] for c in bad)
    lesson05.print_sweep_vs_driver(rows, props)
    out = capsys.readouterr().out
    assert f"agrees with the driver on {len(cmp) - len(bad)}" in out and f"on {len(cmp)}" in out


def test_registers_by_partition():
    # 38 regs * 32 = 1216 -> 1280 a warp; a quarter holds 16384 // 1280 = 12 warps: 48 warps, 24 two-warp programs
    assert lesson05.registers_by_partition(38, 2, PROPS) == 24
    assert lesson05.programs_by_registers_answer(38, 2) == 25


@pytest.mark.parametrize("n, r, want", [(65536, 2112, (32, 64)), (2112, 2112, (1, 2112)), (132, 2112, (1, 132)),
                                        (4225, 2112, (3, 1)), (1, 1, (1, 1))])
def test_waves(n, r, want):
    assert lesson05.waves_answer(n, r) == want


def test_bytes_in_flight(capsys):
    rows = lesson05.print_bytes_in_flight(4000.0, 100, 4000, latency_ns=500)
    assert rows == pytest.approx(5.0)  # 4000 GB/s * 500 ns = 2 MB, / 100 SMs = 20 kB = 5 rows


# --------------------------------------------------------------------------------------------
# Recorded data: loaders, tables, what the prose relies on
# --------------------------------------------------------------------------------------------

LOADERS = [
    (lesson05.occupancy_data, {"num_warps", "num_stages", "n_regs", "shared", "programs_per_sm", "limited_by"}),
    (lesson05.occupancy_check_data, {"course", "without_reserved", "cuda_api"}),
    (lesson05.programs_data, {"num_programs", "occupancy_programs", "graph_frac", "frac_of_copy"}),
    (lesson05.tuning_data, {"num_warps", "num_stages", "n_regs", "n_spills", "shared", "programs_per_sm",
                            "api_programs_per_sm", "limited_by", "graph_frac"}),
    (lesson05.final_data, {"dtype", "M", "N", "provider", "graph_frac", "frac_of_copy", "spread", "status"}),
    (lesson05.launch_data, {"case", "kind", "host_us", "host_us_min", "host_us_max", "vs_torch_softmax"}),
    (lesson05.host_vs_gpu_data, {"provider", "host_us", "graph_ms"}),
]


@pytest.mark.parametrize("loader, columns", LOADERS, ids=[f.__qualname__ for f, _ in LOADERS])
def test_recorded_loaders_return_h100_rows_with_provenance(loader, columns):
    rows, meta = loader(live=False)
    assert rows and columns <= set(rows[0])
    for key in ("gpu", "torch", "triton", "date", "commit"):
        assert meta.get(key), key
    assert "H100" in meta["gpu"]


def test_device_props_recorded():
    props, meta = lesson05.device_props(live=False)
    assert props["sm_count"] > 0 and props["warp_size"] == 32 and meta["gpu"]
    assert props["reserved_shared_per_block"] == 1024


@pytest.mark.skipif(helpers.ON_GPU, reason="checks the CPU refusal")
@pytest.mark.parametrize("loader", [f for f, _ in LOADERS] + [lesson05.device_props])
def test_live_loaders_refuse_without_a_gpu(loader):
    with pytest.raises(RuntimeError, match="GPU"):
        loader(live=True)


@pytest.mark.skipif(helpers.ON_GPU, reason="checks the CPU refusal")
@pytest.mark.parametrize("fn", ["programs_rows", "tuning_rows", "device_props_rows", "occupancy_check_rows",
                                "launch_cost_rows"])
def test_benchmark_functions_keep_their_names_and_refuse_without_a_gpu(fn):
    with pytest.raises(RuntimeError):
        getattr(lesson05, fn)()


def test_programs_table_and_littles_law(capsys):
    rows, _ = lesson05.programs_data(live=False)
    props, _ = lesson05.device_props(live=False)
    lesson05.print_programs_table(rows, props["sm_count"])
    lesson05.littles_law_vs_measured(rows, props)
    out = capsys.readouterr().out
    assert "<- one per SM" in out and "<- the occupancy grid" in out and "<- one per row" in out
    assert "estimate: about" in out and "measured: the first grid at 0.9" in out
    # the prose: one per SM is a cliff; one per row beats the occupancy grid
    by = {r["num_programs"]: r["graph_frac"] for r in rows}
    occ = rows[0]["occupancy_programs"]
    assert by[props["sm_count"]] < 0.5 and by[rows[0]["M"]] > by[occ]


def test_tuning_table_summary_and_stages(capsys):
    rows, _ = lesson05.tuning_data(live=False)
    lesson05.print_tuning_table(rows, 4096, 4096)
    lesson05.tuning_summary(rows)
    lesson05.stages_effect(rows)
    out = capsys.readouterr().out
    assert "<- best" in out and "within 5% of the best" in out and "best of 2-4 stages minus 1 stage" in out


def test_final_tables_show_gpu_time_and_eager(capsys):
    rows, _ = lesson05.final_data(live=False)
    lesson05.print_final_table(rows, "float32", "M=4096", key="graph_frac")
    lesson05.print_final_table(rows, "float32", "M=4096", key="frac_of_copy")
    out = capsys.readouterr().out
    assert "GPU time" in out and "eager" in out and "liger" in out and "tutorial" in out
    assert "*" in out  # a spread over 10% is marked


def test_shape_groups_and_held_out_shapes():
    rows, _ = lesson05.final_data(live=False)
    shapes = {(r["M"], r["N"]) for r in rows}
    assert set(lesson05.HELD_OUT) <= shapes
    groups = {lesson05.shape_group(M, N) for M, N in shapes}
    assert groups == {"M=4096", "held-out", "long rows"}


def test_peer_comparison_says_where_helpers_softmax_is_behind(capsys):
    rows, _ = lesson05.final_data(live=False)
    cmp = lesson05.peer_comparison(rows, "float32", "M=4096")
    c = next(c for c in cmp if c["N"] == 1024)
    assert c["verdict"] == "behind" and c["best"] == "liger"
    held = lesson05.peer_comparison(rows, "float32", "held-out")
    assert any(c["verdict"] == "behind" for c in held)
    lesson05.print_peer_comparison(rows, "bfloat16", "held-out")
    out = capsys.readouterr().out
    assert "behind at" in out and "held-out" in out


def test_long_rows(capsys):
    rows, _ = lesson05.final_data(live=False)
    limits, _ = gpu_data.read_csv("fused_limits")
    props, _ = lesson05.device_props(live=False)
    lesson05.print_long_rows(rows, limits, props)
    out = capsys.readouterr().out
    assert "programs/SMs" in out and "bound 3MN" in out
    # the prose: more programs than SMs at 1024 and 256 rows, fewer at 64 and 8
    long_m = sorted({r["M"] for r in rows if lesson05.shape_group(r["M"], r["N"]) == "long rows"})
    assert [M > props["sm_count"] for M in long_m] == [False, False, True, True]


def test_tuned_configurations_per_gpu(capsys):
    lesson05.tiled_tuning_summary(dtype="float32")
    lesson05.print_tiled_configs("h100")
    lesson05.print_cross_gpu("h100", "h200")
    out = capsys.readouterr().out
    assert "the rule gives the recorded configuration in" in out
    assert "H100's choice on the H200" in out and "H200's choice on the H100" in out
    cmp = lesson05.cross_gpu("h100", "h200")
    assert cmp and all(0.5 < c["share"] <= 1.0 for c in cmp)
    # the prose: same choice in about half the classes; usually a few percent, the worst far more on the H200
    back = lesson05.cross_gpu("h200", "h100")
    for c_ in (cmp, back):
        assert 0.3 <= sum(c["best_a"] == c["best_b"] for c in c_) / len(c_) <= 0.7
        assert sorted(c["share"] for c in c_)[len(c_) // 2] >= 0.95
    assert min(c["share"] for c in cmp) < 0.9 and min(c["share"] for c in cmp) < min(c["share"] for c in back)


def test_check_shapes_of_helpers_softmax(capsys):
    assert lesson05.check_shapes(helpers.softmax, [(3, 5), (2, 40)])


# --------------------------------------------------------------------------------------------
# Host time against GPU time
# --------------------------------------------------------------------------------------------


def test_launch_costs_and_before_after(capsys):
    rows, _ = lesson05.launch_data(live=False)
    lesson05.print_launch_ways(rows)
    lesson05.print_wrapper_costs(rows)
    lesson05.launch_before_after(rows)
    out = capsys.readouterr().out
    for text in ("kernel[grid](...) (Triton's JIT)", "launcher, raw pointers", "torch.empty_like(x)",
                 "Liger-Kernel", "helpers.softmax", "before µs", "after µs"):
        assert text in out, text
    by = {r["case"]: r for r in rows}
    assert by["launcher, raw pointers"]["host_us"] < by["compiled[grid](...)"]["host_us"] < \
        by["kernel[grid](...) (Triton's JIT)"]["host_us"]


def test_launch_bound_sizes(capsys):
    rows, _ = lesson05.host_vs_gpu_data(live=False)
    lb = {p["provider"]: p for p in lesson05.launch_bound(rows)}
    for p in lb.values():
        if p["bound_to"]:
            n, h, g = next(pt for pt in p["points"] if pt[0] == p["bound_to"])
            assert g < h
    lesson05.print_launch_bound(rows)
    assert "launch-bound up to N =" in capsys.readouterr().out


def test_eager_spread_grows_with_the_host_path():
    rows, _ = lesson05.host_vs_gpu_data(live=False)
    b = lesson05.eager_spread_by_host(rows)
    short, long_ = b[0], b[-1]
    assert short["cells"] and long_["cells"]
    assert short["spread"] / short["cells"] < 0.1 < long_["spread"] / long_["cells"]
    # the prose: from 35 µs on, half or more spread over 10%
    from35 = [x for x in b if x["lo"] >= 35]
    assert sum(x["spread"] for x in from35) >= sum(x["cells"] for x in from35) / 2


FIGURES = lesson05.FIGURES


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_figures_are_figures(name):
    fig = FIGURES[name]()
    try:
        assert isinstance(fig, matplotlib.figure.Figure) and fig.axes
    finally:
        matplotlib.pyplot.close(fig)


def test_figure_names_and_given_rows():
    assert FIGURES and all(k.startswith("05_") for k in FIGURES)
    rows, meta = lesson05.final_data(live=False)
    only32 = [r for r in rows if r["dtype"] == "float32"]
    fig = lesson05.plot_final(only32, meta)
    assert len(fig.axes) == 1
    matplotlib.pyplot.close(fig)


# --------------------------------------------------------------------------------------------
# Exercise 5.1: a grid-stride loop (kernels defined here, after `helpers` chose the mode)
# --------------------------------------------------------------------------------------------


@triton.jit
def gs_right(out_ptr, in_ptr, in_row_stride, in_col_stride, out_row_stride, n_rows, n_cols, BLOCK_SIZE: tl.constexpr):
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        x = tl.load(in_ptr + row * in_row_stride + cols * in_col_stride, mask=mask, other=-float("inf")).to(tl.float32)
        num = tl.exp(x - tl.max(x, axis=0))
        tl.store(out_ptr + row * out_row_stride + cols, num / tl.sum(num, axis=0), mask=mask)


@triton.jit
def gs_untouched(out_ptr, in_ptr, in_row_stride, in_col_stride, out_row_stride, n_rows, n_cols,
                 BLOCK_SIZE: tl.constexpr):
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    raise NotImplementedError  # your code here


@triton.jit
def gs_from_zero(out_ptr, in_ptr, in_row_stride, in_col_stride, out_row_stride, n_rows, n_cols,
                 BLOCK_SIZE: tl.constexpr):
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    for row in range(0, n_rows, tl.num_programs(0)):  # every program takes rows 0, P, 2P: others skipped
        x = tl.load(in_ptr + row * in_row_stride + cols * in_col_stride, mask=mask, other=-float("inf")).to(tl.float32)
        num = tl.exp(x - tl.max(x, axis=0))
        tl.store(out_ptr + row * out_row_stride + cols, num / tl.sum(num, axis=0), mask=mask)


@triton.jit
def gs_all_rows(out_ptr, in_ptr, in_row_stride, in_col_stride, out_row_stride, n_rows, n_cols,
                BLOCK_SIZE: tl.constexpr):
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    for row in range(0, n_rows):  # each program does every row: right values, P times the work
        x = tl.load(in_ptr + row * in_row_stride + cols * in_col_stride, mask=mask, other=-float("inf")).to(tl.float32)
        num = tl.exp(x - tl.max(x, axis=0))
        tl.store(out_ptr + row * out_row_stride + cols, num / tl.sum(num, axis=0), mask=mask)


@triton.jit
def gs_step_one(out_ptr, in_ptr, in_row_stride, in_col_stride, out_row_stride, n_rows, n_cols,
                BLOCK_SIZE: tl.constexpr):
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    for row in range(tl.program_id(0), n_rows):  # start right, step wrong: rows shared by programs
        x = tl.load(in_ptr + row * in_row_stride + cols * in_col_stride, mask=mask, other=-float("inf")).to(tl.float32)
        num = tl.exp(x - tl.max(x, axis=0))
        tl.store(out_ptr + row * out_row_stride + cols, num / tl.sum(num, axis=0), mask=mask)


@triton.jit
def gs_no_loop(out_ptr, in_ptr, in_row_stride, in_col_stride, out_row_stride, n_rows, n_cols,
               BLOCK_SIZE: tl.constexpr):
    cols = tl.arange(0, BLOCK_SIZE)
    row = tl.program_id(0)  # one row per program: rows past the grid are never done
    mask = cols < tl.where(row < n_rows, n_cols, 0)
    x = tl.load(in_ptr + row * in_row_stride + cols * in_col_stride, mask=mask, other=-float("inf")).to(tl.float32)
    num = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * out_row_stride + cols, num / tl.sum(num, axis=0), mask=mask)


@triton.jit
def gs_no_store_mask(out_ptr, in_ptr, in_row_stride, in_col_stride, out_row_stride, n_rows, n_cols,
                     BLOCK_SIZE: tl.constexpr):
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        x = tl.load(in_ptr + row * in_row_stride + cols * in_col_stride, mask=mask, other=-float("inf")).to(tl.float32)
        num = tl.exp(x - tl.max(x, axis=0))
        tl.store(out_ptr + row * out_row_stride + cols, num / tl.sum(num, axis=0))


@triton.jit
def gs_no_col_stride(out_ptr, in_ptr, in_row_stride, in_col_stride, out_row_stride, n_rows, n_cols,
                     BLOCK_SIZE: tl.constexpr):
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
        num = tl.exp(x - tl.max(x, axis=0))
        tl.store(out_ptr + row * out_row_stride + cols, num / tl.sum(num, axis=0), mask=mask)


@triton.jit
def gs_no_max_shift(out_ptr, in_ptr, in_row_stride, in_col_stride, out_row_stride, n_rows, n_cols,
                    BLOCK_SIZE: tl.constexpr):
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        x = tl.load(in_ptr + row * in_row_stride + cols * in_col_stride, mask=mask, other=-float("inf")).to(tl.float32)
        num = tl.exp(x)
        tl.store(out_ptr + row * out_row_stride + cols, num / tl.sum(num, axis=0), mask=mask)


def test_checker_5_1_right_and_not_yet(capsys):
    assert status(verdict(capsys, lesson05.check_5_1, gs_right)).startswith("correct")
    assert status(verdict(capsys, lesson05.check_5_1, gs_untouched)).startswith("not yet")
    assert status(verdict(capsys, lesson05.check_5_1, None)).startswith("not yet")


@pytest.mark.parametrize("wrong, hint", [
    (gs_from_zero, "were never written"),
    (gs_all_rows, "processed more than once"),
    (gs_step_one, "processed more than once"),
    (gs_no_loop, "were never written"),
    (gs_no_store_mask, "wrote past the end of its output"),
    (gs_no_col_stride, "in_col_stride"),
    (gs_no_max_shift, "NaN"),
    (lambda *a: None, "@triton.jit"),
], ids=lambda v: getattr(getattr(v, "fn", v), "__name__", "x"))
def test_checker_5_1_wrong_answers(wrong, hint, capsys):
    line = verdict(capsys, lesson05.check_5_1, wrong)
    assert status(line).startswith("wrong") and hint in line, line


def test_grid_stride_cases_are_hostile():
    cases = lesson05.grid_stride_cases()
    assert {c["programs"] for c in cases} >= {1, 3, 16}
    assert any(c["programs"] > c["x"].shape[0] for c in cases)
    assert any(c.get("transpose") for c in cases)
    assert any(torch.isinf(c["x"]).any() for c in cases)


# --------------------------------------------------------------------------------------------
# Exercises 5.2 to 5.4: plain Python answers
# --------------------------------------------------------------------------------------------


def regs_right(n_regs, w, regs_per_sm, warp):
    return regs_per_sm // (-(-n_regs * warp // 256) * 256 * w)


def binding_right(n_regs, shared, w, props):
    lim = {"registers": regs_right(n_regs, w, props["regs_per_sm"], props["warp_size"]),
           "threads": props["max_threads_per_sm"] // (w * props["warp_size"]),
           "blocks": props["max_blocks_per_sm"],
           "shared memory": props["shared_per_sm"] // (shared + props.get("reserved_shared_per_block", 0))}
    return min(lim, key=lim.get)


def binding_without_reserve(n_regs, shared, w, props):
    return binding_right(n_regs, shared, w, {**props, "reserved_shared_per_block": 0}) if shared else \
        binding_right(n_regs, shared, w, props)


CASES = [
    (lesson05.check_5_2, regs_right, lambda n, w, r, ws: r // (n * ws * w), "multiple of 256"),
    (lesson05.check_5_3, lesson05.waves_answer, lambda n, r: (n // r, n % r), "round up"),
    (lesson05.check_5_4, binding_right, lambda *a: "registers", "you said 'registers'"),
    (lesson05.check_5_4, binding_right, lambda *a: "smem", "is not one of"),
    (lesson05.check_5_4, binding_right, binding_without_reserve, "reserved_shared_per_block"),
]


@pytest.mark.parametrize("checker, right, wrong, hint", CASES,
                         ids=[f"{c.__name__}-{i}" for i, (c, *_rest) in enumerate(CASES)])
def test_checkers(checker, right, wrong, hint, capsys):
    assert_checker_contract(capsys, checker, right, wrong, hint)


def test_run_to_run_agreement_of_the_two_h100_sweeps(capsys):
    r = lesson05.run_to_run()
    assert r["cells"] > 300 and r["within"] >= r["cells"] - 5 and r["median"] < 0.01
    assert "softmax" in r["changed"] and "split_coop" in r["changed"]
    lesson05.print_run_to_run()
    out = capsys.readouterr().out
    assert f"within 5% in {r['within']} of {r['cells']} cells" in out and out.count("differs by") == len(r["outside"])


def test_the_peer_comparison_prose_at_m_4096():
    """Lesson 05's prose after the M = 4096 comparison: float32 behind only at 4096 x 1024, behind
    Liger-Kernel, with the order reversed in eager time; bfloat16 behind only at 4096 x 12672, Liger."""
    rows, _ = lesson05.final_data(live=False)
    f32 = [c for c in lesson05.peer_comparison(rows, "float32", "M=4096") if c["verdict"] == "behind"]
    assert [(c["N"], c["best"]) for c in f32] == [(1024, "liger")] and f32[0]["eager_ratio"] > 1
    b16 = [c for c in lesson05.peer_comparison(rows, "bfloat16", "M=4096") if c["verdict"] == "behind"]
    assert [(c["N"], c["best"]) for c in b16] == [(12672, "liger")] and b16[0]["ratio"] > 0.95
    shortest = [lesson05.peer_comparison(rows, d, "M=4096")[0] for d in ("float32", "bfloat16")]
    assert all(c["N"] == 256 and c["verdict"] == "ahead" for c in shortest)
