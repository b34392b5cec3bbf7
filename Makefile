# ensml: the two Quickstart commands (`make demo`, `make test`), the fast tier (`make check`) and
# their set-up.
# Each target creates the virtual environment on first use. torch is installed first, pinned to
# the CPU build that this environment's pip serves locally (TORCH_SPEC): an unpinned torch would
# pull a multi-GB CUDA build. Elsewhere, e.g.:
#   make demo TORCH_SPEC="torch --index-url https://download.pytorch.org/whl/cpu"
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
DATA ?= data/synth
RUNS ?= runs

ANEMOI_VENV ?= .venv-anemoi

.PHONY: demo test check lint env env-anemoi clean docs

env: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(TORCH_SPEC)
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $@

# The ensml[anemoi] extra in an environment of its own: anemoi-datasets pins zarr 2 (zarr<=2.18.7),
# the main one has zarr 3. tests/data/test_anemoi_env.py runs tests/data/test_anemoi.py in it
# (about 2 min and 2.2 GB to build once; "create" to make the test datasets with anemoi itself).
env-anemoi: $(ANEMOI_VENV)/.installed

$(ANEMOI_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(ANEMOI_VENV)
	$(ANEMOI_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(ANEMOI_VENV)/bin/python -m pip install --quiet $(TORCH_SPEC)
	$(ANEMOI_VENV)/bin/python -m pip install --quiet -e ".[anemoi]" "anemoi-datasets[create]" pytest pytest-timeout
	touch $@

# The main job: synthesise the embedded ensemble, train both models, post-process the test year's
# forecasts (one file per init date, as an archive holds them) on a local dask cluster, and score
# everything against the raw ensembles and the oracle.
demo: env
	$(BIN)/ensml data synth --out_dir $(DATA) --overwrite true
	$(BIN)/ensml fit --config configs/spread.yaml
	$(BIN)/ensml predict --config configs/spread.yaml --ckpt_path $(RUNS)/spread/checkpoints/best.ckpt
	$(BIN)/ensml fit --config configs/mixed.yaml
	$(BIN)/ensml data archive --forecast $(DATA)/forecast.nc --period "[2020-01-01, 2020-12-31]" --out_dir data/archive
	$(BIN)/ensml postprocess --config configs/postprocess.yaml
	$(BIN)/ensml evaluate --config configs/evaluate.yaml

test: env env-anemoi
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --durations=25 tests

# The fast tier for everyday work (under 5 min on 2 cores once numba's kernels are compiled and
# cached, which the first run in a checkout does): everything but the tests marked slow (the docs
# build and its notebooks, killed-and-resumed training, a signal to every verb, torch.compile,
# whole benchmarks, end-to-end runs of the verbs, anything over about 2 s) or distributed
# (process groups, dask and SLURM clusters). `make test` (the full suite, what CI runs) stays the gate.
check: env
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --durations=10 -m "not slow and not distributed" tests

# The documentation site: the guides (docs/guide), the notebooks executed and rendered with
# their outputs, the command-line and API references generated; warnings are errors (about 1 min).
# Open docs/_build/html/index.html.
docs: env
	$(BIN)/sphinx-build -W --keep-going -b html docs docs/_build/html

lint: env
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

clean:
	rm -rf $(RUNS) $(DATA) data/archive docs/_build docs/api docs/cli.md
