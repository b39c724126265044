"""The machine a run is resolved for: this one, or an assumed CUDA machine with dojo's GPU extras.

Pure facts (no torch): GPUs from nvidia-smi (``dojo.gpus``), installed packages from
``importlib.util.find_spec`` (nothing is imported), host RAM from /proc and cgroups.
"""

import contextlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Machine:
    cuda: bool
    """CUDA GPUs are (or are assumed to be) there."""
    gpu_ids: tuple[int, ...] = ()
    """GPUs found here (empty when assumed)."""
    gpu_memory_gib: float | None = None
    """Smallest GPU's memory; None = unknown (no verdict)."""
    host_memory_gib: float | None = None
    liger: bool = False
    """liger-kernel importable (dojo's gpu extra)."""
    flash_attn: bool = False
    alloc_conf: str | None = None
    """PYTORCH_CUDA_ALLOC_CONF in this environment (the training processes inherit it)."""
    assumed: bool = False
    """True: not this machine, a CUDA machine with dojo's GPU extras installed."""

    def describe(self) -> str:
        if self.assumed:
            return "an assumed CUDA machine with dojo's GPU extras (liger-kernel, triton)"
        if self.cuda:
            return f"this machine ({len(self.gpu_ids)} GPU(s))"
        return "this machine (CPU only)"


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def assumed_cuda(gpu_memory_gib: float | None = None) -> Machine:
    """The machine `dojo estimate` describes when this one has no GPU."""
    return Machine(cuda=True, gpu_memory_gib=gpu_memory_gib, liger=True, assumed=True)


def local(present: list | None = None) -> Machine:  # type: ignore[type-arg]
    """This machine, as found now. ``present``: GPUs to use instead of asking nvidia-smi."""
    from dojo.gpus import list_gpus

    gpus = list_gpus() if present is None else present
    mems = [g.memory_gib for g in gpus]
    return Machine(
        cuda=bool(gpus),
        gpu_ids=tuple(sorted(g.index for g in gpus)),
        gpu_memory_gib=min(mems) if mems else None,
        host_memory_gib=host_memory_gib(),
        liger=_has("liger_kernel"),
        flash_attn=_has("flash_attn"),
        alloc_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
    )


def for_plan(present: list | None = None, gpu_memory_gib: float | None = None) -> Machine:  # type: ignore[type-arg]
    """This machine when it has GPUs, else the assumed CUDA one (what `estimate` describes)."""
    here = local(present)
    if here.cuda:
        if gpu_memory_gib is not None:
            return Machine(**{**here.__dict__, "gpu_memory_gib": gpu_memory_gib})
        return here
    return assumed_cuda(gpu_memory_gib)


def conf_expandable(conf: str | None) -> bool | None:
    """What a PYTORCH_CUDA_ALLOC_CONF says of expandable_segments: True, False, or None when it
    does not say (c10's CUDAAllocatorConfig: comma-separated key:value pairs, True/False)."""
    for pair in (conf or "").split(","):
        key, _, value = pair.partition(":")
        if key.strip() == "expandable_segments":
            return value.strip() == "True"
    return None


def with_expandable(conf: str | None) -> str:
    """``conf`` with expandable_segments:True added (it is added only where it does not say)."""
    if conf_expandable(conf) is not None:
        return conf or ""
    return ",".join(p for p in (conf, "expandable_segments:True") if p)


def host_memory_gib() -> float | None:
    """RAM this machine reports (MemTotal, or a lower cgroup v2/v1 limit); None if unknown."""
    sizes: list[float] = []
    with contextlib.suppress(ValueError, OSError, AttributeError):
        sizes.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            value = Path(limit).read_text().strip()
        except OSError:
            continue
        if value.isascii() and value.isdigit() and int(value) < 1 << 60:
            sizes.append(int(value))
    return min(sizes) / 2**30 if sizes else None
