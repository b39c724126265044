"""Session 3 memory matrix (bench/matrix_rows.py), several short rows at once on one GPU.

    source bench/gpu_setup.sh && python3 bench/memory_parallel.py --out $OUT/mem_s3.json
    source bench/gpu_setup.sh && python3 bench/memory_parallel.py --rows s4 --out $OUT/mem_s4.json

--rows s3 (default) runs bench/matrix_rows.py, --rows s4 bench/matrix_rows_s4.py.

Why parallel: a row is ~40 s, almost all of it start-up (imports, DeepSpeed init), and device
time is scarce. Each row is measured per process, so neighbours do not blur it:
- GPU: nvidia-smi --query-compute-apps used_memory summed over the row's process tree (what
  nvidia-smi shows for that process: context + PyTorch reserved + non-PyTorch allocations),
  sampled every 0.2 s; torch max_memory_allocated / reserved from the row's own summary;
- host: RSS summed over the row's process tree (psutil), and the worker's own ru_maxrss.
Rows are admitted while the sum of their (estimate x 1.25 + 2 GiB) stays under --budget-gib;
a row the estimate says will not fit (or marked expect_oom) runs alone. A row that runs out of
GPU memory beside others is re-run alone once. The first row runs alone to check that the
per-process query works on this machine; if it does not, every row runs alone.
Weights: one background process makes each shape's random bf16 weights once (memory_matrix).
"""

import argparse
import contextlib
import dataclasses
import importlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from matrix_rows import Row  # noqa: E402
from memory_heldout import expandable  # noqa: E402
from memory_heldout import setup_for as heldout_setup  # noqa: E402
from memory_matrix import host_used, make_data, prepare_model, synthetic_chat  # noqa: E402

from dojo.estimate import Setup, estimate  # noqa: E402
from dojo.modelspec import resolve_model  # noqa: E402

ROW_FILES = {
    "s3": "matrix_rows",
    "s4": "matrix_rows_s4",
    "s5": "matrix_rows_s5",
    "s6": "matrix_rows_s6",
    "s7": "matrix_rows_s7",
    "s8": "matrix_rows_s8",
    "s9": "matrix_rows_s9",
    "s10": "matrix_rows_s10",
    "s11": "matrix_rows_s11",
    "s12": "matrix_rows_s12",
    "s13": "matrix_rows_s13",
    "s14": "matrix_rows_s14",
    "s15": "matrix_rows_s15",
    "s16": "matrix_rows_s16",
}


def load_rows(which: str) -> list[Row]:
    return list(importlib.import_module(ROW_FILES[which]).ROWS)


STEPS = 3


def fixed_data(work: Path, seq_len: int, n: int = 32) -> Path:
    """Samples longer than seq_len (truncated): every row is exactly seq_len, no padding."""
    path = work / f"fixed-{seq_len}.jsonl"
    if not path.exists():
        rng = random.Random(seq_len)
        path.write_text(
            "".join(json.dumps(synthetic_chat(rng, seq_len * 2, q=40)) + "\n" for _ in range(n))
        )
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def command(row: Row, model: Path, work: Path, run_dir: Path) -> list[str]:
    data = make_data(work / "pack.jsonl") if row.packing and row.system == "dojo" else None
    data = data or fixed_data(work, row.seq_len)
    optim = getattr(row, "optim", "auto")  # session-4 rows only (bench/matrix_rows_s4.py)
    if row.system == "plain":
        return [
            sys.executable, "-m", "deepspeed.launcher.runner", "--include", "localhost:0",
            "--master_port", str(free_port()), str(REPO / "bench" / "baseline_trainer.py"),
            "--model", str(model), "--data", str(data), "--out", str(run_dir),
            "--seq-len", str(row.seq_len), "--micro-batch", str(row.micro_batch),
            "--max-steps", str(STEPS), "--zero", "none" if row.stage < 0 else str(row.stage),
            "--method", row.method, "--offload", row.offload,
            *(["--grad-ckpt"] if row.grad_ckpt else []),
        ]  # fmt: skip
    # s12 on: liger_loss = Liger's fused loss alone (what --compile picks from session 10)
    liger = "loss" if getattr(row, "liger_loss", False) else ("on" if row.liger else "off")
    return [
        sys.executable, "-m", "dojo", "train", "--gpus", "0", "--model", str(model),
        "--data", str(data), "--template", "chatml", "--method", row.method,
        "--zero", str(row.stage), "--offload", row.offload, "--micro-batch", str(row.micro_batch),
        "--seq-len", str(row.seq_len), "--packing" if row.packing else "--no-packing",
        "--max-steps", str(STEPS), "--save-steps", "0", "--liger", liger,
        "--grad-ckpt" if row.grad_ckpt else "--no-grad-ckpt", "--compile", row.compile,
        # explicit both ways (dojo's auto is on from session 8): the row says which allocator
        "--expandable-segments", "on" if expandable(dataclasses.asdict(row)) else "off",
        "--no-save-model", "--output-dir", str(run_dir), "--force",
        *(["--optimizer", "ds"] if row.offload != "none" else []),
        *(["--optim", optim] if optim != "auto" else []),
        *(["--attn", row.attn] if getattr(row, "attn", "auto") != "auto" else []),  # s11 on
    ]  # fmt: skip


