"""Lesson 09's prose quotes its recordings: each number is re-derived here with the notebooks' own pandas lines.
The lesson (claims.notebook("09")) reads the H100 benchmark (figures/data/sampling_h100.csv, one run: every provider
beside the same copy); its deep dive (claims.notebook("09d")) reads that benchmark, the H200's, the A/B recordings of
the lane kernels, FlashInfer's, and what a call costs the CPU."""

from __future__ import annotations

import inspect

from claims import cell_with, code_cell_with, quotes

from helpers import data

# ---- The lesson: the course against its peers, as the lesson's cells derive it ----------------------------------
FEW = "At one and eight rows `softmax_topk` takes"
MANY = "At 64 and 256 rows `softmax_topk` reaches"
DESIGN = "This lesson's design reaches"
TOPK = ["course_softmax_topk", "torch_softmax_topk", "compile_softmax_topk"]
SHAPE = ["dtype", "M", "N"]


def _bench():
    return data.load("sampling", gpu="h100")


def _table(values):
    return _bench().pivot_table(index=SHAPE, columns="provider", values=values)


def _few():
    us = _table("graph_us")
    return us, us.index.get_level_values("M") <= 8


def _noisy():
    return data.noisy(_table("graph_spread"))


def test_few_rows_course_against_pytorch_in_microseconds():
    us, few = _few()
    text = cell_with("09", FEW)
    ratio = (us[["torch_softmax_topk", "compile_softmax_topk"]].min(axis=1) / us.course_softmax_topk)[few]
    t = us.course_softmax_topk[few]
    quotes(text, f"takes {t.min():.1f} to {t.max():.1f} µs", "{}")
    quotes(text, f"compiled version {ratio.min():.2f} to {ratio.max():.2f} times as long", "{}")
    assert (ratio > 1.08).all() and "the course is ahead of both at every shape" in text  # beyond the noise
    design = us.course_topk_per_program[few]
    quotes(text, f"This lesson's design takes {design.min():.1f} to {design.max():.1f} µs there", "{}")


def test_few_rows_sample_against_the_hugging_face_chain_and_the_copy():
    us, few = _few()
    text = cell_with("09", FEW)
    quiet = ~_noisy().course_sample  # the ranges leave out sample's noisy cells (none at these rows)
    assert quiet[few].all()
    sample = us.course_sample[few & quiet]
    ratio = (us[["torch_hf_sample", "compile_hf_sample"]].min(axis=1) / us.course_sample)[few & quiet]
    quotes(text, f"`sample` takes {sample.min():.1f} to {sample.max():.1f} µs", "{}")
    quotes(text, f"chain {ratio.min():.1f} to {ratio.max():.1f} times as long", "{}")
    quotes(text, f"copy's {us['copy'][few].min():.1f} to {us['copy'][few].max():.1f} µs", "{}")
    assert us.compile_hf_sample[few].loc[:, 8].isna().all()  # "fails in Inductor ... from eight rows on"
    assert "fails in Inductor, its compiler, from eight rows on" in cell_with("09", "then the sampling chain")


def test_many_rows_fraction_of_one_read_and_where_the_course_is_ahead():
    frac = _table("frac_of_one_read").query("M >= 64")
    peer = frac[["torch_softmax_topk", "compile_softmax_topk"]].max(axis=1)
    course = frac.course_softmax_topk
    text = cell_with("09", MANY)
    quotes(text, f"reaches {course.min():.3f} to {course.max():.3f} of one read", "{}")
    quotes(text, f"(eager or compiled) {peer.min():.3f} to {peer.max():.3f}", "{}")
    assert (course > 1.08 * peer).all() and "ahead of PyTorch at every shape" in text
    met = course[course >= 0.85]  # the target met at these shapes only
    assert len(met) == 1 and "is met at one shape only" in text
    ((d, M, N),) = met.index
    quotes(text, f"{d} {M} × {N} ({met.iloc[0]:.3f})", "{}")


def test_many_rows_sample_against_the_hugging_face_chain():
    frac = _table("frac_of_one_read").query("M >= 64")
    noisy = _noisy().query("M >= 64")
    sample = frac.course_sample[~noisy.course_sample]
    text = cell_with("09", MANY)
    quotes(
        text,
        f"{sample.min():.3f} to {sample.max():.3f} of one read against "
        f"{frac.torch_hf_sample.min():.3f} to {frac.torch_hf_sample.max():.3f}",
        "{}",
    )
    assert (frac.course_sample > 1.08 * frac.torch_hf_sample).all()  # "at every shape"
    assert noisy.to_numpy().sum() == 1 and noisy.course_sample.sum() == 1
    ((d, M, N),) = noisy.index[noisy.course_sample]
    quotes(text, f"its one cell spread over 10%, {d} {M} × {N}, left out of its range", "{}")


def test_the_lessons_design_against_pytorch_and_softmax_topk():
    us = _table("graph_us")
    frac = _table("frac_of_one_read").query("M >= 64")
    text = cell_with("09", DESIGN)
    quotes(text, f"reaches {frac.course_topk_per_program.min():.3f} to {frac.course_topk_per_program.max():.3f}", "{}")
    ratio = us[["torch_softmax_topk", "compile_softmax_topk"]].min(axis=1) / us.course_topk_per_program
    assert len(ratio) == 32 and "over all 32 shapes it is no clear win" in text
    assert ratio.min() < 1 / 1.08 and ratio.max() > 1.08  # behind at some shapes, ahead at others, beyond the noise
    quotes(text, f"takes {ratio.min():.2f} to {ratio.max():.2f} times as long as it", "{}")
    lanes = us.course_topk_per_program / us.course_softmax_topk
    quotes(text, f"it takes {lanes.min():.1f} to {lanes.max():.1f} times as long as `softmax_topk`", "{}")
    quotes(cell_with("09", "## Key points"), f"is {lanes.min():.1f} to {lanes.max():.1f} times as fast", "{}")


