"""Lesson 09's module: the key probe, the correctness and frequency checks, and both exercise checkers
fed right, untouched, raising and plausibly wrong answers (each wrong one must get the hint naming it). Then the
notebooks' cells: the lesson's plain launch, and where the cells derive the numbers their text quotes (the numbers
themselves are checked by tests/test_claims.py, from each notebook's `claims`).

Every checker must print exactly one line and never raise, whatever the learner wrote.
"""

from __future__ import annotations

import math

import pytest
import torch
import triton
import triton.language as tl
from checking import _raises, _untouched, assert_solutions_correct, status, variant, verdict
from claims import cell_with, code_cell_with
from compiling import compile_report

import helpers  # noqa: F401  (first: interpreter or GPU)
from helpers import lesson09, lesson09_exercises

# --------------------------------------------------------------------------------------------
# Keys, correctness, frequencies
# --------------------------------------------------------------------------------------------


def test_keys_order_as_logits_then_lower_column():
    x = torch.tensor([1.5, -0.0, 0.0, -2.0, float("-inf"), 3.0, -1.0, 1.5, -1e-30, 1e30])
    keys = lesson09.keys_of(x)
    assert x[keys.argsort()].tolist() == sorted(x.tolist())
    assert keys[0] > keys[7]  # equal logits: the lower column has the larger key
    assert [0x7FFFFFFF - int(k) % 2**32 for k in keys] == list(range(len(x)))


def test_check_softmax_topk_passes_the_kernel_and_fails_a_wrong_one():
    assert lesson09.check_softmax_topk()

    def unnormalized(x, k):  # the top k of exp(x - max) without dividing by the sum
        v, i = torch.exp(x.float() - x.float().max(-1, keepdim=True).values).topk(k)
        return v.to(x.dtype), i

    assert not lesson09.check_softmax_topk(unnormalized)


def test_topk_error_sees_wrong_indices_and_a_modified_input():
    x = torch.randn(2, 20, generator=torch.Generator().manual_seed(0))

    def wrong_idx(x, k):
        v, i = torch.softmax(x.float(), -1).topk(k)
        return v, (i + 1) % x.shape[-1]

    def in_place(x, k):
        x.mul_(1.0)
        x[0, 0] = 99.0
        return torch.softmax(x.float(), -1).topk(k)

    assert lesson09.topk_error(lambda x, k: torch.softmax(x.float(), -1).topk(k), x, 4) < 1e-6
    assert lesson09.topk_error(wrong_idx, x, 4) > 1e-3
    assert lesson09.topk_error(in_place, x, 4) == math.inf


def test_exact_probs_follow_the_hugging_face_order():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    q = lesson09.exact_probs(logits, top_k=3, top_p=0.7)
    p = torch.softmax(logits.double(), -1)[:3]
    p = p / p.sum()  # renormalized top 3: 0.665, 0.245, 0.090
    assert q[0] == pytest.approx(p[0] / (p[0] + p[1])) and q[2] == 0 and q[3] == 0
    assert lesson09.exact_probs(logits, top_p=0.01)[0] == 1.0  # the top token always stays
    assert lesson09.exact_probs(logits).sum() == pytest.approx(1.0)


def test_frequency_check_catches_a_wrong_sampler():
    def ignores_temperature(logits, generator=None, temperature=1.0, top_k=None, top_p=None):
        from helpers.kernels.sampling import sample

        return sample(logits, generator=generator, top_k=top_k, top_p=top_p)

    bad = lesson09.frequency_check(draws=120, settings=({"temperature": 0.3},), fn=ignores_temperature)
    assert not bad["agrees"].all()


# --------------------------------------------------------------------------------------------
# Exercise 9.1: merge two states
# --------------------------------------------------------------------------------------------


