"""Why lesson 08's live backward table was all '-' on an H100: the statuses, in a plain process and
inside the notebook after the cells that precede the bandwidth section."""
import sys
import nbformat
from nbclient import NotebookClient
from pathlib import Path

from helpers import lesson08

rows, _ = lesson08.live_backward_data(ns=(1024,))
print("plain process:", sorted({(r["provider"], r["status"]) for r in rows}), flush=True)
root = Path(__file__).resolve().parents[2]
nb = nbformat.read(root / "notebooks/08_backward.ipynb", as_version=4)
i = next(i for i, c in enumerate(nb.cells) if "show_backward_bandwidth" in c.source)
probe = nbformat.v4.new_code_cell("rows, _ = lesson08.live_backward_data(ns=(1024,))\n"
                                  "print(sorted({(r['provider'], r['status']) for r in rows}))")
nb.cells = nb.cells[:i] + [probe]
NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(root / "notebooks")}}).execute()
print("in the notebook:", "".join(o.get("text", "") for o in nb.cells[-1].outputs), flush=True)
