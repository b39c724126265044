"""Launching a run: the DeepSpeed runner's argument list, and the process that owns it.

``build_command`` is pure (tests assert on the list). ``run`` starts the runner in its own process
group under dojo.train.supervise (which ends the group if dojo train dies, even by SIGKILL),
forwards Ctrl-C / SIGTERM / SIGHUP to the whole group, and returns the runner's exit code (130
after an interrupt). User strings only ever travel as list items, never through a shell.

    python -m deepspeed.launcher.runner --include localhost:0,1 --master_port 29533 \
        --module dojo.train.worker --config runs/dojo/train.json
"""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from dojo.paths import RUN_FILE
from dojo.run.machine import with_expandable
from dojo.run.run import Run

WORKER_MODULE = "dojo.train.worker"
# After forwarding Ctrl-C, give the ranks this long to exit before SIGKILL (s): DeepSpeed's
# launcher terminates its children on SIGINT, a rank stuck in a collective may need the kill.
_GRACE_S = 10.0


@dataclass(frozen=True)
class Devices:
    """Where the ranks run: GPU ids on this machine, or N CPU processes (DeepSpeed CPU accelerator)."""

    kind: str
    """cuda | cpu."""
    ids: tuple[int, ...]
    """GPU ids (cuda) or local slot numbers 0..N-1 (cpu); empty with a hostfile (slots from it)."""

    @property
    def world_size(self) -> int:
        return len(self.ids)


