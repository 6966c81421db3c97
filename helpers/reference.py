"""Softmax in plain PyTorch: the naive version, the stable version, and the float64 reference
that every kernel in the course is checked against."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .checks import check_positive_int, check_tensor

NEG_INF = float("-inf")


def naive_softmax(x: torch.Tensor) -> torch.Tensor:
    """exp(x) / sum(exp(x)) over the last dimension, with no max shift.

    Deliberately unstable: float32 ``[1000, 1001, 1002]`` overflows exp to inf, and inf/inf is NaN.
    """
    check_tensor(x)
    numerator = torch.exp(x)
    denominator = numerator.sum(dim=-1, keepdim=True)
    return numerator / denominator


def stable_softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension with the max subtracted first: exp never sees a
    positive argument, so it cannot overflow. float16 and bfloat16 are computed in float32 (as
    torch.softmax and the course's kernels do: with 8 or 11 mantissa bits, x - max and the sum of
    the exps lose too much); same dtype out as in."""
    check_tensor(x)
    z = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    row_max = z.max(dim=-1, keepdim=True).values
    numerator = torch.exp(z - row_max)
    denominator = numerator.sum(dim=-1, keepdim=True)
    return (numerator / denominator).to(x.dtype)


def naive_softmax_rowwise(x: torch.Tensor) -> torch.Tensor:
    """The five-operation version the lessons count DRAM traffic for, on a 2-D (M, N) tensor:
    read x for the max, read x and the max to subtract, exp, sum, divide. Every op is a separate
    pass over memory."""
    check_tensor(x)
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D (rows, columns) for the row-wise version, got shape {tuple(x.shape)}.")
    x_max = x.max(dim=1)[0]  # read MN, write M
    z = x - x_max[:, None]  # read MN + M, write MN
    numerator = torch.exp(z)  # read MN, write MN
    denominator = numerator.sum(dim=1)  # read MN, write M
    return numerator / denominator[:, None]  # read MN + M, write MN


def reference_softmax(x: torch.Tensor) -> torch.Tensor:
    """The ground truth: ``torch.softmax`` computed in float64 on the CPU (a float64 tensor)."""
    check_tensor(x)
    return torch.softmax(x.detach().to("cpu", torch.float64), dim=-1)


@dataclass(frozen=True)
class ErrorReport:
    """How far ``out`` is from the float64 reference."""

    max_abs: float
    max_rel: float
    nan_mismatch: int
    shape: tuple
    dtype: str

    def ok(self, atol: float = 1e-6) -> bool:
        """No NaN mismatch and every element within ``atol`` of the reference."""
        return self.nan_mismatch == 0 and self.max_abs <= atol

    def __str__(self) -> str:
        nan = "" if not self.nan_mismatch else f", {self.nan_mismatch} NaN mismatches"
        return f"max abs err {self.max_abs:.1e}, max rel err {self.max_rel:.1e}{nan}"


def error_report(out: torch.Tensor, x_or_ref: torch.Tensor, *, is_reference: bool = False) -> ErrorReport:
    """Compare ``out`` with the float64 reference softmax of ``x`` (or with ``x_or_ref`` itself
    when ``is_reference=True``). Relative error is measured where the reference is above 1e-30.

    NaN positions must agree: a NaN in one and not the other counts as a mismatch, and NaNs in
    both places are left out of the abs/rel numbers."""
    check_tensor(out, "out")
    check_tensor(x_or_ref, "x")
    ref = x_or_ref.detach().to("cpu", torch.float64) if is_reference else reference_softmax(x_or_ref)
    got = out.detach().to("cpu", torch.float64)
    if got.shape != ref.shape:
        raise ValueError(f"out has shape {tuple(got.shape)} but the reference has {tuple(ref.shape)}.")
    nan_got, nan_ref = torch.isnan(got), torch.isnan(ref)
    mismatch = int((nan_got ^ nan_ref).sum())
    both = ~(nan_got | nan_ref)
    if both.any():
        diff = (got[both] - ref[both]).abs()
        diff = torch.nan_to_num(diff, nan=float("inf"))
        max_abs = float(diff.max())
        big = ref[both].abs() > 1e-30
        max_rel = float((diff[big] / ref[both][big].abs()).max()) if big.any() else 0.0
    else:
        max_abs = max_rel = 0.0
    return ErrorReport(max_abs, max_rel, mismatch, tuple(out.shape), str(out.dtype).replace("torch.", ""))


#: Tolerances for comparing a softmax output of a given dtype with the float64 reference.
TOLERANCES = {
    torch.float64: dict(atol=1e-12, rtol=1e-10),
    torch.float32: dict(atol=1e-6, rtol=1e-5),
    torch.float16: dict(atol=1e-3, rtol=1e-2),
    # bf16 keeps 8 bits of mantissa; the interpreter truncates fp32->bf16 stores (one ulp, 2**-8 relative)
    torch.bfloat16: dict(atol=8e-3, rtol=1.6e-2),
}


def assert_matches_reference(out: torch.Tensor, x: torch.Tensor) -> None:
    """``torch.testing.assert_close`` against the float64 reference with dtype-aware tolerances,
    NaN where the reference has NaN."""
    check_tensor(out, "out")
    ref = reference_softmax(x)
    tol = TOLERANCES[out.dtype]
    torch.testing.assert_close(out.detach().cpu().to(torch.float64), ref, equal_nan=True, **tol)


def round_up_err(err: float) -> str:
    """An error as the power of ten just above it ('< 1e-07'), or 'exact': stable across machines
    whose last bits differ."""
    if err != err:  # NaN
        return "NaN"
    if err == 0:
        return "exact"
    if math.isinf(err):
        return "inf"
    return f"< 1e{math.floor(math.log10(err)) + 1:+03d}"


def reference_attention(q, k, v, causal: bool = False, scale=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) in float64 on the CPU: ``scaled_dot_product_attention`` of the float64 inputs, and
    the natural-log log-sum-exp of each query's scaled (and masked) scores."""
    q64, k64, v64 = (t.detach().cpu().to(torch.float64) for t in (q, k, v))
    out = F.scaled_dot_product_attention(q64, k64, v64, is_causal=causal, scale=scale)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q64 @ k64.transpose(-2, -1)) * scale
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), NEG_INF)
    return out, torch.logsumexp(s, dim=-1)


def slice_stats(x: torch.Tensor, slices: int, slice_len: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Cut the last dimension of ``x`` into ``slices`` slices of ``slice_len`` columns (default
    ceil(N / slices)) and reduce each to (m, d), its max and sum of exp(x - m); empty: (-inf, 0)."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() == 0:
        raise TypeError("slice_stats: x must be a floating tensor with at least one dimension.")
    check_positive_int("slice_stats", "slices", slices, allow_none=False)
    N = x.shape[-1]
    L = slice_len if slice_len is not None else max(1, -(-N // slices))
    if L * slices < N:
        raise ValueError(f"slice_stats: {slices} slices of {L} columns do not cover {N} columns.")
    pad = torch.full((*x.shape[:-1], L * slices - N), -math.inf, dtype=x.dtype, device=x.device)
    parts = torch.cat([x, pad], dim=-1).reshape(*x.shape[:-1], slices, L)
    m = parts.max(dim=-1).values
    terms = torch.where(
        parts == -math.inf, torch.zeros((), dtype=x.dtype, device=x.device), torch.exp(parts - m.unsqueeze(-1))
    )
    return m, terms.sum(dim=-1)
