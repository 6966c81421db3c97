"""Issue #23: same-rounds A/B of the attention grid choice (branch wip/attention-grid).

main   = scratch_attn_grid/attention_main.py, a copy of main's helpers/kernels/attention.py at 97d342b:
         the 1-D grid everywhere, causal programs longest first in head groups (heads_per_group).
branch = helpers/kernels/attention.py of this branch: the 1-D grouped order only where it pays (causal,
         S <= GROUPED_MAX_SEQ = 8192), else the 3-D grid (query blocks, H, Z) with query blocks in order
         (causal: each head's last block first), as a70ad98's kernel.
cudnn  = torch's SDPA, cuDNN backend.
Each provider goes through its own module's attention_plan + _launcher (the kernel attention() picks:
descriptor kernel at D = 128, pointer kernel at D = 64 on Hopper). GPU time (do_bench_cudagraph,
rep 10 ms), ROUNDS interleaved rounds, the providers' order rotated each round; the median and the
spread (max - min) / median are kept. Every output is checked in float64 first (two heads, 128 query
rows; tools/attention_bench.py's sample check and tolerances); a wrong one is not timed.

    export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
    python scratch_attn_grid/ab.py $OUT                 # the 24 cases: fp16/bf16, D 64/128, causal 0/1, S 4K/8K/16K
    python scratch_attn_grid/ab.py $OUT --causal 1      # one mask only (the file gets a _c1 suffix)
    TRITON_INTERPRET=1 python scratch_attn_grid/ab.py /tmp/x --smoke   # the plumbing, on the CPU, tiny shapes

Writes OUT/attention_grid_ab_<gpu>[_c<causal>].csv with provenance lines; vs_main = main's ms / this ms
(above 1: faster than main), of_cudnn = cuDNN's ms / this ms.
"""
import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tools"), os.path.join(ROOT, "scratch_attn_grid")]
import helpers  # noqa: E402,F401  (first: interpreter or GPU)
import importlib  # noqa: E402

import torch  # noqa: E402

import attention_bench as AB  # noqa: E402
import attention_main as M  # noqa: E402
from helpers.gpu_data import gpu_short_name, provenance, write_csv  # noqa: E402
from helpers.measure import gpu_ms, median, spread, warm_up_gpu  # noqa: E402
from helpers.mode import ON_GPU  # noqa: E402

G = importlib.import_module("helpers.kernels.attention")  # the module (helpers.kernels.attention is also a function)
MAIN_COMMIT = "97d342b"
ROUNDS, REP = 5, 10
T0 = time.time()


def log(*a):
    print(f"[{time.time() - T0:6.1f}s]", *a, file=sys.stderr, flush=True)


def course_fn(mod, q, k, v, causal):
    plan = mod.attention_plan(q, k, v, causal)
    call = mod._launcher(plan, q, k, v)
    grid = "1-D" if len(plan.grid) == 1 else "3-D"
    group = plan.args[-2] if plan.constexprs.get("GROUPED", True) else ""
    return (lambda: call(q, k, v)), dict(kernel=plan.kernel, grid=grid, group=group)


