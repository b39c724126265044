"""Training speed: `dojo train` against the plain HF Trainer + DeepSpeed baseline
(bench/baseline_trainer.py), same model, data and GPU, runs alternating.

    source bench/gpu_setup.sh && python3 bench/throughput.py --out $OUT/throughput.json
    python3 bench/throughput.py --out $OUT/tp.json --plan T1:baseline T1:dojo T2:dojo-liger-off

--plan runs CASE:SYSTEM items in order (session 3, issue 13): SYSTEM is baseline, dojo (its
defaults) or a dojo variant from VARIANTS (extra flags and/or bench/hook settings: DeepSpeed
zero_optimization overrides, torch profiler). Without --plan it runs the session-2 matrix below.

Two datasets: fixed-length (every sample longer than --seq-len, truncated: no padding anywhere)
and a realistic SFT mix (log-normal lengths, a few dozen to a few thousand tokens). Reported:
real (non-padding) tokens/s per GPU after step 1, model FLOPs utilisation against the H200's dense
bf16 peak, and peak memory.
"""

import argparse
import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from memory_matrix import prepare_model, synthetic_chat  # noqa: E402

from dojo.architectures import ARCHITECTURES  # noqa: E402
from dojo.modelspec import resolve_model  # noqa: E402

PEAK_BF16 = 989e12
"""H200 SXM dense bf16 FLOP/s (NVIDIA datasheet; the same Hopper tensor cores as the H100)."""


