"""Which checkpoint a run resumes from: only complete ones, and only at the same world size.

The HF Trainer writes ``OUTPUT/checkpoint-<step>/`` in place. dojo marks a checkpoint complete by
writing ``dojo_checkpoint.json`` into it (atomically, after every rank finished its shards), so a
checkpoint half-written when a rank died is never taken as the latest. Pure stdlib.
"""

import json
import re
from pathlib import Path
from typing import Any

from dojo.errors import LaunchError

MARKER = "dojo_checkpoint.json"
_NAME = re.compile(r"checkpoint-(\d+)")


def list_checkpoints(output_dir: str | Path) -> list[tuple[int, Path, bool]]:
    """(step, path, complete) for every checkpoint-N folder, oldest first."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        m = _NAME.fullmatch(p.name)
        if m and p.is_dir():
            found.append((int(m.group(1)), p, (p / MARKER).is_file()))
    return sorted(found)


def read_marker(path: str | Path) -> dict[str, Any]:
    try:
        data = json.loads((Path(path) / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def latest_complete(output_dir: str | Path) -> Path | None:
    """The newest checkpoint whose marker exists; half-written ones are skipped."""
    done = [p for _, p, complete in list_checkpoints(output_dir) if complete]
    return done[-1] if done else None


def resume_point(output_dir: str | Path, world_size: int) -> Path:
    """The checkpoint --resume continues from, or a LaunchError naming why there is none."""
    latest = latest_complete(output_dir)
    if latest is None:
        partial = [p.name for _, p, complete in list_checkpoints(output_dir) if not complete]
        extra = f" ({', '.join(partial)} incomplete)" if partial else ""
        raise LaunchError(
            f"--resume: no complete checkpoint in --output-dir {str(output_dir)!r}{extra}",
            hint="drop --resume to start a new run, or point --output-dir at the run to continue",
        )
    saved = read_marker(latest).get("world_size")
    if saved is not None and saved != world_size:
        raise LaunchError(
            f"--resume: {latest.name} was written by {saved} processes, this run has {world_size}",
            hint=f"resume with the same number of GPUs/processes ({saved}); ZeRO shards "
            "are per rank and dojo does not convert them",
        )
    return latest
