"""`dojo train` through the real launcher in a subprocess, and the summary a run writes."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def dojo_train(
    out: Path, *args: str, timeout: int = 300, nproc: int = 2
) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "dojo", "train", "--nproc", str(nproc), "--output-dir", str(out)]
    cmd += ["--seq-len", "256", "--micro-batch", "4", "--seed", "7", *args]
    env = {k: v for k, v in os.environ.items() if k not in ("DS_ACCELERATOR", "LOCAL_SIZE")}
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def summary(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "dojo_summary.json").read_text())
    return data


NO_TENSORS = b"\x02\x00\x00\x00\x00\x00\x00\x00{}"
"""A whole safetensors file that holds no tensor: a dry run never loads the weights, and
preflight reads only their header (dojo.train.model_files)."""
