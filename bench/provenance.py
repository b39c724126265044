"""Where a GPU call ran: the code's commit and the card, recorded in every result file's call
(the report names both, since speed ratios and memory peaks compare only within one card)."""

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def git_commit() -> str | None:
    p = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                       capture_output=True, text=True)  # fmt: skip
    return (p.stdout.strip() or None) if p.returncode == 0 else None


def gpu_name() -> str | None:
    """nvidia-smi's name of the first GPU (all GPUs of a lent machine are alike)."""
    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                           capture_output=True, text=True)  # fmt: skip
    except FileNotFoundError:
        return None
    first = p.stdout.partition("\n")[0].strip() if p.returncode == 0 else ""
    return first or None
