"""Every number lesson 03's prose quotes, re-derived from figures/data/ with the notebook's own pandas
lines, and checked against the markdown (tests/claims.py): prose and data cannot drift apart."""

from __future__ import annotations

import pandas as pd
import pytest
from claims import cell_with, code_cell_with, notebook, prose, quotes

from helpers import data

L = "03"


@pytest.fixture(scope="module")
def bw():
    bench = data.load("bench", gpu="h100")
    return bench.query(
        "dtype == 'float32' and M == 4096 and provider in ['copy', 'torch_naive', 'torch_softmax', 'fused']"
    )


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
    quotes(
        cell_with(L, "The naive version is far behind"),
        f"From $N = 1024$ on, the fused kernel runs at the speed of the copy** ({on.min():.2f} to {on.max():.2f} of it",
        "{}",
    )


def test_starred_cells_are_the_two_eager_ones_at_512(bw):
    noisy = bw[data.noisy(bw.spread) | data.noisy(bw.graph_spread)]
    assert sorted(zip(noisy.N, noisy.provider)) == [(512, "torch_naive"), (512, "torch_softmax")]
    assert not data.noisy(bw.graph_spread).any()  # no GPU-time conclusion rests on a noisy cell
    quotes(cell_with(L, "The naive version is far behind"), "two starred cells", "{}")


def test_why_more_than_four_times(bw):
    """Each version's own bytes per second against the copy's, up to N = 16384 (N = 32768's copy was slow in GPU time);
    no column that restates the measured speed-up."""
    naive, fused = (bw[bw.provider == name].set_index("N").loc[:16384] for name in ("torch_naive", "fused"))
    flow = pd.DataFrame({"naive (01)": 4 * naive.graph_frac, "fused (03)": fused.graph_frac})
    cell = cell_with(L, "It loses twice")
    own = flow["naive (01)"]
    quotes(cell, f"the naive version moves its own at {own.min():.2f} to {own.max():.2f} of it", "{}")
    assert (
        flow.loc[1024:, "fused (03)"].round(2).min() >= 0.99
        and "From $N = 1024$ on the fused kernel moves its bytes at the copy's speed" in cell
    )
    assert own.idxmax() == 16384 and f"{own[16384]:.2f} at $N = 16384$" in cell  # it rises with the size
    assert (own.loc[:512].between(0.45, 0.55)).all() and "about half the copy's speed at the two smallest sizes" in cell
    assert own.loc[:512].max() < own.loc[2048:].min()
    code = code_cell_with(L, "flow = pd.DataFrame(")
    assert ".loc[:16384]" in code and "speed-up" not in code and "graph_ms" not in code
    copy = bw[bw.provider == "copy"].set_index("N")
    assert copy.graph_gbps[32768] < copy.gbps[32768]  # why N = 32768 is left out
    assert "N = 32768$ is left out" in cell_with(L, "### Why more than four times?")


def test_device_facts(p):
    quotes(cell_with(L, "a large copy reaches"), p.copy_gbps_1GiB / p.dram_peak_gbps)


def test_nsight_compute_numbers():
    case = data.load("ncu_h100").set_index("case").loc["small_fp32_256"]
    cell = cell_with("03d", "Over the kernel's duration DRAM delivers")
    quotes(cell, case.dram_pct_of_peak, "{:.1f}%")
    quotes(cell, case.achieved_occupancy_pct, "{:.1f}%")
    assert round(3 * case.achieved_occupancy_pct / case.theoretical_occupancy_pct) == 1 and "a third" in cell
    assert case.kernel == "softmax_tiled_kernel"


