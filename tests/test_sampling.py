"""helpers.kernels.sampling (lesson 09): softmax_topk against float64 torch, sample's filters,
reproducibility and distribution, and the errors the API promises. Inputs stay small: under the
interpreter every program runs in Python."""

from __future__ import annotations

import functools

import pytest
import torch

import helpers  # noqa: F401  (first: interpreter or GPU)
from helpers import lesson09
from helpers.kernels import sampling, sampling_step, topk_lanes, topk_program
from helpers.kernels.sampling import sample, softmax_topk
from helpers.mode import DEVICE

INF = float("-inf")


def _compiled_merge(monkeypatch):
    """The GPU's merge (SORT: tl.topk), interpreted: the launches of both designs read SORT when they are made."""
    monkeypatch.setattr(topk_program, "SORT", True)
    monkeypatch.setattr(topk_lanes, "SORT", True)


@pytest.fixture(autouse=True)
def fresh_calls():
    """Many tests patch the module (its plans, SORT, its kernels): no ready function made before the patch may
    serve them, nor one made under it serve a later test."""
    sampling._CALLS.clear()
    yield
    sampling._CALLS.clear()


def _rand(*shape, seed=0, scale=3.0, dtype=torch.float32):
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale).to(dtype).to(DEVICE)


def _check(x, k, tol=1e-6, fn=softmax_topk):
    before = x.clone()
    values, indices = fn(x, k)
    assert torch.equal(x, before)  # never modified
    assert values.shape == indices.shape == tuple(x.shape[:-1]) + (k,)
    assert values.dtype == x.dtype and indices.dtype == torch.int64
    p = torch.softmax(x.double(), -1)
    want = p.topk(k).values
    nan = torch.isnan(want)
    assert torch.equal(torch.isnan(values), nan)
    v, w = values.double()[~nan], want[~nan]
    assert torch.allclose(v, w, atol=tol, rtol=tol)
    # ties may pick either column: the indices must point at the right probabilities, each once
    assert torch.allclose(p.gather(-1, indices)[~nan], w, atol=tol, rtol=tol)
    assert all(len(set(r)) == k for r in indices.reshape(-1, k).tolist())
    return values, indices


@pytest.mark.parametrize("M, N, k", [(3, 37, 5), (2, 300, 1), (2, 300, 50), (1, 45, 45), (4, 17, 17)])
def test_softmax_topk_irregular_rows(M, N, k):
    _check(_rand(M, N, seed=N), k)


def test_softmax_topk_with_minus_inf_and_a_row_of_only_minus_inf():
    x = _rand(4, 130, seed=1)
    x[0, :100] = INF
    x[1, ::2] = INF
    x[2] = INF
    x[3, 7] = 50.0
    values, _ = _check(x, 20)
    assert torch.isnan(values[2]).all() and not torch.isnan(values[:2]).any()
    assert values[0, 19] > 0 and values[1, 19] > 0  # 30 and 65 finite entries: no -inf among the top 20


def test_softmax_topk_k_larger_than_the_finite_entries():
    x = _rand(1, 12, seed=2)
    x[0, 3:] = INF
    values, indices = _check(x, 6)
    assert sorted(indices[0, :3].tolist()) == [0, 1, 2] and (values[0, 3:] == 0).all()


def test_softmax_topk_slices_of_a_long_row_merge():
    plan = topk_program.topk_plan(1, 3000, 64)
    assert plan["slices"] > 1  # the merge kernel combines several slices' states
    x = _rand(1, 3000, seed=3)
    x[0, 1024:2048] = INF  # a slice of only -inf: the identity
    _check(x, 50)
    _check(_rand(2, 2500, seed=4), 7)


def test_softmax_topk_leading_dimensions_and_non_contiguous_rows():
    _check(_rand(2, 3, 45, seed=5), 9)
    _check(_rand(40, 3, seed=6).t(), 4)  # rows are columns in memory
    _check(_rand(3, 80, seed=7)[:, ::2], 6)  # a column stride of 2
    _check(_rand(3, 4, 30, seed=8).transpose(0, 1), 3)  # leading dimensions that do not merge


def test_softmax_topk_ties_pick_tied_columns():
    x = torch.tensor([[1.0, 2.0, 2.0, 0.5, 2.0, -1.0, 2.0]], device=DEVICE)
    _, indices = _check(x, 3)
    assert set(indices[0].tolist()) <= {1, 2, 4, 6}


@pytest.mark.parametrize("dtype, tol", [(torch.bfloat16, 1e-2), (torch.float16, 1e-3)])
def test_softmax_topk_half_precision_inputs(dtype, tol):
    _check(_rand(2, 100, seed=9, dtype=dtype), 7, tol=tol)


def test_softmax_topk_compiled_merge_path_under_the_interpreter(monkeypatch):
    """The GPU's merge (tl.topk) gives the same answer as the interpreter's rank-by-counting."""
    _compiled_merge(monkeypatch)
    x = _rand(2, 40, seed=10)
    x[0, :30] = INF
    for fn in (sampling.topk_per_program, sampling.topk_by_lanes):
        _check(x, 4, fn=fn)


@pytest.fixture
def small_lanes(monkeypatch):
    """Lanes of 64 columns and 4 programs a launch (as on the CPU, also on a GPU), so that a short row
    gives each lane many logits (rows of 2000: 16 a lane)."""
    monkeypatch.setattr(topk_lanes, "LANE_BLOCK", 64)
    monkeypatch.setattr(topk_lanes, "lane_plan", functools.partial(topk_lanes.lane_plan, target_programs=4))
    assert topk_lanes.lane_plan(2, 2000, 4)["slice_len"] // 64 == 16


