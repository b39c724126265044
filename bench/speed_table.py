"""Markdown table of one or more `bench/throughput.py --plan` result files (issue 13).

    python bench/speed_table.py bench/results/tp_s4_a.json bench/results/tp_s4_b.json
    python bench/speed_table.py --median bench/results/tp_s6.json   # repeated runs (--repeats)

Each file is one GPU call. A ratio is only ever taken against the plain script's run of the same
case in the same call (its median when it ran more than once); a case whose plain run is in
another call gets "-" and the plain number of that other call is said beside it, never divided.
Tokens/s: real (non-padding) tokens per second per GPU after step 1. MFU = tokens/s x
(6N + 12·L·h·T) / 989 TFLOP/s (fixed-length data only).
"""

import json
import statistics
import sys
from pathlib import Path
from typing import Any


def table(files: list[str]) -> str:
    out = ["| call | case | system | tokens/s | vs plain, same call | MFU | peak alloc GiB | "
           "peak reserved GiB | alloc vs plain |", "|---" * 9 + "|"]  # fmt: skip
    for f in files:
        runs: list[dict[str, Any]] = json.loads(Path(f).read_text())
        call = Path(f).stem
        base: dict[str, list[dict[str, Any]]] = {}
        for r in runs:
            if r["system"] == "baseline" and r["rc"] == 0:
                base.setdefault(r["case"], []).append(r)
        for r in runs:
            if r["rc"] != 0:
                out.append(f"| {call} | {r['case']} | {r['system']} | failed (rc {r['rc']}) "
                           "| | | | | |")  # fmt: skip
                continue
            b = base.get(r["case"])
            tps = r["real_tokens_per_s"]
            ratio = alloc = "-"
            if b and r["system"] != "baseline":
                ratio = f"{tps / statistics.median(x['real_tokens_per_s'] for x in b):.2f}x"
                alloc = f"{r['peak_alloc_gib'] / b[0]['peak_alloc_gib'] - 1:+.1%}"
            mfu = f"{r['mfu']:.1%}" if r.get("mfu") else "-"
            out.append(
                f"| {call} | {r['case']} | {r['system']} | {tps:,} | {ratio} | {mfu} "
                f"| {r['peak_alloc_gib']:.1f} | {r['peak_reserved_gib']:.1f} | {alloc} |"
            )
    return "\n".join(out)


def medians(files: list[str]) -> str:
    """One line per call, case and system: the median of its runs and the ratio of the medians
    (plain script's median of the same case in the same call); runs that failed are counted."""
    out = ["| call | case | system | runs | median tokens/s | min-max | vs plain (medians) |",
           "|---" * 7 + "|"]  # fmt: skip
    for f in files:
        call = Path(f).stem
        groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for r in json.loads(Path(f).read_text()):
            groups.setdefault((r["case"], r["system"]), []).append(r)
        for (case, system), runs in groups.items():
            ok = [r["real_tokens_per_s"] for r in runs if r["rc"] == 0]
            failed = len(runs) - len(ok)
            n = f"{len(ok)}" + (f" (+{failed} failed)" if failed else "")
            if not ok:
                out.append(f"| {call} | {case} | {system} | {n} | - | - | - |")
                continue
            med = statistics.median(ok)
            base = [r["real_tokens_per_s"] for r in groups.get((case, "baseline"), [])
                    if r["rc"] == 0]  # fmt: skip
            ratio = (
                f"{med / statistics.median(base):.2f}x" if base and system != "baseline" else "-"
            )
            out.append(f"| {call} | {case} | {system} | {n} | {med:,.0f} | "
                       f"{min(ok):,}-{max(ok):,} | {ratio} |")  # fmt: skip
    return "\n".join(out)


if __name__ == "__main__":
    args = sys.argv[1:]
    print(medians(args[1:]) if args[:1] == ["--median"] else table(args))
