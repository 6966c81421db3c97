"""Lesson 08's prose against its data: every number the markdown of the lesson (``LESSON``) and of its deep dive
(``DEEP``) quotes is derived here from figures/data/ with the notebook's own pandas lines, and must appear in the
cell that quotes it. No quoted cell may spread over 10% (``graph_spread``, three rounds), nor may the copy it is
measured against."""

from __future__ import annotations

import pandas as pd
import pytest
from claims import cell_with, prose, quotes

from helpers import data

LESSON = "08"
DEEP = "08d"


@pytest.fixture(scope="module")
def bench():
    """The lesson's cells on the recording: bench with MB moved and TB/s, copy, frac, fair, ms."""
    bench = data.load("backward", gpu="h100").query("group == 'M=4096'")
    props = data.load("device_props")
    peak, l2_mb = props.dram_peak_gbps[0] / 1e3, props.l2_bytes[0] / 1e6
    bench["MB moved"] = (
        bench.M
        * bench.N
        * bench.dtype.map({"float32": 4, "bfloat16": 2})
        * bench.provider.map(lambda p: 2 if p == "copy" else 3)
        / 1e6
    )
    bench["TB/s"] = bench["MB moved"] / bench.graph_ms / 1e3
    copy = bench.query("provider == 'copy'").set_index(["dtype", "N"])[["MB moved", "TB/s"]]
    copy["of DRAM peak"] = copy["TB/s"] / peak
    copy["fits in L2"] = (copy["MB moved"] <= l2_mb).map({True: "yes", False: "no"})
    frac = bench.query("provider != 'copy'").pivot_table(index=["dtype", "N"], columns="provider", values="graph_frac")
    fair = copy.index[(copy["fits in L2"] == "no") & (copy["of DRAM peak"] >= 0.8)]
    ms = bench.pivot_table(index=["dtype", "N"], columns="provider", values="graph_ms")
    tbps = bench.pivot_table(index=["dtype", "N"], columns="provider", values="TB/s")
    return dict(bench=bench, peak=peak, l2_mb=l2_mb, copy=copy, frac=frac, fair=fair, ms=ms, tbps=tbps)


def not_noisy(bench, *cells):
    """(dtype, N, provider) cells the prose relies on: neither they nor their copy may spread over 10%."""
    s = bench["bench"].set_index(["dtype", "N", "provider"])["graph_spread"]
    assert s.notna().all(), "the recording has a spread for every cell"
    for dtype, n, provider in cells:
        for cell in ((dtype, n, provider), (dtype, n, "copy")):
            assert not data.noisy(s.loc[cell]), f"the prose rests on {cell}, whose rounds spread over 10%"


def test_the_jacobian_of_a_128k_row():
    size_gb = 131072**2 * 4 / 1e9
    quotes(cell_with(LESSON, "A vocabulary of 128K tokens"), size_gb, "{:.0f} GB")


def test_traffic_bounds():
    text = prose(LESSON)
    assert "can reach at most a third" in text and 3 / 9 < 0.34
    quotes(cell_with(LESSON, "What to look for"), 3 / 9, "traffic bound of {:.2f}")
    quotes(cell_with(DEEP, "Pass 1 accumulates"), 3 / 5, "at most {:.1f} of a copy")