def lane_columns(lane, n_cols, chunk=4, block=64):
    """The columns lane `lane` of the first slice reads: its chunk of each step of block * chunk columns."""
    return [col for col in range(n_cols) if (col % (block * chunk)) // chunk == lane]


def test_lanes_all_of_the_top_k_in_one_lane(small_lanes):
    x = _rand(2, 2000, seed=20)
    lane5 = lane_columns(5, 1024)  # in the first slice (1024 columns: 4 steps of 64 lanes x 4)
    x[0, lane5] = 100 + torch.arange(len(lane5), dtype=torch.float32, device=DEVICE)  # 16 logits, 4 chunks
    lane7 = [1024 + col for col in lane_columns(7, 2000 - 1024)]  # tied, in one lane of the second slice
    x[1, lane7] = 100.0
    _, indices = _check(x, 20, fn=sampling.topk_by_lanes)
    assert set(indices[0, :16].tolist()) == set(lane5)
    assert set(indices[1, : len(lane7)].tolist()) == set(lane7)


def test_lanes_top_k_inside_one_chunk_of_a_clean_lane(small_lanes):
    """Four of the top four in one chunk: its lane is clean (nothing large outside that chunk), so they are
    found only because the merge reads the kept lanes' whole chunks, not their maxima alone."""
    x = _rand(2, 2000, seed=29)
    x[0, 20:24] = torch.tensor([40.0, 41.0, 42.0, 43.0], device=DEVICE)  # lane 5's first chunk
    x[1, 1024 + 36 : 1024 + 40] = torch.tensor([30.0, 30.0, 29.0, 31.0], device=DEVICE)  # one chunk, a tie
    _, indices = _check(x, 4, fn=sampling.topk_by_lanes)
    assert set(indices[0].tolist()) == set(range(20, 24)) and set(indices[1].tolist()) == set(range(1060, 1064))
    xb = x.to(torch.bfloat16)  # chunks of 8 in bfloat16
    _, indices = _check(xb, 4, tol=1e-2, fn=sampling.topk_by_lanes)
    assert set(indices[0].tolist()) == set(range(20, 24))


def test_lanes_every_value_tied_and_minus_inf_rows(small_lanes):
    x = torch.ones(4, 2000, device=DEVICE)  # row 0: all tied (every lane unclean: the whole row is streamed)
    x[1] = _rand(2000, seed=21)
    x[1, ::2] = INF  # row 1: half -inf
    x[2] = INF  # row 2: only -inf (NaN, as torch.softmax)
    x[3] = INF
    x[3, 100:105] = 1.0  # row 3: fewer finite logits than k
    values, indices = _check(x, 10, fn=sampling.topk_by_lanes)
    assert torch.isnan(values[2]).all() and torch.allclose(values[0], torch.full_like(values[0], 1 / 2000))
    assert set(indices[3, :5].tolist()) == set(range(100, 105)) and (values[3, 5:] == 0).all()
    few = torch.full((2, 2000), INF, device=DEVICE)  # 128 lanes a row: the search runs, the buffer holds them
    few[0, 100:105] = 1.0
    few[1, [7, 500, 1500]] = torch.tensor([2.0, 3.0, 1.0], device=DEVICE)
    assert topk_lanes.lane_plan(2, 2000, 4)["lanes_p2"] == 128
    values, indices = _check(few, 10, fn=sampling.topk_by_lanes)
    assert set(indices[1, :3].tolist()) == {7, 500, 1500} and (values[:, 5:] == 0).all()
    xb = _rand(3, 2000, seed=22, dtype=torch.bfloat16).round()  # bfloat16 with many ties
    _check(xb, 50, tol=1e-2, fn=sampling.topk_by_lanes)


def test_lanes_search_that_stops_early_keeps_only_real_lanes():
    """Rows shorter than one step: 10 real lanes of 16 (chunks of 4). No more lanes than where the search for
    T stops (half the candidate buffer, 64), so it stops before its first count (T is the lowest value) and
    must not take the 6 padding lanes (a logit 0.0 at column 0 each) for candidates: every logit is negative."""
    x = -1 - _rand(3, 40, seed=26).abs()
    assert topk_lanes.lane_plan(*x.shape, 4)["lanes_p2"] == 16
    for k in (1, 40):
        _check(x, k, fn=sampling.topk_by_lanes)


def test_lanes_whole_row_fallback_is_sorted_on_the_compiled_path(monkeypatch, small_lanes):
    """More candidates than the buffer holds (large logits in 48 of every 64 lanes, each in all of its
    chunks, so dozens of unclean lanes) send the row through the per-block merge. Its compiled branch (SORT: tl.topk for a block with
    many winners, the winners loop for a few, both interpreted here) keeps its candidates in no order once
    the last block's three winners replace the weakest: they must be sorted before they are stored."""
    _compiled_merge(monkeypatch)
    x = _rand(2, 2000, seed=20)
    cols = torch.arange(2000, device=DEVICE)
    big = cols % 256 < 48 * 4  # lanes 0-47 of each step of 64 lanes x 4 columns
    x[:, big] = 100 - cols[big] / 100  # decreasing: later blocks have no winner
    x[:, 1990:1993] = torch.tensor([200.0, 201.0, 202.0], device=DEVICE)  # but the last block has three
    _check(x, 20, fn=sampling.topk_by_lanes)


def test_lanes_more_unclean_lanes_than_one_gather_takes(small_lanes):
    """Rows of 8000 in the small plan: 2 slices of 64 lanes, 64 logits a lane, so the merge gathers the unclean
    lanes 32 at a time (a tile of 2048 logits). 40 lanes hold two large logits each, in different chunks:
    all 40 are unclean, read in two gathers, the second of 8 live lanes."""
    plan = topk_lanes.lane_plan(2, 8000, 4)
    assert (
        plan["slices"] == 2 and plan["slice_len"] // 64 == 64
    )  # uw = 64 logits a lane: 2048 // 64 = 32 lanes a gather
    x = _rand(2, 8000, seed=30)
    for lane in range(40):
        x[0, lane * 4] = 100.0 + 2 * lane  # the lane's maximum, in its chunk of step 0
        x[0, 256 + lane * 4 + 1] = 99.0 + 2 * lane  # its second, in its chunk of step 1
    _, indices = _check(x, 33, fn=sampling.topk_by_lanes)
    assert set(indices[0].tolist()) <= {lane * 4 for lane in range(40)} | {256 + lane * 4 + 1 for lane in range(40)}


def test_lane_plan_slices_a_power_of_two():
    """The merge kernel holds slices * block lanes as a power of two: at 256 rows on an H100 (1056 programs
    wanted) 5 slices become 4, so 1024 lanes, not 1280 padded to 2048; 200 rows: 6 slices become 8 (4 would
    leave fewer than 3/4 of the programs)."""
    for n_cols, chunk in [(32000, 8), (128256, 8), (256000, 8), (128256, 4), (256000, 4)]:
        plan = topk_lanes.lane_plan(256, n_cols, chunk, target_programs=1056)
        assert plan["slices"] * plan["block"] == plan["lanes_p2"] == 1024
        assert topk_lanes.lane_plan(64, n_cols, chunk, target_programs=1056)["slices"] == 16
    assert topk_lanes.lane_plan(200, 256000, 4, target_programs=1056)["slices"] == 8
    assert topk_lanes.lane_plan(128, 256000, 4, target_programs=1056)["slices"] == 8


@pytest.mark.parametrize("k", [1, 2, 50, 64])
def test_lanes_irregular_and_strided_rows(small_lanes, k):
    _check(_rand(3, 1999, seed=23 + k), k, fn=sampling.topk_by_lanes)  # not a multiple of the lanes
    _check(_rand(2000, 2, seed=24).t(), k, fn=sampling.topk_by_lanes)  # rows are columns in memory
    _check(_rand(2, 4000, seed=25)[:, ::2], k, fn=sampling.topk_by_lanes)


def test_lanes_refuse_a_k_they_do_not_keep_and_softmax_topk_dispatches():
    with pytest.raises(ValueError, match="lane kernels keep k <= 64"):
        sampling.topk_by_lanes(_rand(1, 300), 65)
    assert topk_lanes.use_lanes(256, 256000, 64) and not topk_lanes.use_lanes(256, 256000, 128)
    _check(_rand(2, 1500, seed=26), 1024)  # K = 1024: the per-program kernels (interpreted: torch)
    _check(_rand(2, 1500, seed=26), 200)  # K = 256: the per-program kernels
    _check(_rand(2, 300, seed=27), 65)


def test_softmax_topk_large_k_goes_to_torch():
    _check(_rand(1, 1100, seed=11), 1025)


def test_softmax_topk_rejects_bad_input():
    x = _rand(2, 10)
    for k in (0, 11, -1):
        with pytest.raises(ValueError, match="k must be between 1"):
            softmax_topk(x, k)
    for k in (2.0, True, "3"):
        with pytest.raises(ValueError, match="k must be an integer"):
            softmax_topk(x, k)
    with pytest.raises(TypeError):
        softmax_topk(torch.ones(2, 10, dtype=torch.int64, device=DEVICE), 2)
    with pytest.raises(TypeError):
        softmax_topk(x.double(), 2)


def test_sample_rejects_bad_input():
    x = _rand(2, 10)
    for kw in ({"temperature": -0.1}, {"top_k": 0}, {"top_k": 2.5}, {"top_p": 0.0}, {"top_p": 1.5}, {"top_p": -0.2}):
        with pytest.raises(ValueError):
            sample(x, **kw)
    with pytest.raises(TypeError):
        sample(torch.ones(2, 10, dtype=torch.int32, device=DEVICE))


def test_sample_shapes_seeds_and_greedy():
    x = _rand(2, 3, 200, seed=12)
    before = x.clone()
    a = sample(x, temperature=0.8, top_k=20, top_p=0.9, generator=torch.Generator(device=DEVICE).manual_seed(5))
    b = sample(x, temperature=0.8, top_k=20, top_p=0.9, generator=torch.Generator(device=DEVICE).manual_seed(5))
    assert a.shape == (2, 3) and a.dtype == torch.int64 and torch.equal(a, b) and torch.equal(x, before)
    g1, g2 = (sample(x, generator=torch.Generator(device=DEVICE).manual_seed(9)) for _ in range(2))
    assert torch.equal(g1, g2)  # Gumbel-max: the seed is drawn from the generator too
    assert torch.equal(sample(x, temperature=0), x.argmax(-1))
    assert torch.equal(sample(x, top_k=1), x.argmax(-1))
    assert torch.equal(sample(x, top_p=1e-6), x.argmax(-1))  # the top token always stays
    # only top-k tokens are ever drawn
    ids = sample(x, top_k=3, generator=torch.Generator(device=DEVICE).manual_seed(1))
    assert (x.topk(3).indices == ids[..., None]).any(-1).all()


def test_sample_top_p_beyond_the_candidates_falls_back_exactly():
    x = torch.linspace(0, 0.01, 3000, device=DEVICE).expand(3, 3000)  # nearly flat: a nucleus of ~1500 tokens
    ids = sample(x, top_p=0.5, generator=torch.Generator(device=DEVICE).manual_seed(0))
    assert ids.shape == (3,) and (ids >= 1490).all()  # the larger half of the logits


def test_the_kernel_draw_equals_the_sorted_draw_for_the_same_uniform():
    """sample's inverse CDF over the candidates picks what a full sort (sample_torch) picks for the same u."""
    x = _rand(6, 300, seed=13)
    for top_k, top_p in ((5, 0.9), (40, None), (None, 0.7)):
        got = sample(
            x, temperature=0.8, top_k=top_k, top_p=top_p, generator=torch.Generator(device=DEVICE).manual_seed(3)
        )
        u = torch.rand((6,), generator=torch.Generator(device=DEVICE).manual_seed(3), device=DEVICE)
        assert torch.equal(got, sampling.sample_torch(x, 0.8, top_k, 1.0 if top_p is None else top_p, u)), (
            top_k,
            top_p,
        )


def test_sample_through_the_lanes_equals_the_sorted_draw(monkeypatch, small_lanes):
    """sample with a top_k through the lane kernels (temperature folded into their exp2) picks what a full
    sort picks for the same u; greedy through them is the argmax."""
    monkeypatch.setattr(topk_lanes, "LANE_MIN_ELEMENTS", 0)
    x = _rand(4, 2000, seed=28)
    x[1, lane_columns(3, 2000)] += 6.0  # many of the top 40 in one lane (its 4 columns of each step)
    assert topk_lanes.use_lanes(4, 2000, 64)
    for top_k, top_p, temperature in ((5, 0.9, 0.8), (40, None, 1.3), (64, 0.5, 0.7)):
        gen = lambda: torch.Generator(device=DEVICE).manual_seed(6)  # noqa: E731
        got = sample(x, temperature=temperature, top_k=top_k, top_p=top_p, generator=gen())
        u = torch.rand((4,), generator=gen(), device=DEVICE)
        want = sampling.sample_torch(x, temperature, top_k, 1.0 if top_p is None else top_p, u)
        assert torch.equal(got, want), (top_k, top_p)
    assert torch.equal(sample(x, temperature=0), x.argmax(-1))


@pytest.mark.parametrize("lanes", [False, True])
def test_sample_takes_temperature_and_top_p_with_each_call(monkeypatch, small_lanes, lanes):
    """A decoding loop may change the temperature and top_p on every call: they go to the kernels with each call,
    so one ready function serves them all (no new entry), and every draw is the sorted draw of its own settings
    for the same u (a value kept from the first call would pick the first call's tokens)."""
    if lanes:
        monkeypatch.setattr(topk_lanes, "LANE_MIN_ELEMENTS", 0)
    x = _rand(16, 2000, seed=29, scale=1.0)
    settings = ((0.5, 0.9), (3.0, 0.95), (0.05, 0.5), (1.7, 0.3))
    for top_k in (40, None):
        sampling._CALLS.clear()
        drawn = []
        for temperature, top_p in settings:
            gen = lambda: torch.Generator(device=DEVICE).manual_seed(8)  # noqa: E731
            got = sample(x, temperature=temperature, top_k=top_k, top_p=top_p, generator=gen())
            u = torch.rand((16,), generator=gen(), device=DEVICE)
            want = sampling.sample_torch(x, temperature, top_k, top_p, u)
            assert torch.equal(got, want), (top_k, temperature, top_p)
            drawn.append(got)
        assert len(sampling._CALLS) == 1
        assert all(not torch.equal(drawn[0], d) for d in drawn[1:])  # the settings change the tokens


@pytest.mark.parametrize("lanes", [False, True])
def test_the_direct_path_passes_each_calls_scalars(monkeypatch, small_lanes, lanes):
    """On a GPU a ready function calls each compiled kernel's launcher with raw pointers, and those launches that
    name scalars get them bound to the call's temperature and top_p (bound again only when they change). Checked
    on any machine with a recording launcher in place of the compiled one."""
    from helpers import launch

    calls, binds = [], []

    def recording_compile(L, tensors):  # (launcher, grid, the arguments after the pointers)
        n = len(L.ptrs)
        return (lambda gx, gy, gz, stream, *a: calls.append((L.kernel.__name__, a[n:]))), (1, 1, 1), tuple(L.args)

    bind = launch._bind
    monkeypatch.setattr(launch, "_bind", lambda args, scalars: binds.append(scalars) or bind(args, scalars))
    monkeypatch.setattr(launch, "direct_path", lambda x: True)
    monkeypatch.setattr(launch, "_compile", recording_compile)
    monkeypatch.setattr(launch.compat, "raw_stream", lambda index: 0)
    x = _rand(4, 2000, seed=50)
    monkeypatch.setattr(launch.compat, "current_device", lambda: x.get_device())  # -1 on a CPU: no device to enter
    if lanes:
        monkeypatch.setattr(topk_lanes, "LANE_MIN_ELEMENTS", 0)
    bound = []
    for temperature, top_p in ((0.5, 0.9), (0.5, 0.9), (2.0, 0.3)):
        calls.clear(), binds.clear()
        sample(x, temperature=temperature, top_k=20, top_p=top_p)
        (slice_name, slice_args), (merge_name, merge_args) = calls[-2:]  # the call's two launches
        assert slice_name.endswith("slice_kernel") and merge_name.endswith("merge_kernel")
        scale = 1 / temperature
        assert slice_args[-1] == pytest.approx(scale * (sampling_step.LOG2E if lanes else 1.0))
        assert merge_args[merge_args.index(20) - 1] == pytest.approx(scale)  # ..., scale, k, top_p, ...
        assert merge_args[merge_args.index(20) + 1] == pytest.approx(sampling_step.nucleus_bound(top_p), abs=1e-9)
        bound.append(sum(s is not None and s.get("scale") == scale for s in binds))
    assert bound[0] >= 2 and bound[1] == 0 and bound[2] >= 2  # the same values as the last call: not bound again
    assert len(sampling._CALLS) == 1
    calls.clear()
    softmax_topk(x, 20)  # the softmax itself: its scalars fixed (temperature 1) when its ready function is made
    assert len(calls) == 4  # the launches on the examples, then the call's
    for name, args in calls:
        assert all(not isinstance(a, str) for a in args) and 1.0 in args, (name, args)


@pytest.mark.parametrize("n_cols", [300, 2000])
def test_sample_at_extreme_temperatures(monkeypatch, small_lanes, n_cols):
    """logits / temperature overflows float32 at tiny temperatures: the kernels scale differences x - m <= 0
    instead, and a temperature whose 1 / temperature is out of float32's comfort (below MIN_TEMPERATURE, above
    MAX_TEMPERATURE) goes to the float64 sort. Near 0 every setting is the argmax (once: ids at random); near
    infinity every finite logit is as likely and -inf never drawn."""
    monkeypatch.setattr(topk_lanes, "LANE_MIN_ELEMENTS", 0)  # rows of 2000: the lane kernels (with a top_k)
    x = _rand(4, n_cols, seed=31, scale=100.0)
    x[:, ::3] = INF
    for temperature, big in ((1e-3, 1), (1e-20, 1), (1e-30, 1e8), (1e-36, 1), (1e-44, 1)):
        for kw in ({}, {"top_k": 5}, {"top_p": 0.5}, {"top_k": 50, "top_p": 0.9}):  # big: x / 1e-30 is 1e40
            ids = sample(
                x * big, temperature=temperature, generator=torch.Generator(device=DEVICE).manual_seed(2), **kw
            )
            assert torch.equal(ids, x.argmax(-1)), (temperature, kw)
    rows = x[:1].expand(400, n_cols)
    for temperature in (1e25, 1e40):
        ids = sample(rows, temperature=temperature, generator=torch.Generator(device=DEVICE).manual_seed(2))
        assert (ids % 3 != 0).all() and ids.unique().numel() > 100, temperature  # 2/3 of the row, all alike


def _rows_without_a_softmax(n_cols):
    """Rows 1-4 have no softmax: a NaN logit, a +inf one, only -inf, and -inf with one NaN (so that a block or a
    lane sees only -inf and NaN); rows 0 and 5 are ordinary. Also the same rows with 1-4 made ordinary."""
    x = _rand(6, n_cols, seed=33)
    good = x.clone()
    x[1, n_cols // 3] = float("nan")
    x[2, n_cols // 2] = float("inf")
    x[3] = INF
    x[4, n_cols // 2 :] = INF
    x[4, n_cols - 5] = float("nan")
    return x, good


@pytest.mark.parametrize("lanes", [False, True])
def test_sample_gives_minus_one_for_a_row_without_a_softmax(monkeypatch, small_lanes, lanes):
    """A NaN logit, a +inf one or only -inf leave softmax undefined (torch.multinomial raises, after waiting for
    the GPU): every path of sample gives such a row -1, at every setting, and the other rows the ids they get
    when those rows are ordinary (the same uniforms). The float64 sort too (a top_k beyond the kernels, a
    temperature beyond their range), and greedy, whatever argmax would say of a NaN or an inf."""
    if lanes:
        monkeypatch.setattr(topk_lanes, "LANE_MIN_ELEMENTS", 0)
    n_cols = 2000
    x, good = _rows_without_a_softmax(n_cols)
    before = x.clone()
    settings = [
        dict(temperature=0),
        dict(),
        dict(top_k=40),
        dict(top_p=0.8),
        dict(top_k=50, top_p=0.9),
        dict(top_k=sampling_step.MAX_K + 1),
        dict(temperature=1e-40, top_k=5),
        dict(temperature=1e40),
    ]
    for kw in settings:
        gen = lambda: torch.Generator(device=DEVICE).manual_seed(12)  # noqa: E731
        got = sample(x, generator=gen(), **kw)
        want = sample(good, generator=gen(), **kw)
        assert got[1:5].tolist() == [-1] * 4, kw
        assert torch.equal(got[[0, 5]], want[[0, 5]]) and (want >= 0).all(), kw
    assert torch.equal(x.nan_to_num(), before.nan_to_num())  # never modified
    values, _ = softmax_topk(x, 3)  # softmax_topk: NaN probabilities, as torch.softmax gives
    assert values[1:5].isnan().all() and not values[[0, 5]].isnan().any()


def test_a_slice_of_only_minus_inf_and_nan_still_marks_its_row():
    """The per-program kernels: a slice whose logits are -inf and one NaN has no maximum above -inf if the NaN is
    skipped, as a GPU's tl.max skips it (the interpreter's keeps it: there this cannot fail), yet the slice's pair
    must carry the NaN, and so the row's: its id is -1."""
    x = _rand(2, 4096, seed=34)
    x[0, 2048:] = INF
    x[0, 4000] = float("nan")
    plan = topk_program.topk_plan(1, 4096, 8)
    S = plan["slices"]
    assert S >= 2 and plan["slice_len"] <= 2048  # the last slice: -inf and the NaN only
    stats = torch.zeros(S, 2, device=DEVICE)
    keys = torch.zeros(S, 8, dtype=torch.int64, device=DEVICE)
    topk_program.topk_slice_kernel[(1, S)](
        stats,
        keys,
        x[0],
        stats,
        4096,
        1,
        4096,
        plan["slice_len"],
        S,
        1.0,
        K=8,
        BLOCK=plan["block"],
        GUMBEL=False,
        SORT=sampling_step.SORT,
    )
    assert stats[-1].isnan().any() and not stats[0].isnan().any()
    for kw in (dict(temperature=0), dict(), dict(top_k=5)):
        ids = sample(x, generator=torch.Generator(device=DEVICE).manual_seed(1), **kw)
        assert ids[0] == -1 and ids[1] >= 0, kw


def test_sample_distribution_matches_the_exact_probabilities():
    """Chi-square of the counts against float64, every setting, fixed seeds (cannot flake)."""
    freq = lesson09.frequency_check(draws=300)
    assert freq["agrees"].all(), freq.to_string()
    assert (freq["draws outside"] == 0).all()


def test_sample_compiled_merge_path_under_the_interpreter(monkeypatch):
    """The GPU's merge (tl.topk) draws the same tokens as the interpreter's, for the same generator."""
    x = _rand(3, 40, seed=14)
    gen = lambda: torch.Generator(device=DEVICE).manual_seed(4)  # noqa: E731
    want = [sample(x, top_k=3, top_p=0.8, generator=gen()), sample(x, temperature=0.9, generator=gen())]
    _compiled_merge(monkeypatch)
    got = [sample(x, top_k=3, top_p=0.8, generator=gen()), sample(x, temperature=0.9, generator=gen())]
    assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_compiled_merge_many_and_few_winners(monkeypatch):
    """The GPU's merge with blocks of 64: the first block of a slice has many winners (tl.topk), later
    ones a few (moved one at a time); both must keep the same top k as float64 torch."""
    _compiled_merge(monkeypatch)

    def plan(n_rows, n_cols, K, target_programs=None):
        slice_len = 256
        slices = -(-n_cols // slice_len)
        return {
            "block": 64,
            "slices": slices,
            "slice_len": slice_len,
            "slices_p2": 1 << (slices - 1).bit_length(),
            "warps": 4,
        }

    monkeypatch.setattr(topk_program, "topk_plan", plan)
    monkeypatch.setattr(sampling, "use_lanes", lambda *args: False)
    x = _rand(2, 500, seed=15)
    x[1, 300:] += 4.0  # later blocks full of winners again: the bitonic path after the loop path
    _check(x, 4)
    ids = sample(x, top_k=6, top_p=0.9, generator=torch.Generator(device=DEVICE).manual_seed(2))
    assert (x.topk(6).indices == ids[:, None]).any(-1).all()


def test_numpy_integers_and_reals_are_accepted():
    import numpy as np

    x = _rand(2, 30, seed=16)
    v, i = softmax_topk(x, np.int64(3))
    assert v.shape == (2, 3)
    ids = sample(
        x,
        temperature=np.float32(0.5),
        top_k=np.int32(4),
        top_p=np.float64(0.9),
        generator=torch.Generator(device=DEVICE).manual_seed(0),
    )
    assert (x.topk(4).indices == ids[:, None]).any(-1).all()


class _LaunchSpy:
    """Stands in for a kernel: records the K of each launch, then launches the real kernel."""

    def __init__(self, kernel, seen):
        self.kernel, self.seen = kernel, seen

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.seen.append(kwargs["K"])
            return self.kernel[grid](*args, **kwargs)

        return launch


def test_no_launch_asks_tl_topk_for_fewer_than_two_lanes(monkeypatch):
    """Triton 3.6's compiled tl.topk fails for k = 1 ('dtype' object has no attribute 'numel'), which the
    interpreter does not show: every launch, greedy and Gumbel-max included, keeps K >= 2 lanes."""
    seen = []
    for name in ("topk_slice_kernel", "topk_merge_kernel", "lane_merge_kernel"):
        module = topk_lanes if name.startswith("lane") else topk_program  # where the launches read the kernel
        monkeypatch.setattr(module, name, _LaunchSpy(getattr(module, name), seen))
    x = _rand(2, 300, seed=17)
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    _check(x, 1)
    _check(x, 2)
    sample(x, temperature=0)
    sample(x, generator=gen)
    sample(x, top_k=1, generator=gen)
    sample(x, top_p=0.01, generator=gen)
    # 2 launches with K for each per-program call, 1 for each lane call (the slice kernel has no K)
    want = sum(2 - topk_lanes.use_lanes(2, 300, K) for K in (2, 2, 2, 2)) + 2 + 2  # + Gumbel-max, top_p alone
    assert len(seen) == want and min(seen) >= 2
    assert [sampling.candidate_lanes(k) for k in (1, 2, 3, 50, 1024)] == [2, 2, 4, 64, 1024]


COMPILE_FOR_SM90 = r"""
import torch
torch.cuda.is_available = lambda: True  # helpers decorates its kernels for compilation, as on a GPU
import helpers
from helpers.kernels import sampling, topk_lanes, topk_program
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

SLICE = {"stats_ptr": "*fp32", "keys_ptr": "*i64", "in_ptr": "*bf16", "seed_ptr": "*i32", "in_row_stride": "i32",
         "in_col_stride": "i32", "n_cols": "i32", "slice_len": "i32", "n_slices": "i32", "scale": "fp32"}
MERGE = {"out_ptr": "*fp32", "idx_ptr": "*i64", "stats_ptr": "*fp32", "keys_ptr": "*i64", "u_ptr": "*fp32",
         "n_slices": "i32", "scale": "fp32", "k": "i32", "top_p": "fp32"}
LANE_SLICE = {"stats_ptr": "*fp32", "lane_max_ptr": "*fp32", "lane_v2_ptr": "*fp32", "lane_col_ptr": "*i32", "in_ptr": "*bf16",
              "in_row_stride": "i32", "in_col_stride": "i32", "n_cols": "i32", "slice_len": "i32", "n_slices": "i32",
              "scale_log2e": "fp32"}
LANE_MERGE = {"out_ptr": "*fp32", "idx_ptr": "*i64", "stats_ptr": "*fp32", "lane_max_ptr": "*fp32", "lane_v2_ptr": "*fp32",
              "lane_col_ptr": "*i32", "buf_ptr": "*i64", "ubuf_ptr": "*i32", "in_ptr": "*bf16", "u_ptr": "*fp32",
              "in_row_stride": "i32", "in_col_stride": "i32", "n_cols": "i32", "slice_len": "i32", "n_slices": "i32",
              "scale_log2e": "fp32", "scale": "fp32", "k": "i32", "top_p": "fp32", "stop": "i32", "n_real": "i32"}
K = sampling.candidate_lanes(1)
plan = topk_lanes.lane_plan(1, 256000, 8, target_programs=1056)
assert plan["lanes_p2"] == 4096 and plan["merge_warps"] == 8
lanes = dict(BLOCK=plan["block"], SLICES=plan["slices_p2"], CHUNK=8, LANES=plan["lanes_p2"], CAP=128,
             UNCLEAN_CAP=topk_lanes.UNCLEAN_LANES, UNCLEAN_BATCH=32, UNCLEAN_WIDTH=64, RENORM=True, SORT=True, PDL=True)
for fn, sig, const, warps in [(topk_lanes.lane_slice_kernel, LANE_SLICE, dict(BLOCK=plan["block"], CHUNK=8, PDL=True, STAGES=3), plan["warps"]),
                              (topk_lanes.lane_merge_kernel, LANE_MERGE, dict(lanes, K=K, MODE=0), plan["merge_warps"]),
                              (topk_lanes.lane_merge_kernel, LANE_MERGE, dict(lanes, K=64, MODE=1), plan["merge_warps"])]:
    sig = dict(sig, **{name: "constexpr" for name in const})
    triton.compile(ASTSource(fn=fn, signature=sig, constexprs=const), target=GPUTarget("cuda", 90, 32),
                   options={"num_warps": warps})
    print("compiled", fn.__name__, const)
for fn, sig, const in [(topk_program.topk_slice_kernel, SLICE, dict(K=K, BLOCK=64, GUMBEL=True, SORT=True)),
                       (topk_program.topk_merge_kernel, MERGE, dict(K=K, SLICES=2, MODE=0, RENORM=True, SORT=True)),
                       (topk_program.topk_merge_kernel, MERGE, dict(K=4, SLICES=2, MODE=1, RENORM=False, SORT=True))]:
    sig = dict(sig, **{name: "constexpr" for name in const})
    triton.compile(ASTSource(fn=fn, signature=sig, constexprs=const), target=GPUTarget("cuda", 90, 32))
    print("compiled", fn.__name__, const)
"""


def test_the_gpu_path_compiles_for_an_h100():
    """The GPU's branches (SORT: tl.topk, the winners loop, Gumbel noise, the sampling step) and the lane
    kernels at the plan of one row of 256000 (4096 lanes a row: with 4 warps, Triton 3.9's LLVM crashes)
    compiled for sm_90 by the installed Triton, with no GPU: the interpreter never builds them. K = candidate_lanes(1)
    is the case Triton 3.6 could not build with one lane."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-c", COMPILE_FOR_SM90],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    assert done.returncode == 0 and done.stdout.count("compiled") == 6, done.stderr[-3000:]


def test_a_kind_of_call_is_planned_once(monkeypatch):
    """The checks, the plan and the launches are made on a kind of call's first call, then kept: later calls
    with the same dtype, shape, strides, device and settings reuse them, and get right answers on new data.
    Another k, other strides or another dtype is another kind; True is not the k 1, and a bad input never
    gets an entry, so it always reaches its clear error."""
    made = []
    for name in ("lane_launches", "per_program_launches"):
        real = getattr(sampling, name)
        monkeypatch.setattr(sampling, name, lambda *a, real=real, name=name, **kw: made.append(name) or real(*a, **kw))
    x = _rand(3, 300, seed=40)
    for seed in (41, 42):
        _check(_rand(3, 300, seed=seed), 5)
    assert made == ["per_program_launches"] and len(sampling._CALLS) == 1
    _check(x, 6)
    _check(_rand(3, 600, seed=43)[:, ::2], 5)  # the same shape, other strides
    _check(x.to(torch.bfloat16), 5, tol=1e-2)
    assert len(made) == 4 and len(sampling._CALLS) == 4
    _check(x, 1)
    with pytest.raises(ValueError, match="k must be an integer"):
        softmax_topk(x, True)
    with pytest.raises(ValueError, match="k must be between 1"):
        softmax_topk(x, 301)
    with pytest.raises(ValueError, match="temperature must be"):
        sample(x, temperature=-1.0)
    assert len(sampling._CALLS) == 5
    gen = lambda: torch.Generator(device=DEVICE).manual_seed(3)  # noqa: E731
    first = sample(x, temperature=0.7, top_k=20, top_p=0.9, generator=gen())
    again = sample(x, temperature=0.7, top_k=20, top_p=0.9, generator=gen())
    assert torch.equal(first, again) and len(sampling._CALLS) == 6  # the same seed, the same ids, one entry


def test_the_ready_function_launches_like_the_library_on_a_gpu():
    """On a GPU a ready function calls the compiled kernels' launchers directly (helpers.launch, lesson 05),
    with the same results as the JIT; under the interpreter it goes through kernel[grid](...)."""
    from helpers import launch

    x = _rand(4, 20000, seed=44, dtype=torch.bfloat16)  # 80000 logits: the lane kernels
    values, indices = _check(x, 50, tol=1e-2)
    (call,) = sampling._CALLS.values()
    where = "direct_run" if helpers.ON_GPU else "jit_run"
    assert call.__closure__ and any(getattr(c.cell_contents, "__name__", "") == where for c in call.__closure__)
    if helpers.ON_GPU:
        sampling._CALLS.clear()
        launch.DIRECT[0] = False
        try:
            v2, i2 = softmax_topk(x, 50)
        finally:
            launch.DIRECT[0] = True
        assert torch.equal(values, v2) and torch.equal(indices, i2)


@pytest.mark.parametrize("M, N", [(3, 2), (5, 3), (7, 6)])
def test_lanes_of_one_chunk_a_row(monkeypatch, M, N):
    """Rows of at most one chunk get one lane a row (block 1): with an odd number of rows the parts before the
    candidate buffer are an odd number of 4-byte words, and the buffer's int64s must still start on 8 bytes
    (once a RuntimeError: tall inputs such as 16001 x 2 float32 took the lane kernels and failed)."""
    monkeypatch.setattr(topk_lanes, "LANE_MIN_ELEMENTS", 0)
    assert topk_lanes.lane_plan(M, N, 4)["block"] == (1 if N <= 4 else 2)
    _check(_rand(M, N, seed=M * N), min(N, 2), fn=sampling.topk_by_lanes)
    _check(_rand(M, N, seed=M + N, dtype=torch.bfloat16), 1, tol=1e-2, fn=sampling.topk_by_lanes)
    ids = sample(_rand(M, N, seed=N), top_k=2, generator=torch.Generator(device=DEVICE).manual_seed(0))
    assert ids.shape == (M,) and ((0 <= ids) & (ids < N)).all()


# ---- One answer on every path: every top_k the API takes, the nucleus's boundary, ties ----------------------------


def _seeded(seed):
    return torch.Generator(device=DEVICE).manual_seed(seed)


def _kept_columns(x, k):
    """The k columns every path keeps: the largest logits, of equal ones the lower column first (a stable sort of
    the float64 logits, not the kernels' key)."""
    return torch.sort(x.double(), dim=-1, descending=True, stable=True).indices[..., :k]


@pytest.mark.parametrize("M, N, top_k", [(1, 4096, 300), (1, 32000, 257), (2, 8192, 600), (1, 2048, 1024)])
def test_sample_takes_every_top_k_up_to_max_k_on_the_kernels(M, N, top_k):
    """256 < top_k <= 1024 keeps K = 512 or 1024 candidates a program, interpreted too (once an InterpreterError:
    the merge compared more than 2^20 pairs of keys); the draw is the sorted draw's for the same uniform."""
    x = _rand(M, N, seed=top_k)
    got = sample(x, top_k=top_k, generator=_seeded(2))
    u = torch.rand((M,), generator=_seeded(2), device=DEVICE)
    assert torch.equal(got, sampling.sample_torch(x, 1.0, top_k, 1.0, u))
    values, indices = softmax_topk(x, top_k)
    assert torch.equal(indices, _kept_columns(x, top_k))


@pytest.mark.parametrize("path", ["per_program", "lanes", "sort"])
@pytest.mark.parametrize("top_k", [None, 4])
def test_the_nucleus_ends_where_the_mass_before_a_token_reaches_top_p(monkeypatch, small_lanes, path, top_k):
    """log([0.3, 0.1, 0.1, 0.5]) with top_p = 0.8: the mass before the third token is 0.5 + 0.3 = 0.8, not below
    top_p, so only columns 3 and 0 are drawn, as Hugging Face, vLLM and FlashInfer draw them (the kernels once took
    that mass as incl - q, 0.79999995 in float32, and drew a third token in about one draw of ten)."""
    x = torch.tensor([0.3, 0.1, 0.1, 0.5]).log().repeat(400, 1).to(DEVICE)
    if path == "sort":
        u = torch.rand((400,), generator=_seeded(0), device=DEVICE)
        ids = sampling.sample_torch(x, 1.0, top_k, 0.8, u)
    else:
        if path == "lanes":
            if top_k is None:
                pytest.skip("a nucleus without a top_k takes the per-program kernels")
            monkeypatch.setattr(topk_lanes, "LANE_MIN_ELEMENTS", 0)
        assert topk_lanes.use_lanes(400, 4, sampling.candidate_lanes(4)) == (path == "lanes")
        ids = sample(x, top_k=top_k, top_p=0.8, generator=_seeded(0))
    assert set(ids.tolist()) == {0, 3}


@pytest.mark.parametrize("lanes", [False, True])
def test_ties_keep_the_lower_columns_on_every_path(monkeypatch, small_lanes, lanes):
    """Equal logits: the kernels (k <= 1024) and the sorts (k > 1024, or a nucleus past the candidates) keep the
    lowest columns, exactly k of them (once the sorts kept an arbitrary set)."""
    if lanes:
        monkeypatch.setattr(topk_lanes, "LANE_MIN_ELEMENTS", 0)
    x = torch.ones(16, 1200, device=DEVICE)
    for k in (5, 64) if lanes else (5, 300, 1100):
        values, indices = softmax_topk(x, k)
        assert torch.equal(indices, torch.arange(k, device=DEVICE).expand(16, k)), k
        assert torch.equal(
            sample(x, top_k=k, generator=_seeded(k)) < k, torch.ones(16, dtype=torch.bool, device=DEVICE)
        )
    if not lanes:  # 1000 tied tokens and top_p = 0.5: a nucleus of 500 past the 256 candidates, sorted per row
        ids = sample(torch.zeros(64, 1000, device=DEVICE), top_p=0.5, generator=_seeded(1))
        assert (ids <= 500).all() and (ids > 256).any()  # 500: the float64 sum before it may round below 0.5


# ---- The H200 draw "outside the top 10" (FlashInfer's test_top_k_sampling), rebuilt on the CPU ----------------------


def _philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 (Salmon et al. 2011, as cuRAND implements it), vectorized over numpy uint64 arrays."""
    import numpy as np

    c0, c1, c2, c3 = (np.asarray(v, dtype=np.uint64) for v in (c0, c1, c2, c3))
    k0, k1, mask = np.uint64(k0), np.uint64(k1), np.uint64(0xFFFFFFFF)
    for _ in range(10):
        p0, p1 = np.uint64(0xD2511F53) * c0, np.uint64(0xCD9E8D57) * c2
        c0, c1, c2, c3 = (
            ((p1 >> np.uint64(32)) ^ c1 ^ k0) & mask,
            p1 & mask,
            ((p0 >> np.uint64(32)) ^ c3 ^ k1) & mask,
            p0 & mask,
        )
        k0, k1 = (k0 + np.uint64(0x9E3779B9)) & mask, (k1 + np.uint64(0xBB67AE85)) & mask
    return c0, c1, c2, c3


def _cuda_rand(numel, seed, sms=132):
    """torch.rand(numel, device="cuda") after torch.manual_seed(seed), on a GPU of `sms` SMs of 2048 threads (an
    H200: 132): PyTorch's grid-stride kernel (256 threads a block, 8 blocks an SM), each thread's curand Philox
    state at subsequence = its index, one curand_uniform4 (4 floats, a grid apart) a step, 1.0 turned into 0.0."""
    import numpy as np

    S = 256 * min(sms * 8, -(-numel // 256))
    li = np.arange(numel, dtype=np.int64)
    words = np.stack(_philox4x32_10(li // (4 * S), 0, li % S, 0, seed & 0xFFFFFFFF, seed >> 32))
    u = words[(li % (4 * S)) // S, li].astype(np.float32) * np.float32(2**-32) + np.float32(2**-33)
    return torch.from_numpy(np.where(u == 1.0, np.float32(0.0), u).astype(np.float32))


def test_philox_gives_random123s_known_answers():
    assert [int(w) for w in _philox4x32_10(0, 0, 0, 0, 0, 0)] == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    assert [int(w) for w in _philox4x32_10(0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344, 0xA4093822, 0x299F31D0)] == [
        0xD16CFE09,
        0x94FDCCEB,
        0x5001E420,
        0x24126EA1,
    ]


def test_the_h200_draw_outside_the_top_10_was_a_tie_of_float32_logits():
    """Issue #51's case: p = torch.rand(99, 32000, device="cuda") after torch.manual_seed(42), p /= its row sums,
    x = p.log(), sample(x, top_k=10) drew column 25136 in row 10, outside the row's ten most probable columns.
    Rebuilt here from PyTorch's GPU generator, column 25136 is the row's 11th most probable, and its float32 log is
    the 10th's (column 28621): as logits they tie, and a tie goes to the lower column. sample ranks the logits it is
    given; FlashInfer's check (p >= the 10th probability) ranks the probabilities they came from, which float32's
    log cannot tell apart. The draw was right; no kernel was wrong."""
    p = _cuda_rand(99 * 32000, 42).view(99, 32000)[10]
    p = p / p.sum()
    x = p.log()
    by_p = p.argsort(descending=True)
    assert by_p[9] == 28621 and by_p[10] == 25136 and p[28621] > p[25136]
    assert x[28621] == x[25136]
    values, cols = softmax_topk(x[None].to(DEVICE), 10)
    assert 25136 in cols[0].tolist() and 28621 not in cols[0].tolist()
