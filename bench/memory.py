"""Memory benchmark: each row of a set (bench/rows.py) runs on the GPU beside `dojo estimate`.

    python bench/memory.py --set heldout-plain-full --dry-run        # CPU: every row's estimate
    python3 bench/memory.py --set NAME [--only ROW ...] --out FILE    # GPU (bash bench/gpu.sh memory)
    ... [--skip-done bench/results/memory-NAME.json]   # a set's next call: the rows not yet run

A row is one `dojo train` run (system "dojo") or one run of the plain HF Trainer + DeepSpeed
script (system "plain", bench/baseline_trainer.py): random bf16 weights of the real shape
(bench/workload.py), 3 optimizer steps (or `Row.steps`) on synthetic chats (packed rows of
exactly seq-len tokens, or fixed-length samples: no padding either way). Measured per process, so
several short rows can share the GPU: nvidia-smi's per-process memory summed over the row's
process tree on each GPU, its fullest GPU's (sampled every 0.2 s), torch's peaks after step 1
from the run's own summary, host RSS of the tree. A row on several GPUs (Row.gpus) runs alone on
GPUs 0..gpus-1, and is refused on a machine with fewer.

The estimate of a dojo row is `dojo estimate` with the same setting flags the row passes to
`dojo train` (dojo_flags, in process through dojo's CLI), so the bench never re-implements dojo's
resolution; a plain row's is dojo.estimate's Python API for what bench/baseline_trainer.py runs
(no Liger, no packing, SDPA, its DeepSpeed JSON, or no DeepSpeed at all). After a run, ``ran``
keeps what really ran (the DeepSpeed zero_optimization, the attention kernel), and ``estimate_now``
re-estimates a measured row with those pinned (bench/report.py): an old row is judged by today's
estimator on the settings it ran with, not on today's defaults.

Scheduling: rows are admitted while the sum of their (estimate x 1.1 + 2 GiB) stays under
--budget-gib and the sum of their estimated host memory under --host-gib less 8 GiB; a row the estimate says will not fit (or marked expect_oom) runs alone; a row that
runs out of memory beside others is re-run alone once; the first row runs alone to check that the
per-process query works on this machine (if not, every row runs alone). One background process
makes each shape's weights once.
"""

import argparse
import contextlib
import dataclasses
import io
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(BENCH))

from provenance import git_commit, gpu_name  # noqa: E402
from rows import MEMORY_SETS, Row, crashed, objective_of  # noqa: E402
from workload import (  # noqa: E402
    fixed_data,
    pack_data,
    preference_fixed_data,
    prepare_model,
    write_config,
)

H200_GIB = 143771 / 1024
"""nvidia-smi memory.total on the lent H200 (GiB): the GPU size dry runs and reports use."""
CARD_SPARE_GIB = 7.5
"""GPU memory the scheduler leaves free beside the rows' summed needs: margin for what a row's
estimate misses, so that one row's miss does not put its neighbours out of memory."""
HOST_GIB = 131961788 / 2**20
"""MemTotal on the lent machine (GiB)."""
EXPANDABLE = "expandable_segments:True"


def expandable(row: Row) -> bool:
    """The row runs under PyTorch's expandable segments (either field says so)."""
    return row.expandable or EXPANDABLE in row.alloc


def alloc_env(row: Row) -> dict[str, str]:
    """The run's PYTORCH_CUDA_ALLOC_CONF: the row's alloc, or expandable segments, or none."""
    if row.alloc:
        return {"PYTORCH_CUDA_ALLOC_CONF": row.alloc}
    return {"PYTORCH_CUDA_ALLOC_CONF": EXPANDABLE} if row.expandable else {}


def dojo_flags(row: Row) -> list[str]:
    """The settings of a dojo row: the same flags go to `dojo train` and to `dojo estimate`.
    Each is explicit, so the row means what it says whatever dojo's defaults become."""
    liger = "loss" if row.liger_loss else ("on" if row.liger else "off")
    flags = [
        "--method", row.method, "--zero", "none" if row.stage < 0 else str(row.stage),
        "--offload", row.offload,
        "--micro-batch", str(row.micro_batch), "--seq-len", str(row.seq_len),
        "--packing" if row.packing else "--no-packing", "--liger", liger,
        "--grad-ckpt" if row.grad_ckpt else "--no-grad-ckpt", "--compile", compile_flag(row),
        "--expandable-segments", "on" if expandable(row) else "off",
    ]  # fmt: skip
    if row.offload != "none":
        flags += ["--optimizer", "ds"]  # DeepSpeed offloads only its own optimizer
    if row.optim != "auto":
        flags += ["--optim", row.optim]
    if row.attn != "auto":
        flags += ["--attn", row.attn]
    return flags + list(row.extra)


