# The softmax course. `make help` lists the targets.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9][0-9]_*.ipynb))
export PYTHONHASHSEED := 0
export MPLBACKEND := Agg

.PHONY: help venv test test-unit test-notebooks lab execute tidy figures bench lock clean

help:
	@echo "make venv       create .venv with the course's pinned packages (CPU build of torch)"
	@echo "make lab        open JupyterLab on the course"
	@echo "make test       helpers' tests + every notebook under strict nbval (CPU)"
	@echo "make execute    re-execute all notebooks in place to refresh their stored outputs"
	@echo "make figures    regenerate the PNG figures under figures/"
	@echo "make bench      GPU benchmark sweep -> figures/data/bench_*.csv and plots (needs a GPU)"

venv: $(STAMP)

$(STAMP): requirements.txt constraints.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt -c constraints.txt
	touch $(STAMP)

test: venv
	$(BIN)/python -m pytest -q tests notebooks --nbval --nbval-cell-timeout=300 \
		--nbval-sanitize-with tests/nbval_sanitize.cfg

test-unit: venv
	$(BIN)/python -m pytest -q tests

test-notebooks: venv
	$(BIN)/python -m pytest -q notebooks --nbval --nbval-cell-timeout=300 \
		--nbval-sanitize-with tests/nbval_sanitize.cfg

lab: venv
	$(BIN)/jupyter lab --notebook-dir=notebooks

execute: venv
	$(BIN)/python tools/execute_notebooks.py $(NOTEBOOKS)

tidy: venv
	$(BIN)/python tools/nbtidy.py $(NOTEBOOKS)

figures: venv
	$(BIN)/python -m helpers.figures

bench:
	$(PYTHON) -m helpers.bench

lock: venv
	$(BIN)/python -m pip freeze --exclude-editable | sed 's/+cpu$$//' > constraints.txt.new
	mv constraints.txt.new constraints.txt

clean:
	rm -rf $(VENV) _site
