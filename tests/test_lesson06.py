"""Lesson 06 (split rows): the slice statistics and their merge against float64, the first launch's
statistics tensor, the split kernel on rows with all -inf slices, the grid-wait model, the traffic
and L2 model, the data loaders, the figures, and the exercise checkers.

Every checker must print exactly one line and never raise, whatever the learner wrote: a right
answer gives "correct", an untouched template (``raise NotImplementedError``) "not yet", a wrong
answer or an exception "wrong".
"""

from __future__ import annotations

import itertools
import math
import random

import helpers
import matplotlib
import pytest
import torch
from helpers import lesson06
from helpers.lesson06 import IDENTITY, merge, slice_stats

# --------------------------------------------------------------------------------------------
# slice_stats and merge against float64
# --------------------------------------------------------------------------------------------


def _pairs(x: torch.Tensor, s: int) -> list[tuple[float, float]]:
    m, d = slice_stats(x, s)
    return list(zip(m.tolist(), d.tolist()))


@pytest.mark.parametrize("slices", [1, 2, 3, 5, 7, 12, 48, 60])
def test_slice_stats_of_each_slice(slices):
    x = lesson06.demo_rows()
    m, d = slice_stats(x, slices)
    assert m.shape == d.shape == (5, slices)
    L = -(-x.shape[1] // slices)
    for r in range(x.shape[0]):
        for s in range(slices):
            part = x[r, s * L:(s + 1) * L]
            part = part[part != -math.inf]
            if part.numel() == 0:
                assert (m[r, s].item(), d[r, s].item()) == IDENTITY
            else:
                assert m[r, s].item() == part.max().item()
                assert d[r, s].item() == pytest.approx(torch.exp(part - part.max()).sum().item(), rel=1e-14)


def test_slice_stats_does_not_modify_and_keeps_dtype():
    x = torch.randn(2, 9)
    before = x.clone()
    m, d = slice_stats(x, 4)
    assert torch.equal(x, before)
    assert m.dtype == d.dtype == torch.float32


def test_slice_stats_explicit_slice_len_and_errors():
    x = torch.arange(10.0, dtype=torch.float64)
    m, d = slice_stats(x, 3, slice_len=4)
    assert m.tolist() == [3.0, 7.0, 9.0]
    assert d[2].item() == pytest.approx(1 + math.exp(-1))
    with pytest.raises(ValueError, match="do not cover"):
        slice_stats(x, 2, slice_len=4)
    with pytest.raises(ValueError, match="positive int"):
        slice_stats(x, 0)
    with pytest.raises(TypeError):
        slice_stats(torch.arange(4), 2)


def test_merge_floats_identity_and_nan_trap():
    a = (1.5, 2.25)
    assert merge(a, IDENTITY) == a
    assert merge(IDENTITY, a) == a
    assert merge(IDENTITY, IDENTITY) == IDENTITY  # not (-inf, nan)
    m, d = merge((0.0, 1.0), (math.log(3.0), 1.0))
    assert m == pytest.approx(math.log(3.0)) and d == pytest.approx(1 + 1 / 3)


def test_merge_tensors_elementwise():
    ma = torch.tensor([0.0, -math.inf, 2.0, -math.inf], dtype=torch.float64)
    da = torch.tensor([1.0, 0.0, 3.0, 0.0], dtype=torch.float64)
    mb = torch.tensor([1.0, 5.0, -math.inf, -math.inf], dtype=torch.float64)
    db = torch.tensor([2.0, 4.0, 0.0, 0.0], dtype=torch.float64)
    m, d = merge((ma, da), (mb, db))
    assert m.tolist() == [1.0, 5.0, 2.0, -math.inf]
    assert d.tolist() == pytest.approx([math.exp(-1) + 2.0, 4.0, 3.0, 0.0])
    assert not torch.isnan(d).any()


def _random_pair(rng: random.Random):
    if rng.random() < 0.2:
        return IDENTITY
    return rng.uniform(-30, 30), rng.uniform(1.0, 50.0)


def _close(p, q):
    return p[0] == q[0] and (p[1] == q[1] or math.isclose(p[1], q[1], rel_tol=1e-12))


def test_merge_is_commutative_associative_with_identity():
    rng = random.Random(0)
    for _ in range(500):
        a, b, c = (_random_pair(rng) for _ in range(3))
        assert _close(merge(a, b), merge(b, a))
        assert _close(merge(merge(a, b), c), merge(a, merge(b, c)))
        assert _close(merge(a, IDENTITY), a)


@pytest.mark.parametrize("slices", [1, 2, 3, 4, 7, 12, 48])
def test_merge_in_any_order_equals_float64_logsumexp(slices):
    x = lesson06.demo_rows()
    ref = torch.logsumexp(x, dim=-1).tolist()
    rng = random.Random(slices)
    for r in range(x.shape[0]):
        pairs = _pairs(x[r], slices)
        for _ in range(30):
            got = lesson06.logsumexp_of(lesson06.merge_in_random_order(pairs, rng))
            assert got == pytest.approx(ref[r], abs=1e-12)
        # every order of a few pairs, merged left to right
        for perm in itertools.islice(itertools.permutations(pairs), 24):
            acc = IDENTITY
            for p in perm:
                acc = merge(acc, p)
            assert lesson06.logsumexp_of(acc) == pytest.approx(ref[r], abs=1e-12)


def test_merge_of_only_identities_is_identity():
    x = torch.full((12,), -math.inf, dtype=torch.float64)
    pairs = _pairs(x, 4)
    assert all(p == IDENTITY for p in pairs)
    assert lesson06.merge_in_random_order(pairs, random.Random(0)) == IDENTITY
    assert lesson06.logsumexp_of(IDENTITY) == -math.inf
    assert lesson06.merge_in_random_order([], random.Random(0)) == IDENTITY


def test_check_merge_orders_prints_and_passes(capsys):
    assert lesson06.check_merge_orders(orders=5) is True
    out = capsys.readouterr().out
    assert "WRONG" not in out and out.count(" ok") == 5
    assert "12 slices (23 of them all -inf)" in out


def test_check_merge_orders_catches_a_bad_merge(monkeypatch, capsys):
    def no_rescale(a, b):
        return max(a[0], b[0]), a[1] + b[1]

    monkeypatch.setattr(lesson06, "merge", no_rescale)
    assert lesson06.check_merge_orders(orders=3) is False
    assert "WRONG" in capsys.readouterr().out


def test_print_merge_laws(capsys):
    lesson06.print_merge_laws()
    lines = capsys.readouterr().out.splitlines()
    v = {ln.split("=")[0].strip(): ln.split("=", 1)[1].strip() for ln in lines[1:] if "=" in ln}
    assert v["a + b"] == v["b + a"]
    assert v["(a + b) + c"] == v["a + (b + c)"]
    assert v["identity + identity"] == "(-inf, 0.0)"
    assert lines[-1].endswith(v["(a + b) + c"])


# --------------------------------------------------------------------------------------------
# The two-launch kernel: statistics tensor and rows with all -inf slices
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n_cols,slices,block,want", [
    (40, 4, 8, (16, 3)), (3000, 5, 256, (768, 4)), (1000, 16, 64, (64, 16)), (1000, 1, 64, (1024, 1)),
    (256, 4, 128, (128, 2)),
])
def test_split_layout(n_cols, slices, block, want):
    assert lesson06.split_layout(n_cols, slices, block) == want


