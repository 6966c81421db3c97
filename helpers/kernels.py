"""The course's Triton softmax kernels, one per lesson, and the wrappers that launch them.

Every public function takes a floating tensor of any shape (at least one dimension) and returns
the softmax over its last dimension: same shape, dtype and device, a new tensor (the input is
never modified). fp16/bf16 are computed in fp32 inside the kernel, float64 in float64.

Lesson 03: ``softmax_fused``       one program per row, the whole row in one block.
Lesson 04: ``softmax_three_pass``  a loop over the row in blocks: max, then sum, then normalize.
           ``softmax_online``      the same loop with the max and the sum in one pass (online).
Lesson 05: ``softmax_persistent``  as many programs as the GPU keeps resident, each looping over rows.
           ``softmax``             the course's best answer for any shape.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .checks import as_rows, check_tensor
from .mode import ON_GPU

#: The longest row the single-block kernels accept. Past it the block no longer fits on chip
#: (Triton refuses blocks of more than 2**20 elements; long before that, registers spill):
#: use ``softmax_online``. Lesson 03 measures where the fused kernel stops being fast.
MAX_FUSED_COLS = 65536

#: Under the interpreter, the persistent kernel runs this many programs (there is no GPU to size
#: the grid from); an odd number, so the grid-stride loop really loops and splits rows unevenly.
INTERPRETER_PROGRAMS = 3


# --------------------------------------------------------------------------------------------
# Shared plumbing
# --------------------------------------------------------------------------------------------


def _acc_dtype(dtype: torch.dtype):
    """The type the kernels compute in: fp32 for 16- and 32-bit inputs, fp64 for fp64."""
    return tl.float64 if dtype == torch.float64 else tl.float32


def num_warps_for(block_size: int) -> int:
    """Warps per program for a row block of ``block_size`` elements (the tutorial's rule):
    more threads for longer rows, so each thread holds a bounded number of elements."""
    if block_size >= 8192:
        return 16
    if block_size >= 2048:
        return 8
    return 4


def _prepare(x: torch.Tensor, name: str = "x"):
    """Validate ``x`` and return (x2d, out2d, n_rows, n_cols); out2d is a fresh contiguous tensor."""
    check_tensor(x, name, kernel=True)
    x2 = as_rows(x)
    n_rows, n_cols = x2.shape
    out = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    return x2, out, n_rows, n_cols


def _check_fused_len(n_cols: int, fn_name: str) -> None:
    if n_cols > MAX_FUSED_COLS:
        raise ValueError(
            f"{fn_name} keeps a whole row in one block, and rows of {n_cols} columns are longer than "
            f"its limit of {MAX_FUSED_COLS}: use helpers.softmax_online(x) (which loops over the row "
            f"in blocks) or helpers.softmax(x)."
        )


# --------------------------------------------------------------------------------------------
# Lesson 03: one program per row, the whole row in one block
# --------------------------------------------------------------------------------------------


@triton.jit
def softmax_fused_kernel(
    out_ptr, in_ptr,
    in_row_stride, in_col_stride, out_row_stride,
    n_cols,
    BLOCK_SIZE: tl.constexpr,  # a power of two >= n_cols
    ACC: tl.constexpr,  # the type to compute in (fp32, or fp64 for fp64 inputs)
):
    # One program per row: which row is mine?
    row = tl.program_id(0).to(tl.int64)  # 64-bit, so row * stride cannot overflow
    row_start = in_ptr + row * in_row_stride
    # The row's column offsets, padded up to the power-of-two block.
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    # Padding lanes read -inf: they cannot win the max, and exp(-inf) = 0 adds nothing to the sum.
    x = tl.load(row_start + cols * in_col_stride, mask=mask, other=-float("inf")).to(ACC)
    # The stable softmax, all in registers: one read of x, one write of y.
    row_max = tl.max(x, axis=0)
    numerator = tl.exp(x - row_max)
    denominator = tl.sum(numerator, axis=0)
    y = numerator / denominator
    tl.store(out_ptr + row * out_row_stride + cols, y, mask=mask)


def softmax_fused(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim with one Triton program per row (lesson 03)."""
    x2, out, n_rows, n_cols = _prepare(x)
    if out.numel() == 0:
        return out.view(x.shape)
    _check_fused_len(n_cols, "softmax_fused")
    block = triton.next_power_of_2(n_cols)
    softmax_fused_kernel[(n_rows,)](
        out, x2,
        x2.stride(0), x2.stride(1), out.stride(0),
        n_cols,
        BLOCK_SIZE=block, ACC=_acc_dtype(x.dtype),
        num_warps=num_warps_for(block),
    )
    return out.view(x.shape)


# --------------------------------------------------------------------------------------------
# Lesson 04: loop over the row in blocks
# --------------------------------------------------------------------------------------------


@triton.jit
def softmax_three_pass_kernel(
    out_ptr, in_ptr,
    in_row_stride, in_col_stride, out_row_stride,
    n_cols,
    BLOCK_SIZE: tl.constexpr,
    ACC: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    row_start = in_ptr + row * in_row_stride
    out_start = out_ptr + row * out_row_stride
    cols = tl.arange(0, BLOCK_SIZE)
    # Pass 1: the row's maximum, one block at a time.
    row_max = tl.full((), -float("inf"), ACC)
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + cols
        x = tl.load(row_start + offs * in_col_stride, mask=offs < n_cols, other=-float("inf")).to(ACC)
        row_max = tl.maximum(row_max, tl.max(x, axis=0))
    # Pass 2: the sum of exp(x - max), reading the row again.
    denominator = tl.zeros((), ACC)
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + cols
        x = tl.load(row_start + offs * in_col_stride, mask=offs < n_cols, other=-float("inf")).to(ACC)
        denominator += tl.sum(tl.exp(x - row_max), axis=0)
    # Pass 3: read the row a third time, normalize, write.
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + cols
        mask = offs < n_cols
        x = tl.load(row_start + offs * in_col_stride, mask=mask, other=-float("inf")).to(ACC)
        tl.store(out_start + offs, tl.exp(x - row_max) / denominator, mask=mask)


@triton.jit
def softmax_online_kernel(
    out_ptr, in_ptr,
    in_row_stride, in_col_stride, out_row_stride,
    n_cols,
    BLOCK_SIZE: tl.constexpr,
    ACC: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    row_start = in_ptr + row * in_row_stride
    out_start = out_ptr + row * out_row_stride
    cols = tl.arange(0, BLOCK_SIZE)
    # Pass 1 (online): a running max m and a running sum d of exp(x - m).
    m = tl.full((), -float("inf"), ACC)
    d = tl.zeros((), ACC)
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + cols
        x = tl.load(row_start + offs * in_col_stride, mask=offs < n_cols, other=-float("inf")).to(ACC)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        # When the max grows, everything summed so far was scaled by exp(-m): rescale it to exp(-m_new).
        # A -inf input adds exactly 0 (even while m_new is still -inf, where exp(-inf - -inf) is NaN).
        alpha = tl.where(m_new == -float("inf"), 1.0, tl.exp(m - m_new))
        block_sum = tl.sum(tl.where(x == -float("inf"), 0.0, tl.exp(x - m_new)), axis=0)
        d = d * alpha + block_sum
        m = m_new
    # Pass 2: normalize with the final (m, d) and write.
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + cols
        mask = offs < n_cols
        x = tl.load(row_start + offs * in_col_stride, mask=mask, other=-float("inf")).to(ACC)
        tl.store(out_start + offs, tl.exp(x - m) / d, mask=mask)


def _looped_block(n_cols: int, block_size: int | None, fn_name: str) -> int:
    if block_size is None:
        return min(triton.next_power_of_2(max(n_cols, 1)), 4096)
    if isinstance(block_size, bool) or not isinstance(block_size, int):
        raise TypeError(f"{fn_name}: block_size must be an int (a power of two) or None, got {block_size!r}.")
    if block_size < 1 or block_size & (block_size - 1):
        raise ValueError(
            f"{fn_name}: block_size must be a power of two (Triton's tl.arange needs one), got {block_size}: "
            f"try {triton.next_power_of_2(max(block_size, 1))}."
        )
    if block_size > MAX_FUSED_COLS:
        raise ValueError(f"{fn_name}: block_size {block_size} is larger than the on-chip limit {MAX_FUSED_COLS}.")
    return block_size


def _launch_looped(kernel, x, block_size, fn_name):
    x2, out, n_rows, n_cols = _prepare(x)
    block = _looped_block(n_cols, block_size, fn_name)
    if out.numel() == 0:
        return out.view(x.shape)
    kernel[(n_rows,)](
        out, x2,
        x2.stride(0), x2.stride(1), out.stride(0),
        n_cols,
        BLOCK_SIZE=block, ACC=_acc_dtype(x.dtype),
        num_warps=num_warps_for(block),
    )
    return out.view(x.shape)


def softmax_three_pass(x: torch.Tensor, block_size: int | None = None) -> torch.Tensor:
    """Softmax that loops over each row in blocks of ``block_size``: max, sum, normalize (3 reads)."""
    return _launch_looped(softmax_three_pass_kernel, x, block_size, "softmax_three_pass")


def softmax_online(x: torch.Tensor, block_size: int | None = None) -> torch.Tensor:
    """Softmax that loops over each row in blocks: an online pass for (max, sum), then a
    normalizing pass (2 reads). Works for rows of any length (lesson 04)."""
    return _launch_looped(softmax_online_kernel, x, block_size, "softmax_online")


# --------------------------------------------------------------------------------------------
# Lesson 05: a persistent grid sized from the compiled kernel
# --------------------------------------------------------------------------------------------


@triton.jit
def softmax_persistent_kernel(
    out_ptr, in_ptr,
    in_row_stride, in_col_stride, out_row_stride,
    n_rows, n_cols,
    BLOCK_SIZE: tl.constexpr,
    ACC: tl.constexpr,
    NUM_STAGES: tl.constexpr,  # how many rows' loads the compiler may keep in flight
):
    first_row = tl.program_id(0).to(tl.int64)  # 64-bit, so the loop's row * stride cannot overflow
    row_step = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    # Grid-stride loop: program p takes rows p, p + P, p + 2P, ...
    for row in tl.range(first_row, n_rows, row_step, num_stages=NUM_STAGES):
        x = tl.load(in_ptr + row * in_row_stride + cols * in_col_stride, mask=mask, other=-float("inf")).to(ACC)
        row_max = tl.max(x, axis=0)
        numerator = tl.exp(x - row_max)
        denominator = tl.sum(numerator, axis=0)
        tl.store(out_ptr + row * out_row_stride + cols, numerator / denominator, mask=mask)


def occupancy(n_regs: int, shared_bytes: int, num_warps: int, props: dict) -> dict:
    """How many programs of a compiled kernel one SM keeps resident, and which limit binds.

    ``props`` needs: ``regs_per_sm``, ``shared_per_sm``, ``max_threads_per_sm``,
    ``max_blocks_per_sm``, ``warp_size``. Registers are granted per warp, in units of 256.
    """
    for key in ("regs_per_sm", "shared_per_sm", "max_threads_per_sm", "max_blocks_per_sm", "warp_size"):
        if key not in props:
            raise KeyError(f"occupancy(): props is missing {key!r} (see helpers.gpu_props()).")
        if isinstance(props[key], bool) or not isinstance(props[key], int) or props[key] < 1:
            raise ValueError(f"occupancy(): props[{key!r}] must be a positive int, got {props[key]!r}.")
    for name, val, low in (("n_regs", n_regs, 1), ("num_warps", num_warps, 1), ("shared_bytes", shared_bytes, 0)):
        if isinstance(val, bool) or not isinstance(val, int) or val < low:
            what = "a positive int" if low else "a non-negative int"
            raise ValueError(f"occupancy(): {name} must be {what}, got {val!r}.")
    warp = props["warp_size"]
    regs_per_warp = -(-n_regs * warp // 256) * 256
    # Ties go to the first limit listed; a kernel without shared memory is never limited by it.
    limits = {
        "registers": props["regs_per_sm"] // (regs_per_warp * num_warps),
        "threads": props["max_threads_per_sm"] // (warp * num_warps),
        "blocks": props["max_blocks_per_sm"],
        "shared memory": props["shared_per_sm"] // shared_bytes if shared_bytes > 0 else props["max_blocks_per_sm"],
    }
    per_sm = min(limits.values())
    binding = min(limits, key=lambda k: limits[k])
    return {"programs_per_sm": per_sm, "limited_by": binding, "limits": limits}


def gpu_props(device=None) -> dict:
    """The active GPU's limits that occupancy() needs (GPU mode only)."""
    if not ON_GPU:
        raise RuntimeError(
            "gpu_props() needs a GPU, and this run uses Triton's interpreter on the CPU: "
            "use helpers.gpu_data.recorded_props() for the recorded values of a real GPU."
        )
    p = torch.cuda.get_device_properties(device or torch.cuda.current_device())
    return {
        "name": p.name,
        "sm_count": p.multi_processor_count,
        "regs_per_sm": p.regs_per_multiprocessor,
        "shared_per_sm": p.shared_memory_per_multiprocessor,
        "max_threads_per_sm": p.max_threads_per_multi_processor,
        "max_blocks_per_sm": getattr(p, "max_blocks_per_multi_processor", 32),
        "warp_size": p.warp_size,
        "l2_bytes": getattr(p, "L2_cache_size", 0),
    }


_PERSISTENT_CACHE: dict = {}


def persistent_launch_info(x2: torch.Tensor, out: torch.Tensor, block: int, num_warps: int, num_stages: int) -> dict:
    """Compile the persistent kernel for these arguments (GPU only) and size its grid.

    Returns n_regs, n_spills, shared bytes, the occupancy breakdown and ``programs``
    (SM count x programs per SM)."""
    n_rows, n_cols = x2.shape
    key = (x2.dtype, block, num_warps, num_stages, x2.stride(1) == 1, x2.stride(0) % 16 == 0)
    if key not in _PERSISTENT_CACHE:
        compiled = softmax_persistent_kernel.warmup(
            out, x2, x2.stride(0), x2.stride(1), out.stride(0), n_rows, n_cols,
            BLOCK_SIZE=block, ACC=_acc_dtype(x2.dtype), NUM_STAGES=num_stages,
            num_warps=num_warps, grid=(1,),
        )
        compiled._init_handles()
        props = gpu_props()
        occ = occupancy(compiled.n_regs, compiled.metadata.shared, num_warps, props)
        _PERSISTENT_CACHE[key] = {
            "n_regs": compiled.n_regs,
            "n_spills": compiled.n_spills,
            "shared": compiled.metadata.shared,
            "num_warps": num_warps,
            "num_stages": num_stages,
            "block": block,
            **occ,
            "programs": props["sm_count"] * occ["programs_per_sm"],
        }
    return _PERSISTENT_CACHE[key]


def softmax_persistent(
    x: torch.Tensor, num_programs: int | None = None, num_warps: int | None = None, num_stages: int = 2
) -> torch.Tensor:
    """Softmax with a persistent grid: on a GPU, as many programs as it keeps resident (sized from
    the compiled kernel's registers and shared memory), each looping over rows (lesson 05).

    ``num_programs`` overrides the grid size (lesson 05 sweeps it); under the interpreter the
    default is ``INTERPRETER_PROGRAMS``."""
    for name, val in (("num_programs", num_programs), ("num_warps", num_warps), ("num_stages", num_stages)):
        if val is not None and (isinstance(val, bool) or not isinstance(val, int) or val < 1):
            raise ValueError(f"softmax_persistent: {name} must be a positive int, got {val!r}.")
    x2, out, n_rows, n_cols = _prepare(x)
    if out.numel() == 0:
        return out.view(x.shape)
    _check_fused_len(n_cols, "softmax_persistent")
    block = triton.next_power_of_2(n_cols)
    warps = num_warps or num_warps_for(block)
    if num_programs is None:
        num_programs = persistent_launch_info(x2, out, block, warps, num_stages)["programs"] if ON_GPU else INTERPRETER_PROGRAMS
    grid = (min(num_programs, n_rows),)
    softmax_persistent_kernel[grid](
        out, x2,
        x2.stride(0), x2.stride(1), out.stride(0),
        n_rows, n_cols,
        BLOCK_SIZE=block, ACC=_acc_dtype(x.dtype), NUM_STAGES=num_stages,
        num_warps=warps,
    )
    return out.view(x.shape)


# --------------------------------------------------------------------------------------------
# Lesson 05 (end): the tiled kernel behind `softmax` for rows that fit on chip
# --------------------------------------------------------------------------------------------


@triton.jit
def softmax_tiled_kernel(
    out_ptr, in_ptr,
    in_row_stride, in_col_stride, out_row_stride,
    n_rows, n_cols,
    BLOCK_M: tl.constexpr,  # rows per tile: short rows are batched so each program moves enough bytes
    BLOCK_N: tl.constexpr,  # a power of two >= n_cols
    ACC: tl.constexpr,
    NUM_STAGES: tl.constexpr,  # tiles whose loads may be in flight at once (persistent grids)
):
    # Each program walks tiles pid, pid + P, ...: with one program per tile the loop runs once;
    # with a persistent grid, the compiler prefetches the next tile while this one is computed.
    n_tiles = tl.cdiv(n_rows, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    first_tile = tl.program_id(0).to(tl.int64)  # 64-bit, so row * stride cannot overflow
    for tile in tl.range(first_tile, n_tiles, tl.num_programs(0), num_stages=NUM_STAGES):
        rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)
        mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
        x = tl.load(
            in_ptr + rows[:, None] * in_row_stride + cols[None, :] * in_col_stride,
            mask=mask, other=-float("inf"), eviction_policy="evict_first",
        ).to(ACC)
        row_max = tl.max(x, axis=1)
        numerator = tl.exp(x - row_max[:, None])
        inv_denominator = 1.0 / tl.sum(numerator, axis=1)  # one division per row, then multiplies
        tl.store(out_ptr + rows[:, None] * out_row_stride + cols[None, :], numerator * inv_denominator[:, None], mask=mask)


#: (element size, BLOCK_N) -> (rows per tile, num_warps, num_stages, programs per SM or 0 for one
#: program per tile). Read off the tuning sweeps on an H200 at M=4096 (figures/data/tuning_tiled*.csv;
#: PERFORMANCE.md says how): short rows batch several rows per tile, long ones take a persistent
#: grid that prefetches the next row (num_stages) while this one is computed.
TILED_TABLE: dict = {
    (4, 256): (4, 1, 1, 0), (4, 512): (2, 2, 1, 0), (4, 1024): (4, 4, 1, 0), (4, 2048): (2, 4, 1, 0),
    (4, 4096): (1, 16, 1, 0), (4, 8192): (1, 16, 1, 0), (4, 16384): (1, 32, 1, 0), (4, 32768): (1, 32, 2, 2),
    (2, 256): (2, 2, 1, 0), (2, 512): (2, 4, 1, 0), (2, 1024): (2, 4, 1, 0), (2, 2048): (4, 4, 1, 0),
    (2, 4096): (2, 8, 1, 0), (2, 8192): (1, 16, 1, 0), (2, 16384): (1, 16, 3, 2), (2, 32768): (1, 32, 3, 1),
}


def tiled_config(n_cols: int, dtype: torch.dtype) -> tuple[int, int, int, int]:
    """(rows per tile, num_warps, num_stages, programs per SM; 0 = one program per tile) for the
    tiled kernel: the measured table where it has an entry, else a rule of thumb (~16 KiB a tile)."""
    block_n = triton.next_power_of_2(max(n_cols, 1))
    es = dtype.itemsize
    if (es, block_n) in TILED_TABLE:
        return TILED_TABLE[(es, block_n)]
    block_m = max(1, min(64, 16384 // (block_n * es)))
    tile = block_m * block_n
    warps = 1 if tile <= 512 else 2 if tile <= 1024 else 4 if tile <= 4096 else 8 if tile <= 8192 else 16 if tile <= 16384 else 32
    return block_m, warps, 1, 0


def softmax_tiled(
    x: torch.Tensor, block_m: int | None = None, num_warps: int | None = None,
    num_stages: int | None = None, programs_per_sm: int | None = None,
) -> torch.Tensor:
    """Softmax with 2-D tiles of ``block_m`` whole rows (the fast path of ``softmax``).
    ``programs_per_sm`` > 0 makes the grid persistent (GPU only; the interpreter runs
    ``INTERPRETER_PROGRAMS``)."""
    x2, out, n_rows, n_cols = _prepare(x)
    if out.numel() == 0:
        return out.view(x.shape)
    _check_fused_len(n_cols, "softmax_tiled")
    for name, val, low in (("block_m", block_m, 1), ("num_warps", num_warps, 1), ("num_stages", num_stages, 1),
                           ("programs_per_sm", programs_per_sm, 0)):
        if val is not None and (isinstance(val, bool) or not isinstance(val, int) or val < low):
            raise ValueError(f"softmax_tiled: {name} must be an int >= {low} (or None for the tuned value), got {val!r}.")
    if block_m is not None and block_m & (block_m - 1):
        raise ValueError(f"softmax_tiled: block_m must be a power of two (Triton's tl.arange needs one), got {block_m}.")
    bm, nw, ns, pps = tiled_config(n_cols, x.dtype)
    bm = bm if block_m is None else block_m
    nw = nw if num_warps is None else num_warps
    ns = ns if num_stages is None else num_stages
    pps = pps if programs_per_sm is None else programs_per_sm
    n_tiles = triton.cdiv(n_rows, bm)
    if pps:
        grid = min(n_tiles, _sm_count() * pps if ON_GPU else INTERPRETER_PROGRAMS)
    else:
        grid = n_tiles
    softmax_tiled_kernel[(grid,)](
        out, x2,
        x2.stride(0), x2.stride(1), out.stride(0),
        n_rows, n_cols,
        BLOCK_M=bm, BLOCK_N=triton.next_power_of_2(n_cols), ACC=_acc_dtype(x.dtype), NUM_STAGES=ns,
        num_warps=nw,
    )
    return out.view(x.shape)


_SM_COUNT: list = []


def _sm_count() -> int:
    if not _SM_COUNT:
        _SM_COUNT.append(torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count)
    return _SM_COUNT[0]


# --------------------------------------------------------------------------------------------
# Lesson 06: one row split across many programs
# --------------------------------------------------------------------------------------------


@triton.jit
def softmax_split_stats_kernel(
    stats_ptr, in_ptr,
    in_row_stride, in_col_stride,
    n_cols, slice_len, n_slices,
    BLOCK_SIZE: tl.constexpr,
):
    # Program (row, s) reduces columns [s * slice_len, (s + 1) * slice_len) of its row to the pair
    # (m, d): the slice's max and sum of exp(x - m), with lesson 04's online update per block.
    row = tl.program_id(0).to(tl.int64)
    s = tl.program_id(1)
    start = s.to(tl.int64) * slice_len
    cols = tl.arange(0, BLOCK_SIZE)
    m = tl.full((), -float("inf"), tl.float32)
    d = tl.zeros((), tl.float32)
    for off in range(0, slice_len, BLOCK_SIZE):
        c = start + off + cols
        x = tl.load(in_ptr + row * in_row_stride + c * in_col_stride, mask=c < n_cols,
                    other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        alpha = tl.where(m_new == -float("inf"), 1.0, tl.exp(m - m_new))
        d = d * alpha + tl.sum(tl.where(x == -float("inf"), 0.0, tl.exp(x - m_new)), axis=0)
        m = m_new
    tl.store(stats_ptr + (row * n_slices + s) * 2, m)
    tl.store(stats_ptr + (row * n_slices + s) * 2 + 1, d)


@triton.jit
def softmax_split_normalize_kernel(
    out_ptr, in_ptr, stats_ptr,
    in_row_stride, in_col_stride, out_row_stride,
    n_cols, slice_len, n_slices,
    BLOCK_SIZE: tl.constexpr,
    SLICES_P2: tl.constexpr,  # n_slices rounded up to a power of two
):
    row = tl.program_id(0).to(tl.int64)
    s = tl.program_id(1)
    # Merge every slice's (m, d) into the row's: M = max m_s, D = sum d_s * exp(m_s - M).
    k = tl.arange(0, SLICES_P2)
    m_s = tl.load(stats_ptr + (row * n_slices + k) * 2, mask=k < n_slices, other=-float("inf"))
    d_s = tl.load(stats_ptr + (row * n_slices + k) * 2 + 1, mask=k < n_slices, other=0.0)
    m_row = tl.max(m_s, axis=0)
    d_row = tl.sum(tl.where(d_s == 0.0, 0.0, d_s * tl.exp(m_s - m_row)), axis=0)
    inv_d = 1.0 / d_row
    # Read this slice again (from L2 when it is still there), normalize, write.
    start = s.to(tl.int64) * slice_len
    cols = tl.arange(0, BLOCK_SIZE)
    for off in range(0, slice_len, BLOCK_SIZE):
        c = start + off + cols
        mask = c < n_cols
        x = tl.load(in_ptr + row * in_row_stride + c * in_col_stride, mask=mask, other=-float("inf")).to(tl.float32)
        tl.store(out_ptr + row * out_row_stride + c, tl.exp(x - m_row) * inv_d, mask=mask)


def split_plan(n_rows: int, n_cols: int, element_size: int, target_programs: int | None = None) -> dict:
    """How to cut rows into slices: enough programs to fill the GPU (``target_programs``, default
    8 per SM), each slice a whole number of blocks."""
    target = target_programs or (_sm_count() * 8 if ON_GPU else 8)
    block = min(4096 if element_size >= 4 else 8192, triton.next_power_of_2(max(n_cols, 1)))
    blocks_per_row = triton.cdiv(n_cols, block)
    slices = max(1, min(blocks_per_row, triton.cdiv(target, max(n_rows, 1))))
    slice_len = triton.cdiv(blocks_per_row, slices) * block
    return {"block": block, "slices": triton.cdiv(n_cols, slice_len), "slice_len": slice_len}


def softmax_split(x: torch.Tensor, slices: int | None = None, block_size: int | None = None) -> torch.Tensor:
    """Softmax with each row cut into ``slices`` slices, one program each (lesson 06): a first launch
    writes every slice's (max, sum) pair, a second merges the pairs of a row and normalizes each
    slice. For few, long rows, where one program per row cannot fill the GPU."""
    x2, out, n_rows, n_cols = _prepare(x)
    if out.numel() == 0:
        return out.view(x.shape)
    if x.dtype == torch.float64:
        return softmax_online(x)  # the split kernels keep fp32 statistics
    plan = split_plan(n_rows, n_cols, x.element_size())
    block = plan["block"] if block_size is None else _looped_block(n_cols, block_size, "softmax_split")
    if slices is not None:
        if isinstance(slices, bool) or not isinstance(slices, int) or slices < 1:
            raise ValueError(f"softmax_split: slices must be a positive int, got {slices!r}.")
        slice_len = triton.cdiv(triton.cdiv(n_cols, slices), block) * block
    else:
        slice_len = triton.cdiv(plan["slice_len"], block) * block
    n_slices = triton.cdiv(n_cols, slice_len)
    stats = torch.empty((n_rows, n_slices, 2), dtype=torch.float32, device=x.device)
    grid = (n_rows, n_slices)
    softmax_split_stats_kernel[grid](
        stats, x2, x2.stride(0), x2.stride(1), n_cols, slice_len, n_slices,
        BLOCK_SIZE=block, num_warps=num_warps_for(block),
    )
    softmax_split_normalize_kernel[grid](
        out, x2, stats, x2.stride(0), x2.stride(1), out.stride(0), n_cols, slice_len, n_slices,
        BLOCK_SIZE=block, SLICES_P2=triton.next_power_of_2(n_slices), num_warps=num_warps_for(block),
    )
    return out.view(x.shape)


@triton.jit
def softmax_split_coop_kernel(
    out_ptr, in_ptr, stats_ptr, count_ptr, timeout_ptr,
    in_row_stride, in_col_stride, out_row_stride,
    n_rows, n_cols, n_slices, rows_per_round,
    SLICE: tl.constexpr,  # columns per program: the slice stays in registers between the phases
    SLICES_P2: tl.constexpr,
    MAX_SPIN: tl.constexpr,  # give up waiting after this many polls (a safety net, never a result)
):
    # Program p owns slice p % n_slices of one row per round; all programs are resident at once
    # (the grid is sized from the compiled kernel's occupancy), so waiting for the other slices of
    # the same row cannot deadlock.
    pid = tl.program_id(0)
    s = pid % n_slices
    cols = s * SLICE + tl.arange(0, SLICE)
    k = tl.arange(0, SLICES_P2)
    row = (pid // n_slices).to(tl.int64)
    x = tl.load(in_ptr + row * in_row_stride + cols * in_col_stride, mask=(cols < n_cols) & (row < n_rows),
                other=-float("inf")).to(tl.float32)
    for _ in range(0, tl.cdiv(n_rows, rows_per_round)):
        valid = row < n_rows
        # Phase 1: reduce the slice (already in registers) to its (m, d) pair and publish it.
        m = tl.max(x, axis=0)
        d = tl.sum(tl.where(x == -float("inf"), 0.0, tl.exp(x - m)), axis=0)
        tl.store(stats_ptr + (row * n_slices + s) * 2, m, mask=valid)
        tl.store(stats_ptr + (row * n_slices + s) * 2 + 1, d, mask=valid)
        # Start reading next round's slice now: its bytes are in flight while we wait.
        next_row = row + rows_per_round
        x_next = tl.load(in_ptr + next_row * in_row_stride + cols * in_col_stride,
                         mask=(cols < n_cols) & (next_row < n_rows), other=-float("inf"))
        # Phase 2: count this slice in (release), wait until the row's other slices are in (acquire).
        seen = tl.atomic_add(count_ptr + row, 1, mask=valid, sem="acq_rel", scope="gpu") + 1
        seen = tl.where(valid, seen, n_slices)
        spins = 0
        while (seen < n_slices) & (spins < MAX_SPIN):
            seen = tl.atomic_add(count_ptr + row, 0, sem="acquire", scope="gpu")
            spins += 1
        if spins >= MAX_SPIN:
            tl.store(timeout_ptr, 1)
        # Phase 3: merge the row's pairs, normalize the slice still in registers, write it.
        m_s = tl.load(stats_ptr + (row * n_slices + k) * 2, mask=(k < n_slices) & valid,
                      other=-float("inf"), volatile=True)
        d_s = tl.load(stats_ptr + (row * n_slices + k) * 2 + 1, mask=(k < n_slices) & valid, other=0.0, volatile=True)
        m_row = tl.max(m_s, axis=0)
        d_row = tl.sum(tl.where(d_s == 0.0, 0.0, d_s * tl.exp(m_s - m_row)), axis=0)
        tl.store(out_ptr + row * out_row_stride + cols, tl.exp(x - m_row) * (1.0 / d_row),
                 mask=(cols < n_cols) & valid)
        x = x_next.to(tl.float32)
        row = next_row


_COOP_CACHE: dict = {}


def coop_capacity(x2, out, slice_cols: int, num_warps: int, slices_p2: int = 2) -> dict:
    """Compile the cooperative kernel for these arguments and return how many of its programs the
    GPU keeps resident (GPU only)."""
    key = (x2.dtype, slice_cols, num_warps, slices_p2, x2.stride(1) == 1, x2.stride(0) % 16 == 0)
    if key not in _COOP_CACHE:
        n_rows, n_cols = x2.shape
        dummy = torch.zeros(1, dtype=torch.int32, device=x2.device)
        stats = torch.empty(2, dtype=torch.float32, device=x2.device)
        c = softmax_split_coop_kernel.warmup(
            out, x2, stats, dummy, dummy, x2.stride(0), x2.stride(1), out.stride(0),
            n_rows, n_cols, 2, 1, SLICE=slice_cols, SLICES_P2=slices_p2, MAX_SPIN=1 << 22,
            num_warps=num_warps, launch_cooperative_grid=True, grid=(1,),
        )
        c._init_handles()
        props = gpu_props()
        occ = occupancy(c.n_regs, c.metadata.shared, num_warps, props)
        _COOP_CACHE[key] = {"n_regs": c.n_regs, "n_spills": c.n_spills, "shared": c.metadata.shared,
                            **occ, "programs": props["sm_count"] * occ["programs_per_sm"]}
    return _COOP_CACHE[key]


def coop_config(n_rows: int, n_cols: int, dtype: torch.dtype) -> tuple[int, int]:
    """(columns per slice, num_warps) for the cooperative kernel, from the H200 sweep
    (figures/data/split_variants.csv): 4096-column slices with 4 warps for 16-bit inputs and for
    fp32 with many rows, 8192 with 8 warps for fewer fp32 rows."""
    if n_rows >= 1024 or dtype.itemsize < 4:
        return 4096, 4
    return 8192, 8


def softmax_split_coop(x: torch.Tensor, slice_cols: int | None = None, num_warps: int | None = None) -> torch.Tensor:
    """Softmax with each row cut into register-resident slices that wait for each other inside one
    launch, so the row is read from DRAM once (lesson 06). GPU only: the interpreter runs programs
    one after another, so a program could never see its row's other slices; there this falls back
    to the two-launch ``softmax_split``."""
    if not ON_GPU:
        check_tensor(x, kernel=True)
        return softmax_split(x)
    x2, out, n_rows, n_cols = _prepare(x)
    if out.numel() == 0:
        return out.view(x.shape)
    if x.dtype == torch.float64:
        return softmax_online(x)
    sc, nw = coop_config(n_rows, n_cols, x.dtype)
    slice_cols = min(slice_cols or sc, triton.next_power_of_2(n_cols))
    num_warps = num_warps or nw
    n_slices = triton.cdiv(n_cols, slice_cols)
    cap = coop_capacity(x2, out, slice_cols, num_warps, triton.next_power_of_2(n_slices))["programs"]
    if n_slices > cap:
        return softmax_split(x)  # a row needs more programs than can be resident at once
    rows_per_round = max(1, min(n_rows, cap // n_slices))
    stats = torch.empty((n_rows, n_slices, 2), dtype=torch.float32, device=x.device)
    count = torch.zeros(n_rows + 1, dtype=torch.int32, device=x.device)
    softmax_split_coop_kernel[(rows_per_round * n_slices,)](
        out, x2, stats, count, count[n_rows:],
        x2.stride(0), x2.stride(1), out.stride(0),
        n_rows, n_cols, n_slices, rows_per_round,
        SLICE=slice_cols, SLICES_P2=triton.next_power_of_2(n_slices), MAX_SPIN=1 << 22,
        num_warps=num_warps,
        launch_cooperative_grid=True,  # the driver refuses (rather than hangs) a grid that cannot all be resident
    )
    return out.view(x.shape)


# --------------------------------------------------------------------------------------------
# The course's best answer
# --------------------------------------------------------------------------------------------


#: Rows up to this many columns go to the tiled (or fused) kernel; longer ones are split across programs.
TILED_MAX_COLS = 32768

#: (element size, BLOCK_N) where lesson 03's one-row-per-program kernel beat the tiled kernel in the
#: same runs of the sweep (figures/data/bench_runs/, H200): long fp32 rows, mid-length bf16 rows.
FUSED_WINS = {(4, 4096), (4, 8192), (4, 16384), (4, 32768), (2, 2048), (2, 4096), (2, 8192)}


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim for any shape, choosing among the course's kernels:
    rows that fit on chip go to the tiled kernel (several rows per program when they are short),
    longer rows are split across programs that wait for each other (``softmax_split_coop``; the
    two-launch ``softmax_split`` under the interpreter)."""
    check_tensor(x, kernel=True)
    n_cols = x.shape[-1]
    if n_cols <= TILED_MAX_COLS:
        key = (x.element_size(), triton.next_power_of_2(max(n_cols, 1)))
        return softmax_fused(x) if key in FUSED_WINS else softmax_tiled(x)
    return softmax_split_coop(x)
