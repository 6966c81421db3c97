"""Lesson 06's prose against its data, the core lesson's (L) and its deep dive's (D): every number the markdown
quotes is derived here from ``figures/data/`` with the notebook's own pandas lines, and every conclusion rests on
cells whose rounds spread within 10% (recordings without rounds are shown, never concluded from)."""

from __future__ import annotations

import re

import pandas as pd
import pytest
from claims import cell_with, code_cell_with, notebook, prose, quotes

import helpers
from helpers import data, lesson06

L, D = "06", "06d"  # the core lesson, its deep dive
PROVIDERS = lesson06.PROVIDERS


@pytest.fixture(scope="module")
def gpu():
    props = data.load("device_props").iloc[0]
    return int(props.sm_count), int(props.l2_bytes), props.to_dict()


@pytest.fixture(scope="module")
def bench():
    b = data.load("bench", gpu="h100")
    return b[b.N >= 65536]


@pytest.fixture(scope="module")
def frac(bench):
    return bench.pivot_table(index=["dtype", "M", "N"], columns="provider", values="graph_frac")[PROVIDERS]


@pytest.fixture(scope="module")
def spread(bench):
    return bench.pivot_table(index=["dtype", "M", "N"], columns="provider", values="graph_spread")[PROVIDERS]


def test_few_rows_one_program_per_row(bench, gpu):
    sms = gpu[0]
    text = cell_with(L, "Read it from the top.")
    f32 = bench[(bench.dtype == "float32") & (bench.M != 300)].assign(rows_per_SM=lambda d: (d.M / sms).round(2))
    by_shape = lambda col: f32.pivot_table(index=["M", "N", "rows_per_SM"], columns="provider", values=col)
    t = by_shape("graph_frac").droplevel("rows_per_SM")
    assert not data.noisy(by_shape("graph_spread")[["fused", "online", "torch_softmax"]]).any().any()
    quotes(text, t.loc[(1024, 65536), "online"])
    quotes(text, t.loc[(1024, 65536), "fused"])
    quotes(text, t.loc[(64, 262144), "online"])
    quotes(text, t.loc[(8, 1048576), "online"])
    quotes(text, t.loc[(8, 1048576), "torch_softmax"])
    quotes(text, 64 / sms, "({:.2f} a SM)")
    assert (
        t.loc[(1024, 65536), "online"] < 2 / 3 and t.loc[(1024, 65536), "fused"] - t.loc[(1024, 65536), "online"] < 0.05
    )
    limits = data.load("fused_limits").query("dtype == 'float32'").set_index("N")
    assert limits.loc[65536, "n_spills"] > 0 and "it spills (lesson 03)" in text


def test_programs_of_the_split(gpu):
    sms = gpu[0]
    assert "8 rows x 128 slices = 1024 programs: 7.76 per SM" in _output(L, "M, N, slice_len = 8")
    plan = helpers.kernels.split_plan(8, 1048576, 4, target_programs=8 * sms)
    text = cell_with(D, "With 8 rows, each row becomes")
    quotes(text, plan["slices"], "becomes {} slices")
    quotes(text, 8 * plan["slices"], "to {}.")
    big = helpers.kernels.split_plan(1024, 65536, 4, target_programs=8 * sms)
    assert big["slices"] == 2 and 1024 * 2 / sms > 8 and "At 1024 rows, two slices a row already give more" in text


def _output(lesson: str, phrase: str) -> str:
    """The stored text output of the one code cell of a notebook whose source contains ``phrase``."""
    cells = [c for c in notebook(lesson)["cells"] if c["cell_type"] == "code" and phrase in "".join(c["source"])]
    assert len(cells) == 1, phrase
    return "".join("".join(o.get("text", "")) for o in cells[0]["outputs"])


@pytest.fixture(scope="module")
def l2(gpu):
    l2 = data.load("split_l2")
    l2["x MiB"] = l2.M * l2.N * 4 / 2**20
    return l2


