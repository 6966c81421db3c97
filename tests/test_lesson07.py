"""Lesson 07 (attention) and its deep dive: the notebooks' teaching cells (the trace, the teaching kernel
against the library, the correctness table, the large scores, the merge) against float64, the tiles against
brute force, the lesson's pandas cells on a frame from the live sweep (its GPU faked), the sweep's figure, the
benchmark's logic (tools/attention_bench.py) on the CPU (rounds, medians, spreads), the deep dive's budget cell and the
library's tiles, the recordings' spreads, the prose's wording (no tallies inside the noise, no history), and the
exercise checkers (``test_checker_*``), each fed the right answer, the untouched template, and the plausible wrong
answers, one test each.

Every checker must print exactly one line and never raise, whatever the learner wrote.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import attention_bench as AB  # tools/attention_bench.py
import matplotlib
import pandas as pd
import pytest
import torch
from checking import module_from, verdict

import helpers
from helpers import data, gpu_data, lesson07, lesson07_exercises, measure, plots
from helpers.kernels import attention, naive_attention
from helpers.kernels.attention import TmaConfig, attention_config, heads_per_group, tma_config
from helpers.lesson07 import FULL, MASKED, SKIPPED
from helpers.reference import round_up_err

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "07_attention.ipynb"
DEEP_DIVE = ROOT / "notebooks" / "07d_attention_in_depth.ipynb"


def _notebook_code(startswith: str, notebook: Path = NOTEBOOK) -> str:
    """The source of the notebook's code cell that starts with ``startswith``."""
    cells = [("".join(c["source"]), c["cell_type"]) for c in json.loads(notebook.read_text())["cells"]]
    hits = [s for s, t in cells if t == "code" and s.lstrip().startswith(startswith)]
    assert len(hits) == 1, f"expected one code cell starting with {startswith!r} in {notebook.name}, found {len(hits)}"
    return hits[0]


def _run_cells(*starts, notebook: Path = NOTEBOOK, **names) -> dict:
    """Run the notebook's cells that start with ``starts``, in order, in one namespace (with an empty ``claims``, which
    the notebook's first cell starts)."""
    ns = dict(
        claims={},
        helpers=helpers,
        torch=torch,
        math=math,
        pd=pd,
        data=data,
        gpu_data=gpu_data,
        lesson07=lesson07,
        plots=plots,
        attention=attention,
        naive_attention=naive_attention,
        round_up_err=round_up_err,
        **names,
    )
    for s in starts:
        exec(_notebook_code(s, notebook), ns)
    return ns


# --- The lesson's teaching cells -------------------------------------------------------------


def test_reference_and_naive_agree():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 7, 16, generator=g) for _ in range(3))
    for causal in (False, True):
        out, lse = lesson07.reference_attention(q, k, v, causal)
        assert out.dtype == lse.dtype == torch.float64
        torch.testing.assert_close(naive_attention(q.double(), k.double(), v.double(), causal=causal), out)
    q1 = torch.zeros(1, 3, 16, dtype=torch.float64)  # every score 0: query i weighs keys 0..i alike
    v1 = torch.arange(3, dtype=torch.float64)[:, None].expand(1, 3, 16)
    out, lse = lesson07.reference_attention(q1, q1, v1, causal=True)
    assert out[0, :, 0].tolist() == [0.0, 0.5, 1.0] and torch.allclose(
        lse[0], torch.log(torch.arange(1.0, 4.0, dtype=torch.float64))
    )


def _markdown(notebook: Path = NOTEBOOK) -> str:
    """The notebook's prose, its markdown cells joined."""
    return "\n\n".join(
        "".join(c["source"]) for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "markdown"
    )


def test_memory_and_traffic_cells():
    ns = _run_cells("heads, D, size", "tr = pd.DataFrame", "tflops, tbps")
    mem, tr = ns["mem"].set_index("S"), ns["tr"].set_index("S")
    # what the prose says of the numbers the cells put into claims: nearly all of an 80 GB H100 at 16K; at 32K the
    # scores alone more than an H100 holds, scores and probabilities more than a 141 GB H200
    assert mem.loc[16384, "naive peak"] <= 80 < mem.loc[32768, "scores"] and 141 < mem.loc[32768, "naive peak"]
    assert abs(tr.loc[16384, "naive FLOP/B"] - 128 / 3) < 1  # D/3 at 16K, to within one
    assert "six passes" in _markdown() and "6 * mem.S**2" in _notebook_code("tr = pd.DataFrame")
    assert mem.loc[16384, "scores"] == pytest.approx(64 * 16384**2 * 2 / 1e9)
    assert mem.loc[16384, "naive peak"] == pytest.approx((2 * 64 * 16384**2 * 2 + 4 * 64 * 16384 * 128 * 2) / 1e9)
    assert mem.loc[16384, "fits 80 GB"] == "yes" and mem.loc[32768, "fits 80 GB"] == "no"
    assert (mem.blockwise < mem["naive peak"]).all()
    assert (tr["once GB"] <= tr["blockwise GB"]).all() and (tr["blockwise GB"] < tr["naive GB"]).all()
    assert ((tr["naive FLOP/B"] < 128 / 3) & (tr["naive FLOP/B"] > 39)).all()  # D/3 = 42.7 for long rows
    fig = _run_cells("fig, ax = plots.new_figure(7.0, 3.8)\nmem.plot", mem=ns["mem"])["fig"]
    assert isinstance(fig, matplotlib.figure.Figure) and len(fig.axes[0].lines) == 4  # two curves, two GPUs
    matplotlib.pyplot.close(fig)


def test_trace_matches_float64_after_every_block():
    ns = _run_cells("def attention_step", "q1 = torch.tensor")
    steps, K, V, q = ns["steps"], ns["K1"], ns["V1"], ns["q1"]
    assert [s["m_new"] for s in steps] == [3.0, 5.0, 5.0]
    assert [round(s["alpha"], 6) for s in steps] == [0.0, round(math.exp(-2), 6), 1.0]
    for s in steps:
        assert (s["out"] - s["exact"]).abs().max() < 1e-12 and abs(s["lse"] - s["logsumexp"]) < 1e-12
    torch.testing.assert_close(steps[-1]["out"], torch.softmax(K @ q, 0) @ V)
    fig = lesson07.plot_attention_trace(steps, V)
    assert isinstance(fig, matplotlib.figure.Figure) and len(fig.axes) == 3
    matplotlib.pyplot.close(fig)


