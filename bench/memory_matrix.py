"""Estimator accuracy on a real GPU: `dojo train` runs beside `dojo estimate` for the same settings.

Run on the lent GPU machine (docs/benchmarks.md has the exact call):

    source bench/gpu_setup.sh && python3 bench/memory_matrix.py --shape 1b --out $OUT/mem_1b.json

For each row it prepares a random-weight model of a real shape (weights made once on the GPU and
saved, so rows load instead of re-initialising), runs `python -m dojo train` for 3 optimizer steps
on packed synthetic conversations (every micro-batch is exactly --seq-len tokens), samples
nvidia-smi's "memory.used" and the host's used RAM every 50 ms, and reads the worker's peaks after
step 1 (PyTorch max allocated / reserved) from dojo_summary.json. A run that dies with CUDA OOM is
recorded as OOM. The estimate is dojo.estimate.estimate() with the same Setup.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dojo.architectures import ARCHITECTURES  # noqa: E402
from dojo.estimate import Setup, estimate  # noqa: E402
from dojo.modelspec import resolve_model  # noqa: E402

SHAPES = {
    "1b": "llama-3.2-1b",
    "7b": "llama-2-7b",
    "l1b": "llama-3.2-1b",
    "l8b": "llama-3.1-8b",
    "q15": "qwen2.5-1.5b",
    "g2b": "gemma-2-2b",
    "q3": "qwen3-1.7b",
    # session 4 (bench/matrix_rows_s4.py)
    "q05": "qwen2.5-0.5b",
    "q06": "qwen3-0.6b",
    "l3b": "llama-3.2-3b",
    "m7b": "mistral-7b-v0.3",
    # session 5 (bench/matrix_rows_s5.py)
    "q3b": "qwen2.5-3b",
    "tl1b": "tinyllama-1.1b",
}
EXTRA_ARCHS = {
    # Qwen/Qwen3-1.7B config.json (not in dojo's table): GQA 16/8, head_dim 128, tied, 152k vocab.
    "qwen3-1.7b": {
        "model_type": "qwen3",
        "hidden_size": 2048,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 6144,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
    },
}


@dataclass(frozen=True)
class Row:
    shape: str
    stage: int
    method: str = "full"
    micro_batch: int = 4
    seq_len: int = 2048
    grad_ckpt: bool = False
    overlap_comm: bool = False
    bucket: int = 500_000_000
    offload: str = "none"
    extra: tuple[str, ...] = field(default_factory=tuple)

    def label(self) -> str:
        bits = [f"{self.shape} Z{self.stage} {self.method}", f"b{self.micro_batch}x{self.seq_len}"]
        bits.append("ckpt" if self.grad_ckpt else "no-ckpt")
        if self.stage in (1, 2, 3):
            bits.append(f"ov={'on' if self.overlap_comm else 'off'} rbs={self.bucket:.0e}")
        if self.offload != "none":
            bits.append(f"offload={self.offload}")
        return " ".join(bits)


MATRIX = {
    "1b": [
        Row("1b", 0, micro_batch=4),
        Row("1b", 1, micro_batch=4),
        Row("1b", 2, micro_batch=4, overlap_comm=False),
        Row("1b", 2, micro_batch=4, overlap_comm=True),
        Row("1b", 2, micro_batch=4, overlap_comm=True, bucket=200_000_000),
        Row("1b", 2, micro_batch=8, grad_ckpt=True, overlap_comm=True),
        Row("1b", 3, micro_batch=4, overlap_comm=True),
        Row("1b", 2, micro_batch=4, grad_ckpt=True, offload="cpu", extra=("--optimizer", "ds")),
        Row("1b", 2, method="lora", micro_batch=4),
        Row("1b", 2, method="qlora", micro_batch=4, grad_ckpt=True),
        # Held out: rows 10-14 ran after the constants were calibrated on rows 0-8 (session 2).
        Row("1b", 3, micro_batch=2, grad_ckpt=True, overlap_comm=False),
        Row("1b", 1, micro_batch=8, grad_ckpt=True),
        Row("1b", 2, method="lora", micro_batch=8, grad_ckpt=True),
        Row("1b", 0, micro_batch=2, seq_len=4096),
        Row("1b", 2, micro_batch=8, grad_ckpt=True, offload="cpu", extra=("--optimizer", "ds")),
    ],
    "7b": [
        Row("7b", 2, method="lora", micro_batch=4, grad_ckpt=True),
        Row("7b", 3, micro_batch=1, grad_ckpt=True, overlap_comm=True),
        Row("7b", 2, micro_batch=1, grad_ckpt=True),  # expected OOM on one 141 GB GPU
        Row("7b", 3, method="qlora", micro_batch=2, grad_ckpt=True),
        # Host RAM: pinned fp32 master + grad + bf16 buffer (rounded up to powers of two) and
        # Adam m, v need about 132 GiB, more than the 128 GiB machine.
        Row("7b", 2, micro_batch=1, grad_ckpt=True, offload="cpu", extra=("--optimizer", "ds")),
    ],
}


def prepare_model(shape: str, root: Path) -> Path:
    """config.json of the real shape + the bundled tiny tokenizer + random bf16 weights (once)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    folder = root / f"model-{shape}"
    if (folder / "config.json").exists() and any(folder.glob("*.safetensors")):
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    cfg = dict({**ARCHITECTURES, **EXTRA_ARCHS}[SHAPES[shape]])
    kind = cfg.pop("model_type")
    config = AutoConfig.for_model(kind, **cfg, max_position_embeddings=32768)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(folder, safe_serialization=True)
    del model
    torch.cuda.empty_cache()
    from dojo.train.tiny import build_tiny_tokenizer

    build_tiny_tokenizer(folder)
    return folder