def wall_ms(fn, rep=REP):
    """The smoke's timer (no GPU): wall milliseconds of one call. Says nothing about speed."""
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def case(dtype, S, D, causal, B, H, timer, rounds, seed=0):
    device = "cuda" if ON_GPU else "cpu"
    q, k, v, heads, rows, ref = AB._inputs(B, H, S, D, AB.DTYPES[dtype], causal, device, seed)
    fns, rows_out = {}, []
    provs = [("main", M), ("branch", G), ("cudnn", None)]
    for name, mod in provs:
        row = dict(dtype=dtype, B=B, H=H, S=S, D=D, causal=int(causal), provider=name, kernel="cudnn" if mod is None else "",
                   grid="", group="", graph_ms=float("nan"), graph_spread=float("nan"), tflops=float("nan"),
                   vs_main=float("nan"), of_cudnn=float("nan"), max_err=float("nan"), status="ok")
        try:
            if mod is None:
                if not ON_GPU:
                    raise RuntimeError("no cuDNN on the CPU")
                fn = AB.provider_fn("sdpa_cudnn", q, k, v, causal)
            else:
                fn, info = course_fn(mod, q, k, v, causal)
                row.update(info)
            err = AB.max_error(fn(), ref, heads, rows)
            row["max_err"] = err
            if not err <= AB.CHECK_ATOL[q.dtype]:
                row["status"] = f"wrong: max abs error {err:.3g}"
            else:
                fns[name] = (fn, [])
        except Exception as e:  # noqa: BLE001  (recorded, not timed)
            row["status"] = f"refused: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
        rows_out.append(row)
    if ON_GPU:
        torch.cuda.synchronize()
    names = list(fns)
    for r in range(rounds):  # interleaved; the order rotated each round
        for name in names[r % len(names):] + names[:r % len(names)]:
            fns[name][1].append(timer(fns[name][0]))
    ms = {name: median(t) for name, (fn, t) in fns.items()}
    for row in rows_out:
        name = row["provider"]
        if name not in ms:
            continue
        t = fns[name][1]
        row.update(graph_ms=round(ms[name], 4), graph_spread=round(spread(t), 4),
                   tflops=round(AB.flops(B, H, S, D, causal) / ms[name] / 1e9, 1))
        if "main" in ms:
            row["vs_main"] = round(ms["main"] / ms[name], 4)
        if "cudnn" in ms:
            row["of_cudnn"] = round(ms["cudnn"] / ms[name], 4)
    for row in rows_out:
        log(f"{dtype:8} S{S:<6} D{D:<4} c{int(causal)} {row['provider']:<7} {row['kernel']:<7} {row['grid']:<4} "
            f"g{row['group']!s:<3} {row['graph_ms']:9.4f} ms sp {row['graph_spread']:.3f} vs_main {row['vs_main']:.4f} "
            f"of_cudnn {row['of_cudnn']:.4f} err {row['max_err']:.2e} {row['status']}")
    del q, k, v, ref, fns
    if ON_GPU:
        torch.cuda.empty_cache()
    return rows_out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default=os.environ.get("OUT", "."), help="folder for the CSV (default $OUT)")
    ap.add_argument("--causal", choices=("0", "1", "both"), default="both")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes in the interpreter: the plumbing only")
    args = ap.parse_args(argv)
    causals = (False, True) if args.causal == "both" else (args.causal == "1",)
    if args.smoke:
        if ON_GPU:
            raise SystemExit("--smoke is the CPU check: run it with TRITON_INTERPRET=1")
        G.GROUPED_MAX_SEQ = 32  # the smoke's lengths: 32 at the bound (1-D, grouped), 48 past it (3-D)
        seqs, dims, B, H, timer, rounds = (32, 48), (16, 32), 1, 2, wall_ms, 2
    else:
        if not ON_GPU:
            raise SystemExit("ab.py measures on a GPU; on the CPU use --smoke with TRITON_INTERPRET=1")
        seqs, dims, B, H, timer, rounds = (4096, 8192, 16384), (64, 128), 4, 16, (lambda fn: gpu_ms(fn, rep=REP)), ROUNDS
        warm_up_gpu()
    rows = []
    for causal in causals:
        for D in dims:
            for S in seqs:
                for dtype in ("float16", "bfloat16"):
                    rows += case(dtype, S, D, causal, B, H, timer, rounds)
    bad = [r for r in rows if r["status"] != "ok" and not (args.smoke and r["provider"] == "cudnn")]
    for r in rows:  # the grid each plan picked: main always 1-D; the branch 1-D only causal up to the bound
        want = {"main": "1-D", "branch": "1-D" if r["causal"] and r["S"] <= G.GROUPED_MAX_SEQ else "3-D"}.get(r["provider"])
        if want and r["status"] == "ok" and r["grid"] != want:
            r["status"] = f"wrong grid: {r['grid']}, expected {want}"
            bad.append(r)
    gpu = gpu_short_name() if ON_GPU else "cpu"
    suffix = "" if args.causal == "both" else f"_c{args.causal}"
    cmd = "python scratch_attn_grid/ab.py " + " ".join(sys.argv[1:] if argv is None else argv)
    meta = provenance(cmd)
    meta["what"] = (f"same-rounds A/B, GPU time (do_bench_cudagraph, rep {REP} ms), {rounds} interleaved rounds, order "
                    f"rotated; main = a copy of main's attention.py at {MAIN_COMMIT} (1-D grid, causal groups "
                    f"longest first); branch = this commit's (1-D grouped where causal and S <= "
                    f"{G.GROUPED_MAX_SEQ}, else the 3-D grid); cudnn = SDPA's cuDNN backend; every output checked "
                    f"in float64 (2 heads x 128 rows) before timing; vs_main = main ms / this ms")
    path = write_csv(os.path.join(args.out, f"attention_grid_ab_{gpu}{suffix}.csv"), rows, meta)
    log(f"wrote {path}: {len(rows)} rows, {len(bad)} not ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
