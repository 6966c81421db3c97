"""Every number lesson 03's prose quotes, re-derived from figures/data/ with the notebook's own pandas
lines, and checked against the markdown (tests/claims.py): prose and data cannot drift apart."""

from __future__ import annotations

import pandas as pd
import pytest
from claims import cell_with, prose, quotes
from helpers import data

L = "03"


@pytest.fixture(scope="module")
def bw():
    bench = data.load("bench", gpu="h100")
    return bench.query("dtype == 'float32' and M == 4096 and provider in ['copy', 'torch_naive', 'torch_softmax', 'fused']")


@pytest.fixture(scope="module")
def speedup(bw):
    ratios = {}
    for timing, t, spread in (("GPU time", "graph_ms", "graph_spread"), ("eager", "ms", "spread")):
        ms = bw[~data.noisy(bw[spread])].pivot(index="N", columns="provider", values=t)
        ratios[f"naive / fused, {timing}"] = ms.torch_naive / ms.fused
        ratios[f"torch.softmax / fused, {timing}"] = ms.torch_softmax / ms.fused
    return pd.DataFrame(ratios)


@pytest.fixture(scope="module")
def p():
    return data.load("device_props").iloc[0]


@pytest.fixture(scope="module")
def limits_ok():
    limits = data.load("fused_limits")
    return limits.query("status == 'ok'")


def test_the_speedup_over_the_naive_version(speedup):
    """Cell 4 (before the kernel) and the bullets after the measurement quote the same range."""
    lo, hi = speedup["naive / fused, GPU time"].agg(["min", "max"])
    for cell in (cell_with(L, "more than the bytes explain"), cell_with(L, "The naive version is far behind")):
        quotes(cell, f"{lo:.1f} to {hi:.1f} times", "{}")
    lo, hi = speedup["naive / fused, eager"].agg(["min", "max"])
    quotes(cell_with(L, "The naive version is far behind"), f"{lo:.1f} to {hi:.1f} times in eager time", "{}")
    assert speedup["naive / fused, GPU time"].min() > 4  # "more than four times", which the next cell explains


def test_against_torch_softmax(speedup):
    r = speedup["torch.softmax / fused, GPU time"]
    cell = cell_with(L, "The naive version is far behind")
    quotes(cell, f"{r.min():.2f} to {r.max():.2f} times its speed in GPU time", "{}")
    behind = list(r[r < 1].index)
    assert behind == [256] and "behind only at $N = 256$" in cell
    eager = speedup["torch.softmax / fused, eager"].dropna()
    assert (eager[eager.index != 256] >= 1).all()


def test_at_the_speed_of_the_copy_from_1024(bw):
    fused = bw[bw.provider == "fused"].set_index("N").graph_frac
    on = fused.loc[1024:16384]
    assert on.min() > 0.95 and fused.loc[512] < 0.95
    quotes(cell_with(L, "The naive version is far behind"), f"From $N = 1024$ on, the fused kernel runs at the speed of "
                                                             f"the copy** ({on.min():.2f} to {on.max():.2f} of it", "{}")


def test_starred_cells_are_the_two_eager_ones_at_512(bw):
    noisy = bw[data.noisy(bw.spread) | data.noisy(bw.graph_spread)]
    assert sorted(zip(noisy.N, noisy.provider)) == [(512, "torch_naive"), (512, "torch_softmax")]
    assert not data.noisy(bw.graph_spread).any()  # no GPU-time conclusion rests on a noisy cell
    quotes(cell_with(L, "The naive version is far behind"), "two starred cells", "{}")


def test_why_more_than_four_times(bw):
    naive, fused = (bw[bw.provider == name].set_index("N") for name in ("torch_naive", "fused"))
    why = pd.DataFrame({"naive's bytes flow at": 4 * naive.graph_frac, "fused's bytes flow at": fused.graph_frac})
    why["4 x fused / naive"] = 4 * why["fused's bytes flow at"] / why["naive's bytes flow at"]
    why["measured speed-up"] = naive.graph_ms / fused.graph_ms
    pd.testing.assert_series_equal(why["4 x fused / naive"], why["measured speed-up"], check_names=False, rtol=1e-3)
    own = why.loc[:16384, "naive's bytes flow at"]
    cell = cell_with(L, "The speed-up is the bytes")
    quotes(cell, f"{own.min():.2f} to {own.max():.2f} of the copy's speed up to $N = 16384$", "{}")
    assert why.loc[32768, "naive's bytes flow at"] > 1.0 and "At $N = 32768$ the value passes 1.0" in cell


def test_device_facts(p):
    quotes(cell_with(L, "the eager copy reaches"), p.copy_gbps_1GiB / p.dram_peak_gbps)
    assert p.copy_graph_gbps_1GiB < p.copy_gbps_1GiB  # "the copy replayed from a CUDA graph came out slower"


def test_nsight_compute_numbers():
    case = data.load("ncu_h100").set_index("case").loc["small_fp32_256"]
    cell = cell_with(L, "Over the kernel's duration DRAM delivers")
    quotes(cell, case.dram_pct_of_peak, "{:.1f}%")
    quotes(cell, case.achieved_occupancy_pct, "{:.1f}%")
    assert round(3 * case.achieved_occupancy_pct / case.theoretical_occupancy_pct) == 1 and "a third" in cell
    assert case.kernel == "softmax_tiled_kernel"


