"""Shared fixtures: the --runslow switch, GPU detection without torch, and an in-process CLI runner.

Layout: a test file is named after the dojo module it tests. ``dojo/X.py`` -> ``test_X.py``,
``dojo/P/M.py`` -> ``test_P_M.py`` (``test_cli_config.py`` is ``dojo/cli/config.py``); the
``dojo/train`` modules are tested in ``tests/train/`` without the ``train_`` prefix
(``dojo/train/worker/packing.py`` -> ``tests/train/test_worker_packing.py``); the bundled files in
``templates/`` in ``test_templates_*.py``. A module tested by several files adds what each covers:
``_fuzz`` (hypothesis properties), ``_deepspeed`` / ``_oracle`` (against the real library,
slow), ``_cpu`` (runs through the real launcher on CPU processes, slow). ``dojo train`` end to
end is ``tests/train/test_train_*.py``. Code several test modules share lives in
``tests/helpers/``: no test module imports another.

A core install (``pip install -e '.[dev]'``, the venv ``make test-fast`` sets up) has no train
extra. The fast suite still passes there, in under a minute on 2 cores: ``dojo train`` run through
the ``cli`` fixture stops at its first check with the ``pip install -e '.[train]' in dojo's clone`` hint, and such
a test is skipped, not failed; a test that uses the training stack itself is skipped there
(``pytest.importorskip``, or a ``skipif`` on find_spec). Whatever takes seconds (hypothesis
fuzz, sandbox limits, runs through the launcher) is marked ``slow`` and runs with ``--runslow``
(``make test``).
"""

import contextlib
import importlib.util
import io
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

# Every property test runs the same examples on every run and machine (derandomize), so a CI
# failure is reproducible with the same command, and no timing check decides it: CI's 2 shared
# cores make a slow example slow, not wrong. Tests' own @settings inherit these fields unless
# they set them. HYPOTHESIS_PROFILE=explore draws new examples each run (a longer local hunt).
_TIMING = [HealthCheck.too_slow]
settings.register_profile("dojo", derandomize=True, deadline=None, suppress_health_check=_TIMING)
settings.register_profile("explore", deadline=None, suppress_health_check=_TIMING)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dojo"))

# What dojo.train.preflight.check_extras looks for (find_spec: nothing is imported).
TRAIN_MISSING = [
    m for m in ("torch", "transformers", "deepspeed", "peft") if importlib.util.find_spec(m) is None
]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", help="also run tests marked slow and gpu")


def _gpu_count() -> int:
    # nvidia-smi, never torch, at collection time.
    if not shutil.which("nvidia-smi"):
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    runslow = config.getoption("--runslow")
    gpus = _gpu_count() if any("gpu" in i.keywords for i in items) else 0
    for item in items:
        if not runslow and ("slow" in item.keywords or "gpu" in item.keywords):
            item.add_marker(pytest.mark.skip(reason="needs --runslow"))
            continue
        marker = item.get_closest_marker("gpu")
        if marker is not None:
            need = marker.args[0] if marker.args else 1
            if gpus < need:
                item.add_marker(pytest.mark.skip(reason=f"needs {need} CUDA GPU(s), found {gpus}"))


@pytest.fixture(autouse=True)
def _no_cuda_visible_devices(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dojo train reads CUDA_VISIBLE_DEVICES against the GPUs a test fakes: the value of the
    machine running the tests must not pick among them (a test about it sets its own). Tests on
    real GPUs keep it: there it picks the GPUs they run on."""
    if request.node.get_closest_marker("gpu") is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


@pytest.fixture(autouse=True)
def _environ_restored() -> Any:
    """Each test leaves os.environ as it found it. Commands run in-process here, and some set a
    variable for their own process (dojo chat and export: DS_ACCELERATOR=cpu), which a user's
    next command, a new process, never sees; a later test would."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str


def run_cli(*args: str) -> CliResult:
    """Run ``dojo ARGS`` in this process through the real entry point (dojo.cli.main)."""
    from dojo.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return CliResult(code, out.getvalue(), err.getvalue())


def _run_cli_or_skip(*args: str) -> CliResult:
    r = run_cli(*args)
    needs_extra = args[:1] in (("train",), ("chat",), ("export",))
    if TRAIN_MISSING and needs_extra and "pip install -e '.[train]' in dojo's clone" in r.stderr:
        pytest.skip(f"dojo train needs the train extra: {', '.join(TRAIN_MISSING)} not installed")
    return r


@pytest.fixture
def cli():
    return _run_cli_or_skip