def test_fractions_above_one(bw, p):
    cell = cell_with(L, "**In GPU time, a tensor that fits in L2 is read from L2.**")
    quotes(cell, p.dram_peak_gbps, "{:,.0f} GB/s")
    quotes(cell, p.l2_bytes / 2**20, "{:.0f} MiB of L2")
    copy, fused = (bw[bw.provider == name].set_index("N") for name in ("copy", "fused"))
    fits = 2 * 4096 * copy.index * 4 <= p.l2_bytes
    assert (copy.graph_gbps[copy.graph_gbps > p.dram_peak_gbps].index.isin(copy.index[fits])).all()
    assert (copy.graph_gbps[fits] > p.dram_peak_gbps).all()
    big = copy.index.max()
    quotes(cell, copy.graph_gbps[big], "{:,.0f} GB/s, slower")
    quotes(cell, copy.gbps[big], "({:,.0f} GB/s)")
    assert copy.graph_gbps[big] < copy.gbps[big] and abs(fused.graph_gbps[big] / fused.gbps[big] - 1) < 0.02
    quotes(cell, fused.graph_frac[big], "fraction, {:.2f}")
    quotes(cell, fused.frac_of_copy[big], "read the eager {:.2f} there")
    assert 2 * 4096 * big * 4 / 2**20 / 2 == 512 and "At 512 MiB per tensor" in cell
    # the other cells above 1.0, in both timings, are within a few percent of it
    others = pd.concat([fused.graph_frac.drop(big), fused.frac_of_copy])
    others = others[others.round(2) > 1.0]  # as the tables show them
    quotes(cell, f"The other cells above 1.0 read {others.min():.2f} to {others.max():.2f}", "{}")
    assert others.max() < 1.05
    assert "a point we come back to" not in prose(L) and "the ceiling" not in prose(L)


def test_the_4_mib_shape(bw):
    small = bw.query("N == 256 and provider != 'torch_naive'").set_index("provider")
    cell = cell_with(L, "at this size the bytes do not set the time")
    quotes(cell, small.graph_ms.fused * 1e3, "takes {:.1f} µs in GPU time")
    quotes(cell, small.graph_ms["copy"] * 1e3, "the copy {:.1f} µs")
    assert (small.graph_ms * 1e3 < 10).all()  # "each done in a few microseconds"


def test_the_core_uses_only_what_lessons_01_to_03_taught():
    """No plan, launch object or wrapper of the library, and no provider or recording of a later lesson."""
    code = "\n".join("".join(c["source"]) for c in notebook(L)["cells"] if c["cell_type"] == "code")
    for name in (
        "Plan",
        "Launch",
        "RowWise",
        "ncu",
        "online",
        "persistent",
        "liger",
        "triton_tutorial",
        "'softmax'",
        "MAX_FUSED_COLS",
    ):
        assert name not in code, name
    launch = code_cell_with(L, "def fused_softmax(x):")
    assert "softmax_fused_kernel[(M,)](y, x, x.stride(0), x.stride(1), y.stride(0), N," in launch
    cells = notebook(L)["cells"]
    first_launch = next(i for i, c in enumerate(cells) if "softmax_fused_kernel[(M,)]" in "".join(c["source"]))
    exercise = next(i for i, c in enumerate(cells) if "".join(c["source"]).startswith("## Exercise 3.2"))
    assert first_launch < exercise


def test_the_core_prints_one_short_provenance_line_for_the_sweep():
    """The rows the core reads (float32, M = 4096, N <= 32768; copy, naive, torch.softmax, fused) are the first
    sweep's: every later re-run the file's date names is of other rows, so the core prints that sweep's date."""
    meta = data.load("bench", gpu="h100").attrs["provenance"]
    first, later = meta["date"].split(" (", 1)
    assert later.startswith("some cells re-run until") and later.endswith(": notes)"), later
    reruns = meta["notes"].split("Dates and commits of the re-runs: ", 1)[1].split("; ")
    assert len(reruns) == 3 and all(
        part.startswith(("long rows", "their split_coop and softmax rows", "softmax at")) for part in reruns
    ), reruns
    code = code_cell_with(L, 'bench = data.load("bench", gpu="h100")')
    assert 'meta["date"].split(" (")[0]' in code
    out = next(
        "".join(o.get("text", ""))
        for c in notebook(L)["cells"]
        if c["cell_type"] == "code" and 'bench = data.load("bench", gpu="h100")' in "".join(c["source"])
        for o in c["outputs"]
    )
    assert first in out and "(notes)" not in out and len(out.strip()) < 200 and out.count("\n") == 1, out