def compile_flag(row: Row) -> str:
    """--compile of a row: "auto" rows ran when dojo's auto compiled full fine-tuning at ZeRO 0-2
    (the only such row), so on."""
    return "on" if row.compile == "auto" else row.compile


def data_for(row: Row, work: Path) -> Path:
    """Packed dojo rows read the packing chats; preference rows pairs cut to exactly seq-len a
    sequence; the rest fixed-length samples (no padding)."""
    if row.system == "dojo" and objective_of(row.extra) != "sft":
        return preference_fixed_data(work, row.seq_len)
    if row.packing and row.system == "dojo":
        return pack_data(work)
    return fixed_data(work, row.seq_len)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def memsnap_env(row: Row) -> dict[str, str]:
    """With DOJO_BENCH_MEMSNAP=DIR, each row's allocator history goes to DIR/<row label>/."""
    top = os.environ.get("DOJO_BENCH_MEMSNAP")
    return {"DOJO_BENCH_MEMSNAP": os.path.join(top, row.label())} if top else {}


def command(row: Row, model: Path, data: Path, run_dir: Path, gpu: int = 0) -> list[str]:
    """The argv that runs the row on GPU `gpu` (a row on several GPUs: on 0..gpus-1)."""
    gpus = ",".join(str(i) for i in range(row.gpus)) if row.gpus > 1 else str(gpu)
    if row.system == "plain":
        return [
            sys.executable, "-m", "deepspeed.launcher.runner", "--include", f"localhost:{gpus}",
            "--master_port", str(free_port()), str(BENCH / "baseline_trainer.py"),
            "--model", str(model), "--data", str(data), "--out", str(run_dir),
            "--seq-len", str(row.seq_len), "--micro-batch", str(row.micro_batch),
            "--max-steps", str(row.steps), "--zero", "none" if row.stage < 0 else str(row.stage),
            "--method", row.method, "--offload", row.offload,
            *(["--grad-ckpt"] if row.grad_ckpt else []),
        ]  # fmt: skip
    return [
        sys.executable, "-m", "dojo", "train", "--gpus", gpus, "--model", str(model),
        "--data", str(data), "--template", "chatml", *dojo_flags(row),
        "--max-steps", str(row.steps), "--save-steps", "0", "--no-save-model",
        # rows run side by side on one GPU, and an expect_oom row is one dojo refuses
        "--output-dir", str(run_dir), "--force", "--skip-fit-check",
    ]  # fmt: skip


class Stopped(BaseException):
    """The call's time limit (timeout(1)'s SIGTERM) ended the run; main exits 124 on it."""


def dojo_cli(argv: list[str]) -> str:
    """`dojo ARGV` in this process through dojo's entry point; its stdout (an error raises)."""
    from dojo.cli import main

    out, err = io.StringIO(), io.StringIO()
    code: Any = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
        except SystemExit as e:
            code = e.code
    if code not in (0, None):
        raise RuntimeError(f"dojo {' '.join(argv)} exited {code}: {err.getvalue().strip()}")
    return out.getvalue()


def kernels_of(run: dict[str, Any]) -> dict[str, Any]:
    """What a result keeps of `dojo estimate --json`'s resolved run: its kernels (read with .get:
    the schema may change); the rest of the run is the row's own flags."""
    k, d = run.get("kernels") or {}, run.get("data") or {}
    if not k:
        return {}
    return {
        "attn": k.get("attn"),
        "liger": k.get("liger") in ("on", "loss"),
        "liger_kernels": k.get("liger") == "on",
        "compile": k.get("compile") == "on",
        "expandable_segments": k.get("expandable_segments") == "on",
        "packing": d.get("packing"),
    }


