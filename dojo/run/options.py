"""Every option of a run, defined once: name, flags (the first is the name shown), type, default,
valid range, help, and the reason for the default.

The Typer options of ``config``, ``estimate`` and ``train`` (``dojo.cli.options``), the keys a
``--config`` YAML file may hold, and the values ``dojo.run.resolve`` turns into a ``ResolvedRun``
all come from ``OPTIONS``. Values stay raw strings until ``parse`` gives them their type, so
``--bucket-size 5e8``, ``500000000`` and ``auto`` mean the same thing in every command and in YAML.
"""

import math
import re
from dataclasses import dataclass
from typing import Any

from dojo.errors import ConfigError

AUTO = "auto"
_INT = re.compile(r"[+-]?[0-9][0-9_]*")  # ASCII digits only: str.isdigit() accepts '²'
_FLOAT = re.compile(r"[+-]?(?:[0-9][0-9_]*\.?[0-9_]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


@dataclass(frozen=True)
class Option:
    name: str
    """Key in the options dict and in YAML (``-`` and ``_`` are the same there)."""
    flags: tuple[str, ...]
    """Command-line spellings; the first is canonical, the others are aliases."""
    kind: str
    """int | float | size (int or auto, e.g. 5e8) | choice | bool | str | list."""
    default: Any
    help: str
    why: str = ""
    """The reason for the default (shown in --help after the default)."""
    choices: tuple[str, ...] = ()
    lo: float | None = None
    hi: float | None = None
    example: str = ""
    panel: str = "Run"
    metavar: str = ""
    """What --help shows for the value, when the kind's own word would mislead."""

    @property
    def flag(self) -> str:
        return self.flags[0]

    @property
    def keys(self) -> tuple[str, ...]:
        """Names accepted in a YAML file: the name and every flag spelled as a key."""
        spelled = (f.split("/")[0] for f in self.flags if f.startswith("--"))
        return (self.name, *(f[2:].replace("-", "_") for f in spelled))

    def help_text(self) -> str:
        shown = self.default
        if isinstance(shown, bool):
            shown = "on" if shown else "off"
        tail = f" [default: {shown}]" if shown is not None else ""
        return f"{self.help}{tail}" + (f" ({self.why})" if self.why else "")

    def parse(self, value: Any, where: str | None = None) -> Any:
        """``value`` (a CLI string, or a YAML scalar) -> the typed value; ConfigError otherwise."""
        where = where or self.flag
        if value is None:
            return None
        kind = self.kind
        if kind == "bool":
            return _bool(value, where)
        if kind == "list":
            return _list(value, where)
        if kind == "choice":
            text = str(value).strip().lower() if not isinstance(value, bool) else ""
            if text not in self.choices:
                raise self._bad(value, where, f"choose one of {', '.join(self.choices)}")
            return text
        if kind == "str":
            if (
                not isinstance(value, str | int)
                or isinstance(value, bool)
                or not str(value).strip()
            ):
                raise self._bad(value, where, "give a non-empty value")
            return str(value)
        if kind == "size" and isinstance(value, str) and value.strip().lower() == AUTO:
            return AUTO
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
        raise AssertionError(f"option {self.name}: unknown kind {kind}")  # a bug in OPTIONS

    def _bounded(self, number: Any, raw: Any, where: str) -> Any:
        if (self.lo is not None and number < self.lo) or (self.hi is not None and number > self.hi):
            raise self._bad(raw, where, "out of range:" + self._range())
        return number

    def _range(self) -> str:
        lo, hi = self.lo, self.hi

        def fmt(x: float) -> str:
            return f"{x:g}" if self.kind == "float" else f"{int(x):,}"

        if lo is not None and hi is not None:
            return f" from {fmt(lo)} to {fmt(hi)}"
        if lo is not None:
            return f" of at least {fmt(lo)}"
        return ""

    def _bad(self, value: Any, where: str, why: str) -> ConfigError:
        example = self.example or (self.choices[0] if self.choices else "")
        fix = (
            f"e.g. {self.flag} {example}"
            if example
            else f"see 'dojo COMMAND --help' for {self.flag}"
        )
        return ConfigError(f"{where} {short(value)}: {why}", hint=fix)


def short(value: Any, limit: int = 60) -> str:
    """A value as an error shows it: repr, never longer than ``limit`` characters."""
    text = repr(value)
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
    text = str(value).strip().lower()
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
            f"{where} {short(value)}: expected a path or a list of paths", hint="e.g. data: a.jsonl"
        )
    return tuple(value)
