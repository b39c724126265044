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

STALE_BUILD_LOCK_S = 15 * 60.0
"""An op not built yet: its first build holds the lock while it compiles (deepspeed_shm_comm about
40 s on this repo's 2-core machine, cpu_adam about a minute); a lock older than this was left by a
run stopped mid-build (dojo and DeepSpeed's launcher stop ranks with SIGTERM, which skips the
build's own cleanup), as a stopped CI run once did."""


def _op_dirs(env: Mapping[str, str], home: Path, op: str = OP) -> list[Path]:
    """The build folders of ``op`` (a glob: "*" for every op) for this Python's ranks."""
    root = env.get("TORCH_EXTENSIONS_DIR")
    if root:
        return sorted(Path(root).glob(op))
    cache = Path(env.get("XDG_CACHE_HOME") or home / ".cache") / "torch_extensions"
    py = f"py{sys.version_info.major}{sys.version_info.minor}{getattr(sys, 'abiflags', '')}_*"
    return sorted(cache.glob(f"{py}/{op}"))


def _cached(env: Mapping[str, str], home: Path) -> bool:
    """A built op is already there: torch loads it without compiling."""
    return any((d / f"{OP}.so").is_file() for d in _op_dirs(env, home))


def clear_stale_build_lock(
    env: Mapping[str, str] | None = None, home: Path | None = None, now: float | None = None
) -> list[Path]:
    """Remove any DeepSpeed op's build lock that a killed run left behind (every later run that
    loads the op would wait on it forever: torch's FileBaton polls until the file goes): older
    than STALE_LOCK_S beside a built op, or than STALE_BUILD_LOCK_S before the first build
    finished. Returns what was removed."""
    import time

    env = os.environ if env is None else env
    now = time.time() if now is None else now
    removed = []
    for d in _op_dirs(env, Path.home() if home is None else home, op="*"):
        lock = d / "lock"
        try:
            age = now - lock.stat().st_mtime
        except OSError:
            continue
        built = (d / f"{d.name}.so").is_file()
        stale = age > (STALE_LOCK_S if built else STALE_BUILD_LOCK_S)
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