def dojo_estimate(model: Path, flags: list[str], gpu_gib: float, host_gib: float) -> dict[str, Any]:
    """`dojo estimate --json` with the row's flags: GPU total, allocated, host, verdict."""
    argv = ["estimate", "--model", str(model), *flags, "--gpu-memory", f"{gpu_gib:.3f}",
            "--cpu-memory", f"{host_gib:.3f}", "--json"]  # fmt: skip
    try:
        doc = json.loads(dojo_cli(argv))
    except RuntimeError as e:  # today's dojo refuses these settings: say why, estimate nothing
        said = [ln for ln in str(e).splitlines() if "error:" in ln] or [str(e)]
        return {"error": said[0].split("error:", 1)[-1].strip()}
    row, run = doc["rows"][0], (doc.get("runs") or [{}])[0]
    g = row["gpu_gib"]
    return {
        "gpu_gib": g["total"],
        # torch's max allocated: the total less the allocator's reserve and what is outside it
        "alloc_gib": round(g["total"] - g["allocator_reserve"] - g["overhead"], 3),
        "cpu_gib": row["cpu_gib"]["total"],
        "fits": row["fits"],
        "verdict": row["verdict"],
        "gpu_breakdown": g,
        # not in gpu_gib: what ZeRO-1/2's step may map anew beyond it (some runs do)
        "step_remap_gib": row.get("step_remap_gib", 0.0),
        "keeps_grad_partition": row.get("keeps_grad_partition", False),
        "resolved": kernels_of(run),
    }


def plain_zero(row: Row) -> dict[str, Any]:
    """The zero_optimization bench/baseline_trainer.py writes for the row (none without DS)."""
    from baseline_trainer import ds_config

    return {} if row.stage < 0 else ds_config(row.stage, row.offload, {})["zero_optimization"]


def plain_estimate(
    row: Row, zo: dict[str, Any] | None, model: Path, gpu_gib: float, host_gib: float
) -> dict[str, Any]:
    """dojo.estimate for what the plain script runs: HF's loss (no Liger), padded fixed-length
    samples (no packing), SDPA, PEFT's defaults, its DeepSpeed JSON (zo) or no DeepSpeed."""
    from dojo.estimate import GIB, Setup, estimate
    from dojo.modelspec import resolve_model

    stage: Any = "none" if row.stage < 0 else row.stage
    zo = plain_zero(row) if zo is None else zo
    rb, pb = zo.get("reduce_bucket_size", "auto"), zo.get("stage3_prefetch_bucket_size", "auto")
    setup = Setup.of(
        stage=stage, method=row.method, micro_batch=row.micro_batch, seq_len=row.seq_len,
        grad_ckpt=row.grad_ckpt, overlap_comm=bool(zo.get("overlap_comm", stage == 3)),
        bucket_size="auto" if rb in ("auto", None) else int(float(rb)),
        offload=row.offload, lora_dropout=0.05, liger="off", packing=False,
        prefetch_bucket_size="auto" if pb in ("auto", None) or stage != 3 else int(float(pb)),
        expandable_segments="on" if expandable(row) else "off", attn="sdpa",
        sub_group_size=int(float(zo.get("sub_group_size", 1e9))),
        gpu_memory_gib=gpu_gib, cpu_memory_gib=host_gib,
    )  # fmt: skip
    e = estimate(resolve_model(str(model / "config.json")), setup)
    return {
        "gpu_gib": round(e.gpu_total_gib, 3),
        "alloc_gib": round(e.allocated / GIB, 3),
        "cpu_gib": round(e.cpu_total_gib, 3),
        "fits": e.fits,
        "verdict": e.verdict,
        "gpu_breakdown": e.to_dict()["gpu_gib"],
    }


def model_dir(shape: str, work: Path) -> Path:
    """work/model-SHAPE with its config.json (weights, when a GPU run made them, beside it)."""
    return write_config(shape, work)


