"""``Run``: one training run with every "auto" decided, and where it runs. Frozen, typed,
torch-free.

``dojo config`` writes its JSON from it, ``dojo estimate`` estimates it, ``dojo train`` records
it in the run folder and the worker reads it back as the same type (``Run.from_dict``).
"""

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any, Literal

from dojo.run.schema import GROUPS, RunOptions

FORMAT = 2
"""The run record's format; bumped when a field changes meaning."""


@dataclass(frozen=True)
class Run(RunOptions):
    """The resolved option groups (``RunOptions``) and the placement the resolver chose."""

    device: Literal["cuda", "cpu"] = "cpu"
    gpu_ids: tuple[int, ...] = ()
    """GPU ids (cuda) or process slots (cpu) per node; empty = the hostfile's slots."""
    gpus_per_node: int = 1
    machine: str = ""
    """Which machine this was resolved for, in words."""
    machine_assumed: bool = False
    assumed: tuple[str, ...] = ()
    """How each "auto" was decided, in words (printed by estimate and train)."""

    @property
    def world_size(self) -> int:
        return self.gpus_per_node * self.devices.num_nodes

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        return {"format": FORMAT, **_lists(d)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Run":
        if d.get("format") != FORMAT:
            raise ValueError(f"run record format {d.get('format')!r}, this dojo reads {FORMAT}")
        groups = {g: _build(GROUPS[g][1], d.get(g, {})) for g in GROUPS}
        rest = {f.name for f in dataclasses.fields(cls)} - set(GROUPS)
        return cls(**groups, **_build_fields(cls, {k: d[k] for k in rest if k in d}))


def _lists(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _lists(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_lists(v) for v in value]
    return value


def _build(cls: type, values: dict[str, Any]) -> Any:
    return cls(**_build_fields(cls, values))


def _build_fields(cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """JSON values -> field values: lists back to tuples where the field is a tuple."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    return {
        k: tuple(v) if isinstance(v, list) and typing.get_origin(hints[k]) is tuple else v
        for k, v in values.items()
        if k in names
    }
