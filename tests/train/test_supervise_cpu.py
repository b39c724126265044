"""dojo.train.supervise through the real launcher: `dojo train --nproc 2` (DeepSpeed runner ->
launch -> 2 CPU ranks) stopped from outside.

Slow (a few minutes on 2 cores). Ctrl-C (SIGINT) and SIGHUP of dojo train (terminal closed, ssh
dropped) exit 130; SIGKILL of dojo train (nothing of it runs) and of DeepSpeed's launch process
fail the run; each ends every process of the run within seconds. The same with a stand-in
launcher, fast: test_supervise.py.
"""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers.procs import run_processes as _run_processes
from tests.helpers.procs import start_train
from tests.helpers.procs import wait_for as _wait_for

pytestmark = pytest.mark.slow
GONE_WITHIN_S = 10.0
ARGS = ["--nproc", "2", "--method", "lora", "--seq-len", "256", "--micro-batch", "4", "--seed", "7"]


def _training(out: Path, log: Path) -> dict[int, list[str]]:
    """Wait until both ranks train; the run's processes then (supervisor, runner, launch, ranks)."""
    ranks = lambda: [a for a in _run_processes(out).values() if "dojo.train.worker" in a]  # noqa: E731
    _wait_for(lambda: len(ranks()) == 2, 300, "both ranks")
    _wait_for(lambda: "step 2/" in log.read_text(errors="replace"), 300, "training steps")
    return _run_processes(out)


def _stop(sig: int, tmp_path: Path) -> tuple[int, float, dict[int, list[str]], str]:
    out = tmp_path / "run"
    proc, log = _start(out, "--max-steps", "100000", "--save-steps", "0", "--logging-steps", "1")
    try:
        before = _training(out, log)
        before.pop(proc.pid)  # dojo train itself: the rest is what it leaves behind if killed
        os.kill(proc.pid, sig)
        t0 = time.monotonic()
        rc = proc.wait(timeout=60)
        _wait_for(lambda: not _run_processes(out), GONE_WITHIN_S + 5, "every process to end")
        gone = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in _run_processes(out):  # never leave a training run behind a failed test
            os.kill(pid, signal.SIGKILL)
    return rc, gone, before, log.read_text(errors="replace")


def test_sighup_stops_every_process(tmp_path: Path) -> None:
    rc, gone, before, log = _stop(signal.SIGHUP, tmp_path)
    print(
        f"\nsupervise: SIGHUP of dojo train -> exit {rc}, {len(before)} processes gone in {gone:.1f} s"
    )
    assert rc == 130, log[-3000:]
    assert gone < GONE_WITHIN_S
    assert "interrupted: every process of the run was stopped" in log
    states = [json.loads(p.read_text())["status"] for p in (tmp_path / "run/ranks").glob("*.json")]
    assert states == ["stopped", "stopped"], states  # SIGTERM reached both ranks


def test_sigkill_of_dojo_train_leaves_no_orphan(tmp_path: Path) -> None:
    rc, gone, before, _ = _stop(signal.SIGKILL, tmp_path)
    kinds = sorted(
        next((a for a in argv if a.startswith(("dojo.", "deepspeed."))), "?")
        for argv in before.values()
    )
    print(f"\nsupervise: SIGKILL of dojo train -> {kinds} all gone in {gone:.1f} s")
    assert rc == -signal.SIGKILL
    # The tree it had to end: supervisor, DeepSpeed runner, DeepSpeed launch, two ranks.
    assert kinds == [
        "deepspeed.launcher.launch",
        "deepspeed.launcher.runner",
        "dojo.train.supervise",
        "dojo.train.worker",
        "dojo.train.worker",
    ], kinds
    assert gone < GONE_WITHIN_S


def test_sigkill_of_deepspeed_launch_is_a_failure_without_orphans(tmp_path: Path) -> None:
    """DeepSpeed's runner exits 0 when launch.py dies of a signal; dojo must not say "done"."""
    out = tmp_path / "run"
    proc, log = _start(out, "--max-steps", "100000", "--save-steps", "0", "--logging-steps", "1")
    try:
        before = _training(out, log)
        launch_pid = next(p for p, a in before.items() if "deepspeed.launcher.launch" in a)
        os.kill(launch_pid, signal.SIGKILL)
        t0 = time.monotonic()
        rc = proc.wait(timeout=60)
        _wait_for(lambda: not _run_processes(out), GONE_WITHIN_S + 5, "every process to end")
        gone = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in _run_processes(out):
            os.kill(pid, signal.SIGKILL)
    text = log.read_text(errors="replace")
    print(f"\nsupervise: SIGKILL of deepspeed launch -> exit {rc}, all gone in {gone:.1f} s")
    assert rc == 1, text[-3000:]
    assert "error: training failed (launcher exit code 1)" in text
    assert "done:" not in text
    assert gone < GONE_WITHIN_S


def test_ctrl_c_exits_130_and_leaves_no_process(tmp_path: Path) -> None:
    out = tmp_path / "run"
    # every step logged (auto logs 1% of a long run)
    proc, log = _start(out, "--max-steps", "100000", "--logging-steps", "1")
    try:
        _training(out, log)
        proc.send_signal(signal.SIGINT)  # what the terminal sends on Ctrl-C
        t0 = time.monotonic()
        rc = proc.wait(timeout=120)
        _wait_for(lambda: not _run_processes(out), 60, "every process of the run to end")
        gone = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text(errors="replace")
    print(f"\nsupervise: SIGINT -> exit {rc}, every process gone in {gone:.1f} s")  # shown with -s
    assert rc == 130, text[-3000:]
    assert gone < 2 * GONE_WITHIN_S, gone  # Ctrl-C first lets the ranks stop themselves
    assert "interrupted: every process of the run was stopped" in text


def _start(out: Path, *extra: str) -> tuple[subprocess.Popen[bytes], Path]:
    return start_train(out, *ARGS, *extra)
