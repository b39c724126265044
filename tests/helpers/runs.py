"""Test helpers: RunOptions or a resolved Run from a few option values, as the CLI makes them."""

from typing import Any

from dojo.run import resolve
from dojo.run.machine import Machine
from dojo.run.run import Run
from dojo.run.schema import RunOptions

CPU = Machine(cuda=False)
CUDA = Machine(cuda=True, gpu_ids=(0,), gpu_memory_gib=139.8, liger=False)


def values(**given: Any) -> RunOptions:
    """Every option at its default but ``given`` (typed values, as inputs.merge makes them)."""
    return RunOptions.from_values(given)


def run_of(machine: Machine = CPU, spec: Any = None, gpus_per_node: int = 1, **given: Any) -> Run:
    return resolve.resolve(
        values(**given), machine=machine, spec=spec, gpus_per_node=gpus_per_node, given=set(given)
    )
