"""``python tools/figures.py`` (`make figures`): write every figure of the course to ``figures/<name>.png``.

Each lesson module lists its figures in a ``FIGURES`` dict of zero-argument functions, and so does
``tools/bench_plots.py`` (the README's); on the CPU they draw the recorded GPU data, so the PNGs
match what the notebooks show.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # helpers, from this checkout

import matplotlib.pyplot as plt  # noqa: E402

from helpers.plots import save  # noqa: E402

MODULES = [*(f"helpers.lesson0{n}" for n in range(1, 10)), "bench_plots"]


def all_figures() -> dict:
    out = {}
    for name in MODULES:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError:
            continue
        out.update(getattr(mod, "FIGURES", {}))
    return out


def main(argv=None) -> int:
    figs = all_figures()
    wanted = (argv if argv is not None else sys.argv[1:]) or sorted(figs)
    unknown = [w for w in wanted if w not in figs]
    if unknown:
        print(f"unknown figure(s): {unknown}; choose from {sorted(figs)}", file=sys.stderr)
        return 2
    for name in wanted:
        fig = figs[name]()
        print(f"figures/{save(fig, name).name}")
        plt.close(fig)
    return 0


if __name__ == "__main__":
    sys.exit(main())