def default_zero(row: Row, spec: Any) -> dict[str, Any]:
    """The zero_optimization a row will run with, before it ran: for dojo rows what dojo's own
    resolver writes for that command on one GPU (so this never drifts from dojo's defaults),
    plain = bench/baseline_trainer.py's LLaMA-Factory JSONs; after the run its real one is used."""
    stage = max(row.stage, 0)
    if row.system == "plain":
        return {
            "stage": stage,
            "overlap_comm": False,
            "reduce_bucket_size": 5e8 if stage == 2 else "auto",
        }
    from dojo.run import render, resolve
    from dojo.run.machine import Machine

    values = {"method": row.method, "zero": stage, "offload": row.offload,
              "optimizer": "ds" if row.offload != "none" else "hf"}  # fmt: skip
    machine = Machine(cuda=True, gpu_ids=(0,), liger=True)
    run = resolve.resolve(values, machine=machine, spec=spec, gpus=(0,), given=set(values))
    return dict(render.ds_config(run, spec)["zero_optimization"])


def alloc_env(row: Row) -> dict[str, str]:
    """A row with expandable=True runs under PyTorch's expandable segments (either system); a
    session-8 row's alloc is the whole PYTORCH_CUDA_ALLOC_CONF."""
    conf = getattr(row, "alloc", "")
    if conf:
        return {"PYTORCH_CUDA_ALLOC_CONF": conf}
    on = getattr(row, "expandable", False)
    return {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"} if on else {}


def setup_for(row: Row, spec: Any, zo: dict[str, Any] | None, gpu: float, host: float) -> Setup:
    """The estimate's Setup (memory_heldout.setup_for); zo = the zero_optimization really used
    (None: before the run, dojo's / the plain JSON's defaults)."""
    m = {
        "params": dataclasses.asdict(row),
        "zero_optimization": default_zero(row, spec) if zo is None else zo,
    }
    return dataclasses.replace(heldout_setup(m), gpu_memory_gib=gpu, cpu_memory_gib=host)


class Running:
    def __init__(self, row: Row, proc: subprocess.Popen[str], run_dir: Path, est: Any) -> None:
        self.row, self.proc, self.run_dir, self.est = row, proc, run_dir, est
        self.t0 = time.time()
        self.gpu_mib = 0.0
        self.rss = 0
        self.neighbours: set[str] = set()
        self.pids: set[int] = {proc.pid}


class Sampler(threading.Thread):
    """One nvidia-smi query per tick for all rows; per-process memory by pid."""

    def __init__(self, running: dict[str, Running], host_limit: float) -> None:
        super().__init__(daemon=True)
        self.running, self.host_limit = running, host_limit
        self.stop = threading.Event()
        self.matched = False
        self.total_mib = 0.0
        self.lock = threading.Lock()

    def run(self) -> None:
        q = ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]
        while not self.stop.is_set():
            used: dict[int, float] = {}
            for line in subprocess.run(q, capture_output=True, text=True).stdout.splitlines():
                try:
                    pid, mib = line.split(",")
                    used[int(pid)] = float(mib)
                except ValueError:
                    continue
            with self.lock:
                rows = list(self.running.values())
            for r in rows:
                try:
                    kids = psutil.Process(r.proc.pid).children(recursive=True)
                except psutil.NoSuchProcess:
                    continue
                r.pids |= {k.pid for k in kids}
                g = sum(v for p, v in used.items() if p in r.pids)
                if g:
                    self.matched = True
                r.gpu_mib = max(r.gpu_mib, g)
                rss = 0
                for k in kids:
                    with contextlib.suppress(psutil.NoSuchProcess):
                        rss += k.memory_info().rss
                r.rss = max(r.rss, rss)
            self.total_mib = max(self.total_mib, sum(used.values()))
            if host_used() > self.host_limit and rows:  # kill the largest before the kernel does
                big = max(rows, key=lambda r: r.rss)
                big.neighbours.add("KILLED_FOR_HOST_RAM")
                os.killpg(big.proc.pid, 9)
            self.stop.wait(0.2)


