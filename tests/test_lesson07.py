"""Lesson 07 (attention): the trace against float64, the tiles against brute force, the memory and
traffic counts, the correctness table, the recorded-data readers (on a synthetic recording made here,
in a temporary folder), the benchmark's logic on the CPU, and the exercise checkers, each fed the
right answer, the untouched template, and the plausible wrong answers.

Every checker must print exactly one line and never raise, whatever the learner wrote.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import math
from pathlib import Path

import helpers
import matplotlib
import pytest
import torch
from helpers import attention_bench as AB
from helpers import gpu_data, lesson07
from helpers.lesson07 import FULL, MASKED, SKIPPED

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "07_attention.ipynb"

# --------------------------------------------------------------------------------------------
# Lesson helpers
# --------------------------------------------------------------------------------------------


def test_reference_and_naive_agree():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 7, 16, generator=g) for _ in range(3))
    for causal in (False, True):
        out, lse = lesson07.reference_attention(q, k, v, causal)
        assert out.dtype == lse.dtype == torch.float64
        torch.testing.assert_close(helpers.kernels.naive_attention(q.double(), k.double(), v.double(), causal=causal), out)
    assert lesson07.causal_mask(3, 3).tolist() == [[True, False, False], [True, True, False], [True, True, True]]


def test_memory_rows():
    r = {x["S"]: x for x in lesson07.memory_rows()}
    assert r[16384]["scores_gb"] == pytest.approx(64 * 16384**2 * 2 / 1e9)
    assert r[16384]["naive_peak_gb"] == pytest.approx((2 * 64 * 16384**2 * 2 + 4 * 64 * 16384 * 128 * 2) / 1e9)
    assert r[16384]["naive_peak_gb"] < 80 < r[32768]["naive_peak_gb"]
    assert r[1024]["naive_intensity"] < 64 < r[1024]["flash_intensity"]
    for x in r.values():
        assert x["flash_peak_gb"] < x["naive_peak_gb"]
        assert x["flash_ideal_gb"] <= x["flash_traffic_gb"] < x["naive_traffic_gb"]


def test_memory_and_traffic_tables_print(capsys):
    lesson07.print_memory_table()
    lesson07.print_traffic_table()
    out = capsys.readouterr().out
    assert "16K" in out and "295 FLOP" in out and "fits 80 GB" in out


def test_trace_matches_float64_after_every_block():
    q, K, V, b = lesson07.trace_example()
    steps = lesson07.attention_trace(q, K, V, b)
    assert [s["m_new"] for s in steps] == [3.0, 5.0, 5.0]
    assert [round(s["alpha"], 6) for s in steps] == [0.0, round(math.exp(-2), 6), 1.0]
    for s in steps:
        assert s["err"] < 1e-12
    s_all = K @ q
    torch.testing.assert_close(steps[-1]["out"], torch.softmax(s_all, 0) @ V)
    assert steps[-1]["lse"] == pytest.approx(torch.logsumexp(s_all, 0).item())


def test_trace_print_and_plot(capsys):
    q, K, V, b = lesson07.trace_example()
    steps = lesson07.attention_trace(q, K, V, b)
    lesson07.print_attention_trace(steps)
    assert capsys.readouterr().out.count("float64 attention over keys") == 3
    fig = lesson07.plot_attention_trace(steps, V)
    assert isinstance(fig, matplotlib.figure.Figure) and len(fig.axes) == 3
    matplotlib.pyplot.close(fig)


@pytest.mark.parametrize("sq,sk,bm,bn,causal", [(300, 400, 128, 64, False), (512, 512, 128, 64, True),
                                                (77, 77, 32, 16, True), (50, 70, 32, 16, False),
                                                (100, 100, 16, 64, True), (33, 33, 64, 32, True)])
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


def test_plot_tiles_and_memory():
    for fig in (lesson07.plot_tiles(), lesson07.plot_memory()):
        assert isinstance(fig, matplotlib.figure.Figure)
        matplotlib.pyplot.close(fig)


def test_print_launch(capsys):
    q = torch.randn(2, 50, 64, device=helpers.DEVICE)
    lesson07.print_launch(q, q, q, causal=True)
    assert "grid (query blocks, H, Z)" in capsys.readouterr().out


def test_correctness_table_passes(capsys):
    assert lesson07.run_correctness()
    out = capsys.readouterr().out
    assert "NO" not in out and out.count("yes") == 3 * len(lesson07.correctness_cases())


def test_large_scores_demo(capsys):
    lesson07.large_scores_demo(helpers.kernels.naive_attention)
    lines = capsys.readouterr().out.splitlines()
    assert "float16 holds at most 65,504" in lines[0]
    assert not lines[1].split(":")[1].strip().startswith("0 NaN")  # the naive fp16 version breaks
    assert lines[2].split(":")[1].strip().startswith("0 NaN")  # the kernel does not


def test_merge_two_and_split_keys(capsys):
    o1, o2 = torch.randn(3, 4), torch.randn(3, 4)
    l1, l2 = torch.randn(3), torch.full((3,), float("-inf"))
    o, lse = lesson07.merge_two(o1, l1, o2, l2)  # an empty part changes nothing
    torch.testing.assert_close(o, o1)
    torch.testing.assert_close(lse, l1)
    assert lesson07.split_keys_demo(parts=4) < 1e-5
    assert "max difference" in capsys.readouterr().out


# --------------------------------------------------------------------------------------------
# The recorded data: readers on a synthetic recording (a test fixture, never in figures/data)
# --------------------------------------------------------------------------------------------


def _synthetic_rows():
    rows = []
    for dtype in ("float16", "bfloat16"):
        for D in (64, 128):
            for causal in (0, 1):
                for S in (1024, 2048, 4096):
                    for i, p in enumerate(AB.PROVIDERS):
                        if p == "naive" and S > 2048:
                            rows.append(AB._row(dtype, 4, 16, S, D, causal, p, status="skipped: synthetic"))
                            continue
                        if p == "sdpa_efficient" and D == 128 and causal:
                            rows.append(AB._row(dtype, 4, 16, S, D, causal, p, status="refused: synthetic"))
                            continue
                        t = 100.0 + 10 * i + S / 100
                        rows.append(AB._row(dtype, 4, 16, S, D, causal, p, ms=1.0, tflops=t * 0.9, graph_ms=0.9,
                                            graph_tflops=t, peak_mib=S / 8 * (10 if p == "naive" else 1), max_err=1e-3))
    return AB._round(rows)


@pytest.fixture
def synthetic_recording(tmp_path):
    """A made-up attention.csv in a temporary folder (synthetic numbers, for the readers' tests only)."""
    meta = {"gpu": "SYNTHETIC TEST FIXTURE", "driver": "none", "torch": "0", "triton": "0", "date": "never",
            "commit": "none", "command": "tests/test_lesson07.py"}
    return gpu_data.write_csv(tmp_path / "attention.csv", _synthetic_rows(), meta)


def test_readers_on_a_synthetic_recording(synthetic_recording, capsys):
    data = lesson07.attention_data(live=False, path=synthetic_recording)
    rows, meta = data
    assert meta["gpu"] == "SYNTHETIC TEST FIXTURE" and list(rows[0]) == list(AB.COLUMNS)
    lesson07.print_tflops_table(data)
    lesson07.tflops_summary(data)
    lesson07.print_peak_memory(data)
    out = capsys.readouterr().out
    assert "Recorded on SYNTHETIC TEST FIXTURE" in out
    assert "course/best" in out and "course kernel / fastest SDPA backend" in out
    assert lesson07.best_sdpa(rows, "float16", 64, 0, 1024)[0] == "sdpa_efficient"  # the largest synthetic number
    fig = lesson07.plot_tflops(data)
    assert isinstance(fig, matplotlib.figure.Figure) and len(fig.axes) == 4
    matplotlib.pyplot.close(fig)


def test_readers_without_a_recording(tmp_path, capsys):
    assert lesson07.attention_data(live=False, path=tmp_path / "absent.csv") is None
    for fn in (lesson07.print_tflops_table, lesson07.tflops_summary, lesson07.print_peak_memory, lesson07.show_tflops):
        fn(None)
    lines = capsys.readouterr().out.splitlines()
    assert lines == [lesson07.MISSING] * 4


def test_default_recording_is_read_when_present():
    data = lesson07.attention_data(live=False)
    path = gpu_data.DATA_DIR / f"{lesson07.ATTENTION_CSV}.csv"
    assert (data is None) == (not path.exists())
    if data is not None:
        rows, meta = data
        assert "H100" in meta["gpu"] and any(r["provider"] == "course" for r in rows)


# --------------------------------------------------------------------------------------------
# The benchmark's logic, on the CPU with a stand-in timer
# --------------------------------------------------------------------------------------------


def _fake_timer(fn):
    fn()
    return 2.0, 1.0


@pytest.mark.skipif(helpers.ON_GPU, reason="the harness's CPU path (a fake timer), for machines without a GPU")
def test_measure_shape_rows_on_the_cpu():
    rows = AB.measure_shape("float16", 1, 2, 40, 16, True, timer=_fake_timer, peak=lambda fn: 1.5, device="cpu")
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


def test_a_wrong_provider_is_not_timed(monkeypatch):
    monkeypatch.setattr(AB, "attention", lambda q, k, v, causal=False: torch.zeros_like(q))
    timed = []
    rows = AB.measure_shape("float16", 1, 1, 24, 16, False, providers=("course",),
                            timer=lambda fn: timed.append(fn) or (1.0, 1.0), peak=lambda fn: 0.0, device="cpu")
    assert rows[0]["status"].startswith("wrong: max abs error") and not timed


def test_naive_is_skipped_past_its_limit():
    rows = AB.measure_shape("float16", 1, 1, AB.NAIVE_MAX_S + 16, 16, False, providers=("naive",),
                            timer=_fake_timer, peak=lambda fn: 0.0, device="cpu")
    assert rows[0]["status"].startswith("skipped:")


@pytest.mark.skipif(helpers.ON_GPU, reason="the harness's CPU path (a fake timer), for machines without a GPU")
def test_sweep_writes_a_csv_the_lesson_reads(tmp_path, capsys):
    rows = AB.sweep(seqs=(32,), dims=(16,), dtypes=("float16",), causals=(False, True), providers=("course", "sdpa"),
                    B=1, H=2, timer=_fake_timer, peak=lambda fn: 0.25, device="cpu")
    assert len(rows) == 4 and all(r["status"] == "ok" for r in rows)
    path = gpu_data.write_csv(tmp_path / "attention.csv", rows, gpu_data.provenance("test"))
    data = lesson07.attention_data(live=False, path=path)
    lesson07.print_tflops_table(data)
    assert "course/best" in capsys.readouterr().out


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


def test_best_configs():
    rows = [{"D": 64, "causal": 0, "graph_tflops": 10.0, "status": "ok", "block_m": 64},
            {"D": 64, "causal": 0, "graph_tflops": 12.0, "status": "ok", "block_m": 128},
            {"D": 64, "causal": 0, "graph_tflops": 99.0, "status": "failed: x", "block_m": 32}]
    assert AB.best_configs(rows)[(64, 0)]["block_m"] == 128


# --------------------------------------------------------------------------------------------
# Exercise checkers
# --------------------------------------------------------------------------------------------


def _notebook_cell(startswith: str) -> str:
    nb = json.loads(NOTEBOOK.read_text())
    for c in nb["cells"]:
        src = "".join(c["source"])
        if c["cell_type"] == "code" and src.lstrip().startswith(startswith):
            return src
    raise AssertionError(f"no cell starting with {startswith!r}")


def _module_from(src: str, tmp_path: Path, name: str):
    """Import ``src`` as a module from a file (Triton needs a kernel's source file)."""
    path = tmp_path / f"{name}.py"
    path.write_text("import math\nimport torch\nimport triton\nimport triton.language as tl\n\n" + src)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _verdict(capsys, fn, answer):
    fn(answer)
    out = capsys.readouterr().out
    assert out.count("\n") == 1, out
    return out.strip()


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


def test_7_1_right(capsys):
    _assert(_verdict(capsys, lesson07.check_7_1, _ca_right), "correct")


def test_7_1_untouched_template(capsys):
    ns = {}
    exec(_notebook_cell("def causal_attention"), ns)
    _assert(_verdict(capsys, lesson07.check_7_1, ns["causal_attention"]), "not yet")
    _assert(_verdict(capsys, lesson07.check_7_1, None), "not yet")
    _assert(_verdict(capsys, lesson07.check_7_1, lambda q, k, v, s: ...), "not yet")


@pytest.mark.parametrize("case", WRONG_7_1, ids=list(WRONG_7_1))
def test_7_1_wrong_answers_get_hints(capsys, case):
    fn, hint = WRONG_7_1[case]
    _assert(_verdict(capsys, lesson07.check_7_1, fn), "wrong", hint)


def test_7_1_other_wrong_answers(capsys):
    def in_place(q, k, v, scale):
        q.mul_(scale)
        return _ca_right(q, k, v, 1.0)

    def no_return(q, k, v, scale):
        _ca_right(q, k, v, scale)

    def raises(q, k, v, scale):
        raise KeyError("oops")

    _assert(_verdict(capsys, lesson07.check_7_1, in_place), "wrong", "modified")
    _assert(_verdict(capsys, lesson07.check_7_1, no_return), "wrong", "return")
    _assert(_verdict(capsys, lesson07.check_7_1, raises), "wrong", "KeyError")
    _assert(_verdict(capsys, lesson07.check_7_1, lambda q, k, v, s: _ca_right(q, k, v, s).float()), "wrong")
    _assert(_verdict(capsys, lesson07.check_7_1, "not a function"), "wrong", "function")


# ---- 7.2 ------------------------------------------------------------------------------------


def _lse(lp):
    return torch.logsumexp(lp, 0)


WRONG_7_2 = {
    "plain average": (lambda o, lp: (o.mean(0), _lse(lp)), "plain average"),
    "weights e^lse, unnormalised": (lambda o, lp: ((o * lp.exp()[..., None]).sum(0), _lse(lp)), "divided by their sum"),
    "weights e^lse / sum e^lse, no max": (
        lambda o, lp: ((o * lp.exp()[..., None]).sum(0) / lp.exp().sum(0)[..., None], lp.exp().sum(0).log()),
        "overflow"),
    "lse in log2": (lambda o, lp: (lesson07.combine_answer(o, lp)[0], _lse(lp) / math.log(2)), "log2"),
    "everything in base 2": (
        lambda o, lp: ((o * torch.exp2(lp - torch.logsumexp(lp * math.log(2), 0) / math.log(2))[..., None]).sum(0),
                       torch.logsumexp(lp * math.log(2), 0) / math.log(2)), "log2"),
    "lse = the largest part's": (lambda o, lp: (lesson07.combine_answer(o, lp)[0], lp.max(0).values), "largest part"),
    "lse = sum of the lse": (lambda o, lp: (lesson07.combine_answer(o, lp)[0], lp.sum(0)), "not their logs"),
    "base-2 weights": (
        lambda o, lp: ((o * torch.exp2(lp - torch.logsumexp(lp * math.log(2), 0) / math.log(2))[..., None]).sum(0),
                       _lse(lp)), "powers of 2"),
}


def test_7_2_right(capsys):
    _assert(_verdict(capsys, lesson07.check_7_2, lesson07.combine_answer), "correct")


def test_7_2_untouched_template(capsys):
    ns = {}
    exec(_notebook_cell("def combine"), ns)
    _assert(_verdict(capsys, lesson07.check_7_2, ns["combine"]), "not yet")


@pytest.mark.parametrize("case", WRONG_7_2, ids=list(WRONG_7_2))
def test_7_2_wrong_answers_get_hints(capsys, case):
    fn, hint = WRONG_7_2[case]
    _assert(_verdict(capsys, lesson07.check_7_2, fn), "wrong", hint)


def test_7_2_other_wrong_answers(capsys):
    def in_place(o, lp):
        lp.sub_(1.0)
        return lesson07.combine_answer(o, lp + 1.0)

    _assert(_verdict(capsys, lesson07.check_7_2, in_place), "wrong", "modified")
    _assert(_verdict(capsys, lesson07.check_7_2, lambda o, lp: lesson07.combine_answer(o, lp)[0]), "wrong", "pair")
    _assert(_verdict(capsys, lesson07.check_7_2, lambda o, lp: (o[0], lp[0])), "wrong")


# ---- 7.3 ------------------------------------------------------------------------------------

RIGHT = lesson07.SOLUTION_7_3
UPDATE_ACC = "        acc = acc * alpha[:, None] + tl.dot(p, v)\n"
UPDATE_L = "        l_i = l_i * alpha + tl.sum(p, axis=1)\n"
FINAL_O = "    o = acc / l_i[:, None]\n"
STORE_O_MASK = ", o, mask=offs_m[:, None] < seq_q)"
LSE_EXPR = "(m_i + tl.log2(l_i)) * 0.6931471805599453"


def _variant(*pairs):
    src = RIGHT
    for old, new in pairs:
        assert old in src, old
        src = src.replace(old, new)
    return src


WRONG_7_3 = {
    "l rescaled, acc not": (_variant((UPDATE_ACC, "        acc = acc + tl.dot(p, v)\n")), "acc is not rescaled"),
    "neither l nor acc rescaled": (_variant((UPDATE_ACC, "        acc = acc + tl.dot(p, v)\n"),
                                  (UPDATE_L, "        l_i = l_i + tl.sum(p, axis=1)\n")), "neither l_i nor acc"),
    "divided inside the loop": (_variant((UPDATE_ACC, "        acc = (acc * alpha[:, None] + tl.dot(p, v)) / l_i[:, None]\n"),
                                         (FINAL_O, "    o = acc\n")), "inside the loop"),
    "exp on base-2 scores": (_variant(("alpha = tl.exp2(", "alpha = tl.exp("), ("p = tl.exp2(", "p = tl.exp(")), "tl.exp2"),
    "no final division": (_variant((FINAL_O, "    o = acc\n")), "divide once"),
    "lse in log2": (_variant((LSE_EXPR, "m_i + tl.log2(l_i)")), "log2 units"),
    "lse mixes bases": (_variant((LSE_EXPR, "m_i + tl.log(l_i)")), "LSE"),
    "no lse stored": (_variant(("    tl.store(lse_ptr + rows, " + LSE_EXPR + ", mask=offs_m < seq_q)\n", "")),
                      "nothing was stored in lse"),
    "output store without a mask": (_variant((STORE_O_MASK, ", o)")), "past the end"),
}


def test_7_3_right(capsys, tmp_path):
    mod = _module_from(RIGHT, tmp_path, "sol73_right")
    _assert(_verdict(capsys, lesson07.check_7_3, mod.my_attention_kernel), "correct")


def test_7_3_solution_cell_matches_the_tested_solution():
    nb = json.loads(NOTEBOOK.read_text())
    sol = [("".join(c["source"])) for c in nb["cells"] if "solution" in c.get("metadata", {}).get("tags", [])
           and "my_attention_kernel" not in "".join(c["source"]) and "tl.exp2(m_i - m_new)" in "".join(c["source"])]
    assert sol, "the solution cell of exercise 7.3"
    for line in ("m_new = tl.maximum(m_i, tl.max(s, axis=1))", "acc = acc * alpha[:, None] + tl.dot(p, v)",
                 "o = acc / l_i[:, None]", LSE_EXPR):
        assert line in sol[0] and line in RIGHT


def test_7_3_untouched_template_is_not_yet(capsys, tmp_path):
    mod = _module_from(_notebook_cell("@triton.jit\ndef my_attention_kernel"), tmp_path, "tmpl73")
    _assert(_verdict(capsys, lesson07.check_7_3, mod.my_attention_kernel), "not yet")
    _assert(_verdict(capsys, lesson07.check_7_3, None), "not yet")


@pytest.mark.parametrize("case", WRONG_7_3, ids=list(WRONG_7_3))
def test_7_3_wrong_kernels_get_hints(capsys, tmp_path, case):
    src, hint = WRONG_7_3[case]
    mod = _module_from(src, tmp_path, "k73_" + case.replace(" ", "_").replace(",", ""))
    _assert(_verdict(capsys, lesson07.check_7_3, mod.my_attention_kernel), "wrong", hint)


def test_7_3_far_out_of_bounds_store_is_wrong_and_the_process_lives(capsys, tmp_path):
    if not helpers.INTERPRETER:
        pytest.skip("a far out-of-bounds store is only stopped before it happens under the interpreter")
    src = _variant(("tl.store(lse_ptr + rows,", "tl.store(lse_ptr + rows + 100000000,"))
    mod = _module_from(src, tmp_path, "k73_far_oob")
    _assert(_verdict(capsys, lesson07.check_7_3, mod.my_attention_kernel), "wrong", "out of bounds")
    mod = _module_from(RIGHT, tmp_path, "k73_after_oob")  # and the next run is fine
    _assert(_verdict(capsys, lesson07.check_7_3, mod.my_attention_kernel), "correct")


def test_7_3_not_a_kernel_and_a_kernel_that_fails(capsys, tmp_path):
    _assert(_verdict(capsys, lesson07.check_7_3, lambda *a: None), "wrong", "@triton.jit")
    src = _variant(("    o = acc / l_i[:, None]\n", "    o = acc / l_i[:, None, None]\n"))
    mod = _module_from(src, tmp_path, "k73_bad_shape")
    _assert(_verdict(capsys, lesson07.check_7_3, mod.my_attention_kernel), "wrong")


def test_the_tile_configuration_in_use_is_the_fastest_candidate(capsys):
    """The prose: the configuration attention_config gives is the fastest of the tuner's candidates,
    or within a percent of it, for every head dim and mask on both recorded GPUs."""
    rows = lesson07.tile_tuning()
    assert {r["gpu"] for r in rows} == {"NVIDIA H100 80GB HBM3", "NVIDIA H200"}
    assert len(rows) == 8 and all(r["candidates"] >= 10 for r in rows)
    assert all(r["used"] / r["best"] >= 0.99 for r in rows), [(r["gpu"], r["D"], r["causal"]) for r in rows]
    lesson07.print_tile_tuning()
    out = capsys.readouterr().out
    assert f"at least {min(r['used'] / r['best'] for r in rows):.2f} of the fastest of 10 candidates" in out


@pytest.mark.parametrize("gpu", ["h100", "h200"])
def test_below_target_from_4k_only_at_d128_without_a_mask(gpu):
    """The prose: from S = 4K on, every point below 0.8 of the fastest SDPA backend is D = 128 without
    a mask (on both recorded GPUs; the lesson shows the H100's)."""
    rows, _ = lesson07.attention_data(live=False, path=gpu_data.DATA_DIR / f"attention_{gpu}.csv")
    below = set()
    for r in rows:
        if r["provider"] == "course" and lesson07._ok(r) and r["S"] >= 4096:
            best = lesson07.best_sdpa(rows, r["dtype"], r["D"], r["causal"], r["S"])
            if r["graph_tflops"] / best[1] < 0.8:
                below.add((r["D"], int(r["causal"])))
    assert below <= {(128, 0)} and below
