# One action per target. `make test` is what CI runs (.ci/run); `make demo` is the main job.
PY ?= python3
PIP := $(PY) -m pip
# The CPU build of torch must be installed before the project: a bare `torch` requirement would
# pull a multi-GB CUDA build on a machine without one.
TORCH ?= torch==2.13.0

.PHONY: install install-train demo test test-fast test-slow test-gpu lint fmt typecheck startup bench

install:
	$(PIP) install -q -e '.[dev]'

install-train:
	$(PIP) install -q '$(TORCH)'
	$(PIP) install -q -e '.[dev,train]'

demo: install-train
	$(PY) -m dojo train --nproc 2 --method full --lr 1e-3 --epochs 4 --output-dir runs/demo --force

test: install-train
	$(PY) -m pytest -q --runslow -m "not gpu"

test-fast: install
	$(PY) -m pytest -q

test-slow:
	$(PY) -m pytest -q --runslow -m slow

test-gpu:
	$(PY) -m pytest -q --runslow -m gpu

lint:
	$(PY) -m ruff check dojo tests bench
	$(PY) -m ruff format --check dojo tests bench

fmt:
	$(PY) -m ruff format dojo tests bench
	$(PY) -m ruff check --fix dojo tests bench

typecheck:
	$(PY) -m mypy dojo

startup:
	$(PY) -m pytest -q tests/test_startup.py
	$(PY) bench/startup.py

bench:
	$(PY) bench/startup.py
