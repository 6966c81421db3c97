"""Lesson 05's module: the occupancy model the lesson uses, the live measurements' names (and their
refusal without a GPU), the figures, and every exercise checker against the right answer, the
untouched template and one plausible wrong answer per test, and what the notebooks' cells show and where.
The numbers the prose quotes are each notebook's ``claims``, checked by tests/test_claims.py.

Every checker must print exactly one line and never raise, whatever the learner wrote.
"""

from __future__ import annotations

import matplotlib
import pytest
import torch
import triton
import triton.language as tl
from checking import assert_checker_contract, assert_figure, assert_solutions_correct, status, variant, verdict
from claims import cell_with, code_cell_with, prose
from claims import notebook as claims_notebook

import helpers
from helpers import data, lesson05, lesson05_exercises

PROPS = {
    "sm_count": 132,
    "regs_per_sm": 65536,
    "shared_per_sm": 233472,
    "max_threads_per_sm": 2048,
    "max_blocks_per_sm": 32,
    "warp_size": 32,
}
RECORDED = data.load("device_props").to_dict("records")[0]

# --------------------------------------------------------------------------------------------
# The grid-stride loop, occupancy, waves
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n_rows, P", [(10, 3), (7, 7), (5, 9), (100, 1)])
def test_rows_by_program_cover_every_row_once(n_rows, P):
    """The lesson's table (row r belongs to program r % P) is the grid-stride loop's assignment."""
    loop = sorted(r for p in range(P) for r in range(p, n_rows, P))
    assert loop == list(range(n_rows))
    assert all(r % P == p for p in range(P) for r in range(p, n_rows, P))


@pytest.mark.parametrize("M, N", [(6, 20), (10, 50)])
def test_persistent_any_grid_size(M, N):
    x = torch.randn(M, N, generator=torch.Generator().manual_seed(0)).to(helpers.DEVICE) * 3
    ref = torch.softmax(x.double(), dim=-1)
    for P in (1, 2, 4, 9, 16):
        assert (helpers.softmax_persistent(x, num_programs=P).double() - ref).abs().max().item() < 1e-6, P


def test_helpers_softmax_on_awkward_shapes():
    for M, N in [(3, 5), (2, 40), (4, 1), (1, 4)]:
        x = torch.randn(M, N, generator=torch.Generator().manual_seed(0)).to(helpers.DEVICE) * 3
        assert (helpers.softmax(x).double() - torch.softmax(x.double(), dim=-1)).abs().max().item() < 1e-6


@pytest.mark.parametrize("offset", [1e3, 1e6, 1e30])
def test_tiled_kernel_keeps_the_max_subtraction_exact_far_from_zero(offset):
    """The tiled kernel subtracts the row's max before the exponential, so rows far from zero are as
    accurate as rows near it. A faster-looking form, 2^(x log2 e - max log2 e) in one fused multiply-add,
    rounds max * log2 e and fails here (1.4e-6 at offset 1000, 1.2e-3 at 1e6: bench_runs/short_rows_h100.csv's
    provenance names it)."""
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(6, 300, generator=g, dtype=torch.float64) + offset).float().to(helpers.DEVICE)
    ref = torch.softmax(x.double(), dim=-1)
    for block_m in (1, 2):
        out = helpers.softmax_tiled(x, block_m=block_m, num_warps=1, num_stages=1, programs_per_sm=0)
        assert (out.double() - ref).abs().max().item() < 1e-6, (offset, block_m)


@pytest.mark.parametrize(
    "n_regs, shared, warps, per_sm, limit",
    [
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
    ],
)
def test_occupancy_matches_hand_calculation(n_regs, shared, warps, per_sm, limit):
    occ = helpers.occupancy(n_regs, shared, warps, PROPS)
    assert (occ["programs_per_sm"], occ["limited_by"]) == (per_sm, limit)
    assert lesson05_exercises.programs_by_registers_answer(n_regs, warps) == occ["limits"]["registers"]
    assert (
        lesson05_exercises._limits(n_regs, shared, warps, PROPS) == {k: v for k, v in occ["limits"].items()}
        or shared == 0
    )


