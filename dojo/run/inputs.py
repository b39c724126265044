"""Where option values come from: built-in default < ``--config`` YAML file < command-line flag.

Flags default to None ("not given"), so a value from the file is never silently overridden.
"""

import difflib
from pathlib import Path
from typing import Any

from dojo.errors import ConfigError
from dojo.run.catalog import COMMAND_OPTIONS, OPTIONS, by_key
from dojo.run.options import short


def load_file(path: str | Path) -> dict[str, Any]:
    """A run YAML (or JSON) file -> {option name: raw value}; unknown keys are refused."""
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
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        opt = keys.get(name)
        if opt is None or opt.name not in COMMAND_OPTIONS["train"]:
            close = difflib.get_close_matches(name, sorted(keys), n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}?" if close else "see 'dojo train --help'"
            raise ConfigError(f"{where}: unknown key {short(key)}", hint=hint)
        if opt.name in out:
            raise ConfigError(
                f"{where}: {opt.name} is given twice (as {short(key)} too)", hint="keep one"
            )
        out[opt.name] = opt.parse(value, f"{where}: {key}")
    return out


def preset_path(ref: str) -> Path:
    """A bundled preset by name (``--config qlora``) wherever dojo is installed, else the path."""
    from dojo.paths import templates_dir

    p = Path(ref).expanduser()
    bundled = templates_dir() / "train" / f"{ref}.yaml"
    if not p.exists() and "/" not in ref and bundled.is_file():
        return bundled
    return p


def merge(command: str, file_values: dict[str, Any], flags: dict[str, Any]) -> dict[str, Any]:
    """Typed values of every option the command has: default < file < flag."""
    values = {name: OPTIONS[name].default for name in COMMAND_OPTIONS[command]}
    values.update({k: v for k, v in file_values.items() if k in values})
    shown = flags.get("__spelled__", {})
    for name, raw in flags.items():
        if raw is not None and name in OPTIONS:
            values[name] = OPTIONS[name].parse(raw, shown.get(name))
    return values


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


def to_yaml(values: dict[str, Any]) -> str:
    """The resolved options as a YAML run file that ``dojo train --config FILE`` reads back."""
    import yaml

    plain = {k: (list(v) if isinstance(v, tuple) else v) for k, v in values.items()}
    head = "# dojo train --config THIS_FILE  (every option; edit and re-run)\n"
    return head + yaml.safe_dump(plain, sort_keys=False, default_flow_style=False)