def test_fractions_above_one_are_explained_by_the_copy(bench):
    text = cell_with(LESSON, "**The copy is slow.**")
    copy, frac, tbps = bench["copy"], bench["frac"], bench["tbps"]
    quotes(cell_with(LESSON, "**Fractions above 1.0.**"), frac.loc[("float32", 32768), "course"], "at {:.2f}")
    assert frac.loc[("float32", 32768), "course"] > 1.0
    slow = copy.loc[("float32", 32768)]
    quotes(text, slow["TB/s"], "copy runs at {:.2f} TB/s")
    quotes(text, slow["of DRAM peak"], "{:.2f} of the DRAM peak")
    quotes(text, bench["peak"], "DRAM peak of {:.2f} TB/s")
    quotes(text, copy.loc[("bfloat16", 32768), "TB/s"], "half the bytes) it runs at {:.2f}")
    assert copy.loc[("bfloat16", 32768), "MB moved"] == slow["MB moved"] / 2
    quotes(text, tbps.loc[("float32", 32768), "course"], "at {:.2f} TB/s)")
    assert tbps.loc[("float32", 32768), "course"] < bench["peak"]  # the backward did not beat memory
    in_l2 = copy.loc[("float32", 1024)]
    assert in_l2["fits in L2"] == "yes" and in_l2["of DRAM peak"] > 1
    quotes(text, in_l2["MB moved"], "copy moves {:.0f} MB")
    quotes(text, bench["l2_mb"], "the {:.0f} MB L2")
    quotes(text, in_l2["TB/s"], "at {:.2f} TB/s: above the DRAM peak")
    quotes(text, in_l2["of DRAM peak"], "{:.2f} of it")
    assert list(copy.query("`fits in L2` == 'yes'").index) == [
        ("float32", 1024),
        ("bfloat16", 1024),
        ("bfloat16", 2048),
    ]
    assert "The same holds for bfloat16 at N = 1024 and 2048" in text
    not_noisy(
        bench,
        ("float32", 32768, "course"),
        ("float32", 32768, "copy"),
        ("bfloat16", 32768, "copy"),
        ("float32", 1024, "copy"),
    )


def test_the_ranges_where_the_copy_is_a_fair_yardstick(bench):
    text = cell_with(LESSON, "What to look for")
    fair = bench["frac"].loc[bench["fair"]].agg(["min", "max"])
    quotes(text, f"{fair.loc['min', 'course']:.2f} to {fair.loc['max', 'course']:.2f} of the copy")
    quotes(text, f"stays at {fair.loc['min', 'torch_backward']:.2f} to {fair.loc['max', 'torch_backward']:.2f}")
    assert fair.loc["max", "course"] - 1 < 0.05 and fair.loc["min", "course"] >= 1  # "level with it, within the 5-8%"
    tbps = bench["tbps"].loc[bench["fair"], ["course", "course_looped"]]
    assert (tbps < bench["peak"]).all().all()  # still under the DRAM peak
    ms = bench["ms"]
    ratio = (ms["course"] / ms["torch_backward"]).agg(["min", "max"])
    quotes(text, f"takes {ratio['min']:.2f} to {ratio['max']:.2f} of the time of torch's backward")
    liger = (bench["frac"].liger_backward / bench["frac"].course).loc[bench["fair"]]
    quotes(text, f"runs at {liger.min():.2f} to {liger.max():.2f} times our speed wherever the copy is fair")
    assert "at least 0.8 of the DRAM peak" in cell_with(LESSON, "**The data stay in L2.**")
    not_noisy(bench, *[(d, n, p) for d, n in bench["fair"] for p in ("course", "course_looped", "torch_backward")])


