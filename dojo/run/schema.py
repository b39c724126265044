"""The run schema: every option group in one frozen ``RunOptions``, and the option table the CLI
and the YAML reader are made from.

A new option is one field in its group (``dojo.run.groups``); for a TrainingArguments-only
option, that and the line in ``dojo.train.worker.args`` that passes it on.
"""

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from dojo.run.field import Option, options_of
from dojo.run.groups.data import DataOptions
from dojo.run.groups.devices import DeviceOptions
from dojo.run.groups.kernels import KernelOptions
from dojo.run.groups.loop import LoopOptions
from dojo.run.groups.lora import LoraOptions
from dojo.run.groups.model import ModelOptions
from dojo.run.groups.objective import ObjectiveOptions
from dojo.run.groups.output import OutputOptions
from dojo.run.groups.zero import ZeroOptions


@dataclass(frozen=True)
class RunOptions:
    """Every option of a run, by concern. Before ``dojo.run.resolve``: values as given, "auto"
    included; after: the same types, every "auto" decided."""

    model: ModelOptions = field(default_factory=ModelOptions)
    objective: ObjectiveOptions = field(default_factory=ObjectiveOptions)
    data: DataOptions = field(default_factory=DataOptions)
    zero: ZeroOptions = field(default_factory=ZeroOptions)
    kernels: KernelOptions = field(default_factory=KernelOptions)
    lora: LoraOptions = field(default_factory=LoraOptions)
    loop: LoopOptions = field(default_factory=LoopOptions)
    output: OutputOptions = field(default_factory=OutputOptions)
    devices: DeviceOptions = field(default_factory=DeviceOptions)

    @classmethod
    def from_values(cls, values: dict[str, Any]) -> "RunOptions":
        """Typed values by option name (``dojo.run.inputs.merge``) -> the groups; options not in
        ``values`` keep their defaults."""
        groups: dict[str, dict[str, Any]] = {g: {} for g in GROUPS}
        for name, value in values.items():
            groups[OPTIONS[name].group][name] = value
        return cls(**{g: GROUPS[g][1](**kw) for g, kw in groups.items()})

    def values(self) -> dict[str, Any]:
        """Option name -> value, every group flattened (what --print-config writes)."""
        out: dict[str, Any] = {}
        for g in GROUPS:
            out.update(dataclasses.asdict(getattr(self, g)))
        return out

    def replace(self, **values: Any) -> "RunOptions":
        """A copy with options changed by name (each lands in its group)."""
        changed: dict[str, dict[str, Any]] = {}
        for name, value in values.items():
            changed.setdefault(OPTIONS[name].group, {})[name] = value
        return dataclasses.replace(
            self, **{g: dataclasses.replace(getattr(self, g), **kw) for g, kw in changed.items()}
        )


GROUPS: dict[str, tuple[str, type]] = {
    "model": ("Model", ModelOptions),
    "objective": ("Objective", ObjectiveOptions),
    "data": ("Data", DataOptions),
    "zero": ("DeepSpeed ZeRO", ZeroOptions),
    "kernels": ("Precision and kernels", KernelOptions),
    "lora": ("LoRA / QLoRA", LoraOptions),
    "loop": ("Training loop", LoopOptions),
    "output": ("Run folder and logging", OutputOptions),
    "devices": ("Devices", DeviceOptions),
}
"""Attribute on RunOptions -> (its --help section, its dataclass); in --help order."""


OPTIONS: dict[str, Option] = {
    o.name: o for g, (panel, cls) in GROUPS.items() for o in options_of(cls, g, panel)
}
"""Option name -> Option, in --help order."""


def invalid(group: Any) -> list[tuple[str, str]]:
    """(message, hint) for every field of an option group whose value its option would refuse
    (a wrong choice, a number out of range): for groups built in code rather than parsed."""
    from dojo.errors import ConfigError

    out = []
    for f in dataclasses.fields(group):
        value = getattr(group, f.name)
        if value is None or isinstance(value, tuple):
            continue
        option = OPTIONS[f.name]
        try:
            if option.parse(value) != value:  # 'CPU': a flag's spelling, not the field's value
                raise option._bad(value, option.flag, f"choose one of {option.choice_text()}")
        except ConfigError as e:
            out.append((e.message, e.hint or ""))
    return out


def command_options(command: str) -> tuple[str, ...]:
    """The options ``command`` (config | estimate | train) takes."""
    return tuple(name for name, o in OPTIONS.items() if command in o.commands)


def by_key() -> dict[str, Option]:
    """Every YAML key (name and flag spellings, - or _) -> its option."""
    out: dict[str, Option] = {}
    for o in OPTIONS.values():
        for k in o.keys:
            out.setdefault(k.replace("-", "_"), o)
    return out
