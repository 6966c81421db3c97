"""Lesson 06 (split rows): the slice statistics and the merge (defined in a cell of the lesson) against
float64, the first launch's statistics tensor, the split kernel on rows with all -inf slices, the cooperative kernel's safety
net, the L2 model, the live measurements' guard, the figures, what the notebooks read and say about their
recordings, and the exercise checkers (one test per plausible wrong answer, with the hint that names it). The
numbers the prose quotes are the notebooks' `claims`, which tests/test_claims.py checks against the text.

Every checker must print exactly one line and never raise, whatever the learner wrote: a right
answer gives "correct", an untouched template (``raise NotImplementedError``) "not yet", a wrong
answer or an exception "wrong".
"""

from __future__ import annotations

import ast
import inspect
import itertools
import linecache
import math
import random
import re

import matplotlib
import pytest
import torch
import triton
import triton.language as tl
from checking import assert_checker_contract, module_from
from claims import code_cell_with, notebook, prose

import helpers
from helpers import data, lesson06, lesson06_exercises
from helpers.exercises import guarded
from helpers.lesson06 import slice_stats

#: The merge and its identity, as the lesson defines them in a cell.
_LESSON = {"math": math, "torch": torch, "inf": math.inf}
exec(code_cell_with("06", "def merge(a, b):"), _LESSON)
IDENTITY, merge = _LESSON["IDENTITY"], _LESSON["merge"]

# --------------------------------------------------------------------------------------------
# slice_stats and merge against float64
# --------------------------------------------------------------------------------------------


