"""Which rank died: every rank records its own state in ``run_dir/ranks/rank-N.json``.

DeepSpeed's launcher names the wrong process when a rank dies (its "exits with return code"
line shows the last command it spawned, whichever rank failed), so the parent cannot rely on it.
Each worker writes "running" at start, "done" at the end, "failed: <error>" on an exception and
"stopped" when the launcher terminates it (SIGTERM/SIGINT). A rank still "running" after the
launcher has exited is the one that was killed without a chance to say so (SIGKILL, the kernel's
out-of-memory killer, a segfault).
"""

import json
import os
from pathlib import Path
from typing import Any

FOLDER = "ranks"


def _path(run_dir: str | Path, rank: int) -> Path:
    return Path(run_dir) / FOLDER / f"rank-{rank}.json"


def write(run_dir: str | Path, rank: int, status: str, **extra: Any) -> None:
    """Atomic: a reader sees the previous state or this one, never half a file."""
    path = _path(run_dir, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    record = {"rank": rank, "pid": os.getpid(), "status": status, **extra}
    tmp.write_text(json.dumps(record), encoding="utf-8")
    os.replace(tmp, path)


def clear(run_dir: str | Path) -> None:
    """Forget the previous launch's states (a resumed run reuses the folder)."""
    folder = Path(run_dir) / FOLDER
    for p in folder.glob("rank-*.json"):
        p.unlink(missing_ok=True)


def read(run_dir: str | Path) -> list[dict[str, Any]]:
    out = []
    for p in sorted((Path(run_dir) / FOLDER).glob("rank-*.json")):
        try:
            out.append(json.loads(p.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    return sorted(out, key=lambda r: int(r.get("rank", 0)))


def describe_failure(run_dir: str | Path) -> list[str]:
    """One line per rank that did not end cleanly: died (no word) or failed (with its error)."""
    lines = []
    for r in read(run_dir):
        status = str(r.get("status", ""))
        if status == "running":
            lines.append(
                f"rank {r['rank']} (pid {r['pid']}) died without exiting: killed by a signal "
                "(SIGKILL, the out-of-memory killer) or crashed"
            )
        elif status.startswith("failed"):
            lines.append(f"rank {r['rank']} (pid {r['pid']}) {status}")
    return lines


def not_done(run_dir: str | Path) -> list[dict[str, Any]]:
    """Ranks that recorded a state but not "done". After a launcher exit code of 0 any such rank
    means the launcher lied: DeepSpeed's runner exits 0 when its launch process is killed by a
    signal (it forwards only positive codes), while the ranks were still training."""
    return [r for r in read(run_dir) if r.get("status") != "done"]


def all_done(run_dir: str | Path, world_size: int) -> bool:
    """Every one of ``world_size`` ranks wrote "done": training, saving and the summary finished.
    A launcher exit code other than 0 after that is a process dying at teardown (seen in CI: a
    gloo rank's "terminate called without an active exception", exit 250, after its summary).
    Ranks of other nodes write where those nodes' run folders are; without them this is False."""
    states = read(run_dir)
    return len(states) == world_size and all(r.get("status") == "done" for r in states)