def test_launch_stats_matches_float64():
    torch.manual_seed(0)
    x = torch.randn(3, 40) * 3
    x[1, :22] = -math.inf
    x[2, 30:] = -math.inf
    stats = lesson06.launch_stats(x, 4, 8).cpu()
    assert stats.shape == (3, 3, 2)
    m, d = slice_stats(x.double(), 3, 16)
    assert torch.equal(stats[..., 0].double(), m)
    assert torch.allclose(stats[..., 1].double(), d, rtol=1e-6, atol=0)
    assert stats[1, 0].tolist() == [-math.inf, 0.0]


def test_compare_stats_prints(capsys):
    torch.manual_seed(0)
    x = torch.randn(2, 24)
    worst = lesson06.compare_stats(x, 3, 8)
    out = capsys.readouterr().out
    assert worst < 1e-6
    assert "3 slices of 8 columns" in out and "every m equals the float64 one" in out


def test_split_on_inf_rows():
    x = lesson06.inf_rows(300)
    for s in (1, 2, 3, 5):
        y = helpers.softmax_split(x.to(helpers.DEVICE), slices=s, block_size=32)
        rep = helpers.error_report(y, x)
        assert rep.nan_mismatch == 0 and rep.ok(atol=1e-6), (s, rep)
        assert torch.isnan(y[4].cpu()).all()


