"""Lesson 07 · the exercise checkers: 7.1 causal attention in PyTorch, 7.2 the causal loop bounds and the
diagonal block in a Triton kernel, 7.3 combining partial results by their LSE (one printed line each, whatever
the learner wrote). What the lesson shows is in ``helpers.lesson07``."""

from __future__ import annotations

import ast
import linecache
import math

import torch

from .exercises import Wrong, call_attempt, check, guarded, launch_learner_kernel
from .kernels.attention import LOG2E
from .mode import DEVICE, INTERPRETER
from .reference import NEG_INF, reference_attention
from .show import source_of

LN2 = 0.6931471805599453


def first_mismatch(got, want, atol: float, rtol: float) -> str:
    """Where two tensors of one shape first differ: 'at index (0, 2, 1): expected 0.1234, got 0.5678'."""
    g, w = got.detach().cpu().to(torch.float64), want.detach().cpu().to(torch.float64)
    bad = ~((g - w).abs() <= atol + rtol * w.abs()) & ~(torch.isnan(g) & torch.isnan(w))
    if not bad.any():
        return "no element differs"
    idx = tuple(int(i) for i in bad.nonzero()[0])
    return f"at index {idx}: expected {w[idx].item():.6g}, got {g[idx].item():.6g}"


# --- Exercise 7.1: causal attention in PyTorch ---


def _naive64(q, k, v, scale, mask=None, *, mask_after_softmax=False, scale_after=False):
    """Variants of materialised attention in float64, for recognising the usual mistakes."""
    s = (q @ k.transpose(-2, -1)) * (1.0 if scale_after else scale)
    if mask is not None and not mask_after_softmax:
        s = s.masked_fill(~mask, NEG_INF)
    p = torch.softmax(s, dim=-1) * (mask if mask is not None and mask_after_softmax else 1.0)
    return (p * (scale if scale_after else 1.0)) @ v


def _cases_7_1():
    g, f = torch.Generator().manual_seed(71), torch.float64
    cases = [
        tuple(torch.randn(*lead, S, d, generator=g, dtype=f) for _ in range(3))
        for lead, S, d in (((2, 3), 6, 8), ((1,), 9, 4), ((2,), 1, 4))
    ]
    q, k = torch.randn(1, 5, 4, generator=g, dtype=f), torch.randn(1, 5, 4, generator=g, dtype=f)
    q[..., 0], k[..., 4, :] = (
        10.0,
        torch.tensor([200.0, 0.0, 0.0, 0.0], dtype=f),
    )  # the last key: score ~ 1000 after the scale
    return cases + [(q, k, torch.randn(1, 5, 4, generator=g, dtype=f))]  # for every query, seen by the last only


