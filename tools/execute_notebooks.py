"""Re-execute notebooks in place (their directory as the working directory), then tidy them.

Usage: python tools/execute_notebooks.py NOTEBOOK...
Outputs stored in the repository must come from the CPU path: run this on a machine without a GPU
(or with TRITON_INTERPRET=1 and CUDA_VISIBLE_DEVICES= set) so nbval in CI reproduces them.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
import nbtidy  # noqa: E402


def execute(path: Path, timeout: int = 600) -> float:
    nb = nbformat.read(path, as_version=4)
    t0 = time.time()
    NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    elapsed = time.time() - t0
    path.write_text(nbtidy.dumps(nbtidy.tidy(nbformat.from_dict(nb))))
    return elapsed


def main(argv: list[str]) -> int:
    for a in argv:
        p = Path(a)
        print(f"executing {p} ...", flush=True)
        print(f"  done in {execute(p):.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