def test_check_split_on_inf_rows(capsys):
    assert lesson06.check_split_on_inf_rows(slices=(1, 3, 8), block_size=32, n_cols=300) is True
    out = capsys.readouterr().out
    assert out.count("  ok") == 3 and "WRONG" not in out


# --------------------------------------------------------------------------------------------
# The grid-wait model
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n_rows,n_slices", [(1, 1), (2, 4), (3, 8), (5, 3)])
def test_grid_wait_whole_grid_resident_always_finishes(n_rows, n_slices):
    grid = n_rows * n_slices
    for order in ("row-major", "slice-major"):
        r = lesson06.simulate_grid_wait(n_rows, n_slices, grid, order)
        assert r["finished"] and r["completed"] == grid


def test_grid_wait_deadlocks():
    # the interpreter: one program at a time
    r = lesson06.simulate_grid_wait(2, 4, 1)
    assert not r["finished"] and r["waiting"] == [(0, 0)] and r["never_started"] == 7
    # one slice per row needs no wait at all, even one at a time
    assert lesson06.simulate_grid_wait(5, 1, 1)["finished"]
    # fewer slots than a row's slices
    assert not lesson06.simulate_grid_wait(2, 4, 3)["finished"]
    # more programs than slots: the order decides
    assert lesson06.simulate_grid_wait(2, 4, 6, "row-major")["finished"]
    r = lesson06.simulate_grid_wait(2, 4, 6, "slice-major")
    assert not r["finished"] and len(r["waiting"]) == 6 and r["never_started"] == 2
    with pytest.raises(ValueError):
        lesson06.simulate_grid_wait(2, 4, 6, "random")


def test_print_grid_wait_cases(capsys):
    lesson06.print_grid_wait_cases()
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 6
    assert [("DEADLOCK" in ln) for ln in lines[1:]] == [True, False, False, True, True]


# --------------------------------------------------------------------------------------------
# Programs, traffic and L2
# --------------------------------------------------------------------------------------------


def test_programs_table(capsys):
    lesson06.print_programs_table(sm_count=132, per_sm=8)
    out = capsys.readouterr().out
    assert "1056 programs" in out
    row = next(ln for ln in out.splitlines() if ln.strip().startswith("8 x 1M"))
    assert row.split()[3:] == ["8", "0.06", "124", "128", "8,192", "1,024", "7.76"]


def test_fits_in_l2_and_two_launch_bytes():
    l2 = 60 * 2**20
    assert lesson06.fits_in_l2(8, 2**20, 4, l2)  # 32 MiB
    assert not lesson06.fits_in_l2(64, 2**18, 4, l2)  # 64 MiB
    assert lesson06.fits_in_l2(64, 2**18, 2, l2)
    assert lesson06.fits_in_l2(4, 1000, 4, 16000)  # exactly full counts as fitting
    assert lesson06.two_launch_dram_bytes_answer(8, 2**20, 4, l2) == 2 * 32 * 2**20
    assert lesson06.two_launch_dram_bytes_answer(64, 2**18, 4, l2) == 3 * 64 * 2**20


