"""Where text goes: data to stdout, everything else to stderr (hf-hub rule)."""

import json
import sys
from typing import Any


def echo(text: str = "", *, end: str = "\n") -> None:
    """Write data to stdout."""
    sys.stdout.write(text + end)
    sys.stdout.flush()


def info(text: str) -> None:
    sys.stderr.write(text + "\n")


def warn(text: str) -> None:
    sys.stderr.write(f"warning: {text}\n")


def error(message: str, hint: str | None = None) -> None:
    """One line for the problem, one for the fix."""
    sys.stderr.write(f"error: {_one_line(message)}\n")
    if hint:
        sys.stderr.write(f"hint: {_one_line(hint)}\n")
    sys.stderr.flush()


def dumps(data: Any) -> str:
    """JSON as users read it: indented, key order kept, non-ASCII kept."""
    return json.dumps(data, indent=2, ensure_ascii=False)


def stdout_is_tty() -> bool:
    return sys.stdout.isatty()


def _one_line(text: str) -> str:
    return " ".join(text.split())