def test_the_shaded_short_rows_measure_the_cache(bench):
    """The lesson's paragraph on the short rows the figure shades, and the deep dive's, with the looped kernel."""
    text = cell_with(LESSON, "**The shaded short rows**")
    f = bench["frac"]
    short = bench["copy"].query("N <= 2048")
    assert (short["fits in L2"] == "yes").sum() == 3  # the three shaded short rows: the copy's data fit in L2
    small, edge = 3 * 4096 * 1024 * 2 / 1e6, 3 * 4096 * 1024 * 4 / 1e6  # y, dy and dx, MB
    quotes(text, small, "take {:.0f} MB and stay in")
    quotes(text, bench["l2_mb"], "the {:.0f} MB L2")
    quotes(text, edge, "take {:.0f} MB, at the edge")
    assert small < bench["l2_mb"] and abs(edge - bench["l2_mb"]) < 0.05 * bench["l2_mb"]
    lb1, c1 = f.loc[("bfloat16", 1024), "liger_backward"], f.loc[("bfloat16", 1024), "course"]
    assert c1 > 1.0  # "passes 1.0"
    quotes(text, f"passes 1.0 (ours at {c1:.2f}, Liger's at {lb1:.2f})")
    edge_cells = [("float32", 1024), ("bfloat16", 2048)]
    assert all(bench["copy"].loc[c, "fits in L2"] == "yes" for c in edge_cells)  # "while the copy's data still fit"
    at_the_edge = {p: " and ".join(f"{f.loc[c, p]:.2f}" for c in edge_cells) for p in f.columns}
    quotes(text, f"ours at {at_the_edge['course']}, Liger's at {at_the_edge['liger_backward']}")
    at_edge = f.loc[edge_cells, ["course", "course_looped", "liger_backward"]]
    assert at_edge.max().max() - at_edge.min().min() < 0.05  # every kernel lands in the same place
    quotes(cell_with(LESSON, "## Try on your own"), lb1, "Liger's {:.2f} at bfloat16")
    deep = cell_with(DEEP, "The rows below N = 4096 measure the cache")
    quotes(deep, edge, "take {:.0f} MB, at the edge")
    quotes(deep, bench["l2_mb"], "the {:.0f} MB L2")
    quotes(deep, f"the looped kernel at {at_the_edge['course_looped']}, Liger's at {at_the_edge['liger_backward']}")
    quotes(
        deep,
        f"Liger's at {lb1:.2f}, the tile at {c1:.2f}, the looped kernel at {f.loc[('bfloat16', 1024), 'course_looped']:.2f}",
    )
    not_noisy(
        bench,
        *[
            (d, n, p)
            for d in ("float32", "bfloat16")
            for n in (1024, 2048)
            for p in ("course", "course_looped", "liger_backward")
        ],
    )


def test_the_figure_shades_where_the_copy_is_no_fair_yardstick(bench):
    """The figure shades the row lengths the lesson's prose explains: copies in L2, and the slow float32 copy."""
    from helpers import lesson08

    in_l2, of_peak = lesson08.copy_speed(bench["bench"], data.load("device_props"))
    copy = bench["copy"]
    assert sorted(in_l2[in_l2].index) == sorted(copy.index[copy["fits in L2"] == "yes"])
    slow = of_peak[~in_l2 & (of_peak < lesson08.FAIR_COPY)]
    assert list(slow.index) == [("float32", 32768)]
    assert sorted(set(copy.index) - set(in_l2[in_l2].index) - set(slow.index)) == sorted(bench["fair"])
    assert "copy" in lesson08.LABELS and "the ceiling" not in lesson08.LABELS["copy"]


def test_the_looped_kernel_at_m4096(bench):
    text = cell_with(DEEP, "The looped kernel re-reads")
    looped = bench["frac"].loc[bench["fair"], "course_looped"]
    quotes(text, f"reaches {looped.min():.2f} to {looped.max():.2f}")
    assert abs(looped.min() - 3 / 5) < 0.05  # "close to its floor of 0.6"
    not_noisy(bench, *[(d, n, "course_looped") for d, n in bench["fair"]])