def _trial_7_1(causal_attention) -> str:
    for q, k, v in _cases_7_1():
        S, d = q.shape[-2], q.shape[-1]
        scale = 1 / math.sqrt(d)
        args = [t.clone() for t in (q, k, v)]
        got = call_attempt(causal_attention, *args, scale)
        if not all(torch.equal(a, t) for a, t in zip(args, (q, k, v))):
            raise Wrong("your function modified q, k or v: compute new tensors instead (no in-place ops)")
        want, _ = reference_attention(q, k, v, causal=True, scale=scale)
        if isinstance(got, torch.Tensor) and got.shape == want.shape:
            g = got.detach().to(torch.float64)
            if torch.allclose(g, want, atol=1e-8, rtol=1e-8):
                continue
            mask = torch.ones(S, S, dtype=torch.bool).tril()  # query i sees keys 0..i
            wrongs = [  # (what the mistake computes, its hint)
                (
                    _naive64(q, k, v, scale, mask, mask_after_softmax=True),
                    "the mask is applied after the softmax, so "
                    "each row no longer sums to 1: set the hidden scores to -inf before the softmax",
                ),
                (
                    _naive64(q, k, v, scale, mask.T),
                    "query i must see keys 0..i (the lower triangle, .tril()), not the keys after it",
                ),
                (
                    _naive64(q, k, v, scale, mask.tril(-1)),
                    "query i sees keys 0..i, itself included: .tril() (diagonal 0), not .tril(-1)",
                ),
                (
                    _naive64(q, k, v, 1.0, mask),
                    "the scores are not scaled: multiply q @ k^T by scale before the softmax",
                ),
                (
                    _naive64(q, k, v, scale, mask, scale_after=True),
                    "scale multiplies the scores before the softmax, not the probabilities or the output",
                ),
                (_naive64(q, k, v, scale), "nothing is masked: query i must not see keys after it"),
            ]
            for cand, hint in wrongs:
                if torch.allclose(g, cand, atol=1e-8, rtol=1e-8, equal_nan=True):
                    raise Wrong(hint)
            if torch.isnan(g).any() and not torch.isnan(want).any():
                raise Wrong(
                    "your output has NaN where attention is defined. If you take the max (or the exp) over "
                    "every key and mask afterwards, a large hidden score makes the visible ones underflow "
                    "to 0 (and 0/0 = NaN): mask the scores with -inf before the max and the exp"
                )
        if not isinstance(got, torch.Tensor):
            raise Wrong(f"return a tensor, got {type(got).__name__}")
        if got.shape != want.shape:
            raise Wrong(
                f"for q of shape {tuple(q.shape)} the output has shape {tuple(want.shape)}, yours {tuple(got.shape)}"
            )
        raise Wrong(f"for q of shape {tuple(q.shape)}, {first_mismatch(got, want, 1e-8, 1e-8)}")
    return "it matches float64 SDPA with is_causal=True"


def check_7_1(causal_attention) -> None:
    """Exercise 7.1: ``causal_attention(q, k, v, scale)`` in PyTorch, scores materialised."""
    check("7.1", "causal attention in PyTorch", causal_attention, _trial_7_1)


# --- Exercise 7.2: the causal loop bounds and the masked diagonal block, in a Triton kernel ---

#: (heads, seq, D, BLOCK_M, BLOCK_N): no length a multiple of its tiles; BLOCK_M >, = and < BLOCK_N.
CASES_7_2 = ((2, 37, 16, 32, 16), (1, 50, 16, 16, 16), (2, 45, 16, 16, 32))
PAD_7_2 = 64  # keys of NaN padding after each head: a load past the last key reads NaN
FILL_7_2 = -777.0  # what out holds before the kernel runs
#: The checker's tolerance: fp32 in the interpreter; on a GPU, tl.dot rounds fp32 inputs to TF32 by default.
TOL_7_2 = 1e-4 if INTERPRETER else 1e-2

HINTS_7_2 = {
    "to_the_end": "rows see keys after them: the loops run to the end of the keys. A causal program stops at "
    "end = min(seq, (start_m + 1) * BLOCK_M), and only the blocks left of its first row run unmasked",
    "one_block_early": "the diagonal block is never visited: rows miss the keys from their own block on (the first "
    "rows see no key at all, 0/0 = NaN); end must pass the block's last row, (start_m + 1) * BLOCK_M",
    "end_from_first_row": "end is computed from the block's first row, so the rows below it miss keys up to their "
    "own: end = min(seq, (start_m + 1) * BLOCK_M), after the block's last row",
    "no_diagonal_mask": "in the blocks the diagonal crosses, rows see the keys after them: keep needs the causal "
    "condition, cols[None, :] <= offs_m[:, None]",
    "strict": "every row misses its own key (row 0 sees none: 0/0 = NaN): query i sees keys j <= i: <=, not <",
    "one_block_late": "n_full is one block too far: the block holding the first row's own key runs without a mask. "
    "Unmasked blocks end at or before that key: n_full = (start_m * BLOCK_M + 1) // BLOCK_N * BLOCK_N",
}

