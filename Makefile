# The softmax course. `make help` lists the targets.
# GNU make on Linux, macOS, or Windows (Git Bash or MSYS2, whose sh runs the recipes; the venv's
# programs are in Scripts/ there). Without make: see the README, "Start".
VENV   ?= .venv
ifeq ($(OS),Windows_NT)
PYTHON ?= python
BIN    := $(VENV)/Scripts
PATHSEP := ;
else
PYTHON ?= python3
BIN    := $(VENV)/bin
PATHSEP := :
endif
STAMP  := $(VENV)/.installed-stamp
# The core lessons (NN_name.ipynb) and their deep dives (NNd_name.ipynb): tools/course.py
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9][0-9]_*.ipynb notebooks/[0-9][0-9]d_*.ipynb))
export PYTHONHASHSEED := 0
export MPLBACKEND := Agg

.PHONY: help venv lint format test test-unit test-notebooks test-no-triton test-latest lab execute tidy export figures bench tune lock clean

help:
	@echo "make venv       create .venv with the course's pinned packages (CPU build of torch)"
	@echo "make lab        JupyterLab on the course (ARGS=\"--port 8890 --ip 0.0.0.0\" passes arguments to it)"
	@echo "make test       ruff, then helpers' tests + every notebook under strict nbval (CPU), on every core"
	@echo "make lint       ruff check and ruff format --check (pyproject.toml); make format fixes what it can"
	@echo "make test-no-triton  the same as on macOS/Windows, with Triton hidden: lessons 01-02 run, kernels skip"
	@echo "make test-latest  the exercise checkers' tests in .venv-latest: requirements.txt without constraints.txt"
	@echo "make execute    re-execute all notebooks in place to refresh their stored outputs"
	@echo "make export     regenerate helpers/kernels/*.py from the lessons' \`#| export:\` cells"
	@echo "make figures    regenerate the PNG figures under figures/"
	@echo "make bench      GPU benchmark sweep -> figures/data/bench.csv and figures/bench_*.png (needs a GPU)"
	@echo "make html       the lessons as a static web site in _site/ (INSTRUCTOR=1 adds the instructor edition)"
	@echo "make serve      build and serve _site/ on http://localhost:8000/"
	@echo "make test-browser  build the site and check every page in headless Chromium"
	@echo "make test-lab   run every lesson in JupyterLab (as make lab starts it) in headless Chromium"

venv: $(STAMP)

$(STAMP): requirements.txt constraints.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	@# The exact versions CI and the stored outputs use; where they cannot all be installed (e.g. a
	@# Linux machine whose PyPI torch is the CUDA build, which pins its own Triton), the ranges alone.
	$(BIN)/python -m pip install -q -r requirements.txt -c constraints.txt || { \
		echo "note: the pinned versions of constraints.txt do not install here; installing the ranges of requirements.txt instead" \
		"(the course works the same; some stored outputs, e.g. version banners, may differ from yours)"; \
		$(BIN)/python -m pip install -q -r requirements.txt; }
	touch $(STAMP)

# Triton publishes no build for macOS or Windows. Without it, conftest.py skips the kernel tests and
# lessons 03-08 (with the reason), and the notebooks' banner line names no Triton version, so nbval
# masks that line (tests/no_triton/nbval_sanitize.cfg). Decided when the recipe runs, with .venv's Python.
NBVAL_SANITIZE = $(shell "$(BIN)/python" -c "import triton" >/dev/null 2>&1 && echo tests/nbval_sanitize.cfg || echo tests/no_triton/nbval_sanitize.cfg)
NBVAL = --nbval --nbval-cell-timeout=300 --nbval-sanitize-with $(NBVAL_SANITIZE)
# pytest-xdist: one worker a core (at most 4: each notebook starts a Jupyter kernel beside its worker), files dealt
# whole to workers, so a notebook's cells run in order in one kernel. XDIST= runs everything in one process.
XDIST ?= --numprocesses=auto --maxprocesses=4 --dist loadfile

test: venv lint
	$(BIN)/python -m pytest -q $(XDIST) tests notebooks $(NBVAL)

# ruff (pyproject.toml): the lint rules on everything, lessons included; the formatter on the Python files.
lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Fix what ruff can: the import order and the layout of the Python files (the lessons keep theirs: pyproject.toml).
format: venv
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

test-unit: venv
	$(BIN)/python -m pytest -q $(XDIST) tests

test-notebooks: venv
	$(BIN)/python -m pytest -q $(XDIST) notebooks $(NBVAL)

# `make test` as on a laptop without Triton: tests/no_triton/ first on PYTHONPATH makes `import triton`
# fail, in pytest and in every Jupyter kernel it starts. Lessons 01-02 pass strict nbval, a kernel
# lesson stops at its first cell with one line (tests/test_no_triton.py), the rest skips with a reason.
NO_TRITON_PATH = $(CURDIR)/tests/no_triton$(if $(PYTHONPATH),$(PATHSEP)$(PYTHONPATH))
test-no-triton: venv
	PYTHONPATH="$(NO_TRITON_PATH)" $(BIN)/python -m pytest -q -rs $(XDIST) tests notebooks --nbval --nbval-cell-timeout=300 \
		--nbval-sanitize-with tests/no_triton/nbval_sanitize.cfg

