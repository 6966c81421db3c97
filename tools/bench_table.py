"""Write the recorded benchmark (figures/data/bench.csv) as a markdown table into README.md and
PERFORMANCE.md, between the `<!-- bench-table:start -->` / `<!-- bench-table:end -->` markers.

Usage: python tools/bench_table.py [--check]   (--check: exit 1 if a file is out of date)
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from helpers.gpu_data import provenance_line, read_csv  # noqa: E402

COLS = ["torch_softmax", "torch_compile", "fused", "online", "persistent", "split_coop", "softmax"]
HEAD = ["torch.softmax", "torch.compile", "03 fused", "04 online", "05 persistent", "06 split (coop)", "**softmax**"]


def table() -> str:
    rows, meta = read_csv(ROOT / "figures/data/bench.csv")
    cell = {}
    for r in rows:
        v = r.get("frac_of_copy")
        cell[(r["dtype"], r["M"], r["N"], r["provider"])] = v if r.get("status") == "ok" and isinstance(v, float) and math.isfinite(v) else None
    shapes = []
    for r in rows:
        k = (r["dtype"], r["M"], r["N"])
        if k not in shapes:
            shapes.append(k)
    out = [f"Fraction of copy bandwidth (higher is better; 1.0 = `y.copy_(x)` on the same tensor). {provenance_line(meta)}", "",
           "| dtype | M × N | " + " | ".join(HEAD) + " |", "|---|---|" + "---:|" * len(HEAD)]
    for d, M, N in shapes:
        vals = []
        peers = [cell.get((d, M, N, p)) for p in ("torch_softmax", "torch_compile")]
        best_peer = max([p for p in peers if p is not None], default=None)
        for p in COLS:
            v = cell.get((d, M, N, p))
            s = "–" if v is None else f"{v:.2f}"
            if p == "softmax" and v is not None:
                s = f"**{s}**"
            vals.append(s)
        out.append(f"| {d} | {M}×{N} | " + " | ".join(vals) + " |")
    out.append("")
    out.append("`–`: the kernel does not take rows that long (a single block would not fit on chip).")
    return "\n".join(out)


def median_table() -> str:
    """softmax and the best peer per shape: each recorded run (figures/data/bench_runs/) and the median."""
    import statistics

    runs = sorted((ROOT / "figures/data/bench_runs").glob("*.csv"), key=lambda p: read_csv(p)[1].get("date", ""))
    data = []
    for p in runs:
        rows, meta = read_csv(p)
        cell = {(r["dtype"], r["M"], r["N"], r["provider"]): r["frac_of_copy"] for r in rows
                if r.get("status") == "ok" and isinstance(r.get("frac_of_copy"), float) and math.isfinite(r["frac_of_copy"])}
        data.append((p.stem.replace("bench_", ""), meta, cell))
    shapes = []
    for r in read_csv(runs[-1])[0]:
        k = (r["dtype"], r["M"], r["N"])
        if k not in shapes:
            shapes.append(k)
    names = [n for n, _, _ in data]
    out = ["`softmax` as a fraction of copy in each recorded sweep (by commit, oldest first), their median, and the median "
           "of the best of torch.softmax / torch.compile in the same runs. All on NVIDIA H200 machines lent on "
           "2026-11-22.", "",
           "| dtype | M × N | " + " | ".join(names) + " | **median** | best peer (median) |",
           "|---|---|" + "---:|" * (len(names) + 2)]
    for d, M, N in shapes:
        mine = [c.get((d, M, N, "softmax")) for _, _, c in data]
        peer = [max([v for v in (c.get((d, M, N, "torch_softmax")), c.get((d, M, N, "torch_compile"))) if v is not None], default=None)
                for _, _, c in data]
        med = lambda v: statistics.median([x for x in v if x is not None]) if any(x is not None for x in v) else None
        fmt = lambda v: "–" if v is None else f"{v:.2f}"
        out.append(f"| {d} | {M}×{N} | " + " | ".join(fmt(v) for v in mine) + f" | **{fmt(med(mine))}** | {fmt(med(peer))} |")
    return "\n".join(out)


def fill(path: Path, text: str, marker: str = "bench-table") -> tuple:
    src = path.read_text()
    new = re.sub(rf"(<!-- {marker}:start -->\n).*?(<!-- {marker}:end -->)", lambda m: m.group(1) + text + "\n" + m.group(2), src, flags=re.S)
    return src, new


def fill_text(src: str, text: str, marker: str) -> str:
    return re.sub(rf"(<!-- {marker}:start -->\n).*?(<!-- {marker}:end -->)", lambda m: m.group(1) + text + "\n" + m.group(2), src, flags=re.S)


def main(argv) -> int:
    t = table()
    stale = []
    for name in ("README.md", "PERFORMANCE.md"):
        p = ROOT / name
        if not p.exists():
            continue
        old, new = fill(p, t)
        if "bench-median:start" in new:
            new = fill_text(new, median_table(), "bench-median")
        if old != new:
            stale.append(name)
            if "--check" not in argv:
                p.write_text(new)
    if "--check" in argv and stale:
        print("out of date (run python tools/bench_table.py):", *stale)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
