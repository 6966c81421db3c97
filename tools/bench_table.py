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


def fill(path: Path, text: str) -> str:
    src = path.read_text()
    new = re.sub(r"(<!-- bench-table:start -->\n).*?(<!-- bench-table:end -->)", lambda m: m.group(1) + text + "\n" + m.group(2), src, flags=re.S)
    return src, new


def main(argv) -> int:
    t = table()
    stale = []
    for name in ("README.md", "PERFORMANCE.md"):
        p = ROOT / name
        if not p.exists():
            continue
        old, new = fill(p, t)
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