def test_the_lessons_designs_bfloat16_is_no_faster():
    first = (
        _bench()
        .query("M >= 64 and provider == 'course_topk_per_program'")
        .pivot_table(index=["M", "N"], columns="dtype", values="graph_us")
    )
    assert (first.bfloat16 >= 0.95 * first.float32).all()  # "half the bytes, is no faster than float32"
    assert "half the bytes, is no faster than float32" in cell_with("09", DESIGN)


def test_no_quoted_range_ends_on_a_noisy_cell():
    """The lesson's ranges never rest on a cell whose rounds spread over 10%: at both ends of each range, every
    provider the number comes from is quiet. The noisy cells it counts are the tables' `*`."""
    spread = _table("graph_spread")
    us, few = _few()
    frac = _table("frac_of_one_read")
    many = ~few
    quiet = ~data.noisy(spread.course_sample)
    peers = ["torch_softmax_topk", "compile_softmax_topk"]
    ranges = [
        (us.course_softmax_topk[few], ["course_softmax_topk"]),
        ((us[peers].min(axis=1) / us.course_softmax_topk)[few], TOPK),
        (us.course_sample[few & quiet], ["course_sample"]),
        (
            (us[["torch_hf_sample", "compile_hf_sample"]].min(axis=1) / us.course_sample)[few & quiet],
            ["course_sample", "torch_hf_sample", "compile_hf_sample"],
        ),
        (us["copy"][few], ["copy"]),
        (us.course_topk_per_program[few], ["course_topk_per_program"]),
        (frac.course_softmax_topk[many], ["course_softmax_topk", "copy"]),
        (frac.course_sample[many & quiet], ["course_sample", "copy"]),
        (frac.course_topk_per_program[many], ["course_topk_per_program", "copy"]),
        (us[peers].min(axis=1) / us.course_topk_per_program, ["course_topk_per_program"] + peers),
        (us.course_topk_per_program / us.course_softmax_topk, ["course_softmax_topk", "course_topk_per_program"]),
    ]
    for values, providers in ranges:
        for at in (values.idxmin(), values.idxmax()):
            assert (spread.loc[at, providers].fillna(0) <= 0.10).all(), (at, providers)
    # at M <= 8 none in the lesson's tables, three of the lane design alone (in no table)
    few_noisy = data.noisy(spread[few])
    counts = few_noisy.sum()[few_noisy.sum() > 0].to_dict()
    assert counts == {"course_topk_lanes": 3}, counts
    assert (
        "No cell of these two tables spread over 10%; three cells of the library's other design timed alone did"
        in cell_with("09", FEW)
    )


def test_the_benchmark_derivations_are_in_sight():
    few = code_cell_with("09", "sample_ratio = ")
    assert "torch_topk / us.course_topk_per_program" in few and "few & quiet" in few
    many = code_cell_with("09", "peer, course, design = ")
    assert "frac.index[course > peer]" in many and "design_ratio.min()" in many
    assert "(us.course_topk_per_program / us.course_softmax_topk).min()" in many


def test_the_teaching_kernels_are_launched_plainly():
    """The lesson launches its two kernels as lesson 03 does, with no plan cache or launch runtime of the library's."""
    cell = code_cell_with("09", "def softmax_topk_two_kernels(")
    assert "topk_slice_kernel[(M, S)](" in cell and "topk_merge_kernel[(M,)](" in cell
    lesson = "\n".join(code_cell_with("09", p) for p in ("def topk_slice_kernel(", "def topk_merge_kernel(")) + cell
    for word in ("launch.", "Launch(", "Plan(", "runner(", "Cache(", "RowWise"):
        assert word not in lesson, word


# ---- The deep dive -----------------------------------------------------------------------------------------------
def test_the_merge_not_the_read_limits_the_design():
    b = _bench()
    ends = b.query("(M == 256 and N == 256000) or (M == 64 and N == 32000)")
    ends = ends.pivot_table(index=["M", "N", "dtype"], columns="provider", values="graph_us")
    ends = ends.assign(one_read=ends["copy"] / 2)
    ends = ends.assign(above_read=ends.course_softmax_topk - ends.one_read)
    text = cell_with("09d", "What limits the lane design shows at the two ends of the table")
    big, small = ends.loc[(256, 256000)], ends.loc[(64, 32000)]
    quotes(
        text,
        f"one read takes {big.one_read['float32']:.1f} µs in float32 and {big.one_read['bfloat16']:.1f} µs in bfloat16",
        "{}",
    )
    quotes(
        text,
        f"`softmax_topk` {big.course_softmax_topk['float32']:.1f} µs and {big.course_softmax_topk['bfloat16']:.1f} µs",
        "{}",
    )
    quotes(
        text,
        f"(the per-program design {big.course_topk_per_program['float32']:.1f} and {big.course_topk_per_program['bfloat16']:.1f})",
        "{}",
    )
    quotes(text, f": {big.above_read['float32']:.1f} and {big.above_read['bfloat16']:.1f} µs above the read", "{}")
    assert "ends.course_softmax_topk - ends.one_read" in code_cell_with("09d", "ends = ends.assign(one_read")
    quotes(
        text,
        f"At 64 rows of 32000 one read takes {small.one_read['float32']:.1f} µs in float32 and "
        f"`softmax_topk` {small.course_softmax_topk['float32']:.1f} µs",
        "{}",
    )
    assert small.one_read["float32"] < 0.2 * small.course_softmax_topk["float32"]  # "most of it is the merge kernel"
    quotes(cell_with("09d", "## Where the time goes"), "0.083 to 0.866 of one read", "{}")


# The lane design's unclean lanes: the prose quotes the plan, the prediction and the count of the cell.
UNCLEAN = "How many unclean lanes does a row have?"


