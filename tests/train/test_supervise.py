"""launch.run under signals: SIGHUP like SIGTERM, and SIGKILL of the parent ends the whole run.

Fast: a stand-in launcher (a child that starts a grandchild, both sleep, as the DeepSpeed runner
starts launch.py which starts the ranks) under the real launch.run + dojo.train.supervise. The
same through the real `dojo train --nproc 2` is in test_supervise_cpu.py (slow).
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dojo.train import supervise
from tests.helpers.procs import FAKE_LAUNCHER as _FAKE
from tests.helpers.procs import REPO
from tests.helpers.procs import WRAP as _WRAP
from tests.helpers.procs import alive as _alive


def _start(tmp_path: Path) -> tuple[subprocess.Popen[bytes], list[int]]:
    pids = tmp_path / "pids"
    wrap = subprocess.Popen([sys.executable, "-c", _WRAP, _FAKE, str(pids)], cwd=REPO)
    deadline = time.monotonic() + 30
    while not pids.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pids.exists(), "the stand-in launcher did not start"
    return wrap, [int(x) for x in pids.read_text().split()]


def _gone_within(pids: list[int], seconds: float) -> float:
    t0 = time.monotonic()
    while any(_alive(p) for p in pids) and time.monotonic() - t0 < seconds:
        time.sleep(0.05)
    assert not any(_alive(p) for p in pids), [p for p in pids if _alive(p)]
    return time.monotonic() - t0


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM, signal.SIGINT])
def test_hangup_and_terminate_stop_the_group_exit_130(tmp_path: Path, sig: int) -> None:
    wrap, pids = _start(tmp_path)
    try:
        wrap.send_signal(sig)
        assert wrap.wait(timeout=30) == 130
        _gone_within(pids, 5)
    finally:
        if wrap.poll() is None:
            wrap.kill()


def test_sigkill_of_the_parent_ends_the_run(tmp_path: Path) -> None:
    """Nothing in the killed process runs: the supervisor sees its pipe close and ends the group."""
    wrap, pids = _start(tmp_path)
    try:
        wrap.kill()
        wrap.wait(timeout=10)
        took = _gone_within(pids, supervise.GRACE_S + 5)
        print(f"\nsignals: SIGKILL of the parent -> launcher and its child gone in {took:.2f} s")
    finally:
        for p in pids:
            if _alive(p):
                os.kill(p, signal.SIGKILL)


@pytest.mark.slow  # waits out the grace period
def test_a_launcher_ignoring_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); " + (
        "open(__import__('sys').argv[1], 'w').write(str(__import__('os').getpid())); time.sleep(120)"
    )
    pidfile = tmp_path / "pid"
    wrap = subprocess.Popen([sys.executable, "-c", _WRAP, stubborn, str(pidfile)], cwd=REPO)
    try:
        deadline = time.monotonic() + 30
        while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        pid = int(pidfile.read_text())
        wrap.kill()
        took = _gone_within([pid], supervise.GRACE_S + 5)
        assert took >= supervise.GRACE_S - 0.5  # it got the grace, then SIGKILL
    finally:
        if wrap.poll() is None:
            wrap.kill()


def test_supervisor_passes_exit_status_through() -> None:
    from dojo.train import launch

    assert launch.run([sys.executable, "-c", "import sys; sys.exit(3)"]) == 3
    killed = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    assert launch.run([sys.executable, "-c", killed]) == -signal.SIGKILL


def test_supervisor_usage() -> None:
    assert supervise.main([]) == 2
    assert supervise.main(["3", "x"]) == 2


def test_exit_0_with_an_unfinished_rank_is_a_failure(tmp_path: Path) -> None:
    """DeepSpeed's runner exits 0 when its launch process is killed by a signal; the ranks'
    own records say the run did not finish."""
    from dojo.train import launch, rank_status

    fake = (
        "import sys; from dojo.train import rank_status as r; r.write(sys.argv[1], 0, sys.argv[2])"
    )
    for status, rc in (("done", 0), ("running", 1), ("stopped", 1)):
        rank_status.clear(tmp_path)
        cmd = [sys.executable, "-c", fake, str(tmp_path), status]
        assert launch.run([*cmd, "--config", str(tmp_path / "train.json")]) == rc, status
        assert launch.run(cmd) == 0  # not a worker launch: nothing to consult
