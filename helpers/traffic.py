"""DRAM traffic accounting: how many elements each version of softmax reads and writes, in elements
of an (M, N) input (multiply by the element size for bytes). The naive five-op PyTorch version
(``reference.naive_softmax_rowwise``) runs one kernel per op, each reading its inputs from DRAM and
writing its output back: 5MN + 2M reads and 3MN + 2M writes (``naive_ops``). A fused kernel reads x
once and writes y once: 2MN in all.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 2**20


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


# ---- Counted traffic: every load and store of a kernel run under Triton's interpreter ----------------------------
#
# The interpreter executes each `tl.load` and `tl.store` in NumPy, with its pointers and its mask, so it can count the
# bytes a kernel really moves: only the lanes whose mask is true, at the element size of the pointer's type. Triton
# has no public hook for this; `counting` wraps the interpreter builder's five memory methods for the duration of a
# `with` block, which Triton 3.6 to 3.9 share (tests/test_traffic.py fails on a Triton that renames them).

#: The interpreter builder's methods `counting` wraps (every load, store, block-pointer and descriptor access, and
#: atomic of Triton 3.6-3.9 goes through one of them), and the one that starts each program.
HOOKS = ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas", "set_grid_idx")


class Traffic:
    """What the kernels launched inside ``counting(...)`` moved: bytes read and written from each named tensor (and
    from anything else, as "(other)"), and the programs they ran. ``table()`` shows it as a DataFrame."""

    def __init__(self, tensors: dict):
        import numpy as np

        for name, t in tensors.items():
            if not hasattr(t, "data_ptr") or not hasattr(t, "element_size"):
                raise TypeError(f"counting(): {name}= must be a tensor, got {type(t).__name__}.")
        self.names = list(tensors)
        self.sizes = {n: t.numel() * t.element_size() for n, t in tensors.items()}
        spans = [(t.data_ptr(), t.data_ptr() + _span(t), n) for n, t in tensors.items() if t.numel()]
        spans.sort()
        self._starts = np.array([s for s, _, _ in spans], dtype=np.uint64)
        self._ends = np.array([e for _, e, _ in spans], dtype=np.uint64)
        self._order = [n for _, _, n in spans]
        self.read = dict.fromkeys(self.names + ["(other)"], 0)
        self.written = dict.fromkeys(self.names + ["(other)"], 0)
        self.programs = 0

    def _add(self, into: dict, ptrs, mask, element_bytes: int) -> None:
        import numpy as np

        addr = np.asarray(ptrs).astype(np.uint64, copy=False)
        sel = addr[np.broadcast_to(np.asarray(mask, dtype=bool), addr.shape)] if mask is not None else addr.ravel()
        if not sel.size:
            return
        i = np.searchsorted(self._starts, sel, side="right").astype(np.int64) - 1
        inside = (i >= 0) & (sel < self._ends[np.maximum(i, 0)]) if len(self._order) else np.zeros(sel.shape, bool)
        counts = np.bincount(i[inside], minlength=len(self._order)) if inside.any() else np.zeros(len(self._order), int)
        for name, c in zip(self._order, counts):
            into[name] += int(c) * element_bytes
        into["(other)"] += int((~inside).sum()) * element_bytes

    @property
    def bytes(self) -> int:
        """Bytes read and written in all."""
        return sum(self.read.values()) + sum(self.written.values())

    def times_read(self, name: str) -> float:
        """How many times the kernels read tensor ``name`` over: bytes read from it / its bytes (2.0: read twice)."""
        return self.read[name] / self.sizes[name] if self.sizes.get(name) else 0.0

    def times_written(self, name: str) -> float:
        return self.written[name] / self.sizes[name] if self.sizes.get(name) else 0.0

    def table(self):
        """One row per named tensor (and "(other)" if anything else was touched): bytes read and written, and how
        many times over the tensor that is."""
        import pandas as pd

        rows = [
            {
                "tensor": n,
                "bytes read": self.read[n],
                "bytes written": self.written[n],
                "times read": round(self.times_read(n), 3),
                "times written": round(self.times_written(n), 3),
            }
            for n in self.names
        ]
        if self.read["(other)"] or self.written["(other)"]:
            rows.append(
                {
                    "tensor": "(other)",
                    "bytes read": self.read["(other)"],
                    "bytes written": self.written["(other)"],
                    "times read": None,
                    "times written": None,
                }
            )
        return pd.DataFrame(rows).set_index("tensor")

    def __repr__(self) -> str:
        parts = [f"{n}: read {self.times_read(n):g}x, written {self.times_written(n):g}x" for n in self.names]
        return f"<Traffic {self.bytes} bytes in {self.programs} programs; " + "; ".join(parts) + ">"


def _span(t) -> int:
    """The bytes from a tensor's first element to just past its last, whatever its strides."""
    if not t.numel():
        return 0
    last = sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if s > 0)
    return (last + 1) * t.element_size()