@pytest.mark.parametrize(
    "sq,sk,bm,bn,causal",
    [
        (300, 400, 128, 64, False),
        (512, 512, 128, 64, True),
        (77, 77, 32, 16, True),
        (50, 70, 32, 16, False),
        (100, 100, 16, 64, True),
        (33, 33, 64, 32, True),
    ],
)
def test_tiles_agree_with_brute_force(sq, sk, bm, bn, causal):
    kinds = lesson07.tile_kinds(sq, sk, bm, bn, causal)
    for i, row in enumerate(kinds):
        for j, kind in enumerate(row):
            qs = range(i * bm, min((i + 1) * bm, sq))
            ks = range(j * bn, (j + 1) * bn)
            visible = [(a, c) for a in qs for c in ks if c < sk and (not causal or c <= a)]
            if kind == SKIPPED:
                assert not visible
            elif kind == FULL:  # every key of the block exists and every query of the block may see it
                assert all(c < sk and (not causal or c <= i * bm) for c in ks)
            else:
                assert visible and kind == MASKED
    c = lesson07.tile_counts(sq, sk, bm, bn, causal)
    assert c[FULL] + c[MASKED] + c[SKIPPED] == c["total"]


@pytest.mark.parametrize("seq,bm,bn", [(37, 32, 16), (50, 16, 16), (45, 16, 32), (100, 64, 16), (7, 16, 16)])
def test_visible_keys_of_the_right_bounds_is_causal(seq, bm, bn):
    assert lesson07_exercises.visible_keys(seq, bm, bn) == [i + 1 for i in range(seq)]


def test_every_mistake_of_7_2_shows_in_the_checker_cases():
    """Each mistake changes which keys some row sees, and no two mistakes look alike, over the cases."""
    cases = lesson07_exercises.CASES_7_2
    seen = {
        kind: [lesson07_exercises.visible_keys(c[1], c[3], c[4], kind) for c in cases]
        for kind in lesson07_exercises.HINTS_7_2
    }
    right = [lesson07_exercises.visible_keys(c[1], c[3], c[4]) for c in cases]
    assert all(s != right for s in seen.values())
    assert len({json.dumps(s) for s in seen.values()}) == len(seen)
    assert all(c[1] % c[3] and c[1] % c[4] for c in cases)  # no length a multiple of its tiles


def test_plot_tiles():
    fig = lesson07.plot_tiles()
    assert isinstance(fig, matplotlib.figure.Figure)
    matplotlib.pyplot.close(fig)


@pytest.mark.parametrize(
    "heads,seq,d,bm,bn",
    [(3, 50, 16, 32, 16), (2, 37, 32, 16, 32), (1, 64, 16, 16, 16), (2, 5, 16, 16, 16), (1, 45, 64, 32, 16)],
)
def test_the_teaching_kernel_agrees_with_the_library(tmp_path, heads, seq, d, bm, bn):
    """The lesson's attention_kernel, as its cell defines it, and helpers.attention on the same inputs (lengths that
    are and are not multiples of the blocks, BLOCK_M larger than, equal to and smaller than BLOCK_N)."""
    import triton

    kernel = _module_from(
        _notebook_code("@triton.jit\ndef attention_kernel"), tmp_path, f"k07_teach_{seq}_{bm}_{bn}"
    ).attention_kernel
    g = torch.Generator().manual_seed(seq)
    q, k, v = (torch.randn(heads, seq, d, generator=g).to(helpers.DEVICE) for _ in range(3))
    out = torch.empty_like(q)
    kernel[(triton.cdiv(seq, bm), heads)](
        out, q, k, v, seq, q.stride(0), math.log2(math.e) / math.sqrt(d), HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn
    )
    tol = 1e-2 if helpers.ON_GPU else 1e-5  # on a GPU the kernel's q @ k^T rounds to TF32
    torch.testing.assert_close(out, attention(q, k, v), atol=tol, rtol=tol)
    torch.testing.assert_close(out.cpu().double(), lesson07.reference_attention(q, k, v)[0], atol=tol, rtol=tol)


def test_the_teaching_kernels_launch_cell(tmp_path):
    import triton

    kernel = _module_from(
        _notebook_code("@triton.jit\ndef attention_kernel"), tmp_path, "k07_teach_cell"
    ).attention_kernel
    ns = _run_cells("torch.manual_seed(0)\nheads, seq, d", attention_kernel=kernel, triton=triton)
    torch.testing.assert_close(ns["out"].cpu().double(), ns["ref"], atol=1e-2 if helpers.ON_GPU else 1e-5, rtol=1e-3)


def _sweep_frame():
    att = data.load("attention", gpu="h100")
    ok = att.query("status == 'ok'")
    tf = ok.pivot_table(index=["dtype", "D", "causal", "S"], columns="provider", values="graph_tflops").loc["float16"]
    failed = att[att.status.str.startswith("wrong") & att.dtype.eq("float16")][["D", "causal", "S", "provider"]]
    return tf, failed.itertuples(index=False)  # an iterator, as the deep dive passes it