def test_occupancy_counts_the_reserved_shared_memory():
    occ = helpers.occupancy(72, 12288, 1, {**PROPS, "reserved_shared_per_block": 1024})
    assert occ["programs_per_sm"] == 17  # 233472 // (12288 + 1024)


def test_the_course_formula_recomputes_the_recorded_course_column():
    checks = data.load("occupancy_check")
    for r in checks.itertuples():
        assert helpers.occupancy(r.n_regs, r.shared, r.num_warps, RECORDED)["programs_per_sm"] == r.course
        no_reserve = {**RECORDED, "reserved_shared_per_block": 0}
        assert helpers.occupancy(r.n_regs, r.shared, r.num_warps, no_reserve)["programs_per_sm"] == r.without_reserved


def test_registers_by_partition():
    # 38 regs * 32 = 1216 -> 1280 a warp; a quarter holds 16384 // 1280 = 12 warps: 48 warps, 24 two-warp programs
    assert lesson05.registers_by_partition(38, 2, PROPS) == 24
    assert lesson05_exercises.programs_by_registers_answer(38, 2) == 25


@pytest.mark.parametrize(
    "n, r, want",
    [(65536, 2112, (32, 64)), (2112, 2112, (1, 2112)), (132, 2112, (1, 132)), (4225, 2112, (3, 1)), (1, 1, (1, 1))],
)
def test_waves(n, r, want):
    assert lesson05_exercises.waves_answer(n, r) == want


# --------------------------------------------------------------------------------------------
# Live measurements: their names (tools/bench.py calls them) and their refusal without a GPU
# --------------------------------------------------------------------------------------------


@pytest.mark.skipif(helpers.ON_GPU, reason="checks the CPU refusal")
@pytest.mark.parametrize(
    "fn",
    ["programs_rows", "tuning_rows", "device_props_rows", "occupancy_check_rows", "launch_cost_rows", "final_rows"],
)
def test_measurement_functions_keep_their_names_and_refuse_without_a_gpu(fn):
    with pytest.raises(RuntimeError, match="GPU"):
        getattr(lesson05, fn)()


@pytest.mark.skipif(helpers.ON_GPU, reason="checks the CPU refusal")
def test_live_refuses_without_a_gpu():
    with pytest.raises(RuntimeError, match="GPU"):
        lesson05.live(lesson05.programs_rows)


def test_live_frames_have_the_recorded_shape(monkeypatch):
    """What a GPU's measuring cell builds (lesson05.live) has the recording's columns and a provenance."""
    rows = data.load("persistent_programs").to_dict("records")
    df = lesson05.live(lambda: rows)
    assert list(df.columns) == list(data.load("persistent_programs").columns)
    assert df.attrs["source"] == "this run" and "gpu" in df.attrs["provenance"]


# --------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------

FIGURES = lesson05.FIGURES


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_figures_are_figures(name):
    assert_figure(FIGURES[name])


def test_final_figure_draws_every_peer_the_lesson_names():
    """The lesson compares helpers.softmax with torch.softmax, torch.compile, the Triton tutorial and Liger-Kernel:
    every one is drawn in both panels, with the copy; a refused shape is marked, and the one legend sits outside
    the panels, where it hides no data."""
    fig = lesson05.plot_final()
    try:
        assert len(fig.axes) == 2 and not any(ax.get_legend() for ax in fig.axes) and len(fig.legends) == 1
        want = {"y.copy_(x)", "helpers.softmax", *(helpers.plots.label(p) for p in lesson05.PEERS)}
        for ax in fig.axes:
            labels = {l.get_label() for l in ax.get_lines()}
            assert want <= labels, want - labels
            assert "Triton tutorial refuses the shape" in labels  # at N = 32768, in both dtypes
        legend = {t.get_text() for t in fig.legends[0].get_texts()}
        assert want | {"Triton tutorial refuses the shape"} == legend
    finally:
        matplotlib.pyplot.close(fig)