def test_unclean_lanes_prediction_and_count():
    import math

    import torch

    from helpers.kernels.topk_lanes import LANE_PROGRAMS_PER_SM, lane_plan

    text = cell_with("09d", UNCLEAN)
    code = code_cell_with("09d", "def unclean_lanes(")
    ns = {"torch": torch, "math": math}
    exec(code.split("\n\nrandom_rows =")[0], ns)  # the cell's own function
    rows = torch.randn(32, 256000, generator=torch.Generator().manual_seed(0)) * 3
    assert "random_rows = torch.randn(32, 256000, generator=torch.Generator().manual_seed(0)) * 3" in code
    assert "lane_plan(M, 256000, 4, target_programs=132 * LANE_PROGRAMS_PER_SM)" in code  # float32: chunks of 4
    assert "32 random float32 rows through the same lanes (chunks of 4)" in text
    plans = [lane_plan(M, 256000, 4, target_programs=132 * LANE_PROGRAMS_PER_SM) for M in (64, 256)]
    lanes = [p["slices"] * p["block"] for p in plans]
    counted = [ns["unclean_lanes"](rows, p) for p in plans]
    quotes(text, f"{lanes[0]} lanes at 64 rows and {lanes[1]} lanes at 256 rows", "{}")
    quotes(text, f"is then {math.comb(50, 2) / lanes[0]:.2f} and {math.comb(50, 2) / lanes[1]:.2f} pairs a row", "{}")
    quotes(
        text,
        f"average {counted[0].mean():.2f} and {counted[1].mean():.2f} a row, at most "
        f"{counted[0].max():.0f} and {counted[1].max():.0f}",
        "{}",
    )
    quotes(text, f"Each is {256000 // lanes[0]} or {256000 // lanes[1]} logits read again", "{}")


def _loops():
    return data.load("topk_loop", gpu="h100")


def _gpus():
    """The lesson's H100-beside-H200 cell: both recordings at M >= 64, the shapes whose cells are quiet."""
    import pandas as pd

    shape = ["dtype", "M", "N"]
    both = pd.concat([_bench().assign(gpu="H100"), data.load("sampling", gpu="h200").assign(gpu="H200")]).query(
        "M >= 64"
    )
    used = both[both.provider.isin(["copy", "course_softmax_topk", "torch_softmax_topk", "compile_softmax_topk"])]
    noisy_shape = data.noisy(used.pivot_table(index=shape, columns="gpu", values="graph_spread", aggfunc="max")).any(
        axis=1
    )
    gpu_frac = both.query("provider == 'course_softmax_topk'").pivot_table(
        index=shape, columns="gpu", values="frac_of_one_read"
    )
    us = both.query("provider in ['copy', 'course_softmax_topk']").pivot_table(
        index=shape, columns=["provider", "gpu"], values="graph_us"
    )
    speedup = us.xs("H100", axis=1, level="gpu") / us.xs("H200", axis=1, level="gpu")
    above = us["course_softmax_topk"] - us["copy"] / 2
    peer = (
        both.query("gpu == 'H200' and provider in ['torch_softmax_topk', 'compile_softmax_topk']")
        .pivot_table(index=shape, columns="provider", values="frac_of_one_read")
        .max(axis=1)
    )
    quiet = ~noisy_shape
    return noisy_shape, gpu_frac[quiet], speedup[quiet], above[quiet], peer[quiet]


H200 = "On the H200 `softmax_topk` reaches"


H200 = "On the H200 `softmax_topk` reaches"


def test_the_h200_paragraph_fractions_beside_the_h100():
    """Both recordings are of the same library (one run on each GPU, every provider beside that run's copy): the
    fractions are compared directly, as ranges; no shape-by-shape tally."""
    h100, h200 = data.load("sampling", gpu="h100"), data.load("sampling", gpu="h200")
    assert len(h200.query("M >= 64 and provider == 'course_softmax_topk'")) == 16
    assert set(h200.provider) - set(h100.provider) == {"course_softmax_topk_jit", "course_sample_jit"}  # below
    assert set(h100.provider) <= set(h200.provider)
    noisy_shape, f, s, a, peer = _gpus()
    text = cell_with("09d", H200)
    quotes(
        text,
        f"reaches {f.H200.min():.3f} to {f.H200.max():.3f} of one read at 64 and 256 rows, "
        f"against {f.H100.min():.3f} to {f.H100.max():.3f} on the H100",
        "{}",
    )
    quotes(text, f"softmax + top-k there ({peer.min():.3f} to {peer.max():.3f}) at every shape", "{}")
    assert (f.H200 > 1.08 * peer).all()
    assert f.H200.max() < 0.85  # no target claimed on the H200 either
    assert "lower at every shape" not in text and " of 16 " not in text  # no tally of differences inside the noise
    assert "one logit a step" not in text and "one logit a step" not in cell_with(
        "09d", "The same benchmark on an H200"
    )


def test_the_h200_paragraph_the_time_above_one_read():
    noisy_shape, f, s, a, peer = _gpus()
    text = cell_with("09d", H200)
    quotes(
        text,
        f"runs the copy {s['copy'].min():.2f} to {s['copy'].max():.2f} times as fast as the H100, and "
        f"`softmax_topk` {s.course_softmax_topk.min():.2f} to {s.course_softmax_topk.max():.2f} times",
        "{}",
    )
    quotes(
        text,
        f"{a.H100.min():.1f} to {a.H100.max():.1f} µs on the H100 and {a.H200.min():.1f} to {a.H200.max():.1f} µs "
        f"on the H200, at each shape within {(a.H200 - a.H100).abs().max():.1f} µs of each other, in either "
        f"direction",
        "{}",
    )
    assert (a.H200 < a.H100).any() and (a.H200 > a.H100).any()  # "in either direction"
    assert (a.H200 - a.H100).abs().max() < 0.3 * a.H100.min() and "is close on both GPUs" in text
    assert "the copy's speed-up the larger" not in text and "the H200's the smaller" not in text