CASES: dict[str, dict[str, Any]] = {
    # name: shape, method, zero, micro-batch, seq, grad ckpt, dataset, steps
    "T1": {
        "shape": "1b",
        "method": "full",
        "zero": 2,
        "mb": 4,
        "seq": 2048,
        "ckpt": False,
        "data": "fixed",
    },
    "T2": {
        "shape": "1b",
        "method": "full",
        "zero": 3,
        "mb": 4,
        "seq": 2048,
        "ckpt": False,
        "data": "fixed",
    },
    "T3": {
        "shape": "1b",
        "method": "lora",
        "zero": 2,
        "mb": 4,
        "seq": 2048,
        "ckpt": False,
        "data": "fixed",
    },
    "T4": {
        "shape": "1b",
        "method": "lora",
        "zero": 3,
        "mb": 4,
        "seq": 2048,
        "ckpt": False,
        "data": "fixed",
    },
    "T5": {
        "shape": "1b",
        "method": "qlora",
        "zero": 2,
        "mb": 4,
        "seq": 2048,
        "ckpt": True,
        "data": "fixed",
    },
    "T6": {
        "shape": "1b",
        "method": "full",
        "zero": 2,
        "mb": 4,
        "seq": 2048,
        "ckpt": False,
        "data": "mix",
    },
    "T7": {
        "shape": "7b",
        "method": "full",
        "zero": 3,
        "mb": 2,
        "seq": 2048,
        "ckpt": True,
        "data": "fixed",
    },
}
_Z3_BIG = {
    "stage3_param_persistence_threshold": 10_000_000,
    "stage3_prefetch_bucket_size": 500_000_000,
    "reduce_bucket_size": 500_000_000,
}
# transformers 5.17 (the GPU machine) reads gradient_checkpointing_kwargs, later ones
# activation_checkpointing_kwargs.
_REENTRANT = {
    "gradient_checkpointing_kwargs": {"use_reentrant": True},
    "activation_checkpointing_kwargs": {"use_reentrant": True},
}
_NONREENTRANT = {k: {"use_reentrant": False} for k in _REENTRANT}
VARIANTS: dict[str, tuple[list[str], dict[str, str]]] = {
    "dojo": ([], {}),
    "dojo-liger-off": (["--liger", "off"], {}),
    "dojo-z3-persist1e7": (
        [],
        {"DOJO_BENCH_DS": json.dumps({"stage3_param_persistence_threshold": 10_000_000})},
    ),
    "dojo-z3-prefetch5e8": (
        [],
        {"DOJO_BENCH_DS": json.dumps({"stage3_prefetch_bucket_size": 500_000_000})},
    ),
    "dojo-z3-big": ([], {"DOJO_BENCH_DS": json.dumps(_Z3_BIG)}),
    "dojo-z3-big-liger-off": (["--liger", "off"], {"DOJO_BENCH_DS": json.dumps(_Z3_BIG)}),
    "dojo-compile": (["--compile", "on"], {}),
    # Liger's fused linear cross-entropy only (the logits memory), not its RMSNorm/SwiGLU/RoPE.
    # Sessions 4-7 set it through the bench hook (DOJO_BENCH_LIGER); dojo has the same as
    # --liger loss since session 10 (dojo.train.worker.args.LIGER_LOSS_ONLY).
    "dojo-liger-flce": (["--liger", "loss"], {}),
    # The session-3 defaults at ZeRO-3 (per-module hooks, HF's hidden^2 buckets): the A/B of this
    # session's change inside one call.
    # ({h2} and {pf} become the shape's hidden^2 and 0.9 hidden^2, HF's "auto" values.)
    "dojo-z3-old": (
        ["--z3-leaf", "off", "--bucket-size", "{h2}", "--prefetch-bucket-size", "{pf}"],
        {},
    ),
    "dojo-log100": (["--logging-steps", "100"], {}),
    # Session 5: reentrant checkpointing (the plain script's, transformers' default) and
    # overlap_comm off / on against dojo's defaults.
    "dojo-reentrant": (
        [],
        {"DOJO_BENCH_ARGS": json.dumps(_REENTRANT)},
    ),
    "dojo-nonreentrant": ([], {"DOJO_BENCH_ARGS": json.dumps(_NONREENTRANT)}),  # the old default
    "dojo-overlap-off": (["--no-overlap-comm"], {}),
    # PyTorch's expandable segments: the caching allocator maps freed pages for the next large
    # request instead of keeping a segment per size. dojo's default on CUDA from session 8
    # (dojo-expandable is then the same run as dojo); dojo-expandable-off is the old allocator.
    "dojo-expandable": ([], {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
    "dojo-expandable-off": (["--expandable-segments", "off"], {}),
    # Session 8, not yet run: packed rows under SDPA carry a 4-D block-diagonal mask, which sends
    # SDPA to the memory-efficient kernel with an additive bias; FlexAttention's block mask skips
    # the masked blocks instead (T6: dojo's packed mix ran 44k tokens/s against T1's 49.7k).
    "dojo-flex": (["--attn", "flex_attention"], {}),
    # Regional compile of the decoder layers plus Liger's fused linear cross-entropy only.
    # Compile with all of Liger trained NaN (session 6); the fused loss runs outside the compiled
    # layers. Session 10 (then through DOJO_BENCH_ARGS): T5 40,044 tokens/s, 3.1 GiB allocated,
    # compile's own losses. It is now what --compile on does (--liger auto then "loss").
    "dojo-compile-flce": (["--compile", "on"], {}),
    # Session 9: packed samples through PyTorch's own FlashAttention kernel by their
    # offsets (dojo.train.worker.varlen), no mask; the lead for T6 after FlexAttention's 19.5k.
    "dojo-varlen": (["--attn", "sdpa_varlen"], {}),
    # Session 10: --attn auto is sdpa_varlen for packed bf16 Llama/Qwen runs without compile
    # (T6: 1.11x the masked kernel); this is the masked kernel, dojo's default before it.
    "dojo-sdpa": (["--attn", "sdpa"], {}),
    "dojo-overlap-on": (["--overlap-comm"], {}),
    "dojo-flce-reentrant": (["--liger", "loss"], {"DOJO_BENCH_ARGS": json.dumps(_REENTRANT)}),
    # Session 6: DeepSpeed's bf16 per-gradient inf/NaN test (dojo's default is now off) and
    # DeepSpeed's 1e9 ZeRO-3 sub-group (dojo's is now 1e8 without offload), as A/B variants.
    "dojo-overflow-check": (["--overflow-check"], {}),
    "dojo-sub1e9": (["--sub-group-size", "1e9"], {}),
    # compile off: the default since 9d45489, except packed LoRA at ZeRO 0-2 (compile auto on, session 7)
    "dojo-compile-off": (["--compile", "off"], {}),
    "dojo-compile-liger-off": (["--compile", "on", "--liger", "off"], {}),
    "dojo-profile": ([], {"DOJO_BENCH_PROFILE": "PROFILE"}),
    # Session 14: dojo with the step-edge device waits it removed (bench/hook), and the waits
    # each system makes, counted over steps 4-5 (torch.cuda.set_sync_debug_mode).
    "dojo-step-syncs": ([], {"DOJO_BENCH_STEP_SYNCS": "1"}),
    "dojo-syncdebug": ([], {"DOJO_BENCH_SYNCDEBUG": "SYNCDEBUG"}),
    "dojo-step-syncs-syncdebug": (
        [],
        {"DOJO_BENCH_STEP_SYNCS": "1", "DOJO_BENCH_SYNCDEBUG": "SYNCDEBUG"},
    ),
    "baseline-profile": ([], {"DOJO_BENCH_PROFILE": "PROFILE"}),
    "baseline-syncdebug": ([], {"DOJO_BENCH_SYNCDEBUG": "SYNCDEBUG"}),
}


def make_datasets(work: Path, seq_len: int) -> dict[str, Path]:
    rng = random.Random(0)
    fixed, mix = work / "fixed.jsonl", work / "mix.jsonl"
    fixed.write_text(
        "".join(json.dumps(synthetic_chat(rng, seq_len * 2, q=40)) + "\n" for _ in range(200))
    )
    # log-normal: median ~350 words, clipped to 20..3000 (SFT sets are dominated by short turns
    # with a long tail; ShareGPT-like).
    lens = [int(min(3000, max(20, rng.lognormvariate(math.log(350), 1.0)))) for _ in range(3000)]
    mix.write_text("".join(json.dumps(synthetic_chat(rng, n)) + "\n" for n in lens))
    return {"fixed": fixed, "mix": mix}


def flops_per_token(spec, t_eff: float) -> float:  # type: ignore[no-untyped-def]
    """nanoGPT estimate_mfu: 6N + 12·L·h·T (T = token-weighted mean sample length)."""
    return 6 * spec.params + 12 * spec.num_layers * spec.hidden_size * t_eff


def legacy_case(a: argparse.Namespace, data: str) -> dict[str, Any]:
    return {"shape": "1b", "method": "full", "zero": 2, "mb": a.micro_batch, "seq": a.seq_len, "ckpt": False,
                "data": data}  # fmt: skip


def run_dojo(
    model: Path, data: Path, out: Path, case: dict[str, Any], steps: int, extra: list[str],
    env: dict[str, str] | None = None,
) -> dict[str, Any]:  # fmt: skip
    cmd = [
        sys.executable, "-m", "dojo", "train", "--gpus", "0", "--model", str(model),
        "--data", str(data), "--template", "chatml", "--method", case["method"],
        "--zero", str(case["zero"]), "--micro-batch", str(case["mb"]),
        "--seq-len", str(case["seq"]), "--packing",
        "--grad-ckpt" if case["ckpt"] else "--no-grad-ckpt",
        "--max-steps", str(steps), "--save-steps", "0", "--no-save-model",
        "--output-dir", str(out), "--force",
        # The plain script's logging settings (baseline_trainer.py: logging_steps=10, report_to
        # none): dojo's "auto" logs every step of a run under 100 steps, one more host sync each.
        "--logging-steps", "10", "--report-to", "none", *extra,
    ]  # fmt: skip
    e = {**os.environ, **(env or {})}
    if env:  # bench-only hooks (DeepSpeed overrides, profiler), never part of dojo
        e["PYTHONPATH"] = f"{REPO / 'bench' / 'hook'}:{e.get('PYTHONPATH', '')}"
    p = subprocess.run(cmd, capture_output=True, text=True, env=e)
    (out.parent / f"{out.name}.log").write_text(p.stdout + p.stderr)
    s = json.loads((out / "dojo_summary.json").read_text()) if p.returncode == 0 else {}
    return {
        "rc": p.returncode,
        **s,
        "tail": "" if p.returncode == 0 else (p.stdout + p.stderr)[-1500:],
    }


def run_baseline(
    model: Path, data: Path, out: Path, case: dict[str, Any], steps: int,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:  # fmt: skip
    cmd = [
        sys.executable, "-m", "deepspeed.launcher.runner", "--include", "localhost:0",
        "--master_port", "29611", str(REPO / "bench" / "baseline_trainer.py"), "--model", str(model),
        "--data", str(data), "--out", str(out), "--seq-len", str(case["seq"]),
        "--micro-batch", str(case["mb"]), "--max-steps", str(steps),
        "--zero", str(case["zero"]), "--method", case["method"],
        *(["--grad-ckpt"] if case["ckpt"] else []),
    ]  # fmt: skip
    e = {**os.environ, **(env or {})}
    if env:  # the same bench-only hooks (profiler) as run_dojo
        e["PYTHONPATH"] = f"{REPO / 'bench' / 'hook'}:{e.get('PYTHONPATH', '')}"
    p = subprocess.run(cmd, capture_output=True, text=True, env=e)
    (out.parent / f"{out.name}.log").write_text(p.stdout + p.stderr)
    f = out / "baseline_summary.json"
    s = json.loads(f.read_text()) if f.exists() else {}
    return {
        "rc": p.returncode,
        **s,
        "tail": "" if p.returncode == 0 else (p.stdout + p.stderr)[-1500:],
    }


def measured(
    r: dict[str, Any], spec: Any, case: dict[str, Any], system: str, flags: str
) -> dict[str, Any]:
    tps = r.get("tokens_per_s_after_step1") or 0.0
    # Attention flops need each sample's length; only fixed-length data has one.
    t_eff = case["seq"] if case["data"] == "fixed" else 0
    return {
        "dataset": case["data"],
        "system": system,
        "flags": flags,
        "rc": r["rc"],
        "real_tokens_per_s": round(tps),
        "mfu_6n": round(tps * 6 * spec.params / PEAK_BF16, 4),
        "mfu": round(tps * flops_per_token(spec, t_eff) / PEAK_BF16, 4) if t_eff else None,
        "peak_alloc_gib": r.get("peak_allocated_gib_after_step1"),
        "peak_reserved_gib": r.get("peak_reserved_gib_after_step1"),
        "peak_gpu_gib_run": r.get("peak_gpu_gib"),
        "train_seconds": r.get("train_seconds") or r.get("train_seconds_after_step1"),
        "step_ms": round(1000 * r["seconds_per_step_after_step1"], 1)
        if r.get("seconds_per_step_after_step1")
        else None,
        "tail": r["tail"],
    }


def run_plan(a: argparse.Namespace, work: Path) -> None:
    """--plan CASE:SYSTEM items in order; models and datasets made once per shape."""
    results: list[dict[str, Any]] = []
    models: dict[str, Path] = {}
    data = make_datasets(work, 2048)
    # --warmup N: each distinct item once for N steps first, not recorded. A fresh machine's
    # first run of a stack builds and caches what later runs reuse (session 14: dojo's first T1
    # run of a call ran 43.5-47.1k tokens/s, its later ones 48.6-49.9k; the plain script's first
    # T6 run 14-17k against 22k, sessions 10-14), so without it the first run of each system pays
    # the machine's cold caches.
    for n, item in enumerate(dict.fromkeys(a.plan) if a.warmup else []):
        row = run_item(a, item, f"warm{n}", a.warmup, models, data, work)
        print(json.dumps({"warmup": item, "rc": row["rc"]}), flush=True)
    # --repeats R runs the whole plan R times, so every system alternates with the others
    # (bench/speed_table.py --median gives each one's median and the ratio of medians).
    for n, item in enumerate(a.plan * a.repeats):
        name = item.split(":")[0]
        steps = a.steps if CASES[name]["shape"] == "1b" else a.steps_7b
        row = run_item(a, item, str(n), steps, models, data, work)
        row = {**row, "item": n, "rep": n // len(a.plan)}
        results.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "tail"}), flush=True)
        if row["rc"]:
            print(row["tail"], flush=True)
        Path(a.out).write_text(json.dumps(results, indent=1))


def run_item(
    a: argparse.Namespace, item: str, tag: str, steps: int, models: dict[str, Path],
    data: dict[str, Path], work: Path,
) -> dict[str, Any]:  # fmt: skip
    """One CASE:SYSTEM run of `steps` steps: its result row."""
    name, system = item.split(":")
    case = CASES[name]
    if case["shape"] not in models:
        models[case["shape"]] = prepare_model(case["shape"], work)
    model = models[case["shape"]]
    spec = resolve_model(str(model / "config.json"))
    out = work / f"tp3-{tag}-{name}-{system}"
    flags, env = VARIANTS.get(system, ([], {}))
    h = spec.hidden_size
    flags = [f.format(h2=h * h, pf=int(0.9 * h * h)) for f in flags]
    for var, stem in (("DOJO_BENCH_PROFILE", "profile"), ("DOJO_BENCH_SYNCDEBUG", "syncs")):
        if var in env:
            env = {**env, var: str(Path(a.out).parent / f"{stem}-{name}-{system}.txt")}
    if system.startswith("baseline"):
        r = run_baseline(model, data[case["data"]], out, case, steps, env)
    else:
        r = run_dojo(model, data[case["data"]], out, case, steps, flags, env)
    row = {"case": name, **case, **measured(r, spec, case, system, " ".join(flags))}
    row["env"] = env
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/dojo-bench")
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=0, help="steps of an unrecorded first run each")
    ap.add_argument("--datasets", nargs="*", help="fixed and/or mix (default both)")
    ap.add_argument(
        "--variant",
        action="append",
        default=None,
        help="NAME=extra dojo train flags, repeatable (default: dojo=, the defaults)",
    )
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--plan", nargs="*", help="CASE:SYSTEM items (CASES, VARIANTS), in order")
    ap.add_argument("--steps-7b", type=int, default=8)
    a = ap.parse_args()
    if a.plan:
        work = Path(a.work)
        work.mkdir(parents=True, exist_ok=True)
        run_plan(a, work)
        return
    variants = [v.partition("=")[::2] for v in (a.variant or ["dojo="])]
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    model = prepare_model("1b", work)
    spec = resolve_model(str(model / "config.json"))
    assert spec.vocab_size == ARCHITECTURES["llama-3.2-1b"]["vocab_size"]
    data = make_datasets(work, a.seq_len)
    systems = ([] if a.no_baseline else [("baseline", "")]) + variants
    results = []
    for rep in range(a.repeats):
        for name, path in data.items():
            if a.datasets and name not in a.datasets:
                continue
            for system, flags in systems:  # alternate, baseline first each time
                out = work / f"tp-{name}-{system}-{rep}"
                case = legacy_case(a, name)
                if system == "baseline":
                    r = run_baseline(model, path, out, case, a.steps)
                else:
                    r = run_dojo(model, path, out, case, a.steps, flags.split())
                row = {"rep": rep, **measured(r, spec, case, system, flags)}
                results.append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "tail"}), flush=True)
                if row["rc"]:
                    print(row["tail"], flush=True)
                Path(a.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
