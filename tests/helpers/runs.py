"""Test helpers: a ResolvedRun or an options dict from a few values, as the CLI would make them."""

from typing import Any

from dojo.run import inputs, resolve
from dojo.run.machine import Machine
from dojo.run.resolved import ResolvedRun

CPU = Machine(cuda=False)
CUDA = Machine(cuda=True, gpu_ids=(0,), gpu_memory_gib=139.8, liger=False)


def values(**given: Any) -> dict[str, Any]:
    """Every train option, defaults < ``given`` (typed values, like inputs.merge makes)."""
    return {**inputs.merge("train", {}, {}), **given}


def run_of(
    machine: Machine = CPU, spec: Any = None, gpus_per_node: int = 1, **given: Any
) -> ResolvedRun:
    return resolve.resolve(
        values(**given), machine=machine, spec=spec, gpus_per_node=gpus_per_node, given=set(given)
    )
