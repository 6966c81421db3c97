"""The full tuning sweep exactly as `python -m helpers.bench tune` runs it (it writes the same table),
with diagnostics on any candidate that fails its float64 check: is x intact, is the reference right,
does the failure repeat, through the JIT path too. Prints one line per failing class."""
import sys
import torch
from helpers import launch, tuning
from helpers.bench import tune

orig = tuning._time_candidates
seen = []


def patched(x, candidates):
    keep = x.clone()
    best, rows = orig(x, candidates)
    bad = [(r, fn) for r, fn, _ in candidates if "max abs error" in r.get("status", "")]
    if bad:
        torch.cuda.synchronize()
        ref = torch.softmax(x.double(), -1)
        r, fn = bad[0]
        out = fn(); torch.cuda.synchronize()
        e = (out.double() - ref).abs()
        info = dict(shape=tuple(x.shape), dtype=str(x.dtype), n_bad=len(bad), of=len(candidates),
                    first=r["status"], x_intact=bool(torch.equal(x, keep)), err_again=e.max().item(),
                    inf=int(torch.isinf(out).sum()), nan=int(torch.isnan(out).sum()),
                    rows_bad=int((e.amax(-1) > 2e-2).sum()))
        launch.DIRECT[0] = False
        try:
            info["err_jit"] = (fn().double() - ref).abs().max().item()
        finally:
            launch.DIRECT[0] = True
        seen.append(info)
        print("FAILED CLASS", info, flush=True)
    return best, rows


tuning._time_candidates = patched
tune()
print(f"{len(seen)} failing classes", flush=True)