def test_the_h200_paragraph_no_noisy_cell():
    noisy_shape, *_ = _gpus()
    assert not noisy_shape.any() and "No cell of these tables spread over 10% on either GPU" in cell_with("09d", H200)


def test_the_h200_derivations_are_in_sight():
    cell = code_cell_with("09d", 'h200 = data.load("sampling", gpu="h200")')
    assert 'pd.concat([bench.assign(gpu="H100"), h200.assign(gpu="H200")])' in cell
    assert 'above = us["course_softmax_topk"] - us["copy"] / 2' in cell
    assert "noisy=gpu_frac.apply(lambda column: noisy_shape)" in cell
    numbers = code_cell_with("09d", "quiet = ~noisy_shape")
    assert "f, s, a = gpu_frac[quiet], speedup[quiet], above[quiet]" in numbers
    assert "(a.H200 - a.H100).abs().max()" in numbers and "(f.H200 / peer).min()" in numbers
    assert "(a.H200 < a.H100).any()" in numbers and '.sum(), "of"' not in numbers


def test_the_loop_before_and_after_the_chunks():
    """The paragraph after the loop comparison: the two loops alone, the two whole softmax_topk, and the time
    after the loop, each from topk_loop_h100.csv as the lesson's cell derives it."""
    loops = _loops()
    designs = {"base": "one logit a step", "chunkmax16B": "16-byte chunks"}
    two = loops[loops.variant.isin(list(designs))]
    assert (two.check.fillna("ok") == "ok").all() and two.spread.max() <= 0.10  # checked, quiet
    frac = two.pivot_table(index=["dtype", "M", "what"], columns="variant", values="frac_of_one_read")
    us = two.pivot_table(index=["dtype", "M", "variant"], columns="what", values="graph_us")
    after = us["topk"] - us["loop"]
    text = cell_with("09d", "At 256 rows the bfloat16 loop alone goes from")

    def moved(dtype, M, what):
        a, b = frac.loc[(dtype, M, what)]["base"], frac.loc[(dtype, M, what)]["chunkmax16B"]
        return f"from {a:.3f} to {b:.3f}"

    quotes(text, f"the bfloat16 loop alone goes {moved('bfloat16', 256, 'loop')} of one read", "{}")
    quotes(text, f"float32's, which had instructions to spare, {moved('float32', 256, 'loop')}", "{}")
    quotes(
        text, f"goes {moved('bfloat16', 256, 'topk')} in bfloat16 and {moved('float32', 256, 'topk')} in float32", "{}"
    )
    quotes(text, f"(at 64 rows {moved('bfloat16', 64, 'topk')} and {moved('float32', 64, 'topk')})", "{}")
    assert frac.loc[("bfloat16", 64, "loop")]["chunkmax16B"] > 1 > frac.loc[("float32", 64, "loop")]["chunkmax16B"]
    assert 64 * 256000 * 2 / 1e6 < 50 and "are 33 MB" in text and round(64 * 256000 * 2 / 1e6) == 33
    at = {M: after[[(d, M, v) for d in ("bfloat16", "float32") for v in designs]] for M in (64, 256)}
    quotes(
        text,
        f"{at[256].min():.1f} to {at[256].max():.1f} µs at 256 rows and {at[64].min():.1f} to {at[64].max():.1f} µs at 64",
        "{}",
    )
    chunk = us.loc[("bfloat16", 256, "chunkmax16B")]
    quotes(text, f"the chunked loop takes {chunk['loop']:.1f} of the {chunk['topk']:.1f} µs", "{}")
    assert '(us["topk"] - us["loop"]).round(1)' in code_cell_with("09d", 'loops = data.load("topk_loop"')


def test_the_search_for_t_counts():
    """The kernel's search, replayed in the lesson's cell on the same rows: the counts, the lane maxima
    above T and the unclean lanes the paragraph quotes."""
    import math

    import torch

    from helpers.kernels.topk_lanes import LANE_PROGRAMS_PER_SM, lane_plan

    ns = {"torch": torch, "math": math}
    exec(code_cell_with("09d", "def unclean_lanes(").split("\n\nrandom_rows =")[0], ns)
    exec(code_cell_with("09d", "def search(m, k=50, stop=66):").split("\n\nfor M in")[0], ns)
    rows = torch.randn(32, 256000, generator=torch.Generator().manual_seed(0)) * 3
    got = []
    for M in (64, 256):
        plan = lane_plan(M, 256000, 4, target_programs=132 * LANE_PROGRAMS_PER_SM)
        m, v2 = ns["lane_tops"](rows, plan)
        t, above, counts, shared = ns["search"](m)
        unclean = (ns["ordered"](v2) >= t[:, None]).sum(-1).double()
        got.append(
            (
                counts.double().mean(),
                counts.max(),
                above.double().mean(),
                unclean.mean(),
                unclean.max(),
                ns["unclean_lanes"](rows, plan).mean(),
                shared.double().mean(),
            )
        )
    text = cell_with("09d", "so the search starts below them: about")
    assert all(round(float(g[6]), 1) == round(float(got[0][6]), 1) for g in got)  # "at 64 and at 256 rows"
    quotes(
        text,
        f"share their {got[0][6]:.0f} highest bits with its maximum ({got[0][6]:.1f} on average at 64 and at 256 rows)",
        "{}",
    )
    quotes(text, f"({got[0][0]:.1f} and {got[1][0]:.1f} on average, at most {max(g[1] for g in got)})", "{}")
    quotes(text, f"for {got[0][2]:.0f} and {got[1][2]:.0f} lane maxima", "{}")
    quotes(
        text,
        f"{got[0][3]:.2f} and {got[1][3]:.2f} a row instead of {got[0][5]:.2f} and {got[1][5]:.2f}, "
        f"at most {got[0][4]:.0f} and {got[1][4]:.0f}",
        "{}",
    )
    assert all(round(float(g[0])) == 6 for g in got) and max(g[2] for g in got) <= 66  # "about 6", at most `stop`
    from helpers.kernels.topk_lanes import lane_launches

    launches = lane_launches(torch.empty(2, 32000), 64, 50).launches  # K = 64 for k = 50
    stop = launches[1].args[-2]  # the merge's stop, before n_real
    assert inspect.signature(ns["search"]).parameters["stop"].default == stop  # the cell replays the kernel's
    quotes(cell_with("09d", "So the search stops as soon as"), f"({stop} for $k$ = 50)", "{}")
    assert max(g[4] for g in got) < 16  # "never close to full": the rest of the 128 keys holds 62
    quotes(cell_with("09d", STAGES), f"at 256 rows a row has {got[1][3]:.2f} on average (counted above)", "{}")


