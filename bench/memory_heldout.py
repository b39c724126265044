"""Held-out check of `dojo estimate` on session-3 H200 rows (issue 12): estimate vs measured.

    python bench/memory_heldout.py bench/results/mem_s3*.json            # held rows only
    python bench/memory_heldout.py --split all bench/results/mem_s3.json  # fit rows too

Reads the result files bench/memory_parallel.py writes (one dict per row: "split" fit|held,
"params" = the bench/matrix_rows.py Row, "zero_optimization" = the DeepSpeed section the run
really used, per-process nvidia-smi peak, PyTorch peaks after step 1), recomputes the estimate
with the current dojo.estimate for the same settings and prints a markdown table: device
(nvidia-smi) and allocated, estimate, error %, and whether the verdict was right (a run that ran
out of memory must be "does not fit", a run that finished "fits" or "tight"). No GPU, no torch.
Rows tagged "held" were never used to fit a constant (docs/estimate.md).
"""

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dojo.estimate import GIB, MemoryEstimate, Setup, estimate  # noqa: E402
from dojo.estimate.setup import OPTIMS  # noqa: E402
from dojo.modelspec import ModelSpec, from_hf_config, resolve_model  # noqa: E402
from dojo.run.render import ESTIMATED_AS  # noqa: E402
from dojo.run.resolve import _auto_attention  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from memory_matrix import EXTRA_ARCHS, SHAPES  # noqa: E402  (the shapes the matrices ran)

H200_GIB = 143771 / 1024  # nvidia-smi memory.total on the lent machine
HOST_GIB = 131961788 / 2**20  # MemTotal on the lent machine


def spec_for(shape: str) -> ModelSpec:
    """bench/memory_matrix.py SHAPES; a name not in dojo's table (qwen3-1.7b) from EXTRA_ARCHS."""
    name = SHAPES[shape]
    if name in EXTRA_ARCHS:
        return from_hf_config(EXTRA_ARCHS[name], name)
    return resolve_model(name)


def setup_for(m: dict[str, Any]) -> Setup:
    """The Setup of one measured row: its Row fields plus the zero_optimization it really ran."""
    p = m["params"]
    plain = p.get("system") == "plain"
    no_ds = p["stage"] < 0
    stage = max(p["stage"], 0)
    zo = m.get("zero_optimization") or {}
    rb = zo.get("reduce_bucket_size", "auto")
    bucket = None if rb in ("auto", None) else int(float(rb))
    optim = p.get("optim", "auto")
    pb = zo.get("stage3_prefetch_bucket_size", "auto")
    prefetch = None if pb in ("auto", None) else int(float(pb))
    leaf = bool((zo.get("leaf_module") or {}).get("classes"))  # session 4: decoder layers
    return Setup(
        stage=stage,
        method=p["method"],
        micro_batch=p["micro_batch"],
        seq_len=p["seq_len"],
        grad_ckpt=p["grad_ckpt"],
        overlap_comm=bool(zo.get("overlap_comm", stage == 3)),
        bucket_size=bucket,
        offload_optimizer=p.get("offload", "none"),
        lora_dropout=0.05,  # dojo train's and baseline_trainer.py's default
        liger=bool(p.get("liger")) and not plain,
        liger_kernels=not p.get("liger_loss"),  # Row.liger_loss: session-12 rows on
        packing=bool(p.get("packing")) and not plain,
        deepspeed=not no_ds,
        z3_leaf_layer=leaf and stage == 3,
        prefetch_bucket=prefetch if stage == 3 else None,
        optim=optim if optim in OPTIMS else "adamw",  # auto = adamw_torch_fused: fp32 m, v
        adapter_dtype="auto",  # PEFT's fp32 adapters, as far as DeepSpeed casts them
        # rows of session 5 on (matrix_rows_s4.Row); session 8's give the whole allocator config
        expandable_segments=expandable(p),
        compile=p.get("compile") == "on" and not plain,  # Row.compile: "off" unless a row sets it
        attention=ESTIMATED_AS.get(attn_as_run(m), "sdpa"),  # Row.attn: session-11 rows on
        # dojo's 1e8 ZeRO-3 tile from session 6; earlier rows and the plain script ran 1e9
        sub_group_size=int(float(zo.get("sub_group_size", 1e9))),
        gpu_memory_gib=H200_GIB,
        cpu_memory_gib=HOST_GIB,
    )