@pytest.mark.parametrize(
    "providers",
    [
        ["course", "sdpa_cudnn", "naive"],
        ["course", "course_pointer", "tutorial", "sdpa", "sdpa_cudnn", "sdpa_flash", "sdpa_efficient", "naive"],
    ],
    ids=["lesson", "deep dive"],
)
def test_the_sweep_figure_keeps_its_legend_off_the_data(providers):
    """One legend, below every panel (it hid the tutorial's points when it sat inside the first one), and the
    outputs that failed the float64 check marked, with their own legend entry, where the tutorial is drawn."""
    tf, failed = _sweep_frame()
    fig = lesson07.plot_sweep(tf[providers], providers, failed=failed)
    try:
        assert len(fig.legends) == 1 and not any(ax.get_legend() for ax in fig.axes)
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        top = fig.legends[0].get_window_extent(r).y1
        assert all(top <= ax.get_tightbbox(r).y0 + 1 for ax in fig.axes)
        labels = [t.get_text() for t in fig.legends[0].get_texts()]
        assert labels[: len(providers)] == providers
        assert any("failed the float64 check" in t for t in labels) == ("tutorial" in providers)
        crosses = [line for ax in fig.axes for line in ax.lines if line.get_marker() == "x"]
        assert len(crosses) == (2 if "tutorial" in providers else 0)  # fp16: D = 64 at 8K, D = 128 at 4K
    finally:
        matplotlib.pyplot.close(fig)


def test_launch_cell_and_the_correctness_table():
    from helpers.kernels.attention import attention_plan

    ns = _run_cells(
        "torch.manual_seed(0)\nq = torch.randn",
        "TOLERANCES = {",
        "cases = (",
        notebook=DEEP_DIVE,
        attention_plan=attention_plan,
    )
    correct = ns["correct"]
    assert len(correct) == 3 * len(ns["cases"])
    names = set(correct.index.get_level_values("case"))  # irregular lengths, causal, one query, a scale, large scores
    assert {"Sq = 50, Sk = 70", "causal, S = 77", "one query, Sk = 200", "large scores, causal"} <= names
    assert (correct[["of tolerance", "of LSE tolerance"]] <= 1).all().all()


def test_tolerance_grows_with_the_scores():
    ns = _run_cells("TOLERANCES = {", notebook=DEEP_DIVE)
    tolerance, tolerances = ns["tolerance"], ns["TOLERANCES"]
    q = torch.ones(1, 2, 16)
    a_small, r = tolerance(q, q, q)
    a_big, r2 = tolerance(q * 100, q * 100, q)
    assert r == r2 == tolerances[torch.float32][1] and a_big > a_small >= tolerances[torch.float32][0]


def test_large_scores_cell(capsys):
    _run_cells("g = torch.Generator().manual_seed(7)")
    lines = capsys.readouterr().out.splitlines()
    assert "float16 holds at most 65,504" in lines[0]
    assert not lines[1].split(":")[1].strip().startswith("0 NaN")  # the naive fp16 version breaks
    assert lines[2].split(":")[1].strip().startswith("0 NaN")  # the kernel does not


def test_merge_two_and_the_split_keys_cell(capsys):
    ns = _run_cells("def merge_two")
    o1, o2 = torch.randn(3, 4), torch.randn(3, 4)
    l1, l2 = torch.randn(3), torch.full((3,), float("-inf"))
    o, lse = ns["merge_two"](o1, l1, o2, l2)  # an empty part changes nothing
    torch.testing.assert_close(o, o1)
    torch.testing.assert_close(lse, l1)
    ns = _run_cells("def merge_two", "g = torch.Generator().manual_seed(0)")
    assert ns["diff"] < 1e-5 and "max difference" in capsys.readouterr().out


# --- The measured section: the lesson's pandas cells on a frame of the live sweep's shape --------


def _fake_timer(fn):
    fn()
    return 2.0, 1.0


def _rounds_timer():
    """A stand-in timer whose rounds of one function differ: eager 2, 2.2, 1.8, 2, 2 (median 2, spread
    0.2), graph 1, 1.5, 1, 1, 1 (median 1, spread 0.5)."""
    calls = []

    def timer(fn):
        calls.append(fn)
        r = sum(c is fn for c in calls) - 1
        return (2.0, 2.2, 1.8, 2.0, 2.0)[r % 5], (1.0, 1.5, 1.0, 1.0, 1.0)[r % 5]

    return timer, calls


@pytest.mark.skipif(helpers.ON_GPU, reason="the live sweep with its GPU faked, for machines without a GPU")
def test_the_measured_cells_run_on_the_live_rows(capsys, monkeypatch):
    """What the live cell gives (lesson07.attention_rows: fp16, the course, its pointer kernel, SDPA, cuDNN and naive, with
    spreads), its GPU timer and memory counter faked: the cells after it must run on it, mark the noisy
    cells, and survive a provider this GPU refuses (cuDNN on a CPU tensor: no such column, so no fraction
    of cuDNN)."""
    timer, calls = _rounds_timer()
    monkeypatch.setattr(measure, "ON_GPU", True)
    monkeypatch.setattr(measure, "gpu_ms", lambda fn: timer(fn)[1])
    monkeypatch.setattr(measure, "peak_mib", lambda fn: 0.5)
    rows = lesson07.attention_rows(rounds=5, seqs=(32, 48), dims=(16,), B=1, H=2)
    assert len(calls) == 2 * 2 * 4 * 5  # (causal or not) x 2 S, 4 providers that run on a CPU, 5 rounds each
    by = {(r["causal"], r["S"], r["provider"]): r for r in rows}
    assert by[(0, 32, "sdpa_cudnn")]["status"].startswith("refused") and by[(0, 32, "course")]["status"] == "ok"
    assert by[(1, 48, "naive")]["graph_ms"] == 1.0 and by[(1, 48, "naive")]["graph_spread"] == pytest.approx(0.5)
    assert by[(0, 32, "course")]["graph_tflops"] == pytest.approx(4 * 2 * 32 * 32 * 16 / 1e-3 / 1e12)
    for r in rows:  # the live sweep's lengths, 1K and 4K (S >= 4K selects the second), and made-up speeds
        r["S"], r["graph_tflops"] = (
            {32: 1024, 48: 4096}[r["S"]],
            {"course": 3.0, "course_pointer": 2.4, "sdpa": 4.0, "naive": 1.0}.get(r["provider"]),
        )
    att = data.frame(rows, gpu_data.provenance("test"))
    ns = _run_cells('ok = att.query("status', "plots.show(lesson07.plot_sweep", "speedup = (tf.course", att=att)
    assert ns["claims"]["course / naive"] == "nan to nan times faster"  # every timing noisy: no range
    assert (
        ns["noisy"].loc["float16"][["course", "naive"]].values.all()
    )  # a 50% spread in every graph timing: all marked
    assert list(ns["tf"].columns) == ["course", "sdpa_cudnn", "naive"]
    assert ns["tf"].sdpa_cudnn.isna().all()  # cuDNN refuses CPU tensors: a column of NaN, no error
    matplotlib.pyplot.close("all")


