"""Execute every lesson on the current machine (e.g. a GPU) into a scratch folder, never in place.

python tools/run_notebooks_gpu.py OUT_DIR   -> OUT_DIR/NN_name.ipynb executed, and a summary line per notebook.
Stored outputs in the repository must come from the CPU (make execute); this only proves the lessons
run to the end here.
"""
import shutil
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

root = Path(__file__).resolve().parent.parent
out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
failed = 0
paths = sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb"))
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
print(f"{len(paths) - failed} notebooks ran to the end, {failed} failed")
sys.exit(1 if failed else 0)
