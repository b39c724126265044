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