def test_attention_rows_needs_a_gpu():
    if helpers.ON_GPU:
        pytest.skip("on a GPU it measures")
    with pytest.raises(RuntimeError, match=r"helpers\.lesson07\.attention_rows\(\) measures on a GPU"):
        lesson07.attention_rows()


def test_attention_rows_does_not_time_a_wrong_provider(monkeypatch):
    monkeypatch.setattr(measure, "ON_GPU", True)
    monkeypatch.setattr(measure, "peak_mib", lambda fn: 0.5)
    timed = []
    monkeypatch.setattr(measure, "gpu_ms", lambda fn: timed.append(fn) or 1.0)
    monkeypatch.setattr(lesson07, "attention", lambda q, k, v, causal=False: torch.zeros_like(q))
    rows = lesson07.attention_rows(rounds=1, seqs=(24,), dims=(16,), B=1, H=1)
    course = [r for r in rows if r["provider"] == "course"]
    assert all(r["status"].startswith("wrong: max abs error") and math.isnan(r["graph_ms"]) for r in course)
    assert len(timed) == 2 * (4 if helpers.ON_GPU else 3)  # pointer, SDPA, naive (and cuDNN on a GPU), causal or not


# --- The benchmark's logic, on the CPU with a stand-in timer ----------------------------------


def _measure(providers, S=40, *, B=1, H=1, causal=False, timer=_fake_timer, peak=0.0, device="cpu", **kw):
    """AB.measure_shape on a float16 shape with D = 16, its timer and memory counter stand-ins (peak: MiB)."""
    return AB.measure_shape(
        "float16", B, H, S, 16, causal, providers, timer=timer, peak=lambda fn: peak, device=device, **kw
    )


@pytest.mark.skipif(helpers.ON_GPU, reason="the harness's CPU path (a fake timer), for machines without a GPU")
def test_measure_shape_rows_on_the_cpu():
    rows = _measure(AB.PROVIDERS, H=2, causal=True, peak=1.5)
    assert [r["provider"] for r in rows] == list(AB.PROVIDERS)
    by = {r["provider"]: r for r in rows}
    for p in ("course", "sdpa", "naive"):
        r = by[p]
        assert r["status"] == "ok", r
        assert list(r) == list(AB.COLUMNS)
        assert r["max_err"] < 1e-2 and r["peak_mib"] == 1.5
        f = 4 * 1 * 2 * 40 * 40 * 16 / 2
        assert r["tflops"] == pytest.approx(f / 2e-3 / 1e12) and r["graph_tflops"] == pytest.approx(f / 1e-3 / 1e12)
    for p in ("sdpa_cudnn", "sdpa_efficient"):  # no such backend for CPU tensors
        assert by[p]["status"].startswith("refused:") and math.isnan(by[p]["ms"])
    assert by["course_pointer"]["status"] == "ok"  # the pointer kernel, forced: the interpreter's kernel anyway
    assert by["tutorial"]["status"].startswith("skipped: the tutorial's forward needs a Hopper GPU") and math.isnan(
        by["tutorial"]["ms"]
    )
    assert AB.tutorial_skip(1024, torch.float32, "cpu").startswith("skipped: the tutorial's forward takes 16-bit")
    assert by["course_g1"]["status"].startswith("skipped: the head order is measured causal")


def test_the_head_order_provider(monkeypatch):
    """course_g1: the course's kernel with its causal programs in head order (group = 1), checked and
    timed like the others where it is measured (causal, long sequences: lowered here to 32)."""
    monkeypatch.setattr(AB, "TUTORIAL_MIN_S", 32)
    # device=None: where the kernels run (a GPU's kernels refuse CPU tensors)
    rows = _measure(("course", "course_g1"), B=2, H=3, causal=True, device=None)
    assert [r["status"] for r in rows] == ["ok", "ok"] and rows[1]["max_err"] < 1e-2
    rows = _measure(("course_g1",), H=2, device=None)
    assert rows[0]["status"].startswith("skipped:")


def test_a_wrong_provider_is_not_timed(monkeypatch):
    monkeypatch.setattr(AB, "attention", lambda q, k, v, causal=False: torch.zeros_like(q))
    timed = []
    rows = _measure(("course",), 24, timer=lambda fn: timed.append(fn) or (1.0, 1.0))
    assert rows[0]["status"].startswith("wrong: max abs error") and not timed


def test_naive_is_skipped_past_its_limit():
    rows = _measure(("naive",), AB.NAIVE_MAX_S + 16)
    assert rows[0]["status"].startswith("skipped:")


@pytest.mark.skipif(helpers.ON_GPU, reason="the harness's CPU path (a fake timer), for machines without a GPU")
def test_sweep_writes_a_csv_the_lesson_reads(tmp_path, capsys):
    path = tmp_path / "attention.csv"
    rows = AB.sweep(
        seqs=(32,),
        dims=(16,),
        dtypes=("float16",),
        causals=(False, True),
        providers=("course", "sdpa"),
        B=1,
        H=2,
        timer=_fake_timer,
        peak=lambda fn: 0.25,
        device="cpu",
        out=(path, gpu_data.provenance("test")),
    )  # written after every shape
    assert len(rows) == 4 and all(r["status"] == "ok" for r in rows)
    df = data.load(str(path))
    assert list(df.columns) == list(AB.COLUMNS) and df.attrs["provenance"]["command"] == "test" and len(df) == 4
    assert (df.spread == 0).all() and (df.graph_spread == 0).all()  # one stand-in value per round: no spread