def demo_rows(seed: int = 0, n_cols: int = 48) -> torch.Tensor:
    """The lesson's five float64 rows: random, a late maximum of 200, a first half of -inf, a middle
    of -inf, and a single finite value."""
    x = torch.randn(5, n_cols, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 3
    x[1, -3] = 200.0
    x[2, : n_cols // 2] = -math.inf
    x[3, n_cols // 4 : 3 * n_cols // 4] = -math.inf
    x[4, :] = -math.inf
    x[4, n_cols // 3] = 1.5
    return x


def merge_in_random_order(pairs, rng):
    items = list(pairs)
    rng.shuffle(items)
    while len(items) > 1:
        i = rng.randrange(len(items) - 1)
        items[i : i + 2] = [merge(items[i], items[i + 1])]
    return items[0] if items else IDENTITY


def logsumexp_of(pair) -> float:
    m, d = pair
    return -math.inf if d == 0 else m + math.log(d)


def _pairs(x: torch.Tensor, s: int) -> list[tuple[float, float]]:
    m, d = slice_stats(x, s)
    return list(zip(m.tolist(), d.tolist()))


@pytest.mark.parametrize("slices", [1, 2, 3, 5, 7, 12, 48, 60])
def test_slice_stats_of_each_slice(slices):
    x = demo_rows()
    m, d = slice_stats(x, slices)
    assert m.shape == d.shape == (5, slices)
    L = -(-x.shape[1] // slices)
    for r in range(x.shape[0]):
        for s in range(slices):
            part = x[r, s * L : (s + 1) * L]
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
    x = demo_rows()
    ref = torch.logsumexp(x, dim=-1).tolist()
    rng = random.Random(slices)
    for r in range(x.shape[0]):
        pairs = _pairs(x[r], slices)
        for _ in range(30):
            got = logsumexp_of(merge_in_random_order(pairs, rng))
            assert got == pytest.approx(ref[r], abs=1e-12)
        # every order of a few pairs, merged left to right
        for perm in itertools.islice(itertools.permutations(pairs), 24):
            acc = IDENTITY
            for p in perm:
                acc = merge(acc, p)
            assert logsumexp_of(acc) == pytest.approx(ref[r], abs=1e-12)


def test_merge_of_only_identities_is_identity():
    x = torch.full((12,), -math.inf, dtype=torch.float64)
    pairs = _pairs(x, 4)
    assert all(p == IDENTITY for p in pairs)
    assert merge_in_random_order(pairs, random.Random(0)) == IDENTITY
    assert logsumexp_of(IDENTITY) == -math.inf
    assert merge_in_random_order([], random.Random(0)) == IDENTITY


# --------------------------------------------------------------------------------------------
# The two-launch kernel: statistics tensor and rows with all -inf slices
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "n_cols,slices,block,want",
    [
        (40, 4, 8, (16, 3)),
        (3000, 5, 256, (768, 4)),
        (1000, 16, 64, (64, 16)),
        (1000, 1, 64, (1024, 1)),
        (256, 4, 128, (128, 2)),
    ],
)
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


def inf_rows(n_cols: int = 300) -> torch.Tensor:
    g = torch.Generator().manual_seed(6)
    x = torch.randn(5, n_cols, generator=g) * 3
    x[0, : n_cols // 2] = -math.inf
    x[1, n_cols // 5 : 4 * n_cols // 5] = -math.inf
    keep = x[2, n_cols // 3].item()
    x[2, :] = -math.inf
    x[2, n_cols // 3] = keep
    x[3, : n_cols - 10] = -math.inf
    x[3, -2] = 200.0
    x[4, :] = -math.inf
    return x


def test_the_lessons_plain_launch_is_the_library():
    """The lesson launches its two kernels plainly (`softmax_two_launches`); `helpers.softmax_split` plans the
    same launches: on the same rows, slices and blocks, the two agree to the bit."""
    ns = {
        "torch": torch,
        "triton": triton,
        **{k: getattr(helpers.kernels, k) for k in ("softmax_split_stats_kernel", "softmax_split_normalize_kernel")},
    }
    exec(code_cell_with("06", "def softmax_two_launches("), ns)
    x = inf_rows(300).to(helpers.DEVICE)
    for slice_len, block in ((32, 32), (64, 32), (128, 64), (320, 64)):
        n_slices = triton.cdiv(300, slice_len)
        y = ns["softmax_two_launches"](x, slice_len, BLOCK_SIZE=block)
        lib = helpers.softmax_split(x, slices=n_slices, block_size=block)
        assert lesson06.split_layout(300, n_slices, block) == (slice_len, n_slices)
        assert torch.allclose(y, lib, rtol=0, atol=0, equal_nan=True), slice_len
        assert helpers.error_report(y, x.cpu()).ok(atol=1e-6)


def test_split_on_inf_rows():
    x = inf_rows(300)
    for s in (1, 2, 3, 5):
        y = helpers.softmax_split(x.to(helpers.DEVICE), slices=s, block_size=32)
        rep = helpers.error_report(y, x)
        assert rep.nan_mismatch == 0 and rep.ok(atol=1e-6), (s, rep)
        assert torch.isnan(y[4].cpu()).all()


def test_coop_safety_net():
    g = torch.Generator().manual_seed(6)
    x = torch.randn(3, 300, generator=g) * 4
    x[1, :150] = -math.inf
    x[2, 100] = 1e4
    y, published, gave_up = lesson06.run_coop_kernel(x.to(helpers.DEVICE), slice_cols=64, rows_per_round=3, max_spin=1)
    assert published.tolist() == [5, 5, 5]
    if helpers.INTERPRETER:  # one program at a time: all but the last of each row give up
        assert gave_up == 12
    assert helpers.error_report(y, x).ok(atol=1e-6)


def test_run_coop_kernel_launches_the_kernel_it_is_given():
    """The lesson's "try on your own" passes an edited copy of the kernel: that copy is what runs."""
    calls = []

    class StandIn:  # a kernel that records its launch and computes nothing
        def __getitem__(self, grid):
            return lambda *args, **kwargs: calls.append((grid, args, kwargs))

    x = torch.randn(2, 100, device=helpers.DEVICE)
    y, published, gave_up = lesson06.run_coop_kernel(x, slice_cols=64, rows_per_round=2, max_spin=1, kernel=StandIn())
    assert len(calls) == 1
    grid, args, kwargs = calls[0]
    assert grid == (4,) and args[0] is y and args[1] is x
    assert kwargs["SLICE"] == 64 and kwargs["MAX_SPIN"] == 1
    assert published.tolist() == [0, 0] and gave_up == 0 and bool(y.isnan().all())  # nothing else ran


# --------------------------------------------------------------------------------------------
# The all-or-nothing L2 model (exercise 6.3's answer), live measurements, figures
# --------------------------------------------------------------------------------------------


def test_predicted_frac_answer():
    l2 = 50 * 2**20
    f = lesson06.predicted_frac_answer
    assert f("split", 8, 2**20, 4, l2) == 1.0  # 32 MiB fits
    assert f("split", 64, 2**18, 4, l2) == pytest.approx(2 / 3)  # 64 MiB does not
    assert f("split", 4, 1000, 4, 16000) == 1.0  # exactly full counts as fitting
    assert f("online", 8, 2**20, 4, l2) == pytest.approx(2 / 3)
    assert f("split_coop", 1024, 2**16, 4, l2) == 1.0
    with pytest.raises(ValueError):
        f("fused", 8, 2**20, 4, l2)


def test_live_measurements_need_a_gpu():
    if helpers.ON_GPU:
        pytest.skip("live measurements run on a GPU")
    for fn in (lesson06.l2_rows, lesson06.bench_rows):
        with pytest.raises(RuntimeError):
            fn()


def test_bench_calls_the_lessons_measurement():
    """``python tools/bench.py lessons`` records split_l2.csv with lesson06.l2_rows."""
    import inspect

    import bench

    assert "lesson06.l2_rows" in inspect.getsource(bench.lessons)


@pytest.mark.parametrize("name", list(lesson06.FIGURES))
def test_figures(name):
    import matplotlib.pyplot as plt

    assert name.startswith("06_")
    fig = lesson06.FIGURES[name]()
    try:
        assert isinstance(fig, matplotlib.figure.Figure) and fig.axes
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


def test_l2_figure_shows_prediction_and_measurement():
    import matplotlib.pyplot as plt

    fig = lesson06.plot_l2_model(data.load("split_l2"), 50 * 2**20)
    try:
        labels = [ln.get_label() for ln in fig.axes[0].get_lines()]
        assert "model: two launches" in labels and "model: cooperative" in labels
        assert sum(lab.startswith("measured:") for lab in labels) == 3
        step = next(ln for ln in fig.axes[0].get_lines() if ln.get_label() == "model: two launches")
        assert list(step.get_ydata()) == [1.0, 1.0, 2 / 3, 2 / 3] and step.get_xdata()[1] == 50
    finally:
        plt.close(fig)


# --------------------------------------------------------------------------------------------
# The notebooks: what they read, and what their text says about it
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("lesson", ["06", "06d"])
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
    assert "Every measurement in this lesson comes from one GPU, an H100" in prose("06")
    core = _recordings(notebook("06")["cells"])
    assert {name for name, _ in core} == {"device_props", "bench", "split_l2"}
    for name, gpu in core:
        assert "H100" in data.load(name, gpu=gpu).attrs["provenance"]["gpu"], name
    cells = notebook("06d")["cells"]
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


def test_the_fused_kernel_spills_where_the_lesson_says_so():
    """The core says the fused kernel of lesson 03 spills at rows of 65,536 floats: lesson 03's recording shows it."""
    assert "a row of 65,536 floats no longer fits in its registers, and it spills (lesson 03)" in prose("06")
    limits = data.load("fused_limits").query("dtype == 'float32'").set_index("N")
    assert limits.loc[65536, "n_spills"] > 0


def test_the_tuners_table_has_one_timing_per_candidate():
    """The deep dive reads the tuner's table as one timing each, with no rounds: the recording has no spread."""
    assert "The tuner times each candidate once, with no rounds" in prose("06d")
    assert not any("spread" in c for c in data.load("tuning_nvidia_h100_80gb_hbm3").columns)


def test_the_deep_dives_bar_chart_shows_every_bar():
    """The y axis of the bar chart reaches past the tallest bar (the held-out shape's, above 1.0)."""
    assert "top = max(1.05, 1.08 * frac.max().max())" in code_cell_with("06d", "top = max(")


# --------------------------------------------------------------------------------------------
# Exercise 6.1: the learner's split statistics kernel, and the wrong kernels a learner writes
# --------------------------------------------------------------------------------------------


#: The reference: the library's statistics kernel, exported from the lesson's cell (exercise 6.1's answer). Each
#: wrong kernel a learner writes is that source with a line or two substituted (every `old` must be in it, so an
#: edit to the lesson's kernel fails here rather than leave a variant silently right).
STATS_SOURCE = inspect.getsource(helpers.kernels.softmax_split_stats_kernel.fn)
UPDATE = """\
        m_new = tl.maximum(m, tl.max(x, axis=0))
        alpha = tl.where(m_new == -float("inf"), 1.0, tl.exp(m - m_new))
        d = d * alpha + tl.sum(tl.where(x == -float("inf"), 0.0, tl.exp(x - m_new)), axis=0)
        m = m_new
"""
STORES = """\
    tl.store(stats_ptr + (row * n_slices + s) * 2, m)
    tl.store(stats_ptr + (row * n_slices + s) * 2 + 1, d)"""


def _after_the_loop(line: str) -> tuple[str, str]:
    """A line inserted between the loop and the stores."""
    return STORES, f"    {line}\n{STORES}"


WRONG_STATS = {
    "no_rescale": [("d = d * alpha + ", "d = d + ")],
    # no tl.where: exp(-inf - (-inf)) is NaN for a block of only -inf while m is still -inf
    "nan_trap": [
        ('tl.where(m_new == -float("inf"), 1.0, tl.exp(m - m_new))', "tl.exp(m - m_new)"),
        ('tl.where(x == -float("inf"), 0.0, tl.exp(x - m_new))', "tl.exp(x - m_new)"),
    ],
    "block_offset": [("start = s.to(tl.int64) * slice_len", "start = s.to(tl.int64) * BLOCK_SIZE")],
    "no_mask": [(', mask=c < n_cols,\n                    other=-float("inf"))', ")")],
    "other_zero": [('other=-float("inf")).to(tl.float32)', "other=0.0).to(tl.float32)")],
    "stops_early": [("range(0, slice_len, BLOCK_SIZE)", "range(0, slice_len - BLOCK_SIZE, BLOCK_SIZE)")],
    "last_block_only": [("d = d * alpha + tl.sum(", "d = tl.sum(")],
    "no_col_stride": [("c * in_col_stride, mask", "c, mask")],
    "row_stride_is_n_cols": [("row * in_row_stride + c", "row * n_cols * in_col_stride + c")],
    # d = sum of exp(x), shifted only at the end: exp(300) overflows float32
    "no_max_shift": [
        (UPDATE, "        m = tl.maximum(m, tl.max(x, axis=0))\n        d = d + tl.sum(tl.exp(x), axis=0)\n"),
        _after_the_loop('d = tl.where(m == -float("inf"), 0.0, d * tl.exp(-m))'),
    ],
    # every term shifted by the first block's max, never updated: exp overflows once the max rises by 89
    "first_block_shift": [
        (
            "    cols = tl.arange(0, BLOCK_SIZE)\n",
            "    cols = tl.arange(0, BLOCK_SIZE)\n"
            "    shift = tl.max(tl.load(in_ptr + row * in_row_stride + (start + cols) * in_col_stride,\n"
            '                           mask=start + cols < n_cols, other=-float("inf")).to(tl.float32), axis=0)\n'
            '    shift = tl.where(shift == -float("inf"), 0.0, shift)\n',
        ),
        (
            UPDATE,
            "        m = tl.maximum(m, tl.max(x, axis=0))\n"
            '        d = d + tl.sum(tl.where(x == -float("inf"), 0.0, tl.exp(x - shift)), axis=0)\n',
        ),
        _after_the_loop('d = tl.where(m == -float("inf"), 0.0, d * tl.exp(shift - m))'),
    ],
    "swapped": [(STORES, STORES.replace(", m)", ", TMP)").replace(", d)", ", m)").replace(", TMP)", ", d)"))],
    # stores at row * n_slices + s (forgetting the pair's 2): half the buffer stays untouched
    "stores_nothing": [(STORES, "    tl.store(stats_ptr + row * n_slices + s, 0.0)")],
    "store_past_end": [("(row * n_slices + s)", "(row * n_slices + s + 1)")],  # off by one pair
    # the pair stored at the slice's first column, as if stats were laid out like x: far outside
    "store_far": [("(row * n_slices + s) * 2", "(row * in_row_stride + start) * 64")],
    "bad_code": [("tl.maximum(m, tl.max(x, axis=0))", "tl.no_such_function(x)")],
}
_BUILT: dict = {}


def _kernel_from(name: str, src: str):
    """The one @triton.jit function of ``src``, compiled where Triton can read its source back."""
    if name not in _BUILT:
        file = f"<lesson 06 kernel {name}>"
        linecache.cache[file] = (len(src), None, src.splitlines(True), file)
        ns = {"tl": tl, "triton": triton}
        exec(compile(src, file, "exec"), ns)
        _BUILT[name] = ns[re.search(r"^def (\w+)\(", src, re.M).group(1)]
    return _BUILT[name]


def stats_kernel(wrong: str | None = None):
    """The reference kernel, or the wrong kernel ``WRONG_STATS[wrong]`` makes of it."""
    src = STATS_SOURCE
    for old, new in WRONG_STATS[wrong] if wrong else ():
        assert old in src, f"{wrong}: {old!r} is no longer in the lesson's kernel"
        src = src.replace(old, new)
    assert wrong is None or src != STATS_SOURCE
    return _kernel_from(wrong or "reference", src)


def stats_template():
    """Exercise 6.1's template, as the notebook's cell has it."""
    return _kernel_from("template", code_cell_with("06", "def split_stats_kernel("))


def combine_right(stats):
    m_s, d_s = stats[..., 0], stats[..., 1]
    m = m_s.max(dim=-1).values
    moved = torch.where(d_s == 0, 0.0, d_s * torch.exp(m_s - m[:, None]))
    return m, moved.sum(dim=-1)


def combine_any_leading_dims(stats):
    m_s, d_s = stats[..., 0], stats[..., 1]
    m = m_s.max(dim=-1).values
    return m, torch.where(d_s == 0, torch.zeros((), dtype=stats.dtype), d_s * torch.exp(m_s - m.unsqueeze(-1))).sum(-1)


def combine_no_guard(stats):
    m_s, d_s = stats[..., 0], stats[..., 1]
    m = m_s.max(dim=-1).values
    return m, (d_s * torch.exp(m_s - m[:, None])).sum(dim=-1)


def combine_no_rescale(stats):
    return stats[..., 0].max(dim=-1).values, stats[..., 1].sum(dim=-1)


def frac_right(design, M, N, e, l2):
    x = M * N * e
    if design == "split_coop" or (design == "split" and x <= l2):
        return 1.0
    return 2 / 3


def frac_always_three_passes(design, M, N, e, l2):
    return 1.0 if design == "split_coop" else 2 / 3


def _run(capsys, checker, attempt) -> str:
    """The verdict line a checker prints: one line, and after "correct" for a kernel, the traffic line
    (helpers.exercises)."""
    checker(attempt)
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 or (len(out) == 2 and "): correct" in out[0] and out[1].startswith("Traffic: ")), out
    return out[0]


#: exercise -> (checker, a right answer, a wrong answer, its hint); the kernel exercise has its own tests below.
CHECKERS = {
    "6.2": (
        lesson06_exercises.check_6_2,
        combine_right,
        combine_no_rescale,
        "is each slice's d moved to the row's maximum",
    ),
    "6.3": (lesson06_exercises.check_6_3, frac_right, frac_always_three_passes, "x fits in L2 here"),
}


@pytest.mark.parametrize("ex", list(CHECKERS))
def test_checker_contract(capsys, ex):
    """Right: correct; the template or None: not yet; the wrong answer: its hint; code that raises, a missing return:
    wrong (tests/checking.py)."""
    checker, right, wrong, hint = CHECKERS[ex]
    assert_checker_contract(capsys, checker, right, wrong, hint)
    assert checker(right) is None, "a checker returns nothing (so a notebook cell shows only its line)"


@pytest.mark.parametrize("ex", list(CHECKERS) + ["6.1"])
def test_checker_unattempted_value_and_not_a_function(capsys, ex):
    checker = lesson06_exercises.check_6_1 if ex == "6.1" else CHECKERS[ex][0]
    for value in (None, ...):
        assert "): not yet" in _run(capsys, checker, value)
    if ex != "6.1":
        line = _run(capsys, checker, 42)
        assert "wrong: expected a function, got int" in line, line


# ---- 6.1: the kernel ------------------------------------------------------------------------


def test_checker_6_1_right(capsys):
    line = _run(capsys, lesson06_exercises.check_6_1, stats_kernel())
    assert line.startswith("Exercise 6.1 (the split statistics kernel): correct"), line


def test_checker_6_1_accepts_the_library_kernel(capsys):
    line = _run(capsys, lesson06_exercises.check_6_1, helpers.kernels.softmax_split_stats_kernel)
    assert "): correct" in line, line


def test_checker_6_1_untouched_template(capsys):
    line = _run(capsys, lesson06_exercises.check_6_1, stats_template())
    assert "): not yet: replace `raise NotImplementedError`" in line, line


@pytest.mark.parametrize(
    "kernel,hint",
    [
        ("no_rescale", "multiply d by exp(m_old - m_new)"),
        ("nan_trap", "exp(-inf - (-inf)) is NaN"),
        ("block_offset", "starts at column s * slice_len, not s * BLOCK_SIZE"),
        ("no_mask", "the last slice of a row reads past n_cols"),
        ("other_zero", "masked lanes load 0"),
        ("stops_early", "stops before the slice's last block"),
        ("last_block_only", "d holds only the last block's terms"),
        ("no_col_stride", "the columns are in_col_stride elements apart"),
        ("row_stride_is_n_cols", "rows are in_row_stride elements apart, not n_cols"),
        ("no_max_shift", "never of x alone"),
        ("first_block_shift", "of x minus another shift"),
        ("swapped", "m and d are swapped"),
        ("stores_nothing", "nothing was stored for (row"),
        ("store_past_end", "wrote past the end of its output"),
        ("bad_code", "raised"),
    ],
)
def test_checker_6_1_wrong_kernels(capsys, kernel, hint):
    line = _run(capsys, lesson06_exercises.check_6_1, stats_kernel(kernel))
    assert line.startswith("Exercise 6.1 (the split statistics kernel): wrong: "), line
    assert hint in line, line


def test_checker_6_1_out_of_bounds_store_leaves_the_process_alive(capsys):
    """A store far outside the buffers is "wrong", and this process goes on: the next launch of a
    right kernel is judged correct."""
    line = _run(capsys, lesson06_exercises.check_6_1, stats_kernel("store_far"))
    assert line.startswith("Exercise 6.1 (the split statistics kernel): wrong: "), line
    line = _run(capsys, lesson06_exercises.check_6_1, stats_kernel())
    assert "): correct" in line, line


def test_checker_6_1_not_a_kernel(capsys):
    line = _run(capsys, lesson06_exercises.check_6_1, lambda *a: None)
    assert "wrong: split_stats_kernel must be a Triton kernel" in line, line
    line = _run(capsys, lesson06_exercises.check_6_1, 42)
    assert "wrong: split_stats_kernel must be a Triton kernel" in line, line


def test_simulate_stats_matches_slice_stats():
    """The checker's float64 model of the kernel agrees with slice_stats on every case, read from the
    same strided, NaN-padded memory the learner's kernel gets."""
    for _desc, rows, L, B, cs, rs in lesson06_exercises._stats_kernel_cases():
        M, N = rows.shape
        assert rs not in (N, cs * N) and rs >= cs * (N - 1) + 1  # a row stride that is not the row length
        base = guarded((M, cs * (N - 1) + 1), fill=1000.0, row_stride=rs)
        x = base[:, ::cs]
        x.copy_(rows.to(x.device))
        m, d = lesson06_exercises.simulate_stats(x, L, B)
        m64, d64 = slice_stats(rows.double(), triton.cdiv(N, L), L)
        assert torch.equal(m, m64)
        assert torch.allclose(d, d64, rtol=1e-12, atol=0)
        # a load past a row's end reads NaN, and the model says so
        m_nomask, d_nomask = lesson06_exercises.simulate_stats(x, L, B, mask=False)
        crosses = [s for s in range(triton.cdiv(N, L)) if s * L + L > N]
        assert torch.isnan(d_nomask[:, crosses]).all()


# ---- 6.2 and 6.3 ----------------------------------------------------------------------------


def combine_shift_first(stats):
    # every slice's sum moved to the first slice's maximum: e^(m_s - m_0) overflows when m_s is far above
    m_s, d_s = stats[..., 0], stats[..., 1]
    shift = torch.where(torch.isinf(m_s[:, :1]), 0.0, m_s[:, :1])
    d = torch.where(d_s == 0, 0.0, d_s * torch.exp(m_s - shift)).sum(-1)
    m = m_s.max(dim=-1).values
    return m, torch.where(torch.isinf(m), 0.0, d * torch.exp(shift[:, 0] - m))


def combine_no_shift(stats):
    m_s, d_s = stats[..., 0], stats[..., 1]
    return m_s.max(dim=-1).values, torch.where(d_s == 0, 0.0, d_s * torch.exp(m_s)).sum(-1)


def combine_over_rows(stats):
    m_s, d_s = stats[..., 0], stats[..., 1]
    m = m_s.max(dim=0).values
    return m, torch.where(d_s == 0, 0.0, d_s * torch.exp(m_s - m)).sum(0)


def combine_modifies(stats):
    out = combine_right(stats.clone())
    stats[..., 1] = 0.0
    return out


@pytest.mark.parametrize(
    "attempt,hint",
    [
        (combine_no_guard, "e^(-inf - -inf) is NaN unless you leave such slices out"),
        (combine_no_rescale, "is each slice's d moved to the row's maximum"),
        (combine_shift_first, "overflows float32 here unless the shift is the row's maximum"),
        (combine_no_shift, "overflows or underflows float32 here unless the shift is the row's maximum"),
        (combine_over_rows, "reduce over the last dimension (the slices)"),
        (lambda s: combine_right(s)[0], "return a pair of tensors"),
        (lambda s: tuple(t[:, None] for t in combine_right(s)), "one value per row"),
        (combine_modifies, "changed the statistics tensor"),
    ],
)
def test_checker_6_2_wrong_answers(capsys, attempt, hint):
    line = _run(capsys, lesson06_exercises.check_6_2, attempt)
    assert line.startswith("Exercise 6.2 (merge a row's statistics in one step): wrong: "), line
    assert hint in line, line


def test_checker_6_2_accepts_float64_and_float32_answers(capsys):
    line = _run(capsys, lesson06_exercises.check_6_2, lambda s: tuple(t.double() for t in combine_right(s)))
    assert "): correct" in line, line
    line = _run(capsys, lesson06_exercises.check_6_2, combine_any_leading_dims)
    assert "): correct" in line, line


def frac_strict(design, M, N, e, l2):  # "<" instead of "<=": exactly full does not count
    x = M * N * e
    return 1.0 if design == "split_coop" or (design == "split" and x < l2) else 2 / 3


def frac_bytes(design, M, N, e, l2):
    return 3 * M * N * e


def frac_inverse(design, M, N, e, l2):
    return 1 / frac_right(design, M, N, e, l2)


def frac_coop_three(design, M, N, e, l2):
    return 2 / 3 if design == "split_coop" else frac_right(design, M, N, e, l2)


def frac_online_cached(design, M, N, e, l2):
    return 1.0 if design == "online" and M * N * e <= l2 else frac_right(design, M, N, e, l2)


def frac_never_fits(design, M, N, e, l2):
    return 1.0 if design == "split_coop" else 2 / 3


def frac_always_fits(design, M, N, e, l2):
    return 1.0 if design != "online" else 2 / 3


def frac_no_element_size(design, M, N, e, l2):
    return 1.0 if design == "split_coop" or (design == "split" and M * N <= l2) else 2 / 3


def frac_with_statistics(design, M, N, e, l2):  # counts 8 bytes of statistics per row as well
    return 2 * M * N * e / (2 * M * N * e / frac_right(design, M, N, e, l2) + 8 * M)


@pytest.mark.parametrize(
    "attempt,hint",
    [
        (frac_always_three_passes, "x fits in L2 here, so the second read is free"),
        (frac_never_fits, "x fits in L2 here"),
        (frac_strict, "exactly full counts as fitting"),
        (frac_bytes, "at most 1"),
        (frac_inverse, "at most 1"),
        (frac_coop_three, "the cooperative kernel reads x once"),
        (frac_online_cached, "both of the online kernel's passes"),
        (frac_always_fits, "x does not fit in L2 here, so the second read comes from DRAM"),
        (frac_no_element_size, "x's bytes are M * N * element_size"),
        (frac_with_statistics, "without the statistics"),
        (lambda *a: "lots", "return a number"),
    ],
)
def test_checker_6_3_wrong_answers(capsys, attempt, hint):
    line = _run(capsys, lesson06_exercises.check_6_3, attempt)
    assert line.startswith("Exercise 6.3 (the L2 model's prediction): wrong: "), line
    assert hint in line, line
    said = re.search(r"you said (\S+), expected (\S+):", line)
    assert said is None or said.group(1) != said.group(2), line  # never "you said 1, expected 1"


def test_answers_match_the_solutions():
    stats = torch.tensor([[[1.0, 2.0], [-math.inf, 0.0]], [[-math.inf, 0.0], [-math.inf, 0.0]]], dtype=torch.float64)
    m, d = combine_any_leading_dims(stats)
    assert m.tolist() == [1.0, -math.inf] and d.tolist() == [2.0, 0.0]
    for design in ("online", "split", "split_coop"):
        for M in (8, 64, 1024):
            assert frac_right(design, M, 2**18, 4, 50 * 2**20) == pytest.approx(
                lesson06.predicted_frac_answer(design, M, 2**18, 4, 50 * 2**20)
            )


def test_notebook_solutions_pass_their_checkers(capsys, tmp_path):
    """The code inside each exercise's solution cell, run as a learner would paste it, is judged correct."""
    import json
    import re
    from pathlib import Path

    nb = json.loads((Path(__file__).resolve().parent.parent / "notebooks" / "06_split_rows.ipynb").read_text())
    sols = ["".join(c["source"]) for c in nb["cells"] if "solution" in c.get("metadata", {}).get("tags", [])]
    assert len(sols) == 3
    checks = {
        "split_stats_kernel": lesson06_exercises.check_6_1,
        "combine": lesson06_exercises.check_6_2,
        "predicted_frac": lesson06_exercises.check_6_3,
    }
    for sol in sols:
        code = re.search(r"```python\n(.*?)```", sol, re.S).group(1)
        name = re.search(r"^def (\w+)", code, re.M).group(1)
        header = "import torch\nimport triton\nimport triton.language as tl\n\n"
        mod = module_from(header + code, f"lesson06_solution_{name}", tmp_path)
        line = _run(capsys, checks[name], getattr(mod, name))
        assert "): correct" in line, line


def test_no_answer_on_screen_before_its_solution():
    """Exercise 6.1's checker is followed by its (collapsed) solution; the library's statistics kernel,
    which is that solution, appears only after exercise 6.2's solution, and the second launch's merge
    (6.2's answer in Triton) after it too; the model's predictions only after 6.3's solution."""
    import json
    from pathlib import Path

    cells = json.loads((Path(__file__).resolve().parent.parent / "notebooks" / "06_split_rows.ipynb").read_text())[
        "cells"
    ]
    src = ["".join(c["source"]) for c in cells]
    at = lambda phrase: next(i for i, s in enumerate(src) if phrase in s)
    sol = [i for i, c in enumerate(cells) if "solution" in c.get("metadata", {}).get("tags", [])]
    assert at("lesson06_exercises.check_6_1(") + 1 == sol[0] and at("lesson06_exercises.check_6_2(") + 1 == sol[1]
    assert at("def softmax_split_stats_kernel(") > sol[1]
    assert at("def softmax_split_normalize_kernel(") > sol[1]
    assert at("lesson06_exercises.check_6_3(") + 1 == sol[2] and at("lesson06.predicted_frac_answer(") > sol[2]
    # nothing between a checker and its solution prints code
    for i in range(at("lesson06_exercises.check_6_1("), sol[0]):
        assert "show_source" not in src[i]


def test_bench_rows_measures_the_fused_kernel_only_where_the_lesson_shows_it(monkeypatch):
    """The live benchmark times the lesson's providers everywhere, the fused kernel at float32's long shapes only."""
    calls = []
    monkeypatch.setattr(lesson06, "require_gpu", lambda what: None)
    monkeypatch.setattr(
        lesson06, "measure_shape", lambda M, N, dtype, provs, host: calls.append((dtype, M, N, list(provs))) or []
    )
    assert lesson06.bench_rows() == []
    assert len(calls) == 2 * len(lesson06.LONG_SHAPES + (lesson06.HELD_OUT,))
    for dtype, M, N, names in calls:
        assert set(lesson06.PROVIDERS) <= set(names)
        assert ("fused" in names) == (dtype == torch.float32 and (M, N) in lesson06.LONG_SHAPES)


#: The first lines of the lesson's cells that load or measure data and derive from it (no kernels).
DATA_CELLS = (
    "import helpers  # first",
    "if helpers.ON_GPU:  # your GPU, live",
    "bench = data.frame",
    "M, N, slice_len = 8",
    "l2 = data.frame",
    "fits = gpu_time.index",
    "plot_l2_model(l2, l2_bytes)",
    "result = by_shape",
)


def test_live_cells_survive_a_missing_provider(monkeypatch, capsys):
    """On a GPU the data cells build their tables from live rows: a provider the GPU lacks (no
    torch.softmax here) or one that failed (the cooperative kernel, NaN timings) leaves empty columns,
    never an error."""
    import matplotlib.pyplot as plt

    from helpers import data, measure

    bench = data.load("bench", gpu="h100")
    l2 = data.load("split_l2")
    timings = ["ms", "graph_ms", "gbps", "graph_gbps", "frac_of_copy", "graph_frac", "spread", "graph_spread"]
    l2.loc[l2.provider == "split_coop", timings] = math.nan
    l2.loc[l2.provider == "split_coop", "status"] = "failed: RuntimeError: cooperative launch refused"
    monkeypatch.setattr(helpers, "ON_GPU", True)
    monkeypatch.setattr(measure, "device_facts", lambda: data.load("device_props").iloc[0].to_dict())
    monkeypatch.setattr(lesson06, "bench_rows", lambda: bench[bench.provider != "torch_softmax"].to_dict("records"))
    monkeypatch.setattr(lesson06, "l2_rows", lambda: l2.to_dict("records"))
    ns = {}
    try:
        for phrase in DATA_CELLS:  # as a notebook runs a cell: its last expression is displayed
            tree = ast.parse(code_cell_with("06", phrase))
            last = tree.body.pop() if isinstance(tree.body[-1], ast.Expr) else None
            exec(compile(tree, phrase, "exec"), ns)
            if last is not None:
                print(eval(compile(ast.Expression(last.value), phrase, "eval"), ns))
    finally:
        plt.close("all")
    out = capsys.readouterr().out
    assert "this run:" in out and re.search(r"L2 cache, shared by all SMs \(MiB\) +50", out), out[:1500]
    assert ns["result"]["torch_softmax"].isna().all() and ns["result"]["split"].notna().all()
    assert ns["gpu_time"]["split_coop"].isna().all() and ns["gpu_time"]["split"].notna().all()
    assert (
        list(ns["one_per_row"].columns) == ["fused", "online", "torch_softmax"]
        and ns["one_per_row"].torch_softmax.isna().all()
    )