AUTO_WAS_SDPA = ("mem_s11.json",)
"""Result files whose dojo rows ran ``--attn auto`` before f260d40 made auto pick sdpa_varlen
(the session-11 set ran at 637e738): auto was sdpa there."""


def attn_as_run(m: dict[str, Any]) -> str:
    """The kernel a row's ``--attn`` (Row.attn, session 11 on) ran: a dojo row's ``auto`` as
    dojo resolves it (dojo.run.resolve._auto_attention: bf16 on the H200, the row's packing and
    compile), as its own preflight estimated it; sdpa where the row has no ``attn``, for the plain
    script (transformers' default) and for the files in AUTO_WAS_SDPA."""
    p = m["params"]
    attn = p.get("attn") or "sdpa"
    if attn != "auto":
        return attn
    if p.get("system") == "plain" or m.get("_file") in AUTO_WAS_SDPA:
        return "sdpa"
    v = {"packing": bool(p.get("packing"))}
    return _auto_attention(v, spec_for(p["shape"]), True, "bf16", p.get("compile") == "on")


def expandable(p: dict[str, Any]) -> bool:
    """A row ran under expandable segments: ``expandable`` (session 5 on) or an ``alloc`` that
    sets it (session 8 on)."""
    return bool(p.get("expandable")) or "expandable_segments:True" in str(p.get("alloc", ""))


def measured_device(m: dict[str, Any]) -> float | None:
    v = m.get("smi_proc_peak_gib", m.get("smi_peak_gib"))
    return float(v) if v else None


def verdict_right(m: dict[str, Any], e: MemoryEstimate) -> bool:
    if m.get("oom"):
        return e.verdict == "does not fit"
    if m.get("host_killed") or m.get("host_oom"):
        return e.verdict == "does not fit" and e.cpu_total_gib > HOST_GIB
    return e.verdict in ("fits", "tight")


def pct(est: float, meas: float | None) -> str:
    return "" if not meas else f"{100 * (est - meas) / meas:+.1f}%"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--split", choices=["held", "fit", "all"], default="held")
    a = ap.parse_args()
    rows = [{**m, "_file": f.name} for f in a.files for m in json.loads(f.read_text())]
    rows = [m for m in rows if a.split == "all" or m.get("split") == a.split]
    print(
        "| run | split | device | est. | err | allocated | est. | err | verdict | right? |\n"
        "|---|---|---|---|---|---|---|---|---|---|"
    )
    errs: list[float] = []
    right = 0
    for m in rows:
        e = estimate(spec_for(m["params"]["shape"]), setup_for(m))
        dev = measured_device(m)
        ok = verdict_right(m, e)
        right += ok
        ran = not (m.get("oom") or m.get("host_killed") or m.get("host_oom"))
        if ran and dev:
            errs.append(100 * (e.gpu_total_gib - dev) / dev)
        shown = "OOM" if m.get("oom") else ("host RAM" if not ran else f"{dev or 0:.2f}")
        alloc = m.get("alloc_gib")
        print(
            f"| {m['row']} | {m.get('split', '?')} | {shown} | {e.gpu_total_gib:.2f} "
            f"| {pct(e.gpu_total_gib, dev) if ran else ''} | {alloc or '-'} "
            f"| {e.allocated / GIB:.2f} | {pct(e.allocated / GIB, alloc)} | {e.verdict} "
            f"| {'yes' if ok else 'NO'} |"
        )
    within = sum(abs(x) <= 10 for x in errs)
    worst = max((abs(x) for x in errs), default=0.0)
    print(
        f"\n{len(rows)} rows ({a.split}); device within +-10%: {within}/{len(errs)}; "
        f"worst {worst:.1f}%; verdict right: {right}/{len(rows)}"
    )


if __name__ == "__main__":
    main()