def test_flops_and_sample_rows():
    assert AB.flops(4, 16, 1024, 64, False) == 4 * 4 * 16 * 1024 * 1024 * 64
    assert AB.flops(4, 16, 1024, 64, True) == AB.flops(4, 16, 1024, 64, False) / 2
    rows = AB.sample_rows(16384)
    assert rows[0] == 0 and rows[-1] == 16383 and len(rows) <= AB.SAMPLE_ROWS
    assert AB.sample_rows(50).tolist() == list(range(50))


def test_sample_reference_matches_full_reference():
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 3, 30, 16, generator=g) for _ in range(3))
    rows = torch.tensor([0, 7, 29])
    for causal in (False, True):
        ref, _ = lesson07.reference_attention(q, k, v, causal)
        got = AB.sample_reference(q, k, v, causal, [(0, 0), (1, 2)], rows)
        torch.testing.assert_close(got[0], ref[0, 0, rows])
        torch.testing.assert_close(got[1], ref[1, 2, rows])


def test_command_line_stops_without_a_gpu(capsys, tmp_path):
    if helpers.ON_GPU:
        pytest.skip("on a GPU the command would run")
    with pytest.raises(SystemExit) as e:
        AB.main([str(tmp_path / "x.csv")])
    assert e.value.code == 2
    assert "needs an NVIDIA GPU" in capsys.readouterr().err
    assert not (tmp_path / "x.csv").exists()


@pytest.mark.skipif(helpers.ON_GPU, reason="the harness's CPU path (a fake timer), for machines without a GPU")
def test_rounds_give_the_median_and_the_spread():
    timer, calls = _rounds_timer()
    rows = _measure(("course", "sdpa"), H=2, timer=timer, peak=1.0, rounds=5)
    assert len(calls) == 10 and calls[0] is not calls[1]  # 5 rounds x 2 providers, interleaved
    for r in rows:
        assert r["ms"] == 2.0 and r["graph_ms"] == 1.0
        assert r["spread"] == pytest.approx(0.2) and r["graph_spread"] == pytest.approx(0.5)
    assert AB.median([3.0, 1.0, 2.0]) == 2.0 and AB.spread([1.0, 1.0, 1.5]) == pytest.approx(0.5)
    assert AB.spread([4.0]) == 0.0


def test_best_configs():
    rows = [
        {"D": 64, "causal": 0, "graph_tflops": 10.0, "status": "ok", "block_m": 64},
        {"D": 64, "causal": 0, "graph_tflops": 12.0, "status": "ok", "block_m": 128},
        {"D": 64, "causal": 0, "graph_tflops": 99.0, "status": "failed: x", "block_m": 32},
    ]
    assert AB.best_configs(rows)[(64, 0)]["block_m"] == 128


# --- Exercise checkers ---------------------------------------------------------------------------


def _module_from(src: str, tmp_path: Path, name: str):
    """Import ``src`` as a module from a file (Triton needs a kernel's source file)."""
    header = (
        "import math\nimport torch\nimport triton\nimport triton.language as tl\n"
        "from helpers.kernels.attention import attention_block_update\n\n"
    )
    return module_from(header + src, name, tmp_path)


def _verdict(capsys, fn, answer):
    return verdict(capsys, fn, answer)


def _assert(line, status, *words):
    assert f": {status}" in line, line
    for w in words:
        assert w in line, (w, line)


# ---- 7.1 ------------------------------------------------------------------------------------


def _ca_right(q, k, v, scale):
    S = q.shape[-2]
    s = (q @ k.transpose(-2, -1)) * scale
    return torch.softmax(s.masked_fill(~torch.ones(S, S, dtype=torch.bool).tril(), float("-inf")), -1) @ v


def _ca_masked(mask_fn, *, after_softmax=False, scale_where="scores", exp_first=False):
    def f(q, k, v, scale):
        S = q.shape[-2]
        s = q @ k.transpose(-2, -1)
        if scale_where == "scores":
            s = s * scale
        mask = mask_fn(S) if mask_fn else None
        if exp_first:
            e = torch.exp(s - s.max(-1, keepdim=True).values) * mask
            p = e / e.sum(-1, keepdim=True)
        elif after_softmax:
            p = torch.softmax(s, -1) * mask
        else:
            p = torch.softmax(s.masked_fill(~mask, float("-inf")) if mask is not None else s, -1)
        out = p @ v
        return out * scale if scale_where == "output" else out

    return f


def _tril(S):
    return torch.ones(S, S, dtype=torch.bool).tril()


WRONG_7_1 = {
    "mask after the softmax": (_ca_masked(_tril, after_softmax=True), "after the softmax"),
    "upper triangle": (_ca_masked(lambda S: _tril(S).T), "lower triangle"),
    "diagonal left out": (_ca_masked(lambda S: torch.ones(S, S, dtype=torch.bool).tril(-1)), "itself included"),
    "no scale": (_ca_masked(_tril, scale_where="none"), "not scaled"),
    "scale on the output": (_ca_masked(_tril, scale_where="output"), "before the softmax"),
    "no mask": (_ca_masked(None), "nothing is masked"),
    "exp of every key, then the mask": (_ca_masked(_tril, exp_first=True), "NaN"),
}


def test_checker_7_1_other_wrong_answers(capsys):
    def in_place(q, k, v, scale):
        q.mul_(scale)
        return _ca_right(q, k, v, 1.0)

    def no_return(q, k, v, scale):
        _ca_right(q, k, v, scale)

    def raises(q, k, v, scale):
        raise KeyError("oops")

    _assert(_verdict(capsys, lesson07_exercises.check_7_1, in_place), "wrong", "modified")
    _assert(_verdict(capsys, lesson07_exercises.check_7_1, no_return), "wrong", "return")
    _assert(_verdict(capsys, lesson07_exercises.check_7_1, raises), "wrong", "KeyError")
    _assert(_verdict(capsys, lesson07_exercises.check_7_1, lambda q, k, v, s: _ca_right(q, k, v, s).float()), "wrong")
    _assert(_verdict(capsys, lesson07_exercises.check_7_1, "not a function"), "wrong", "function")


