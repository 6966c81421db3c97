"""Keep notebooks' JSON tidy so diffs stay readable.

- notebook metadata: only the python3 kernelspec and the language name;
- cell metadata: only ``tags`` (nbval tags, ``solution``, ``instructor``), sorted;
- no per-execution metadata, execution counts renumbered 1, 2, ... in order;
- a cell's consecutive stream outputs of one name (stdout, stderr) joined into one, as Jupyter shows them
  (the kernel splits them wherever it flushed);
- keys sorted, one-space indent, trailing newline (nbformat's own layout).

Usage: python tools/nbtidy.py [--check] NOTEBOOK...   (--check: exit 1 if any would change)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}


def tidy(nb: dict) -> dict:
    nb["metadata"] = {"kernelspec": KERNELSPEC, "language_info": {"name": "python"}}
    count = 0
    for i, cell in enumerate(nb.get("cells", [])):
        tags = sorted(set(cell.get("metadata", {}).get("tags", [])))
        cell["metadata"] = {"tags": tags} if tags else {}
        cell.setdefault("id", f"cell-{i:03d}")
        if isinstance(cell.get("source"), list):
            cell["source"] = "".join(cell["source"])
        if cell["cell_type"] == "code":
            has_run = cell.get("execution_count") is not None or cell.get("outputs")
            if has_run:
                count += 1
                cell["execution_count"] = count
            else:
                cell["execution_count"] = None
            joined = []
            for out in cell.get("outputs", []):
                last = joined[-1] if joined else {}
                if (
                    out.get("output_type") == "stream"
                    and last.get("output_type") == "stream"
                    and last.get("name") == out.get("name")
                ):
                    last["text"] = "".join(last["text"]) + "".join(out["text"])
                else:
                    joined.append(out)
            if joined:
                cell["outputs"] = joined
            for out in cell.get("outputs", []):
                if out.get("output_type") in ("display_data", "execute_result"):
                    out["metadata"] = {}  # required by nbformat; nothing machine-specific kept
                if "execution_count" in out:
                    out["execution_count"] = cell["execution_count"]
        else:
            cell.pop("outputs", None)
            cell.pop("execution_count", None)
    nb["nbformat"], nb["nbformat_minor"] = 4, 5
    return nb


def dumps(nb: dict) -> str:
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    paths = [Path(a) for a in argv if a != "--check"]
    changed = []
    for p in paths:
        old = p.read_text()
        new = dumps(tidy(json.loads(old)))
        if new != old:
            changed.append(str(p))
            if not check:
                p.write_text(new)
    if check and changed:
        print("not tidy (run `make tidy`):", *changed, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
