"""Same-run A/B of the backward's launch rule (issue #22): main's rule against this branch's.

main:   rows up to 32768 columns -> the tiled kernel, backward_tiled_config's old rule (one row of 32 warps
        from 16384 columns on, in every dtype); longer rows -> the split (softmax_backward_coop).
branch: float32 rows of more than 8192 columns -> one row of 8 warps; rows that fit but span more than one
        4096-column slice go to the split when rows x slices <= SMs (backward_splits_few_rows); the rest as main.

Cells: the held-out N = 32000 rows (M = 1, 8, 16, 32, 64, 256: 16 and 32 bracket the split's boundary at
132 SMs), M = 4096 x {12672, 16384, 32768} (the float32 rule touches them) and the four long-row shapes
(unchanged code: main and branch must tie), float32 and bfloat16. Variants per cell: copy, main, branch,
Liger-Kernel's backward where installed and N <= 65536, and where it informs the rule: tiled_16w (float32
one-row tiles at 16 warps), tiled (the branch's tile where the branch splits) and coop (the split where
the branch tiles, M <= 64). GPU time (do_bench_cudagraph, rep 50 ms as tools/backward_bench.py), rounds
interleaved, every variant checked against float64 first. graph_frac = 1.5 x copy / time.

    export PYTHONPATH=$PWD; python scratch_bwd_rule/ab.py --out $OUT/backward_rule_ab_h100.csv
    TRITON_INTERPRET=1 python scratch_bwd_rule/ab.py --smoke --out /tmp/ab_smoke.csv   # CPU: correctness only
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import torch  # noqa: E402
import triton  # noqa: E402

import backward_bench as bb  # noqa: E402
import helpers  # noqa: E402
from helpers import measure  # noqa: E402
from helpers.gpu_data import provenance, write_csv  # noqa: E402
from helpers.kernels import backward as B  # noqa: E402

HELD = tuple((m, 32000) for m in (1, 8, 16, 32, 64, 256))
M4096 = tuple((4096, n) for n in (12672, 16384, 32768))
LONG = ((1024, 65536), (256, 131072), (64, 262144), (8, 1048576))
GROUPS = {"held-out": HELD, "M=4096": M4096, "long": LONG}
SMOKE = {"held-out": ((1, 32000), (8, 32000), (3, 9000)), "M=4096": ((64, 12672),), "long": ((2, 40000),)}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def main_config(n_cols):
    """main's backward_tiled_config: 4096 elements a program, about 16 a thread, 32 warps at most."""
    block_n = triton.next_power_of_2(max(n_cols, 1))
    block_m = max(1, min(64, 4096 // block_n))
    return block_m, min(32, max(1, block_m * block_n // (32 * 16)))


def main_rule(y, dy):
    if y.shape[-1] <= B.BACKWARD_TILED_MAX_COLS:
        bm, w = main_config(y.shape[-1])
        return B.softmax_backward_tiled(y, dy, block_m=bm, num_warps=w)
    return B.softmax_backward(y, dy)


def launch_of(fn_plan, y, dy):
    """'kernel/warps' of what a wrapper launches for (y, dy), or the kernel it hands over to."""
    plan = fn_plan.plan(y, dy)
    if plan.launches:
        ln = plan.launches[0]
        name = getattr(ln.kernel, "__name__", None) or getattr(getattr(ln.kernel, "fn", None), "__name__", "?")
        return f"{name.replace('softmax_backward_', '').replace('_kernel', '')}/{ln.num_warps}w"
    return f"delegate:{getattr(plan.delegate, '__name__', '?')}"


def variants(y, dy, liger):
    M, N = y.shape
    out = torch.empty_like(y)
    v = {"copy": lambda: out.copy_(y), "main": lambda: main_rule(y, dy), "branch": lambda: B.softmax_backward(y, dy)}
    if liger is not None and N <= 65536:
        v["liger"] = lambda: liger(y, dy, out)
    if N <= B.BACKWARD_TILED_MAX_COLS:
        branch_kernel = launch_of(B._backward, y, dy)
        if y.dtype == torch.float32 and B.backward_tiled_config(N, 4) == (1, 8):
            v["tiled_16w"] = lambda: B.softmax_backward_tiled(y, dy, block_m=1, num_warps=16)
        if branch_kernel.startswith("coop"):
            v["tiled"] = lambda: B.softmax_backward_tiled(y, dy)
        elif M <= 64 and triton.cdiv(N, 4096) > 1:
            v["coop"] = lambda: B.softmax_backward_coop(y, dy)
    return v


def run(groups, rounds, timer, out_csv, smoke, budget_s):
    t0 = time.time()
    liger = bb.liger_backward()
    print(f"liger: {'yes' if liger else 'not installed'}; SMs: {helpers.device.sm_count() if helpers.ON_GPU else '-'}",
          flush=True)
    rows = []
    for group, shapes in groups.items():
        for dname, dt in DTYPES.items():
            for M, N in shapes:
                if time.time() - t0 > budget_s:
                    print(f"STOP: over the {budget_s} s budget before {group} {dname} {M}x{N}", flush=True)
                    break
                y, dy = bb.inputs(M, N, dt)
                ref = bb.reference_backward(y, dy)
                branch_launch = launch_of(B._backward, y, dy)
                ok, err = {}, {}
                for name, fn in variants(y, dy, liger).items():
                    if name == "copy":
                        ok[name], err[name] = fn, 0.0
                        continue
                    try:
                        r = fn()
                        e = ((r.double() - ref).abs().max() / ref.abs().max()).item()
                    except Exception as ex:  # noqa: BLE001 - a failing variant is reported, not fatal
                        print(f"FAIL {group} {dname} {M}x{N} {name}: {str(ex)[:200]}", flush=True)
                        continue
                    if e < bb.REL_TOL[dt]:
                        ok[name], err[name] = fn, e
                    else:
                        print(f"WRONG {group} {dname} {M}x{N} {name}: rel err {e:.2e}", flush=True)
                if smoke:
                    t = {k: (timer(f), 0.0) for k, f in ok.items()}
                else:
                    t = measure.interleaved(ok, rounds=rounds, timer=timer)
                tc = t["copy"][0]
                for name, (ms, sp) in t.items():
                    rows.append(dict(group=group, dtype=dname, M=M, N=N, variant=name, graph_ms=round(ms, 6),
                                     graph_frac=round(1.0 if name == "copy" else 1.5 * tc / ms, 4),
                                     graph_spread=round(sp, 4), rel_err=f"{err[name]:.1e}",
                                     branch_launch=branch_launch if name == "branch" else ""))
                fr = {r["variant"]: r["graph_frac"] for r in rows[-len(t):]}
                print(f"{group:8s} {dname:8s} {M:5d}x{N:<8d} branch={branch_launch:14s} "
                      + " ".join(f"{k}={fr[k]:.3f}" for k in fr if k != "copy")
                      + f"  max spread {max(s for _, s in t.values()):.3f}", flush=True)
                del y, dy, ref
    cmd = "python scratch_bwd_rule/ab.py " + " ".join(sys.argv[1:])
    meta = provenance(cmd + f" (3 interleaved rounds unless --smoke; liger {'installed' if liger else 'absent'})")
    meta["columns"] = ("graph_ms = GPU time, median of the rounds; graph_frac = 1.5 x copy / time (copy = 1.0); "
                       "graph_spread = (max - min) / median; rel_err = max |dx - float64| / max |float64|; "
                       "branch_launch = what the branch's softmax_backward launched")
    write_csv(out_csv, rows, meta)
    print(f"wrote {out_csv} ({len(rows)} rows) in {time.time() - t0:.0f} s", flush=True)
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--smoke", action="store_true", help="tiny shapes, any device, correctness and plumbing only")
    p.add_argument("--groups", default="held-out,M=4096,long")
    p.add_argument("--budget-s", type=float, default=280.0, help="stop starting new cells after this many seconds")
    a = p.parse_args(argv)
    names = a.groups.split(",")
    if a.smoke:
        def timer(fn):
            t = time.perf_counter()
            fn()
            return (time.perf_counter() - t) * 1e3
        run({g: SMOKE[g] for g in names}, 1, timer, a.out, True, a.budget_s)
        return 0
    measure.exit_without_gpu("scratch_bwd_rule/ab.py")
    measure.warm_up_gpu()
    run({g: GROUPS[g] for g in names}, a.rounds, bb.graph_ms, a.out, False, a.budget_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
