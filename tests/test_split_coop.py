"""The cooperative split kernel never returns a silently wrong result: a program that gives up
waiting for its row's other slices (MAX_SPIN polls) reads the whole row and computes the row's
statistics itself, and counts the event in the workspace's last word. Forced here with a tiny spin limit: under the interpreter
programs run one after another, so every program but the last of each row gives up; on a GPU some programs give up. On a
GPU each warp loads its own copy of the row's slots, so the wait's every verdict is a vote of the whole program (lesson
06's ``program_all``): it leaves the wait together, once every copy is complete."""

import pytest
import torch
import triton

import helpers
from helpers.kernels import softmax_split_coop_kernel
from helpers.mode import DEVICE


def _launch(x, slice_cols, rows_per_round, max_spin):
    M, N = x.shape
    n_slices = triton.cdiv(N, slice_cols)
    out = torch.full_like(x, float("nan"))
    ws = torch.zeros(2 * M * n_slices + 1, dtype=torch.int32, device=DEVICE)  # a 64-bit word per slice, give-ups
    softmax_split_coop_kernel[(rows_per_round * n_slices,)](
        out,
        x,
        ws,
        x.stride(0),
        x.stride(1),
        out.stride(0),
        M,
        N,
        n_slices,
        rows_per_round,
        SLICE=slice_cols,
        SLICES_P2=triton.next_power_of_2(n_slices),
        MAX_SPIN=max_spin,
        **({"launch_cooperative_grid": True} if helpers.ON_GPU else {}),
    )
    words = ws[: 2 * M * n_slices].view(torch.int64).view(M, n_slices)
    return out, words, int(ws[-1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_timed_out_wait_still_gives_the_right_answer(dtype):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(5, 300, generator=g) * 5).to(dtype)
    x[1] = float("-inf")  # a row of -inf: NaN, as torch.softmax
    x[2, :100] = float("-inf")  # a row whose first slices are all -inf
    x[3, 7] = 1e4  # a huge spread
    x = x.to(DEVICE)
    # On a GPU which programs give up changes from launch to launch: with each warp deciding for itself when
    # to stop waiting, 14 to 20 of 20 such launches (1, 2 or 5 rows a round) were wrong on an H200.
    for _ in range(20 if helpers.ON_GPU else 1):
        out, words, timeouts = _launch(x, slice_cols=64, rows_per_round=2, max_spin=1)
        helpers.assert_matches_reference(out, x)
    if helpers.INTERPRETER:  # every program but the last of each row and round gave up
        assert timeouts == 5 * 5 - 5
    assert bool((words != 0).all())  # every slice still published its pair, never a 0 word
    # the words are the slices' (m, d) pairs: m's float32 bits low, d's high
    m = (words & 0xFFFFFFFF).to(torch.int32).view(torch.float32)
    d = (words >> 32).to(torch.int32).view(torch.float32)
    xs = torch.nn.functional.pad(x.float(), (0, 5 * 64 - 300), value=float("-inf")).view(5, 5, 64)
    m_ref = xs.max(dim=-1).values
    d_ref = torch.where(m_ref == float("-inf"), 0.0, torch.exp(xs - m_ref[..., None]).nan_to_num(0.0).sum(-1))
    assert torch.equal(m, m_ref)
    assert torch.allclose(d, d_ref, rtol=1e-5)


def test_a_healthy_launch_never_times_out():
    """The wrapper's spin limit is far above what a resident grid needs: no program gives up."""
    if not helpers.ON_GPU:
        pytest.skip("the interpreter runs programs one after another: only a GPU runs them concurrently")
    x = torch.randn(8, 1 << 20, device=DEVICE)
    out, words, timeouts = _launch(x, slice_cols=8192, rows_per_round=1, max_spin=helpers.kernels.MAX_SPIN)
    helpers.assert_matches_reference(out, x)
    assert timeouts == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("slice_cols,num_warps", [(1024, 4), (1024, 8)])
def test_warps_that_hold_the_same_slots_agree(slice_cols, num_warps, dtype):
    """48 slices (SLICES_P2 = 64) over 128 or 256 threads: two or four warps hold a copy of each slot, each loaded
    at its own moment, and the merge reduces across them through shared memory. Compiled by Triton 3.9, the wait
    whose verdict was not a vote gave wrong rows in 90 to 200 of 200 launches at these configurations on an H200
    (``figures/data/bench_runs/coop_wait_vote_h200.csv``; Triton 3.6 reads one copy, and passed either way)."""
    if not helpers.ON_GPU:
        pytest.skip("the interpreter runs a program as one thread: there is one copy of the slots")
    g = torch.Generator().manual_seed(5)
    x = (torch.randn(64, 48 * slice_cols - 300, generator=g) * 3).to(dtype).to(DEVICE)
    plan = helpers.kernels.split._split_coop.plan(x, slice_cols, num_warps)
    assert triton.next_power_of_2(plan.info["slices"]) == 64 and plan.info["rows_per_round"] < 64  # several rounds
    for _ in range(50):
        helpers.assert_matches_reference(helpers.softmax_split_coop(x, slice_cols, num_warps), x)


# --------------------------------------------------------------------------------------------
# The cooperative kernel's configuration: helpers.tuning, a data layer the kernels import
# --------------------------------------------------------------------------------------------

import ast  # noqa: E402
from pathlib import Path  # noqa: E402

from helpers import tuning  # noqa: E402

HELPERS = Path(helpers.__file__).resolve().parent


def _module_imports(path: Path) -> set[str]:
    """Every helpers module a file imports, at module level or inside functions."""
    pkg = "helpers" + "".join("." + p for p in path.relative_to(HELPERS).parent.parts)
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = pkg.rsplit(".", node.level - 1)[0] if node.level else ""
            mod = ".".join(p for p in (base, node.module or "") if p)
            out.add(mod)
            out |= {f"{mod}.{a.name}" for a in node.names}
    return {m for m in out if m.startswith("helpers.")}


def _graph() -> dict[str, set[str]]:
    mods = {
        ("helpers." + ".".join(p.relative_to(HELPERS).with_suffix("").parts)).removesuffix(".__init__"): p
        for p in HELPERS.rglob("*.py")
    }
    return {m: {i for i in _module_imports(p) if i in mods and i != m} for m, p in mods.items()}


def _reaches(graph, start, goal) -> bool:
    seen, todo = set(), [start]
    while todo:
        m = todo.pop()
        for n in graph.get(m, ()):
            if n == goal:
                return True
            if n not in seen and n != "helpers":  # the package itself re-exports everything
                seen.add(n)
                todo.append(n)
    return False


def test_tuning_imports_no_kernel_and_no_circle_remains():
    g = _graph()
    assert not {m for m in g["helpers.tuning"] if m.startswith("helpers.kernels")}, g["helpers.tuning"]
    assert "helpers.tuning" in g["helpers.kernels.split"]  # the kernel module reads the tuned table
    for m in ("helpers.tuning", "helpers.kernels.split"):
        assert not _reaches(g, m, m), f"{m} imports itself back"


def _fake_timer(monkeypatch, cost):
    """Replace the GPU timer: a candidate's time is ``cost[its configuration]``; the copy takes 1."""
    last = []
    monkeypatch.setattr(tuning, "_gpu_ms", lambda fn: (last.clear(), fn(), cost.get(tuple(last), 1.0))[2])
    return last


def test_autotune_coop_times_the_wrapper_it_is_given_and_never_picks_a_failure(monkeypatch):
    cost = {
        (2048, 2): 2.5,
        (2048, 4): 2.2,
        (4096, 2): 1.8,
        (4096, 4): 2.0,
        (4096, 8): 1.5,
        (8192, 4): 1.6,
        (8192, 8): 0.5,
        (8192, 16): 1.25,
        (16384, 16): 3.0,
        (16384, 32): 4.0,
    }
    assert set(cost) == set(tuning.coop_candidates())
    last = _fake_timer(monkeypatch, cost)

    def coop(x, slice_cols, num_warps):
        last[:] = [slice_cols, num_warps]
        if (slice_cols, num_warps) == (8192, 8):
            return torch.zeros_like(x)  # the fastest, but wrong: the tuner's float64 check rejects it
        if (slice_cols, num_warps) == (16384, 32):
            raise RuntimeError("too many blocks in cooperative launch")
        return torch.softmax(x.double(), -1).to(x.dtype)

    best, rows = tuning.autotune_coop(4, 512, torch.float32, coop, device="cpu")
    assert (best.slice_cols, best.num_warps, best.source) == (8192, 16, "tuned")
    by = {(r["slice_cols"], r["num_warps"]): r for r in rows}
    assert len(rows) == len(tuning.coop_candidates())
    assert by[(8192, 8)]["status"].startswith("failed: AssertionError: max abs error")
    assert by[(16384, 32)]["status"].startswith("failed: RuntimeError: too many blocks")
    assert by[(4096, 8)]["graph_frac"] == round(1.0 / 1.5, 4) and by[(4096, 8)]["status"] == "ok"
    assert tuning.best_of(rows)[1] == {("float32", 4, 512): tuning.CoopConfig(8192, 16, "recorded")}


def test_sweep_runs_both_wrappers_it_is_given(monkeypatch):
    monkeypatch.setattr(tuning, "TILED_BLOCKS", (256,))
    monkeypatch.setattr(tuning, "LONG_SHAPES", ((2, 1024),))
    monkeypatch.setattr(tuning, "TUNE_ROWS", 8)
    _fake_timer(monkeypatch, {})
    calls = {"tiled": 0, "coop": 0}

    def tiled(x, *config):
        calls["tiled"] += 1
        return torch.softmax(x, -1)

    def coop(x, *config):
        calls["coop"] += 1
        return torch.softmax(x, -1)

    rows = tuning.sweep(tiled, coop, dtypes=(torch.float32,), device="cpu")
    assert {r["kind"] for r in rows} == {"tiled", "coop"}
    assert calls["coop"] == 2 * len(tuning.coop_candidates())  # checked once, timed once each
    assert calls["tiled"] == 2 * len(tuning.tiled_candidates(256, 4))
    assert all(r["status"] == "ok" for r in rows)


def test_coop_config_tunes_a_new_gpu_once_with_the_wrapper_it_is_given(monkeypatch, tmp_path):
    monkeypatch.setenv("SOFTMAX_COURSE_CACHE", str(tmp_path))
    monkeypatch.setattr(tuning, "ON_GPU", True)
    monkeypatch.setattr(tuning, "_gpu_name", lambda: "Imaginary GPU 1")
    monkeypatch.setattr(tuning, "_TABLES", {})
    tuned = []

    def fake_autotune(M, N, dtype, wrapper, device="cuda"):
        tuned.append((M, N, wrapper))
        return tuning.CoopConfig(16384 if M < 100 else 4096, 8, "tuned"), []

    monkeypatch.setattr(tuning, "autotune_coop", fake_autotune)
    assert tuning.coop_config(8, 1 << 20, torch.float32) == tuning.coop_rule(8)  # no wrapper: the rule
    assert tuned == []
    cfg = tuning.coop_config(8, 1 << 20, torch.float32, tune="the wrapper")
    assert (cfg.slice_cols, cfg.num_warps) == (16384, 8)
    assert [t[:2] for t in tuned] == list(tuning.LONG_SHAPES) and {t[2] for t in tuned} == {"the wrapper"}
    assert tuning.coop_config(1024, 65536, torch.float32, tune="the wrapper").slice_cols == 4096
    assert len(tuned) == len(tuning.LONG_SHAPES)  # tuned once, then looked up
    monkeypatch.setattr(tuning, "_TABLES", {})  # a new process reads the disk cache
    assert tuning.coop_config(8, 1 << 20, torch.float32).source == "tuned"


def test_the_recorded_h100_table_gives_the_lessons_configuration():
    from helpers.gpu_data import read_csv

    rows, _ = read_csv(tuning.recorded_path("NVIDIA H100 80GB HBM3"))
    coop = tuning.best_of(rows)[1]
    assert coop[tuning.nearest_coop(coop, "float32", 1024, 65536)][:2] == (
        8192,
        4,
    )  # lesson 06's "8192 × 4 on the H100"
    assert coop[tuning.nearest_coop(coop, "float32", 8, 1 << 20)][:2] == (8192, 4)
    assert tuning.nearest_coop(coop, "float64", 8, 1 << 20) is None