def test_traffic_table(capsys):
    lesson06.print_traffic_table(l2_bytes=62914560)
    lines = capsys.readouterr().out.splitlines()
    rows = {(ln.split()[0], ln.split()[1] + ln.split()[2] + ln.split()[3]): ln for ln in lines[3:]}
    assert len(rows) == 8
    f8 = rows[("float32", "8x1M")].split()
    assert f8[4:7] == ["32", "yes", "no"] and f8[-2:] == ["64", "(2MN)"]
    f64 = rows[("float32", "64x256K")].split()
    assert f64[5] == "no" and "192 (3MN)" in rows[("float32", "64x256K")]
    assert all(ln.rstrip().endswith("(2MN)") for ln in lines[3:])  # the cooperative column


def test_traffic_designs():
    for _key, (_name, reads, l2_able, writes) in lesson06.DESIGNS.items():
        assert writes == 1 and 0 <= l2_able < reads
    assert lesson06.DESIGNS["split_coop"][1] + lesson06.DESIGNS["split_coop"][3] == 2
    assert lesson06.DESIGNS["split"][1] + lesson06.DESIGNS["split"][3] == 3


# --------------------------------------------------------------------------------------------
# Data loaders (recorded)
# --------------------------------------------------------------------------------------------


def test_bench_data_recorded():
    rows, meta = lesson06.bench_data(live=False)
    assert "gpu" in meta and rows
    assert {(r["M"], r["N"]) for r in rows} == set(lesson06.LONG_SHAPES)
    provs = lesson06.providers_in(rows)
    assert {"torch_softmax", "online"} <= set(provs)
    assert all(p in lesson06.PROVIDERS for p in provs)


def test_bench_table_and_summary(capsys):
    rows, _ = lesson06.bench_data(live=False)
    lesson06.print_bench_table(rows, "float32")
    lesson06.bench_summary(rows)
    out = capsys.readouterr().out
    assert "1024 x 64K" in out and "8 x 1M" in out
    assert "of 8 reach the target of 0.85" in out


def test_bench_handles_missing_providers(capsys):
    rows = [dict(dtype="float32", M=8, N=2**20, provider="torch_softmax", frac_of_copy=0.06, status="ok"),
            dict(dtype="float32", M=8, N=2**20, provider="split_coop", frac_of_copy=0.63, status="ok"),
            dict(dtype="float32", M=8, N=2**20, provider="online", frac_of_copy=float("nan"), status="failed: x")]
    assert lesson06.providers_in(rows) == ["torch_softmax", "split_coop"]
    lesson06.print_bench_table(rows, "float32")
    lesson06.bench_summary(rows)
    out = capsys.readouterr().out
    assert "no split column" in out
    assert "reaches 0.63 to 0.63" in out or "it reaches 0.63 to 0.63" in out
    assert "10.50x" in out


def test_variants_recorded_and_best():
    rows, meta = lesson06.variants_data(live=False)
    assert "gpu" in meta
    best = lesson06.best_variants(rows)
    assert len(best) == 8
    for (d, M, N), b in best.items():
        assert {"split", "coop", "online", "torch_softmax"} <= set(b)
        for dz, (frac, variant) in b.items():
            assert lesson06.design(variant) == dz
            assert frac == max(r["frac_of_copy"] for r in rows
                               if (r["dtype"], r["M"], r["N"]) == (d, M, N) and r["status"] == "ok"
                               and lesson06.design(r["variant"]) == dz)


def test_l2_points_and_print(capsys):
    rows, _ = lesson06.variants_data(live=False)
    pts = lesson06.l2_points(rows)
    assert [p["x_bytes"] for p in pts] == sorted(p["x_bytes"] for p in pts)
    for p in pts:
        assert p["ratio"] == pytest.approx(p["split"] / p["coop"])
        assert p["copy_ms"] > 0
    lesson06.print_l2_effect(rows, l2_bytes=62914560)
    lesson06.print_best_variants(rows, l2_bytes=62914560)
    out = capsys.readouterr().out
    assert "x fits in L2 (3 shapes)" in out and "x does not fit in L2 (5 shapes)" in out
    assert "best split configuration anywhere" in out


def test_live_data_needs_a_gpu():
    if helpers.ON_GPU:
        pytest.skip("live measurements run on a GPU")
    for fn in (lesson06.bench_data, lesson06.variants_data, lesson06.device_props):
        with pytest.raises(RuntimeError, match="live=False"):
            fn(live=True)


