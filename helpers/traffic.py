"""DRAM traffic accounting: how many elements each version of softmax reads and writes, in elements
of an (M, N) input (multiply by the element size for bytes). The naive five-op PyTorch version
(``reference.naive_softmax_rowwise``) runs one kernel per op, each reading its inputs from DRAM and
writing its output back: 5MN + 2M reads and 3MN + 2M writes (``naive_ops``). A fused kernel reads x
once and writes y once: 2MN in all.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Op:
    name: str
    code: str
    reads: int
    writes: int


def _check_shape(fn_name: str, M, N) -> None:
    for name, v in (("M", M), ("N", N)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{fn_name}: {name} must be a positive int, got {v!r}.")


def naive_ops(M: int, N: int) -> list[Op]:
    """The five operations of the naive row-wise softmax with their element reads and writes."""
    _check_shape("naive_ops", M, N)
    MN = M * N
    return [
        Op("max", "x_max = x.max(dim=1)[0]", MN, M),
        Op("subtract", "z = x - x_max[:, None]", MN + M, MN),
        Op("exp", "numerator = torch.exp(z)", MN, MN),
        Op("sum", "denominator = numerator.sum(dim=1)", MN, M),
        Op("divide", "out = numerator / denominator[:, None]", MN + M, MN),
    ]


#: Passes over the input (reads of x) and writes of y for each kernel of the course.
KERNEL_PASSES = {
    "fused": (1, 1),
    "persistent": (1, 1),
    "three_pass": (3, 1),
    "online": (2, 1),
    "split": (2, 1),  # lesson 06, two launches: the second read may come from L2
    "split_coop": (1, 1),  # lesson 06, one launch: the slice stays in registers
}


def kernel_traffic(kernel: str, M: int, N: int) -> dict:
    """Element reads and writes of one of the course's kernels on an (M, N) input."""
    _check_shape("kernel_traffic", M, N)
    if kernel == "naive":
        ops = naive_ops(M, N)
        return {"reads": sum(o.reads for o in ops), "writes": sum(o.writes for o in ops)}
    if kernel not in KERNEL_PASSES:
        raise ValueError(f"kernel_traffic: unknown kernel {kernel!r}; choose one of {['naive', *KERNEL_PASSES]}.")
    r, w = KERNEL_PASSES[kernel]
    return {"reads": r * M * N, "writes": w * M * N}


def min_bytes(M: int, N: int, element_size: int) -> int:
    """The floor: read every input once and write every output once."""
    return 2 * M * N * element_size