def pinned_flags(row: Row, ran: dict[str, Any], hidden: int) -> list[str]:
    """Flags that pin what a dojo row really ran where its own flags left dojo's auto: the
    DeepSpeed zero_optimization of the run and its attention kernel. Missing keys mean DeepSpeed's
    and HF's values of the time: 1e9 sub-groups, 0.9 x hidden^2 prefetch, no leaf modules."""
    zo, given = ran.get("zero_optimization") or {}, set(dojo_flags(row))
    out: list[str] = []
    rb = zo.get("reduce_bucket_size")
    if rb not in (None, "auto") and "--bucket-size" not in given:
        out += ["--bucket-size", str(int(float(rb)))]
    if "overlap_comm" in zo and not given & {"--overlap-comm", "--no-overlap-comm"}:
        out.append("--overlap-comm" if zo["overlap_comm"] else "--no-overlap-comm")
    if row.stage == 3:
        pb = zo.get("stage3_prefetch_bucket_size", "auto")
        prefetch = int(0.9 * hidden * hidden) if pb in ("auto", None) else int(float(pb))
        leaf = bool((zo.get("leaf_module") or {}).get("classes"))
        out += ["--sub-group-size", str(int(float(zo.get("sub_group_size", 1e9))))]
        out += ["--prefetch-bucket-size", str(prefetch), "--z3-leaf", "auto" if leaf else "off"]
    if ran.get("attn") and row.attn == "auto":
        out += ["--attn", str(ran["attn"])]
    return out


