"""The rows of ``dojo chat-template list``, read from the bundled sidecar JSON files only.

Listing used to load (and Jinja-compile) all 29 templates: 0.5-0.8 s, almost all of it jinja2.
Every column comes from ``templates/chat/NAME.json``, so nothing here imports jinja2 or reads a
``.jinja`` file; that each bundled template compiles is checked by the template tests.
"""

import json
from typing import Any

from dojo.errors import TemplateError
from dojo.paths import list_templates, templates_dir

COLUMNS = ("system", "tools", "thinking")


def bundled_rows() -> list[dict[str, Any]]:
    """One row per bundled template: name, family, model, official, system, tools, thinking."""
    folder = templates_dir() / "chat"
    rows: list[dict[str, Any]] = []
    for name in list_templates("chat", ".jinja"):
        meta = _sidecar(folder / f"{name}.json")
        supports = meta.get("supports") or {}
        rows.append(
            {
                "name": name,
                "family": meta.get("family", ""),
                "model": meta.get("model", ""),
                "official": bool(meta.get("official", False)),
                **{k: bool(supports.get(k)) for k in COLUMNS},
            }
        )
    return rows


def _sidecar(path: Any) -> dict[str, Any]:
    """A template's metadata; a template without one lists with empty columns (as it loads)."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise TemplateError(
            f"bundled template metadata {path.name} is unreadable: {e}",
            hint="reinstall dojo: pip install -e .",
        ) from None
    return data if isinstance(data, dict) else {}
