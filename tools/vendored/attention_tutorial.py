"""The forward of the official Triton fused-attention tutorial, for measurement beside the course's
kernel (tools/attention_bench.py, provider ``tutorial``). Not part of the course: vendored peer code.

Source: python/tutorials/06-fused-attention.py of https://github.com/triton-lang/triton, as of
Triton 3.4-3.6 (tensor descriptors, autotuned configurations, warp specialization on Hopper for the
non-causal case); Triton is MIT-licensed (Copyright 2018-2020 Philippe Tillet, 2020-2022 OpenAI),
and the tutorial credits Tri Dao's FlashAttention-2 paper. Only the forward is copied. Changes: the
head offset is off_z * H * N_CTX + off_h * N_CTX (upstream's off_z + off_h * N_CTX is wrong when
batch > 1); the tile dtype comes from the inputs (DTYPE), so bfloat16 works; ``precompile`` (ours)
compiles every configuration the autotuner may try, so that several processes can fill Triton's
on-disk cache at once. Inputs: contiguous (Z, H, N_CTX, D), float16 or bfloat16, on a GPU.
"""
import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


def is_hopper():
    return torch.cuda.get_device_capability()[0] == 9


def _host_descriptor_pre_hook(nargs):
    BLOCK_M = nargs["BLOCK_M"]
    BLOCK_N = nargs["BLOCK_N"]
    HEAD_DIM = nargs["HEAD_DIM"]
    if not isinstance(nargs["desc_q"], TensorDescriptor):
        return
    nargs["desc_q"].block_shape = [BLOCK_M, HEAD_DIM]
    nargs["desc_v"].block_shape = [BLOCK_N, HEAD_DIM]
    nargs["desc_k"].block_shape = [BLOCK_N, HEAD_DIM]
    nargs["desc_o"].block_shape = [BLOCK_M, HEAD_DIM]


NUM_STAGES_OPTIONS = [2, 3, 4]
configs = [
    triton.Config({'BLOCK_M': BM, 'BLOCK_N': BN}, num_stages=s, num_warps=w, pre_hook=_host_descriptor_pre_hook)
    for BM in [64, 128] for BN in [32, 64, 128] for s in NUM_STAGES_OPTIONS for w in [4, 8]
]


def keep(conf):
    BLOCK_M = conf.kwargs["BLOCK_M"]
    BLOCK_N = conf.kwargs["BLOCK_N"]
    return not (torch.cuda.get_device_capability()[0] == 9 and BLOCK_M * BLOCK_N < 128 * 128 and conf.num_warps == 8)


def prune_invalid_configs(configs, named_args, **kwargs):
    N_CTX = kwargs["N_CTX"]
    STAGE = kwargs["STAGE"]
    return [conf for conf in configs if conf.kwargs.get("BLOCK_M", 0) <= N_CTX and (
        conf.kwargs.get("BLOCK_M", 0) >= conf.kwargs.get("BLOCK_N", 0) or STAGE == 1)]


KEPT = list(filter(keep, configs))


@triton.jit
def _attn_fwd_inner(acc, l_i, m_i, q, desc_k, desc_v, offset_y, dtype: tl.constexpr, start_m, qk_scale,
                    BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, STAGE: tl.constexpr,
                    offs_m: tl.constexpr, offs_n: tl.constexpr, N_CTX: tl.constexpr, warp_specialize: tl.constexpr):
    if STAGE == 1:
        lo, hi = 0, start_m * BLOCK_M
    elif STAGE == 2:
        lo, hi = start_m * BLOCK_M, (start_m + 1) * BLOCK_M
        lo = tl.multiple_of(lo, BLOCK_M)
    else:
        lo, hi = 0, N_CTX
    offsetk_y = offset_y + lo
    offsetv_y = offset_y + lo
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=warp_specialize):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = desc_k.load([offsetk_y, 0]).T
        qk = tl.dot(q, k)
        if STAGE == 2:
            mask = offs_m[:, None] >= (start_n + offs_n[None, :])
            qk = qk * qk_scale + tl.where(mask, 0, -1.0e6)
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk -= m_ij[:, None]
        else:
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        p = tl.math.exp2(qk)
        alpha = tl.math.exp2(m_i - m_ij)
        l_ij = tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = desc_v.load([offsetv_y, 0])
        p = p.to(dtype)
        acc = tl.dot(p, v, acc)
        l_i = l_i * alpha + l_ij
        m_i = m_ij
        offsetk_y += BLOCK_N
        offsetv_y += BLOCK_N
    return acc, l_i, m_i


@triton.jit
def _maybe_make_tensor_desc(desc_or_ptr, shape, strides, block_shape):
    if isinstance(desc_or_ptr, tl.tensor_descriptor):
        return desc_or_ptr
    else:
        return tl.make_tensor_descriptor(desc_or_ptr, shape, strides, block_shape)