def _element_bytes(handle) -> int:
    return max(1, handle.get_element_ty().primitive_bitwidth // 8)


class counting:
    """``with counting(x=x, y=y) as t: kernel[grid](y, x, ...)``: count the bytes every load and store of the kernels
    launched inside moves, by named tensor (``t.table()``, ``t.times_read("x")``). Interpreter only: it counts what
    Triton's interpreter executes (a CPU machine, or ``TRITON_INTERPRET=1`` set before the first ``@triton.jit``).
    The kernels' results are unchanged."""

    def __init__(self, **tensors):
        self.traffic = Traffic(tensors)
        self._saved = {}

    def __enter__(self) -> Traffic:
        import os

        from .mode import KernelsUnavailable, kernels_unavailable_message

        try:
            from triton.runtime import interpreter
        except ImportError as e:
            raise KernelsUnavailable(kernels_unavailable_message("Counting a kernel's traffic")) from e
        if os.environ.get("TRITON_INTERPRET") != "1":
            raise RuntimeError(
                "counting() counts what Triton's interpreter executes, and kernels here are compiled for "
                "a GPU: set TRITON_INTERPRET=1 before importing helpers (a new Python process)."
            )
        builder = interpreter.interpreter_builder
        missing = [h for h in HOOKS if not hasattr(builder, h)]
        if missing:
            import triton

            raise RuntimeError(
                f"counting(): this Triton ({triton.__version__}) has no interpreter {missing}; "
                f"it works with Triton 3.6 to 3.9 (tests/test_traffic.py)."
            )
        t = self.traffic
        orig = {h: getattr(builder, h) for h in HOOKS}

        def load(ptrs, mask, *a, **k):
            t._add(t.read, ptrs.data, mask.data, _element_bytes(ptrs))
            return orig["create_masked_load"](ptrs, mask, *a, **k)

        def store(ptrs, value, mask, *a, **k):
            t._add(t.written, ptrs.data, mask.data, _element_bytes(ptrs))
            return orig["create_masked_store"](ptrs, value, mask, *a, **k)

        def rmw(op, ptr, val, mask, *a, **k):
            t._add(t.read, ptr.data, mask.data, _element_bytes(ptr))
            t._add(t.written, ptr.data, mask.data, _element_bytes(ptr))
            return orig["create_atomic_rmw"](op, ptr, val, mask, *a, **k)

        def cas(ptr, cmp, val, *a, **k):
            t._add(t.read, ptr.data, None, _element_bytes(ptr))
            t._add(t.written, ptr.data, None, _element_bytes(ptr))
            return orig["create_atomic_cas"](ptr, cmp, val, *a, **k)

        def program(*a, **k):
            t.programs += 1
            return orig["set_grid_idx"](*a, **k)

        self._saved = {h: builder.__dict__.get(h) for h in HOOKS}  # instance attributes (normally none)
        self._builder = builder
        for h, fn in zip(HOOKS, (load, store, rmw, cas, program)):
            setattr(builder, h, fn)
        return t

    def __exit__(self, *exc) -> None:
        for h, before in self._saved.items():
            if before is None:
                self._builder.__dict__.pop(h, None)
            else:
                setattr(self._builder, h, before)


# ---- From bytes to a predicted GPU time --------------------------------------------------------------------------

#: Where the bytes-only model says less than it seems, and why (`predict` names the ones that apply).
CAVEATS = {
    "few programs": "fewer programs than SMs: most of the GPU idles, and a prediction from bytes is too short",
    "short programs": "under 16 KiB a program: latency, not bandwidth, sets the time (launch, ramp, one short wave)",
    "in L2": "the tensors it reads fit in L2: replayed calls re-read them from there (and a row read again soon after "
    "its first read comes from L2 or L1), so the bytes it counts are not all DRAM bytes",
    "outside the recorded copies": "smaller or larger than every recorded copy: its speed is the nearest one's",
}
SMS = 132  # the H100's and the H200's


def copy_speeds(gpu: str):
    """The recorded copy's speed on ``gpu`` ("h100", "h200"): bytes it moved (read + written) and GB/s in GPU time,
    one row per recorded shape and dtype, smallest first (``figures/data/bench_<gpu>.csv``)."""
    from . import data

    bench = data.load("bench", gpu=gpu)
    copy = bench[(bench.provider == "copy") & (bench.status == "ok")].copy()
    size = copy["dtype"].map({"float32": 4, "bfloat16": 2, "float16": 2})
    copy["bytes"] = 2 * copy.M * copy.N * size
    copy["GB/s"] = copy["bytes"] / (copy.graph_ms * 1e-3) / 1e9
    out = copy[["dtype", "M", "N", "bytes", "GB/s"]].sort_values("bytes").reset_index(drop=True)
    out.attrs = bench.attrs
    return out


def predicted_frac_answer(design: str, M: int, N: int, element_size: int, l2_bytes: int) -> float:
    """The all-or-nothing L2 model: a copy's 2MN bytes over the design's (2MN or 3MN)."""
    if design not in ("online", "split", "split_coop"):
        raise ValueError(f"predicted_frac: design must be 'online', 'split' or 'split_coop', got {design!r}.")
    fits = M * N * element_size <= l2_bytes
    return 1.0 if design == "split_coop" or (design == "split" and fits) else 2 / 3


def l2_bytes(gpu: str) -> int:
    """The L2 cache of the recorded GPU, in bytes (``device_props*.csv``)."""
    from . import data

    return int(data.load("device_props", gpu=None if gpu == "h100" else gpu).l2_bytes.iloc[0])


def predict(nbytes: int, gpu: str = "h200", programs: int | None = None, tensors_read: int | None = None) -> dict:
    """A GPU time for a kernel that moves ``nbytes`` (read + written), at the speed the recorded copy reached on the
    nearest number of bytes (log-interpolated between the two around it): ``{"us": ..., "GB/s": ..., "caveats":
    [...]}``. ``programs`` (the launch's program count) and ``tensors_read`` (the bytes of the tensors it reads,
    each counted once), when given, add the caveats that apply (`CAVEATS`)."""
    import numpy as np

    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or nbytes <= 0:
        raise ValueError(f"predict(): nbytes must be a positive int, got {nbytes!r}.")
    speeds = copy_speeds(gpu).groupby("bytes")["GB/s"].median()
    x, y = np.log(speeds.index.to_numpy(dtype=float)), speeds.to_numpy(dtype=float)
    rate = float(np.interp(np.log(nbytes), x, y))
    caveats = []
    if not speeds.index.min() <= nbytes <= speeds.index.max():
        caveats.append("outside the recorded copies")
    if programs is not None:
        if programs < SMS:
            caveats.append("few programs")
        if nbytes / programs < 16 * 1024:
            caveats.append("short programs")
    if tensors_read is not None and (tensors_read <= l2_bytes(gpu) or nbytes > 2 * tensors_read):
        caveats.append("in L2")
    return {"us": nbytes / (rate * 1e9) * 1e6, "GB/s": rate, "caveats": caveats}


# ---- The checkers' traffic line ----------------------------------------------------------------------------------

REFERENCE_INPUT_BYTES = 64 << 20  # a learner's kernel scaled to 64 MiB of input: past L2, so DRAM sets the time


def _times(x: float) -> str:
    return "never" if x == 0 else "once" if abs(x - 1) < 5e-3 else "twice" if abs(x - 2) < 5e-3 else f"{x:.1f} times"


def learner_line(launches: list, *, compute_bound: bool = False) -> str:
    """The traffic line a checker prints after "correct": how many times the learner's kernel read its inputs and
    wrote its outputs (``launches``: per launch, ``(bytes of the tensor, bytes read, bytes written, is an output)``
    for each tensor argument; a tensor passed twice counts once; a tensor it writes is an output), the bytes against
    one pass over them, and the GPU
    time on an H200 and an H100 at the recorded copy's speed, the kernel scaled to 64 MiB of input. For a kernel
    whose time its arithmetic sets (``compute_bound``: attention's matmuls), that time is a floor, and the line
    says so."""
    size_in = size_out = read_in = written_out = other = 0
    for launch in launches:
        seen = set()
        for nbytes, read, written, is_out in launch:
            key = (nbytes, read, written, is_out)
            if key in seen or not (read or written):  # a tensor passed twice counts once; one never touched not at all
                continue
            seen.add(key)
            if is_out or written:  # an output: declared, or written to
                size_out, written_out, other = size_out + nbytes, written_out + written, other + read
            else:
                size_in, read_in, other = size_in + nbytes, read_in + read, other + written
    if not size_in or not size_out:
        return ""
    one_pass = size_in + size_out
    moved = read_in + written_out + other
    scale = REFERENCE_INPUT_BYTES / size_in
    us = {
        gpu: (predict(max(1, int(moved * scale)), gpu)["us"], predict(int(one_pass * scale), gpu)["us"])
        for gpu in ("h200", "h100")
    }
    about = "at least" if compute_bound else "about"
    floor = " Its matmuls, not its bytes, set its time: the bytes give only a floor." if compute_bound else ""
    return (
        f"Traffic: your kernel reads its input {_times(read_in / size_in)} and writes its output "
        f"{_times(written_out / size_out)}: {moved / one_pass:.2f}x the bytes of one pass. With 64 MiB of input, at "
        f"the recorded copy's speed: {about} {us['h200'][0]:.0f} µs on an H200 and {us['h100'][0]:.0f} on an H100 "
        f"(one pass: {us['h200'][1]:.0f} and {us['h100'][1]:.0f}).{floor}"
    )