def test_programs_figure_draws_no_line_across_the_gap():
    """No line segment joins two measured grids more than 2x apart (4224 -> 65536 has no data)."""
    fig = lesson05.plot_programs()
    try:
        ax = fig.axes[0]
        for line in ax.get_lines():
            xs = list(line.get_xdata())
            if len(set(xs)) > 1 and xs != [0, 1] and line.get_linestyle() not in ("None", ""):  # not the ax*line
                assert all(b / a <= 2 for a, b in zip(xs, xs[1:])), xs
        assert any(65536 in list(l.get_xdata()) for l in ax.get_lines())  # one program per row still drawn
    finally:
        matplotlib.pyplot.close(fig)


def test_figures_take_a_given_frame():
    bench = data.load("bench", gpu="h100")
    fig = lesson05.plot_final(bench[bench.dtype == "float32"])
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
def gs_untouched(
    out_ptr, in_ptr, in_row_stride, in_col_stride, out_row_stride, n_rows, n_cols, BLOCK_SIZE: tl.constexpr
):
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols  # noqa: F841  (as the template leaves it)
    raise NotImplementedError  # your code here


LOOP = "for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):"
LOAD = 'x = tl.load(in_ptr + row * in_row_stride + cols * in_col_stride, mask=mask, other=-float("inf")).to(tl.float32)'
NUM = "num = tl.exp(x - tl.max(x, axis=0))"
STORE = "tl.store(out_ptr + row * out_row_stride + cols, num / tl.sum(num, axis=0), mask=mask)"
# 5.1's plausible answers, each written as the lines where it differs from gs_right (tests/checking.py: variant)
VARIANTS_5_1 = {
    "gs_from_zero": {LOOP: "for row in range(0, n_rows, tl.num_programs(0)):  # every program: rows 0, P, 2P"},
    "gs_all_rows": {LOOP: "for row in range(0, n_rows):  # each program does every row: P times the work"},
    "gs_step_one": {LOOP: "for row in range(tl.program_id(0), n_rows):  # start right, step wrong"},
    "gs_no_store_mask": {STORE: STORE.replace(", mask=mask)", ")")},
    "gs_no_load_mask": {
        LOAD: "x = tl.load(in_ptr + row * in_row_stride + cols * in_col_stride).to(tl.float32)  # past the row's end"
    },
    "gs_other_zero": {LOAD: LOAD.replace('other=-float("inf")', "other=0.0")},
    "gs_store_with_in_stride": {STORE: STORE.replace("out_row_stride", "in_row_stride")},
    "gs_load_with_out_stride": {LOAD: LOAD.replace("in_row_stride", "out_row_stride")},
    "gs_load_n_cols_stride": {LOAD: LOAD.replace("in_row_stride", "n_cols")},
    "gs_store_n_cols_stride": {STORE: STORE.replace("out_row_stride", "n_cols")},
    "gs_no_col_stride": {LOAD: LOAD.replace("cols * in_col_stride", "cols")},
    "gs_no_max_shift": {NUM: "num = tl.exp(x)"},
    "gs_no_loop": {
        "mask = cols < n_cols": "mask = cols < n_cols\nrow = tl.program_id(0)  # one row per program, no loop",
        LOOP: "if row < n_rows:  # rows past the grid are never done",
    },
    "gs_while_stuck": {
        LOOP: "row = tl.program_id(0)\nwhile row < n_rows:  # never advances: `row += tl.num_programs(0)` is missing"
    },
}
V = {name: variant(gs_right, name, changes) for name, changes in VARIANTS_5_1.items()}


def test_checker_5_1_right_and_not_yet(capsys):
    assert status(verdict(capsys, lesson05_exercises.check_5_1, gs_right)).startswith("correct")
    assert status(verdict(capsys, lesson05_exercises.check_5_1, gs_untouched)).startswith("not yet")
    assert status(verdict(capsys, lesson05_exercises.check_5_1, None)).startswith("not yet")


