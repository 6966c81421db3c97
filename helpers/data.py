"""Recorded measurements as pandas DataFrames, and the course's one table style.

A lesson reads a recording, derives what its prose needs in a few visible lines of pandas, and
shows the result as a table::

    bench = data.load("bench", gpu="h100")          # a DataFrame; bench.attrs["provenance"] says where from
    print(data.provenance(bench))                   # one line: GPU, driver, versions, date, command
    long = bench.query("N >= 65536 and dtype == 'float32'")
    table = long.pivot_table(index=["M", "N"], columns="provider", values="graph_frac")
    data.show(table, best="max")                    # HTML in JupyterLab and on the site, text elsewhere

Live measurements (on a GPU) become the same kind of DataFrame with ``data.frame(rows, meta)``, so
the cells after them do not care where the numbers came from.
"""

from __future__ import annotations

import hashlib
import io
import numbers
from pathlib import Path

import numpy as np
import pandas as pd

from .gpu_data import DATA_DIR, SPREAD_LIMIT, split_header

__all__ = ["load", "frame", "provenance", "gpu", "show", "noisy", "SPREAD_LIMIT", "DATA_DIR"]


def _path(name: str, gpu: str | None) -> Path:
    if not isinstance(name, str) or not name:
        raise TypeError(f"data.load: name must be a recording's name such as 'bench', got {name!r}.")
    p = Path(name)
    if p.suffix == ".csv" and p.exists():
        return p
    stem = p.stem if p.suffix == ".csv" else name
    if gpu is not None:
        stem = f"{stem}_{str(gpu).lower()}"
    path = DATA_DIR / f"{stem}.csv"
    if not path.exists():
        known = sorted(q.stem for q in DATA_DIR.glob("*.csv"))
        raise FileNotFoundError(
            f"data.load: no recording figures/data/{stem}.csv. Recordings there: {', '.join(known)}. "
            f"They are written by GPU runs (the README's 'Recording GPU data')."
        )
    return path


def load(name: str, gpu: str | None = None) -> pd.DataFrame:
    """The recording ``figures/data/<name>.csv`` (``<name>_<gpu>.csv`` with ``gpu``) as a DataFrame.

    The file's ``# key: value`` header lines become ``df.attrs["provenance"]`` (gpu, driver, torch,
    triton, date, commit, command) and ``df.attrs["source"]`` names the file.
    """
    path = _path(name, gpu)
    meta, body = split_header(path.read_text())
    df = pd.read_csv(io.StringIO(body))
    df.attrs["provenance"] = meta
    df.attrs["source"] = path.name
    return df


def frame(rows, meta: dict, source: str = "this run") -> pd.DataFrame:
    """Rows measured live (a list of dicts) with their provenance, as ``load`` returns a recording."""
    df = pd.DataFrame(list(rows))
    df.attrs["provenance"] = dict(meta)
    df.attrs["source"] = source
    return df


def provenance(df: pd.DataFrame) -> str:
    """One line saying where a table's numbers come from: GPU, driver, versions, date and command."""
    meta = getattr(df, "attrs", {}).get("provenance")
    if meta is None:
        raise ValueError(
            "data.provenance: this DataFrame carries no provenance (make it with data.load or data.frame)."
        )
    src = df.attrs.get("source", "")
    line = (f"{src}: " if src else "") + (
        f"{meta.get('gpu', '?')} (driver {meta.get('driver', '?')}), torch {meta.get('torch', '?')}, "
        f"Triton {meta.get('triton', '?')}, {meta.get('date', '?')}"
    )
    if meta.get("command"):
        line += f", by `{meta['command']}`"
    return line + "."


def gpu(df: pd.DataFrame) -> str:
    """The GPU a table was measured on, from its provenance ('GPU' when it names none)."""
    return getattr(df, "attrs", {}).get("provenance", {}).get("gpu", "GPU")


