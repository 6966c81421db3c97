"""Lesson 09 · the exercise checkers: 9.1 merging two states (m, d, values, columns) and 9.2 the sampling
step in Triton. What the lesson shows is in ``helpers.lesson09``."""

from __future__ import annotations

import torch

from .exercises import Wrong, call_attempt, check, fmt, guarded, is_untouched, require_kernel, run_learner_kernel


# ---- Exercise 9.1: merge two states ----
def state_of(x: torch.Tensor, k: int):
    m = x.max()
    d = torch.exp(x - m).sum() if m > float("-inf") else torch.zeros((), dtype=x.dtype)
    v, c = x.topk(k)
    return m, d, v, c


def merge_answer(a, b, k):
    (m_a, d_a, v_a, c_a), (m_b, d_b, v_b, c_b) = a, b
    m = torch.maximum(m_a, m_b)
    d = d_a + d_b if m == float("-inf") else d_a * torch.exp(m_a - m) + d_b * torch.exp(m_b - m)
    v, at = torch.cat([v_a, v_b]).topk(k)
    return m, d, v, torch.cat([c_a, c_b])[at]


def _cases_9_1():
    g = torch.Generator().manual_seed(91)
    x = torch.randn(12, generator=g, dtype=torch.float64) * 2
    far = x.clone()
    far[7:] += 40.0  # the second part's maximum far above the first's
    half = x.clone()
    half[:6] = float("-inf")
    return [(x, 6), (x, 3), (far, 6), (half, 6), (torch.full((12,), float("-inf"), dtype=torch.float64), 6)]


def _trial_9_1(fn) -> str:
    k = 3
    for x, cut in _cases_9_1():
        a, b = state_of(x[:cut], k), state_of(x[cut:], k)
        b = (b[0], b[1], b[2], b[3] + cut)
        keep = [t.clone() for t in a + b]
        got = call_attempt(fn, a, b, k)
        if not all(torch.equal(t, s) for t, s in zip(a + b, keep)):
            raise Wrong("your merge changed its inputs: build new tensors instead")
        where = (
            f"on a row of 12 cut after column {cut}"
            + (" (maxima far apart)" if x.max() > 30 else "")
            + (" (the first part only -inf)" if x[0] == float("-inf") and x.max() > float("-inf") else "")
            + (" (only -inf: two identities)" if x.max() == float("-inf") else "")
        )
        if not (isinstance(got, (tuple, list)) and len(got) == 4):
            raise Wrong(f"{where}: return the four parts (m, d, values, columns)")
        m, d, v, c = (torch.as_tensor(t).cpu() for t in got)
        M, D, V, C = state_of(x, k)
        if v.numel() != k or c.numel() != k:
            raise Wrong(f"{where}: you kept {v.numel()} candidates: keep exactly k = {k}, the k largest of both lists")
        if torch.isnan(d).any():
            raise Wrong(
                f"{where}: d is NaN: two states of only -inf must merge to the identity (-inf, 0), "
                f"exp(-inf - (-inf)) is NaN"
            )
        if not (m.double() == M or torch.isclose(m.double(), M)):
            raise Wrong(f"{where}: m should be the larger maximum {fmt(M)}, got {fmt(m)}")
        if not torch.isclose(d.double(), D, rtol=1e-9, atol=0):
            if D > 0 and torch.isclose(d.double(), a[1] + b[1], rtol=1e-9):
                raise Wrong(
                    f"{where}: merging without rescaling: move each sum to the new maximum, "
                    f"d = d_A e^(m_A - m) + d_B e^(m_B - m)"
                )
            if D > 0 and torch.isclose(d.double(), a[1] * torch.exp(m - a[0]) + b[1] * torch.exp(m - b[0]), rtol=1e-9):
                raise Wrong(f"{where}: the factor is e^(m_A - m), at most 1: the sum moves down to the larger maximum")
            raise Wrong(f"{where}: d should be {fmt(D)}, got {fmt(d)}")
        if not torch.equal(v.double(), V):
            if torch.equal(v.double(), torch.cat([a[2], b[2]])[:k]):
                raise Wrong(f"{where}: keep the k largest values of both lists, not the first k of their concatenation")
            if torch.equal(v.double().sort(descending=True).values, V):
                raise Wrong(f"{where}: the values must be in descending order (largest first)")
            raise Wrong(f"{where}: values should be {fmt(V)}, got {fmt(v)}")
        if x.max() > float("-inf") and not torch.equal(c.long(), C):
            raise Wrong(
                f"{where}: the columns must move with their values: columns should be {C.tolist()}, got {c.tolist()}"
            )
    return f"on {len(_cases_9_1())} cuts, two identities included"


def check_9_1(merge) -> None:
    """Exercise 9.1: ``merge(a, b, k)`` of two states (m, d, values, columns)."""
    check("9.1", "merge two states", merge, _trial_9_1)