def test_limits_numbers(limits_ok):
    f32 = limits_ok[limits_ok["dtype"] == "float32"].set_index("N")
    bf16 = limits_ok[limits_ok["dtype"] == "bfloat16"].set_index("N")
    cell = cell_with(L, "**The longest rows spill.**")
    clean, spill = f32[f32.n_spills == 0], f32[f32.n_spills > 0]
    last, first = clean.iloc[-1], spill.iloc[0]
    assert clean.index.max() == 32768 and spill.index.min() == 65536
    quotes(
        cell,
        f"Up to $N = {clean.index.max()}$ nothing spills ({last.graph_frac:.2f} of copy, "
        f"{last.n_regs} registers a thread)",
        "{}",
    )
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
    quotes(
        cell,
        f"median of three rounds, and no cell's rounds spread by more than "
        f"{limits[['graph_spread', 'spread']].max().max():.1%}",
        "{}",
    )
    assert "timed once" not in prose(L) and "single round" not in prose(L)


def test_short_rows(limits_ok):
    short = limits_ok.assign(row_bytes=limits_ok.N * limits_ok["dtype"].map({"float32": 4, "bfloat16": 2})).query(
        "row_bytes <= 4096"
    )
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


# ---- the deep dive (03d) ------------------------------------------------------------------------------------------

D = "03d"


def test_deep_dive_host_time(bw):
    from helpers import plots

    host = bw.pivot(index="N", columns="provider", values="host_us").rename(columns=plots.label)
    lo, hi = host.min(), host.max()
    cell = cell_with(D, "The wrapper's call costs the host")
    quotes(cell, f"costs the host {lo['fused (03)']:.1f} to {hi['fused (03)']:.1f} µs", "{}")
    quotes(cell, f"`torch.softmax`'s ({lo['torch.softmax']:.1f} to {hi['torch.softmax']:.1f} µs)", "{}")
    quotes(cell, f"`y.copy_(x)` ({lo['copy (y.copy_(x))']:.1f} to {hi['copy (y.copy_(x))']:.1f} µs)", "{}")
    assert 1.6 < hi["fused (03)"] / lo["fused (03)"] < 2 and "nearly a factor of two" in cell


def test_deep_dive_max_fused_cols(limits_ok):
    from helpers import MAX_FUSED_COLS
    from helpers.kernels import TILED_MAX_COLS

    f32 = limits_ok[limits_ok["dtype"] == "float32"].set_index("N")
    cell = cell_with(D, "The limit is *not* where the kernel stops being fast")
    clean = f32[f32.n_spills == 0].index.max()
    quotes(cell, f"between {clean} columns (no spill, {f32.graph_frac[clean]:.2f} of copy)", "{}")
    quotes(
        cell,
        f"and {MAX_FUSED_COLS} ({f32.n_spills[MAX_FUSED_COLS]} registers spilled, "
        f"{f32.graph_frac[MAX_FUSED_COLS]:.2f})",
        "{}",
    )
    assert f32.n_spills[MAX_FUSED_COLS] > 0 and f"`MAX_FUSED_COLS` is {MAX_FUSED_COLS}" in cell
    assert f32.graph_frac.loc[:MAX_FUSED_COLS].min() >= 0.65 and "two thirds of the copy's speed or better" in cell
    quotes(cell, f"({f32.graph_frac[2 * MAX_FUSED_COLS]:.2f} of copy at {2 * MAX_FUSED_COLS} columns", "{}")
    assert 0.15 < f32.graph_frac.loc[2 * MAX_FUSED_COLS :].max() < 0.25 and "at a fifth" in cell
    assert (
        TILED_MAX_COLS == clean
        and f"`TILED_MAX_COLS` = {TILED_MAX_COLS} columns, the last size that does not spill" in cell
    )


