"""Tokenize-once, measured: time and peak RSS per process of `dojo train --nproc 2 --max-steps 1`
on a generated N-row JSONL (CPU, the bundled tiny model).

    python bench/data_tokenize.py [--rows 200000] [--out /tmp/dojo-bench] [--runs 2]

Run 1 is cold (the tokenized cache is built), run 2 warm (every rank reads the cached Arrow file).
Peak RSS is each worker's VmHWM, polled from /proc every 0.2 s (a worker that lives < 0.2 s is
missed; a training worker lives for many seconds).
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(os.environ.get("DOJO_REPO") or Path(__file__).resolve().parents[1])


def make_rows(path: Path, n: int) -> None:
    if path.exists():
        return
    with path.open("w") as f:
        for i in range(n):
            row = {
                "messages": [
                    {"role": "user", "content": f"Question {i}: what is {i} plus {i % 97}?"},
                    {"role": "assistant", "content": f"{i} plus {i % 97} is {i + i % 97}."},
                ]
            }
            f.write(json.dumps(row) + "\n")


def worker_pids(tag: bytes) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                cmd = (p / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(c.startswith(b"--local_rank") for c in cmd) and any(tag in c for c in cmd):
                out.append(int(p.name))
    return out


def hwm_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def run_once(data: Path, out: Path) -> dict[str, object]:
    cmd = [sys.executable, "-m", "dojo", "train", "--nproc", "2", "--max-steps", "1",
           "--output-dir", str(out), "--data", str(data), "--seq-len", "256"]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(REPO))
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    peaks: dict[int, int] = {}
    while proc.poll() is None:
        for pid in worker_pids(str(out).encode()):
            kib = hwm_kib(pid)
            if kib is not None:
                peaks[pid] = max(peaks.get(pid, 0), kib)
        time.sleep(0.2)
    wall = time.monotonic() - t0
    log = proc.stdout.read() if proc.stdout else ""
    lines = [ln for ln in log.splitlines() if "data" in ln.lower() and "rank" in ln.lower()
             or ln.startswith(("data:", "[rank")) and "data" in ln]  # fmt: skip
    return {"rc": proc.returncode, "wall_s": round(wall, 1),
            "peak_rss_mib": sorted(round(k / 1024) for k in peaks.values()),
            "data_lines": lines[-8:], "tail": log[-1500:] if proc.returncode else ""}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--out", default="/tmp/dojo-bench")
    ap.add_argument("--runs", type=int, default=2)
    a = ap.parse_args()
    base = Path(a.out)
    base.mkdir(parents=True, exist_ok=True)
    data = base / f"rows-{a.rows}.jsonl"
    make_rows(data, a.rows)
    for i in range(a.runs):
        print(
            json.dumps({"run": i + 1, **run_once(data, base / f"run-{time.time_ns()}")}), flush=True
        )


if __name__ == "__main__":
    main()
