"""Lesson 07's prose against its data: every number the markdown quotes is derived here from
figures/data/ (or from the lesson's model) with the same pandas lines as the notebook's visible cells,
and the markdown must quote it. The spreads behind a claim are checked where the recording has them."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from claims import cell_with, prose, quotes
from helpers import data, lesson07
from helpers.kernels.attention import attention_config

L = "07"
heads, D, size = 64, 128, 2


@pytest.fixture(scope="module")
def mem():
    mem = pd.DataFrame({"S": [2**p for p in range(10, 17)]})
    mem["q,k,v,out"] = 4 * heads * mem.S * D * size / 1e9
    mem["scores"] = heads * mem.S**2 * size / 1e9
    mem["naive peak"] = mem["q,k,v,out"] + 2 * mem.scores
    return mem.set_index("S")


@pytest.fixture(scope="module")
def att():
    return data.load("attention", gpu="h100")


KEY = ["dtype", "D", "causal", "S"]


@pytest.fixture(scope="module")
def tf(att):
    return att.query("status == 'ok'").pivot_table(index=KEY, columns="provider", values="graph_tflops")


@pytest.fixture(scope="module")
def noisy(att):
    return data.noisy(att.query("status == 'ok'").pivot_table(index=KEY, columns="provider", values="graph_spread"))


@pytest.fixture(scope="module")
def shares(tf, noisy):
    """The notebook's fractions from S = 4K on, and which of them rest on a noisy timing."""
    long = tf.query("S >= 4096")
    sdpa = long.filter(like="sdpa")
    fastest = sdpa.max(axis=1)
    share = pd.DataFrame({"of cuDNN": long.course / long.sdpa_cudnn, "of the fastest SDPA": long.course / fastest})
    n = noisy.loc[long.index]
    share_noisy = pd.DataFrame({"of cuDNN": n.course | n.sdpa_cudnn,
                                "of the fastest SDPA": n.course | n[sdpa.columns].where(sdpa.eq(fastest, axis=0), False).any(axis=1)})
    return share, share_noisy


def _of_cudnn(gpu):
    """(fraction of cuDNN, noisy) per (dtype, D, causal, S >= 4K) of one GPU's recording."""
    rec = data.load("attention", gpu=gpu).query("status == 'ok' and S >= 4096")
    t = rec.pivot_table(index=KEY, columns="provider", values=["graph_tflops", "graph_spread"])
    return (t.graph_tflops.course / t.graph_tflops.sdpa_cudnn,
            data.noisy(t.graph_spread[["course", "sdpa_cudnn"]]).any(axis=1))


def test_memory_numbers(mem):
    text = cell_with(L, "At 16K tokens the naive version needs")
    quotes(text, f"about {mem.loc[16384, 'naive peak']:.0f} GB")
    quotes(text, f"take {mem.loc[16384, 'q,k,v,out']:.0f} GB")
    quotes(text, f"scores alone ({mem.loc[32768, 'scores']:.0f} GB)")
    quotes(text, f"({mem.loc[32768, 'naive peak']:.0f} GB)")
    assert mem.loc[16384, "naive peak"] <= 80 < mem.loc[32768, "scores"] and 141 < mem.loc[32768, "naive peak"]


def test_traffic_numbers(mem):
    S = 16384
    tflop = 4 * heads * S**2 * D / 1e12
    naive_gb = heads * (4 * S * D + 6 * S**2) * size / 1e9
    text = cell_with(L, "operations per byte it moves")
    quotes(text, f"D/3 \\approx {D / 3:.0f}$")
    assert abs(tflop * 1e12 / (naive_gb * 1e9) - D / 3) < 1  # the intensity at 16K is D/3 to within one
    quotes(text, f"needs {989 / 3.35:.0f} to keep")
    quotes(text, f"its {naive_gb:.0f} GB takes {naive_gb / 3.35:.0f} ms")
    quotes(text, f"finish in {tflop / 989 * 1e3:.1f}")
    assert "six passes" in cell_with(L, "Count the naive version's passes")


def test_tile_counts_of_the_figure():
    c = lesson07.tile_counts(512, 512, 128, 64, causal=True)
    quotes(cell_with(L, "Left, only the last column"), f"{c['skipped']} of {c['total']} tiles are skipped, "
                                                       f"{c['masked']} need a mask and {c['no mask']} need none")


def test_naive_against_its_traffic_model(att):
    ok = att.query("status == 'ok'")
    nv = ok.query("provider == 'naive' and dtype == 'float16' and causal == 0").copy()
    nbytes = nv.B * nv.H * (4 * nv.S * nv.D + 6 * nv.S**2) * 2
    nv["model ms"] = nbytes / 3.35e12 * 1e3
    r = (nv.graph_ms / nv["model ms"]).set_axis(pd.MultiIndex.from_frame(nv[["D", "S"]]))
    text = cell_with(L, "What the recording shows")
    quotes(text, f"{r.loc[(128, 8192)]:.2f} times the model's time at $D$ = 128, $S$ = 8K")
    quotes(text, f"({r.loc[(128, 1024)]:.2f} at 1K)")
    assert (r > 1.2).all() and r.groupby("D").is_monotonic_increasing.all()  # slower than the model, more so with S