# Words the bundled tiny tokenizer splits into a few tokens each (it was trained on the demo chats).
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "theta",
    "kappa",
    "lambda",
    "sigma",
    "omega",
    "river",
    "stone",
    "cloud",
]


def synthetic_chat(rng: random.Random, n_words: int, q: int | None = None) -> dict[str, object]:
    """One user/assistant exchange of n_words words; the prompt is q words (default a quarter)."""
    q = q or max(4, n_words // 4)
    user = " ".join(rng.choice(WORDS) for _ in range(q))
    answer = " ".join(rng.choice(WORDS) for _ in range(max(4, n_words - q)))
    return {
        "messages": [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
    }


def make_data(path: Path, n: int = 2000) -> Path:
    """Synthetic chats of a few hundred tokens each; packing fills every row to --seq-len."""
    rng = random.Random(0)
    with path.open("w") as f:
        for _ in range(n):
            q, a = rng.randint(40, 120), rng.randint(80, 240)
            f.write(json.dumps(synthetic_chat(rng, q + a, q=q)) + "\n")
    return path


def host_used() -> int:
    """MemTotal - MemAvailable, bytes (what the kernel's OOM killer runs out of)."""
    info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    kb = int(info["MemTotal"].split()[0]) - int(info["MemAvailable"].split()[0])
    return kb * 1024


class Sampler:
    """nvidia-smi memory.used (MiB) and host used RAM every 50 ms in a thread. Host watchdog: a
    run whose host use passes `host_limit` bytes (the machine's RAM minus a margin) is killed
    (its process group) and marked, before the kernel's OOM killer picks a victim itself."""

    def __init__(self, host_limit: float) -> None:
        self.gpu_mib = 0.0
        self.host_base = host_used()
        self.host_peak = 0
        self.host_limit = host_limit
        self.killed_for_host = False
        self.pgid: int | None = None
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        q = ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"]
        while not self._stop.is_set():
            try:
                used = float(subprocess.run(q, capture_output=True, text=True).stdout.split()[0])
                self.gpu_mib = max(self.gpu_mib, used)
            except (IndexError, ValueError):
                pass
            now = host_used()
            self.host_peak = max(self.host_peak, now - self.host_base)
            if now > self.host_limit and self.pgid is not None and not self.killed_for_host:
                self.killed_for_host = True
                os.killpg(self.pgid, 9)
            self._stop.wait(0.05)

    def __enter__(self) -> "Sampler":
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


def _liger() -> bool:
    import importlib.util

    return importlib.util.find_spec("liger_kernel") is not None  # dojo's --liger auto on CUDA


def run_row(
    row: Row, model: Path, data: Path, out: Path, gpu_gib: float, host_gib: float
) -> dict[str, object]:
    run_dir = out / row.label().replace(" ", "_").replace("=", "")
    cmd = [
        sys.executable, "-m", "dojo", "train", "--gpus", "0", "--model", str(model),
        "--data", str(data), "--template", "chatml", "--method", row.method,
        "--zero", str(row.stage), "--offload", row.offload, "--micro-batch", str(row.micro_batch),
        "--seq-len", str(row.seq_len), "--packing", "--max-steps", "3", "--save-steps", "0",
        "--lora-dropout", "0", "--bucket-size", str(row.bucket),
        "--grad-ckpt" if row.grad_ckpt else "--no-grad-ckpt",
        "--overlap-comm" if row.overlap_comm else "--no-overlap-comm",
        "--no-save-model", "--compile", "off", "--output-dir", str(run_dir), "--force",
        *row.extra,
    ]  # fmt: skip
    t0 = time.time()
    host_limit = (host_gib - 3.0) * 2**30  # 3 GiB margin for the OS and this script
    with Sampler(host_limit) as s:
        p = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "DOJO_DEBUG": "1"},
            start_new_session=True,
        )
        s.pgid = p.pid
        log, _ = p.communicate()
    (out / f"{run_dir.name}.log").write_text(log)
    oom = "out of memory" in log.lower() or "OutOfMemoryError" in log
    summary_path = run_dir / "dojo_summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    spec = resolve_model(str(model / "config.json"))
    setup = Setup(
        stage=row.stage, method=row.method, micro_batch=row.micro_batch, seq_len=row.seq_len,
        grad_ckpt=row.grad_ckpt, overlap_comm=row.overlap_comm, bucket_size=row.bucket,
        offload_optimizer=row.offload, offload_param="none", lora_dropout=0.0,
        liger=_liger(), gpu_memory_gib=gpu_gib, cpu_memory_gib=host_gib,
    )  # fmt: skip
    est = estimate(spec, setup)
    return {
        "row": row.label(),
        "params": {k: getattr(row, k) for k in row.__dataclass_fields__},
        "rc": p.returncode,
        "oom": oom,
        # killed by the watchdog, or by the kernel's OOM killer (the launcher reports signal 9)
        "host_oom": s.killed_for_host or (not oom and "return code = -9" in log),
        "host_rss_peak_gib": summary.get("host_rss_peak_gib"),
        "host_pinned_peak_gib": summary.get("host_pinned_allocated_peak_gib"),
        "wall_s": round(time.time() - t0, 1),
        "smi_peak_gib": round(s.gpu_mib / 1024, 2),
        "host_peak_gib": round(s.host_peak / 2**30, 2),
        "alloc_gib": summary.get("peak_allocated_gib_after_step1"),
        "reserved_gib": summary.get("peak_reserved_gib_after_step1"),
        "est_alloc_gib": round(est.allocated / 2**30, 2),
        "est_gpu_gib": round(est.gpu_total_gib, 2),
        "est_cpu_gib": round(est.cpu_total_gib, 2),
        "est_fits": est.fits,
        "estimate": est.to_dict(),
        "tail": "" if p.returncode == 0 else log[-1500:],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", choices=sorted(MATRIX), required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/dojo-bench")
    ap.add_argument("--only", type=int, nargs="*", help="row indexes to run")
    ap.add_argument(
        "--host-gib",
        type=float,
        default=128.0,
        help="the machine's RAM limit (KINDS.md: MemTotal starts low and grows on these VMs)",
    )
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    from dojo.gpus import list_gpus

    gpu_gib = list_gpus()[0].memory_gib
    model = prepare_model(args.shape, work)
    data = make_data(work / "bench_chat.jsonl")
    results = []
    for i, row in enumerate(MATRIX[args.shape]):
        if args.only and i not in args.only:
            continue
        r = run_row(row, model, data, work, gpu_gib, args.host_gib)
        results.append(r)
        print(json.dumps({k: v for k, v in r.items() if k not in ("estimate", "tail")}), flush=True)
        if r["rc"] != 0 and not r["oom"] and not r["host_oom"]:
            print(r["tail"], flush=True)
        Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
