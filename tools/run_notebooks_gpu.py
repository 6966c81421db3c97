"""Execute every lesson on the current machine (e.g. a GPU) into a scratch folder, never in place.

python tools/run_notebooks_gpu.py OUT_DIR [NN ...]  -> OUT_DIR/NN_name.ipynb executed (all lessons and their deep
dives, or those numbered NN), a summary line per notebook and its three slowest cells, and on a GPU
OUT_DIR/notebook_runs_<gpu>.csv (one row per notebook, with provenance: the record kept under
figures/data/).
Stored outputs in the repository must come from the CPU (make execute); this only proves the lessons
run to the end here.
"""

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

root = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(root))
sys.path.insert(0, str(root / "tools"))
import course  # noqa: E402

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
failed = 0


def _slowest(nb, k=3):
    """(seconds, cell index) of the k slowest executed code cells, from nbclient's recorded timing."""
    from datetime import datetime

    out = []
    for i, c in enumerate(nb.cells):
        t = c.get("metadata", {}).get("execution", {})
        a, b = t.get("iopub.execute_input"), t.get("shell.execute_reply")
        if a and b:
            out.append(
                ((datetime.fromisoformat(b.rstrip("Z")) - datetime.fromisoformat(a.rstrip("Z"))).total_seconds(), i)
            )
    return sorted(out, reverse=True)[:k]


only = set(sys.argv[2:])
runs = []
paths = [p for p in course.notebooks(root) if not only or p.name[:2] in only]  # lessons and their deep dives
for nb_path in paths:
    nb = nbformat.read(nb_path, as_version=4)
    t0 = time.time()
    try:
        NotebookClient(
            nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(nb_path.parent)}}
        ).execute()
        status = "ok"
    except Exception as e:
        failed += 1
        status = f"FAILED: {type(e).__name__}: {str(e).strip().splitlines()[-1][:300] if str(e).strip() else ''}"
    nbformat.write(nb, out / nb_path.name)
    seconds = time.time() - t0
    print(f"{nb_path.name}: {status} in {seconds:.0f} s", flush=True)
    slow = _slowest(nb)
    print("   slowest cells:", ", ".join(f"#{i} {t:.1f} s" for t, i in slow), flush=True)
    runs.append(
        dict(
            notebook=nb_path.name,
            status=status.replace(",", ";"),
            seconds=round(seconds, 1),
            slowest_cell=slow[0][1] if slow else "",
            slowest_cell_s=round(slow[0][0], 1) if slow else "",
        )
    )
print(f"{len(paths) - failed} notebooks ran to the end, {failed} failed")
import torch  # noqa: E402

if torch.cuda.is_available():
    from helpers.gpu_data import gpu_short_name, provenance, write_csv

    path = write_csv(
        out / f"notebook_runs_{gpu_short_name()}.csv",
        runs,
        provenance("python tools/run_notebooks_gpu.py OUT" + "".join(" " + a for a in sys.argv[2:])),
    )
    print(f"wrote {path}")
sys.exit(1 if failed else 0)