# FlashInfer's sampling beside `sample` (figures/data/sampling_flashinfer_<gpu>.csv, H100 and H200), as the lesson's
# cells derive it.
FLASHINFER = "is ahead of FlashInfer's default at every shape on both GPUs"
FI_COLS = ["course_sample", "flashinfer_sample", "flashinfer_sample_scaled"]


def _flashinfer(gpu="h100"):
    fi = data.load("sampling_flashinfer", gpu=gpu)
    shape = ["dtype", "M", "N"]
    us = fi.pivot_table(index=shape, columns="provider", values="graph_us")[FI_COLS]
    noisy = data.noisy(fi.pivot_table(index=shape, columns="provider", values="graph_spread")[FI_COLS])
    host = fi.pivot_table(index=shape, columns="provider", values="host_us")[FI_COLS]
    return fi, us, noisy, host


def test_flashinfer_against_sample_in_gpu_time():
    text = cell_with("09d", FLASHINFER)
    assert "ahead of FlashInfer's default at every shape on both GPUs (no cell spread over 10%" in text
    for gpu, lead in [("h100", "On the H100, at 32000 columns"), ("h200", "On the H200:")]:
        fi, us, noisy, _ = _flashinfer(gpu)
        assert fi.attrs["provenance"]["flashinfer_path"] == "radix top-k first from 65536 columns"  # its default
        assert set(fi.provider) == {"copy", *FI_COLS} and (fi.status == "ok").all()
        times = us[["flashinfer_sample", "flashinfer_sample_scaled"]].div(us.course_sample, axis=0)
        radix = times.index.get_level_values("N") >= 65536
        assert not noisy.any(axis=None)
        assert (times.min(axis=1) > 1).all()  # "ahead ... at every shape"
        m, r = times[~radix], times[radix]
        part = text[text.index(lead) :]
        if gpu == "h100":
            quotes(
                part,
                f"FlashInfer's same draw takes {m.flashinfer_sample.min():.1f} to {m.flashinfer_sample.max():.1f} "
                f"times `sample`'s GPU time, and its kernels alone {m.flashinfer_sample_scaled.min():.1f} to "
                f"{m.flashinfer_sample_scaled.max():.1f} times; from 128256 columns on (the radix path) "
                f"{r.flashinfer_sample.min():.1f} to {r.flashinfer_sample.max():.1f} times, its kernels alone "
                f"{r.flashinfer_sample_scaled.min():.1f} to {r.flashinfer_sample_scaled.max():.1f} times",
                "{}",
            )
        else:
            quotes(
                part,
                f"{m.flashinfer_sample.min():.1f} to {m.flashinfer_sample.max():.1f} times (kernels alone "
                f"{m.flashinfer_sample_scaled.min():.1f} to {m.flashinfer_sample_scaled.max():.1f}) and "
                f"{r.flashinfer_sample.min():.1f} to {r.flashinfer_sample.max():.1f} times (kernels alone "
                f"{r.flashinfer_sample_scaled.min():.1f} to {r.flashinfer_sample_scaled.max():.1f})",
                "{}",
            )


def test_flashinfer_one_row():
    _, us, _, host = _flashinfer()
    text = cell_with("09d", FLASHINFER)
    row = us.loc[("float32", 1)].loc[[32000, 256000]].round(1)
    quotes(
        text,
        f"take {row.flashinfer_sample_scaled[32000]:.1f} µs at one row of 32000 float32 logits and "
        f"{row.flashinfer_sample_scaled[256000]:.1f} µs at 256000",
        "{}",
    )
    quotes(text, f"takes {row.course_sample[32000]:.1f} and {row.course_sample[256000]:.1f} µs", "{}")
    # The recording's course_sample host times are of the wrapper before its ready functions: the lesson compares
    # host times in its own section, with the H200 benchmark's (below), and quotes none from here.
    assert "host time" not in text and "µs of the CPU" not in text


def test_flashinfer_derivations_are_in_sight():
    cell = code_cell_with("09d", 'us[["flashinfer_sample", "flashinfer_sample_scaled"]].div(')
    assert "radix & quiet" in cell and '("float32", 1)' in cell and "host_us" not in cell
    assert 'data.load("sampling_flashinfer", gpu="h200")' in code_cell_with(
        "09d", 'data.load("sampling_flashinfer", gpu="h100")'
    )


# The merge's chain, longer and shortened (figures/data/topk_merge_h100.csv), as the deep dive's cell derives it: only
# savings beyond the run-to-run spread (over 8% of the time) count.
MERGE_AB = "Where the shorter chain saves more than 8% of the time"


