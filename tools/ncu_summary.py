"""Summarize the Nsight Compute reports of tools/ncu_probe.py into one CSV the notes and lessons read.

    python tools/ncu_summary.py figures/data/probes/ncu_h100_*.csv --out figures/data/ncu_h100.csv \
        --meta gpu="NVIDIA H100 80GB HBM3" commit=c691811 date="2026-11-23 00:20 UTC"

One row per profiled kernel: duration, DRAM throughput (% of peak and bytes/s), DRAM bytes
(throughput x duration), L2 hit rate, achieved and theoretical occupancy, registers, and the
warp-state rule's sentence (what ncu says limits the kernel).
"""

import argparse
import csv
import io
import sys
from pathlib import Path

WANT = {
    ("GPU Speed Of Light Throughput", "Duration"): "duration_ns",
    ("GPU Speed Of Light Throughput", "DRAM Throughput"): "dram_pct_of_peak",
    ("GPU Speed Of Light Throughput", "Compute (SM) Throughput"): "sm_pct_of_peak",
    ("Memory Workload Analysis", "Memory Throughput"): "dram_bytes_per_s",
    ("Memory Workload Analysis", "L2 Hit Rate"): "l2_hit_pct",
    ("Occupancy", "Achieved Occupancy"): "achieved_occupancy_pct",
    ("Occupancy", "Theoretical Occupancy"): "theoretical_occupancy_pct",
    ("Launch Statistics", "Registers Per Thread"): "registers",
    ("Launch Statistics", "Grid Size"): "grid",
    ("Launch Statistics", "Block Size"): "block",
    ("Warp State Statistics", "Warp Cycles Per Issued Instruction"): "warp_cycles_per_issue",
}


def num(v: str):
    v = v.replace(",", "")
    try:
        return float(v)
    except ValueError:
        return v


def summarize(path: Path) -> list[dict]:
    text = "\n".join(line for line in path.read_text().splitlines() if line.startswith('"'))
    rows = {}
    for r in csv.DictReader(io.StringIO(text)):
        k = rows.setdefault(r["ID"], {"case": path.stem.split("_", 2)[-1], "kernel": r["Kernel Name"]})
        key = WANT.get((r["Section Name"], r["Metric Name"]))
        if key:
            k[key] = num(r["Metric Value"])
    out = []
    for k in rows.values():
        if isinstance(k.get("dram_bytes_per_s"), float) and isinstance(k.get("duration_ns"), float):
            k["dram_bytes"] = round(k["dram_bytes_per_s"] * k["duration_ns"] * 1e-9)
        out.append(k)
    return out


def main(argv) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--meta", nargs="*", default=[])
    a = ap.parse_args(argv)
    rows = [r for f in a.files for r in summarize(Path(f))]
    cols = ["case", "kernel"] + list(WANT.values()) + ["dram_bytes"]
    with open(a.out, "w", newline="") as f:
        for m in a.meta:
            k, _, v = m.partition("=")
            f.write(f"# {k}: {v}\n")
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({c: r.get(c, "") for c in cols})
    print(f"wrote {a.out}: {len(rows)} kernels")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
