"""Lesson 05 · the exercise checkers: 5.1 a grid-stride loop, 5.2 programs per SM from registers, 5.3 waves,
5.4 which limit binds. What the lesson shows is in ``helpers.lesson05``."""

from __future__ import annotations

import math

import torch
import triton

from .device import warp_registers
from .exercises import Wrong, call_attempt, check, guarded, guards_intact, launch_learner_kernel, require_kernel
from .gpu_data import device_props

# Exercise checkers: one line each (correct / not yet / wrong), never an exception. Learner kernels run through
# helpers.exercises on guarded rows with NaN after each, input and output rows apart by different strides.

LIMIT_NAMES = ("registers", "shared memory", "threads", "blocks")  # exercise 5.4's answers
UNWRITTEN = -7.0  # what exercise 5.1's output starts as: no softmax value is negative
LOOP = "program p takes rows p, p + P, p + 2P, ...: start at tl.program_id(0) and step by tl.num_programs(0)"


def grid_stride_cases(seed: int = 51) -> list[dict]:
    """Exercise 5.1's trials: input, programs, and input and output row strides (different, neither
    the row length, with room after a row for a block's lanes); a transposed input last."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(10, 50, generator=g) * 3
    x[3, :20] = float("-inf")
    x[7, 5] = 120.0  # exp(120) overflows float32: the max shift is needed
    strided = dict(x=x, in_stride=67, out_stride=71)
    return [
        dict(strided, programs=3),
        dict(strided, programs=1),
        dict(strided, programs=16),
        dict(strided, programs=4),
        dict(x=torch.randn(37, 12, generator=g) * 20, programs=5, in_stride=14, out_stride=70, transpose=True),
    ]


def _padded(src, stride, fill=0.0):
    t = guarded(tuple(src.shape), fill=fill, row_stride=stride)
    return t.copy_(src.to(t.device))


def _launch_5_1(kernel, P, out, x):
    M, N = x.shape
    launch_learner_kernel(
        kernel,
        (P,),
        out,
        x,
        x.stride(0),
        x.stride(1),
        out.stride(0),
        M,
        N,
        BLOCK_SIZE=triton.next_power_of_2(N),
        where=f"launched on {M} rows with {P} programs,",
    )


def _stride_hint(case, N, store: bool) -> str:
    (mine, a), (other, b) = (("output", "out"), ("input", "in"))[:: 1 if store else -1]
    return (
        f"row r of the {mine} starts at {a}_ptr + r * {a}_row_stride (here {case[a + '_stride']}); the {other}'s "
        f"rows are {b}_row_stride = {case[b + '_stride']} apart and a row has {N} columns"
    )


def _trial_5_1(kernel) -> str:
    require_kernel(kernel, "persistent_softmax_kernel")
    for case in grid_stride_cases():
        data_ = _padded(case["x"], case["in_stride"])
        x, turned = (data_.t(), True) if case.get("transpose") else (data_, False)
        (M, N), before = x.shape, data_.clone()
        where = f"on {M} rows of {N} columns{' read through a transposed view' * turned}, {case['programs']} programs"
        ref = torch.softmax(x.detach().cpu().double(), dim=-1)
        out = guarded((M, N), fill=UNWRITTEN, row_stride=case["out_stride"])
        _launch_5_1(kernel, case["programs"], out, x)
        if not (torch.equal(data_, before) and guards_intact(data_)):
            raise Wrong(f"{where}: your kernel changed its input: store into out_ptr only")
        got = out.detach().cpu().double()
        row_ok = (got - ref).abs().amax(dim=1) <= 1e-6
        nan_rows = (torch.isnan(got) & ~torch.isnan(ref)).any(dim=1)
        if turned and not row_ok.all():
            raise Wrong(
                f"{where}: rows came out wrong (use in_col_stride when loading: x[row, j] is at "
                f"in_ptr + row * in_row_stride + j * in_col_stride)"
            )
        if not guards_intact(out) and (row_ok.all() or not row_ok[0]):
            raise Wrong(
                f"{where}: your kernel wrote past the end of a row of its output: does tl.store have "
                f"mask=... for the lanes past n_cols?"
            )
        if not guards_intact(out):
            raise Wrong(
                f"{where}: row 0 is right, but other rows were stored in the wrong place "
                f"({_stride_hint(case, N, True)})"
            )
        if missed := sorted({int(r) for r in torch.nonzero(got == UNWRITTEN)[:, 0]}):
            raise Wrong(f"{where}: rows {missed[:8]} were never written ({LOOP})")
        if nan_rows[0]:
            raise Wrong(
                f"{where}: row 0 came out NaN: the lanes past n_cols read whatever lies after the row "
                f"(here NaN); load with mask=cols < n_cols and other=-float('inf')"
            )
        if nan_rows.any() and torch.equal(nan_rows, torch.isinf(torch.exp(x.detach().cpu().float())).any(dim=1)):
            raise Wrong(
                f"{where}: rows {torch.nonzero(nan_rows)[:, 0].tolist()} came out NaN: subtract the row "
                f"maximum before tl.exp (exp overflows float32 past about 88)"
            )
        if not row_ok.all() and row_ok[0]:
            raise Wrong(
                f"{where}: row 0 is right, but rows {torch.nonzero(~row_ok)[:, 0].tolist()[:8]} are not: "
                f"they were read from the wrong place ({_stride_hint(case, N, False)})"
            )
        if not row_ok.all():
            raise Wrong(
                f"{where}: max abs error {(got - ref).abs().max().item():.1e} against torch.softmax (each "
                f"row's softmax: the max shift, exp, sum, divide, with the padding lanes loaded as -inf)"
            )
        if not turned:  # in place (out is x): a row handled twice comes out as the softmax of a softmax
            _launch_5_1(kernel, case["programs"], inplace := _padded(case["x"], case["in_stride"]), inplace)
            if (twice := ~((inplace.detach().cpu().double() - ref).abs().amax(dim=1) <= 1e-5)).any():
                raise Wrong(
                    f"{where}, run in place (out is x): rows {torch.nonzero(twice)[:, 0].tolist()[:8]} were "
                    f"processed more than once. Each row belongs to exactly one program: {LOOP}"
                )
    return "every row written by exactly one program, with 1, 3, 4, 5 and 16 programs and rows 67 and 71 apart"


def check_5_1(persistent_softmax_kernel) -> None:
    """Exercise 5.1: a persistent softmax kernel whose programs walk the rows in a grid-stride loop."""
    check("5.1", "a grid-stride loop", persistent_softmax_kernel, _trial_5_1)


def _int(v, what):
    v = v.item() if isinstance(v, torch.Tensor) and v.numel() == 1 else v
    v = int(v) if isinstance(v, float) and v.is_integer() else v
    if isinstance(v, bool) or not isinstance(v, int):
        raise Wrong(f"{what} should be a whole number, got {type(v).__name__} {v!r}")
    return v


def programs_by_registers_answer(n_regs: int, num_warps: int, regs_per_sm: int = 65536, warp_size: int = 32) -> int:
    """Programs per SM the register file allows (each warp's registers rounded up to 256)."""
    return regs_per_sm // (warp_registers(n_regs, warp_size) * num_warps)


def _round_up(v: int) -> int:
    return -(-v // 256) * 256


#: A plausible mistake of exercise 5.2 (n_regs, num_warps, regs_per_sm, warp_size -> programs), and the hint that
#: names it. A learner's answers that match one of these on every trial get its hint.
MISTAKES_5_2 = [
    (
        lambda n, w, r, ws: r // (n * ws * w),
        "each warp's registers are granted in chunks of 256: round n_regs * warp_size up to a multiple of 256 before "
        "dividing. A warp that needs 1856 registers takes 2048, so counting 1856 finds room for programs the SM cannot hold",
    ),
    (
        lambda n, w, r, ws: r // (n * ws // 256 * 256 * w),
        "you rounded each warp's registers down to a multiple of 256; round up: a warp cannot run with fewer registers "
        "than its threads need, so 1856 is granted as 2048, not 1792, and rounding down counts programs that do not fit",
    ),
    (
        lambda n, w, r, ws: r // _round_up(n * ws * w),
        "round each warp's registers up, not the whole program's: every warp takes whole chunks of 256 of its own, so "
        "2 warps of 1856 registers take 2 x 2048 = 4096, not 3712 rounded up to 3840",
    ),
    (
        lambda n, w, r, ws: r // _round_up(n * ws),
        "a program has num_warps warps: divide by the registers of all of them, the rounded registers of a warp times "
        "num_warps",
    ),
    (
        lambda n, w, r, ws: r // (_round_up(n * w)),
        "a warp has warp_size threads, each with n_regs registers: a warp needs n_regs * warp_size of them",
    ),
    (
        lambda n, w, r, ws: -(-r // (_round_up(n * ws) * w)),
        "round the last division down: only whole programs can be resident, and a part of one does not run",
    ),
    (
        lambda n, w, r, ws: max(1, r // (_round_up(n * ws) * w)),
        "a program that needs more registers than the SM has cannot be resident at all: the answer is 0, not 1",
    ),
]
CASES_5_2 = [(58, 1), (23, 8), (180, 4), (255, 1), (32, 32), (128, 16), (129, 16), (25, 4), (71, 2)]


def _trial_5_2(programs_by_registers) -> str:
    answers = []
    for n_regs, w in CASES_5_2:
        got = call_attempt(programs_by_registers, n_regs, w, 65536, 32)
        if isinstance(got, float) and not got.is_integer():
            raise Wrong(
                f"n_regs = {n_regs}, num_warps = {w}: you gave {got}, a fraction of a program: divide with "
                f"// (integer division), since only whole programs can be resident"
            )
        answers.append(_int(got, "the number of programs"))
    right = [programs_by_registers_answer(n, w) for n, w in CASES_5_2]
    if answers == right:
        return "e.g. 58 registers, 1 warp: 58 x 32 = 1856 -> 2048 per warp, 65536 // 2048 = 32"
    hint = next(
        (hint for mistake, hint in MISTAKES_5_2 if answers == [mistake(n, w, 65536, 32) for n, w in CASES_5_2]),
        "count the registers of one warp (n_regs * warp_size, rounded up to a multiple of 256), times "
        "num_warps for a program, and divide the SM's registers by that",
    )
    i = next(i for i, (a, b) in enumerate(zip(answers, right)) if a != b)
    raise Wrong(
        f"n_regs = {CASES_5_2[i][0]}, num_warps = {CASES_5_2[i][1]}: you gave {answers[i]}, expected {right[i]} "
        f"({hint})"
    )


def check_5_2(programs_by_registers) -> None:
    """Exercise 5.2: ``programs_by_registers(n_regs, num_warps, regs_per_sm, warp_size)``."""
    check("5.2", "programs per SM from registers", programs_by_registers, _trial_5_2)


def waves_answer(num_programs: int, resident: int) -> tuple[int, int]:
    """(waves, programs in the last wave) when ``num_programs`` programs run ``resident`` at a time."""
    return (n := -(-num_programs // resident)), num_programs - (n - 1) * resident


def _trial_5_3(waves) -> str:
    for n, r in [(65536, 2112), (2112, 2112), (132, 2112), (4224, 2112), (4225, 2112), (1, 1), (1000, 7)]:
        got = call_attempt(waves, n, r)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise Wrong(f"return a pair (waves, programs in the last wave), got {type(got).__name__}")
        w, last = _int(got[0], "waves"), _int(got[1], "programs in the last wave")
        if (w, last) != (want := waves_answer(n, r)):
            hint = (
                " (a partial wave is still a wave: round up)"
                if w == n // r and n % r
                else " (when the programs divide evenly, the last wave is full)"
                if last == 0 and n % r == 0
                else ""
            )
            raise Wrong(f"{n} programs, {r} resident: you gave ({w}, {last}), expected {want}{hint}")
    return "65536 rows at 2112 resident: 32 waves, the last one 64 programs (3% of the GPU)"


def check_5_3(waves) -> None:
    """Exercise 5.3: ``waves(num_programs, resident)`` returns (waves, programs in the last wave)."""
    check("5.3", "waves", waves, _trial_5_3)


def _limits(n_regs, shared, w, p, *, reserve=True, rounded=True, warp_threads=True, blocks=True) -> dict:
    """The four limits in programs per SM, or the same with one plausible mistake (for the hints)."""
    per_warp = warp_registers(n_regs, p["warp_size"]) if rounded else n_regs * p["warp_size"]
    smem = shared + (p.get("reserved_shared_per_block", 0) if reserve else 0)
    return {
        "registers": p["regs_per_sm"] // (per_warp * w),
        "shared memory": p["shared_per_sm"] // smem if smem else math.inf,
        "threads": p["max_threads_per_sm"] // (w * (p["warp_size"] if warp_threads else 1)),
        "blocks": p["max_blocks_per_sm"] if blocks else math.inf,
    }


def _binding(limits: dict, pick=min) -> set:
    return {k for k, x in limits.items() if x == pick(limits.values())}


#: A plausible mistake of exercise 5.4, the answers it gives, and the hint that names it.
MISTAKES_5_4 = [
    (
        dict(reserve=False),
        min,
        "count the shared memory the driver reserves for every program, "
        "props['reserved_shared_per_block'], on top of the kernel's own",
    ),
    (dict(rounded=False), min, "round each warp's registers up to a multiple of 256 (exercise 5.2)"),
    (dict(warp_threads=False), min, "a program of num_warps warps has num_warps * props['warp_size'] threads"),
    (dict(blocks=False), min, "an SM also holds at most props['max_blocks_per_sm'] programs, however small"),
    (dict(), max, "the limit that binds is the one that allows the fewest programs: take the smallest"),
]
CASES_5_4 = [
    (72, 12288, 1),
    (23, 32, 8),
    (180, 16, 4),
    (96, 10240, 1),
    (41, 9376, 2),
    (55, 16392, 2),
    (199, 49152, 1),
    (24, 8256, 16),
    (58, 0, 1),
    (255, 196608, 2),
    (40, 1024, 2),
    (16, 16, 1),
]


def _trial_5_4(binding_limit) -> str:
    props, answers = device_props(live=False)[0], []
    for i, (n_regs, shared, w) in enumerate(CASES_5_4):
        try:
            got = call_attempt(binding_limit, n_regs, shared, w, dict(props))
        except ZeroDivisionError:
            if shared == 0 and i > 0:  # a kernel with no shared memory of its own still takes the reserve
                raise Wrong(
                    f"n_regs = {n_regs}, shared = 0, num_warps = {w}: your code divided by zero; {MISTAKES_5_4[0][2]}"
                ) from None
            raise
        if not isinstance(got, str) or got not in LIMIT_NAMES:
            raise Wrong(
                f"return the name of the limit, one of {list(LIMIT_NAMES)}; got {got!r}, which is not one of them"
            )
        answers.append(got)
    right = [_binding(_limits(*c, props)) for c in CASES_5_4]
    if all(a in ok for a, ok in zip(answers, right)):
        return f"you met {len(set(answers))} different limits: {', '.join(sorted(set(answers)))}"
    hint = next(
        (
            hint
            for kw, pick, hint in MISTAKES_5_4
            if all(a in _binding(_limits(*c, props, **kw), pick) for a, c in zip(answers, CASES_5_4))
        ),
        "compute each limit as a number of programs per SM and take the smallest",
    )
    i = next(i for i, (a, ok) in enumerate(zip(answers, right)) if a not in ok)
    (n_regs, shared, w), lim, want = CASES_5_4[i], _limits(*CASES_5_4[i], props), sorted(right[i])[0]
    raise Wrong(
        f"n_regs = {n_regs}, shared = {shared}, num_warps = {w}: you said {answers[i]!r}, which allows "
        f"{lim[answers[i]]} programs, but {want!r} allows only {lim[want]} ({hint})"
    )


def check_5_4(binding_limit) -> None:
    """Exercise 5.4: ``binding_limit(n_regs, shared, num_warps, props)`` names the limit that binds."""
    check("5.4", "which limit binds", binding_limit, _trial_5_4)