def test_course_against_naive(tf, noisy):
    x = (tf.course / tf.naive).where(~(noisy.course | noisy.naive)).agg(["min", "max"])
    text = cell_with(L, "What the recording shows")
    quotes(text, f"{x['min']:.1f} to {x['max']:.1f} times faster")
    c = tf.course.unstack("S")  # "they climb with S up to 8K and level off beyond"
    quotes(text, "climb with $S$ up to 8K and level off beyond")
    assert (c[8192] / c[1024]).min() > 1.1 and ((c[16384] / c[8192]) - 1).abs().max() < 0.05


def test_course_against_cudnn_and_the_fastest_sdpa(shares):
    share, share_noisy = shares
    clean = share.where(~share_noisy)
    by_d = clean.groupby("D").agg(["min", "median", "max"])
    text = cell_with(L, "What the recording shows")
    c, f = by_d["of cuDNN"], by_d["of the fastest SDPA"]
    quotes(text, f"{c.loc[64, 'min']:.2f} to {c.loc[64, 'max']:.2f} of cuDNN's speed at $D$ = 64 and "
                 f"{c.loc[128, 'min']:.2f} to {c.loc[128, 'max']:.2f} at $D$ = 128 "
                 f"(medians {c.loc[64, 'median']:.2f} and {c.loc[128, 'median']:.2f})")
    quotes(text, f"{f.loc[64, 'min']:.2f} to {f.loc[64, 'max']:.2f} and {f.loc[128, 'min']:.2f} to {f.loc[128, 'max']:.2f}")
    quotes(text, f"leave out the {share_noisy['of cuDNN'].sum()} fractions of cuDNN (and "
                 f"{share_noisy['of the fastest SDPA'].sum()} of the fastest backend) out of {len(share)}")
    # "the two ranges do not overlap, in fp16 or bf16, causal or not"
    per = clean["of cuDNN"].groupby(["dtype", "causal", "D"]).agg(["min", "max"]).unstack("D")
    assert (per[("min", 64)] > per[("max", 128)]).all()


def test_the_h200_agrees():
    frac, frac_noisy = _of_cudnn("h200")
    r = frac.where(~frac_noisy).groupby("D").agg(["min", "max"])
    quotes(cell_with(L, "What the recording shows"),
           f"{r.loc[64, 'min']:.2f} to {r.loc[64, 'max']:.2f} of cuDNN at $D$ = 64, "
           f"{r.loc[128, 'min']:.2f} to {r.loc[128, 'max']:.2f} at $D$ = 128, with no noisy timing")
    assert not frac_noisy.any()


def test_the_spreads_behind_the_claims(att, noisy, shares):
    """Every timing behind a quoted number was timed in five rounds with its spread recorded; the
    ranges above leave the noisy ones out, and the naive version's timings behind the traffic-model
    ratios are all quiet."""
    assert {"spread", "graph_spread"} <= set(att.columns)
    ok = att.query("status == 'ok'")
    assert ok.graph_spread.notna().all() and ok.spread.notna().all()
    assert not noisy.naive.any()  # the model ratios and the naive range rest on quiet timings
    share, share_noisy = shares
    assert share_noisy.any().any() and not share_noisy.all().any()  # some marked and left out, most kept
    # the noisy H100 cells behind the fractions, named: D = 128 only
    assert set(share_noisy[share_noisy["of cuDNN"]].index.get_level_values("D")) == {128}


def test_the_tile_configuration_in_use():
    tune = pd.concat([data.load("attention_tune", gpu=g).assign(gpu=g.upper()) for g in ("h100", "h200")])
    cfg = attention_config(torch.float16, 128, interpreter=False)
    by = ["gpu", "D", "causal"]
    in_use = tune.query("block_m == @cfg.block_m and block_n == @cfg.block_n and num_warps == @cfg.num_warps "
                        "and num_stages == @cfg.num_stages").set_index(by).graph_tflops
    fastest = tune.query("status == 'ok'").groupby(by).graph_tflops.max()
    low = (in_use / fastest).min()
    assert len(in_use) == 8 and tune.groupby(by).size().min() >= 10
    quotes(cell_with(L, "What the recording shows"), f"at least {low:.2f} of the fastest candidate")
    for D_ in (64, 128):  # the configuration is the GPU's for every head dim
        assert tuple(attention_config(torch.float16, D_, interpreter=False)) == tuple(cfg)


def test_no_history_in_the_prose():
    text = prose(L).lower()
    for phrase in ("earlier recording", "before the fix", "commit ", "not reproduced", "was recorded before"):
        assert phrase not in text, phrase
