"""Configurations of the kernels behind ``helpers.softmax``, per GPU: measured, not guessed.

The tiled kernel's tile shape (rows per program, warps, stages, persistent or not) and the
cooperative split kernel's slice depend on the GPU, so each is **tuned once per device**:

1. A GPU with a recorded table, ``figures/data/tuning_<gpu>.csv`` (``python tools/bench.py tune``;
   the course records an H100 and an H200), uses each class's fastest candidate.
2. Otherwise the first call of each class (dtype, power-of-two row length) times every candidate
   (``do_bench_cudagraph``), keeps the fastest and caches it in ``~/.cache/softmax-course/`` (or
   ``$SOFTMAX_COURSE_CACHE``); PERFORMANCE.md gives what that first call costs.
3. Under the interpreter, or with ``SOFTMAX_COURSE_TUNING=rule``, a rule from the recorded tables
   (each thread moves about 64 bytes; at least one warp a program).

``SOFTMAX_COURSE_TUNING=autotune`` ignores the recorded tables. This data layer imports no kernel:
what must run one takes the wrapper as an argument (``tiled_config(..., tune=softmax_tiled)``,
``coop_config(..., tune=softmax_split_coop)``, ``sweep(softmax_tiled, softmax_split_coop)``).
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import NamedTuple

import torch
import triton

from .gpu_data import DATA_DIR, read_csv, write_csv
from .mode import ON_GPU

#: Row lengths (powers of two) whose tiled configuration is tuned; longer rows are split.
TILED_BLOCKS = tuple(2**k for k in range(8, 16))
#: The long-row shapes the cooperative kernel is tuned on (the benchmark's).
LONG_SHAPES = ((1024, 65536), (256, 131072), (64, 262144), (8, 1048576))
#: Rows of the tensor the tiled kernel is tuned on (the benchmark's M).
TUNE_ROWS = 4096


class TiledConfig(NamedTuple):
    block_m: int  # rows per tile
    num_warps: int
    num_stages: int
    programs_per_sm: int  # 0: one program per tile; else a persistent grid of this many per SM
    source: str = "rule"  # "recorded", "tuned", or "rule"


class CoopConfig(NamedTuple):
    slice_cols: int
    num_warps: int
    source: str = "rule"


def gpu_slug(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'nvidia_h100_80gb_hbm3' (the recorded table's file name)."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def _mode() -> str:
    m = os.environ.get("SOFTMAX_COURSE_TUNING", "recorded")
    if m not in ("recorded", "autotune", "rule"):
        raise ValueError(f"SOFTMAX_COURSE_TUNING={m!r}: use 'recorded' (the default), 'autotune' or 'rule'.")
    return m


def tiled_candidates(block_n: int, element_size: int) -> list[tuple[int, int, int, int]]:
    """(block_m, num_warps, num_stages, programs_per_sm) candidates for rows of ``block_n``: each
    thread holds 32 to 256 bytes of the tile, a tile holds at most 64 KiB (or one row), and rows of
    8192 columns or more also try persistent grids that prefetch the next row."""
    out = []
    for bm in (1, 2, 4, 8, 16, 32):
        if bm > 1 and bm * block_n * element_size > 65536:
            continue
        for w in (1, 2, 4, 8, 16, 32):
            per_thread_bytes = bm * block_n * element_size // (32 * w)
            if bm * block_n >= 32 * w and 32 <= per_thread_bytes <= 256:
                out.append((bm, w, 1, 0))
    if block_n >= 8192:
        for w in (8, 16, 32):
            if 32 <= block_n * element_size // (32 * w) <= 256:
                out += [(1, w, st, pps) for pps, st in ((2, 2), (2, 3), (4, 2))]
    return out


def tiled_rule(block_n: int, element_size: int) -> TiledConfig:
    """What the recorded tables show, as a rule: each thread moves about 64 bytes of its rows, and
    short rows are batched until a program has at least one warp's worth."""
    per_thread = 64 // element_size  # elements
    warps = block_n // (32 * per_thread)
    if warps >= 1:
        return TiledConfig(1, min(warps, 32), 1, 0)
    return TiledConfig(max(1, (32 * per_thread) // block_n), 1, 1, 0)


def coop_candidates() -> list[tuple[int, int]]:
    """(columns per slice, warps): from 16 to 64 columns a thread (fewer columns a thread, fewer
    registers, so more programs an SM; more, fewer slices a row to wait for)."""
    return [
        (2048, 2),
        (2048, 4),
        (4096, 2),
        (4096, 4),
        (4096, 8),
        (8192, 4),
        (8192, 8),
        (8192, 16),
        (16384, 16),
        (16384, 32),
    ]


def coop_rule(n_rows: int) -> CoopConfig:
    return CoopConfig(4096, 4) if n_rows >= 1024 else CoopConfig(8192, 8)


def recorded_path(gpu_name: str) -> Path:
    return DATA_DIR / f"tuning_{gpu_slug(gpu_name)}.csv"


def cache_path(gpu_name: str) -> Path:
    root = os.environ.get("SOFTMAX_COURSE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "softmax-course"
    )
    return Path(root) / f"tuning-{gpu_slug(gpu_name)}-triton{triton.__version__}.json"


def best_of(rows: list[dict]) -> tuple[dict, dict]:
    """From the rows of a tuning sweep, the fastest candidate of each class:
    ({(element_size, block_n): TiledConfig}, {(dtype_name, M, N): CoopConfig})."""
    tiled, coop = {}, {}
    for r in rows:
        if r.get("status", "ok") != "ok" or not isinstance(r.get("graph_ms"), (int, float)):
            continue
        if r["kind"] == "tiled":
            k = (int(r["element_size"]), int(r["N"]))
            if k not in tiled or r["graph_ms"] < tiled[k][0]:
                tiled[k] = (
                    r["graph_ms"],
                    TiledConfig(
                        int(r["block_m"]),
                        int(r["num_warps"]),
                        int(r["num_stages"]),
                        int(r["programs_per_sm"]),
                        "recorded",
                    ),
                )
        elif r["kind"] == "coop":
            k = (r["dtype"], int(r["M"]), int(r["N"]))
            if k not in coop or r["graph_ms"] < coop[k][0]:
                coop[k] = (r["graph_ms"], CoopConfig(int(r["slice_cols"]), int(r["num_warps"]), "recorded"))
    return {k: v[1] for k, v in tiled.items()}, {k: v[1] for k, v in coop.items()}


_TABLES: dict = {}


def tables(gpu_name: str) -> dict:
    """{'tiled': {...}, 'coop': {...}} for a GPU: its recorded table (unless SOFTMAX_COURSE_TUNING is
    'autotune'), then what earlier runs tuned and cached on disk."""
    if gpu_name not in _TABLES:
        tiled, coop = {}, {}
        path = recorded_path(gpu_name)
        if _mode() == "recorded" and path.exists():
            tiled, coop = best_of(read_csv(path)[0])
        cached = cache_path(gpu_name)
        if cached.exists():
            try:
                data = json.loads(cached.read_text())
                for k, v in data.get("tiled", {}).items():
                    es, bn = (int(p) for p in k.split(","))
                    tiled.setdefault((es, bn), TiledConfig(*v[:4], "tuned"))
                for k, v in data.get("coop", {}).items():
                    d, M, N = k.split(",")
                    coop.setdefault((d, int(M), int(N)), CoopConfig(*v[:2], "tuned"))
            except (ValueError, TypeError, OSError):
                pass  # a damaged cache is re-tuned, never trusted
        _TABLES[gpu_name] = {"tiled": tiled, "coop": coop}
    return _TABLES[gpu_name]


def _save(gpu_name: str) -> None:
    t = _TABLES[gpu_name]
    data = {
        "gpu": gpu_name,
        "triton": triton.__version__,
        "tiled": {f"{es},{bn}": list(c[:4]) for (es, bn), c in t["tiled"].items() if c.source == "tuned"},
        "coop": {f"{d},{M},{N}": list(c[:2]) for (d, M, N), c in t["coop"].items() if c.source == "tuned"},
    }
    path = cache_path(gpu_name)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        tmp.replace(path)
    except OSError:
        pass  # a read-only home: the tuned value still serves this process


def _gpu_name() -> str:
    from .device import gpu_props

    return gpu_props()["name"]


def tiled_config(n_cols: int, dtype: torch.dtype, tune=None) -> TiledConfig:
    """The tiled kernel's configuration for rows of ``n_cols`` columns of ``dtype`` on this GPU.
    ``tune``: the tiled wrapper (``softmax_tiled(x, block_m, num_warps, num_stages, programs_per_sm)``),
    with which a class neither recorded nor cached is tuned on first use; without it, the rule."""
    block_n = triton.next_power_of_2(max(n_cols, 1))
    es = dtype.itemsize
    if not ON_GPU or _mode() == "rule" or dtype == torch.float64:
        return tiled_rule(block_n, es)
    name = _gpu_name()
    t = tables(name)["tiled"]
    if (es, block_n) not in t:
        if tune is None:
            return tiled_rule(block_n, es)
        t[(es, block_n)] = autotune_tiled(block_n, dtype, tune)[0]
        _save(name)
    return t[(es, block_n)]


def _dtype_name(dtype: torch.dtype) -> str:
    d = str(dtype).replace("torch.", "")
    return "bfloat16" if d == "float16" else d  # 16-bit inputs share a configuration


def nearest_coop(coop: dict, dtype_name: str, n_rows: int, n_cols: int):
    """The key of ``coop`` ({(dtype, M, N): config}) of this dtype nearest to (n_rows, n_cols) on a
    log scale, or None if the dtype has none."""
    keys = [k for k in coop if k[0] == dtype_name]
    if not keys:
        return None
    return min(
        keys,
        key=lambda k: (
            abs(math.log2(k[1]) - math.log2(max(n_rows, 1))) + abs(math.log2(k[2]) - math.log2(max(n_cols, 1)))
        ),
    )


def coop_config(n_rows: int, n_cols: int, dtype: torch.dtype, tune=None) -> CoopConfig:
    """(columns per slice, warps) of the cooperative split kernel: the tuned long-row shape of this
    dtype nearest to (n_rows, n_cols) on a log scale. ``tune``: the cooperative wrapper
    (``softmax_split_coop(x, slice_cols, num_warps)``), with which a dtype neither recorded nor
    cached is tuned on first use; without it, the rule."""
    if not ON_GPU or _mode() == "rule":
        return coop_rule(n_rows)
    name = _gpu_name()
    d = _dtype_name(dtype)
    t = tables(name)["coop"]
    if nearest_coop(t, d, n_rows, n_cols) is None:
        if tune is None:
            return coop_rule(n_rows)
        for M, N in LONG_SHAPES:
            t[(d, M, N)] = autotune_coop(M, N, dtype, tune)[0]
        _save(name)
    return t[nearest_coop(t, d, n_rows, n_cols)]


def _gpu_ms(fn) -> float:
    return float(triton.testing.do_bench_cudagraph(fn, rep=20, return_mode="median"))


def _sync(x: torch.Tensor) -> None:
    if x.is_cuda:
        torch.cuda.synchronize()


def _reference(x: torch.Tensor) -> torch.Tensor:
    """float64 softmax of ``x``, checked before it judges anyone (its rows must sum to 1), and
    computed again if it fails: a wrong reference would fail every candidate of a class."""
    for _ in range(3):
        _sync(x)
        ref = torch.softmax(x.double(), -1)
        _sync(x)
        if bool(torch.isfinite(ref).all()) and float((ref.sum(-1) - 1).abs().max()) < 1e-9:
            return ref
    raise RuntimeError("the float64 reference softmax does not sum to 1: not tuning on it")


def _time_candidates(x: torch.Tensor, candidates: list) -> tuple[object, list[dict]]:
    """Check each ``(row, fn, config)`` against float64, time it in GPU time, fill in its ``row``
    (graph_ms, graph_frac against copy, status) and return (the fastest config or None, the rows).
    A candidate that fails (resources, compilation, a wrong result) is reported, never chosen."""
    ref = _reference(x)
    y = torch.empty_like(x)
    copy_ms = _gpu_ms(lambda: y.copy_(x))
    rows, best = [], None
    for row, fn, config in candidates:
        try:
            err = (fn().double() - ref).abs().max().item()
            if not err <= 2e-2:
                raise AssertionError(f"max abs error {err:.1e}")
            ms = _gpu_ms(fn)
            row.update(graph_ms=round(ms, 6), graph_frac=round(copy_ms / ms, 4))
            if best is None or ms < best[0]:
                best = (ms, config)
        except Exception as e:
            row.update(status=f"failed: {type(e).__name__}: {str(e).splitlines()[0][:80]}".replace(",", ";"))
        rows.append(row)
    del y, ref
    if x.is_cuda:
        torch.cuda.empty_cache()
    return (best[1] if best else None), rows


def _row(kind: str, dtype: torch.dtype, M: int, N: int, **config) -> dict:
    row = dict(
        kind=kind,
        dtype=str(dtype).replace("torch.", ""),
        element_size=dtype.itemsize,
        M=M,
        N=N,
        block_m="",
        num_warps="",
        num_stages="",
        programs_per_sm="",
        slice_cols="",
        graph_ms="",
        graph_frac="",
        status="ok",
    )
    row.update(config)
    return row


def autotune_tiled(
    block_n: int, dtype: torch.dtype, softmax_tiled, M: int = TUNE_ROWS, device: str = "cuda"
) -> tuple[TiledConfig, list[dict]]:
    """Time every candidate for rows of ``block_n`` columns (GPU time, an M x block_n input checked
    against float64 first) with ``softmax_tiled(x, block_m, num_warps, num_stages, programs_per_sm)``
    and return (the fastest, the rows of the sweep)."""
    x = torch.randn(M, block_n, device=device, dtype=dtype)
    best, rows = _time_candidates(
        x,
        [
            (
                _row("tiled", dtype, M, block_n, block_m=bm, num_warps=w, num_stages=st, programs_per_sm=pps),
                lambda bm=bm, w=w, st=st, pps=pps: softmax_tiled(x, bm, w, st, pps),
                TiledConfig(bm, w, st, pps, "tuned"),
            )
            for bm, w, st, pps in tiled_candidates(block_n, dtype.itemsize)
        ],
    )
    return best or tiled_rule(block_n, dtype.itemsize), rows


def autotune_coop(
    M: int, N: int, dtype: torch.dtype, softmax_split_coop, device: str = "cuda"
) -> tuple[CoopConfig, list[dict]]:
    """Time every (slice, warps) candidate of the cooperative kernel at one long-row shape with
    ``softmax_split_coop(x, slice_cols, num_warps)``."""
    x = torch.randn(M, N, device=device, dtype=dtype)
    best, rows = _time_candidates(
        x,
        [
            (
                _row("coop", dtype, M, N, num_warps=w, slice_cols=sl),
                lambda sl=sl, w=w: softmax_split_coop(x, sl, w),
                CoopConfig(sl, w, "tuned"),
            )
            for sl, w in coop_candidates()
        ],
    )
    return best or coop_rule(M), rows


def sweep(
    softmax_tiled, softmax_split_coop, dtypes=(torch.float32, torch.bfloat16), device: str = "cuda"
) -> list[dict]:
    """Every class, every candidate, on this GPU: the rows of ``figures/data/tuning_<gpu>.csv``.
    The tuner's entry point (``python tools/bench.py tune``) passes the two wrappers it tunes:
    ``helpers.kernels.softmax_tiled`` and ``helpers.kernels.softmax_split_coop``."""
    rows = []
    for dtype in dtypes:
        for bn in TILED_BLOCKS:
            rows += autotune_tiled(bn, dtype, softmax_tiled, device=device)[1]
        for M, N in LONG_SHAPES:
            rows += autotune_coop(M, N, dtype, softmax_split_coop, device=device)[1]
    return rows


def write_recorded(rows: list[dict], gpu_name: str, meta: dict) -> Path:
    path = write_csv(recorded_path(gpu_name), rows, meta)
    _TABLES.pop(gpu_name, None)
    return path
