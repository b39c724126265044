"""Wall time of light dojo commands against a bare interpreter (target: under 3x).

Usage: python bench/startup.py [--runs N] [--out FILE]
Runs each command N times in a fresh interpreter (alternating), prints the median and the ratio
to ``python -c pass``; exits 1 when a command is 3x or more slower.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

TARGET = 3.0
COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "dojo --help": [sys.executable, "-m", "dojo", "--help"],
    "dojo config --stage 2": [sys.executable, "-m", "dojo", "config", "--stage", "2"],
    "dojo estimate --model 7b": [
        sys.executable,
        "-m",
        "dojo",
        "estimate",
        "--model",
        "7b",
        "--gpu-memory",
        "80",
    ],
    # target: under 0.3 s (it was 0.8 s when it compiled every template).
    "dojo chat-template list": [sys.executable, "-m", "dojo", "chat-template", "list"],
}


def _time(cmd: list[str]) -> float:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    start = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=False)
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--out", help="also write the medians as JSON (bench/results/startup.json)")
    args = ap.parse_args()
    times: dict[str, list[float]] = {k: [] for k in COMMANDS}
    for cmd in COMMANDS.values():  # warm the page cache once
        _time(cmd)
    for _ in range(args.runs):
        for name, cmd in COMMANDS.items():
            times[name].append(_time(cmd))
    base = statistics.median(times["python -c pass"])
    print(f"{'command':<28}{'median s':>10}{'x bare':>9}  verdict  (runs={args.runs})")
    worst = 0.0
    rows = {}
    for name, ts in times.items():
        med = statistics.median(ts)
        ratio = med / base
        if name != "python -c pass":
            worst = max(worst, ratio)
        verdict = "" if name == "python -c pass" else ("ok" if ratio < TARGET else "SLOW")
        print(f"{name:<28}{med:>10.3f}{ratio:>9.2f}  {verdict}")
        rows[name] = {"median_s": round(med, 3), "x_bare": round(ratio, 2)}
    if args.out:
        doc = {"benchmark": "startup", "runs": args.runs, "cores": os.cpu_count(),
               "command": f"python bench/startup.py --runs {args.runs} --out {args.out}",
               "target_x_bare": TARGET, "results": rows}  # fmt: skip
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
    return 0 if worst < TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
