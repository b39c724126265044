"""Process helpers the signal and fault tests share: start `dojo train` in the background, find
the processes of a run, wait, and a stand-in launcher for launch.run."""

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
# A stand-in launcher: a child that starts a grandchild, then both sleep (as DeepSpeed's runner
# starts launch.py, which starts the ranks). It writes "child grandchild" pids atomically.
FAKE_LAUNCHER = r"""
import os, subprocess, sys, time
g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
open(sys.argv[1] + ".tmp", "w").write(f"{os.getpid()} {g.pid}")
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(120)
"""
WRAP = r"""
import sys
from dojo.train import launch
sys.exit(launch.run([sys.executable, "-c", sys.argv[1], sys.argv[2]]))
"""


def env() -> dict[str, str]:
    """This environment without a CPU-accelerator setting a parent test may have left."""
    return {k: v for k, v in os.environ.items() if k not in ("DS_ACCELERATOR", "LOCAL_SIZE")}


def start_train(out: Path, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
    """dojo train in the background, output to a log file (a pipe nobody reads could block it)."""
    log = out.with_name(out.name + ".log")
    cmd = [sys.executable, "-m", "dojo", "train", "--output-dir", str(out), *args]
    with open(log, "wb") as f:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env(), stdout=f, stderr=subprocess.STDOUT)
    return proc, log


def run_processes(out: Path) -> dict[int, list[str]]:
    """pid -> argv of every live process whose command line names this run's folder."""
    found = {}
    needle = str(out.resolve())
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if any(needle in a for a in argv):
            found[int(proc.name)] = argv
    return found


def wait_for(pred: Any, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.1)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False