def test_the_l2_model_failed(l2, gpu):
    l2_bytes = gpu[1]
    by_size = lambda col: l2.pivot_table(index="x MiB", columns="provider", values=col)[
        ["split", "split_coop", "online"]
    ]
    gpu_time = by_size("graph_frac")
    assert not data.noisy(by_size("graph_spread")).any().any()  # "No cell of the sweep spreads over 10%,
    assert not data.noisy(by_size("spread")).any().any()  #  in GPU time or eager"
    fits = gpu_time.index <= l2_bytes / 2**20
    split, coop = gpu_time["split"], gpu_time["split_coop"]
    text = cell_with(L, "**The model failed.**")
    quotes(text, split[fits].index[-1], "at {:.0f} MiB, the largest size that fits")
    quotes(text, split[fits].iloc[-1], "reached {:.2f} of a copy")
    quotes(text, 1 / split[fits].iloc[-1], "{:.2f} times the time the model allows")
    assert split[fits].min() >= 0.45 and split[fits].max() <= 2 / 3  # "half to two thirds"
    quotes(text, f"{split[~fits].min():.2f} to {split[~fits].max():.2f}")
    quotes(text, f"from {coop.min():.2f} to {coop.max():.2f}")
    gap = (coop - split).round(2)
    assert "within 0.03 of the two launches at 8 and 16 MiB, above them from 32 MiB on" in text
    assert gap[gap.index <= 16].abs().max() <= 0.03 and (gap[gap.index >= 32] > 0.03).all()
    quotes(text, gap[256.0], "by {:.2f} at 256 MiB")
    assert gap[gap.index >= 64].min() > 3 * gap[gap.index <= 16].abs().max()  # "far apart at the largest"


@pytest.fixture(scope="module")
def ncu():
    ncu = data.load("ncu", gpu="h100")
    ran = {
        "small_fp32_256": ("float32", 4096, 256),
        "small_bf16_256": ("bfloat16", 4096, 256),
        "bf16_1024": ("bfloat16", 4096, 1024),
        "coop_fp32_8x1M": ("float32", 8, 1048576),
        "coop_bf16_8x1M": ("bfloat16", 8, 1048576),
        "coop_bf16_64x256K": ("bfloat16", 64, 262144),
        "coop_fp32_1024x64K": ("float32", 1024, 65536),
        "split_fp32_32MiB": ("float32", 128, 65536),
        "split_fp32_256MiB": ("float32", 1024, 65536),
    }
    ncu[["dtype", "M", "N"]] = pd.DataFrame([ran[c] for c in ncu.case], index=ncu.index)
    ncu["x MB"] = ncu.M * ncu.N * ncu.dtype.map({"float32": 4, "bfloat16": 2}) / 1e6
    ncu["kernel µs"], ncu["DRAM MB"] = ncu.duration_ns / 1e3, ncu.dram_bytes / 1e6
    ncu["kernel"] = ncu.kernel.str.replace("softmax_", "").str.replace("_kernel", "")
    return ncu


