"""``python -m helpers.figures``: write every figure of the course to ``figures/<name>.png``.

Each lesson module lists its figures in a ``FIGURES`` dict of zero-argument functions; on the
CPU they draw the recorded GPU data, so the PNGs match what the notebooks show.
"""

from __future__ import annotations

import importlib
import sys

import matplotlib.pyplot as plt

from .plots import save

MODULES = ["lesson01", "lesson02", "lesson03", "lesson04", "lesson05", "lesson06", "lesson07", "lesson08", "bench_plots"]


def all_figures() -> dict:
    out = {}
    for name in MODULES:
        try:
            mod = importlib.import_module(f"helpers.{name}")
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