#: Right outputs, wasted work: what the bounds probe recognises (a loop that ignores causality, or masks every block).
HINT_7_2_PAST_THE_DIAGONAL = (
    "the outputs are right, but the masked loop runs past the block's last row (end = seq ignores causality): the "
    "key blocks above the diagonal are loaded and masked to nothing. A causal program stops after its last row's "
    "own key, end = min(seq, (start_m + 1) * BLOCK_M): that skipping is what halves the work"
)
HINT_7_2_ALL_MASKED = (
    "the outputs are right, but blocks that need no mask go through the masked loop (n_full = 0 masks every block): "
    "the blocks that end at or before the first row's own key need none, n_full = (start_m * BLOCK_M + 1) // BLOCK_N "
    "* BLOCK_N"
)


def visible_keys(seq: int, bm: int, bn: int, kind: str = "right") -> list[int]:
    """Per query row, how many keys (0, 1, ..., n - 1) a kernel with this mistake lets it see: 0 where its
    output is NaN (no key seen, or a load past the last key), -1 where it is not such a prefix."""
    out = []
    for i in range(seq):
        x = i // bm * bm
        n_full, end = min(seq // bn * bn, (x + 1) // bn * bn), min(seq, x + bm)
        if kind == "to_the_end":
            n_full, end = seq // bn * bn, seq
        elif kind == "one_block_early":
            end = x
        elif kind == "end_from_first_row":
            end = x + 1
        elif kind == "one_block_late":
            n_full = (x // bn + 1) * bn
        seen = {c for a in range(0, n_full, bn) for c in range(a, a + bn)}
        for a in range(n_full, end, bn):
            seen |= {
                c
                for c in range(a, min(a + bn, seq))
                if kind == "no_diagonal_mask" or c < i or (c == i and kind != "strict")
            }
        out.append(0 if not seen or max(seen) >= seq else len(seen) if seen == set(range(len(seen))) else -1)
    return out


def _buffer(x):
    """(heads, seq, D) -> (a guarded copy with NaN after each head, head stride); a meta ``x``: the output."""
    h, s, d = x.shape
    t = guarded((h, s * d), torch.float32, row_stride=(s + PAD_7_2) * d, fill=FILL_7_2)
    return t if x.is_meta else t.copy_(x.reshape(h, s * d)), (s + PAD_7_2) * d


def _run_7_2(kernel, case, probe: bool):
    """The learner's kernel on one case: random inputs, or the probe (q = 0: every visible key weighs
    alike, and v_j = (1, j, j^2, 0, ...) so that row i's output tells which keys it saw). (out, q, k, v)."""
    heads, seq, d, bm, bn = case
    g = torch.Generator().manual_seed(720 + seq)
    q, k, v = (torch.randn(heads, seq, d, generator=g) for _ in range(3))
    if probe:
        j = torch.arange(seq, dtype=torch.float32)
        q, v = torch.zeros_like(q), torch.zeros_like(v)
        v[..., 0], v[..., 1], v[..., 2] = 1.0, j, j * j
    bufs = [_buffer(t) for t in (q, k, v)]
    out, stride = _buffer(torch.empty(heads, seq, d, device="meta"))
    launch_learner_kernel(
        kernel,
        (-(-seq // bm), heads),
        out,
        *(b for b, _ in bufs),
        seq,
        stride,
        LOG2E / math.sqrt(d),
        where=f"on heads={heads}, seq={seq}, blocks {bm} x {bn}:",
        outputs=[out],
        HEAD_DIM=d,
        BLOCK_M=bm,
        BLOCK_N=bn,
    )
    return out.cpu().double().reshape(heads, seq, d), q, k, v


def _seen(out) -> list[int]:
    """Per row of head 0 of a probe's output: the number of keys seen (as visible_keys counts them)."""
    n = [0 if torch.isnan(o[:3]).any() else round(2 * o[1].item() + 1) for o in out[0]]  # mean of 0..n-1: (n-1)/2
    return [
        c
        if c == 0 or (abs(o[0].item() - 1) < 1e-3 and abs(o[2].item() - (c - 1) * (2 * c - 1) / 6) < 1e-2 * c * c)
        else -1
        for c, o in zip(n, out[0])
    ]


def _trial_7_2(kernel) -> str:
    if not hasattr(kernel, "__getitem__"):
        raise Wrong(f"expected a @triton.jit kernel, got {type(kernel).__name__}")
    for heads, seq, d, bm, bn in CASES_7_2:
        out, q, k, v = _run_7_2(kernel, (heads, seq, d, bm, bn), probe=False)
        where = f"on heads={heads}, seq={seq}, blocks {bm} x {bn}"
        if (out == FILL_7_2).all():
            raise Wrong(f"{where}: nothing was stored in out: keep the tl.store of o = acc / l_i[:, None]")
        want, _ = reference_attention(q, k, v, causal=True)
        if torch.allclose(out, want, atol=TOL_7_2, rtol=TOL_7_2):
            continue
        seen = {c: _seen(_run_7_2(kernel, c, probe=True)[0]) for c in CASES_7_2}
        for kind, hint in HINTS_7_2.items():
            if all(seen[c] == visible_keys(c[1], c[3], c[4], kind) for c in CASES_7_2):
                raise Wrong(f"{where}: {hint}")
        if all(seen[c] == visible_keys(c[1], c[3], c[4]) for c in CASES_7_2):
            raise Wrong(
                f"{where}: every row sees the right keys, yet the output differs ({first_mismatch(out, want, TOL_7_2, TOL_7_2)}): "
                f"is the update of m_i, l_i and acc, or the store, changed?"
            )
        if torch.isnan(out).any():
            rows = [i for i in range(seq) if torch.isnan(out[:, i]).any()][:4]
            raise Wrong(
                f"{where}: rows {rows} are NaN: a row that sees no key divides 0 by 0, and a load "
                f"past the last key reads garbage; query i sees keys 0..i"
            )
        raise Wrong(
            f"{where}: the output differs from causal attention, {first_mismatch(out, want, TOL_7_2, TOL_7_2)}: "
            f"query i must see keys 0..i, each once"
        )
    _check_bounds_7_2(kernel)
    return "your causal bounds and diagonal mask match float64 causal attention on three shapes with partial blocks"


def _bounds_probe(kernel):
    """The learner's kernel cut before its first loop, storing (n_full, end) of each program in out_ptr: the
    work its loops would do. None when the kernel does not have the template's shape (then nothing is probed)."""
    try:
        tree = ast.parse(source_of(kernel))
        fn = tree.body[0]
        at = next(i for i, st in enumerate(fn.body) if isinstance(st, ast.For))
        fn.body = (
            fn.body[:at]
            + ast.parse(
                "tl.store(out_ptr + (head * tl.num_programs(0) + start_m) * 2, n_full)\n"
                "tl.store(out_ptr + (head * tl.num_programs(0) + start_m) * 2 + 1, end)"
            ).body
        )
        code = ast.unparse(tree) + "\n"
        name = f"<exercise 7.2: the bounds of {fn.name}>"
        linecache.cache[name] = (len(code), None, code.splitlines(True), name)  # where Triton reads the source
        scope = dict(getattr(kernel, "fn", kernel).__globals__)
        exec(compile(code, name, "exec"), scope)
        return scope[fn.name]
    except Exception:
        return None


def _check_bounds_7_2(kernel) -> None:
    """Right outputs can still hide wasted work: blocks above the diagonal visited, or every block masked."""
    probe = _bounds_probe(kernel)
    if probe is None:
        return
    for heads, seq, d, bm, bn in CASES_7_2:
        num_m = -(-seq // bm)
        bounds = torch.full((heads * num_m * 2,), -1, dtype=torch.int32, device=DEVICE)
        q, k, v = (_buffer(torch.zeros(heads, seq, d))[0] for _ in range(3))
        try:
            launch_learner_kernel(
                probe,
                (num_m, heads),
                bounds,
                q,
                k,
                v,
                seq,
                (seq + PAD_7_2) * d,
                1.0,
                where="",
                HEAD_DIM=d,
                BLOCK_M=bm,
                BLOCK_N=bn,
            )
        except Exception:
            return  # the cut kernel does not run on its own (names of its own): judge by the outputs alone
        got = bounds.cpu().view(heads, num_m, 2).tolist()
        for start_m in range(num_m):
            x = start_m * bm
            want_full, want_end = (x + 1) // bn * bn, min(seq, x + bm)
            n_full, end = got[0][start_m]
            if any(s >= want_end for s in range(n_full, end, bn)):
                raise Wrong(f"on seq={seq}, blocks {bm} x {bn}: {HINT_7_2_PAST_THE_DIAGONAL}")
            if len(range(0, n_full, bn)) < len(range(0, want_full, bn)):
                raise Wrong(f"on seq={seq}, blocks {bm} x {bn}: {HINT_7_2_ALL_MASKED}")


def check_7_2(kernel) -> None:
    """Exercise 7.2: the causal loop bounds (n_full, end) and the diagonal block's mask (keep)."""
    check("7.2", "the causal loop bounds and the diagonal block", kernel, _trial_7_2, compute_bound=True)


# --- Exercise 7.3: combine n partial results by their LSE ---


def _parts(q, k, v, bounds):
    """Each part's (out, lse) in float64, stacked (a part with no keys: out 0, lse -inf)."""
    parts = [
        reference_attention(q, k[..., a:b, :], v[..., a:b, :])
        if b > a
        else (torch.zeros(q.shape, dtype=torch.float64), torch.full(q.shape[:-1], NEG_INF, dtype=torch.float64))
        for a, b in zip(bounds, bounds[1:])
    ]
    return torch.stack([o for o, _ in parts]), torch.stack([lse for _, lse in parts])


def _cases_7_3():
    """(name, q, k, v, part bounds) in float64; a shift of 30 puts the scores near 30 * 30 * 4 / 2 = 1800."""
    g = torch.Generator().manual_seed(72)
    cases = []
    for name, lead, sq, sk, d, bounds, shift in (
        ("two parts", (2,), 3, 10, 4, (0, 4, 10), 0.0),
        ("five parts", (2, 2), 4, 23, 8, (0, 3, 9, 12, 20, 23), 0.0),
        ("scores near 1800 (e^lse overflows)", (1,), 3, 8, 4, (0, 5, 8), 30.0),
        ("a part with no keys (lse = -inf)", (1,), 2, 6, 4, (0, 6, 6), 0.0),
    ):
        q, k, v = (torch.randn(*lead, n, d, generator=g, dtype=torch.float64) for n in (sq, sk, sk))
        cases.append((name, q + shift, k + shift, v, bounds))
    return cases


def _trial_7_3(combine) -> str:
    for name, q, k, v, bounds in _cases_7_3():
        o_parts, lse_parts = _parts(q, k, v, bounds)
        args = (o_parts.clone(), lse_parts.clone())
        got = call_attempt(combine, *args)
        if not (torch.equal(args[0], o_parts) and torch.equal(args[1], lse_parts)):
            raise Wrong("your function modified its inputs: compute new tensors instead")
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise Wrong(f"return a pair (out, lse), got {type(got).__name__}")
        o, lse = got
        want_o, want_lse = reference_attention(q, k, v)
        if not isinstance(o, torch.Tensor) or not isinstance(lse, torch.Tensor):
            raise Wrong("return two tensors (out, lse)")
        if o.shape != want_o.shape or lse.shape != want_lse.shape:
            raise Wrong(
                f"on {name}: expected out of shape {tuple(want_o.shape)} and lse of shape "
                f"{tuple(want_lse.shape)}, got {tuple(o.shape)} and {tuple(lse.shape)}"
            )
        o64, l64 = o.detach().to(torch.float64), lse.detach().to(torch.float64)
        lse_ok = torch.allclose(l64, want_lse, atol=1e-9, rtol=1e-10)
        o_ok = torch.allclose(o64, want_o, atol=1e-9, rtol=1e-9)
        if lse_ok and o_ok:
            continue
        if not lse_ok:
            if torch.allclose(l64, want_lse / LN2, atol=1e-9, rtol=1e-9) or torch.allclose(
                l64, torch.logsumexp(lse_parts * LN2, dim=0) / LN2, atol=1e-9, rtol=1e-9
            ):
                raise Wrong(
                    f"on {name}: your lse is in log2 units (log2 of the sum); the parts' lse are natural "
                    f"logs and so must the result be: use exp and log (or multiply by ln 2)"
                )
            if torch.allclose(l64, lse_parts.max(dim=0).values, atol=1e-9):
                raise Wrong(
                    f"on {name}: your lse is the largest part's; the total is log(sum_i e^lse_i), "
                    f"torch.logsumexp(lse_parts, dim=0)"
                )
            if torch.allclose(l64, lse_parts.sum(dim=0), atol=1e-9) or torch.allclose(
                l64, lse_parts.mean(dim=0), atol=1e-9
            ):
                raise Wrong(f"on {name}: the sums of exponentials add, not their logs: lse = log(sum_i e^lse_i)")
            if not torch.isfinite(l64[torch.isfinite(want_lse)]).all():
                raise Wrong(
                    f"on {name}: your lse overflowed or is NaN: e^lse_i overflows near lse = 710 in float64; "
                    f"subtract the largest lse first (torch.logsumexp does)"
                )
            raise Wrong(f"on {name}: the lse {first_mismatch(l64, want_lse, 1e-9, 1e-10)}")
        if torch.isnan(o64).any() or torch.isinf(o64).any():
            raise Wrong(
                f"on {name}: your output has inf or NaN: weight each part by e^(lse_i - lse), never by "
                f"e^lse_i itself (it overflows when the scores are large)"
            )
        w2 = torch.exp2(lse_parts - (torch.logsumexp(lse_parts * LN2, dim=0) / LN2)).unsqueeze(-1)
        exp2_natural = torch.exp2(lse_parts - want_lse).unsqueeze(-1)  # powers of 2 of natural-log differences
        shifted = torch.exp(lse_parts - lse_parts.max(dim=0).values).unsqueeze(
            -1
        )  # shifted by the largest, not divided
        for cand, hint in (
            (
                o_parts.mean(dim=0),
                "a plain average gives every part the same weight; part i holds a share e^(lse_i - lse) of the total",
            ),
            (
                (o_parts * torch.exp(lse_parts).unsqueeze(-1)).sum(dim=0),
                "the weights e^lse_i must be divided by their sum, e^lse: use e^(lse_i - lse)",
            ),
            (
                (o_parts * shifted).sum(dim=0),
                "the weights e^(lse_i - m), shifted by the largest lse m, "
                "are not divided by their sum: part i weighs e^(lse_i - m) / sum_j e^(lse_j - m), which is "
                "e^(lse_i - lse)",
            ),
            (
                (o_parts * exp2_natural).sum(dim=0),
                "the weights are 2^(lse_i - lse), but lse_i and lse "
                "are natural logs: part i weighs e^(lse_i - lse) (torch.exp, not torch.exp2)",
            ),
            (
                (o_parts * w2).sum(dim=0),
                "the weights use powers of 2; the lse are natural logs, so part i weighs exp(lse_i - lse)",
            ),
        ):
            if torch.allclose(o64, cand, atol=1e-9, rtol=1e-9):
                raise Wrong(f"on {name}: {hint}")
        raise Wrong(f"on {name}: the output {first_mismatch(o64, want_o, 1e-9, 1e-9)}")
    return "the merged parts equal attention over all the keys, lse included"


def check_7_3(combine) -> None:
    """Exercise 7.3: ``combine(o_parts, lse_parts)`` merges n partial attention results."""
    check("7.3", "combine partial results by their LSE", combine, _trial_7_3)