def test_the_counters_of_the_two_launches(ncu, l2):
    two = ncu[ncu.case.str.startswith("split_")].set_index(["case", "kernel"])
    text = cell_with(D, "one fact about how they were taken")
    x = two.loc[("split_fp32_32MiB", "split_normalize"), "x MB"]
    quotes(text, x, "{:.1f} MB each")
    quotes(text, 2 * x, "{:.1f} MB if it does not")
    quotes(text, two.loc[("split_fp32_32MiB", "split_normalize"), "DRAM MB"], "It moved {:.1f} MB")
    both = two.groupby("case")[["kernel µs", "DRAM MB"]].sum()
    both["sweep"] = [
        l2.query("provider == 'split' and M == @M").graph_ms.item() * 1000 for M in two.groupby("case").M.first()
    ]
    text = cell_with(D, "**The L2 saved little time, if any.**")
    for case, size in (("split_fp32_32MiB", 32), ("split_fp32_256MiB", 256)):
        quotes(text, f"{both.loc[case, 'kernel µs']:.1f} µs against {both.loc[case, 'sweep']:.1f} µs at {size} MiB")
        assert abs(both.loc[case, "kernel µs"] / both.loc[case, "sweep"] - 1) < 0.05
    pct = two.dram_pct_of_peak.round(0).astype(int)
    quotes(text, f"{pct[('split_fp32_32MiB', 'split_stats')]}% and {pct[('split_fp32_32MiB', 'split_normalize')]}%")
    quotes(text, f"{pct[('split_fp32_256MiB', 'split_stats')]}% and {pct[('split_fp32_256MiB', 'split_normalize')]}%")
    wb = ncu.assign(**{"reads MB": ncu["x MB"], "writes MB": ncu["x MB"].where(ncu.kernel != "split_stats", 0.0)})
    wb["DRAM - reads"] = wb["DRAM MB"] - wb["reads MB"]
    wb["writes still in L2"] = (wb["writes MB"] - wb["DRAM - reads"].clip(lower=0)).clip(lower=0)
    large = wb[(wb["x MB"] >= 16) & (wb.kernel != "split_stats")]["writes still in L2"]
    quotes(text, f"{large.min():.0f} to {large.max():.0f} MB")
    quotes(text, large.min(), "{:.0f} MB or more")
    small = wb[wb["x MB"] < 16]
    assert (small["writes still in L2"] >= 0.95 * small["writes MB"]).all()  # the small kernels' whole output


def test_few_long_rows_against_a_copy(bench, frac, spread):
    shapes = frac.drop(index=300, level="M")
    best = shapes[["online", "split", "split_coop", "softmax"]].max(axis=1)
    peers = shapes[["torch_softmax", "torch_compile"]].max(axis=1)
    assert not data.noisy(spread.drop(index=300, level="M")).any().any()  # nothing the conclusion rests on is noisy
    text = cell_with(D, "The split designs fix the idle GPU")
    quotes(text, f"{best.min():.2f} to {best.max():.2f} of a copy")
    quotes(text, f"{(best / peers).min():.1f}x to {(best / peers).max():.1f}x")
    quotes(text, f"it does at {(best >= 0.85).sum()} of the {len(best)}")  # the course's target
    eager_spread = bench.pivot_table(index=["dtype", "M", "N"], columns="provider", values="spread")[PROVIDERS]
    assert (
        data.noisy(eager_spread)["torch_compile"].sum()
        > data.noisy(eager_spread).drop(columns="torch_compile").values.sum()
    )
    copy = bench[(bench.provider == "copy") & (bench.M == 300)].set_index("dtype")[["graph_ms", "ms"]] * 1000
    quotes(text, f"{copy.loc['float32', 'graph_ms']:.0f} µs against {copy.loc['float32', 'ms']:.0f} µs")
    assert (copy.graph_ms > copy.ms).all()
    above = frac.xs(300, level="M").split_coop  # the bars above 1.0, explained by the slow copy
    quotes(
        text,
        f"the cooperative kernel's {above.loc['float32'].item():.2f} in float32 and "
        f"{above.loc['bfloat16'].item():.2f} in bfloat16",
    )
    assert (frac.drop(index=300, level="M") < 1).all().all() and (above > 1).all()
    assert frac.max().max() * 1.08 > 1.05 and "top = max(1.05, 1.08 * frac.max().max())" in code_cell_with(
        D, "top = max("
    )


