# One action per target. CI (.ci/run) runs `make test-fast`, `make test-floor` and `make test`;
# `make demo` is the main job. Everything runs in a virtualenv, .venv, made on first use: a clean
# machine needs only Python 3.10+ (Debian and Ubuntu refuse `pip install` into the system Python).
PYTHON ?= python3
VENV ?= .venv
# The interpreter every target runs with; point it at an existing environment to use that one.
PY ?= $(VENV)/bin/python
PIP := $(PY) -m pip
# The CPU build of torch must be installed before the project: a bare `torch` requirement would
# pull a multi-GB CUDA build on a machine without one. Off this workplace (where a local CPU wheel
# answers `pip install torch==2.13.0`), set TORCH_INDEX=https://download.pytorch.org/whl/cpu.
TORCH ?= torch==2.13.0
TORCH_INDEX ?=
# Install stamps live in the venv, so deleting .venv starts over; a pyproject.toml change reinstalls.
STAMP_DEV := $(VENV)/.dojo-dev.stamp
STAMP_TRAIN := $(VENV)/.dojo-train.stamp
# `make test-fast` runs in a venv of its own holding the core install only (no train extra), so
# it tests what `pip install dojo` gives; `make test-floor` in one holding the core floors.
VENV_CORE ?= .venv-core
STAMP_CORE := $(VENV_CORE)/.dojo-core.stamp
VENV_FLOOR ?= .venv-floor
STAMP_FLOOR := $(VENV_FLOOR)/.dojo-floor.stamp

.PHONY: venv install install-train demo test test-fast test-floor test-slow test-gpu lint fmt typecheck startup bench

# Only the default PY is made here; an overridden PY (a path or a name on PATH) is used as it is.
ifeq ($(PY),$(VENV)/bin/python)
VENV_PY := $(PY)
$(VENV_PY):
	$(PYTHON) -m venv $(VENV)
endif

venv: $(VENV_PY)

$(STAMP_DEV): pyproject.toml | $(VENV_PY)
	$(PIP) install -q -e '.[dev]'
	@mkdir -p $(VENV) && touch $@

$(STAMP_TRAIN): pyproject.toml | $(VENV_PY)
	$(PIP) install -q '$(TORCH)' $(if $(TORCH_INDEX),--index-url '$(TORCH_INDEX)')
	$(PIP) install -q -e '.[dev,train]'
	@mkdir -p $(VENV) && touch $@ $(STAMP_DEV)

$(STAMP_CORE): pyproject.toml
	$(PYTHON) -m venv $(VENV_CORE)
	$(VENV_CORE)/bin/python -m pip install -q -e '.[dev]'
	@touch $@

# The core dependencies pinned to pyproject's floors (.ci/floors.py), then dojo itself.
$(STAMP_FLOOR): pyproject.toml .ci/floors.py
	$(PYTHON) -m venv $(VENV_FLOOR)
	$(VENV_FLOOR)/bin/python -m pip install -q $$($(PYTHON) .ci/floors.py) pytest hypothesis
	$(VENV_FLOOR)/bin/python -m pip install -q --no-deps -e .
	@touch $@

install: $(STAMP_DEV)

install-train: $(STAMP_TRAIN)

demo: install-train
	$(PY) -m dojo train --nproc 2 --method full --lr 1e-3 --epochs 4 --output-dir runs/demo --force

# pytest exits 5 when it collected no tests: named here, and a failure (a green run of nothing
# proves nothing).
test: install-train
	@$(PY) -m pytest -q --runslow -m "not gpu"; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "error: pytest collected no tests (exit 5)" >&2; fi; exit $$rc

# The default suite (no --runslow) on the core install: under a minute on 2 cores.
test-fast: $(STAMP_CORE)
	@$(VENV_CORE)/bin/python -m pytest -q; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "error: pytest collected no tests (exit 5)" >&2; fi; exit $$rc

test-floor: $(STAMP_FLOOR)
	@$(VENV_FLOOR)/bin/python -m pytest -q; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "error: pytest collected no tests (exit 5)" >&2; fi; exit $$rc

test-slow: install-train
	$(PY) -m pytest -q --runslow -m slow

test-gpu: install-train
	$(PY) -m pytest -q --runslow -m gpu

lint: install
	$(PY) -m ruff check dojo tests bench
	$(PY) -m ruff format --check dojo tests bench

fmt: install
	$(PY) -m ruff format dojo tests bench
	$(PY) -m ruff check --fix dojo tests bench

typecheck: install
	$(PY) -m mypy dojo

startup: install
	$(PY) -m pytest -q tests/test_startup.py
	$(PY) bench/startup.py

bench: install
	$(PY) bench/startup.py