# ---- 7.2: the causal loop bounds and the diagonal block --------------------------------------

TEMPLATE_72 = _notebook_code("@triton.jit\ndef my_causal_kernel")
SOLUTION_LINES = {
    "n_full": "    n_full = (start_m * BLOCK_M + 1) // BLOCK_N * BLOCK_N",
    "end": "    end = tl.minimum(seq, (start_m + 1) * BLOCK_M)",
    "keep": "        keep = (cols[None, :] < seq) & (cols[None, :] <= offs_m[:, None])",
}
RIGHT_72 = TEMPLATE_72.replace(
    "    raise NotImplementedError\n", SOLUTION_LINES["n_full"] + "\n" + SOLUTION_LINES["end"] + "\n"
).replace("        s = tl.where(keep", SOLUTION_LINES["keep"] + "\n        s = tl.where(keep")

WRONG_7_2 = {  # mistake -> ({solution line: its wrong version}, the words of the hint)
    "loop to the end ignoring causality": (
        {"n_full": "n_full = seq // BLOCK_N * BLOCK_N", "end": "end = seq"},
        "run to the end",
    ),
    "stop one block early (diagonal missed)": ({"end": "end = start_m * BLOCK_M"}, "never visited"),
    "end from the block's first row": ({"end": "end = tl.minimum(seq, start_m * BLOCK_M + 1)"}, "first row"),
    "no mask on the diagonal block": ({"keep": "keep = cols[None, :] < seq"}, "causal condition"),
    "< instead of <=": ({"keep": "keep = (cols[None, :] < seq) & (cols[None, :] < offs_m[:, None])"}, "<=, not <"),
    "n_full off by one block": (
        {"n_full": "n_full = (start_m * BLOCK_M // BLOCK_N + 1) * BLOCK_N"},
        "one block too far",
    ),
    # right outputs, wasted work: the checker reads the bounds
    "end = seq (blocks above the diagonal loaded)": ({"end": "end = seq"}, "end = seq ignores causality"),
    "n_full = 0 (every block masked)": ({"n_full": "n_full = 0"}, "n_full = 0 masks every block"),
    "end = seq and n_full = 0": ({"n_full": "n_full = 0", "end": "end = seq"}, "end = seq ignores causality"),
    "end one block past the diagonal": (
        {"end": "end = tl.minimum(seq, (start_m + 1) * BLOCK_M + BLOCK_N)"},
        "end = seq ignores causality",
    ),
    "n_full one block short": (
        {"n_full": "n_full = tl.maximum(0, (start_m * BLOCK_M + 1) // BLOCK_N * BLOCK_N - BLOCK_N)"},
        "n_full = 0 masks every block",
    ),
}

RIGHT_BOUNDS_72 = {  # other ways to write the right bounds: the same blocks in each loop
    "n_full without + 1 (blocks are powers of two)": {"n_full": "n_full = start_m * BLOCK_M // BLOCK_N * BLOCK_N"},
    "end rounded up to a block": {"end": "end = tl.cdiv(tl.minimum(seq, (start_m + 1) * BLOCK_M), BLOCK_N) * BLOCK_N"},
    "n_full bounded by the whole blocks": {
        "n_full": "n_full = tl.minimum(seq // BLOCK_N * BLOCK_N, (start_m * BLOCK_M + 1) // BLOCK_N * BLOCK_N)"
    },
}


def _kernel(src: str, tmp_path: Path, name: str):
    return _module_from(src, tmp_path, name).my_causal_kernel


def _wrong_72(changes: dict) -> str:
    """RIGHT_72 with solution lines (SOLUTION_LINES' keys) changed to the text given, at their indent ("": blank)."""
    src = RIGHT_72
    for which, line in changes.items():
        old = SOLUTION_LINES[which]
        assert old in src
        src = src.replace(old, (old[: len(old) - len(old.lstrip())] + line) if line else "")
    return src


def test_7_2_solution_cell_shows_the_tested_lines():
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    sol = [c for c in cells if "solution" in c["metadata"].get("tags", []) and "n_full" in "".join(c["source"])]
    assert len(sol) == 1
    for line in SOLUTION_LINES.values():
        assert line.strip() in "".join(sol[0]["source"])


def test_7_2_no_answer_on_screen_before_the_checker():
    """No cell above exercise 7.2's checker shows the causal bounds (the library's kernel comes after)."""
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    src = ["".join(c["source"]) for c in cells]
    at = next(i for i, s in enumerate(src) if s.startswith("lesson07_exercises.check_7_2"))
    before = "\n".join(s for s, c in zip(src[:at], cells) if "solution" not in c["metadata"].get("tags", []))
    assert "(start_m * BLOCK_M + 1) // BLOCK_N" not in before and "<= offs_m[:, None]" not in before
    assert "def attention_fwd_kernel" not in before
    at71 = next(i for i, s in enumerate(src) if s.startswith("lesson07_exercises.check_7_1"))
    assert "masked_fill" not in "\n".join(src[:at71])  # naive_attention's causal branch comes after 7.1
    at73 = next(i for i, s in enumerate(src) if s.startswith("lesson07_exercises.check_7_3"))
    assert "logaddexp" not in "\n".join(s for s, c in zip(src[:at73], cells) if c["cell_type"] == "code")


def test_checker_7_2_right(capsys, tmp_path):
    kernel = _kernel(RIGHT_72, tmp_path, "k72_right")
    lesson07_exercises.check_7_2(kernel)
    out = capsys.readouterr().out.strip().splitlines()
    _assert(out[0], "correct")
    if helpers.ON_GPU:  # the bytes are counted by the interpreter: no traffic line on a GPU
        assert len(out) == 1, out
        return
    # attention's traffic line: K and V read once per block of queries, and the time only a floor (its matmuls set it)
    assert out[1].startswith("Traffic: your kernel reads its input") and "at least" in out[1], out
    assert out[1].endswith("the bytes give only a floor."), out


