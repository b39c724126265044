"""Measured vs estimated GPU memory: the table in docs/benchmarks.md, from bench/results/mem_*.json.

    python bench/memory_table.py            # markdown table on stdout (no GPU, no torch needed)

The measurements come from bench/memory_matrix.py on the H200; the estimates are recomputed here
with the current dojo.estimate (so a recalibration shows up without another GPU run), beside
DeepSpeed's own model-states estimators and `accelerate estimate-memory`'s "Training using Adam"
figure for the same rows.
"""

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from memory_matrix import MATRIX, SHAPES  # noqa: E402

from dojo.estimate import GIB, Setup, estimate  # noqa: E402
from dojo.modelspec import resolve_model  # noqa: E402

H200_GIB = 143771 / 1024  # nvidia-smi memory.total on the lent machine
HOST_GIB = 131961788 / 2**20  # MemTotal (kB) on the lent machine: 125.85 GiB
CALIBRATION_FILES = {"mem_1b_a.json", "mem_1b_b.json", "mem_7b.json"}
"""Rows the constants were first calibrated on (session 1); the others ran afterwards (held out)."""


def deepspeed_estimate(spec, stage: int, offload: str, n: int = 1) -> float:  # type: ignore[no-untyped-def]
    """DeepSpeed 0.19.8 estimate_zero{2,3}_model_states_mem_needs per GPU (GiB); ZeRO-0/1 have
    none, so the ZeRO-2 one stands in (it is what users run)."""
    p = spec.params
    if stage == 3:
        largest = 4 * spec.largest_layer_params
        return (largest + (2 * p / n if offload != "none" else 18 * p / n)) / GIB
    return (2 * p if offload != "none" else 2 * p + 18 * p / n) / GIB


def accelerate_estimate(spec) -> float:  # type: ignore[no-untyped-def]
    """accelerate estimate-memory, bf16 "Training using Adam": max(model 4P... ) = 8P bytes (sec 5)."""
    return 8 * spec.params / GIB


def rows() -> list[tuple[object, dict]]:
    by_label = {r.label(): r for rs in MATRIX.values() for r in rs}
    out = []
    files = sorted((REPO / "bench" / "results").glob("mem_*.json"))
    for f in [f for f in files if not f.name.startswith("mem_s")]:  # mem_s3_*: memory_heldout
        for m in json.loads(f.read_text()):
            m["held_out"] = f.name not in CALIBRATION_FILES
            out.append((by_label[m["row"]], m))
    return out


def setup_for(row) -> Setup:  # type: ignore[no-untyped-def]
    return Setup(
        stage=row.stage, method=row.method, micro_batch=row.micro_batch, seq_len=row.seq_len,
        grad_ckpt=row.grad_ckpt, overlap_comm=row.overlap_comm, bucket_size=row.bucket,
        offload_optimizer=row.offload, lora_dropout=0.0, liger=True, packing=True, gpu_memory_gib=H200_GIB,
        cpu_memory_gib=HOST_GIB,
    )  # fmt: skip


def pct(est: float, meas: float | None) -> str:
    return "" if not meas else f"{100 * (est - meas) / meas:+.1f}%"


def main() -> None:
    hdr = (
        "| # | run (world size 1) | set | nvidia-smi peak | reserved | allocated | dojo device | err "
        "| held-out estimate then | dojo alloc | err | verdict | host peak / dojo host | "
        "DeepSpeed est. | accelerate est. |"
    )
    print(hdr)
    print("|" + "---|" * (hdr.count("|") - 1))
    worst = worst_then = 0.0
    for i, (row, m) in enumerate(rows(), 1):
        spec = resolve_model(SHAPES[row.shape])
        est = estimate(spec, setup_for(row))
        dev, alloc = est.gpu_total_gib, est.allocated / GIB
        host_oom = m.get("host_oom", False)
        then = ""
        if m["oom"]:
            meas, ok = "OOM", est.fits is False
        elif host_oom:
            meas, ok = "host RAM exhausted", est.fits is False and est.cpu_total_gib > HOST_GIB
        else:
            meas, ok = f"{m['smi_peak_gib']:.2f}", est.fits is True
            worst = max(worst, abs(dev - m["smi_peak_gib"]) / m["smi_peak_gib"])
            if m["held_out"]:
                then = f"{m['est_gpu_gib']:.2f} ({pct(m['est_gpu_gib'], m['smi_peak_gib'])})"
                then_err = abs(m["est_gpu_gib"] - m["smi_peak_gib"]) / m["smi_peak_gib"]
                worst_then = max(worst_then, then_err)
        measured_dev = not (m["oom"] or host_oom)
        print(
            f"| {i} | {row.label()} | {'held-out' if m['held_out'] else 'calibration'} | {meas} "
            f"| {m['reserved_gib'] or '-'} | {m['alloc_gib'] or '-'} "
            f"| {dev:.2f} | {pct(dev, m['smi_peak_gib']) if measured_dev else ''} | {then} "
            f"| {alloc:.2f} | {pct(alloc, m['alloc_gib'])} "
            f"| {'fits' if est.fits else 'does not fit'} {'right' if ok else 'WRONG'} "
            f"| {m['host_peak_gib']:.1f} / {est.cpu_total_gib:.1f} "
            f"| {deepspeed_estimate(spec, row.stage, row.offload):.1f} "
            f"| {accelerate_estimate(spec):.1f} |"
        )
    print(
        f"\nworst device-memory error over the rows that ran, current constants: {100 * worst:.1f}%"
    )
    print(
        f"worst on the held-out rows with the constants they were held out from: {100 * worst_then:.1f}%"
    )


if __name__ == "__main__":
    main()