def estimate_row(
    row: Row, work: Path, gpu_gib: float, host_gib: float, ran: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The row's estimate: before a run (ran=None) from its flags alone; for a measured row,
    with what ran pinned."""
    model = model_dir(row.shape, work)
    if row.system == "plain":
        zo = None if ran is None else (ran.get("zero_optimization") or {})
        return plain_estimate(row, zo, model, gpu_gib, host_gib)
    flags = dojo_flags(row) + (["--num-gpus", str(row.gpus)] if row.gpus > 1 else [])
    if ran is not None:
        from dojo.modelspec import resolve_model

        flags += pinned_flags(row, ran, resolve_model(str(model / "config.json")).hidden_size)
    return dojo_estimate(model, flags, gpu_gib, host_gib)


def verdict_right(m: dict[str, Any], est: dict[str, Any], host_gib: float = HOST_GIB) -> bool:
    """An OOM run must be "does not fit"; a run killed for host RAM must not fit on the host;
    a run that finished "fits" or "tight"."""
    if m.get("oom"):
        return est["verdict"] == "does not fit"
    if m.get("host_killed") or m.get("host_oom"):
        return est["verdict"] == "does not fit" and est["cpu_gib"] > host_gib
    return est["verdict"] in ("fits", "tight")


def rows_of(name: str, only: list[str] | None) -> list[Row]:
    rows = list(MEMORY_SETS[name].rows)
    unknown = set(only or []) - {r.label() for r in rows}
    if unknown:
        raise SystemExit(f"no such row in {name}: {', '.join(sorted(unknown))}")
    return [r for r in rows if not only or r.label() in only]


def left_after(name: str, only: list[str] | None, done_file: Path) -> list[str]:
    """The labels of ``name`` (or of ``only``) that ``done_file`` has no run of, or only a
    crashed one, in the set's order: what a set's next GPU call runs (its call record then names
    them, as --only does)."""
    results = json.loads(done_file.read_text())["rows"] if done_file.exists() else []
    done = {m["row"] for m in results if not crashed(m)}
    left = [r.label() for r in rows_of(name, only) if r.label() not in done]
    if not left:
        raise SystemExit(f"every row of {name} asked for is in {done_file}: nothing left to run")
    return left


def dry_run(name: str, only: list[str] | None, budget_gib: float) -> None:
    """Every row resolved through `dojo estimate` (dojo rows) or the estimator (plain rows), as
    the GPU run's scheduler sees it before anything launches; no GPU, no torch."""
    rows = rows_of(name, only)
    need = 0.0
    print(f"{name}: {MEMORY_SETS[name].about}\n")
    print(
        "| row | split | estimate GiB | allocated GiB | host GiB | verdict |\n|---|---|---|---|---|---|"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for r in rows:
            e = estimate_row(r, Path(tmp), H200_GIB, HOST_GIB)
            if "error" in e:
                print(f"| {r.label()} | {r.split} | refused by dojo: {e['error']} | | | |")
                continue
            need += e["gpu_gib"] * 1.1 + 2
            print(f"| {r.label()} | {r.split} | {e['gpu_gib']:.1f} | {e['alloc_gib']:.1f} "
                  f"| {e['cpu_gib']:.1f} | {e['verdict']} |")  # fmt: skip
    shapes = sorted({r.shape for r in rows})
    print(f"\n{len(rows)} rows, shapes {', '.join(shapes)}; scheduler need sum(est x 1.1 + 2) = "
          f"{need:.0f} GiB = {need / budget_gib:.1f} x the {budget_gib:.0f} GiB budget")  # fmt: skip


# ---------------------------------------------------------------------------- the GPU run


def host_used() -> int:
    """MemTotal - MemAvailable, bytes (what the kernel's OOM killer runs out of)."""
    info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return (int(info["MemTotal"].split()[0]) - int(info["MemAvailable"].split()[0])) * 1024


class Running:
    def __init__(
        self, row: Row, proc: subprocess.Popen[str], run_dir: Path, need: float, host: float = 0.0
    ) -> None:
        self.row, self.proc, self.run_dir, self.need = row, proc, run_dir, need
        self.host = host  # the row's estimated host memory, GiB (admission)
        self.t0 = time.time()
        self.gpu_mib = 0.0
        self.rss = 0
        self.neighbours: set[str] = set()
        self.pids: set[int] = {proc.pid}


class Sampler(threading.Thread):
    """One nvidia-smi query per tick for all rows; per-process memory by pid, host RSS by tree.
    A row past the host's RAM (less a margin) is killed before the kernel picks a victim."""

    def __init__(self, running: dict[str, Running], host_limit: float) -> None:
        super().__init__(daemon=True)
        self.running, self.host_limit = running, host_limit
        self.stop = threading.Event()
        self.matched = False
        self.total_mib = 0.0
        self.lock = threading.Lock()

    def run(self) -> None:
        import psutil

        q = ["nvidia-smi", "--query-compute-apps=pid,gpu_uuid,used_memory",
             "--format=csv,noheader,nounits"]  # fmt: skip
        while not self.stop.is_set():
            used: dict[tuple[int, str], float] = {}  # (pid, GPU) -> MiB
            for line in subprocess.run(q, capture_output=True, text=True).stdout.splitlines():
                with contextlib.suppress(ValueError):
                    pid, gpu, mib = (x.strip() for x in line.split(","))
                    used[(int(pid), gpu)] = float(mib)
            with self.lock:
                rows = list(self.running.values())
            for r in rows:
                try:
                    kids = psutil.Process(r.proc.pid).children(recursive=True)
                except psutil.NoSuchProcess:
                    continue
                r.pids |= {k.pid for k in kids}
                g = row_gpu_mib(used, r.pids)
                self.matched = self.matched or g > 0
                r.gpu_mib = max(r.gpu_mib, g)
                rss = 0
                for k in kids:
                    with contextlib.suppress(psutil.NoSuchProcess):
                        rss += k.memory_info().rss
                r.rss = max(r.rss, rss)
            self.total_mib = max(self.total_mib, sum(used.values()))
            if host_used() > self.host_limit and rows:
                big = max(rows, key=lambda r: r.rss)
                big.neighbours.add("KILLED_FOR_HOST_RAM")
                os.killpg(big.proc.pid, 9)
            self.stop.wait(0.2)


def row_gpu_mib(used: dict[tuple[int, str], float], pids: set[int]) -> float:
    """A row's memory on its fullest GPU: its processes' nvidia-smi memory summed per GPU (one
    rank a GPU on a row over several; a single-GPU row sums its whole tree)."""
    per_gpu: dict[str, float] = {}
    for (pid, gpu), mib in used.items():
        if pid in pids:
            per_gpu[gpu] = per_gpu.get(gpu, 0.0) + mib
    return max(per_gpu.values(), default=0.0)


def finish(r: Running, log: str, work: Path, gpu_gib: float, host_gib: float) -> dict[str, Any]:
    """The row's result: what was measured, what ran, the estimate with what ran pinned."""
    row = r.row
    name = "baseline_summary.json" if row.system == "plain" else "dojo_summary.json"
    f = r.run_dir / name
    summary = json.loads(f.read_text()) if f.exists() else {}
    zo: dict[str, Any] | None = None
    if row.system == "dojo" and (r.run_dir / "ds_config.json").exists():
        zo = json.loads((r.run_dir / "ds_config.json").read_text()).get("zero_optimization", {})
    elif summary.get("ds_config"):
        zo = summary["ds_config"]["zero_optimization"]
    ran: dict[str, Any] = {"zero_optimization": zo}
    if row.system == "dojo":  # dojo's resolution of the same flags on this machine
        ran["attn"] = estimate_row(row, work, gpu_gib, host_gib).get("resolved", {}).get("attn")
        if row.objective != "sft":  # every preference objective: TRL's fused LM head
            ran["lm_head"] = "chunked"
        if summary.get("kept_grad_partition"):  # dojo.train.worker.zero_grads
            ran["grad_partition"] = "kept"
    return {
        "row": row.label(),
        "split": row.split,
        "call": 0,
        "params": dataclasses.asdict(row),
        "rc": r.proc.returncode,
        "oom": "out of memory" in log.lower() or "OutOfMemoryError" in log,
        "host_killed": "KILLED_FOR_HOST_RAM" in r.neighbours,
        "neighbours": sorted(r.neighbours - {"KILLED_FOR_HOST_RAM"}),
        "wall_s": round(time.time() - r.t0, 1),
        "smi_proc_peak_gib": round(r.gpu_mib / 1024, 3),
        "alloc_gib": summary.get("peak_allocated_gib_after_step1"),
        "reserved_gib": summary.get("peak_reserved_gib_after_step1"),
        "alloc_total_gib": summary.get("peak_allocated_gib"),
        "reserved_total_gib": summary.get("peak_gpu_gib") or summary.get("peak_reserved_gib"),
        "host_tree_rss_peak_gib": round(r.rss / 2**30, 3),
        "host_rss_peak_gib": summary.get("host_rss_peak_gib"),
        "host_pinned_peak_gib": summary.get("host_pinned_allocated_peak_gib"),
        "tokens_per_s_after_step1": summary.get("tokens_per_s_after_step1"),
        "ran": ran,
        "estimate": estimate_row(row, work, gpu_gib, host_gib, ran),
        "tail": "" if r.proc.returncode == 0 else log[-2500:],
    }


def run_gpu(a: argparse.Namespace) -> None:
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    from dojo.gpus import list_gpus

    gpus = list_gpus()
    gpu_gib = gpus[0].memory_gib
    budget_gib = a.budget_gib or gpu_gib - CARD_SPARE_GIB  # an H100's card is not an H200's
    rows = rows_of(a.set, a.only)
    shapes = list(dict.fromkeys(r.shape for r in rows))
    maker = subprocess.Popen(
        [sys.executable, __file__, "--set", a.set, "--work", str(work), "--make-weights", *shapes]
    )
    invocation = f"bash bench/gpu.sh memory {a.set}" + "".join(f" {o}" for o in a.only or [])
    call = {
        "command": invocation,
        "commit": git_commit(),
        "device": gpu_name(),
        "gpu_gib": gpu_gib,
        "host_gib": a.host_gib,
    }
    doc: dict[str, Any] = {"benchmark": "memory", "set": a.set, "command": invocation,
                           "calls": [call], "rows": []}  # fmt: skip
    queue = list(rows)
    running: dict[str, Running] = {}
    retried: set[str] = set()
    sampler = Sampler(running, (a.host_gib - 4) * 2**30)

    def stop(signum: int, frame: Any) -> None:  # timeout(1): rows run in their own sessions
        for r in list(running.values()):
            os.killpg(r.proc.pid, 9)
        maker.kill()
        raise Stopped  # not SystemExit: dojo_cli, which may be running, takes that as dojo's

    signal.signal(signal.SIGTERM, stop)
    sampler.start()
    checked = False
    while queue or running:
        ready = {s for s in shapes if (work / f"model-{s}" / "READY").exists()}
        weights_gib = 20.0 if maker.poll() is None else 0.0
        for row in list(queue):
            if row.shape not in ready:
                continue
            est = estimate_row(row, work, gpu_gib, a.host_gib)
            if row.gpus > len(gpus):
                est = {"error": f"the row trains on {row.gpus} GPUs, this machine has {len(gpus)}"}
            if "error" in est:  # dojo train would refuse it too
                queue.remove(row)
                doc["rows"].append({"row": row.label(), "split": row.split, "call": 0,
                                    "params": dataclasses.asdict(row), "refused": est["error"]})  # fmt: skip
                print(f"refused {row.label()}: {est['error']}", flush=True)
                continue
            alone = row.expect_oom or not est["fits"] or row.label() in retried or row.gpus > 1
            need = gpu_gib if alone else min(gpu_gib, est["gpu_gib"] * 1.1 + 2)
            held = sum(r.need for r in running.values())
            # CPU-offload rows hold tens of GiB of host memory each: admit by host memory too
            host_held = sum(r.host for r in running.values())
            host_full = host_held + est["cpu_gib"] > a.host_gib - 8
            limit = a.parallel if checked and sampler.matched else 1
            if alone and running:
                break  # keep order: it waits for the card to be empty
            if (
                running
                and not alone
                and (len(running) >= limit or held + need + weights_gib > budget_gib or host_full)
            ):
                continue
            run_dir = work / row.label()
            cmd = command(row, work / f"model-{row.shape}", data_for(row, work), run_dir)
            log = (work / f"{row.label()}.log").open("w")
            proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                env={**os.environ, "DOJO_DEBUG": "1", **alloc_env(row), **memsnap_env(row)},
            )  # fmt: skip
            with sampler.lock:
                for other in running.values():
                    other.neighbours.add(row.label())
                running[row.label()] = Running(row, proc, run_dir, need, est["cpu_gib"])
                running[row.label()].neighbours |= set(running) - {row.label()}
            queue.remove(row)
            print(f"start {row.label()} (est {est['gpu_gib']:.1f} GiB)", flush=True)
        for label, r in list(running.items()):
            if r.proc.poll() is None and time.time() - r.t0 > a.row_timeout:
                os.killpg(r.proc.pid, 9)
                r.neighbours.add("TIMEOUT")
            if r.proc.poll() is None:
                continue
            with sampler.lock:
                del running[label]
            checked = True
            res = finish(r, (work / f"{label}.log").read_text(), work, gpu_gib, a.host_gib)
            if res["oom"] and res["neighbours"] and label not in retried and not r.row.expect_oom:
                retried.add(label)
                queue.insert(0, r.row)
                print(f"retry alone {label} (OOM beside {res['neighbours']})", flush=True)
                continue
            doc["rows"].append(res)
            short = {k: v for k, v in res.items() if k not in ("tail", "params", "ran")}
            print(json.dumps(short), flush=True)
            if res["rc"] != 0 and not res["oom"]:
                print(res["tail"][-1200:], flush=True)
            Path(a.out).write_text(json.dumps(doc, indent=1))
        time.sleep(0.5)
    sampler.stop.set()
    maker.wait()
    print(f"per-process nvidia-smi matched: {sampler.matched}; total smi peak "
          f"{sampler.total_mib / 1024:.1f} GiB", flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--set", required=True, choices=sorted(MEMORY_SETS))
    ap.add_argument("--only", nargs="*", help="row labels (default: every row of the set)")
    ap.add_argument("--out", help="result file (GPU runs)")
    ap.add_argument("--skip-done", metavar="FILE",
                    help="leave out the rows this result file already has (a set's next call)")  # fmt: skip
    ap.add_argument("--dry-run", action="store_true", help="estimate every row; run nothing")
    ap.add_argument("--work", default="/tmp/dojo-bench")
    ap.add_argument("--parallel", type=int, default=7, help="rows at once on the GPU")
    ap.add_argument("--budget-gib", type=float, default=None,
                    help=f"GPU memory the rows side by side may need together (default: the card's "
                    f"less {CARD_SPARE_GIB} GiB, 132 on an H200)")  # fmt: skip
    ap.add_argument("--host-gib", type=float, default=128.0)
    ap.add_argument("--row-timeout", type=float, default=300.0)
    ap.add_argument("--make-weights", nargs="*", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.skip_done:
        a.only = left_after(a.set, a.only, Path(a.skip_done))
    if a.make_weights:
        for shape in a.make_weights:
            folder = prepare_model(shape, Path(a.work))
            (folder / "READY").write_text("ok")
            print(f"weights {shape} ready", flush=True)
    elif a.dry_run:
        dry_run(a.set, a.only, a.budget_gib or H200_GIB - CARD_SPARE_GIB)
    elif not a.out:
        ap.error("--out FILE is needed to run on the GPU (or --dry-run)")
    else:
        try:
            run_gpu(a)
        except Stopped:
            sys.exit(124)  # the rows that finished are in --out already


if __name__ == "__main__":
    main()
