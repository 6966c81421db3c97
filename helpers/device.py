"""What the GPU offers a kernel: its limits (``gpu_props``) and how many programs of a compiled kernel
one SM keeps resident (``occupancy``; lesson 05 defines the terms). A shared layer: kernels, lessons
and the benchmark use it.
"""

from __future__ import annotations

import torch

from .mode import ON_GPU

#: Shared memory the CUDA driver reserves for every resident block on compute capability 8.0 and
#: newer (``cudaDevAttrReservedSharedMemoryPerBlock``: 1 KiB on an H100 and an H200).
RESERVED_SHARED_SM80 = 1024

PROPS_KEYS = ("regs_per_sm", "shared_per_sm", "max_threads_per_sm", "max_blocks_per_sm", "warp_size")


def warp_registers(n_regs: int, warp_size: int = 32) -> int:
    """The registers a warp is granted: ``n_regs`` for each thread, rounded up to a multiple of 256."""
    return -(-n_regs * warp_size // 256) * 256


def occupancy(n_regs: int, shared_bytes: int, num_warps: int, props: dict) -> dict:
    """How many programs of a compiled kernel one SM keeps resident, and which limit binds.

    ``props`` needs ``regs_per_sm``, ``shared_per_sm``, ``max_threads_per_sm``,
    ``max_blocks_per_sm`` and ``warp_size`` (``gpu_props()`` gives them), and may give
    ``reserved_shared_per_block``: the shared memory the driver keeps for each resident block on top
    of the kernel's own (1 KiB on an H100/H200; 0 when absent). Registers are granted per warp in
    units of 256. This is the CUDA occupancy calculator's arithmetic; the recording run checks it
    against ``cuOccupancyMaxActiveBlocksPerMultiprocessor`` (``figures/data/occupancy_check.csv``).
    """
    for key in PROPS_KEYS:
        if key not in props:
            raise KeyError(f"occupancy(): props is missing {key!r} (see helpers.gpu_props()).")
    reserved = props.get("reserved_shared_per_block", 0)
    for name, val, low in [(f"props[{key!r}]", props[key], 1) for key in PROPS_KEYS] + [
        ("n_regs", n_regs, 1),
        ("num_warps", num_warps, 1),
        ("shared_bytes", shared_bytes, 0),
        ("props['reserved_shared_per_block']", reserved, 0),
    ]:
        if isinstance(val, bool) or not isinstance(val, int) or val < low:
            what = "a positive int" if low else "a non-negative int"
            raise ValueError(f"occupancy(): {name} must be {what}, got {val!r}.")
    warp = props["warp_size"]
    regs_per_warp = -(-n_regs * warp // 256) * 256
    per_block_shared = shared_bytes + reserved
    # Ties go to the first limit listed; a kernel that needs no shared memory at all is never limited by it.
    limits = {
        "registers": props["regs_per_sm"] // (regs_per_warp * num_warps),
        "threads": props["max_threads_per_sm"] // (warp * num_warps),
        "blocks": props["max_blocks_per_sm"],
        "shared memory": props["shared_per_sm"] // per_block_shared
        if per_block_shared > 0
        else props["max_blocks_per_sm"],
    }
    per_sm = min(limits.values())
    binding = min(limits, key=lambda k: limits[k])
    return {"programs_per_sm": per_sm, "limited_by": binding, "limits": limits}


def _reserved_shared(device_index: int, major: int) -> int:
    try:  # the driver's own answer, when cuda-python is installed
        from cuda.bindings import driver as cu

        err, dev = cu.cuDeviceGet(device_index)
        attr = cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK
        err2, val = cu.cuDeviceGetAttribute(attr, dev)
        if int(err) == 0 and int(err2) == 0:
            return int(val)
    except Exception:
        pass
    return RESERVED_SHARED_SM80 if major >= 8 else 0


_PROPS: dict = {}


def gpu_props(device=None) -> dict:
    """The active GPU's limits that ``occupancy()`` needs, plus its name, SM count and L2 size
    (GPU mode only; read once per device)."""
    if not ON_GPU:
        raise RuntimeError(
            "gpu_props() needs a GPU, and this run uses Triton's interpreter on the CPU: "
            "use helpers.gpu_data.device_props(live=False) for the recorded values of a real GPU."
        )
    index = torch.cuda.current_device() if device is None else torch.device("cuda", device).index or 0
    if index not in _PROPS:
        p = torch.cuda.get_device_properties(index)
        _PROPS[index] = {
            "name": p.name,
            "sm_count": p.multi_processor_count,
            "regs_per_sm": p.regs_per_multiprocessor,
            "shared_per_sm": p.shared_memory_per_multiprocessor,
            "reserved_shared_per_block": _reserved_shared(index, p.major),
            "max_threads_per_sm": p.max_threads_per_multi_processor,
            "max_blocks_per_sm": getattr(p, "max_blocks_per_multi_processor", 32),
            "warp_size": p.warp_size,
            "l2_bytes": getattr(p, "L2_cache_size", 0),
        }
    return dict(_PROPS[index])


def sm_count(device=None) -> int:
    """The number of SMs of the active (or given) GPU."""
    return gpu_props(device)["sm_count"]


def compiled_occupancy(compiled, num_warps: int, device=None) -> dict:
    """``occupancy()`` of a compiled Triton kernel (from ``kernel.warmup(...)``): its registers,
    spills and shared memory, the limits, the driver's own count (``api_programs_per_sm``, None
    without cuda-python) and ``programs`` = SM count x programs per SM (the smaller count)."""
    compiled._init_handles()
    props = gpu_props(device)
    occ = occupancy(compiled.n_regs, compiled.metadata.shared, num_warps, props)
    api = api_occupancy(compiled, num_warps)
    # Size grids by the smaller of the two counts: a cooperative launch of more programs than can be
    # resident is refused by the driver.
    per_sm = occ["programs_per_sm"] if api is None else min(api, occ["programs_per_sm"])
    return {
        "n_regs": compiled.n_regs,
        "n_spills": compiled.n_spills,
        "shared": compiled.metadata.shared,
        "num_warps": num_warps,
        **occ,
        "api_programs_per_sm": api,
        "programs": props["sm_count"] * per_sm,
    }


def api_occupancy(compiled, num_warps: int) -> int | None:
    """The CUDA driver's own count of resident programs per SM for a compiled kernel
    (``cuOccupancyMaxActiveBlocksPerMultiprocessor``), or None without cuda-python."""
    try:
        from cuda.bindings import driver as cu
    except Exception:
        return None
    compiled._init_handles()
    err, n = cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(
        cu.CUfunction(compiled.function), num_warps * 32, compiled.metadata.shared
    )
    return int(n) if int(err) == 0 else None
