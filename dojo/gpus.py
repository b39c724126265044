"""Which GPUs exist and which the user asked for, without importing torch.

``list_gpus()`` asks ``nvidia-smi`` (present wherever the NVIDIA driver is); ``parse_gpus()``
validates ``--gpus`` against that list before anything is launched, ``visible_gpus()`` reads
``CUDA_VISIBLE_DEVICES`` as the same indices.
"""

import shlex
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

from dojo.errors import LaunchError
from dojo.safe_load import clip, shorten


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    memory_gib: float
    """Total device memory, GiB (nvidia-smi reports MiB)."""
    used_gib: float = 0.0
    """In use when dojo looked, by any process (nvidia-smi memory.used), GiB."""


def _nvidia_smi(query: str) -> str | None:
    """``nvidia-smi --query-...`` as csv without header or units; None when there is no driver
    or it fails."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    cmd = [exe, query, "--format=csv,noheader,nounits"]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def list_gpus() -> list[Gpu]:
    """GPUs the driver shows, in nvidia-smi order; [] when there is no driver (CPU machine)."""
    out = _nvidia_smi("--query-gpu=index,name,memory.total,memory.used")
    return [] if out is None else parse_gpu_table(out)


def parse_gpu_table(out: str) -> list[Gpu]:
    """nvidia-smi's ``index, name, memory.total, memory.used`` rows (MiB); a used figure the
    driver does not give ("[N/A]") reads as 0."""
    gpus = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.rsplit(",", 2)]
        head = parts[0].split(",", 1) if parts else []
        if len(parts) != 3 or len(head) != 2 or not _is_index(head[0].strip()):
            continue
        try:
            total = float(parts[1]) / 1024
        except ValueError:
            continue
        gpus.append(Gpu(int(head[0]), head[1].strip(), total, _mib_or_zero(parts[2]) / 1024))
    return gpus


def _mib_or_zero(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return 0.0


MAX_GPU_INDEX = 1023
"""No host has more GPUs than this; a larger index is a typo, not a device."""


def _is_index(text: str) -> bool:
    # str.isdigit() accepts "²" and "٣"; int() would take "٣" as 3. Only ASCII digits are ids.
    return text.isascii() and text.isdigit()


def describe_ids(ids: list[int], limit: int = 120) -> str:
    """``0,1,2,3`` when that is short; past ``limit`` characters, runs of consecutive ids as
    ranges (``0-1023``), cut to ``limit``: a hint never lists thousands of numbers."""
    ordered = sorted(set(ids))
    plain = ",".join(map(str, ordered))
    if len(plain) <= limit:
        return plain or "none"
    runs: list[list[int]] = []
    for i in ordered:
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return clip(",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs), limit)


def parse_gpus(spec: str, present: list[int] | None) -> tuple[int, ...]:
    """``"all"`` or comma-separated ids (``"0,1"``) -> sorted ids, checked against ``present``;
    ``present=None`` checks the syntax only (a plan for another machine, dojo estimate)."""
    if present is None:
        hint = "give GPU ids as on the target machine, e.g. --gpus 0,1"
    else:
        hint = f"GPUs present: {describe_ids(present)}; use e.g. --gpus 0,1 or --gpus all"
    flag = f"--gpus {shorten(spec)}"
    text = spec.strip()
    if text == "all":
        if not present:
            raise LaunchError(
                "--gpus all: no NVIDIA GPU found", hint="on a CPU machine use --nproc N"
            )
        return tuple(sorted(present))
    if not text:
        raise LaunchError("--gpus is empty", hint=hint)
    ids: list[int] = []
    seen: set[int] = set()  # a set, not ids.count(): 60,000 entries would take minutes
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            raise LaunchError(f"{flag}: an empty entry between commas", hint="write --gpus 0,1")
        if item != raw or any(c.isspace() for c in item):
            raise LaunchError(f"{flag}: no spaces allowed", hint="write --gpus 0,1")
        if not _is_index(item):
            raise LaunchError(f"{flag}: {shorten(item)} is not a GPU index", hint=hint)
        if len(item) > 4 or int(item) > MAX_GPU_INDEX:
            raise LaunchError(
                f"{flag}: {shorten(item)} is not a GPU index (no host has more than "
                f"{MAX_GPU_INDEX + 1} GPUs)",
                hint=hint,
            )
        index = int(item)
        if index in seen:
            raise LaunchError(f"{flag}: GPU {index} is listed twice", hint=hint)
        seen.add(index)
        ids.append(index)
    if present is not None:
        missing = [i for i in ids if i not in present]
        if missing:
            raise LaunchError(f"{flag}: GPU {missing[0]} does not exist", hint=hint)
    return tuple(sorted(ids))


VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"


def list_gpu_uuids() -> dict[int, str]:
    """nvidia-smi index -> UUID (``GPU-...``); {} when nvidia-smi cannot say."""
    out = _nvidia_smi("--query-gpu=index,uuid")
    found: dict[int, str] = {}
    for line in (out or "").strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and _is_index(parts[0]) and parts[1].lower().startswith("gpu-"):
            found[int(parts[0])] = parts[1]
    return found


def show_visible(value: str) -> str:
    """``CUDA_VISIBLE_DEVICES=1`` as a shell would take it (``=''`` when empty), cut short."""
    return f"{VISIBLE_ENV}={clip(shlex.quote(value), 60)}"


def visible_gpus(
    value: str, present: list[int], uuids: Callable[[], dict[int, str]] = list_gpu_uuids
) -> tuple[int, ...]:
    """CUDA_VISIBLE_DEVICES as nvidia-smi indices, in its order: indices, or GPU UUIDs
    (``GPU-...``, a unique prefix as CUDA takes them) looked up through nvidia-smi.

    Refused: a value that hides every GPU (empty, or ``-1`` first, which CUDA reads as none), MIG
    instances (DeepSpeed's launcher gives each rank a whole GPU by its index), and anything that
    names no GPU here."""
    shown = show_visible(value)
    entries = [e.strip() for e in value.split(",")]
    if not value.strip() or entries[0].startswith("-"):
        raise LaunchError(
            f"{shown} hides every GPU",
            hint=f"unset {VISIBLE_ENV} to train on the GPUs, or pass --nproc N for CPU processes",
        )
    fix = f"unset {VISIBLE_ENV} and name GPUs with --gpus (GPUs present: {describe_ids(present)})"
    ids: list[int] = []
    for entry in entries:
        index = _visible_index(entry, shown, present, uuids, fix)
        if index in ids:
            raise LaunchError(f"{shown}: GPU {index} is listed twice", hint=fix)
        ids.append(index)
    return tuple(ids)


def _visible_index(
    entry: str, shown: str, present: list[int], uuids: Callable[[], dict[int, str]], fix: str
) -> int:
    if entry.lower().startswith("mig-"):
        raise LaunchError(
            f"{shown}: {clip(entry, 60)} is a MIG instance; DeepSpeed's launcher gives each rank "
            "a whole GPU by its index",
            hint=fix,
        )
    if _is_index(entry) and len(entry) <= 4:
        if int(entry) not in present:
            raise LaunchError(f"{shown}: GPU {int(entry)} does not exist", hint=fix)
        return int(entry)
    if not entry.lower().startswith("gpu-"):
        raise LaunchError(f"{shown}: {shorten(entry)} is not a GPU index or UUID", hint=fix)
    known = uuids()
    if not known:
        raise LaunchError(
            f"{shown}: nvidia-smi lists no GPU UUIDs to find {clip(entry, 60)} by",
            hint=f"set {VISIBLE_ENV} to GPU indices (nvidia-smi's), or {fix}",
        )
    match = [i for i, u in known.items() if u.lower().startswith(entry.lower())]
    if len(match) != 1:
        what = "matches several GPUs" if match else "is no GPU's UUID here"
        raise LaunchError(f"{shown}: {clip(entry, 60)} {what}", hint="`nvidia-smi -L` lists them")
    return match[0]


def process_memory_mib(pid: int, gpu_uuid: str) -> float | None:
    """What the driver counts for process ``pid`` on the GPU ``gpu_uuid`` (MiB), from
    ``nvidia-smi --query-compute-apps``: the process's own share when others use the same GPU.
    None when nvidia-smi cannot say (no driver, or a container whose PID namespace hides the
    host's pids: nvidia-smi lists those, not ours)."""
    out = _nvidia_smi("--query-compute-apps=pid,gpu_uuid,used_memory")
    return None if out is None else own_usage_mib(out, pid, gpu_uuid)


def own_usage_mib(table: str, pid: int, gpu_uuid: str) -> float | None:
    """``pid``'s row on ``gpu_uuid`` in nvidia-smi's ``pid, gpu_uuid, used_memory`` table. The
    driver writes ``GPU-<uuid>`` (``MIG-<uuid>`` for a MIG slice); torch gives the bare uuid, so
    the prefix is ignored."""
    bare = _bare_uuid(gpu_uuid)
    for line in table.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3 or not _is_index(parts[0]) or int(parts[0]) != pid:
            continue
        if not bare or _bare_uuid(parts[1]) != bare:
            continue
        try:
            return float(parts[2])
        except ValueError:  # "[N/A]" (Windows WDDM, some vGPU setups)
            return None
    return None


def _bare_uuid(text: str) -> str:
    return text.strip().lower().removeprefix("gpu-").removeprefix("mig-")
