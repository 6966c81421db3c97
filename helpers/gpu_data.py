"""Recorded GPU measurements under ``figures/data/``, with their provenance.

Every file is a CSV whose first lines are ``# key: value`` comments naming where the numbers came
from (gpu, driver, torch, triton, date, commit, command), then a header row and the data. On the
CPU the lessons show these files and say where they came from; on a GPU they measure live with
the same code (``helpers.bench``) that wrote them.
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import os
import subprocess
from pathlib import Path

import torch
import triton

from .mode import ON_GPU

#: The repository's ``figures/`` and ``figures/data/`` folders.
FIGURES_DIR = Path(__file__).resolve().parent.parent / "figures"
DATA_DIR = FIGURES_DIR / "data"

PROVENANCE_KEYS = ("gpu", "driver", "torch", "triton", "date", "commit", "command")


def _driver() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20,
        )
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "unknown"
    except Exception:
        return "unknown"


def _commit() -> str:
    env = os.environ.get("SOFTMAX_COURSE_COMMIT")
    if env:
        return env
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10,
            cwd=Path(__file__).resolve().parent,
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
        "triton": triton.__version__,
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _commit(),
        "command": command,
    }


def provenance_line(meta: dict) -> str:
    """One sentence naming where recorded numbers came from."""
    return (
        f"Recorded on {meta.get('gpu', '?')} (driver {meta.get('driver', '?')}), torch {meta.get('torch', '?')}, "
        f"Triton {meta.get('triton', '?')}, {meta.get('date', '?')}, commit {meta.get('commit', '?')}"
        + (f", by `{meta['command']}`" if meta.get("command") else "")
        + "."
    )


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
    meta, body = {}, []
    for line in p.read_text().splitlines():
        if line.startswith("# ") and not body:
            k, _, v = line[2:].partition(": ")
            meta[k.strip()] = v.strip()
        elif line.strip():
            body.append(line)
    rows = [{k: _convert(v) for k, v in r.items()} for r in csv.DictReader(io.StringIO("\n".join(body)))]
    return rows, meta


def recorded_props() -> dict:
    """The device limits recorded on a real GPU (figures/data/device_props.csv), in the form
    ``helpers.occupancy()`` takes, plus ``provenance``."""
    rows, meta = read_csv("device_props")
    return {**rows[0], "provenance": provenance_line(meta)}