# The exercise checkers in a second environment: .venv-latest gets requirements.txt's ranges alone, without
# constraints.txt, which is what `pip install -r requirements.txt` gives a cloud notebook (the newest torch
# and Triton the ranges allow). There every checker's right-answer and wrong-answer tests run: the shared
# mechanism (tests/test_exercises_framework.py, whole; tests/test_traffic.py, whose counter wraps the interpreter's
# internals) and, in the lesson tests, the tests whose names say
# "checker" or "bounds" (a few minutes on a 2-core CPU); and lesson 07's spills tests, which compile the attention
# kernels for an H100 with that Triton (its spills differ by version), and the test that `import helpers` keeps
# Triton's FP fusion on (its default and warning differ by version). Rebuilt when requirements.txt changes.
VENV_LATEST  ?= .venv-latest
BIN_LATEST   := $(VENV_LATEST)/$(notdir $(BIN))
LATEST_STAMP := $(VENV_LATEST)/.installed-stamp
LESSON_TESTS := $(sort $(wildcard tests/test_lesson0*.py))

$(LATEST_STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV_LATEST)
	$(BIN_LATEST)/python -m pip install -q --upgrade pip
	$(BIN_LATEST)/python -m pip install -q -r requirements.txt
	touch $(LATEST_STAMP)

test-latest: $(LATEST_STAMP)
	@$(BIN_LATEST)/python -c "import torch, triton; print('test-latest: torch', torch.__version__, '/ Triton', triton.__version__)"
	$(BIN_LATEST)/python -m pytest -q tests/test_exercises_framework.py tests/test_traffic.py
	$(BIN_LATEST)/python -m pytest -q $(XDIST) $(LESSON_TESTS) -k "checker or bounds"
	$(BIN_LATEST)/python -m pytest -q tests/test_attention.py tests/test_versions.py -k "spills or fp_fusion"

# tools/lab.py adds --allow-root as root and --no-browser without a display; ARGS go to JupyterLab.
ARGS ?=
lab: venv
	$(BIN)/python tools/lab.py $(ARGS)

execute: venv
	$(BIN)/python tools/execute_notebooks.py $(NOTEBOOKS)

tidy: venv
	$(BIN)/python tools/nbtidy.py $(NOTEBOOKS)

# The kernel modules are the lessons' own cells (tools/export.py; tests/test_house.py fails when stale).
export:
	$(PYTHON) tools/export.py

figures: venv
	$(BIN)/python tools/figures.py

# GPU only. Uses .venv's python when there is one (on a CPU machine it then says why it stops),
# else $(PYTHON): a GPU machine's own torch and Triton.
BENCH_PY ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON))
bench:
	$(BENCH_PY) tools/bench.py sweep

tune:
	$(BENCH_PY) tools/bench.py tune

# Run on Linux: pip freeze lists Triton only where it is installed (requirements.txt skips it elsewhere).
lock: venv
	{ echo "# Exact versions for make venv/make test on a CPU machine: the stored notebook outputs come from these."; \
	  echo "# Regenerate with make lock after changing requirements.txt."; \
	  $(BIN)/python -m pip freeze --exclude-editable | sed 's/+cpu$$//'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

clean:
	rm -rf $(VENV) $(VENV_LATEST) _site

# ---- HTML export of the lessons (docs/html.md) --------------------------------------------------
# `make html`: _site/ from the notebooks' stored outputs (nothing is executed; no GPU needed).
# `make html INSTRUCTOR=1` also builds the instructor edition in _site/instructor/.
.PHONY: html serve test-browser test-lab chromium
SITE       ?= _site
PORT       ?= 8000
INSTRUCTOR ?= 0
CHROMIUM   ?= /usr/bin/chromium
NODE_STAMP := node_modules/.package-lock.json
SUDO       := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund

html: venv $(NODE_STAMP)
	$(BIN)/python tools/build_html.py notebooks --out $(SITE) $(if $(filter 1 yes true,$(INSTRUCTOR)),--instructor)

serve: html
	@echo "serving $(SITE)/ on http://localhost:$(PORT)/ (Ctrl-C stops)"
	$(BIN)/python -m http.server $(PORT) --bind 127.0.0.1 --directory $(SITE)

chromium:
	@test -x $(CHROMIUM) || { echo "installing Debian's chromium for the browser tests ..."; \
		$(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

test-browser: venv $(NODE_STAMP) chromium
	$(MAKE) --no-print-directory html INSTRUCTOR=1
	SITE_DIR=$(SITE) CHROMIUM=$(CHROMIUM) node --test tests/browser/test_site.mjs

# Every lesson run in JupyterLab, started by tools/lab.py as `make lab` does (on a copy of notebooks/,
# in temp dirs), in headless Chromium: every cell runs, no error, the exercises say "not yet".
test-lab: venv $(NODE_STAMP) chromium
	LAB_PYTHON=$(BIN)/python CHROMIUM=$(CHROMIUM) node --test tests/browser/test_lab.mjs