# ---- Exercise 9.2: the sampling step, in Triton ----
K_9_2 = 8
#: (sorted logits, k, top_p, temperature): a nucleus inside a top-k, a top token above top_p, a
#: temperature that matters, a top-k alone, a heavy tail past the top k (renormalizing matters).
CASES_9_2 = (
    ([3.0, 2.5, 2.0, 1.0, 0.5, 0.0, -1.0, -2.0], 6, 0.8, 0.7),
    ([5.0, 1.0, 0.5, 0.4, 0.2, 0.0, -0.5, -1.0], 4, 0.5, 1.0),
    ([1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3], 8, 1.0, 0.5),
    ([0.5, 0.4, 0.3, 0.2, 0.1, 0.0, -0.1, -0.2], 3, 1.0, 1.0),
    ([3.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0], 3, 0.6, 1.0),
)
U_9_2 = 24


def positions(v, k, top_p, temperature, u, mistake=None) -> torch.Tensor:
    """The positions the sampling step picks for uniforms ``u`` (float64), or what ``mistake`` picks."""
    v = torch.tensor(v, dtype=torch.float64)
    lane = torch.arange(len(v))
    live = lane <= k if mistake == "k_plus_1" else (lane < len(v) if mistake == "no_top_k" else lane < k)
    z = v if mistake == "temp_after" else v / temperature
    q = torch.where(live, torch.exp(z - z.max()), 0.0)
    q = q / (torch.exp(z - z.max()).sum() if mistake == "no_renorm" else q.sum())
    incl = q.cumsum(0)
    keep = live & ((incl < top_p) if mistake == "drop_top" else (incl - q < top_p))
    kept = torch.where(keep, q, 0.0).sum()
    target = u[:, None] * (1.0 if mistake == "no_mass" else kept)
    pos = (keep & (incl <= target)).sum(-1)
    return torch.minimum(pos, keep.sum() - 1)


HINTS_9_2 = {
    "drop_top": "your top-p tests the mass up to and including each token (incl < top_p): that drops the token "
    "that reaches top_p, and drops the top token itself when it alone holds top_p or more. Keep a token "
    "while the mass *before* it is below top_p (the exclusive cumulative sum, incl - q), so the most "
    "probable token always stays",
    "temp_after": "the temperature must divide the logits before the softmax (logits * inv_temp): "
    "scaling probabilities after it changes nothing once they are renormalized",
    "k_plus_1": "you keep k + 1 tokens: the top-k lanes are lane < k",
    "no_renorm": "renormalize over the top k before the nucleus (q / sum of the k kept), as Hugging Face does",
    "no_top_k": "no top-k: only the first k lanes may be drawn",
    "no_mass": "scale u by the kept mass: the target is u * (sum of the kept q), not u",
}


def _uniforms():
    return (torch.arange(U_9_2, dtype=torch.float64) + 0.5) / U_9_2


def _trial_9_2(kernel) -> str:
    require_kernel(kernel, "sample_step_kernel")
    if is_untouched(kernel):
        raise NotImplementedError
    u = _uniforms()
    R, stride = len(CASES_9_2) * U_9_2, K_9_2 + 5
    logits, uu = guarded((R, K_9_2), row_stride=stride), guarded((R,))
    out = guarded((R,), dtype=torch.int64, fill=-7)
    for i, (v, _, _, _) in enumerate(CASES_9_2):
        logits[i * U_9_2 : (i + 1) * U_9_2] = torch.tensor(v).to(logits.device)
        uu[i * U_9_2 : (i + 1) * U_9_2] = u.float().to(uu.device)
    for i, (v, k, top_p, temp) in enumerate(CASES_9_2):  # one launch per setting: they are arguments
        rows = slice(i * U_9_2, (i + 1) * U_9_2)
        run_learner_kernel(
            kernel, (U_9_2,), out[rows], logits[rows], uu[rows], stride, k, top_p, 1.0 / temp, K=K_9_2, outputs=[out]
        )
    got = out.cpu()
    for i, (v, k, top_p, temp) in enumerate(CASES_9_2):
        mine = got[i * U_9_2 : (i + 1) * U_9_2]
        want = positions(v, k, top_p, temp, u)
        where = f"with k = {k}, top_p = {top_p}, temperature = {temp}"
        if torch.equal(mine, want):
            continue
        for mistake, hint in HINTS_9_2.items():
            if torch.equal(mine, positions(v, k, top_p, temp, u, mistake)):
                raise Wrong(f"{where}: {hint}")
        if (mine == -7).any():
            raise Wrong(f"{where}: some rows got nothing stored: does every program store at out_ptr + row?")
        if ((mine < 0) | (mine >= k)).any():
            raise Wrong(
                f"{where}: positions outside 0..k-1, such as {mine[(mine < 0) | (mine >= k)][0].item()}: does each "
                f"program read its K logits at logits_ptr + row * row_stride (past them lies NaN)?"
            )
        raise Wrong(
            f"{where}: for u = {fmt(u[:6], 3)}... the positions should be {want[:6].tolist()}..., got "
            f"{mine[:6].tolist()}... Does each program read its K logits at logits_ptr + row * row_stride?"
        )
    return f"{len(CASES_9_2) * U_9_2} draws, every position as float64 picks"


def check_9_2(sample_step_kernel) -> None:
    """Exercise 9.2: the sampling step (temperature, top-k, top-p, inverse CDF) as a Triton kernel."""
    check("9.2", "the sampling step, in Triton", sample_step_kernel, _trial_9_2)