def test_the_split_on_long_rows(bench):
    """The long-row cell's derivation on both recordings, and the spreads behind it."""
    both = pd.concat([data.load("backward", gpu=g).assign(gpu=g.upper()) for g in ("h100", "h200")])
    split = both.query("N > 32768")
    frac = split.pivot_table(index=["gpu", "dtype", "M", "N"], columns="provider", values="graph_frac")
    copy = split.query("provider == 'copy'").assign(
        MB=lambda d: 2 * d.M * d.N * d.dtype.map({"float32": 4, "bfloat16": 2}) / 1e6
    )
    frac["copy in L2"] = copy.set_index(["gpu", "dtype", "M", "N"]).MB <= bench["l2_mb"]
    rows = frac.index.get_level_values("M").map(lambda m: "M >= 64" if m >= 64 else "M <= 8")
    fair = frac[~frac["copy in L2"] & (rows == "M >= 64")]
    text = cell_with(DEEP, "What the split does")
    h1, h2 = fair.loc["H100", "course"], fair.loc["H200", "course"]
    quotes(
        text,
        f"{h1.min():.2f} to {h1.max():.2f} of the copy on the H100, 0.85 or more at {(h1 >= 0.85).sum()} "
        f"of those {len(h1)} cells, and {h2.min():.2f} to {h2.max():.2f} on the H200, 0.85 or more at "
        f"{(h2 >= 0.85).sum()} of {len(h2)}",
    )
    under = h2[h2 < 0.85]  # "the three H200 cells under 0.85 are bfloat16 rows of 256000 and 262144 columns"
    quotes(
        text,
        f"The {['no', 'one', 'two', 'three', 'four'][len(under)]} H200 cells under 0.85 are bfloat16 rows of 256000 and "
        f"262144 columns ({under.min():.3f} to {under.max():.3f})",
    )
    assert set(under.index.get_level_values("dtype")) == {"bfloat16"}
    assert set(under.index.get_level_values("N")) == {256000, 262144}
    sp = (frac.course / frac.course_looped).groupby(rows).agg(["min", "max"])
    quotes(text, f"{sp.loc['M >= 64', 'min']:.1f} to {sp.loc['M >= 64', 'max']:.1f} times as fast with 64 rows")
    quotes(text, f"{sp.loc['M <= 8', 'min']:.1f} to {sp.loc['M <= 8', 'max']:.1f} times with 8 rows")
    few = frac.course[rows == "M <= 8"]
    quotes(text, f"stay at {few.min():.2f} to {few.max():.2f}")
    assert frac["copy in L2"][rows == "M <= 8"].mean() > 0.5  # "their copies mostly run from L2"
    # the held-out rows land in the sweep's ranges
    held = split.query("group == 'held-out' and provider == 'course'").set_index(["gpu", "dtype", "M", "N"]).graph_frac
    assert set(held.index) & set(fair.index)
    for gpu in ("H100", "H200"):
        f = fair.loc[gpu, "course"]
        held_fair = held.loc[gpu].reindex(f.index).dropna()
        assert held_fair.between(f.min(), f.max()).all()
    at_32k = both.query("N == 32000").pivot_table(index=["gpu", "dtype", "M"], columns="provider", values="graph_frac")
    ratio = at_32k.liger_backward / at_32k.course
    f32, b16 = ratio.xs("float32", level="dtype"), ratio.xs("bfloat16", level="dtype")
    assert (f32 < 1).all()
    quotes(
        text,
        f"ahead of Liger's backward at all {len(f32)} cells (Liger's at {f32.min():.2f} to {f32.max():.2f} of its speed)",
    )
    quotes(
        text,
        f"In bfloat16 Liger's is {b16.min():.2f} to {b16.max():.2f} times as fast, within 3% at "
        f"{['no', 'one', 'two', 'three', 'four', 'five', 'six', 'seven', 'all'][(b16 <= 1.03).sum()]} "
        f"of the {len(b16)} cells",
    )
    bf256 = at_32k.xs(("bfloat16", 256), level=("dtype", "M"))  # "the looped kernel is ahead of both"
    assert (bf256.course_looped > bf256.liger_backward).all()
    quotes(
        text,
        f"({bf256.course_looped['H100']:.2f} and {bf256.course_looped['H200']:.2f} on the H100 and the H200, "
        f"against {bf256.course['H100']:.2f} and {bf256.course['H200']:.2f})",
    )
    assert (bf256.course_looped > bf256.course).all()
    at_32k_spread = both.query("N == 32000 and provider in ('course', 'liger_backward', 'copy')").graph_spread
    assert not data.noisy(at_32k_spread).any()
    spread = split.pivot_table(index=["gpu", "dtype", "M", "N"], columns="provider", values="graph_spread")
    assert spread[["course", "course_looped", "copy"]].notna().all().all()
    noisy = data.noisy(spread[["course", "copy"]]).any(axis=1)
    assert not noisy.any(), "a quoted fraction of the split rests on a timing spread over 10%"
    calm = ~data.noisy(spread["course_looped"])  # the speed-ups: the same ranges without the noisy looped cells
    assert (
        (frac.course / frac.course_looped)[calm]
        .groupby(rows[calm.values])
        .agg(["min", "max"])
        .round(1)
        .equals(sp.round(1))
    )