@triton.jit
def _attn_fwd_body(sm_scale, M, Z, H, desc_q, desc_k, desc_v, desc_o, N_CTX, HEAD_DIM: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DTYPE: tl.constexpr, STAGE: tl.constexpr,
                   warp_specialize: tl.constexpr):
    dtype = DTYPE
    tl.static_assert(BLOCK_N <= HEAD_DIM)
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = off_hz // H
    off_h = off_hz % H
    y_dim = Z * H * N_CTX
    desc_q = _maybe_make_tensor_desc(desc_q, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1], block_shape=[BLOCK_M, HEAD_DIM])
    desc_v = _maybe_make_tensor_desc(desc_v, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1], block_shape=[BLOCK_N, HEAD_DIM])
    desc_k = _maybe_make_tensor_desc(desc_k, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1], block_shape=[BLOCK_N, HEAD_DIM])
    desc_o = _maybe_make_tensor_desc(desc_o, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1], block_shape=[BLOCK_M, HEAD_DIM])
    offset_y = off_z * (N_CTX * H) + off_h * N_CTX  # fixed: upstream has off_z + off_h * N_CTX
    qo_offset_y = offset_y + start_m * BLOCK_M
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale
    qk_scale *= 1.44269504
    q = desc_q.load([qo_offset_y, 0])
    if STAGE & 1:
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, desc_k, desc_v, offset_y, dtype, start_m, qk_scale,
                                        BLOCK_M, HEAD_DIM, BLOCK_N, 4 - STAGE, offs_m, offs_n, N_CTX, warp_specialize)
    if STAGE & 2:
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, desc_k, desc_v, offset_y, dtype, start_m, qk_scale,
                                        BLOCK_M, HEAD_DIM, BLOCK_N, 2, offs_m, offs_n, N_CTX, warp_specialize)
    m_i += tl.math.log2(l_i)
    acc = acc / l_i[:, None]
    m_ptrs = M + off_hz * N_CTX + offs_m
    tl.store(m_ptrs, m_i)
    desc_o.store([qo_offset_y, 0], acc.to(dtype))


_attn_fwd = triton.autotune(configs=KEPT, key=["N_CTX", "HEAD_DIM", "DTYPE", "warp_specialize", "STAGE"],
                            prune_configs_by={'early_config_prune': prune_invalid_configs})(_attn_fwd_body)


def _alloc_fn(size, align, _):
    return torch.empty(size, dtype=torch.int8, device="cuda")


def _args(q, k, v, causal, sm_scale, warp_specialize):
    HEAD_DIM_K = q.shape[-1]
    o = torch.empty_like(q)
    stage = 3 if causal else 1
    M = torch.empty((q.shape[0], q.shape[1], q.shape[2]), device=q.device, dtype=torch.float32)
    if not (is_hopper() and warp_specialize):  # upstream: host descriptors, except Hopper + warp specialization
        y_dim = q.shape[0] * q.shape[1] * q.shape[2]
        dummy = [1, 1]
        desc_q = TensorDescriptor(q, shape=[y_dim, HEAD_DIM_K], strides=[HEAD_DIM_K, 1], block_shape=dummy)
        desc_v = TensorDescriptor(v, shape=[y_dim, HEAD_DIM_K], strides=[HEAD_DIM_K, 1], block_shape=dummy)
        desc_k = TensorDescriptor(k, shape=[y_dim, HEAD_DIM_K], strides=[HEAD_DIM_K, 1], block_shape=dummy)
        desc_o = TensorDescriptor(o, shape=[y_dim, HEAD_DIM_K], strides=[HEAD_DIM_K, 1], block_shape=dummy)
    else:
        desc_q, desc_v, desc_k, desc_o = q, v, k, o
    triton.set_allocator(_alloc_fn)
    dt = {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}[q.dtype]
    args = (sm_scale, M, q.shape[0], q.shape[1], desc_q, desc_k, desc_v, desc_o)
    kw = dict(N_CTX=q.shape[2], HEAD_DIM=HEAD_DIM_K, DTYPE=dt, STAGE=stage, warp_specialize=warp_specialize)
    return o, args, kw


def tutorial_forward(q, k, v, causal, sm_scale, warp_specialize=None):
    """The tutorial's forward; warp_specialize None: as its benchmark on Hopper (on when not causal)."""
    if warp_specialize is None:
        warp_specialize = is_hopper() and not causal
    o, args, kw = _args(q, k, v, causal, sm_scale, warp_specialize)
    grid = lambda META: (triton.cdiv(q.shape[2], META["BLOCK_M"]), q.shape[0] * q.shape[1], 1)
    _attn_fwd[grid](*args, **kw)
    return o


def configs_for(D, causal, S):
    """The configurations the autotuner may try at this key (its prune, and BLOCK_N <= HEAD_DIM)."""
    return [c for c in prune_invalid_configs(KEPT, None, N_CTX=S, STAGE=3 if causal else 1) if c.kwargs["BLOCK_N"] <= D]


def precompile_job(job):
    """Compile (by running it once) configuration ``index`` of configs_for(D, causal, S) at the
    inputs' exact shape (Triton specializes on the batch and head counts too), so that the
    autotuner later finds it in Triton's on-disk cache. job: (B, H, S, D, dtype, causal, index).
    Returns None, or the error of a configuration that does not compile (the autotuner skips those)."""
    B, H, S, D, dtype, causal, index = job
    conf = configs_for(D, causal, S)[index]
    try:
        q, k, v = (torch.zeros(B, H, S, D, device="cuda", dtype=dtype) for _ in range(3))
        warp_specialize = is_hopper() and not causal
        o, args, kw = _args(q, k, v, causal, 1.0 / D ** 0.5, warp_specialize)
        nargs = dict(desc_q=args[4], desc_k=args[5], desc_v=args[6], desc_o=args[7], HEAD_DIM=kw["HEAD_DIM"], **conf.kwargs)
        _host_descriptor_pre_hook(nargs)
        grid = (triton.cdiv(S, conf.kwargs["BLOCK_M"]), B * H, 1)
        _attn_fwd_body[grid](*args, **kw, **conf.kwargs, num_warps=conf.num_warps, num_stages=conf.num_stages)
        torch.cuda.synchronize()
        return None
    except Exception as e:  # out of shared memory, say: the autotuner skips it too
        return f"{conf}: {type(e).__name__}"