def test_the_shorter_merge_chain():
    merge_ab = data.load("topk_merge", gpu="h100")
    chains = {"library": "longer chain", "cand_lw": "shorter chain"}
    whole = merge_ab[merge_ab.variant.isin(list(chains)) & (merge_ab.what == "topk")]
    assert whole.spread.max() < 0.1 and (whole.err.astype(float) < 1e-2).all()  # quiet rounds, checked against float64
    us = whole.pivot_table(index=["dtype", "M", "N"], columns="variant", values="graph_us")
    gain = us["library"] - us["cand_lw"]
    saved = gain / us["library"]
    big = saved > 0.08
    alone = merge_ab.query("variant == 'cand_lw' and what == 'merge'").graph_us
    frac = whole.pivot_table(index=["dtype", "M", "N"], columns="variant", values="frac_of_one_read")
    text = cell_with("09d", MERGE_AB)
    quotes(text, f"it saves {gain[big].min():.1f} to {gain[big].max():.1f} µs, the most at 256 rows", "{}")
    assert gain.idxmax()[1] == 256 and big[gain.idxmax()]
    quotes(
        text,
        f"Elsewhere it saves {gain[~big].min():.1f} to {gain[~big].max():.1f} µs, {saved[~big].min():.0%} to "
        f"{saved[~big].max():.0%} of the time: within the noise",
        "{}",
    )
    assert "faster at all" not in text  # no tally over savings inside the noise
    b, f = frac.loc[("bfloat16", 256, 256000)], frac.loc[("float32", 256, 256000)]
    assert b["cand_lw"] / b["library"] > 1.08 > f["cand_lw"] / f["library"]  # beyond the noise in bfloat16 only
    quotes(
        text,
        f"from {b['library']:.3f} to {b['cand_lw']:.3f} of one read in bfloat16 (in float32, from "
        f"{f['library']:.3f} to {f['cand_lw']:.3f}: within the noise)",
        "{}",
    )
    quotes(text, f"The merge alone still takes {alone.min():.1f} to {alone.max():.1f} µs", "{}")
    cell = code_cell_with("09d", 'merge_ab = data.load("topk_merge", gpu="h100")')
    assert "big = saved > 0.08" in cell and "gain[~big].min()" in cell
    assert "first written" not in cell_with("09d", "And the merge itself?")


# The lane loop's pipelining rule (lane_plan: 3 stages from 8 steps a slice) against its same-run A/B on both GPUs
# (figures/data/bench_runs/topk_loop_stages_<gpu>.csv: the library's loop, and the same loop as tl.range(num_stages=3)):
# every difference inside the run-to-run spread, as the prose says.
PIPELINE = "`lane_plan` asks for it from 8 steps a slice on"


def test_the_pipelining_rule_and_its_effect_within_the_noise():
    from helpers.kernels.topk_lanes import LANE_BYTES, LANE_PROGRAMS_PER_SM, lane_plan

    text = cell_with("09d", "software-pipelined")
    assert PIPELINE in text and "its effect, either way, is within the run-to-run spread" in text
    for gpu in ("h100", "h200"):
        ab = data.load(str(data.DATA_DIR / "bench_runs" / f"topk_loop_stages_{gpu}.csv"))
        topk = ab.query("what == 'topk' and variant in ['lib', 'st3']")
        assert topk.spread.max() <= 0.10 and (topk.err.astype(float) < 1e-2).all()
        t = topk.pivot_table(index=["dtype", "M", "N"], columns="variant", values="graph_us")
        assert ((t.st3 / t.lib - 1).abs() < 0.05).all()  # within the spread, either way
        for (dtype, M, N), row in t.iterrows():
            plan = lane_plan(
                M, N, LANE_BYTES // (2 if dtype == "bfloat16" else 4), target_programs=132 * LANE_PROGRAMS_PER_SM
            )  # both GPUs have 132 SMs
            steps = plan["slice_len"] // (plan["block"] * plan["chunk"])
            assert plan["stages"] == (3 if steps >= 8 else 1)


# Where 0.85 of one read is within any kernel's reach: the fixed cost a fraction of the floor hides (H100 recording).
REACH = "At five of the 16 shapes 0.85 allows"


def test_where_the_target_is_out_of_reach():
    bench = _bench()
    many = bench.query("M >= 64")
    one_read = many.query("provider == 'copy'").set_index(["dtype", "M", "N"]).graph_us / 2
    topk_us = many.query("provider == 'course_softmax_topk'").set_index(["dtype", "M", "N"]).graph_us
    fixed = bench.query("provider == 'copy' and M == 1").graph_us.min()
    allows, spends = one_read / 0.85 - one_read, topk_us - one_read
    out = allows < fixed
    text = cell_with("09d", REACH)
    assert out.sum() == 5 and len(out) == 16
    quotes(
        text,
        f"0.85 allows {allows[out].min():.2f} to {allows[out].max():.2f} µs above the read, less than the "
        f"copy's own {fixed:.2f} µs at one row",
        "{}",
    )
    quotes(
        text,
        f"it allows {allows[~out].min():.1f} to {allows[~out].max():.1f} µs, where `softmax_topk` spends "
        f"{spends[~out].min():.1f} to {spends[~out].max():.1f} µs above the read",
        "{}",
    )
    assert (spends[out] > allows[out]).all()  # the five are missed, as the target says they must be
    cell = code_cell_with("09d", "out_of_reach = reach")
    assert (
        "bench.query(\"provider == 'copy' and M == 1\").graph_us.min()" in cell and "one_read / 0.85 - one_read" in cell
    )


# Where the merge's time goes: the merge kernel cut short after each step (tools/merge_stages.py, H100 recording).
STAGES = "The whole merge takes"


