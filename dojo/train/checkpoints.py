"""Which checkpoint a run resumes from: complete, intact, and trained the way this run trains.

The HF Trainer writes ``OUTPUT/checkpoint-<step>/`` in place. dojo marks a checkpoint complete by
writing ``dojo_checkpoint.json`` into it (atomically, after every rank finished its shards), so a
checkpoint half-written when a rank died is never taken as the latest. The marker also lists
every file of the checkpoint with its size and a checksum (``manifest``): a shard truncated or
damaged later (disk full, a copy cut short) fails ``verify`` and --resume falls back to the
newest checkpoint that verifies, with a warning naming the broken one. Pure stdlib.
"""

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dojo.errors import LaunchError

MARKER = "dojo_checkpoint.json"
_NAME = re.compile(r"checkpoint-(\d+)")
_CHUNK = 1 << 20
FULL_HASH_MAX = 4 * _CHUNK
"""Files up to this size are hashed whole; larger ones (ZeRO shards of GBs) by their first and
last MiB plus their size: a save must not take minutes, and truncation shows in the size."""


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


# ---- manifest: what the marker records, and the check against it -----------------------------


def file_checksum(path: Path, size: int) -> str:
    """sha256 of the whole file up to FULL_HASH_MAX, else of its first and last MiB."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        if size <= FULL_HASH_MAX:
            for block in iter(lambda: f.read(_CHUNK), b""):
                h.update(block)
        else:
            h.update(f.read(_CHUNK))
            f.seek(size - _CHUNK)
            h.update(f.read(_CHUNK))
    return ("sha256:" if size <= FULL_HASH_MAX else "sha256-ends:") + h.hexdigest()


def manifest(ckpt: str | Path) -> dict[str, dict[str, Any]]:
    """{relative path: {"size", "checksum"}} of every file under ``ckpt`` but the marker."""
    root = Path(ckpt)
    out: dict[str, dict[str, Any]] = {}
    for p in sorted(root.rglob("*")):
        if not p.is_file() or p.name == MARKER or p.name.startswith(f".{MARKER}"):
            continue
        size = p.stat().st_size
        out[p.relative_to(root).as_posix()] = {"size": size, "checksum": file_checksum(p, size)}
    return out


def verify(ckpt: str | Path) -> list[str]:
    """Why ``ckpt`` cannot be trusted ([] = intact). A marker without a manifest (written before
    dojo recorded one) is taken as it is: there is nothing to compare against."""
    root = Path(ckpt)
    marker = read_marker(root)
    if not marker:
        return [f"{MARKER} is missing or unreadable"]
    files = marker.get("files")
    if not isinstance(files, dict):
        return []
    problems = []
    for rel, want in files.items():
        p = root / rel
        if not p.is_file():
            problems.append(f"{rel} is missing")
            continue
        size = p.stat().st_size
        if size != want.get("size"):
            problems.append(f"{rel} has {size} bytes, {want.get('size')} were written")
        elif want.get("checksum") and file_checksum(p, size) != want["checksum"]:
            problems.append(f"{rel} changed since it was written (checksum differs)")
    return problems


# ---- resume --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ResumeChoice:
    path: Path
    skipped: tuple[tuple[str, str], ...] = ()
    """(checkpoint name, why) for newer checkpoints passed over as damaged."""

    def warnings(self) -> list[str]:
        return [
            f"warning: --resume: {name} is damaged ({why}); resuming from {self.path.name} instead"
            for name, why in self.skipped
        ]


def choose_resume(
    output_dir: str | Path, world_size: int, new: dict[str, Any] | None = None
) -> ResumeChoice:
    """The newest complete checkpoint that verifies, checked against this run (pure: no output).

    ``new``: this run's settings (train.json keys: method, zero_stage, model, lora_r, ...);
    a checkpoint trained otherwise is refused before anything is written (resume_check).
    """
    from dojo.train import resume_check

    complete = [p for _, p, done in list_checkpoints(output_dir) if done]
    if not complete:
        partial = [p.name for _, p, done in list_checkpoints(output_dir) if not done]
        extra = f" ({', '.join(partial)} incomplete)" if partial else ""
        raise LaunchError(
            f"--resume: no complete checkpoint in --output-dir {str(output_dir)!r}{extra}",
            hint="drop --resume to start a new run, or point --output-dir at the run to continue",
        )
    skipped: list[tuple[str, str]] = []
    chosen = None
    for ckpt in reversed(complete):
        problems = verify(ckpt)
        if not problems:
            chosen = ckpt
            break
        more = f" and {len(problems) - 1} more" if len(problems) > 1 else ""
        skipped.append((ckpt.name, problems[0] + more))
    if chosen is None:
        names = ", ".join(f"{n}: {why}" for n, why in skipped)
        raise LaunchError(
            f"--resume: every checkpoint in --output-dir {str(output_dir)!r} is damaged ({names})",
            hint="start a new run (drop --resume, or another --output-dir)",
        )
    saved = read_marker(chosen).get("world_size")
    if saved is not None and saved != world_size:
        raise LaunchError(
            f"--resume: {chosen.name} was written by {saved} processes, this run has {world_size}",
            hint=f"resume with the same number of GPUs/processes ({saved}); ZeRO shards "
            "are per rank and dojo does not convert them",
        )
    if new is not None:
        resume_check.refuse_mismatch(chosen, output_dir, {**new, "world_size": world_size})
    return ResumeChoice(chosen, tuple(skipped))


def resume_point(
    output_dir: str | Path, world_size: int, new: dict[str, Any] | None = None
) -> Path:
    """The checkpoint --resume continues from, or a LaunchError naming why there is none.

    Damaged newer checkpoints are skipped with a warning on stderr (see ResumeChoice.warnings).
    """
    import sys

    choice = choose_resume(output_dir, world_size, new)
    for line in choice.warnings():
        sys.stderr.write(line + "\n")
    return choice.path
