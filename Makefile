# One action per target. `make test` is what CI runs (.ci/run); `make demo` is the main job.
# Everything runs in a virtualenv, .venv, made on first use: a clean machine needs only Python 3.10+
# (Debian and Ubuntu refuse `pip install` into the system Python).
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

.PHONY: venv install install-train demo test test-fast test-slow test-gpu lint fmt typecheck startup bench

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

install: $(STAMP_DEV)

install-train: $(STAMP_TRAIN)

demo: install-train
	$(PY) -m dojo train --nproc 2 --method full --lr 1e-3 --epochs 4 --output-dir runs/demo --force

# pytest exits 5 when it collected no tests: named here, and a failure (a green run of nothing
# proves nothing).
test: install-train
	@$(PY) -m pytest -q --runslow -m "not gpu"; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "error: pytest collected no tests (exit 5)" >&2; fi; exit $$rc

test-fast: install
	$(PY) -m pytest -q

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
