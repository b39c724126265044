"""A Hugging Face cache laid out as huggingface_hub writes it, for tests that must not reach the Hub."""

import json
from pathlib import Path
from typing import Any

MAIN_SHA = "a" * 40
V1_SHA = "b" * 40


def cache_model(cache: Path, repo_id: str, config: dict[str, Any], *, ref: str = "main",
                sha: str = MAIN_SHA, files: tuple[str, ...] = ()) -> Path:  # fmt: skip
    """models--org--name/{refs/<ref>, snapshots/<sha>/config.json}: what hf_hub_download leaves."""
    root = cache / f"models--{repo_id.replace('/', '--')}"
    snap = root / "snapshots" / sha
    snap.mkdir(parents=True, exist_ok=True)
    (snap / "config.json").write_text(json.dumps(config), encoding="utf-8")
    for name in files:
        (snap / name).write_bytes(b"")
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / ref).write_text(sha, encoding="utf-8")
    return snap