def noisy(spread) -> pd.DataFrame | pd.Series:
    """Cells whose rounds spread over ``SPREAD_LIMIT`` (10%): no conclusion rests on them."""
    return spread > SPREAD_LIMIT


class Table:
    """A styled table: HTML (pandas' Styler) in JupyterLab and on the site, aligned text elsewhere.
    Both renderings are deterministic, so stored notebook outputs compare equal on re-runs."""

    def __init__(self, df: pd.DataFrame, styler, text: str):
        self.data, self.styler, self._text = df, styler, text

    def _repr_html_(self) -> str:
        return self.styler.to_html()

    def __repr__(self) -> str:
        return self._text


def _fmt(v, digits: int) -> str:
    """A cell as text: strings as they are, NaN as a dash, integers (numpy's too) without
    decimals and with thousands separators from 10,000, floats with ``digits`` decimals."""
    if isinstance(v, str):
        return v
    if v is None or (isinstance(v, (float, np.floating)) and v != v):
        return "–"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (numbers.Integral, np.integer)):
        return f"{int(v):,}" if abs(int(v)) >= 10000 else str(int(v))
    return f"{float(v):.{digits}f}"


def show(
    df, *, digits: int = 2, best: str | None = None, axis: int = 1, noisy=None, caption: str | None = None
) -> Table:
    """Display ``df`` (a DataFrame or Series) in the course's table style.

    ``digits``: decimals of floats. ``best``: 'max' or 'min' marks the best value of each row
    (``axis=1``) or column (``axis=0``) in bold. ``noisy``: a boolean DataFrame of the same shape
    (e.g. ``spread > data.SPREAD_LIMIT``); its True cells get a ``*`` and a grey background.
    """
    if isinstance(df, pd.Series):
        df = df.to_frame()
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"data.show: expected a pandas DataFrame or Series, got {type(df).__name__}.")
    if best not in (None, "max", "min"):
        raise ValueError(f"data.show: best must be 'max', 'min' or None, got {best!r}.")
    if axis not in (0, 1):
        raise ValueError(f"data.show: axis must be 0 (best per column) or 1 (best per row), got {axis!r}.")
    mask = None
    if noisy is not None:
        mask = pd.DataFrame(noisy).reindex(index=df.index, columns=df.columns).fillna(False).astype(bool)

    def cell(v, r, c):
        s = _fmt(v, digits)
        return s + "*" if mask is not None and bool(mask.iat[r, c]) else s

    shown = pd.DataFrame(
        [[cell(df.iat[r, c], r, c) for c in range(df.shape[1])] for r in range(df.shape[0])],
        index=df.index,
        columns=df.columns,
    )
    numeric = df.apply(pd.to_numeric, errors="coerce")
    bold = pd.DataFrame(False, index=df.index, columns=df.columns)
    if best is not None and df.size:
        ext = numeric.max(axis=axis) if best == "max" else numeric.min(axis=axis)
        bold = numeric.eq(ext, axis=0 if axis == 1 else 1) & numeric.notna()

    css = pd.DataFrame("", index=df.index, columns=df.columns)
    css = css.mask(bold, "font-weight: bold;")
    if mask is not None:
        css = css.mask(mask, css + "background-color: #e8e8e8; color: #666;")
    styler = shown.style.apply(lambda _: css, axis=None)
    note = (
        f"* rounds spread over {SPREAD_LIMIT:.0%}: no conclusion rests on this cell"
        if mask is not None and mask.values.any()
        else ""
    )
    cap = " ".join(s for s in (caption or "", note) if s)
    if cap:
        styler = styler.set_caption(cap)
    text = shown.to_string()
    if bold.values.any():
        marked = shown.where(~bold, "[" + shown + "]")
        text = marked.to_string()
    if cap:
        text = cap + "\n" + text
    uid = hashlib.sha1((text + str(df.shape)).encode()).hexdigest()[:8]
    styler = styler.set_uuid(uid).set_table_attributes('class="course-table"')
    return Table(df, styler, text)
