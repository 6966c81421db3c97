"""Recorded GPU measurements under ``figures/data/``, with their provenance.

Every file is a CSV whose first lines are ``# key: value`` comments naming where the numbers came
from (gpu, driver, torch, triton, date, commit, command), then a header row and the data. On the
CPU the lessons show these files and say where they came from; on a GPU they measure live with
the same code that wrote them (``tools/bench.py`` calls the lessons' measurements).
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import math
import os
import re
import subprocess
from pathlib import Path

import torch

from .mode import ON_GPU, triton_version

COURSE_ROOT = Path(__file__).resolve().parent.parent
#: The repository's ``figures/`` and ``figures/data/`` folders.
FIGURES_DIR = COURSE_ROOT / "figures"
DATA_DIR = FIGURES_DIR / "data"

PROVENANCE_KEYS = ("gpu", "driver", "torch", "triton", "date", "commit", "command")


def _driver() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "unknown"
    except Exception:
        return "unknown"


def _commit(root: Path = COURSE_ROOT) -> str:
    """The course's own commit: ``$SOFTMAX_COURSE_COMMIT`` if set (a copy sent to a GPU machine
    without its .git), else ``git rev-parse`` when the course's folder is the top of its own git
    checkout, else 'unknown' (a copy inside another repository must not name that one's commit)."""
    env = os.environ.get("SOFTMAX_COURSE_COMMIT")
    if env:
        return env
    try:
        top = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, timeout=10, cwd=root
        )
        if top.returncode != 0 or Path(top.stdout.strip()).resolve() != root.resolve():
            return "unknown"
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10, cwd=root
        )
        return out.stdout.strip() or "unknown"
    except Exception:
        return "unknown"


def provenance(command: str = "") -> dict:
    """Where a live measurement comes from: GPU, driver, versions, UTC date, commit, command."""
    return {
        "gpu": torch.cuda.get_device_name() if ON_GPU else "none (CPU interpreter)",
        "driver": _driver() if ON_GPU else "none",
        "torch": torch.__version__,
        "triton": triton_version(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _commit(),
        "command": command,
    }


def split_header(text: str) -> tuple[dict, str]:
    """A recording's ``# key: value`` header lines (its provenance, as ``write_csv`` writes them) and the CSV
    below them: the one reader of the header, for ``read_csv`` here and ``helpers.data.load``."""
    meta, body = {}, []
    for line in text.splitlines():
        if line.startswith("# ") and not body:
            k, _, v = line[2:].partition(": ")
            meta[k.strip()] = v.strip()
        elif line.strip():
            body.append(line)
    return meta, "\n".join(body)


def write_csv(path, rows: list[dict], meta: dict) -> Path:
    """Write ``rows`` (dicts with the same keys) to a CSV with a provenance header."""
    path = Path(path)
    if not rows:
        raise ValueError(f"write_csv: no rows to write to {path}.")
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    for k, v in meta.items():
        buf.write(f"# {k}: {v}\n")
    w = csv.DictWriter(buf, fieldnames=list(rows[0].keys()), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    path.write_text(buf.getvalue())
    return path


def _convert(v: str):
    for t in (int, float):
        try:
            return t(v)
        except ValueError:
            pass
    return v


def read_csv(name_or_path) -> tuple[list[dict], dict]:
    """Read a recorded CSV (a name under figures/data/, with or without .csv, or a path).
    Returns (rows, provenance); numbers come back as int/float."""
    p = Path(name_or_path)
    if not p.suffix:
        p = p.with_suffix(".csv")
    if not p.is_absolute() and not p.exists():
        p = DATA_DIR / p.name
    if not p.exists():
        raise FileNotFoundError(
            f"no recorded data at figures/data/{p.name}: it is written by a GPU run "
            f"(see the README's 'Recording GPU data')."
        )
    meta, body = split_header(p.read_text())
    rows = [{k: _convert(v) for k, v in r.items()} for r in csv.DictReader(io.StringIO(body))]
    return rows, meta


#: The GPU whose recordings the lessons show (one GPU throughout, its peaks stated once): the
#: README and PERFORMANCE.md also show the H200's.
LESSON_GPU = "h100"


def gpu_short_name(name: str | None = None) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'h100', 'NVIDIA H200' -> 'h200' (another GPU: its whole name,
    lower-case, non-alphanumerics as '_'). Without a name, the active GPU's."""
    if name is None:
        name = torch.cuda.get_device_name() if ON_GPU else "cpu"
    m = re.search(r"\b([A-Z]{1,2}\d{2,4})\b", name)
    return m.group(1).lower() if m else re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def bench(gpu: str = LESSON_GPU) -> tuple[list[dict], dict]:
    """The recorded `make bench` sweep of a GPU ('h100', 'h200'): (rows, provenance)."""
    return read_csv(f"bench_{gpu}")


def previous_bench(gpu: str = LESSON_GPU) -> tuple[list[dict], dict]:
    """The sweep of ``gpu`` recorded before the current ``bench_<gpu>.csv``: the newest by date of
    those kept under ``figures/data/bench_runs/``. FileNotFoundError when there is none."""
    current = bench(gpu)[1].get("date", "")
    runs = [read_csv(f) for f in sorted((DATA_DIR / "bench_runs").glob(f"bench_{gpu}_*.csv"))]
    runs = [(rows, meta) for rows, meta in runs if meta.get("date", "") < current]
    if not runs:
        raise FileNotFoundError(f"no earlier sweep of the {gpu.upper()} under figures/data/bench_runs/")
    return max(runs, key=lambda rm: rm[1]["date"])


def sweep_agreement(
    current: list[dict], earlier: list[dict], changed=("softmax", "split_coop"), within: float = 0.05
) -> dict:
    """How far two sweeps agree in GPU time, cell by cell, over the cells both measured of every
    provider not in ``changed``: the number of cells, how many differ by at most ``within``, the
    median difference (all absolute), and the cells outside as ((dtype, M, N, provider), signed
    difference) pairs, largest first: current / earlier - 1."""
    key = lambda r: (r["dtype"], r["M"], r["N"], r["provider"])  # noqa: E731
    ka = {key(r): r for r in current if ok(r) and r["provider"] not in changed}
    kb = {key(r): r for r in earlier if ok(r) and r["provider"] not in changed}
    signed = {k: ka[k]["graph_ms"] / kb[k]["graph_ms"] - 1 for k in ka if k in kb}
    diffs = sorted(abs(d) for d in signed.values())
    outside = sorted(((k, d) for k, d in signed.items() if abs(d) > within), key=lambda kd: abs(kd[1]))
    return dict(
        cells=len(diffs),
        within=sum(d <= within for d in diffs),
        median=diffs[len(diffs) // 2],
        outside=outside,
        limit=within,
        changed=tuple(changed),
    )


#: A cell whose rounds differ by more than this (max - min over the median) carries no conclusion:
#: the lessons star it and leave it out of what they conclude.
SPREAD_LIMIT = 0.10


def ok(row: dict, key: str = "graph_frac") -> bool:
    """A measured row whose ``key`` is a finite number."""
    v = row.get(key)
    return str(row.get("status", "ok")).startswith("ok") and isinstance(v, (int, float)) and math.isfinite(v)


def device_props(live: bool | None = None) -> tuple[dict, dict]:
    """(props, provenance): the GPU's limits, live on a GPU, else the recorded ``device_props.csv``."""
    live = ON_GPU if live is None else live
    if live:
        from .device import gpu_props

        return gpu_props(), provenance("helpers.gpu_props()")
    rows, meta = read_csv("device_props")
    return rows[0], meta