STRIDE, MASK = ("row_stride",), ("mask",)  # the title says "grid-stride"


@pytest.mark.parametrize(
    "wrong, hint, not_in",
    [
        (V["gs_from_zero"], "were never written", ()),
        (V["gs_all_rows"], "processed more than once", ()),
        (V["gs_step_one"], "processed more than once", ()),
        (V["gs_no_loop"], "were never written", ()),
        (V["gs_no_store_mask"], "does tl.store have mask=", STRIDE),  # the out-of-bounds store
        (V["gs_no_load_mask"], "load with mask=cols < n_cols", STRIDE),
        (V["gs_other_zero"], "padding lanes loaded as -inf", STRIDE),
        (V["gs_store_with_in_stride"], "out_ptr + r * out_row_stride", MASK),
        (V["gs_store_n_cols_stride"], "out_ptr + r * out_row_stride", MASK),
        (V["gs_load_with_out_stride"], "in_ptr + r * in_row_stride", MASK),
        (V["gs_load_n_cols_stride"], "in_ptr + r * in_row_stride", MASK),
        (V["gs_no_col_stride"], "in_col_stride", MASK),
        (V["gs_no_max_shift"], "subtract the row maximum", STRIDE + MASK),
        (lambda *a: None, "@triton.jit", ()),
    ],
    ids=lambda v: getattr(getattr(v, "fn", v), "__name__", "x") if callable(v) else None,
)
def test_checker_5_1_wrong_answers(wrong, hint, not_in, capsys):
    line = verdict(capsys, lesson05_exercises.check_5_1, wrong)
    assert status(line).startswith("wrong") and hint in line, line
    assert not any(w in line for w in not_in), line


def test_checker_5_1_a_loop_that_never_ends(capsys, monkeypatch):
    monkeypatch.setattr(helpers.exercises, "KERNEL_TIMEOUT", 5)
    line = verdict(capsys, lesson05_exercises.check_5_1, V["gs_while_stuck"])
    assert status(line).startswith("wrong") and "did not finish" in line, line


def test_grid_stride_cases_are_hostile():
    cases = lesson05_exercises.grid_stride_cases()
    assert {c["programs"] for c in cases} >= {1, 3, 16}
    assert any(c["programs"] > c["x"].shape[0] for c in cases)
    assert any(c.get("transpose") for c in cases)
    assert any(torch.isinf(c["x"]).any() for c in cases)
    for c in cases:  # strides differ from each other and from the row length, with room for a block's lanes
        n = c["x"].shape[1] if not c.get("transpose") else c["x"].shape[0]
        assert len({c["in_stride"], c["out_stride"], n}) == 3 or c.get("transpose")
        assert c["out_stride"] - n >= triton.next_power_of_2(n) - n


# --------------------------------------------------------------------------------------------
# Exercises 5.2 to 5.4: plain Python answers
# --------------------------------------------------------------------------------------------


def regs_right(n_regs, w, regs_per_sm, warp):
    return regs_per_sm // (-(-n_regs * warp // 256) * 256 * w)