def test_the_tile_rule_exceptions():
    """The two exceptions to the tile rule, as the prose states them, against the library's rule and the
    recorded GPU's limits (both recorded GPUs have 132 SMs and 65536 registers an SM)."""
    from helpers.kernels.backward import backward_splits_few_rows, backward_tiled_config

    props = data.load("device_props")
    sms, regs = int(props.sm_count[0]), int(props.regs_per_sm[0])
    text = cell_with(DEEP, "Two exceptions concern long rows")
    quotes(text, f"holds {2 * 16384} values of $y$ and $dy$ or more, half of an SM's {regs} registers")
    quotes(text, f"At 32768 columns the tile alone is {2 * 32768} values, the whole register file")
    assert 2 * 32768 == regs
    quotes(text, f"keep 8 of {sms} SMs busy")
    assert backward_tiled_config(32000, 4) == (1, 8) and backward_tiled_config(8193, 4) == (1, 8)
    assert backward_tiled_config(8192, 4)[1] != 8 and backward_tiled_config(32000, 2) == (1, 8)
    assert backward_tiled_config(16384, 2) == (1, 32) and backward_tiled_config(16385, 2) == (1, 8)  # 64 KiB a row
    assert "float32 rows of more than 8192 columns, 16-bit rows of more than 16384" in text
    both = pd.concat([data.load("backward", gpu=g) for g in ("h100", "h200")])
    held = sorted(set(both.query("N == 32000").M))
    split = [m for m in held if backward_splits_few_rows(m, 32000, 4, sms)]
    assert split == [m for m in held if backward_splits_few_rows(m, 32000, 2, sms)]
    quotes(cell_with(DEEP, "What the split does"), f"the split at {' and '.join(map(str, split))} rows")


