"""Markdown tables of session 3's GPU results (docs/benchmarks-new.md), from bench/results/.

    python bench/s3_tables.py            # memory rows (fit / held) and throughput

Memory: "device" is nvidia-smi's per-process used_memory (summed over the row's processes), the
estimate is recomputed by memory_parallel with the ZeRO settings the row really used (dojo's
ds_config.json, the plain script's JSON with HF "auto" left to HF); error = estimate / device - 1.
Throughput: real tokens/s per GPU after step 1, every repeat and their median.
"""

import json
import statistics
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def memory() -> None:
    rows = []
    for name in ("mem_s3_a.json", "mem_s3_b.json"):
        rows += json.loads((RESULTS / name).read_text())
    rows.sort(key=lambda r: (r["split"], r["params"]["shape"], r["params"]["system"]))
    print(
        "| split | system | shape | ZeRO | method | micro-batch x seq | ckpt | liger | packing "
        "| device GiB | reserved | alloc | host RSS | estimate GPU | error | side by side |"
    )
    print("|---" * 16 + "|")
    errs: dict[str, list[float]] = {"fit": [], "held": []}
    for r in rows:
        p = r["params"]
        dev = r["smi_proc_peak_gib"]
        err = r["est_gpu_gib"] / dev - 1 if dev else float("nan")
        errs[r["split"]].append(err)
        dojo = p["system"] == "dojo"
        z = "none" if p["stage"] < 0 else str(p["stage"])
        if p["offload"] != "none":
            z += " +cpu offload"
        print(
            f"| {r['split']} | {p['system']} | {p['shape']} | {z} | {p['method']} "
            f"| {p['micro_batch']}x{p['seq_len']} | {'on' if p['grad_ckpt'] else 'off'} "
            f"| {('on' if p['liger'] else 'off') if dojo else '-'} "
            f"| {('on' if p['packing'] else 'off') if dojo else '-'} "
            f"| {dev:.2f} | {r['reserved_gib']:.2f} | {r['alloc_gib']:.2f} "
            f"| {r['host_rss_peak_gib']:.1f} | {r['est_gpu_gib']:.2f} | {err:+.1%} "
            f"| {len(r['neighbours'])} |"
        )
    for split, e in errs.items():
        inside = sum(abs(x) <= 0.10 for x in e)
        print(
            f"\n{split}: {len(e)} rows, {inside} within ±10%, "
            f"worst under {min(e):+.1%}, worst over {max(e):+.1%}"
        )


def throughput() -> None:
    runs = []
    for name in ("tp_s3_b.json", "tp_s3_c.json"):
        runs += json.loads((RESULTS / name).read_text())
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in runs:
        groups.setdefault((r["case"], r["system"]), []).append(r)
    base = {
        c: statistics.median(x["real_tokens_per_s"] for x in v)
        for (c, s), v in groups.items()
        if s == "baseline"
    }
    print(
        "\n| case | system | tokens/s each run | median | vs plain median | MFU | "
        "peak alloc GiB | peak reserved GiB |"
    )
    print("|---" * 8 + "|")
    for (case, system), v in sorted(groups.items()):
        tps = [x["real_tokens_per_s"] for x in v]
        med = statistics.median(tps)
        ratio = f"{med / base[case]:.2f}x" if case in base else "-"
        mfus = [x["mfu"] for x in v if x["mfu"] is not None]
        mfu = f"{statistics.median(mfus):.1%}" if mfus else "-"
        print(
            f"| {case} | {system} | {', '.join(f'{t:,}' for t in tps)} | {med:,.0f} | {ratio} "
            f"| {mfu} "
            f"| {v[0]['peak_alloc_gib']:.1f} | {v[0]['peak_reserved_gib']:.1f} |"
        )


if __name__ == "__main__":
    memory()
    throughput()
    sys.exit(0)