def test_where_the_merge_spends_its_time():
    stages = data.load("topk_merge_stages", gpu="h100")
    cuts = stages.dropna(subset=["stop"]).sort_values("stop")
    assert cuts.spread.max() <= 0.10 and (cuts.err < 1e-2).all()
    chain = cuts.pivot_table(index="step", columns=["dtype", "M", "N"], values="graph_us", sort=False)
    adds = chain.diff().fillna(chain)
    lanes = cuts.pivot_table(index="step", columns=["dtype", "M", "N"], values="lanes", sort=False).iloc[0]
    rows = adds.columns.get_level_values("M")
    whole, steps = chain.loc["probabilities"], adds.drop("launch")
    text = cell_with("09d", STAGES)
    quotes(text, f"takes {whole.min():.1f} to {whole.max():.1f} µs at every shape", "{}")
    assert 9.5 <= whole.min() and whole.max() < 11.5  # "about 10 µs of dependent steps", the bounds section
    assert "about 10 µs of dependent steps" in cell_with("09d", "What bounds a one-pass kernel")
    quotes(
        text,
        f"at most {(steps.max() / whole).max():.0%} of the chain, and without it at least "
        f"{(whole - steps.max()).min():.1f} µs would remain",
        "{}",
    )
    quotes(text, f"costs {adds.loc['launch'].min():.1f} to {adds.loc['launch'].max():.1f} µs", "{}")
    search = adds.loc["search"]
    assert set(lanes[rows == 256]) == {1024} and set(lanes[rows < 256]) == {4096}
    quotes(
        text,
        f"costs {search[lanes == 1024].min():.1f} to {search[lanes == 1024].max():.1f} µs with 1024 lanes a row "
        f"(256 rows) and {search[lanes == 4096].min():.1f} to {search[lanes == 4096].max():.1f} µs with 4096",
        "{}",
    )
    quotes(
        text,
        f"costs {adds.loc['lists'].min():.1f} to {adds.loc['lists'].max():.1f} µs, and the sort of the candidates "
        f"{adds.loc['sort'].min():.1f} to {adds.loc['sort'].max():.1f} µs",
        "{}",
    )
    unclean = adds.loc["unclean lanes"]
    M, N = unclean.idxmin()[1:]
    quotes(text, f"from {unclean.min():.1f} µs ({M} rows of {N}) to {unclean.max():.1f} µs", "{}")
    library = stages.query("step == 'library'").set_index(["dtype", "M", "N"]).graph_us.reindex(whole.index)
    assert ((whole / library - 1).abs() < 0.01).all()  # the uncut copy takes the library merge's time
    cell = code_cell_with("09d", 'data.load("topk_merge_stages"')
    assert "chain.diff()" in cell and "data.noisy(spread.shift())" in cell
    assert '(steps.max() / adds.loc["the whole merge"]).max()' in cell and "- steps.max()).min()" in cell


# What a call costs the CPU (figures/data/sampling_h200.csv: the library's calls and the same kernels behind the
# obvious wrapper, in one run), as the lesson's cells derive it.
HOST = "A call of `softmax_topk` costs the CPU"


def _host():
    h200 = data.load("sampling", gpu="h200")
    shape = ["dtype", "M", "N"]
    host = h200.pivot_table(index=shape, columns="provider", values="host_us")
    gpu_us = h200.pivot_table(index=shape, columns="provider", values="graph_us")
    few = host.index.get_level_values("M") <= 8
    fi_run = data.load("sampling_flashinfer", gpu="h200").pivot_table(index=shape, columns="provider", values="host_us")
    eager = data.noisy(h200.query("M <= 8").pivot_table(index=shape, columns="provider", values="spread"))
    return host, gpu_us, few, fi_run, eager


def test_host_time_a_call_against_the_obvious_wrapper_and_pytorch():
    host, gpu_us, few, _, _ = _host()
    text = cell_with("09d", HOST)
    assert len(host) == 32
    for call, peer, name, peer_quote in [
        (
            "course_softmax_topk",
            "torch_softmax_topk",
            "`softmax_topk` costs the CPU",
            "PyTorch's softmax + top-k costs",
        ),
        ("course_sample", "torch_hf_sample", "one of `sample`", "the Hugging Face chain"),
    ]:
        h = host[call]
        quotes(text, f"{name} {h.min():.0f} to {h.max():.0f} µs", "{}")
        quotes(text, f"{peer_quote} {host[peer].min():.0f} to {host[peer].max():.0f} µs", "{}")
        assert (host[peer] > h).all()
    topk, smp = (host[c + "_jit"] / host[c] for c in ("course_softmax_topk", "course_sample"))
    quotes(
        text, f"cost {topk.min():.1f} to {topk.max():.1f} and {smp.min():.1f} to {smp.max():.1f} times as much", "{}"
    )
    assert min(topk.min(), smp.min()) > 2 and "more than `softmax_topk` at all 32 shapes" in text


def test_host_time_against_flashinfer_across_runs():
    host, _, _, fi_run, _ = _host()
    text = cell_with("09d", HOST)
    n = host.index.get_level_values("N")
    s, f = host.course_sample, fi_run.flashinfer_sample.reindex(host.index)
    assert f.notna().all()
    quotes(
        text,
        f"FlashInfer's same draw cost {f[n == 32000].min():.0f} to {f[n == 32000].max():.0f} µs at 32000 columns "
        f"and {f[n > 32000].min():.0f} to {f[n > 32000].max():.0f} µs from 128256 on",
        "{}",
    )
    quotes(
        text,
        f"`sample` here: {s[n == 32000].min():.0f} to {s[n == 32000].max():.0f} and "
        f"{s[n > 32000].min():.0f} to {s[n > 32000].max():.0f} µs",
        "{}",
    )
    assert "a comparison across runs" in text
    quotes(
        text,
        f"behind a wrapper that planned every call, as `_jit` does: {fi_run.course_sample.min():.0f} to "
        f"{fi_run.course_sample.max():.0f} µs",
        "{}",
    )
    assert "fi_run.course_sample.min()" in code_cell_with("09d", 'host[call + "_jit"] / host[call]')


