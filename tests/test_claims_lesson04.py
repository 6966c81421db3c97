"""Lesson 04's prose against its data: every number the markdown of the lesson ("04") and of its deep dive ("04d")
quotes is re-derived here from figures/data/ with the same pandas lines as the notebooks' visible cells, and must be
the number quoted. The code the lesson defines for learners to read (``online_attention``) is tested too.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
from claims import cell_with, code_cell_with, notebook, prose, quotes

from helpers import data, gpu_data, lesson04

L = "04"
D = "04d"  # the deep dive: the cache model and the longest rows


@pytest.fixture(scope="module")
def props():
    return gpu_data.device_props(live=False)[0]


@pytest.fixture(scope="module")
def table():
    grow = data.load("rows_grow")
    looped = grow.query("dtype == 'float32' and provider != 'copy'")
    t = looped.pivot_table(index=["N", "M"], columns="provider", values="graph_frac")
    return t[["torch_softmax", "fused", "three_pass", "online"]]


@pytest.fixture(scope="module")
def reading(table):
    t = table.droplevel("M")
    return pd.DataFrame(
        {
            "three-pass / its bound": t["three_pass"] / (1 / 2),
            "online / its bound": t["online"] / (2 / 3),
            "online / three-pass": t["online"] / t["three_pass"],
            "best": t.idxmax(axis=1),
        }
    )


def test_the_trace_prose():
    text = cell_with(L, "**Block 2** (max 5)")
    t = lesson04.online_trace(torch.tensor(lesson04.TRACE_ROW), lesson04.TRACE_BLOCK)
    assert t["block_max"].tolist() == [3.0, 5.0, 2.0]
    quotes(text, t["alpha"].iloc[1], "{:.3f}")  # e^(3-5)
    assert "whose block maxima are 3, 5 and 2" in prose(L)


def test_the_notebook_trace_row_is_the_figure_row():
    cell = code_cell_with(L, "lesson04.online_trace(x, block_size)")
    assert str(lesson04.TRACE_ROW) in cell and f"block_size = {lesson04.TRACE_BLOCK}" in cell


def test_the_traffic_bounds():
    from helpers.traffic import kernel_traffic

    M, N = 1024, 65536
    traffic = pd.DataFrame({k: kernel_traffic(k, M, N) for k in ("three_pass", "online", "fused")}).T / (M * N)
    best = 2 / (traffic["reads"] + traffic["writes"])
    assert best.tolist() == [1 / 2, 2 / 3, 1.0]
    text = prose(L)
    assert "$2MN / 4MN = 1/2$" in text and "$2/3$" in text


def test_the_reading_of_the_table(table, reading):
    grow = data.load("rows_grow")
    looped = grow.query("dtype == 'float32' and provider != 'copy'")
    eager = looped.pivot_table(index=["N", "M"], columns="provider", values="frac_of_copy")
    text = cell_with(L, "**Short rows** (N = 1024)")
    t = table.droplevel("M")
    quotes(
        text,
        f"the three-pass kernel reaches {t.loc[1024, 'three_pass']:.2f} of copy, "
        f"the online one {t.loc[1024, 'online']:.2f}, the fused one {t.loc[1024, 'fused']:.2f}",
    )
    quotes(text, f"differ by at most {(eager - table).abs().max().max():.2f}")
    within = (reading[["three-pass / its bound", "online / its bound"]] - 1).abs().le(0.05).all(axis=1)
    span = within[within].index
    assert list(span) == [n for n in t.index if span.min() <= n <= span.max()]  # one stretch
    quotes(text, f"from N = {span.min()} to N = {span.max()} both stay within 5% of them")
    ahead = reading["online / three-pass"][reading["online / three-pass"] > 1.02]
    assert list(ahead.index) == [n for n in t.index if n >= ahead.index.min()]
    quotes(text, f"from N = {ahead.index.min()} on, by {ahead.min():.2f}x to {ahead.max():.2f}x")
    fused = t["fused"].dropna()
    quotes(text, f"({fused.iloc[-2]:.2f} of copy at N = {fused.index[-2]})")
    quotes(
        text,
        f"to {fused.iloc[-1]:.2f} at N = {fused.index[-1]}, about the online kernel's "
        f"{t.loc[fused.index[-1], 'online']:.2f}",
    )
    beyond = reading["best"][reading.index > fused.index[-1]]
    assert set(beyond.iloc[:-1]) == {"online"}
    assert beyond.iloc[-1] == "torch_softmax"
    quotes(text, f"at N = {beyond.index[-1]} `torch.softmax` is the fastest")


def test_the_crosscheck_with_the_sweep():
    grow = data.load("rows_grow")
    sweep = data.load("bench", gpu="h100")
    keys = ["dtype", "M", "N", "provider"]
    both = grow.merge(sweep, on=keys, suffixes=("", "_sweep")).query("provider != 'copy'").set_index(keys)
    assert len(both) >= 4
    diff = (both["graph_frac"] - both["graph_frac_sweep"]).abs().max()
    text = cell_with(L, "The two runs agree to within")
    assert diff <= 0.01
    quotes(text, f"agree to within {0.01:.2f}")
    quotes(text, f"spreads are at most {both['graph_spread_sweep'].max():.1%}")
    assert not data.noisy(both["graph_spread_sweep"]).any()  # the conclusion rests on no noisy cell


def test_the_cache_model(table, props):
    from helpers.rowwise import check_block_size, num_warps_for

    model = table[["three_pass", "online"]].reset_index()
    model["num_warps"] = [num_warps_for(check_block_size(n, None, "model")) for n in model["N"]]
    per_sm = (props["max_threads_per_sm"] // (props["warp_size"] * model["num_warps"])).clip(
        upper=props["max_blocks_per_sm"]
    )
    programs = (per_sm * props["sm_count"]).clip(upper=model["M"])
    model["rows in flight (MiB)"] = programs * model["N"] * 4 / 2**20
    model = model.set_index("N")
    l2 = props["l2_bytes"] / 2**20
    fits = model["rows in flight (MiB)"] <= l2
    assert fits.iloc[0] and not fits.iloc[-1]
    last_fit = fits[fits].index.max()
    assert last_fit == 8192
    text = cell_with(D, "The model gets the ends right")
    quotes(
        text,
        f"At N = {last_fit} it puts {model.loc[last_fit, 'rows in flight (MiB)']:.0f} MiB of rows in flight, "
        f"under the {l2:.0f} MiB of L2",
    )
    quotes(
        text,
        f"{model.loc[last_fit, 'three_pass']:.2f} for the three-pass kernel and "
        f"{model.loc[last_fit, 'online']:.2f} for the online one",
    )
    # "most of the way to the bounds": closer to the bound than to the copy, for both
    assert model.loc[last_fit, "three_pass"] < (1 + 1 / 2) / 2 and model.loc[last_fit, "online"] < (1 + 2 / 3) / 2


def test_the_longest_rows_are_not_explained_by_idle_sms(table, props):
    sms = props["sm_count"]
    long = table.query("N >= 65536")[["three_pass", "online"]]
    rows_per_sm = long.index.to_frame()["M"] / sms
    long.insert(0, "rows per SM", rows_per_sm)
    long.insert(1, "SMs idle", (1 - rows_per_sm).clip(lower=0))
    long = long.droplevel("M")
    M = table.index.to_frame().droplevel("M")["M"]
    intro = cell_with(D, "Past N = 131072 the online kernel leaves its bound")
    quotes(
        intro,
        f"{long.loc[262144, 'online']:.2f} of copy at N = 262144, {long.loc[524288, 'online']:.2f} at 524288, "
        f"{long.loc[1048576, 'online']:.2f} at 1048576",
    )
    text = cell_with(D, "At N = 524288 there are")
    quotes(
        text,
        f"there are {M[524288]} rows for the H100's {sms} SMs: {long.loc[524288, 'rows per SM']:.2f} rows per SM, "
        f"and {long.loc[524288, 'SMs idle']:.0%} of the SMs idle",
    )
    quotes(
        text,
        f"falls from {long.loc[262144, 'online']:.2f} to {long.loc[524288, 'online']:.2f} of copy there, and the "
        f"three-pass kernel from {long.loc[262144, 'three_pass']:.2f} to {long.loc[524288, 'three_pass']:.2f}",
    )
    quotes(text, f"at N = 262144, with {long.loc[262144, 'rows per SM']:.2f} rows per SM and no SM idle")
    assert long.loc[262144, "SMs idle"] == 0
    # idle SMs cannot explain the fall: it is far larger than the idle fraction
    drop = 1 - long.loc[524288, "online"] / long.loc[262144, "online"]
    assert drop > 5 * long.loc[524288, "SMs idle"]
    after = cell_with(D, "One program per SM reaches")
    quotes(after, f"{M[1048576]} rows leave {long.loc[1048576, 'SMs idle']:.0%} of the SMs without a row")
    for nb in (L, D):
        assert "leaves SMs with nothing to do" not in prose(nb)


def test_the_programs_per_sm_in_the_deep_dive():
    """Lesson 05's recording of its persistent kernel, read in 04's deep dive (never in the lesson itself)."""
    programs = data.load("persistent_programs")
    frac = programs.query("programs_per_sm in [1, 2, 4, 8]").set_index("programs_per_sm")["graph_frac"]
    assert list(frac.index) == [1, 2, 4, 8] and frac.is_monotonic_increasing
    text = cell_with(D, "One program per SM reaches")
    quotes(
        text,
        f"One program per SM reaches {frac[1]:.2f} of copy, two {frac[2]:.2f}, four {frac[4]:.2f} and "
        f"eight {frac[8]:.2f}",
    )


def test_the_lesson_uses_no_later_lesson():
    """The core reads only data of lessons 01-04 (no lesson 05 recording, no Little's law) and launches its kernels
    plainly, not through the library's wrapper (which the deep dive exports)."""
    code = "\n".join("".join(c["source"]) for c in notebook(L)["cells"] if c["cell_type"] == "code")
    assert "persistent_programs" not in code and "Little" not in prose(L)
    for wrapper in ("RowWise", "Plan(", "looped_plan", "helpers.softmax_online", "helpers.softmax_three_pass"):
        assert wrapper not in code, wrapper
    assert "kernel[(M,)](y, x," in code_cell_with(L, "def softmax_looped")
    assert "RowWise(looped_plan" in code_cell_with(D, "def looped_plan")
    assert "Little's law" in prose(D)


def test_the_notebooks_online_attention():
    cell = code_cell_with(L, "def online_attention")
    ns = {"math": math, "torch": torch}
    exec(cell, ns)
    online_attention = ns["online_attention"]
    g = torch.Generator().manual_seed(7)
    s = torch.randn(13, generator=g, dtype=torch.float64) * 3
    V = torch.randn(13, 4, generator=g, dtype=torch.float64)
    for b in (1, 3, 13):
        torch.testing.assert_close(online_attention(s, V, b), torch.softmax(s, 0) @ V)


def test_no_solution_code_above_the_4_1_checker():
    cells = notebook(L)["cells"]
    checker = next(i for i, c in enumerate(cells) if "lesson04_exercises.check_4_1(" in "".join(c["source"]))
    above = "\n".join("".join(c["source"]) for c in cells[:checker] if c["cell_type"] == "code")
    for answer in ("tl.exp(m - m_new)", "d * alpha", "m_new = tl.maximum"):
        assert answer not in above, answer


def test_the_online_kernel_beats_its_dram_prediction_on_the_h200():
    """The counted passes (three and two reads of x) at the copy's speed, against the H200's measured time."""
    pred = data.load("traffic_prediction", gpu="h200").query("kernel == 'online' and dtype == 'float32' and M == 4096")
    big = pred.query("4096 <= N <= 16384")
    cell = cell_with(L, "the caveat the prediction prints")
    quotes(cell, f"{big.ratio.min():.2f} to {big.ratio.max():.2f} times faster")
    assert big.caveats.str.contains("in L2").all()
    assert "times x is read" in code_cell_with(L, "times x is read")
