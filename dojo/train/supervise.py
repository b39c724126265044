"""The process between ``dojo train`` and DeepSpeed's launcher: the run ends when dojo train does.

    dojo train ──pipe──> python -m dojo.train.supervise FD -- python -m deepspeed.launcher.runner ...
                           └─ runner ─> deepspeed.launcher.launch ─> rank 0, rank 1, ...

``dojo train`` starts this in a new session (its own process group, which the runner, the
launch process, the ranks and their dataloader workers all inherit) and keeps the write end of a
pipe whose read end is FD here. However dojo train ends, even by SIGKILL, the kernel closes that
end and the read below returns: if the runner is still going, nobody is watching the run any
more, so it is stopped: SIGTERM to the whole group (ranks record "stopped"), SIGKILL after a short
grace. Without this, ``kill -9`` of dojo train (or its terminal going away) left the DeepSpeed
launcher and every rank training with nobody to report to, holding the GPUs.

While dojo train lives, it owns the run: it forwards Ctrl-C/SIGTERM/SIGHUP to the group (this
process included, which ignores them and waits for the runner) and gets the runner's exit status
back from here unchanged (a runner killed by signal N makes this process die of signal N too).
Stdlib only, nothing from dojo imported: it starts in a few tens of milliseconds.
"""

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

from dojo.train import toolchain

GRACE_S = 3.0
"""From SIGTERM to SIGKILL once dojo train is gone: ranks write their "stopped" state quickly;
one stuck in a collective would otherwise hold the run."""


def _kill_group_when_orphaned(fd: int, runner: subprocess.Popen[bytes]) -> None:
    """Blocks until dojo train's end of the pipe closes; then ends the run."""
    try:
        while os.read(fd, 4096):
            pass  # dojo train never writes; EOF (b"") means it is gone
    except OSError:
        pass
    if runner.poll() is not None:
        return  # the run ended first: the normal path, dojo train reaps the group itself
    pgid = os.getpgrp()
    _killpg(pgid, signal.SIGTERM)
    end = time.monotonic() + GRACE_S
    while runner.poll() is None and time.monotonic() < end:
        time.sleep(0.05)
    _killpg(pgid, signal.SIGKILL)  # stragglers (ranks the launcher missed), and this process


def _killpg(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: python -m dojo.train.supervise FD -- COMMAND...\n")
        return 2
    fd, cmd = int(argv[0]), argv[2:]
    # A Python-level no-op, not SIG_IGN: ignored dispositions survive exec and the runner would
    # inherit them; handlers are reset to the default in the child.
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, lambda *_: None)
    runner = subprocess.Popen(cmd)
    threading.Thread(target=_kill_group_when_orphaned, args=(fd, runner), daemon=True).start()
    rc = runner.wait()
    port = toolchain.master_port(cmd)
    if port is not None:  # the ranks are gone: their CPU allreduce buffers are garbage now
        toolchain.remove_shm_buffers(port)
    if rc < 0:  # killed by a signal: die of the same one, so dojo train sees what happened
        if -rc in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # ours: back to default
            signal.signal(-rc, signal.SIG_DFL)
        os.kill(os.getpid(), -rc)
        time.sleep(1.0)  # a signal that does not terminate (SIGCHLD...): fall through
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
