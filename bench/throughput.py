"""Training speed: `dojo train` against the plain HF Trainer + DeepSpeed ZeRO-2 baseline
(bench/baseline_trainer.py), same model, data and GPU, runs alternating.

    source bench/gpu_setup.sh && python3 bench/throughput.py --out $OUT/throughput.json

Two datasets: fixed-length (every sample longer than --seq-len, truncated: no padding anywhere)
and a realistic SFT mix (log-normal lengths, a few dozen to a few thousand tokens). Reported:
real (non-padding) tokens/s per GPU after step 1, model FLOPs utilisation against the H200's dense
bf16 peak, and peak memory.
"""

import argparse
import json
import math
import random
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from memory_matrix import prepare_model, synthetic_chat  # noqa: E402

from dojo.architectures import ARCHITECTURES  # noqa: E402
from dojo.modelspec import resolve_model  # noqa: E402

PEAK_BF16 = 989e12
"""H200 SXM dense bf16 FLOP/s (NVIDIA datasheet; the same Hopper tensor cores as the H100)."""


def make_datasets(work: Path, seq_len: int) -> dict[str, Path]:
    rng = random.Random(0)
    fixed, mix = work / "fixed.jsonl", work / "mix.jsonl"
    fixed.write_text(
        "".join(json.dumps(synthetic_chat(rng, seq_len * 2, q=40)) + "\n" for _ in range(600))
    )
    # log-normal: median ~350 words, clipped to 20..3000 (SFT sets are dominated by short turns
    # with a long tail; ShareGPT-like).
    lens = [int(min(3000, max(20, rng.lognormvariate(math.log(350), 1.0)))) for _ in range(3000)]
    mix.write_text("".join(json.dumps(synthetic_chat(rng, n)) + "\n" for n in lens))
    return {"fixed": fixed, "mix": mix}


def flops_per_token(spec, t_eff: float) -> float:  # type: ignore[no-untyped-def]
    """nanoGPT estimate_mfu: 6N + 12·L·h·T (T = token-weighted mean sample length)."""
    return 6 * spec.params + 12 * spec.num_layers * spec.hidden_size * t_eff


def run_dojo(model: Path, data: Path, out: Path, a: argparse.Namespace, extra: list[str]) -> dict:
    cmd = [
        sys.executable, "-m", "dojo", "train", "--gpus", "0", "--model", str(model),
        "--data", str(data), "--template", "chatml", "--method", "full", "--zero", "2",
        "--micro-batch", str(a.micro_batch), "--seq-len", str(a.seq_len), "--packing",
        "--max-steps", str(a.steps), "--save-steps", "0", "--no-save-model",
        "--output-dir", str(out), "--force", *extra,
    ]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True)
    (out.parent / f"{out.name}.log").write_text(p.stdout + p.stderr)
    s = json.loads((out / "dojo_summary.json").read_text()) if p.returncode == 0 else {}
    return {
        "rc": p.returncode,
        **s,
        "tail": "" if p.returncode == 0 else (p.stdout + p.stderr)[-1500:],
    }


def run_baseline(model: Path, data: Path, out: Path, a: argparse.Namespace) -> dict:
    cmd = [
        sys.executable, "-m", "deepspeed.launcher.runner", "--include", "localhost:0",
        "--master_port", "29611", str(REPO / "bench" / "baseline_trainer.py"), "--model", str(model),
        "--data", str(data), "--out", str(out), "--seq-len", str(a.seq_len),
        "--micro-batch", str(a.micro_batch), "--max-steps", str(a.steps),
    ]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True)
    (out.parent / f"{out.name}.log").write_text(p.stdout + p.stderr)
    f = out / "baseline_summary.json"
    s = json.loads(f.read_text()) if f.exists() else {}
    return {
        "rc": p.returncode,
        **s,
        "tail": "" if p.returncode == 0 else (p.stdout + p.stderr)[-1500:],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/dojo-bench")
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--datasets", nargs="*", help="fixed and/or mix (default both)")
    ap.add_argument(
        "--variant",
        action="append",
        default=None,
        help="NAME=extra dojo train flags, repeatable (default: dojo=, the defaults)",
    )
    ap.add_argument("--no-baseline", action="store_true")
    a = ap.parse_args()
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
                if system == "baseline":
                    r = run_baseline(model, path, out, a)
                else:
                    r = run_dojo(model, path, out, a, flags.split())
                tps = r.get("tokens_per_s_after_step1") or 0.0
                # Attention flops need each sample's length; only fixed-length data has one.
                t_eff = a.seq_len if name == "fixed" else 0
                row = {
                    "dataset": name,
                    "system": system,
                    "flags": flags,
                    "rep": rep,
                    "rc": r["rc"],
                    "real_tokens_per_s": round(tps),
                    "mfu_6n": round(tps * 6 * spec.params / PEAK_BF16, 4),
                    "mfu": round(tps * flops_per_token(spec, t_eff) / PEAK_BF16, 4)
                    if t_eff
                    else None,
                    "peak_alloc_gib": r.get("peak_allocated_gib_after_step1"),
                    "peak_reserved_gib": r.get("peak_reserved_gib_after_step1"),
                    "train_seconds": r.get("train_seconds"),
                    "tail": r["tail"],
                }
                results.append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "tail"}), flush=True)
                if row["rc"]:
                    print(row["tail"], flush=True)
                Path(a.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
