"""Where bundled data lives: ``templates/`` in the repo, ``dojo/templates`` in a wheel; and the
name of a run folder's record."""

import difflib
from pathlib import Path

from dojo.errors import DojoError

_PKG = Path(__file__).resolve().parent

RUN_FILE = "train.json"
"""The record in a run folder: the ResolvedRun, the paths the launcher chose and the estimate.
`dojo train` writes it; the worker, --resume, `dojo chat` and `dojo export` read it."""


def templates_dir() -> Path:
    """The bundled templates folder (wheel layout first, then the editable/repo layout)."""
    for cand in (_PKG / "templates", _PKG.parent / "templates"):
        if cand.is_dir():
            return cand
    raise DojoError("dojo's bundled templates are missing", hint="reinstall dojo: pip install -e .")


def list_templates(kind: str, suffix: str) -> list[str]:
    """Names (without suffix) of the bundled templates of one kind: zero, chat, train, data."""
    folder = templates_dir() / kind
    return sorted(p.name[: -len(suffix)] for p in folder.glob(f"*{suffix}"))


def close_names(name: str, names: list[str], n: int = 3) -> list[str]:
    return difflib.get_close_matches(name, names, n=n, cutoff=0.5)