def test_shape_name():
    assert lesson06.shape_name(8, 2**20) == "8 x 1M"
    assert lesson06.shape_name(1024, 65536) == "1024 x 64K"
    assert lesson06.shape_name(3, 1000) == "3 x 1000"


# --------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(lesson06.FIGURES))
def test_figures(name):
    import matplotlib.pyplot as plt

    assert name.startswith("06_")
    fig = lesson06.FIGURES[name]()
    try:
        assert isinstance(fig, matplotlib.figure.Figure)
        assert fig.axes
    finally:
        plt.close(fig)


def test_traffic_figure_bars():
    import matplotlib.pyplot as plt

    fig = lesson06.plot_traffic()
    try:
        texts = [t.get_text() for t in fig.axes[0].texts]
        assert texts == ["3 MN from DRAM", "3 MN from DRAM", "2 MN from DRAM", "2 MN from DRAM"]
    finally:
        plt.close(fig)


# --------------------------------------------------------------------------------------------
# Exercise checkers
# --------------------------------------------------------------------------------------------


def _untouched(*args):
    raise NotImplementedError


def _raises(*args):
    return 1 / 0


def combine_right(stats):
    m_s, d_s = stats[..., 0], stats[..., 1]
    m = m_s.max(dim=-1).values
    moved = torch.where(d_s == 0, 0.0, d_s * torch.exp(m_s - m[:, None]))
    return m, moved.sum(dim=-1)


def combine_no_guard(stats):
    m_s, d_s = stats[..., 0], stats[..., 1]
    m = m_s.max(dim=-1).values
    return m, (d_s * torch.exp(m_s - m[:, None])).sum(dim=-1)


def combine_no_rescale(stats):
    return stats[..., 0].max(dim=-1).values, stats[..., 1].sum(dim=-1)


