"""One run option as a dataclass field: ``opt(default, help, why=...)``, and how its value is
parsed from a flag or a YAML scalar.

The option groups (``dojo.run.groups``) declare their fields with ``opt``; everything else reads
them back through ``Option``: the Typer parameters (``dojo.cli.options``), the keys a
``--config`` YAML file may hold (``dojo.run.inputs``) and ``--print-config``. A value stays a raw
string until ``Option.parse`` gives it its type, so ``--bucket-size 5e8``, ``500000000`` and
``auto`` mean the same thing on every command and in YAML.
"""

import dataclasses
import math
import re
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

from dojo.errors import ConfigError

AUTO = "auto"
Auto = Literal["auto"]
OnOff = Literal["auto", "on", "off"]

_INT = re.compile(r"[+-]?[0-9][0-9_]*")  # ASCII digits only: str.isdigit() accepts '²'
_FLOAT = re.compile(r"[+-]?(?:[0-9][0-9_]*\.?[0-9_]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_MAX_DIGITS = 40
"""Longer numbers are typos (every bound here has fewer digits); Python refuses to parse ints of
over 4,300 digits, so the length is checked before the conversion."""
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def opt(
    default: Any,
    help: str,
    why: str = "",
    *,
    flags: tuple[str, ...] = (),
    lo: float | None = None,
    hi: float | None = None,
    example: str = "",
    metavar: str = "",
    commands: tuple[str, ...] = ("train",),
) -> Any:
    """A run option: its default, one-line help, and why that default (shown in --help).

    ``flags``: the command-line spellings, first canonical (default ``--field-name``);
    ``lo``/``hi``: the valid range of a number; ``commands``: which commands take it."""
    meta = {
        "help": help,
        "why": why,
        "flags": flags,
        "lo": lo,
        "hi": hi,
        "example": example,
        "metavar": metavar,
        "commands": commands,
    }
    return dataclasses.field(default=default, metadata=meta)


CONFIG, ESTIMATE, TRAIN = "config", "estimate", "train"
ALL = (CONFIG, ESTIMATE, TRAIN)
PLAN = (ESTIMATE, TRAIN)


@dataclass(frozen=True)
class Option:
    """A run option as the CLI and the YAML reader see it (made from a group's field)."""

    name: str
    group: str
    """The group's attribute on ``RunOptions`` (model, data, zero, ...)."""
    panel: str
    """The --help section it is listed under (the group's title)."""
    kind: str
    """bool | int | float | size (int or auto) | choice | str | list | floats."""
    default: Any
    help: str
    why: str
    flags: tuple[str, ...]
    choices: tuple[Any, ...] = ()
    lo: float | None = None
    hi: float | None = None
    example: str = ""
    metavar: str = ""
    optional: bool = False
    """None is a value (meaning "not set"), e.g. --lr [default: by method]."""
    commands: tuple[str, ...] = ALL

    @property
    def flag(self) -> str:
        return self.flags[0].split("/")[0]

    @property
    def keys(self) -> tuple[str, ...]:
        """Names accepted in a YAML file: the name and every flag spelled as a key."""
        spelled = (f.split("/")[0] for f in self.flags if f.startswith("--"))
        return (self.name, *(f[2:].replace("-", "_") for f in spelled))

    @property
    def shown_metavar(self) -> str:
        """What --help shows for the value: the option's own metavar, else its kind's word
        (choices spelled out when there are few); "" for a flag without a value."""
        if self.metavar or self.kind == "bool":
            return self.metavar
        if self.kind == "choice":
            return "|".join(map(str, self.choices)) if len(self.choices) <= 4 else "CHOICE"
        words = {"int": "INT", "float": "NUMBER", "size": "INT|auto", "floats": "NUMBERS"}
        return words.get(self.kind, "TEXT")

    def shown_default(self) -> str | None:
        d = self.default
        if d is None or d == ():
            return None
        if isinstance(d, bool):
            return "on" if d else "off"
        return str(d)

    def help_text(self) -> str:
        shown = self.shown_default()
        tail = f" [default: {shown}]" if shown is not None else ""
        return f"{self.help}{tail}" + (f" ({self.why})" if self.why else "")

    def parse(self, value: Any, where: str | None = None) -> Any:
        """``value`` (a CLI string, or a YAML scalar) -> the typed value; ConfigError otherwise."""
        where = where or self.flag
        if value is None:
            return None
        kind = self.kind
        if isinstance(value, str) and value.strip().lower() == AUTO and AUTO in self.choices:
            return AUTO
        if kind == "bool":
            if self.optional and isinstance(value, str) and value.strip().lower() == AUTO:
                return None
            return _bool(value, where)
        if kind == "list":
            return _list(value, where)
        if kind == "floats":
            return _floats(value, where, self)
        if kind == "choice":
            return self._choice(value, where)
        if kind == "str":
            if (
                isinstance(value, bool)
                or not isinstance(value, str | int)
                or not str(value).strip()
            ):
                raise self._bad(value, where, "give a non-empty value")
            return str(value)
        if kind in ("int", "size"):
            number = _number(value, integer=True)
            if number is None:
                raise self._bad(value, where, "must be a whole number" + self._range())
            return self._bounded(int(number), value, where)
        if kind == "float":
            number = _number(value, integer=False)
            if number is None:
                raise self._bad(value, where, "must be a number" + self._range())
            return self._bounded(number, value, where)
        raise AssertionError(f"option {self.name}: unknown kind {kind}")  # a bug in a group

    def _choice(self, value: Any, where: str) -> Any:
        if all(isinstance(c, int) for c in self.choices):  # a number from a short range
            number = _number(value, integer=True)
            if number is None:
                raise self._bad(value, where, "must be a whole number" + self._range())
            return self._bounded(int(number), value, where)
        if isinstance(value, bool):
            raise self._bad(value, where, f"choose one of {self.choice_text()}")
        for c in self.choices:
            if str(c) == str(value).strip().lower():
                return c
        number = _number(value, integer=True)  # 2.0 or "2e0" for the number 2 of --zero none|0-3
        if number is not None and number in self.choices:
            return number
        raise self._bad(value, where, f"choose one of {self.choice_text()}")

    def choice_text(self) -> str:
        return ", ".join(str(c) for c in self.choices)

    def _bounded(self, number: Any, raw: Any, where: str) -> Any:
        ints = self.choices and all(isinstance(c, int) for c in self.choices)
        if ints and number not in self.choices:
            raise self._bad(raw, where, "out of range:" + self._range())
        if (self.lo is not None and number < self.lo) or (self.hi is not None and number > self.hi):
            raise self._bad(raw, where, "out of range:" + self._range())
        return number

    def _range(self) -> str:
        lo, hi = self.lo, self.hi
        if self.choices and all(isinstance(c, int) for c in self.choices):
            lo, hi = min(self.choices), max(self.choices)

        def fmt(x: float) -> str:
            return f"{x:g}" if self.kind in ("float", "floats") else f"{int(x):,}"

        if lo is not None and hi is not None:
            return f" from {fmt(lo)} to {fmt(hi)}"
        if lo is not None:
            return f" of at least {fmt(lo)}"
        return ""

    def _bad(self, value: Any, where: str, why: str) -> ConfigError:
        example = self.example or (str(self.choices[0]) if self.choices else "")
        fix = (
            f"e.g. {self.flag} {example}" if example else f"see 'dojo train --help' for {self.flag}"
        )
        return ConfigError(f"{where} {short(value)}: {why}", hint=fix)


def options_of(cls: type, group: str, panel: str) -> list[Option]:
    """The ``Option`` of every field of the group dataclass ``cls``."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        meta = f.metadata
        kind, choices, optional = _kind(hints[f.name])
        flags = meta["flags"] or ("--" + f.name.replace("_", "-"),)
        if kind == "bool" and "/" not in flags[0]:
            flags = (f"{flags[0]}/--no-{flags[0][2:]}", *flags[1:])
        out.append(
            Option(
                name=f.name,
                group=group,
                panel=panel,
                kind=kind,
                default=f.default,
                help=meta["help"],
                why=meta["why"],
                flags=flags,
                choices=choices,
                lo=meta["lo"],
                hi=meta["hi"],
                example=meta["example"],
                metavar=meta["metavar"],
                optional=optional,
                commands=meta["commands"],
            )
        )
    return out


def _kind(hint: Any) -> tuple[str, tuple[Any, ...], bool]:
    """(kind, choices, optional) from a field's type: the type decides how a value is parsed."""
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    optional = origin in (typing.Union, types.UnionType) and type(None) in args
    if optional:
        rest = [a for a in args if a is not type(None)]
        hint = rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]  # noqa: UP007
        args, origin = typing.get_args(hint), typing.get_origin(hint)
    if origin is Literal:
        return "choice", args, optional
    if origin in (typing.Union, types.UnionType):  # int | Literal["auto"]
        lits = [a for a in args if typing.get_origin(a) is Literal]
        if int in args and lits:
            return "size", tuple(x for lit in lits for x in typing.get_args(lit)), optional
    if origin is tuple:
        return ("floats" if args[0] is float else "list"), (), optional
    names = {bool: "bool", int: "int", float: "float", str: "str"}
    if hint in names:
        return names[hint], (), optional
    raise AssertionError(f"no option kind for {hint!r}")