def test_host_time_above_gpu_time_at_few_rows_and_eager_not_used():
    host, gpu_us, few, _, eager = _host()
    text = cell_with("09d", "At one and eight rows the kernels take")
    for call in ("course_softmax_topk", "course_sample"):
        g = gpu_us[call][few]
        over = host[call][few] / g
        quotes(text, f"{g.min():.1f} to {g.max():.1f} µs", "{}")
        quotes(text, f"{over.min():.1f} to {over.max():.1f}", "{}")
        assert (over > 1).all() and "above that at every shape" in text
    quotes(
        text,
        f"spread over 10% at {eager.course_softmax_topk.sum()} (`softmax_topk`) and {eager.course_sample.sum()} "
        f"(`sample`) of the {few.sum()} shapes",
        "{}",
    )
    assert eager.course_softmax_topk.sum() > 0  # else the eager timings could be used


def test_host_derivations_are_in_sight():
    table = code_cell_with("09d", "host = h200.pivot_table(")
    assert '"course_softmax_topk_jit"' in table and 'few = host.index.get_level_values("M") <= 8' in table
    numbers = code_cell_with("09d", 'host[call + "_jit"] / host[call]')
    assert (
        "(host[peer] > h).sum()" in numbers
        and "fi_h200.pivot_table(" in numbers
        and "data.noisy(eager_spread" in numbers
    )


FIXED = "The course's points follow the dashed line at every size"


def test_the_fixed_cost_picture():
    """One read plus a fixed cost: the median above one read (both GPUs, 64 and 256 rows), the read 0.85 then needs,
    and the cells that read that long, which are the cells at 0.85."""
    noisy_shape, f, s, a, peer = _gpus()
    fixed_us = a.stack().median()
    needs = fixed_us * 0.85 / 0.15
    both = [_bench().assign(gpu="H100"), data.load("sampling", gpu="h200").assign(gpu="H200")]
    import pandas as pd

    us = (
        pd.concat(both)
        .query("M >= 64")
        .pivot_table(index=["dtype", "M", "N"], columns=["provider", "gpu"], values="graph_us")
    )
    reads = (us["copy"][~noisy_shape] / 2).stack()
    text = cell_with("09d", FIXED)
    quotes(text, f"one read plus a roughly fixed {fixed_us:.1f} µs", "{}")
    quotes(text, f"only {(reads >= needs).sum()} of the {len(reads)} cells reads for {needs:.0f} µs or more", "{}")
    long_reads = reads[reads >= needs].index.tolist()
    assert long_reads == [("float32", 256, 256000, "H100")] and "float32 256 × 256000 on the H100" in text
    at_target = f.stack()[f.stack() >= 0.85].index.tolist()
    assert at_target == long_reads and "it is the one cell at 0.85" in text
    # "follow the dashed line at every size": one and eight rows spend about as much above their read
    few = (
        pd.concat(both)
        .query("M <= 8")
        .pivot_table(index=["dtype", "M", "N"], columns=["provider", "gpu"], values="graph_us")
    )
    few_above = (few["course_softmax_topk"] - few["copy"] / 2).stack()
    # "roughly fixed": within a third of the median at every size, while the read itself grows more than 50-fold
    assert (few_above - fixed_us).abs().max() < fixed_us / 3 and (a.stack() - fixed_us).abs().max() < fixed_us / 3
    assert reads.max() > 50 * reads.min()


def test_the_fixed_cost_derivation_is_in_sight():
    cell = code_cell_with("09d", "fixed_us = a.stack().median()")
    assert "needs = fixed_us * 0.85 / 0.15" in cell and "(reads >= needs).sum()" in cell
    assert 'lesson09.plot_fixed_cost({"H100": bench, "H200": h200}, fixed_us)' in cell


def test_the_lane_picture_caption():
    """The caption of the lane figure reads lesson09.lane_example, the cell that draws it."""
    from helpers import lesson09

    ex = lesson09.lane_example(k=3)
    x, m, v = ex["x"], ex["m"], ex["v"]
    text = cell_with("09d", "Lane 0's maximum, 9.1")
    quotes(text, f"Lane 0's maximum, {m[0]:.1f}, is in its chunk of step {int(ex['c'][0])}", "{}")
    assert ex["unclean"].tolist() == [True, False, False, False] and f"($v_0 = {v[0]:.1f} \\ge T$)" in text
    # a merge that read only the maxima's chunks (not the unclean lane's other chunk) misses the true third
    chunks_only = sorted((float(x[w]) for w in ex["candidates"] if w[0] == int(ex["c"][w[1]])), reverse=True)
    true_top = x.flatten().topk(3).values.tolist()
    assert chunks_only[2] != true_top[2] and abs(ex["T"] - m[2]) < 1e-6
    quotes(text, f"would return {chunks_only[2]:.1f} as the third largest, not {true_top[2]:.1f}", "{}")
    lane1 = sorted((float(x[w]) for w in ex["candidates"] if w[1] == 1), reverse=True)
    quotes(text, "two logits $\\ge T$, " + " and ".join(f"{u:.1f}" for u in lane1), "{}")
    quotes(text, f"Lane 3's maximum, {m[3]:.1f}, is below $T$", "{}")
    assert not ex["kept"][3]
    quotes(text, f"among the {len(ex['candidates'])} candidates", "{}")
    assert ex["top"] <= ex["candidates"]
    cell = code_cell_with("09d", "ex = lesson09.lane_example(k=3)")
    assert "plots.show(lesson09.plot_lanes(ex))" in cell


def test_the_fixed_cost_in_what_bounds_a_one_pass_kernel():
    noisy_shape, f, s, a, peer = _gpus()
    quotes(
        cell_with("09d", "## What bounds a one-pass kernel"),
        f"one read plus about {a.stack().median():.0f} µs at every size",
        "{}",
    )