CHECKERS = {
    "6.1": (lesson06.check_6_1, combine_right, combine_no_rescale),
    "6.2": (lesson06.check_6_2, lambda M, s, k: max(1, -(-k * s // M)), lambda M, s, k: k * s // M),
    "6.3": (lesson06.check_6_3, lambda M, N, e, l2: (2 if M * N * e <= l2 else 3) * M * N * e,
            lambda M, N, e, l2: 3 * M * N * e),
}


def _run(capsys, checker, attempt) -> str:
    result = checker(attempt)
    assert result is None, "a checker returns nothing (so a notebook cell shows only its line)"
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) == 1, f"expected exactly one line, got {out!r}"
    return lines[0]


@pytest.mark.parametrize("ex", list(CHECKERS))
def test_checker_right(capsys, ex):
    checker, right, _ = CHECKERS[ex]
    line = _run(capsys, checker, right)
    assert line.startswith(f"Exercise {ex} (") and "): correct" in line, line


@pytest.mark.parametrize("ex", list(CHECKERS))
def test_checker_untouched(capsys, ex):
    checker, _, _ = CHECKERS[ex]
    line = _run(capsys, checker, _untouched)
    assert "): not yet: replace `raise NotImplementedError`" in line, line


@pytest.mark.parametrize("ex", list(CHECKERS))
@pytest.mark.parametrize("value", [None, ...])
def test_checker_unattempted_value(capsys, ex, value):
    checker, _, _ = CHECKERS[ex]
    line = _run(capsys, checker, value)
    assert "): not yet" in line, line


@pytest.mark.parametrize("ex", list(CHECKERS))
def test_checker_wrong(capsys, ex):
    checker, _, wrong = CHECKERS[ex]
    line = _run(capsys, checker, wrong)
    assert "): wrong: " in line, line
    assert "raised" not in line, line


@pytest.mark.parametrize("ex", list(CHECKERS))
def test_checker_exception(capsys, ex):
    checker, _, _ = CHECKERS[ex]
    line = _run(capsys, checker, _raises)
    assert line.endswith("): wrong: your code raised ZeroDivisionError: division by zero"), line


@pytest.mark.parametrize("ex", list(CHECKERS))
def test_checker_missing_return_and_not_a_function(capsys, ex):
    checker, _, _ = CHECKERS[ex]
    line = _run(capsys, checker, lambda *a: None)
    assert "wrong: your function returned None" in line, line
    line = _run(capsys, checker, 42)
    assert "wrong: expected a function, got int" in line, line


def test_checker_6_1_verdicts(capsys):
    line = _run(capsys, lesson06.check_6_1, combine_no_guard)
    assert "wrong" in line and "NaN" in line, line
    line = _run(capsys, lesson06.check_6_1, combine_no_rescale)
    assert "moved to the row's maximum" in line, line
    line = _run(capsys, lesson06.check_6_1, lambda s: combine_right(s)[0])
    assert "return a pair of tensors" in line, line
    line = _run(capsys, lesson06.check_6_1, lambda s: tuple(t[:, None] for t in combine_right(s)))
    assert "one per row" in line, line

    def modifies(stats):
        out = combine_right(stats.clone())
        stats[..., 1] = 0.0
        return out

    line = _run(capsys, lesson06.check_6_1, modifies)
    assert "changed the statistics tensor" in line, line
    # a float32 answer is fine: the checker compares in float64 with a tolerance
    line = _run(capsys, lesson06.check_6_1, lambda s: tuple(t.float().double() for t in combine_right(s)))
    assert "): correct" in line, line


def test_checker_6_2_verdicts(capsys):
    line = _run(capsys, lesson06.check_6_2, lambda M, s, k: k * s / M)
    assert "return an int" in line, line
    line = _run(capsys, lesson06.check_6_2, lambda M, s, k: -(-k * s // M))  # ceil alone is enough: M >= 1
    assert "): correct" in line, line
    line = _run(capsys, lesson06.check_6_2, lambda M, s, k: math.ceil(k * s / M) * 1.0)
    assert "got the float" in line, line
    line = _run(capsys, lesson06.check_6_2, lambda M, s, k: -(-k * s // M) + 1)
    assert "are already enough" in line, line


def test_checker_6_3_verdicts(capsys):
    line = _run(capsys, lesson06.check_6_3, lambda M, N, e, l2: 3 * M * N * e)
    assert "fits in L2" in line and "from L2" in line, line
    line = _run(capsys, lesson06.check_6_3, lambda M, N, e, l2: (2 if M * N * e < l2 else 3) * M * N * e)
    assert "wrong" in line and "fits in L2" in line, line  # exactly full counts as fitting
    line = _run(capsys, lesson06.check_6_3, lambda M, N, e, l2: "lots")
    assert "return a number of bytes" in line, line


def test_answers_match_the_solutions():
    assert lesson06.slices_per_row_answer(8, 132, 4) == 66
    assert lesson06.slices_per_row_answer(1024, 132, 4) == 1
    assert lesson06.slices_per_row_answer(528, 132, 4) == 1
    assert lesson06.slices_per_row_answer(527, 132, 4) == 2
    stats = torch.tensor([[[1.0, 2.0], [-math.inf, 0.0]], [[-math.inf, 0.0], [-math.inf, 0.0]]], dtype=torch.float64)
    m, d = lesson06.combine_answer(stats)
    assert m.tolist() == [1.0, -math.inf] and d.tolist() == [2.0, 0.0]


def test_softmax_choice_check(capsys):
    base = dict(dtype="float32", M=8, N=2**20, status="ok")
    rows = [dict(base, provider="split", frac_of_copy=0.6), dict(base, provider="split_coop", frac_of_copy=0.62),
            dict(base, provider="softmax", frac_of_copy=0.61),
            dict(base, M=64, N=2**18, provider="split", frac_of_copy=0.6),
            dict(base, M=64, N=2**18, provider="softmax", frac_of_copy=0.3)]
    lesson06.softmax_choice_check(rows)
    out = capsys.readouterr().out.strip()
    assert out == ("helpers.softmax is within 5% of the better split wrapper at 1 of 2 shapes; "
                   "not at float32 64 x 256K (0.30 against 0.60)")
    lesson06.softmax_choice_check(rows[:2])
    assert "no helpers.softmax" in capsys.readouterr().out