def short(value: Any, limit: int = 60) -> str:
    """A value as an error shows it: repr, never longer than ``limit`` characters."""
    try:
        text = repr(value)
    except ValueError:  # an int beyond Python's int-to-string limit
        return f"<a {value.bit_length() * 30103 // 100000 + 1}-digit number>"
    return text if len(text) <= limit else text[: limit - 5] + "...'" + f" ({len(text)} chars)"


def _number(value: Any, *, integer: bool) -> float | int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        number = value
    elif isinstance(value, str):
        text = value.strip()
        if len(text) > _MAX_DIGITS:
            return None
        if integer and _INT.fullmatch(text):
            return int(text.replace("_", ""))
        if not _FLOAT.fullmatch(text):
            return None
        try:
            number = float(text.replace("_", ""))
        except (ValueError, OverflowError):
            return None
    else:
        return None
    if not math.isfinite(number):
        return None
    if integer:
        return int(number) if number == int(number) else None
    return number


def _bool(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower() if isinstance(value, str | int) else ""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigError(f"{where} {short(value)}: must be true or false", hint="write true or false")


def _list(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, dict):  # a YAML mapping (data_columns: {messages: conversation})
        value = [f"{k}={v}" for k, v in value.items()]
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple) or not all(
        isinstance(v, str) and v.strip() for v in value
    ):
        raise ConfigError(
            f"{where} {short(value)}: expected a value or a list of values",
            hint="e.g. data: a.jsonl, or a YAML list",
        )
    return tuple(value)


def _floats(value: Any, where: str, option: Option) -> tuple[float, ...]:
    """'0.7,0.3' or a YAML list -> positive finite numbers; an empty list is none."""
    if value == [] or value == ():
        return ()
    items = value if isinstance(value, list | tuple) else str(value).split(",")
    out = []
    for item in items:
        number = _number(item.strip() if isinstance(item, str) else item, integer=False)
        if number is None or number <= 0:
            raise option._bad(value, where, f"{short(item)} is not a positive number")
        out.append(float(number))
    if not out or not math.isfinite(sum(out)):
        raise option._bad(value, where, "give positive numbers, one per --data, e.g. 0.7,0.3")
    return tuple(out)
