"""Hugging Face's own renderings of the official chat templates (provenance: tests/data/README.md),
one copy for every test that checks the bundled templates against them, and the keys a template's
sidecar JSON holds."""

import json
from pathlib import Path

CHAT = Path(__file__).resolve().parents[2] / "templates" / "chat"
PUBLIC_CASES = Path(__file__).resolve().parents[1] / "data" / "chat-templates-expected-public.json"
CASES = json.loads(PUBLIC_CASES.read_text(encoding="utf-8"))
SIDECAR_KEYS = {
    "family",
    "model",
    "revision_note",
    "official",
    "bos_token",
    "eos_token",
    "stop_token",
    "variables",
    "supports",
}