def free_port() -> int:
    """A TCP port free right now on this machine (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch_env(
    devices: Devices, base: dict[str, str] | None = None, expandable: bool = False
) -> dict[str, str]:
    """Environment for the runner: on CPU, DeepSpeed's CPU accelerator with one slot per process;
    ``expandable``: PyTorch's expandable segments (the run's ``expandable_segments``), set before
    the processes start, as axolotl's CLI does: the allocator reads it once, at CUDA's first use."""
    env = dict(os.environ if base is None else base)
    if devices.kind == "cuda":
        # --include says which GPUs (preflight read the user's CUDA_VISIBLE_DEVICES into it); the
        # runner would print that it ignores the variable, then set it per rank from --include.
        env.pop("CUDA_VISIBLE_DEVICES", None)
        # nvidia-smi's order, which --gpus and the memory checks use; CUDA's default puts the
        # fastest GPU first, another card on a machine with mixed GPUs.
        env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    if expandable:
        env["PYTORCH_CUDA_ALLOC_CONF"] = with_expandable(env.get("PYTORCH_CUDA_ALLOC_CONF"))
    if devices.kind == "cpu":
        # The runner counts CPU "devices" from LOCAL_SIZE (else NUMA nodes: usually 1), so
        # --include localhost:0,1 needs LOCAL_SIZE=2 (deepspeed/accelerator/cpu_accelerator.py).
        env["DS_ACCELERATOR"] = "cpu"
        env["LOCAL_SIZE"] = str(devices.world_size)
        # 2 ranks on a small machine: without this each rank starts one thread per core and they
        # fight over the cores (oversubscription makes a 30 s run take minutes).
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // devices.world_size)))
    env.setdefault("PYTHONUNBUFFERED", "1")  # progress lines appear as they happen
    # DeepSpeed builds its ops on first use (on CPU, deepspeed_shm_comm, in every run) through
    # `ninja`, found on PATH. The ninja wheel of the train extra sits next to this interpreter,
    # which a venv run without `activate` (`.venv/bin/dojo`, `make demo`) does not put on PATH:
    # the ranks would stop at "Ninja is required to load C++ extensions" on a machine without it.
    bindir = os.path.dirname(sys.executable)
    path = env.get("PATH", "")
    if bindir and bindir not in path.split(os.pathsep):
        env["PATH"] = os.pathsep.join([bindir, path]) if path else bindir
    return env


def build_command(
    run: Run,
    run_dir: str | Path,
    devices: Devices,
    master_port: int,
    python: str = sys.executable,
) -> list[str]:
    """The exact runner argv: --include picks the GPUs (the runner ignores CUDA_VISIBLE_DEVICES
    whenever --include/--num_gpus is given: DeepSpeed #662, #2980; preflight reads it into the
    ids), --module runs the worker."""
    cmd = [python, "-m", "deepspeed.launcher.runner"]
    if run.devices.hostfile is not None:
        # Multi-node: the hostfile lists the machines and their slots; --include would clash
        # with --num_nodes ("Cannot specify num_nodes/gpus with include/exclude").
        # --num_nodes always: without it the runner starts on every machine listed, whatever
        # number of machines the run (batch size, estimate) was planned for.
        cmd += ["--hostfile", str(run.devices.hostfile), "--num_nodes", str(run.devices.num_nodes)]
        if run.devices.master_addr is not None:
            cmd += ["--master_addr", run.devices.master_addr]
    else:
        cmd += ["--include", "localhost:" + ",".join(str(i) for i in devices.ids)]
    cmd += ["--master_port", str(master_port)]
    cmd += ["--module", WORKER_MODULE, "--config", str(Path(run_dir) / RUN_FILE)]
    return cmd


def format_command(cmd: list[str], env: dict[str, str] | None = None) -> str:
    """Shell-quoted, for display only (the launch itself never goes through a shell)."""
    import shlex

    prefix = ""
    if env is not None:
        prefix = "".join(
            f"{k}={shlex.quote(env[k])} "
            for k in (
                "DS_ACCELERATOR",
                "LOCAL_SIZE",
                "CUDA_DEVICE_ORDER",
                "PYTORCH_CUDA_ALLOC_CONF",
            )
            if k in env
        )
    return prefix + shlex.join(cmd)


SUPERVISOR = "dojo.train.supervise"
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def run(cmd: list[str], env: dict[str, str] | None = None, cwd: str | None = None) -> int:
    """Run the launcher in its own process group; Ctrl-C/SIGTERM/SIGHUP stop every rank; no orphans.

    The group is led by dojo.train.supervise, which holds the read end of a pipe whose write end
    only this process has: if this process dies in a way no handler sees (SIGKILL, the OOM
    killer), the pipe closes and the supervisor stops the whole group within seconds.
    SIGHUP (terminal closed, ssh dropped) is handled like SIGTERM: the ranks get SIGTERM.
    Returns the launcher's exit code, or 130 when the run was interrupted.
    """
    read_fd, write_fd = os.pipe()  # both non-inheritable; pass_fds hands read_fd to the child
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", SUPERVISOR, str(read_fd), "--", *cmd],
            env=env,
            cwd=cwd,
            start_new_session=True,
            pass_fds=(read_fd,),
        )
    finally:
        os.close(read_fd)
    pgid = proc.pid  # start_new_session: the child leads a new session and process group
    interrupted: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        interrupted.append(signum)
        # SIGHUP is not something DeepSpeed's launcher or the ranks handle: send SIGTERM.
        _signal_group(pgid, signal.SIGTERM if signum == signal.SIGHUP else signum)

    old = {s: signal.signal(s, forward) for s in _STOP_SIGNALS}
    try:
        deadline: float | None = None
        while True:
            try:
                rc = proc.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                pass
            if interrupted and deadline is None:
                deadline = time.monotonic() + _GRACE_S
            if deadline is not None and time.monotonic() > deadline:
                _signal_group(pgid, signal.SIGKILL)
    finally:
        # Whatever happened, nothing of this run outlives it (ranks the launcher missed, their
        # dataloader workers): SIGTERM the group, then SIGKILL what is left.
        _reap_group(pgid)
        os.close(write_fd)
        for s, h in old.items():
            signal.signal(s, h)
    if interrupted:
        return 130
    if rc == 0 and _ranks_unfinished(cmd):
        return 1
    return rc


def _ranks_unfinished(cmd: list[str]) -> bool:
    """Exit 0 with a rank that never wrote "done" (see rank_status.not_done): a failure."""
    from dojo.train import rank_status

    if "--config" not in cmd[:-1]:
        return False  # not a dojo worker launch (tests' stand-ins)
    run_dir = Path(cmd[cmd.index("--config") + 1]).parent
    return bool(rank_status.not_done(run_dir))


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _reap_group(pgid: int, timeout_s: float = 5.0) -> None:
    if not _group_alive(pgid):
        return
    _signal_group(pgid, signal.SIGTERM)
    end = time.monotonic() + timeout_s
    while time.monotonic() < end and _group_alive(pgid):
        time.sleep(0.1)
    _signal_group(pgid, signal.SIGKILL)