def finish(r: Running, spec: Any, log: str, gpu: float, host: float) -> dict[str, Any]:
    row = r.row
    oom = "out of memory" in log.lower() or "OutOfMemoryError" in log
    name = "baseline_summary.json" if row.system == "plain" else "dojo_summary.json"
    f = r.run_dir / name
    summary = json.loads(f.read_text()) if f.exists() else {}
    zo: dict[str, Any] | None = None
    if row.system == "dojo" and (r.run_dir / "ds_config.json").exists():
        zo = json.loads((r.run_dir / "ds_config.json").read_text()).get("zero_optimization", {})
    elif summary.get("ds_config"):
        zo = summary["ds_config"]["zero_optimization"]
    est = estimate(spec, setup_for(row, spec, zo, gpu, host))
    return {
        "row": row.label(),
        "split": row.split,
        "params": {k: getattr(row, k) for k in row.__dataclass_fields__},
        "zero_optimization": zo,
        "rc": r.proc.returncode,
        "oom": oom,
        "host_killed": "KILLED_FOR_HOST_RAM" in r.neighbours,
        "neighbours": sorted(r.neighbours - {"KILLED_FOR_HOST_RAM"}),
        "wall_s": round(time.time() - r.t0, 1),
        "smi_proc_peak_gib": round(r.gpu_mib / 1024, 3),
        "alloc_gib": summary.get("peak_allocated_gib_after_step1"),
        "reserved_gib": summary.get("peak_reserved_gib_after_step1"),
        "alloc_total_gib": summary.get("peak_allocated_gib"),
        "reserved_total_gib": summary.get("peak_gpu_gib"),
        "host_tree_rss_peak_gib": round(r.rss / 2**30, 3),
        "host_rss_peak_gib": summary.get("host_rss_peak_gib"),
        "host_pinned_peak_gib": summary.get("host_pinned_allocated_peak_gib"),
        "tokens_per_s_after_step1": summary.get("tokens_per_s_after_step1"),
        "est_alloc_gib": round(est.allocated / 2**30, 2),
        "est_gpu_gib": round(est.gpu_total_gib, 2),
        "est_cpu_gib": round(est.cpu_total_gib, 2),
        "est_fits": est.fits,
        "estimate": est.to_dict(),
        "tail": "" if r.proc.returncode == 0 else log[-2500:],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/dojo-bench")
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--budget-gib", type=float, default=132.0)
    ap.add_argument("--host-gib", type=float, default=128.0)
    ap.add_argument("--row-timeout", type=float, default=300.0)
    ap.add_argument("--rows", choices=sorted(ROW_FILES), default="s3", help="which row file")
    ap.add_argument("--only", nargs="*", help="row labels (default: all)")
    ap.add_argument("--make-weights", nargs="*", help="(internal) make these shapes' weights")
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    if a.make_weights:
        for shape in a.make_weights:
            folder = prepare_model(shape, work)
            (folder / "READY").write_text("ok")
            print(f"weights {shape} ready", flush=True)
        return
    from dojo.gpus import list_gpus

    gpu = list_gpus()[0].memory_gib
    rows = [r for r in load_rows(a.rows) if not a.only or r.label() in a.only]
    shapes = list(dict.fromkeys(r.shape for r in rows))
    maker = subprocess.Popen(
        [sys.executable, __file__, "--out", "-", "--work", str(work), "--make-weights", *shapes]
    )
    make_data(work / "pack.jsonl")
    specs: dict[str, Any] = {}
    queue = list(rows)
    running: dict[str, Running] = {}
    retried: set[str] = set()
    results: list[dict[str, Any]] = []
    sampler = Sampler(running, (a.host_gib - 4) * 2**30)

    def stop(signum: int, frame: Any) -> None:  # timeout(1): rows run in their own sessions
        for r in list(running.values()):
            os.killpg(r.proc.pid, 9)
        maker.kill()
        sys.exit(124)

    signal.signal(signal.SIGTERM, stop)
    sampler.start()
    checked = False
    while queue or running:
        ready = {s for s in shapes if (work / f"model-{s}" / "READY").exists()}
        weights_gib = 20.0 if maker.poll() is None else 0.0
        for row in list(queue):
            if row.shape not in ready:
                continue
            if row.shape not in specs:
                specs[row.shape] = resolve_model(str(work / f"model-{row.shape}" / "config.json"))
            est = estimate(
                specs[row.shape], setup_for(row, specs[row.shape], None, gpu, a.host_gib)
            )
            alone = row.expect_oom or not est.fits or row.label() in retried
            need = gpu if alone else min(gpu, est.gpu_total_gib * 1.1 + 2)
            held = sum(r.est for r in running.values())
            limit = a.parallel if checked and sampler.matched else 1
            if alone and running:
                break  # keep order: it waits for the card to be empty
            if (
                not alone
                and running
                and (len(running) >= limit or held + need + weights_gib > a.budget_gib)
            ):
                continue
            run_dir = work / row.label()
            cmd = command(row, work / f"model-{row.shape}", work, run_dir)
            log = (work / f"{row.label()}.log").open("w")
            proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                env={**os.environ, "DOJO_DEBUG": "1", **alloc_env(row)},
            )  # fmt: skip
            with sampler.lock:
                for other in running.values():
                    other.neighbours.add(row.label())
                running[row.label()] = Running(row, proc, run_dir, need)
                running[row.label()].neighbours |= set(running) - {row.label()}
            queue.remove(row)
            print(f"start {row.label()} (est {est.gpu_total_gib:.1f} GiB)", flush=True)
        for label, r in list(running.items()):
            if r.proc.poll() is None and time.time() - r.t0 > a.row_timeout:
                os.killpg(r.proc.pid, 9)
                r.neighbours.add("TIMEOUT")
            if r.proc.poll() is None:
                continue
            with sampler.lock:
                del running[label]
            checked = True
            log = (work / f"{label}.log").read_text()
            res = finish(r, specs[r.row.shape], log, gpu, a.host_gib)
            if res["oom"] and res["neighbours"] and label not in retried and not r.row.expect_oom:
                retried.add(label)
                queue.insert(0, r.row)
                print(f"retry alone {label} (OOM beside {res['neighbours']})", flush=True)
                continue
            results.append(res)
            keep = ("estimate", "tail", "params", "zero_optimization")
            print(json.dumps({k: v for k, v in res.items() if k not in keep}), flush=True)
            if res["rc"] != 0 and not res["oom"]:
                print(res["tail"][-1200:], flush=True)
            Path(a.out).write_text(json.dumps(results, indent=1))
        time.sleep(0.5)
    sampler.stop.set()
    maker.wait()
    print(f"per-process nvidia-smi matched: {sampler.matched}; total smi peak "
          f"{sampler.total_mib / 1024:.1f} GiB", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