def test_fractions_above_one(bw, p):
    cell = cell_with(L, "is a comparison, not a physical ceiling")
    quotes(cell, p.dram_peak_gbps, "{:,.0f} GB/s")
    quotes(cell, p.l2_bytes / 2**20, "{:.0f} MiB of L2")
    copy, fused = (bw[bw.provider == name].set_index("N") for name in ("copy", "fused"))
    fits = 2 * 4096 * copy.index * 4 <= p.l2_bytes
    assert (copy.graph_gbps[copy.graph_gbps > p.dram_peak_gbps].index.isin(copy.index[fits])).all()
    big = copy.index.max()
    quotes(cell, copy.graph_gbps[big], "{:,.0f} GB/s, slower")
    quotes(cell, copy.gbps[big], "({:,.0f} GB/s;")
    assert copy.graph_gbps[big] < copy.gbps[big] and abs(fused.graph_gbps[big] / fused.gbps[big] - 1) < 0.02
    quotes(cell, fused.graph_frac[big], "fraction, {:.2f}")
    assert 2 * 4096 * big * 4 / 2**20 / 2 == 512 and "At 512 MiB per tensor" in cell


def test_limits_numbers(limits_ok):
    f32 = limits_ok[limits_ok["dtype"] == "float32"].set_index("N")
    bf16 = limits_ok[limits_ok["dtype"] == "bfloat16"].set_index("N")
    cell = cell_with(L, "**The longest rows spill.**")
    clean, spill = f32[f32.n_spills == 0], f32[f32.n_spills > 0]
    last, first = clean.iloc[-1], spill.iloc[0]
    assert clean.index.max() == 32768 and spill.index.min() == 65536
    quotes(cell, f"Up to $N = {clean.index.max()}$ nothing spills ({last.graph_frac:.2f} of copy, "
                 f"{last.n_regs} registers a thread)", "{}")
    quotes(cell, f"uses {first.n_regs} registers, spills {first.n_spills} and falls to {first.graph_frac:.2f}", "{}")
    r = f32.loc[131072]
    quotes(cell, f"keeps {r.n_regs} registers, spills {r.n_spills} and runs at {r.graph_frac:.2f}", "{}")
    quotes(cell, f"bfloat16: {bf16.graph_frac[65536]:.2f}, then {bf16.graph_frac.min():.2f}", "{}")
    # the steps the prose names are far larger than the rounds' spread (test_limits_spreads_are_small_and_quoted)
    assert last.graph_frac - first.graph_frac > 0.25 and first.graph_frac - r.graph_frac > 0.25


def test_limits_spreads_are_small_and_quoted():
    """Cell 43: three rounds a cell, the largest spread quoted, and no cell noisy (nothing starred)."""
    import inspect

    from helpers import lesson03

    limits = data.load("fused_limits").query("status == 'ok'")
    assert inspect.signature(lesson03.limits_rows).parameters["rounds"].default == 3
    assert not (data.noisy(limits.graph_spread) | data.noisy(limits.spread)).any()
    cell = cell_with(L, "Two ends of the table need explaining")
    quotes(cell, f"median of three rounds, and no cell's rounds spread by more than "
                 f"{limits[['graph_spread', 'spread']].max().max():.1%}", "{}")
    assert "timed once" not in prose(L) and "single round" not in prose(L)


def test_short_rows(limits_ok):
    short = limits_ok.assign(row_bytes=limits_ok.N * limits_ok["dtype"].map({"float32": 4, "bfloat16": 2})).query(
        "row_bytes <= 4096")
    by_bytes = short.groupby("row_bytes").graph_frac
    cell = cell_with(L, "Short rows of the same size in bytes behave alike")
    quotes(cell, f"half a kilobyte ({by_bytes.max()[512]:.2f} of copy)", "{}")
    assert by_bytes.min()[2048] >= 0.99 and "rows of 2 KiB run at the copy's speed" in cell
    # "alike in both dtypes": the two dtypes within a few percent at every row size both have
    both = short.groupby("row_bytes").filter(lambda g: len(g) == 2).groupby("row_bytes").graph_frac
    assert ((both.max() - both.min()) < 0.05).all()
    data_total = limits_ok.iloc[0]
    assert data_total.M * data_total.N * 4 == 2**28 and "fixed at 256 MiB" in prose(L)


def test_four_times_fewer_bytes():
    """The traffic cell: the naive version's reads and writes over the fused kernel's, at M = N = 4096."""
    from helpers.traffic import kernel_traffic

    naive, fused = (sum(kernel_traffic(k, 4096, 4096).values()) for k in ("naive", "fused"))
    assert f"{naive / fused:.2f}" == "4.00"
    assert "Four times fewer bytes" in cell_with(L, "more than the bytes explain")
    assert "a quarter of the naive version's traffic" in cell_with(L, "## Key points")


def test_the_smallest_shape_is_4_mib():
    assert 4096 * 256 * 4 / 2**20 == 4 and "the input is 4 MiB" in prose(L)