def merge_solution(a, b, k):  # the notebook's solution
    (m_a, d_a, v_a, c_a), (m_b, d_b, v_b, c_b) = a, b
    m = torch.maximum(m_a, m_b)
    if m == float("-inf"):
        d = d_a + d_b
    else:
        d = d_a * torch.exp(m_a - m) + d_b * torch.exp(m_b - m)
    values, at = torch.cat([v_a, v_b]).topk(k)
    return m, d, values, torch.cat([c_a, c_b])[at]


def _with(d_fn=None, cand=None):
    def merge(a, b, k):
        m, d, v, c = merge_solution(a, b, k)
        if d_fn is not None:
            d = d_fn(a, b, m)
        if cand is not None:
            v, c = cand(a, b, k, v, c)
        return m, d, v, c

    return merge


WRONG_9_1 = {
    "merging without rescaling": _with(d_fn=lambda a, b, m: a[1] + b[1]),
    "the factor is e^(m_A - m)": _with(d_fn=lambda a, b, m: a[1] * torch.exp(m - a[0]) + b[1] * torch.exp(m - b[0])),
    "two states of only -inf": _with(d_fn=lambda a, b, m: a[1] * torch.exp(a[0] - m) + b[1] * torch.exp(b[0] - m)),
    "keep exactly k": _with(
        cand=lambda a, b, k, v, c: (
            torch.cat([a[2], b[2]]).topk(k + 1).values,
            torch.cat([a[3], b[3]])[torch.cat([a[2], b[2]]).topk(k + 1).indices],
        )
    ),
    "not the first k of their concatenation": _with(
        cand=lambda a, b, k, v, c: (torch.cat([a[2], b[2]])[:k], torch.cat([a[3], b[3]])[:k])
    ),
    "descending order": _with(cand=lambda a, b, k, v, c: (v.flip(0), c.flip(0))),
    "the columns must move with their values": _with(cand=lambda a, b, k, v, c: (v, torch.cat([a[3], b[3]])[:k])),
}


def test_checker_9_1_contract(capsys):
    assert status(verdict(capsys, lesson09_exercises.check_9_1, merge_solution)).startswith("correct")
    assert status(verdict(capsys, lesson09_exercises.check_9_1, lesson09_exercises.merge_answer)).startswith("correct")
    assert status(verdict(capsys, lesson09_exercises.check_9_1, _untouched)).startswith("not yet")
    assert status(verdict(capsys, lesson09_exercises.check_9_1, None)).startswith("not yet")
    assert status(verdict(capsys, lesson09_exercises.check_9_1, _raises)).startswith(
        "wrong: your code raised ZeroDivisionError"
    )
    assert status(verdict(capsys, lesson09_exercises.check_9_1, lambda a, b, k: None)).startswith("wrong")


@pytest.mark.parametrize("hint", list(WRONG_9_1))
def test_checker_9_1_wrong_answers(capsys, hint):
    line = verdict(capsys, lesson09_exercises.check_9_1, WRONG_9_1[hint])
    assert status(line).startswith("wrong") and hint in line, line


def test_checker_9_1_sees_a_modified_input(capsys):
    def in_place(a, b, k):
        a[2][0] = 0.0
        return merge_solution(a, b, k)

    assert "changed its inputs" in verdict(capsys, lesson09_exercises.check_9_1, in_place)


# --------------------------------------------------------------------------------------------
# Exercise 9.2: the sampling step, in Triton
# --------------------------------------------------------------------------------------------


