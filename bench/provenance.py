"""Where a GPU call ran: the code's commit and the card, recorded in every result file's call
(the report names both, since speed ratios and memory peaks compare only within one card)."""

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def git_commit() -> str | None:
    """BENCH_COMMIT when the command names it, else HEAD, marked "+changes" where tracked files
    differ from it: the lent GPU machine gets this tree's files, but its copy of .git can be
    older, and a call recorded at that older HEAD would claim code it did not run."""
    said = os.environ.get("BENCH_COMMIT", "").strip()
    if said:
        return said
    p = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                       capture_output=True, text=True)  # fmt: skip
    head = (p.stdout.strip() or None) if p.returncode == 0 else None
    if head is None:
        return None
    st = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                        capture_output=True, text=True)  # fmt: skip
    return f"{head}+changes" if st.returncode == 0 and st.stdout.strip() else head


def gpu_name() -> str | None:
    """nvidia-smi's name of the first GPU (all GPUs of a lent machine are alike)."""
    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                           capture_output=True, text=True)  # fmt: skip
    except FileNotFoundError:
        return None
    first = p.stdout.partition("\n")[0].strip() if p.returncode == 0 else ""
    return first or None
