"""Execute every lesson on the current machine (e.g. a GPU) into a scratch folder, never in place.

python tools/run_notebooks_gpu.py OUT_DIR [NN ...]  -> OUT_DIR/NN_name.ipynb executed (all lessons, or those
numbered NN), a summary line per notebook and its three slowest cells.
Stored outputs in the repository must come from the CPU (make execute); this only proves the lessons
run to the end here.
"""
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

root = Path(__file__).resolve().parent.parent
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
            out.append(((datetime.fromisoformat(b.rstrip("Z")) - datetime.fromisoformat(a.rstrip("Z"))).total_seconds(), i))
    return sorted(out, reverse=True)[:k]

only = set(sys.argv[2:])
paths = [p for p in sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb")) if not only or p.name[:2] in only]
for nb_path in paths:
    nb = nbformat.read(nb_path, as_version=4)
    t0 = time.time()
    try:
        NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(nb_path.parent)}}).execute()
        status = "ok"
    except Exception as e:
        failed += 1
        status = f"FAILED: {type(e).__name__}: {str(e).strip().splitlines()[-1][:300] if str(e).strip() else ''}"
    nbformat.write(nb, out / nb_path.name)
    print(f"{nb_path.name}: {status} in {time.time() - t0:.0f} s", flush=True)
    print("   slowest cells:", ", ".join(f"#{i} {t:.1f} s" for t, i in _slowest(nb)), flush=True)
print(f"{len(paths) - failed} notebooks ran to the end, {failed} failed")
sys.exit(1 if failed else 0)