def test_the_rows_that_fit_probe():
    """The probe behind the two exceptions (backward_rows_<gpu>.csv): the library's tile against the split with
    few rows, and 8 against 32 warps for bfloat16 rows, with the lesson's own lines."""
    from helpers.kernels.backward import backward_splits_few_rows, backward_tiled_config

    rows = pd.concat(
        {g.upper(): data.load("backward_rows", gpu=g) for g in ("h100", "h200")}, names=["gpu", "i"]
    ).reset_index("gpu")
    assert not data.noisy(rows.graph_spread).any()
    size = rows.dtype.map({"float32": 4, "bfloat16": 2, "float16": 2})
    rows["library's tile"] = [f"tile_{backward_tiled_config(n, s)[1]}w" for n, s in zip(rows.N, size)]
    frac = rows.pivot_table(index=["gpu", "dtype", "N", "M"], columns="variant", values="graph_frac")
    tile = rows[rows.variant == rows["library's tile"]].set_index(["gpu", "dtype", "N", "M"]).graph_frac
    few = (
        (tile / frac.coop_4096x4)
        .rename("tile / split")
        .to_frame()
        .query("M <= 8 and dtype != 'float16'")["tile / split"]
    )
    text = cell_with(DEEP, "Two exceptions concern long rows")
    fits = few[few.index.get_level_values("N") <= 16384]
    spills = few[few.index.get_level_values("N") > 16384]
    assert set(fits.index.get_level_values("N")) == {8192, 12672, 16384} and set(
        spills.index.get_level_values("N")
    ) == {32000, 32768}
    assert (fits > 1).all() and (spills < 1).all()
    quotes(
        text,
        f"at 8192 to 16384 columns the library's tile is {fits.min():.2f} to {fits.max():.2f} times as fast as the split "
        "with 1 or 8 rows, in float32 and in bfloat16",
    )
    quotes(text, f"(the tile at {spills.min():.2f} to {spills.max():.2f} of its speed)")
    # the library follows: rows that fit without spilling never split, those that spill do with few rows
    sms = int(data.load("device_props").sm_count[0])
    for gpu, dtype, n, m in few.index:
        assert backward_splits_few_rows(m, n, 4 if dtype == "float32" else 2, sms) == (n > 16384)
    b16 = frac.query("dtype == 'bfloat16' and N in (12672, 16384, 32768)")
    ratio = b16.tile_8w / b16.tile_32w
    at_32k, shorter = ratio.xs(32768, level="N"), ratio[ratio.index.get_level_values("N") < 32768]
    assert sorted(set(at_32k.index.get_level_values("M"))) == [1, 8, 32, 64, 128, 256, 512, 1024, 4096]
    quotes(
        text,
        f"runs {at_32k.min():.3f} to {at_32k.max():.3f} times as fast at 8 warps as at 32, from 1 to 4096 rows on both GPUs",
    )
    quotes(text, f"(8 warps at {shorter.min():.3f} to {shorter.max():.3f} of their speed)")
    assert shorter.max() < 1 and (at_32k > 1).mean() > 0.9


def triton_next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


@pytest.mark.parametrize("notebook", [LESSON, DEEP])
def test_no_history_in_the_prose(notebook):
    text = prose(notebook).lower()
    for phrase in ("earlier recording", "before the fix", "commit ", "not reproduced", "as before", "the ceiling"):
        assert phrase not in text, phrase


def test_the_split_boundary():
    """Rows that fit go to the split while it launches at most 3 programs an SM: the probe behind the three."""
    from helpers.kernels.backward import SPLIT_PROGRAMS_PER_SM, backward_coop_config, backward_splits_few_rows

    boundary = pd.concat(
        {g.upper(): data.load("backward_boundary", gpu=g) for g in ("h100", "h200")}, names=["gpu", "row"]
    )
    f32 = boundary.query("dtype == 'float32' and variant in ['coop', 'tiled']")
    frac = f32.pivot_table(index=["M", "gpu"], columns="variant", values="graph_frac")
    assert not data.noisy(f32.graph_spread).any()
    ratio = (frac.coop / frac.tiled).unstack("gpu")  # the split over the tile, per GPU
    text = cell_with(DEEP, "Two exceptions concern long rows")
    ahead, behind, level = ratio.loc[[16, 32, 48]], ratio.loc[64], ratio.loc[[96, 128]]
    assert (ahead > 1).all().all() and (behind < 1).all() and ((level - 1).abs() < 0.05).all().all()
    sms = int(data.load("device_props").sm_count[0])
    slices = -(-32000 // backward_coop_config(4)[0])  # the split's slices of a row, rounded up
    quotes(
        text,
        f"at 32000 columns ({slices} slices) the split was ahead up to 48 rows ({48 * slices} programs, "
        f"{48 * slices / sms:.1f} an SM), behind the tile at 64 rows ({64 * slices / sms:.1f} an SM) and within "
        f"5% of it either way at 96 and 128 rows, on both GPUs",
    )
    assert (
        SPLIT_PROGRAMS_PER_SM == 3
        and backward_splits_few_rows(48, 32000, 4, sms)
        and not backward_splits_few_rows(64, 32000, 4, sms)
    )
    quotes(text, "rows × slices ≤ 3 × SMs")