def test_deep_dive_4_mib_table():
    bench = data.load("bench", gpu="h100")
    small = bench.query("dtype == 'float32' and M == 4096 and N == 256").set_index("provider")
    small = small.loc[["copy", "torch_softmax", "triton_tutorial", "liger", "fused", "online", "persistent", "softmax"]]
    assert (small.host_us > small.graph_ms * 1e3).all()  # "larger than the kernel itself, for every provider"
    assert (small.graph_ms * 1e3 < 10).all()  # "a few microseconds in GPU time"
    noisy = small[data.noisy(small.spread) | data.noisy(small.graph_spread)]
    assert list(noisy.index) == ["liger"] and not data.noisy(small.graph_spread).any()
    assert "Liger-Kernel's starred eager cell" in cell_with(D, "for every provider")


def test_deep_dive_copy_gap():
    rows = []
    for gpu, props in (("h100", "device_props"), ("h200", "device_props_h200")):
        c = data.load("bench", gpu=gpu).query("provider == 'copy' and M == 4096")
        mib = c.M * c.N * c["dtype"].map({"float32": 4, "bfloat16": 2}) // 2**20
        rows += [{"GPU": gpu, "MiB": m, "r": r} for m, r in zip(mib, c.graph_gbps / c.gbps)]
        p = data.load(props).iloc[0]
        rows.append({"GPU": gpu, "MiB": 1024, "r": p.copy_graph_gbps_1GiB / p.copy_gbps_1GiB})
    gap = pd.DataFrame(rows).groupby(["MiB", "GPU"]).r.min().unstack("GPU")
    assert (gap.loc[:256] >= 1.0).all().all() and (gap.loc[512:] < 0.9).all().all()
    cell = cell_with(D, "keeps up with the eager one")
    quotes(
        cell,
        f"to {gap.h100[512]:.2f} and {gap.h100[1024]:.2f} of eager on the H100, "
        f"{gap.h200[512]:.2f} and {gap.h200[1024]:.2f} on the H200",
        "{}",
    )
    bw = data.load("bench", gpu="h100").query("dtype == 'float32' and M == 4096 and N == 32768 and provider == 'fused'")
    assert (
        abs(float(bw.graph_gbps.iloc[0] / bw.gbps.iloc[0]) - 1) < 0.02
    )  # "the fused kernel ... the same GB/s both ways"


def test_the_counted_bytes_predict_the_h200s_time():
    """'What does it move?': the fused kernel's predicted GPU time from its counted bytes, beside the H200's."""
    pred = data.load("traffic_prediction", gpu="h200").query("kernel == 'fused' and dtype == 'float32' and M == 4096")
    clean = pred[pred.caveats.isna() & (pred.N <= 16384)]
    cell = cell_with(L, "Where no caveat applies")
    assert list(clean.N) == [4096, 8192, 12672, 16384] and "up to $N = 16384$" in cell
    quotes(cell, f"the prediction is {clean.ratio.min():.2f} to {clean.ratio.max():.2f} of the measured time")
    last = pred.set_index("N").loc[32768]
    assert pd.isna(last.caveats) and round(last.ratio, 1) == 1.5 and "1.5 times too long" in cell
    assert pred[pred.N < 4096].caveats.notna().all() and "Below $N = 4096$ the caveats apply" in cell
    # the counted cell: 64 rows of 1000 float32 columns, each read once and written once (1024 lanes, 24 masked)
    quotes(cell_with(L, "the 24 masked lanes move nothing"), "Each row's 4,000 bytes are read once and written once")
    assert "counting(x=x, y=y)" in code_cell_with(L, "counting(x=x, y=y)")