def test_the_result_at_few_long_rows(bench, frac, spread):
    """The core's closing table: float32 at the four long shapes, GPU time."""
    f32, s32 = frac.loc["float32"].drop(index=300, level="M"), spread.loc["float32"].drop(index=300, level="M")
    cols = ["online", "torch_softmax", "split", "split_coop"]
    assert not data.noisy(s32[cols]).any().any()  # "No cell of the table spreads over 10%"
    text = cell_with(L, "Splitting fixes the idle GPU")
    r8, r64, r1k = f32.loc[(8, 1048576)], f32.loc[(64, 262144)], f32.loc[(1024, 65536)]
    quotes(
        text,
        f"with 8 rows the online kernel reaches {r8.online:.2f} of a copy, the two launches {r8.split:.2f} "
        f"and the cooperative kernel {r8.split_coop:.2f}",
    )
    quotes(text, f"with 64 rows, {r64.online:.2f} against {r64.split:.2f} and {r64.split_coop:.2f}")
    quotes(text, r1k.split_coop, "reaches {:.2f}.")
    assert abs(r1k.split - r1k.online) < 0.05 and 1024 * 65536 * 4 > gpu_l2()  # "no faster", "do not fit in L2"
    assert "its 256 MiB do not fit in L2" in text and 1024 * 65536 * 4 == 256 * 2**20


def coop_choices():
    """The tuner's choice for the cooperative kernel at each (dtype, M, N) of the H100's tuning table: the fastest."""
    tuning = data.load("tuning_nvidia_h100_80gb_hbm3")
    ok = tuning[(tuning.kind == "coop") & (tuning.status == "ok")]
    return ok.sort_values("graph_ms").groupby(["dtype", "M", "N"]).first()


def gpu_l2() -> int:
    return int(data.load("device_props").l2_bytes.iloc[0])


