"""Where option values come from: built-in default < ``--config`` YAML file < command-line flag.

Flags default to None ("not given"), so a value from the file is never silently overridden.
"""

import difflib
import textwrap
from pathlib import Path
from typing import Any

from dojo.errors import ConfigError
from dojo.run.field import short
from dojo.run.schema import OPTIONS, RunOptions, by_key, command_options


def load_file(path: str | Path) -> dict[str, Any]:
    """A run YAML (or JSON) file -> {option name: typed value}; unknown keys are refused."""
    where = f"--config {str(path)!r}"
    data = _read_yaml(preset_path(str(path)), where)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{where}: expected a mapping of option: value, got {type(data).__name__}",
            hint="write one 'option: value' per line, e.g. method: lora",
        )
    keys = by_key()
    if not any(str(k).replace("-", "_") in keys for k in data) and _looks_like_data(data):
        raise ConfigError(
            f"{where}: holds a conversation or dataset row, not run options",
            hint="give data with --data FILE; --config takes a YAML run file (dojo train "
            "--print-config writes one) or a preset: full, lora, qlora",
        )
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        opt = keys.get(name)
        if opt is None or "train" not in opt.commands:
            close = difflib.get_close_matches(name, sorted(keys), n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}?" if close else "see 'dojo train --help'"
            raise ConfigError(f"{where}: unknown key {short(key)}", hint=hint)
        if opt.name in out:
            raise ConfigError(
                f"{where}: {opt.name} is given twice (as {short(key)} too)", hint="keep one"
            )
        parsed = opt.parse(value, f"{where}: {key}")
        out[opt.name] = opt.default if parsed is None and not opt.optional else parsed
    return out


DATA_KEYS = {"messages", "conversations", "conversation", "instruction", "prompt", "chosen",
             "rejected", "completion", "text", "input", "output"}  # fmt: skip
"""Keys of a chat or dataset row (OpenAI, ShareGPT, Alpaca, preference, text): a --config file
holding only such keys is data given to the wrong flag."""


def _looks_like_data(data: dict[Any, Any]) -> bool:
    return bool(data) and all(str(k) in DATA_KEYS for k in data)


def preset_path(ref: str) -> Path:
    """A bundled preset by name (``--config qlora``) wherever dojo is installed, else the path."""
    from dojo.paths import templates_dir

    p = Path(ref).expanduser()
    bundled = templates_dir() / "train" / f"{ref}.yaml"
    if not p.exists() and "/" not in ref and bundled.is_file():
        return bundled
    return p


def merge(command: str, file_values: dict[str, Any], flags: dict[str, Any]) -> RunOptions:
    """Every option ``command`` takes, typed: default < file < flag."""
    names = command_options(command)
    values = {k: v for k, v in file_values.items() if k in names}
    shown = flags.get("__spelled__", {})
    for name, raw in flags.items():
        if raw is not None and name in names:
            values[name] = OPTIONS[name].parse(raw, shown.get(name))
    return RunOptions.from_values(values)


def given(flags: dict[str, Any]) -> set[str]:
    """The names of the flags the user typed."""
    return {k for k, v in flags.items() if v is not None and k in OPTIONS}


def _read_yaml(p: Path, where: str) -> Any:
    """YAML with depth, alias-expansion and duplicate-key limits (dojo.safe_load)."""
    from dojo.safe_load import load_yaml

    if p.is_dir():
        raise ConfigError(f"{where} is a folder", hint="give a .yaml run file")
    if not p.exists():
        raise ConfigError(
            f"{where} does not exist",
            hint="give a YAML file, or a bundled preset by name: full, lora or qlora",
        )
    return load_yaml(p, what=where, max_bytes=1 << 20)


def to_yaml(options: RunOptions, command: str = "train") -> str:
    """The options as a YAML run file that ``dojo train --config FILE`` reads back, one section
    per group, each option with its help as a comment."""
    import yaml

    from dojo.run.schema import GROUPS

    names = set(command_options(command))
    lines = ["# dojo train --config THIS_FILE  (every option; edit and re-run)"]
    for g, (panel, _) in GROUPS.items():
        group = getattr(options, g)
        rows = [o for o in OPTIONS.values() if o.group == g and o.name in names]
        if not rows:
            continue
        lines += ["", f"# {panel}"]
        for o in rows:
            value = getattr(group, o.name)
            value = list(value) if isinstance(value, tuple) else value
            text = yaml.safe_dump({o.name: value}, default_flow_style=True, width=10**6).strip()
            note = textwrap.shorten(o.help, 72, placeholder=" ...")
            lines.append(f"{text[1:-1] if text.startswith('{') else text}  # {note}")
    return "\n".join(lines) + "\n"
