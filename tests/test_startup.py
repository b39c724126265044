"""`dojo --help`, `--version`, `config`, `estimate`, `chat-template`, and `chat`/`export` until
a run folder checks out, must not import the training stack."""

import json
import subprocess
import sys

import pytest

HEAVY = [
    "torch",
    "transformers",
    "deepspeed",
    "datasets",
    "peft",
    "bitsandbytes",
    "accelerate",
]  # pydantic: typer 0.29 loads it itself

PROBE = """
import sys, json
from dojo.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
sys.stdout = sys.__stdout__
print("\\n" + json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in %r)))
"""


def _loaded(*args: str) -> list[str]:
    code = PROBE % (HEAVY + ["jinja2", "rich", "yaml"],)
    out = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_help_imports_nothing_heavy() -> None:
    loaded = {m.split(".")[0] for m in _loaded("--help")}
    assert loaded.isdisjoint(HEAVY + ["jinja2", "rich", "yaml"]), loaded


@pytest.mark.parametrize(
    "args",
    [
        ["config", "--help"],
        ["estimate", "--help"],
        ["chat-template", "--help"],
        ["train", "--help"],
        ["config", "--stage", "2"],
        ["estimate", "--model", "7b", "--json"],
        ["chat-template", "list"],
        ["--version"],
        ["chat", "--help"],
        ["export", "--help"],
        ["chat", "/nonexistent/run", "--prompt", "hi"],  # refused before any model loads
        ["export", "/nonexistent/run"],
    ],
)
def test_commands_do_not_import_training_stack(args: list[str]) -> None:
    loaded = {m.split(".")[0] for m in _loaded(*args)}
    assert loaded.isdisjoint(HEAVY), loaded


def test_chat_template_list_reads_no_template() -> None:
    """Listing reads the sidecars only (jinja2 alone cost 0.3+ s of the 0.8 s)."""
    loaded = {m.split(".")[0] for m in _loaded("chat-template", "list")}
    assert "jinja2" not in loaded and "rich" not in loaded, loaded


def test_chat_template_list_matches_loaded_templates() -> None:
    """The cheap rows say exactly what loading each template says."""
    from dojo.chat.listing import bundled_rows
    from dojo.chat.template import bundled_names, load_template

    rows = bundled_rows()
    assert [r["name"] for r in rows] == bundled_names()
    for row in rows:
        t = load_template(row["name"])
        assert row == {
            "name": t.name,
            "family": t.family,
            "model": t.model,
            "official": t.official,
            **{k: bool(t.supports.get(k)) for k in ("system", "tools", "thinking")},
        }


def test_version_matches_pyproject() -> None:
    """`dojo --version` (a fresh interpreter) says the version pyproject.toml releases."""
    import re
    from pathlib import Path

    pyproject = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text("utf-8")
    released = re.search(r'^version = "([^"]+)"', pyproject, re.M)
    out = subprocess.run(
        [sys.executable, "-m", "dojo", "--version"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and released, out.stderr
    assert out.stdout == f"dojo {released.group(1)}\n"


@pytest.mark.parametrize("args", [["--help"], ["estimate", "--model", "7b", "--json"]])
def test_built_in_models_never_import_huggingface_hub(args: list[str]) -> None:
    """huggingface_hub (0.2 s) is imported for a Hub id only (dojo.hub)."""
    code = PROBE % (["huggingface_hub"],)
    out = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
