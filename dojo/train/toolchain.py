"""The one system tool a CPU run needs: a C++ compiler for DeepSpeed's shared-memory op.

Every rank on DeepSpeed's CPU accelerator loads ``deepspeed_shm_comm`` (deepspeed/comm/torch.py,
``TorchBackend.__init__``), which torch's cpp_extension compiles on first use with ``$CXX`` or
``c++`` and caches under ``$TORCH_EXTENSIONS_DIR`` or ``~/.cache/torch_extensions/py<XY>_<accel>/``.
Without a compiler and without that cache every rank dies with a long ninja traceback after the
model is loaded; this check says it in one line before anything starts. Nothing is imported.
"""

import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from dojo.errors import LaunchError

OP = "deepspeed_shm_comm"


STALE_LOCK_S = 120.0
"""With the op already built, torch holds its build lock for the well under a second ninja needs
to find nothing to do; a lock older than this was left by a process killed in that window."""


def _op_dirs(env: Mapping[str, str], home: Path) -> list[Path]:
    root = env.get("TORCH_EXTENSIONS_DIR")
    if root:
        return [Path(root) / OP]
    cache = Path(env.get("XDG_CACHE_HOME") or home / ".cache") / "torch_extensions"
    py = f"py{sys.version_info.major}{sys.version_info.minor}{getattr(sys, 'abiflags', '')}_*"
    return sorted(cache.glob(f"{py}/{OP}"))


def _cached(env: Mapping[str, str], home: Path) -> bool:
    """A built op is already there: torch loads it without compiling."""
    return any((d / f"{OP}.so").is_file() for d in _op_dirs(env, home))


def clear_stale_build_lock(
    env: Mapping[str, str] | None = None, home: Path | None = None, now: float | None = None
) -> list[Path]:
    """Remove the op's build lock when a killed run left it behind (every later CPU run would
    wait on it forever: torch's FileBaton polls until the file goes). Returns what was removed."""
    import time

    env = os.environ if env is None else env
    now = time.time() if now is None else now
    removed = []
    for d in _op_dirs(env, Path.home() if home is None else home):
        lock = d / "lock"
        try:
            stale = (d / f"{OP}.so").is_file() and now - lock.stat().st_mtime > STALE_LOCK_S
        except OSError:
            continue
        if stale:
            lock.unlink(missing_ok=True)
            removed.append(lock)
    return removed


def cpu_compiler_error(
    env: Mapping[str, str] | None = None, home: Path | None = None
) -> LaunchError | None:
    """The error to raise before a run on CPU processes, or None when the op can be built or loaded.

    Call it only for CPU devices (``Devices.kind == "cpu"``): the CUDA accelerator does not build
    this op at start-up.
    """
    env = os.environ if env is None else env
    cxx = env.get("CXX") or "c++"
    if shutil.which(cxx, path=env.get("PATH", "")) is not None:
        return None
    if _cached(env, Path.home() if home is None else home):
        return None
    return LaunchError(
        f"training on CPU processes needs a C++ compiler: {cxx!r} is not on PATH (DeepSpeed "
        f"compiles its {OP} op with it on first use)",
        hint="install g++ and the Python headers (Debian/Ubuntu: apt-get install g++ python3-dev)",
    )


SHM_ROOT = Path("/dev/shm")
SHM_PREFIX = "deepspeed_allreduce_buffer"
"""DeepSpeed's CPU allreduce (csrc/cpu/comm/shm.cpp) maps one 66 MB /dev/shm segment per rank,
named ``deepspeed_allreduce_buffer_<uid>_<addr>_<port>_<rank>``, and never unlinks it
(``shared_close`` is not called): each CPU run would leave its ranks' buffers in RAM until reboot
(22 GB after a day of tests here, until the OOM killer struck)."""


def remove_shm_buffers(port: str | int, root: Path = SHM_ROOT) -> list[Path]:
    """Unlink the buffers of the run that used this rendezvous port; what was removed."""
    removed = []
    for path in root.glob(f"{SHM_PREFIX}_{os.getuid()}_*_{port}_*"):
        try:
            path.unlink()
        except OSError:
            continue
        removed.append(path)
    return removed


def master_port(cmd: list[str]) -> str | None:
    """The --master_port value of a DeepSpeed runner argv."""
    for i, arg in enumerate(cmd[:-1]):
        if arg == "--master_port":
            return cmd[i + 1]
    return None
