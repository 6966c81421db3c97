"""The course's benchmark harness: validates and times every softmax on a GPU and records the data
the lessons and the README show (``figures/data/``), with provenance.

    python tools/bench.py sweep     # `make bench`: every provider at every shape -> bench_<gpu>.csv
    python tools/bench.py tune      # the tuned configurations of this GPU -> tuning_<gpu>.csv
    python tools/bench.py lessons   # what lessons 03-06 measure -> device_props.csv, fused_limits.csv, ...
    python tools/bench.py launch    # host µs per call of each way to launch a kernel -> launch_<gpu>.csv
    python tools/bench.py all

How each case is timed is ``helpers.measure``'s docstring. ``--out`` names another file for the
sweep (e.g. a second run for the run-to-run check).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # helpers, from this checkout


import helpers  # noqa: E402,F401  (first: interpreter or GPU)
from helpers import gpu_data
from helpers.gpu_data import DATA_DIR, gpu_short_name, provenance, write_csv
from helpers.measure import DTYPES, exit_without_gpu, measure_shape, progress, providers, rounded, warm_up_gpu

#: The `make bench` sweep: M = 4096 over N, and few long rows.
SWEEP_SHAPES = [(4096, n) for n in (256, 512, 1024, 2048, 4096, 8192, 12672, 16384, 32768)] + [
    (1024, 65536),
    (256, 131072),
    (64, 262144),
    (8, 1048576),
]
#: Shapes no configuration was picked on (the tuner sees M = 4096 and powers of two): the check
#: that the choices carry over.
HELD_OUT_SHAPES = [(1000, 700), (16384, 384), (2048, 3000), (777, 12000), (300, 100000)]


def require_gpu(what: str = "the benchmark") -> None:
    exit_without_gpu(what)


def sweep(shapes=None, dtypes=("float32", "bfloat16"), provs=None, out_name=None) -> Path:
    """Every provider at every shape (the sweep and the held-out shapes), written with provenance."""
    require_gpu("`make bench`")
    shapes = shapes or SWEEP_SHAPES + HELD_OUT_SHAPES
    provs = providers() if provs is None else provs
    warm_up_gpu()
    rows = []
    name = out_name or f"bench_{gpu_short_name()}"
    meta = provenance("python tools/bench.py sweep")
    for d, (M, N) in progress([(d, s) for d in dtypes for s in shapes], "bench"):
        rows += measure_shape(M, N, DTYPES[d], provs)
        path = write_csv(
            DATA_DIR / f"{name}.csv", rounded(rows), meta
        )  # after every shape: a cut-off run keeps its cells
    print(f"wrote {path}", file=sys.stderr)
    return path


def summary(rows: list[dict], provider: str = "softmax") -> str:
    """GPU time and eager time as fractions of copy: ``provider`` against the best peer of each cell."""
    peers = ("torch_softmax", "torch_compile", "triton_tutorial", "liger")
    by = {}
    for r in rows:
        by.setdefault((r["dtype"], r["M"], r["N"]), {})[r["provider"]] = r
    lines = [f"{'dtype':9} {'M':>5} {'N':>8} | {provider} gpu  eager  host_us | best peer gpu (who)   eager (who)"]
    for (d, M, N), p in by.items():
        mine = p.get(provider)
        if mine is None or not str(mine["status"]).startswith("ok"):
            continue
        ok = {k: v for k, v in p.items() if k in peers and str(v["status"]).startswith("ok")}
        bg = max(ok, key=lambda k: ok[k]["graph_frac"], default=None)
        be = max(ok, key=lambda k: ok[k]["frac_of_copy"], default=None)
        lines.append(
            f"{d:9} {M:5d} {N:8d} | {mine['graph_frac']:.3f} {mine['frac_of_copy']:.3f} {mine['host_us']:6.1f} | "
            + (f"{ok[bg]['graph_frac']:.3f} ({bg})  {ok[be]['frac_of_copy']:.3f} ({be})" if bg else "-")
        )
    return "\n".join(lines)


def tune() -> Path:
    """Time every candidate configuration of this GPU and record the table ``helpers.tuning`` reads."""
    require_gpu("tuning")
    from helpers import kernels, tuning
    from helpers.device import gpu_props

    warm_up_gpu()
    t0 = time.time()
    rows = tuning.sweep(kernels.softmax_tiled, kernels.softmax_split_coop)
    name = gpu_props()["name"]
    path = tuning.write_recorded(rows, name, provenance("python tools/bench.py tune"))
    print(f"wrote {path} ({len(rows)} candidates in {time.time() - t0:.0f} s)", file=sys.stderr)
    return path


def lessons(out_dir=DATA_DIR, only=None) -> None:
    """Record what lessons 03-06 show on this GPU: each lesson's own measurement functions."""
    require_gpu("recording the lessons' GPU data")
    from helpers import lesson03, lesson04, lesson05, lesson06

    jobs = {
        "device_props": lesson05.device_props_rows,
        "occupancy_check": lesson05.occupancy_check_rows,
        "fused_limits": lesson03.limits_rows,
        "rows_grow": lesson04.rows_grow_rows,
        "persistent_programs": lesson05.programs_rows,
        "persistent_tuning": lesson05.tuning_rows,
        "split_l2": lesson06.l2_rows,
    }
    for name, job in jobs.items():
        if only and name not in only:
            continue
        t0 = time.time()
        rows = job()
        write_csv(Path(out_dir) / f"{name}.csv", rounded(rows), provenance(f"python tools/bench.py lessons ({name})"))
        print(f"{name}: {len(rows)} rows in {time.time() - t0:.0f} s", file=sys.stderr)


def launch(out_name=None) -> Path:
    """Host µs per call of each way to launch the same compiled kernel, and of every wrapper."""
    require_gpu("the launch-cost measurement")
    from helpers import lesson05

    rows = lesson05.launch_cost_rows()
    path = write_csv(
        DATA_DIR / f"{out_name or 'launch_' + gpu_short_name()}.csv",
        rounded(rows, 3),
        provenance("python tools/bench.py launch"),
    )
    print(f"wrote {path}", file=sys.stderr)
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/bench.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("what", nargs="?", default="sweep", choices=["sweep", "tune", "lessons", "launch", "all"])
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--out", default=None, help="file name (without .csv) under figures/data/ for the sweep")
    ap.add_argument("--only", default=None, help="lessons: record only these files (comma-separated names)")
    args = ap.parse_args(argv)
    require_gpu("`python tools/bench.py`")
    if args.what in ("tune", "all"):
        tune()
    if args.what in ("lessons", "all"):
        lessons(only=args.only.split(",") if args.only else None)
    if args.what in ("launch", "all"):
        launch()
    if args.what in ("sweep", "all"):
        path = sweep(dtypes=tuple(args.dtypes.split(",")), out_name=args.out)
        rows, _ = gpu_data.read_csv(path)
        print(summary(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