def test_checker_7_2_right_without_the_redundant_bound(capsys, tmp_path):
    src = _wrong_72({"keep": "keep = cols[None, :] <= offs_m[:, None]"})
    _assert(_verdict(capsys, lesson07_exercises.check_7_2, _kernel(src, tmp_path, "k72_right2")), "correct")


@pytest.mark.parametrize("case", RIGHT_BOUNDS_72, ids=list(RIGHT_BOUNDS_72))
def test_checker_7_2_other_right_bounds(capsys, tmp_path, case):
    kernel = _kernel(_wrong_72(RIGHT_BOUNDS_72[case]), tmp_path, "k72_ok_" + "".join(ch for ch in case if ch.isalnum()))
    _assert(_verdict(capsys, lesson07_exercises.check_7_2, kernel), "correct")


BOUNDS_HELPER = """
@triton.jit
def causal_bounds(start_m, seq, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    return (start_m * BLOCK_M + 1) // BLOCK_N * BLOCK_N, {end}


"""


@pytest.mark.parametrize("end,verdict", [("tl.minimum(seq, (start_m + 1) * BLOCK_M)", "correct"), ("seq", "wrong")])
def test_checker_7_2_bounds_from_a_helper_function(capsys, tmp_path, end, verdict):
    """Bounds computed by a @triton.jit function of the learner's are read all the same."""
    src = _wrong_72({"n_full": "n_full, end = causal_bounds(start_m, seq, BLOCK_M, BLOCK_N)", "end": ""})
    kernel = _kernel(BOUNDS_HELPER.format(end=end) + src, tmp_path, f"k72_helper_{verdict}")
    _assert(
        _verdict(capsys, lesson07_exercises.check_7_2, kernel),
        verdict,
        *(["ignores causality"] if verdict == "wrong" else []),
    )


def test_checker_7_2_untouched_template_is_not_yet(capsys, tmp_path):
    _assert(_verdict(capsys, lesson07_exercises.check_7_2, _kernel(TEMPLATE_72, tmp_path, "k72_template")), "not yet")
    _assert(_verdict(capsys, lesson07_exercises.check_7_2, None), "not yet")


@pytest.mark.parametrize("case", WRONG_7_2, ids=list(WRONG_7_2))
def test_checker_7_2_wrong_kernels_get_hints(capsys, tmp_path, case):
    changes, hint = WRONG_7_2[case]
    kernel = _kernel(_wrong_72(changes), tmp_path, "k72_" + "".join(ch for ch in case if ch.isalnum()))
    _assert(_verdict(capsys, lesson07_exercises.check_7_2, kernel), "wrong", hint)


def test_checker_7_2_out_of_bounds_store_is_wrong(capsys, tmp_path):
    src = RIGHT_72.replace(", o, mask=offs_m[:, None] < seq)", ", o)")
    assert src != RIGHT_72
    _assert(_verdict(capsys, lesson07_exercises.check_7_2, _kernel(src, tmp_path, "k72_oob")), "wrong", "past the end")


def test_checker_7_2_no_store_and_nan_results_are_told_apart(capsys, tmp_path):
    no_store = RIGHT_72.replace("    tl.store(out_ptr", "    if seq < 0:\n        tl.store(out_ptr")
    _assert(
        _verdict(capsys, lesson07_exercises.check_7_2, _kernel(no_store, tmp_path, "k72_nostore")),
        "wrong",
        "nothing was stored",
    )
    nan_out = RIGHT_72.replace("    o = acc / l_i[:, None]", "    o = acc / (l_i[:, None] * 0.0)  * 0.0")
    line = _verdict(capsys, lesson07_exercises.check_7_2, _kernel(nan_out, tmp_path, "k72_nan"))
    _assert(line, "wrong", "NaN")
    assert "nothing was stored" not in line


def test_checker_7_2_not_a_kernel(capsys):
    _assert(_verdict(capsys, lesson07_exercises.check_7_2, lambda *a: None), "wrong", "@triton.jit")


# ---- 7.3: combine ------------------------------------------------------------------------------------


def combine_answer(o_parts, lse_parts):
    """The right answer (the notebook's solution cell shows the same lines)."""
    lse = torch.logsumexp(lse_parts, dim=0)
    return (o_parts * torch.exp(lse_parts - lse).unsqueeze(-1)).sum(dim=0), lse


def _lse(lp):
    return torch.logsumexp(lp, 0)


WRONG_7_3 = {
    "plain average": (lambda o, lp: (o.mean(0), _lse(lp)), "plain average"),
    "weights e^lse, unnormalised": (lambda o, lp: ((o * lp.exp()[..., None]).sum(0), _lse(lp)), "divided by their sum"),
    "weights e^lse / sum e^lse, no max": (
        lambda o, lp: ((o * lp.exp()[..., None]).sum(0) / lp.exp().sum(0)[..., None], lp.exp().sum(0).log()),
        "overflow",
    ),
    "lse in log2": (lambda o, lp: (combine_answer(o, lp)[0], _lse(lp) / math.log(2)), "log2"),
    "everything in base 2": (
        lambda o, lp: (
            (o * torch.exp2(lp - torch.logsumexp(lp * math.log(2), 0) / math.log(2))[..., None]).sum(0),
            torch.logsumexp(lp * math.log(2), 0) / math.log(2),
        ),
        "log2",
    ),
    "lse = the largest part's": (lambda o, lp: (combine_answer(o, lp)[0], lp.max(0).values), "largest part"),
    "lse = sum of the lse": (lambda o, lp: (combine_answer(o, lp)[0], lp.sum(0)), "not their logs"),
    "base-2 weights": (
        lambda o, lp: (
            (o * torch.exp2(lp - torch.logsumexp(lp * math.log(2), 0) / math.log(2))[..., None]).sum(0),
            _lse(lp),
        ),
        "powers of 2",
    ),
    "exp2 weights of natural-log differences": (
        lambda o, lp: ((o * torch.exp2(lp - _lse(lp))[..., None]).sum(0), _lse(lp)),
        "torch.exp, not torch.exp2",
    ),
    "weights shifted by the largest lse, not divided by their sum": (
        lambda o, lp: ((o * torch.exp(lp - lp.max(0).values)[..., None]).sum(0), _lse(lp)),
        "not divided by their sum",
    ),
}