def test_the_cooperative_kernels_counters(ncu, bench, gpu, frac, spread):
    recorded = gpu[2]
    chosen = coop_choices()
    coop = ncu[ncu.kernel == "split_coop"].set_index(["dtype", "M", "N"])
    coop["warps"] = coop.block // 32
    occ = [helpers.occupancy(int(r), 0, int(w), recorded) for r, w in zip(coop.registers, coop.warps)]
    coop["per SM"] = [o["programs_per_sm"] for o in occ]
    coop["limit"] = [o["limited_by"] for o in occ]
    coop["formula %"] = 100 * coop["per SM"] * coop.warps / (recorded["max_threads_per_sm"] // 32)
    coop["slices a row"] = coop.index.get_level_values("N") // chosen.slice_cols.reindex(coop.index).astype(int)
    copy_us = (bench[bench.provider == "copy"].set_index(["dtype", "M", "N"]).graph_ms * 1000).reindex(coop.index)
    text = cell_with(D, "**A quarter of the warp slots or less.**")
    quotes(text, f"{coop.registers.min():.0f} to {coop.registers.max():.0f} registers")
    assert (coop["limit"] == "registers").all()
    big = coop.loc[("float32", 1024, 65536)]
    quotes(text, f"4 warps at {big.registers:.0f} registers a thread")
    assert big.warps == 4
    quotes(
        text,
        f"{big['per SM']} programs fit an SM, {big['per SM'] * big.warps:.0f} of its 64 warp slots ({big['formula %']:.0f}%)",
    )
    slice_kib = chosen.loc[("float32", 1024, 65536), "slice_cols"] * 4 / 1024
    quotes(text, f"a slice of {slice_kib:.0f} KiB there")
    others = coop.drop(index=("float32", 1024, 65536))
    slots = sorted(set((others["per SM"] * others.warps).astype(int)))
    quotes(text, f"At the other shapes {' or '.join(map(str, slots))} of the 64 slots are filled")
    assert coop["formula %"].max() <= 25
    assert (abs(coop["formula %"] - coop.theoretical_occupancy_pct) < 1).all()
    sms = gpu[0]
    quotes(
        text,
        f"{big['per SM']} programs × {sms} SMs = {big['per SM'] * sms} fit at once and a row has {big['slices a row']} slices",
    )
    quotes(text, f"{big.grid // big['slices a row']:.0f} rows in {big.grid:.0f} programs")
    few = coop[coop.index.get_level_values("M") <= 64]
    quotes(text, few.dram_pct_of_peak.max(), "{:.0f}% of it at most")
    quotes(text, big.dram_pct_of_peak, "DRAM at {:.0f}% of its peak")
    assert (few.dram_pct_of_peak < big.dram_pct_of_peak).all()
    rows_at_a_time = few.grid // few["slices a row"]
    rounds = sorted(set(-(-few.index.get_level_values("M") // rows_at_a_time)))
    assert rounds == [3, 4]
    quotes(text, "a row takes three or four rounds")
    assert "where a row takes three or four rounds" in cell_with(D, "## Key points")
    assert coop["kernel µs"].gt(copy_us).all()  # the profile's single runs agree
    bench_coop = frac.split_coop.reindex(coop.index)  # "it takes longer than a copy at every shape"
    assert not data.noisy(spread.split_coop.reindex(coop.index)).any() and (bench_coop < 1).all()
    quotes(text, f"{bench_coop.min():.2f} to {bench_coop.max():.2f} of a copy's speed at these four shapes")


def test_the_tuners_choice_and_the_other_design(frac, spread):
    chosen = coop_choices()
    uses = chosen[["slice_cols", "num_warps"]].astype(int)
    cfg = lambda d, M, N: f"{uses.loc[(d, M, N), 'slice_cols']} × {uses.loc[(d, M, N), 'num_warps']}"
    text = cell_with(D, "**No slice wins everywhere.**")
    f32 = uses.loc["float32"]
    assert cfg("float32", 1024, 65536) == cfg("float32", 64, 262144) == cfg("float32", 8, 1048576) == "8192 × 4"
    quotes(
        text,
        f"In float32 the wrapper runs slices of {f32.loc[(1024, 65536), 'slice_cols']} columns with "
        f"{f32.loc[(1024, 65536), 'num_warps']} warps at 1024 × 64K and at the two shapes with the fewest rows",
    )
    quotes(text, f"and {cfg('float32', 256, 131072)} at 256 × 128K")
    assert cfg("bfloat16", 64, 262144) == cfg("bfloat16", 8, 1048576)
    quotes(
        text,
        f"in bfloat16, {cfg('bfloat16', 1024, 65536)} at 1024 × 64K, {cfg('bfloat16', 256, 131072)} at 256 × 128K "
        f"and {cfg('bfloat16', 8, 1048576)} at the two shapes with the fewest rows",
    )
    few = uses.xs(8, level="M").slice_cols  # "with few rows, long slices win"
    assert (few == uses.slice_cols.max()).all() or (few >= 8192).all()
    assert not data.noisy(spread.split_coop).any()  # "whose rounds agree within 10% at every shape"
    assert "spread" not in data.load("tuning_nvidia_h100_80gb_hbm3").columns  # one timing each: the prose says so
    pick = frac[["softmax", "split", "split_coop"]]
    misses = pick[pick.softmax < 0.95 * pick[["split", "split_coop"]].max(axis=1)]
    assert len(misses) == 0  # the cell's output: within 5% at every shape
    assert not data.noisy(spread[["softmax", "split"]]).any().any()
    assert "only the benchmark shows whether the other design is faster somewhere" in cell_with(
        D, "A dispatch table is only as good"
    )


def test_what_the_wait_costs():
    wait = data.load("coop_wait")
    assert not data.noisy(wait.graph_spread).any()  # every cell the section compares: rounds within 10%
    assert "on either GPU, each SM holds several times the bytes Little's law asks for" in cell_with(
        D, "So capacity is not short"
    )
    held = wait[(wait.configuration == "tuned")].dropna(subset=["programs_per_sm"])
    for g in ("h100", "h200"):
        b = data.load("bench", gpu=g)
        n_sms = int(data.load("device_props", gpu=None if g == "h100" else g).sm_count.iloc[0])
        copy_gbps = b[(b.provider == "copy") & (b.M == 1024) & (b.N == 65536) & (b.dtype == "float32")].graph_gbps.iloc[
            0
        ]
        need = copy_gbps * 1e9 * 500e-9 / n_sms / 1024
        mine = held[held.gpu == g]
        kib = mine.programs_per_sm * mine.slice_cols * mine.dtype.map({"float32": 4, "bfloat16": 2}) / 1024
        assert len(kib) == 8 and kib.min() > 2 * need  # "several times the bytes Little's law asks for", each GPU
    cells = ["gpu", "dtype", "M", "N"]
    tuned = wait[wait.configuration == "tuned"]
    two = tuned.pivot_table(index=cells, columns="design", values="graph_frac")
    gain = two.word - two.counter
    assert (gain > 0).all()  # "The word wins at every shape on both GPUs"
    text = cell_with(D, "Which part of the change does it?")
    assert "The word wins at every shape on both GPUs." in text
    top = gain.sort_values(ascending=False).iloc[:4]  # the largest gains: bf16 at 256 x 128K and 64 x 256K, both GPUs
    assert sorted(set(top.index.droplevel("gpu"))) == [("bfloat16", 64, 262144), ("bfloat16", 256, 131072)]
    quotes(text, f"the largest gains, {top.min():.2f} to {top.max():.2f}, are at bfloat16 256 × 128K and 64 × 256K")
    assert 1024 not in top.index.get_level_values("M")
    assert f"gained {gain.min():.2f} to {gain.max():.2f} of a copy on both GPUs" in cell_with(D, "## Key points")
    steps = wait[wait.configuration == "4096x4"]
    f = steps.pivot_table(index=cells, columns="design", values="graph_frac")
    regs = steps.pivot_table(index=cells, columns="design", values="registers")
    per_sm = steps.pivot_table(index=cells, columns="design", values="programs_per_sm")
    text = cell_with(D, "Moving the count-in ahead of the loads recovers little")
    behind = f[f["word, two exps"] <= f["counter, count-in first"]]
    assert sorted(set(behind.index.droplevel("gpu"))) == [("bfloat16", 1024, 65536)]  # "at every shape but one"
    r = regs.loc[("h100", "bfloat16", 1024, 65536)]
    quotes(text, f"{r['word, two exps']:.0f} registers a thread against {r['counter, count-in first']:.0f}")
    p = per_sm.loc[("h100", "bfloat16", 1024, 65536)]
    lost = p["counter, count-in first"] - p["word, two exps"]
    quotes(
        text,
        f"lost {['no', 'one', 'two', 'three'][int(lost)]} of its {['', '', '', '', 'four', 'five', 'six'][int(p['counter, count-in first'])]} programs per SM",
    )
    fp32 = (f["word, one exp"] - f["word, two exps"]).xs("float32", level="dtype")
    assert round(fp32.abs().max(), 2) <= 0.02  # "in float32 the two differ by 0.02 at most"
    assert "in float32 the two differ by 0.02 at most" in text
    bf16 = (f["word, one exp"] - f["word, two exps"]).xs("bfloat16", level="dtype")
    assert (bf16 > 0).all()  # "One exponential per element matters in bfloat16"


def test_what_the_safety_net_costs():
    net = data.load("coop_safety_net")
    assert not data.noisy(net.graph_spread).any()  # every cell the paragraph compares: rounds within 10%
    versions = net.pivot_table(index=["dtype", "M", "N"], columns="safety_net", values="graph_frac")
    gain = versions["256-column blocks"] - versions["whole slices"]
    prof = net.dropna(subset=["registers"]).set_index(["dtype", "M", "N", "safety_net"])
    big = ("float32", 1024, 65536)
    before, after = prof.loc[big + ("whole slices",)], prof.loc[big + ("256-column blocks",)]
    assert (before.slice_cols, before.num_warps) == (after.slice_cols, after.num_warps)  # "the same configuration"
    text = cell_with(D, "At float32 1024 × 64K the same configuration went from")
    quotes(text, f"from {before.registers:.0f} registers a thread to {after.registers:.0f}")
    recorded = data.load("device_props").iloc[0].to_dict()
    per_sm = [
        helpers.occupancy(int(r.registers), 0, int(r.num_warps), recorded)["programs_per_sm"] for r in (before, after)
    ]
    assert per_sm[1] == per_sm[0] + 1 == 4  # "a fourth program fits each SM"
    quotes(
        text, f"from {versions.loc[big, 'whole slices']:.2f} to {versions.loc[big, '256-column blocks']:.2f} of a copy"
    )
    assert (gain > 0).all()
    quotes(text, f"by {gain.min():.2f} to {gain.max():.2f}")
    bf = prof.xs("256-column blocks", level="safety_net").loc["bfloat16"].registers
    quotes(text, f"{bf.min():.0f} to {bf.max():.0f} registers")


@pytest.mark.parametrize("lesson", [L, D])
def test_no_history_in_the_lesson(lesson):
    """The lesson and its deep dive teach the technique: no commit ids, earlier recordings or tuner debugging."""
    nb = notebook(lesson)
    text = prose(lesson) + "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    outputs = "\n".join(
        "".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", ""))
        for c in nb["cells"]
        if c["cell_type"] == "code"
        for o in c.get("outputs", [])
    )
    for phrase in (
        "before the fix",
        "grid-sizing fix",
        "earlier recording",
        "not been reproduced",
        "not reproduced",
        "bench_runs",
        "refused",
        "failed check",
        "has not been recorded",
        "had won before",
        "kept as",
    ):
        assert phrase not in text and phrase not in outputs, phrase
    commit = re.search(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b", text + outputs)
    assert commit is None, f"a commit id: {commit.group(0)}"


LOAD = re.compile(r'data\.load\("(\w+)"(?:, gpu=(?:"(\w+)"|gpu|None if gpu == "h100" else gpu))?\)')


def _recordings(cells) -> set[tuple[str, str | None]]:
    found = set()
    for c in cells:
        if c["cell_type"] == "code":
            for name, gpu in LOAD.findall("".join(c["source"])):
                found.add((name, gpu or None))
    return found


def test_every_gpu_the_prose_names():
    """The core: "Every measurement in this lesson comes from one GPU, an H100". The deep dive: an H100, "except in
    the section on what the wait costs, which compares an H100 with an H200"; each recording names its GPU."""
    assert "Every measurement in this lesson comes from one GPU, an H100" in prose(L)
    core = _recordings(notebook(L)["cells"])
    assert {name for name, _ in core} == {"device_props", "bench", "split_l2"}
    for name, gpu in core:
        assert "H100" in data.load(name, gpu=gpu).attrs["provenance"]["gpu"], name
    cells = notebook(D)["cells"]
    heads = ["".join(c["source"]) for c in cells]
    wait_at = next(i for i, h in enumerate(heads) if h.startswith("## What the wait costs, on two GPUs"))
    after = next(i for i, h in enumerate(heads) if i > wait_at and h.startswith("## "))
    assert "except in the section on what the wait costs, which compares an H100 with an H200" in heads[0]
    for name, gpu in _recordings(cells[:wait_at] + cells[after:]):
        assert "H100" in data.load(name, gpu=gpu).attrs["provenance"]["gpu"], name
    section = "\n".join(heads[wait_at:after])
    assert 'data.load("coop_wait")' in section and 'gpu=None if gpu == "h100" else gpu' in section
    wait = data.load("coop_wait")
    assert "H100" in wait.attrs["provenance"]["gpu"] and "H200" in wait.attrs["provenance"]["gpu"]
    assert section.count("print(data.provenance(") >= 2  # the sweep's line and each GPU's benchmark