def binding(n_regs, shared, w, props, *, reserve=True, rounded=True, warp_threads=True, blocks=True, pick=min):
    per_warp = -(-n_regs * props["warp_size"] // 256) * 256 if rounded else n_regs * props["warp_size"]
    lim = {
        "registers": props["regs_per_sm"] // (per_warp * w),
        "threads": props["max_threads_per_sm"] // (w * (props["warp_size"] if warp_threads else 1)),
        "shared memory": props["shared_per_sm"]
        // (shared + (props.get("reserved_shared_per_block", 0) if reserve else 0)),
    }
    if blocks:
        lim["blocks"] = props["max_blocks_per_sm"]
    return pick(lim, key=lim.get)


def binding_right(n_regs, shared, w, props):
    return binding(n_regs, shared, w, props)


def binding_no_reserve_guarded(n_regs, shared, w, props):  # forgets the reserve, and skips shared == 0
    if shared == 0:
        return binding(n_regs, shared, w, props)
    return binding(n_regs, shared, w, props, reserve=False)


CASES = [
    (lesson05_exercises.check_5_2, regs_right, lambda n, w, r, ws: r // (n * ws * w), "multiple of 256"),
    (lesson05_exercises.check_5_3, lesson05_exercises.waves_answer, lambda n, r: (n // r, n % r), "round up"),
    (
        lesson05_exercises.check_5_3,
        lesson05_exercises.waves_answer,
        lambda n, r: (-(-n // r), n % r),
        "the last wave is full",
    ),
]


@pytest.mark.parametrize(
    "checker, right, wrong, hint", CASES, ids=[f"{c.__name__}-{i}" for i, (c, *_rest) in enumerate(CASES)]
)
def test_checkers(checker, right, wrong, hint, capsys):
    assert_checker_contract(capsys, checker, right, wrong, hint)


def _up(v):
    return -(-v // 256) * 256


WRONG_5_2 = [
    ("no rounding", lambda n, w, r, ws: r // (n * ws * w), "chunks of 256: round n_regs * warp_size up"),
    ("rounded down", lambda n, w, r, ws: r // (n * ws // 256 * 256 * w), "you rounded each warp's registers down"),
    ("the program rounded, not each warp", lambda n, w, r, ws: r // _up(n * ws * w), "not the whole program's"),
    ("one warp per program", lambda n, w, r, ws: r // _up(n * ws), "a program has num_warps warps"),
    ("no warp size", lambda n, w, r, ws: r // _up(n * w), "a warp has warp_size threads"),
    ("the last division rounded up", lambda n, w, r, ws: -(-r // (_up(n * ws) * w)), "round the last division down"),
    ("at least one program", lambda n, w, r, ws: max(1, r // (_up(n * ws) * w)), "the answer is 0, not 1"),
    ("a fraction of a program", lambda n, w, r, ws: r / (_up(n * ws) * w), "a fraction of a program"),
    ("something else", lambda n, w, r, ws: r // (n * w), "count the registers of one warp"),
]


@pytest.mark.parametrize("name, wrong, hint", WRONG_5_2, ids=[w[0] for w in WRONG_5_2])
def test_checker_5_2_names_the_mistake(name, wrong, hint, capsys):
    assert_checker_contract(capsys, lesson05_exercises.check_5_2, regs_right, wrong, hint)


RESERVE = "reserved_shared_per_block"
WRONG_5_4 = [
    ("no reserve", lambda *a: binding(*a, reserve=False), RESERVE),
    ("no reserve, shared == 0 skipped", binding_no_reserve_guarded, RESERVE),
    ("no rounding", lambda *a: binding(*a, rounded=False), "multiple of 256"),
    (
        "threads without the warp size",
        lambda *a: binding(*a, warp_threads=False),
        "num_warps * props['warp_size'] threads",
    ),
    ("no block limit", lambda *a: binding(*a, blocks=False), "max_blocks_per_sm"),
    ("the largest limit", lambda *a: binding(*a, pick=max), "take the smallest"),
    ("always registers", lambda *a: "registers", "compute each limit"),
    ("a name that is not a limit", lambda *a: "smem", "not one of them"),
]


@pytest.mark.parametrize("name, wrong, hint", WRONG_5_4, ids=[w[0] for w in WRONG_5_4])
def test_checker_5_4_names_the_mistake(name, wrong, hint, capsys):
    assert_checker_contract(capsys, lesson05_exercises.check_5_4, binding_right, wrong, hint)
    line = verdict(capsys, lesson05_exercises.check_5_4, wrong)
    if hint != RESERVE:  # the driver's reserve is named only for the mistake of leaving it out
        assert RESERVE not in line, line


# --------------------------------------------------------------------------------------------
# The notebook: its solutions pass their checkers, and no answer is on screen above a checker
# --------------------------------------------------------------------------------------------


def _notebook():
    import json
    from pathlib import Path

    return json.loads(
        (Path(__file__).resolve().parent.parent / "notebooks" / "05_persistent_softmax.ipynb").read_text()
    )


def test_the_notebooks_solutions_pass_their_checkers(tmp_path, capsys):
    assert_solutions_correct(
        capsys,
        "05",
        tmp_path,
        {
            "persistent_softmax_kernel": lesson05_exercises.check_5_1,
            "programs_by_registers": lesson05_exercises.check_5_2,
            "waves": lesson05_exercises.check_5_3,
            "binding_limit": lesson05_exercises.check_5_4,
        },
    )


def test_no_answer_on_screen_above_its_checker():
    """No code cell (source or output) before exercise 5.1's checker holds the grid-stride loop, and none
    before the checkers of 5.2 to 5.4 rounds registers up to 256 or takes the ceiling of waves."""
    cells = _notebook()["cells"]
    text = lambda c: (
        "".join(c["source"])
        + "".join(  # noqa: E731
            "".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", "")) for o in c.get("outputs", [])
        )
    )
    checker_at = {
        k: next(i for i, c in enumerate(cells) if f"lesson05_exercises.check_{k}(" in "".join(c["source"]))
        for k in ("5_1", "5_2", "5_3", "5_4")
    }
    answers = {
        "5_1": "range(tl.program_id(0), n_rows, tl.num_programs(0))",
        "5_2": "// 256) * 256",
        "5_3": "-(-num_programs // resident)",
        "5_4": "min(limits, key=limits.get)",
    }
    for k, answer in answers.items():
        shown = [i for i, c in enumerate(cells[: checker_at[k]]) if c["cell_type"] == "code" and answer in text(c)]
        assert not shown, (k, shown)


# --------------------------------------------------------------------------------------------
# The comparison cells on what a GPU measures: final_rows' shapes, one round, some peers missing
# --------------------------------------------------------------------------------------------


def _live_bench(missing):
    """What ``lesson05.live(lesson05.final_rows)`` returns on a GPU where ``missing`` are not installed (it leaves
    lesson 06's split kernels out)."""
    import inspect

    import pandas as pd

    defaults = inspect.signature(lesson05.final_rows).parameters
    shapes, dtypes = defaults["shapes"].default, defaults["dtypes"].default
    rec = data.load("bench", gpu="h100")
    at_shapes = pd.Series([s in shapes for s in zip(rec.M, rec.N)], index=rec.index)
    rows = rec[at_shapes & rec.dtype.isin(dtypes) & ~rec.provider.isin(missing) & ~rec.provider.str.startswith("split")]
    assert set(zip(rows.M, rows.N)) == set(shapes)
    return data.frame(rows.to_dict("records"), {**rec.attrs["provenance"], "command": "helpers.lesson05.final_rows()"})


def _run_cell(source: str, ns: dict) -> None:
    """Run a notebook cell as Jupyter does: a last bare expression is displayed (rendered to text)."""
    import ast

    tree = ast.parse(source)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, "<cell>", "exec"), ns)
    if last is not None:
        ns["display"](eval(compile(ast.Expression(last.value), "<cell>", "eval"), ns))


@pytest.mark.parametrize("missing", [("liger",), ("liger", "triton_tutorial"), ("liger", "torch_compile")])
def test_comparison_cells_run_on_a_live_frame_without_some_peers(missing, monkeypatch, capsys):
    """Liger-Kernel (or another peer) may be missing on a learner's GPU: every cell from the live benchmark
    to the host figure runs on final_rows' shapes without it, and says which providers it did not measure."""
    import re

    import pandas as pd

    from helpers import plots

    cells = ["".join(c["source"]) for c in _notebook()["cells"] if c["cell_type"] == "code"]
    start = next(i for i, s in enumerate(cells) if "lesson05.live(lesson05.final_rows)" in s)
    end = next(i for i, s in enumerate(cells) if "host.plot(" in s)  # the host table and its figure
    uses_bench = re.compile(
        r"\b(bench|fractions|against_peers|long|host)\b(?!\")"
    )  # the live frame, not data.load("bench")
    live = {lesson05.final_rows: _live_bench(missing)}
    monkeypatch.setattr(helpers, "ON_GPU", True)
    monkeypatch.setattr(lesson05, "live", lambda fn, *a, **k: live[fn].copy())
    shown = []
    ns = {
        "helpers": helpers,
        "lesson05": lesson05,
        "data": data,
        "plots": plots,
        "pd": pd,
        "re": re,
        "sms": RECORDED["sm_count"],
        "props": RECORDED,
        "claims": {},
        "display": lambda t: shown.append(repr(t)),
    }
    try:
        for source in cells[start : end + 1]:
            if uses_bench.search(source):
                _run_cell(source, ns)
    finally:
        matplotlib.pyplot.close("all")
    out = capsys.readouterr().out
    assert "not measured here: " + ", ".join(p for p in ns["providers"] if p in missing) in out, out
    assert ns["order"] and not set(missing) & set(ns["order"]) and not set(missing) & set(ns["hosts"])
    assert len(shown) >= 8 and not any(m in t for t in shown for m in missing)
    assert set(ns["cmp"]["best peer"]) <= set(ns["peers"])


# --------------------------------------------------------------------------------------------
# What the notebooks show, and where
# --------------------------------------------------------------------------------------------


def test_littles_law_is_defined_where_first_used():
    assert "**Little's law** says" in cell_with("05", "One program per SM is a cliff")
    assert "one timing" in prose("05")  # the sweeps' single timings are read for their cliffs, not their hundredths


def test_the_core_shows_the_tiled_kernel_before_judging_the_library_and_no_later_lesson():
    """helpers.softmax runs the tiled kernel: the lesson shows it before comparing the library with its peers, and
    its tables hold only what lessons 01 to 05 taught (no split kernels of lesson 06)."""
    cells = ["".join(c["source"]) for c in claims_notebook("05")["cells"]]
    kernel = next(i for i, c in enumerate(cells) if "def softmax_tiled_kernel(" in c)
    judged = next(i for i, c in enumerate(cells) if "def against_peers(" in c)
    assert kernel < judged
    code = "\n".join(c for c, cell in zip(cells, claims_notebook("05")["cells"]) if cell["cell_type"] == "code")
    assert "split" not in code and "long rows" not in code


def test_the_verdicts_use_the_margin_the_text_states():
    """'level' is within 5% of the best peer, as the text says before the verdicts."""
    assert '[0, 0.95, 1.05, float("inf")]' in code_cell_with("05", "def against_peers(")
    assert "within 5% of each other" in cell_with("05", "this lesson calls two providers **level**")


def test_the_deep_dive_times_the_exponential_the_lesson_teaches():
    quoted = "tl.exp2((x - row_max[:, None]) * LOG2E)"
    assert quoted in code_cell_with("05", "def softmax_tiled_kernel(")
    assert quoted in cell_with("05d", "One instruction per exponential")


@pytest.mark.parametrize("nb", ["05", "05d"])
def test_no_history_in_either_notebook(nb):
    """No debugging story, "before / now", branch or scratch script: not in the prose, nor in what the cells print
    (the provenance lines)."""
    text = prose(nb)
    for phrase in (
        "earlier recording",
        "before the fix",
        "probe recorded",
        "commit",
        "the tiled kernel before",
        "tiled kernel now",
        "scratch_",
        "scratch script",
        "not kept",
        "wip/",
        "branch",
    ):
        assert phrase not in text, phrase
    outputs = "\n".join("".join(o.get("text", "")) for c in claims_notebook(nb)["cells"] for o in c.get("outputs", []))
    for phrase in ("scratch", "wip/", "branch", "bench_runs", "before)", "now)"):
        assert phrase not in outputs, phrase