@triton.jit
def _step(out_ptr, logits_ptr, u_ptr, row_stride, k, top_p, inv_temp, K: tl.constexpr, MISTAKE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    lane = tl.arange(0, K)
    v = tl.load(logits_ptr + row * row_stride + lane)
    if MISTAKE != 2:
        v = v * inv_temp
    if MISTAKE == 3:
        live = lane <= k
    elif MISTAKE == 4:
        live = lane < K
    else:
        live = lane < k
    e = tl.exp(v - tl.max(v, 0))
    q = tl.where(live, e, 0.0)
    if MISTAKE == 5:
        q = q / tl.sum(e, 0)
    else:
        q = q / tl.sum(q, 0)
    incl = tl.cumsum(q, 0)
    if MISTAKE == 1:
        keep = live & (incl < top_p)
    else:
        keep = live & (incl - q < top_p)
    kept = tl.sum(tl.where(keep, q, 0.0), 0)
    target = tl.load(u_ptr + row)
    if MISTAKE != 6:
        target = target * kept
    n_keep = tl.sum(keep.to(tl.int32), 0)
    pos = tl.minimum(tl.sum((keep & (incl <= target)).to(tl.int32), 0), n_keep - 1)
    if MISTAKE == 7:
        pos = pos * 0 + 1
    tl.store(out_ptr + row, pos)


@triton.jit
def step_right(out_ptr, logits_ptr, u_ptr, row_stride, k, top_p, inv_temp, K: tl.constexpr):
    _step(out_ptr, logits_ptr, u_ptr, row_stride, k, top_p, inv_temp, K, 0)


STEP = "_step(out_ptr, logits_ptr, u_ptr, row_stride, k, top_p, inv_temp, K, 0)"
# 9.2's plausible answers: _step with a mistake (its last argument), and rows read K apart instead of row_stride
V = {
    name: variant(step_right, name, {STEP: STEP.replace("K, 0)", f"K, {mistake})")})
    for name, mistake in (
        ("step_drop_top", 1),
        ("step_temp_after", 2),
        ("step_k_plus_1", 3),
        ("step_no_top_k", 4),
        ("step_no_renorm", 5),
        ("step_no_mass", 6),
        ("step_constant", 7),
    )
}
V["step_contiguous_rows"] = variant(step_right, "step_contiguous_rows", {STEP: STEP.replace("row_stride", "K")})


@triton.jit
def step_no_store(out_ptr, logits_ptr, u_ptr, row_stride, k, top_p, inv_temp, K: tl.constexpr):
    row = tl.program_id(0)
    if row > 1000000:
        tl.store(out_ptr + row, 0)


@triton.jit
def step_untouched(out_ptr, logits_ptr, u_ptr, row_stride, k, top_p, inv_temp, K: tl.constexpr):
    # Temperature, then top-k (renormalized), then the nucleus top_p, then the inverse CDF at u.
    raise NotImplementedError  # your code here


def step_not_a_kernel(out_ptr, logits_ptr, u_ptr, row_stride, k, top_p, inv_temp, K):
    return None


@pytest.mark.parametrize(
    "kernel, expected, words",
    [
        (step_right, "correct", "draws"),
        (step_untouched, "not yet", ""),
        (None, "not yet", ""),
        (step_not_a_kernel, "wrong", "@triton.jit"),
        (V["step_drop_top"], "wrong", "drops the top token"),
        (V["step_temp_after"], "wrong", "before the softmax"),
        (V["step_k_plus_1"], "wrong", "k + 1 tokens"),
        (V["step_no_top_k"], "wrong", "only the first k lanes"),
        (V["step_no_renorm"], "wrong", "renormalize over the top k"),
        (V["step_no_mass"], "wrong", "scale u by the kept mass"),
        (V["step_constant"], "wrong", "the positions should be"),
        (V["step_contiguous_rows"], "wrong", "row_stride"),
        (step_no_store, "wrong", "nothing stored"),
    ],
    ids=[
        "right",
        "untouched",
        "none",
        "not_a_kernel",
        "drop_top",
        "temp_after",
        "k_plus_1",
        "no_top_k",
        "no_renorm",
        "no_mass",
        "constant",
        "contiguous_rows",
        "no_store",
    ],
)
def test_checker_9_2(capsys, kernel, expected, words):
    line = verdict(capsys, lesson09_exercises.check_9_2, kernel)
    assert status(line).startswith(expected), line
    assert words in line, line


def test_every_mistake_of_9_2_changes_some_position():
    u = lesson09_exercises._uniforms()
    for mistake in lesson09_exercises.HINTS_9_2:
        assert any(
            not torch.equal(
                lesson09_exercises.positions(v, k, p, t, u), lesson09_exercises.positions(v, k, p, t, u, mistake)
            )
            for v, k, p, t in lesson09_exercises.CASES_9_2
        ), mistake


def test_the_notebooks_solutions_are_correct(capsys, tmp_path):
    """The code of each `solution` cell of the lesson, run through its checker."""
    assert_solutions_correct(
        capsys,
        "09",
        tmp_path,
        {"merge": lesson09_exercises.check_9_1, "sample_step_kernel": lesson09_exercises.check_9_2},
    )


# --------------------------------------------------------------------------------------------
# The benchmark's rows (the GPU timers faked: the code path runs here, the numbers do not matter)
# --------------------------------------------------------------------------------------------


def test_sampling_rows_with_fake_timers(monkeypatch):
    from helpers import measure

    monkeypatch.setattr(measure, "require_gpu", lambda what="": None)
    monkeypatch.setattr(measure, "eager_ms", lambda fn, rep=0: (fn(), 0.02)[1])
    times = iter([0.010, 0.011, 0.012] * 100)
    monkeypatch.setattr(measure, "gpu_ms", lambda fn, rep=0: (fn(), next(times))[1])
    monkeypatch.setattr(measure, "host_us", lambda fn, calls=0, loops=3: 5.0)
    names = ("copy", "course_softmax_topk", "course_sample", "torch_softmax_topk", "torch_hf_sample")
    rows = lesson09.sampling_rows([(2, 300)], dtypes=("float32", "bfloat16"), names=names, rounds=3)
    assert len(rows) == 2 * len(names)
    assert {r["provider"] for r in rows} == set(names)
    assert all(r["status"] == "ok" for r in rows), rows
    copy = next(r for r in rows if r["provider"] == "copy" and r["dtype"] == "float32")
    assert copy["graph_us"] == pytest.approx(11.0) and copy["frac_of_one_read"] == pytest.approx(0.5)
    assert copy["graph_spread"] == pytest.approx((0.012 - 0.010) / 0.011, abs=1e-3)
    assert set(rows[0]) == {
        "dtype",
        "M",
        "N",
        "provider",
        "graph_us",
        "eager_us",
        "host_us",
        "graph_spread",
        "spread",
        "frac_of_one_read",
        "status",
    }


def test_sampling_rows_reports_a_failing_provider(monkeypatch):
    from helpers import measure

    monkeypatch.setattr(measure, "require_gpu", lambda what="": None)
    monkeypatch.setattr(measure, "eager_ms", lambda fn, rep=0: 0.02)
    monkeypatch.setattr(measure, "gpu_ms", lambda fn, rep=0: 0.01)
    monkeypatch.setattr(measure, "host_us", lambda fn, calls=0, loops=3: 5.0)
    monkeypatch.setattr(lesson09, "softmax_topk", lambda x, k: (torch.zeros(x.shape[0], k, device=x.device), None))
    rows = lesson09.sampling_rows([(2, 300)], dtypes=("float32",), names=("copy", "course_softmax_topk"), rounds=1)
    bad = next(r for r in rows if r["provider"] == "course_softmax_topk")
    assert bad["status"].startswith("failed: AssertionError") and bad["graph_us"] != bad["graph_us"]  # NaN


def test_sampling_bench_smoke_and_its_gpu_guard(capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "tools" / "sampling_bench.py"
    spec = importlib.util.spec_from_file_location("sampling_bench", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--smoke"]) == 0
    out = capsys.readouterr().out
    assert "course_softmax_topk: ok" in out and "course_sample: ok" in out and "torch_hf_sample: ok" in out
    if not helpers.ON_GPU:
        assert bench.main([]) == 2


def test_no_answer_on_screen_before_its_checker():
    """No code cell above an exercise's checker holds the lines of its answer (the library's versions
    come after the solution cells)."""
    import json
    from pathlib import Path

    nb = json.loads((Path(__file__).resolve().parent.parent / "notebooks" / "09_vocab_sampling.ipynb").read_text())
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    answers = {
        "lesson09_exercises.check_9_1(": ("exp(m_a - m)", "torch.cat([v_a, v_b])", "d_s * tl.exp(m_s - m)"),
        "lesson09_exercises.check_9_2(": ("incl - q < top_p", "u * kept", "tl.cumsum("),
    }
    for checker, lines in answers.items():
        at = next(i for i, c in enumerate(code) if checker in c)
        for line in lines:
            assert not any(line in c for c in code[:at]), (checker, line)


def test_merge_stages_cuts_the_library_kernel_and_its_uncut_copy_agrees(tmp_path):
    """tools/merge_stages.py finds every line its cuts go after in the library's lane_merge_kernel (a changed
    kernel fails here, not on a GPU), each cut runs, and the uncut copy gives softmax_topk's answer. The file it
    writes the cut copy to is gone when its process ends."""
    import importlib.util
    import inspect
    import os
    import subprocess
    import sys
    from pathlib import Path

    from helpers.kernels import topk_lanes

    path = Path(__file__).resolve().parent.parent / "tools" / "merge_stages.py"
    spec = importlib.util.spec_from_file_location("merge_stages", path)
    stages = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stages)
    kernel = inspect.getsource(topk_lanes.lane_merge_kernel.fn)
    src = stages.staged_source(kernel)
    assert all(src.count(f"if STOP == {s}:") == 1 for s in range(len(stages.CUTS)))
    with pytest.raises(ValueError, match="update tools/merge_stages.py"):
        stages.staged_source(kernel.replace("T = (t - 2**31).to(tl.int32)", "T = t"))
    run = subprocess.run(
        [sys.executable, str(path), "--smoke"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.count(": ran") == len(stages.STEPS)
    assert "uncut copy gives the library's answer: True" in run.stdout
    assert list(tmp_path.iterdir()) == []
    if not helpers.ON_GPU:
        assert stages.main([]) == 2


# --------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------


def test_figures_are_named_for_the_lesson_and_draw():
    import matplotlib.pyplot as plt

    assert lesson09.FIGURES and all(name.startswith("09_") for name in lesson09.FIGURES)
    figs = {name: make() for name, make in lesson09.FIGURES.items()}
    try:
        ax = figs["09_fixed_cost"].axes[0]
        assert ax.get_xlabel() and ax.get_ylabel() and ax.get_xscale() == "log" and ax.get_yscale() == "log"
        labels = ax.get_legend_handles_labels()[1]
        assert {
            "softmax_topk(x, 50), H100",
            "softmax_topk(x, 50), H200",
            "one read (the floor)",
            "0.85 of one read (the target)",
        } <= set(labels)
    finally:
        for fig in figs.values():
            plt.close(fig)


def test_the_fixed_cost_figure_draws_what_it_is_given_and_leaves_it_alone():
    import matplotlib.pyplot as plt

    from helpers import data

    bench = data.load("sampling", gpu="h100")
    before = bench.copy()
    fig = lesson09.plot_fixed_cost({"H100": bench}, 12.5)
    try:
        ax = fig.axes[0]
        filled, hollow = ax.collections[:2]
        us = bench.pivot_table(index=["dtype", "M", "N"], columns="provider", values="graph_us")
        assert sorted(map(tuple, filled.get_offsets().tolist())) == sorted(zip(us["copy"] / 2, us.course_softmax_topk))
        assert len(hollow.get_offsets()) == len(us)
        dashed = [line for line in ax.lines if line.get_label() == "one read + 12.5 µs"][0]
        x, y = dashed.get_data()
        assert all(abs(b - a - 12.5) < 1e-9 for a, b in zip(x, y))
    finally:
        plt.close(fig)
    assert bench.equals(before)


def test_the_fixed_cost_figure_rejects_what_it_cannot_draw():
    from helpers import data

    with pytest.raises(ValueError, match="at least one recording"):
        lesson09.plot_fixed_cost({}, 10.0)
    no_copy = data.load("sampling", gpu="h100").query("provider != 'copy'")
    with pytest.raises(ValueError, match=r"no \['copy'\] rows"):
        lesson09.plot_fixed_cost({"H100": no_copy}, 10.0)


def test_the_lane_argument_holds_on_random_slices_ties_included():
    """Every logit of the top k is a candidate: in a kept lane's maximum chunk or in an unclean lane."""
    g = torch.Generator().manual_seed(5)
    for trial in range(200):
        steps, lanes, chunk = 2 + trial % 4, 2 + trial % 7, 1 + trial % 4
        x = torch.randn(steps, lanes, chunk, generator=g)
        if trial % 3 == 0:
            x = x.mul(2).round()  # many ties
        k = 1 + trial % lanes
        ex = lesson09.lane_example(x, k=k)
        top = x.flatten().topk(k).values
        cand = torch.tensor(sorted((float(x[w]) for w in ex["candidates"]), reverse=True))
        assert len(cand) >= k and torch.equal(cand[:k], top), (trial, x, k)
        assert all(float(x[w]) >= ex["T"] for w in ex["candidates"])


def test_the_lane_example_shows_every_case_and_leaves_its_input_alone():
    ex = lesson09.lane_example()
    assert ex["unclean"].sum() == 1 and (~ex["kept"]).sum() == 1 and ex["top"] <= ex["candidates"]
    x = ex["x"].clone()
    x[0, 3, 0] = 9.5  # lane 3's maximum now the largest
    before = x.clone()
    other = lesson09.lane_example(x)
    assert torch.equal(x, before) and other["kept"][3] and not other["kept"][2] and abs(other["T"] - 8.0) < 1e-6
    with pytest.raises(ValueError, match="shape"):
        lesson09.lane_example(torch.zeros(4, 4))
    with pytest.raises(ValueError, match="k must be"):
        lesson09.lane_example(k=5)


def test_the_lane_figure_draws_every_cell_and_outlines_each_maximum():
    import matplotlib.pyplot as plt

    ex = lesson09.lane_example()
    fig = lesson09.plot_lanes(ex)
    try:
        patches = fig.axes[0].patches
        steps, lanes, chunk = ex["x"].shape
        assert len(patches) == steps * lanes * chunk + lanes
        assert sum(not p.get_fill() for p in patches) == lanes
        bold = [t for t in fig.axes[0].texts if t.get_fontweight() == "bold"]
        assert len(bold) == len(ex["candidates"])
    finally:
        plt.close(fig)


# --------------------------------------------------------------------------------------------
# The lesson's own kernels, compiled as on a GPU
# --------------------------------------------------------------------------------------------
COMPILE_THE_LESSONS_KERNELS = r"""
import json, sys
import torch
torch.cuda.is_available = lambda: True  # helpers decorates its kernels for compilation, as on a GPU
import helpers
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

nb = json.load(open(sys.argv[1]))
cells = [c["source"] for c in nb["cells"] if c["cell_type"] == "code" and "@triton.jit" in c["source"]]
with open(sys.argv[2] + "/lesson09_kernels.py", "w") as f:
    f.write("import torch\nimport triton\nimport triton.language as tl\n\n" + "\n\n".join(cells))
sys.path.insert(0, sys.argv[2])
import lesson09_kernels as L

SLICE = {"stats_ptr": "*fp32", "keys_ptr": "*i64", "x_ptr": "*fp32", "x_row_stride": "i32", "x_col_stride": "i32",
         "n_cols": "i32", "slice_len": "i32", "n_slices": "i32", "K": "constexpr", "BLOCK": "constexpr"}
MERGE = {"p_ptr": "*fp32", "idx_ptr": "*i64", "stats_ptr": "*fp32", "keys_ptr": "*i64", "n_slices": "i32", "k": "i32",
         "K": "constexpr", "SLICES": "constexpr"}
done = []
for fn, sig, const in [(L.topk_slice_kernel, SLICE, {"K": 64, "BLOCK": 1024}),
                       (L.topk_merge_kernel, MERGE, {"K": 64, "SLICES": 4})]:
    triton.compile(ASTSource(fn=fn, signature=sig, constexprs=const), target=GPUTarget("cuda", 90, 32))
    done.append(fn.__name__)
print(json.dumps(done))
"""


def test_the_lessons_two_kernels_compile_for_a_gpu(tmp_path):
    """The lesson's topk_slice_kernel and topk_merge_kernel, as its cells write them, compiled for sm_90 by the
    installed Triton without a GPU: a compiled kernel may read a global only if it is a tl.constexpr (the
    interpreter reads any), which the lesson's SORT must be."""
    from pathlib import Path

    nb = Path(__file__).resolve().parent.parent / "notebooks" / "09_vocab_sampling.ipynb"
    assert compile_report(COMPILE_THE_LESSONS_KERNELS, nb, tmp_path, []) == ["topk_slice_kernel", "topk_merge_kernel"]


# --------------------------------------------------------------------------------------------
# The notebooks' cells: how they launch, and where they derive what their text quotes
# --------------------------------------------------------------------------------------------


def test_the_teaching_kernels_are_launched_plainly():
    """The lesson launches its two kernels as lesson 03 does, with no plan cache or launch runtime of the library's."""
    cell = code_cell_with("09", "def softmax_topk_two_kernels(")
    assert "topk_slice_kernel[(M, S)](" in cell and "topk_merge_kernel[(M,)](" in cell
    lesson = "\n".join(code_cell_with("09", p) for p in ("def topk_slice_kernel(", "def topk_merge_kernel(")) + cell
    for word in ("launch.", "Launch(", "Plan(", "runner(", "Cache(", "RowWise"):
        assert word not in lesson, word


def test_the_lessons_benchmark_numbers_are_derived_in_sight():
    """The cells that put the benchmark's numbers into `claims` derive them from the tables above them."""
    few = code_cell_with("09", "sample_ratio = ")
    assert "torch_topk / us.course_topk_per_program" in few and "few & quiet" in few and "claims |=" in few
    many = code_cell_with("09", "course, design = frac.course_softmax_topk")
    assert "(course >= 0.85).sum()" in many and "design_ratio.min()" in many and "claims |=" in many
    assert "us.course_topk_per_program / us.course_softmax_topk" in many


IN_SIGHT = {  # a code cell of the deep dive (by a phrase of it) -> lines it derives its quoted numbers with
    "ends = ends.assign(one_read": ["ends.course_softmax_topk - ends.one_read"],
    "def unclean_lanes(": [
        "random_rows = torch.randn(32, 256000, generator=torch.Generator().manual_seed(0)) * 3",
        "lane_plan(M, 256000, 4, target_programs=132 * LANE_PROGRAMS_PER_SM)",  # float32: chunks of 4
    ],
    "def search(m, stop": ["lane_launches(", "search(m, stop)"],  # the kernel's own stop, replayed
    "out_of_reach = reach": [
        "bench.query(\"provider == 'copy' and M == 1\").graph_us.min()",
        "one_read / 0.85 - one_read",
    ],
    'loops = data.load("topk_loop"': ['after = us["topk"] - us["loop"]'],
    'data.load("bench_runs/topk_loop_stages"': ["variant in ['lib', 'st3']"],
    'merge_ab = data.load("topk_merge"': ["big = saved > 0.08", "gain[~big]"],
    'data.load("topk_merge_stages"': [
        "chain.diff()",
        "data.noisy(spread.shift())",
        "(steps.max() / whole_merge).max()",
        "(whole_merge - steps.max()).min()",
    ],
    'h200 = data.load("sampling", gpu="h200")': [
        'pd.concat([bench.assign(gpu="H100"), h200.assign(gpu="H200")])',
        'above = us["course_softmax_topk"] - us["copy"] / 2',
        "noisy=gpu_frac.apply(lambda column: noisy_shape)",
    ],
    "quiet = ~noisy_shape": [
        "f, s, a = gpu_frac[quiet], speedup[quiet], above[quiet]",
        "(a.H200 - a.H100).abs().max()",
    ],
    "fixed_us = a.stack().median()": [
        "needs = fixed_us * 0.85 / 0.15",
        'lesson09.plot_fixed_cost({"H100": bench, "H200": h200}, fixed_us)',
    ],
    'data.load("sampling_flashinfer", gpu="h100")': ['data.load("sampling_flashinfer", gpu="h200")'],
    'us[["flashinfer_sample", "flashinfer_sample_scaled"]].div(': ["radix & quiet", '("float32", 1)'],
    "host = h200.pivot_table(": ['"course_softmax_topk_jit"', 'few = host.index.get_level_values("M") <= 8'],
    "fi_run = fi_h200.pivot_table(": [
        "host.course_softmax_topk_jit / t",
        "fi_run.course_sample",
        "data.noisy(eager_spread",
    ],
    "ex = lesson09.lane_example(k=3)": ["plots.show(lesson09.plot_lanes(ex))"],
}


@pytest.mark.parametrize("phrase", list(IN_SIGHT), ids=list(IN_SIGHT))
def test_the_deep_dives_quoted_numbers_are_derived_in_sight(phrase):
    cell = code_cell_with("09d", phrase)
    for line in IN_SIGHT[phrase]:
        assert line in cell, (phrase, line)


def test_the_deep_dive_says_what_its_cells_compute():
    assert "32 random float32 rows through the same lanes (chunks of 4)" in cell_with(
        "09d", "How many unclean lanes does a row have?"
    )
    # FlashInfer's recording timed the host side of an older wrapper: the lesson compares host times with the H200
    # benchmark's only, and its FlashInfer cell reads none.
    assert "host_us" not in code_cell_with("09d", 'us[["flashinfer_sample", "flashinfer_sample_scaled"]].div(')


def test_the_deep_dive_tallies_no_difference_inside_the_noise():
    """Where two recordings or two variants differ within the run-to-run spread, the text gives ranges, not a count of
    the shapes where one is ahead or a trend; nor does it call a loop by a design it no longer has."""
    h200 = cell_with("09d", "On the H200 `softmax_topk` reaches")
    for phrase in ("lower at every shape", " of 16 ", "one logit a step", "the copy's speed-up the larger"):
        assert phrase not in h200, phrase
    assert "the H200's the smaller" not in h200
    assert "one logit a step" not in cell_with("09d", "The same benchmark on an H200")
    assert "faster at all" not in cell_with("09d", "Where the shorter chain saves more than 8% of the time")
    assert "first written" not in cell_with("09d", "And the merge itself?")
    flashinfer = cell_with("09d", "is ahead of FlashInfer's default at every shape on both GPUs")
    assert "host time" not in flashinfer and "µs of the CPU" not in flashinfer


def test_lane_plan_pipelines_a_slice_of_8_steps_or_more():
    """The deep dive says `lane_plan` pipelines the loop from 8 steps a slice on: so it does at every benchmark shape
    (an H100's or H200's 132 SMs), and both cases occur."""
    from helpers.kernels.topk_lanes import LANE_BYTES, LANE_PROGRAMS_PER_SM, lane_plan

    assert "`lane_plan` asks for it from 8 steps a slice on" in cell_with("09d", "software-pipelined")
    seen = set()
    for M in (1, 8, 64, 256):
        for N in (32000, 128256, 151936, 256000):
            for size in (2, 4):
                plan = lane_plan(M, N, LANE_BYTES // size, target_programs=132 * LANE_PROGRAMS_PER_SM)
                steps = plan["slice_len"] // (plan["block"] * plan["chunk"])
                assert plan["stages"] == (3 if steps >= 8 else 1), (M, N, size)
                seen.add(plan["stages"])
    assert seen == {1, 3}