# ---- 7.1 and 7.3: the right answer, the untouched template, the wrong answers ---------------------

#: exercise -> (its checker, the right answer, the first line of the notebook's template, the wrong answers)
PYTHON_EXERCISES = {
    "7.1": (lesson07_exercises.check_7_1, _ca_right, "def causal_attention", WRONG_7_1),
    "7.3": (lesson07_exercises.check_7_3, combine_answer, "def combine", WRONG_7_3),
}


@pytest.mark.parametrize("ex", PYTHON_EXERCISES)
def test_checker_right(capsys, ex):
    checker, right, _, _ = PYTHON_EXERCISES[ex]
    _assert(_verdict(capsys, checker, right), "correct")


@pytest.mark.parametrize("ex", PYTHON_EXERCISES)
def test_checker_untouched_template(capsys, ex):
    checker, _, template, _ = PYTHON_EXERCISES[ex]
    ns = {}
    exec(_notebook_code(template), ns)
    _assert(_verdict(capsys, checker, ns[template.removeprefix("def ")]), "not yet")
    _assert(_verdict(capsys, checker, None), "not yet")
    _assert(_verdict(capsys, checker, lambda *args: ...), "not yet")


@pytest.mark.parametrize("ex, case", [(ex, case) for ex, (*_, wrong) in PYTHON_EXERCISES.items() for case in wrong])
def test_checker_wrong_answers_get_hints(capsys, ex, case):
    checker, _, _, wrong = PYTHON_EXERCISES[ex]
    fn, hint = wrong[case]
    _assert(_verdict(capsys, checker, fn), "wrong", hint)


def test_checker_7_3_other_wrong_answers(capsys):
    def in_place(o, lp):
        lp.sub_(1.0)
        return combine_answer(o, lp + 1.0)

    _assert(_verdict(capsys, lesson07_exercises.check_7_3, in_place), "wrong", "modified")
    _assert(_verdict(capsys, lesson07_exercises.check_7_3, lambda o, lp: combine_answer(o, lp)[0]), "wrong", "pair")
    _assert(_verdict(capsys, lesson07_exercises.check_7_3, lambda o, lp: (o[0], lp[0])), "wrong")


# --- The deep dive's tiles and budget, and its prose ---------------------------------------------------------------


def test_the_budget_cell_and_the_tiles_the_library_uses():
    """The deep dive's budget of two programs per SM, at the tiles the library runs; and the library's choices the
    prose describes: the pointer kernel at D = 64, the descriptor kernel's (128, 64, 4, 2) at D = 128, and the heads a
    group of causal programs takes (16 at D = 64 and 8 at D = 128 at 4K, half as many at each doubling)."""
    fit = _run_cells("D, nbytes = 128, 2", notebook=DEEP_DIVE)["fit"]
    assert fit["shared KiB"].tolist() == [128, 96] and fit["programs per SM (shared)"].tolist() == [1, 2]
    assert fit["registers a thread, 2 programs per SM"].tolist() == [128, 256]
    tile = ["BLOCK_M", "BLOCK_N", "warps", "stages"]
    assert tuple(fit.loc["descriptor", tile]) == tuple(tma_config(torch.float16, 128, False))[:4]
    assert tuple(fit.loc["pointer", tile]) == tuple(attention_config(torch.float16, 128, interpreter=False))
    for causal in (False, True):
        assert tma_config(torch.float16, 64, causal) is None  # "At D = 64 the library keeps the pointer kernel"
        assert tma_config(torch.bfloat16, 128, causal) == TmaConfig(128, 64, 4, 2, False)
    assert [heads_per_group(S, D, 2, True, 64) for D in (64, 128) for S in (4096, 8192, 16384)] == [16, 8, 4, 8, 4, 2]


def test_the_recordings_keep_every_spread():
    """Every timing a quoted range rests on was timed in rounds with its spread kept (a missing spread would count as
    quiet); both sweeps time the head order beside the groups; the second H100 run is of the causal shapes, measured
    with the groups in the kernel."""
    for name in ("attention", "attention_causes", "attention_stageout", "attention_tune"):
        for gpu in ("h100", "h200") if name == "attention" else ("h100",):
            rows = data.load(name, gpu=gpu)
            ok = rows.query("status == 'ok'") if "status" in rows else rows  # the probes keep only what ran
            assert ok.graph_spread.notna().all(), (name, gpu)
    att = data.load("attention", gpu="h100")
    assert att.query("status == 'ok'").spread.notna().all()
    for gpu in ("h100", "h200"):  # both sweeps time the causal programs in groups, the head order beside them
        assert "course_g1" in set(data.load("attention", gpu=gpu).provider), gpu
    causal = data.load("attention_causal", gpu="h100")
    assert causal.attrs["provenance"]["commit"] != "d5ce146"  # measured with the groups in the kernel
    cok = causal.query("status == 'ok'")
    assert len(cok) == 48 and set(cok.causal) == {1} and cok.graph_spread.notna().all()


@pytest.mark.parametrize("notebook", [NOTEBOOK, DEEP_DIVE], ids=["lesson", "deep dive"])
def test_the_prose_tallies_no_differences_inside_the_noise_and_tells_no_history(notebook):
    text = _markdown(notebook)
    for phrase in (" cases miss", "misses", " of 48 cases", "meets both targets", "ahead of the tutorial in every"):
        assert phrase not in text, phrase
    for phrase in (
        "earlier recording",
        "before the fix",
        "commit ",
        "not reproduced",
        "was recorded before",
        "scratch",
    ):
        assert phrase not in text.lower(), phrase
    assert "not kept in" not in text.lower() and "12%" not in text  # 12%: a cost per program these runs do not show
