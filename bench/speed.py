"""Speed benchmark: every system of a set's rows (bench/rows.py), alternating, in one GPU call.

    python bench/speed.py --set peer --dry-run                       # CPU: the plan and its cost
    python3 bench/speed.py --set peer --out FILE [--only ROW ...]    # GPU (bash bench/gpu.sh speed)
    python bench/speed.py --calibrate     # CPU: recorded runs' wall times against the cost model

Systems: "plain" (bench/baseline_trainer.py: HF Trainer + DeepSpeed, no packing), "trl" and
"trl-ds" (bench/trl_sft.py: TRL's SFTTrainer with its speed settings, without and with the plain
script's DeepSpeed JSON), "dojo" (`dojo train` with its defaults and --packing) and "dojo FLAGS"
(dojo's variants). A variant that resolves to the same run as dojo's defaults (`dojo estimate
--json`'s resolved run, compared whole) is left out: it is the same run.

Method: with --warmup, each system of a row runs once first (--warmup-steps steps, not
recorded), so no system's first recorded run pays the machine's cold caches (Triton, Inductor,
cuDNN's per-shape kernels); then --repeats rounds of every system in the row's order, so each
system alternates with the others; report.py takes each system's median and divides by the plain
script's median of the same row in the same call. Every run: real (non-padding) tokens/s after
step 1 and per 10-step window (bench/steps.py: a later window slower than the first means the
run recompiles), MFU, torch's peaks after step 1, nvidia-smi's peak for the GPU, the logged losses,
and for dojo's compiled runs the graphs compiled after step 1 (its dojo_summary.json).

GPUs: with one GPU every run is sequential. With several (--gpus 0,1,...), each row runs on one
GPU, its systems alternating there (the default); with --spread the systems of one round run at
once on different GPUs (round r puts system i on the r-th next free GPU), for rows too long for
one GPU in one call. Rows start in the set's order (its keep order), each only if its estimated cost
fits before --limit-s; a row that does not is dropped and the next one is tried.
The plan (--dry-run) is the same scheduler on the estimated durations.
"""

import argparse
import heapq
import json
import os
import queue
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(BENCH))

from provenance import git_commit, gpu_name  # noqa: E402
from rows import SPEED_SETS, Case  # noqa: E402
from steps import rates  # noqa: E402
from workload import speed_data, write_config  # noqa: E402

PEAK_BF16 = 989e12
"""H200 SXM dense bf16 FLOP/s (NVIDIA datasheet; the same Hopper tensor cores as the H100)."""
LOG_STEPS = 10
"""Every system logs (and so sums its token count) every 10 steps: bench/steps.py's windows."""

# Cost model of one run on the H200, seconds (the plan and the limit's drop rule use it): a
# start-up, the steps, and what a run adds to them. The l1b terms are fitted on the wall time of every run
# that bench/results/speed-*.json records (`python bench/speed.py --calibrate` lists them against
# their estimates), so that about 9 runs in 10 end within their estimate, not every one: a row's
# runs sum their errors, and the GPU call's limit keeps 40 s spare (bench/gpu.sh). Most of those
# runs are l1b without checkpointing; the l7b and l8b start-ups come from one call each (15-step
# runs with checkpointing), their steps and checkpointing's from earlier calls that recorded no
# wall time per run.
STARTUP_S = {"l1b": 38.0, "l7b": 45.0, "l8b": 52.0}
"""A run's time beyond its steps (launch, imports, weights, tokenizing, the first step, the end)
once its system has run the row's shapes in this call. l1b: 29-44 s in speed-peer.json and
speed-peer-variants.json (plain, dojo and its variants), speed-preference.json's 1b-dpo-lora-z2,
speed-kto.json and speed-orpo-simpo.json (TRL's scripts and trainers: their tokenizing is in it,
they start no later than dojo). l7b: speed-peer.json's 7b-full-z3-ckpt (trl-ds and dojo, 15
steps): 52-57 s, 42-46 s beyond their steps; l8b: its 8b-lora-ckpt and 8b-qlora-ckpt (plain,
trl and dojo, 10 and 15 steps): 40-73 s, the plain script's 10-step runs 60-73 s, about 45-55 s
beyond their steps (trl's less the launcher's NO_LAUNCHER_S)."""
COLD_S = 6.0
"""A system's first run of a row in the call (its warm-up, or its first round without one) pays
the cold caches (Triton, cuDNN's per-shape kernels): the l1b warm-ups of those files, 3 steps,
take 31-44 s, about as long as the same systems' 20-50-step runs after them."""
NO_LAUNCHER_S = 12.0
""""trl" (bench/trl_sft.py without DeepSpeed) is one process; every other system starts under
DeepSpeed's launcher, a parent process that imports DeepSpeed first: speed-peer.json's trl runs
take 19-22 s beyond their steps, the plain script's 38-41 s and dojo's 31-36 s."""
COMPILE_S = {"l1b": 12.0, "l7b": 60.0, "l8b": 20.0}
"""Regional compile's first step, dojo runs whose resolved run compiles. l1b: the "dojo --compile
on" runs of speed-peer-variants.json took 0-12 s longer than dojo's default beside them in the
same call (warm-ups 6-12 s, Inductor's cache then warm); l8b: 8b-lora-ckpt and 8b-qlora-ckpt
there, 11-19 s longer than the default in a call without warm-ups (each run cold); l7b not
measured."""
REF_MODEL_S = {"l1b": 15.0}
"""Full DPO and KTO build a reference model beside the policy (under ZeRO-3, partitioned too):
speed-preference.json's 1b-dpo-full-z3 runs take 47-53 s beyond their steps, 1b-dpo-lora-z2's
28-43 s. Its forward each step is in PREF_STEP_X (a LoRA reference is the policy with its
adapters off: 1b-dpo-full-z3's steps are no slower than 1b-dpo-lora-z2's in the same call)."""
TRL_SAVE_S = {"l1b": 0.0}
"""TRL's DPO and KTO scripts save the model at their end. l1b: not seen (speed-preference.json:
trl-dpo's 1b-dpo-full-z3 runs, 2.5 GB gathered under ZeRO-3, end as soon as dojo's, which saves
nothing; a LoRA run saves only its adapter). Other shapes: 30 s, not measured."""
PREP_S = {"l1b": 20.0, "l7b": 30.0, "l8b": 35.0}
"""Before the first run, once per call: the data, the attention lengths (2-4 s on a CPU), the
DeepSpeed JSONs' dry runs and a shape's random weights (a child process that imports torch and
writes them: 2.5 GB at l1b; the 8B memory call: 20 s to write them). The plan alone uses it: the
drop rule reads the clock, which counts it. Each call records its own as setup_s."""
STEP_S = {("l1b", False): 0.4, ("l1b", True): 0.6, ("l7b", True): 1.0, ("l8b", True): 1.8}
"""Seconds a step, by shape and checkpointing: the slowest system's. l1b without checkpointing:
TRL's SFT trainer, 0.36-0.42 s in speed-peer.json (the plain script 0.24-0.35 s, dojo
0.16-0.22 s); the others from earlier calls (the plain script's)."""
PREF_STEP_X = 1.5
"""A preference row's step against an SFT row's of its shape: a pair is two sequences (KTO's
unpaired row one, padded) and nothing is packed. The slowest systems' l1b steps in
speed-preference.json, speed-kto.json and speed-orpo-simpo.json: 0.32-0.71 s, 9 in 10 within
0.6 s (1.5 x 0.4)."""


@dataclass
class Run:
    row: str
    system: str
    rep: int  # -1 = the warm-up
    steps: int
    est_s: float


@dataclass
class RowPlan:
    name: str
    case: Case
    systems: list[str]
    skipped: dict[str, str]  # variant -> why it does not run
    waves: list[list[Run]]  # the warm-up (if any), then one wave per round
    width: int  # GPUs the row holds while it runs: 1, or one per system with --spread
    gpus: list[int] = field(default_factory=list)
    dropped: str = ""

    def assign(self, wave: int) -> list[tuple[Run, int]]:
        """Each run of a wave with its GPU slot: system i of round r on slot (i + r) mod width,
        so with --spread every system moves to another GPU each round."""
        return [(r, (i + wave) % self.width) for i, r in enumerate(self.waves[wave])]

    def wave_s(self, wave: int) -> float:
        """A wave's estimated duration: the busiest slot's runs, one after another."""
        per = [0.0] * self.width
        for r, slot in self.assign(wave):
            per[slot] += r.est_s
        return max(per)

    def cost_s(self) -> float:
        return sum(self.wave_s(w) for w in range(len(self.waves)))


def dojo_variant_flags(system: str) -> list[str]:
    """ "dojo --compile off" -> ["--compile", "off"]."""
    return shlex.split(system)[1:]


def merge_flags(base: list[str], extra: list[str]) -> list[str]:
    """base with extra's flags: a flag already in base gets extra's value, others are appended."""
    out = list(base)
    i = 0
    while i < len(extra):
        flag = extra[i]
        has_value = i + 1 < len(extra) and not extra[i + 1].startswith("--")
        value = [extra[i + 1]] if has_value else []
        if flag in out and has_value:
            out[out.index(flag) + 1] = value[0]
        else:
            out += [flag, *value]
        i += 1 + len(value)
    return out


def dojo_settings(case: Case, system: str) -> list[str]:
    """A dojo system's setting flags (train and estimate): the row's, then the variant's. A
    preference row trains its objective without packing (TRL's trainers pad each answer)."""
    data = ["--packing"] if case.objective == "sft" else ["--objective", case.objective]
    base = [
        "--method", case.method, "--zero", str(case.zero), "--micro-batch", str(case.micro_batch),
        "--seq-len", str(case.seq_len), *data,
        "--grad-ckpt" if case.grad_ckpt else "--no-grad-ckpt",
    ]  # fmt: skip
    return merge_flags(base, dojo_variant_flags(system))


def resolved(model: Path, flags: list[str]) -> dict[str, Any]:
    """The run dojo would launch with these flags (`dojo estimate --json`'s resolved run), less
    what describes the machine rather than the run, and the estimate's verdict on the H200."""
    from memory import H200_GIB, HOST_GIB, dojo_cli

    argv = ["estimate", "--model", str(model), *flags, "--gpu-memory", f"{H200_GIB:.3f}",
            "--cpu-memory", f"{HOST_GIB:.3f}", "--json"]  # fmt: skip
    doc = json.loads(dojo_cli(argv))
    run = dict((doc.get("runs") or [{}])[0])
    for k in ("assumed", "machine", "machine_assumed"):
        run.pop(k, None)
    run["_verdict"] = doc["rows"][0]["verdict"]
    return run


def systems_of(case: Case, model: Path) -> tuple[list[str], dict[str, str]]:
    """The row's systems, less dojo variants that resolve to dojo's defaults."""
    keep, skipped = [], {}
    base: dict[str, Any] | None = None
    for s in case.systems:
        if not s.startswith("dojo "):
            keep.append(s)
            continue
        if base is None:
            base = resolved(model, dojo_settings(case, "dojo"))
        run = resolved(model, dojo_settings(case, s))
        if run == base:
            skipped[s] = "the same run as dojo's defaults"
        elif run["_verdict"] == "does not fit":
            skipped[s] = "dojo estimate: does not fit on the H200"
        else:
            keep.append(s)
    return keep, skipped


def compiles(case: Case, system: str, model: Path) -> bool:
    if not system.startswith("dojo"):
        return False
    kernels = resolved(model, dojo_settings(case, system)).get("kernels") or {}
    return kernels.get("compile") == "on"


def cost_s(case: Case, system: str, steps: int, compile_on: bool, cold: bool = False) -> float:
    """One run's estimated seconds; cold: its system's first run of the row in the call."""
    step = STEP_S.get((case.shape, case.grad_ckpt), 1.0)
    if case.objective != "sft":
        step *= PREF_STEP_X
    s = STARTUP_S.get(case.shape, 60.0) + steps * step
    if case.data == "longtail":
        s += steps * 0.5  # 16k-token rows
    if cold:
        s += COLD_S
    if compile_on:
        s += COMPILE_S.get(case.shape, 60.0)
    if system == "trl":
        s -= NO_LAUNCHER_S
    if system in TRL_SCRIPTS:
        s += TRL_SAVE_S.get(case.shape, 30.0)
    if case.objective in ("dpo", "kto") and case.method == "full":
        s += REF_MODEL_S.get(case.shape, 30.0)
    return s


def plan_rows(a: argparse.Namespace, work: Path) -> list[RowPlan]:
    cases = SPEED_SETS[a.set]
    unknown = set(a.only or []) - set(cases)
    if unknown:
        raise SystemExit(f"no such row in {a.set}: {', '.join(sorted(unknown))}")
    plans = []
    for name, case in cases.items():
        if a.only and name not in a.only:
            continue
        model = write_config(case.shape, work)
        systems, skipped = systems_of(case, model)
        if a.systems:  # in the order given: a round runs them so (the last is cut first)
            for s in a.systems:  # the plan's "left out" says so, instead of dropping it unseen
                if s not in systems and s not in skipped:
                    skipped[s] = "not one of the row's systems"
            systems = [s for s in a.systems if s in systems]
        comp = {s: compiles(case, s, model) for s in systems}

        def run(
            s: str,
            rep: int,
            steps: int,
            name: str = name,
            case: Case = case,
            comp: dict[str, bool] = comp,
        ) -> Run:
            cold = rep < 0 or (rep == 0 and not a.warmup)
            return Run(name, s, rep, steps, cost_s(case, s, steps, comp[s], cold))

        waves = [[run(s, -1, a.warmup_steps) for s in systems]] if a.warmup else []
        waves += [[run(s, rep, a.steps) for s in systems] for rep in range(a.repeats)]
        width = min(len(systems), len(a.gpu_ids)) if a.spread else 1
        plans.append(RowPlan(name, case, systems, skipped, waves, max(width, 1)))
    return plans


def schedule(plans: list[RowPlan], gpus: list[int], limit_s: float, start: Any, wait: Any,
             clock: Any) -> None:  # fmt: skip
    """Start rows in the set's order while GPUs are free: a row takes `width` GPUs until it is
    done, and starts only if its estimated cost fits before limit_s (clock() = seconds since
    the call began); a row that does not fit is dropped. start(plan) runs a row (its waves in
    order, each wave's runs at once on the row's GPUs); wait() returns a finished plan."""
    free = list(gpus)
    running = 0
    todo = list(plans)
    while todo or running:
        for p in list(todo):
            if len(free) < p.width:
                break  # keep the order: the next row waits for enough GPUs
            todo.remove(p)
            cost, left = p.cost_s(), limit_s - clock()
            if cost > left:
                p.dropped = f"its estimated {cost:.0f} s do not fit the {max(left, 0):.0f} s left"
                continue
            p.gpus, free = free[: p.width], free[p.width :]
            running += 1
            start(p)
        if not running:
            for p in todo:  # wider than the machine
                p.dropped = f"needs {p.width} GPUs"
            return
        done = wait()
        running -= 1
        free += done.gpus


def simulate(plans: list[RowPlan], gpus: list[int], limit_s: float, setup_s: float = 0.0) -> float:
    """The scheduler on the estimated durations, after setup_s of weights: the makespan (s)."""
    heap: list[tuple[float, str, RowPlan]] = []
    now = [setup_s]

    def start(p: RowPlan) -> None:
        heapq.heappush(heap, (now[0] + p.cost_s(), p.name, p))

    def wait() -> RowPlan:
        t, _, p = heapq.heappop(heap)
        now[0] = t
        return p

    schedule(plans, gpus, limit_s, start, wait, lambda: now[0])
    return now[0]


def recorded_runs(results: Path = BENCH / "results") -> list[dict[str, Any]]:
    """Every successful run that results/speed-*.json records with its wall time, beside the
    cost model's estimate of it now (the warm-ups and, in a call without them, each system's
    first run of a row are cold): the model's calibration."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        models: dict[str, Path] = {}
        for f in sorted(results.glob("speed-*.json")):
            doc = json.loads(f.read_text())
            cases = SPEED_SETS.get(doc.get("set"), {})
            for call in doc["calls"]:
                seen = set()
                for r in [*call.get("warmups", []), *call.get("runs", [])]:
                    key = (r["row"], r["system"])
                    cold = key not in seen  # the warm-ups are listed first
                    seen.add(key)
                    steps = call.get("warmup_steps" if r["rep"] < 0 else "steps")
                    if r.get("wall_s") is None or r.get("rc") or not steps or r["row"] not in cases:
                        continue
                    case = cases[r["row"]]
                    if case.shape not in models:
                        models[case.shape] = write_config(case.shape, Path(tmp))
                    comp = compiles(case, r["system"], models[case.shape])
                    out.append({"file": f.name, "row": r["row"], "system": r["system"],
                                "rep": r["rep"], "steps": steps, "wall_s": r["wall_s"],
                                "est_s": round(cost_s(case, r["system"], steps, comp, cold), 1)})  # fmt: skip
    return out


def print_calibration() -> None:
    runs = recorded_runs()
    print("| file | row | system | rep | steps | wall s | est. s | wall / est. |")
    print("|---|---|---|---|---|---|---|---|")
    for r in runs:
        print(f"| {r['file']} | {r['row']} | {r['system']} | {r['rep']} | {r['steps']} "
              f"| {r['wall_s']:.1f} | {r['est_s']:.1f} | {r['wall_s'] / r['est_s']:.2f} |")  # fmt: skip
    ratios = sorted(r["wall_s"] / r["est_s"] for r in runs)
    if ratios:
        over = sum(x > 1 for x in ratios)
        print(f"\n{len(ratios)} runs: {over} past their estimate, the worst by "
              f"{ratios[-1] - 1:.0%}; wall / est. median {statistics.median(ratios):.2f}, "
              f"9 in 10 within {ratios[int(0.9 * (len(ratios) - 1))]:.2f}")  # fmt: skip


# ------------------------------------------------------------------------------ running on the GPU


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def command(case: Case, system: str, model: Path, data: Path, out: Path, steps: int, gpu: int,
            work: Path) -> tuple[list[str], dict[str, str]]:  # fmt: skip
    """argv and extra environment of one run of `system` on GPU `gpu`."""
    common = ["--model", str(model), "--data", str(data), "--out", str(out),
              "--seq-len", str(case.seq_len), "--micro-batch", str(case.micro_batch),
              "--max-steps", str(steps), "--method", case.method,
              *(["--grad-ckpt"] if case.grad_ckpt else [])]  # fmt: skip
    launcher = [sys.executable, "-m", "deepspeed.launcher.runner", "--include",
                f"localhost:{gpu}", "--master_port", str(free_port())]  # fmt: skip
    if system == "plain":
        script = str(BENCH / "baseline_trainer.py")
        return [*launcher, script, *common, "--zero", str(case.zero)], {}
    if system == "trl":
        return [sys.executable, str(BENCH / "trl_sft.py"), *common], {
            "CUDA_VISIBLE_DEVICES": str(gpu)
        }
    if system == "trl-ds":  # the plain script's JSON, written once by write_ds_configs
        ds = work / f"ds-zero{case.zero}.json"
        return [*launcher, str(BENCH / "trl_sft.py"), *common, "--deepspeed", str(ds)], {}
    hooked = {"PYTHONPATH": f"{BENCH / 'hook'}:{os.environ.get('PYTHONPATH', '')}"}
    counted = {**hooked, "BENCH_COUNT_TOKENS": "1"}
    if system in TRL_SCRIPTS:  # TRL's own script; the hook adds the step record and the count
        argv = [*launcher, "--module", TRL_SCRIPTS[system], *trl_script_args(case, model, data,
                out, steps, dojo_ds_config(case, work))]  # fmt: skip
        return argv, counted
    if system == "trl-pref":  # TRL's ORPO / CPO trainer, as its example scripts run it
        argv = [*launcher, str(BENCH / "trl_pref.py"), "--objective", case.objective,
                "--model", str(model), "--data", str(data), "--out", str(out),
                "--method", case.method, "--micro-batch", str(case.micro_batch),
                "--seq-len", str(case.seq_len), "--steps", str(steps),
                "--lr", str(LR_PREF[case.method]), "--logging-steps", str(LOG_STEPS),
                "--deepspeed", str(dojo_ds_config(case, work)),
                *(["--grad-ckpt"] if case.grad_ckpt else [])]  # fmt: skip
        return argv, counted
    argv = [
        sys.executable, "-m", "dojo", "train", "--gpus", str(gpu), "--model", str(model),
        "--data", str(data), "--template", "chatml", *dojo_settings(case, system),
        "--max-steps", str(steps), "--save-steps", "0", "--no-save-model",
        "--logging-steps", str(LOG_STEPS), "--report-to", "none",
        "--output-dir", str(out), "--force",
    ]  # fmt: skip
    return argv, hooked


LR_PREF = {"full": 1e-6, "lora": 5e-6, "qlora": 5e-6}
"""dojo train's --lr for a preference objective (dojo.run.groups.objective LR_PREFERENCE), given
to TRL's scripts too."""


TRL_SCRIPTS = {"trl-dpo": "trl.scripts.dpo", "trl-kto": "trl.scripts.kto"}
"""Systems that run TRL's own scripts, by module (the KTO script unpairs paired rows itself:
KTOTrainer's unpair_preference_dataset)."""
ON_DOJO_JSON = {*TRL_SCRIPTS, "trl-pref"}
"""TRL's preference systems, which run with the DeepSpeed JSON dojo train writes for the row
(write_dojo_ds_configs), as a TRL user passes one."""


def trl_script_args(case: Case, model: Path, data: Path, out: Path, steps: int,
                    ds: Path) -> list[str]:  # fmt: skip
    """TRL's DPO or KTO script (trl/scripts/dpo.py, kto.py: TrlParser over ScriptArguments,
    DPOConfig or KTOConfig, ModelConfig) with dojo train's settings of the row: the model folder
    (its tokenizer and ChatML template), the data (a folder holding train.jsonl, which `datasets`
    loads as json), the batch, max length, learning rate, scheduler, optimizer, bf16, SDPA, TRL's
    beta and loss (sigmoid for DPO, kto for KTO: dojo's defaults are TRL's), checkpointing as
    the row says (the configs' default is on), dojo's LoRA (r 16, alpha 32, dropout 0.05, all
    linear layers; the trainer turns dropout off, as dojo's does), dojo's two dataloader
    workers, and the DeepSpeed JSON dojo train writes for the row."""
    args = [
        "--model_name_or_path", str(model), "--dataset_name", str(trl_data_dir(data)),
        "--output_dir", str(out), "--per_device_train_batch_size", str(case.micro_batch),
        "--gradient_accumulation_steps", "1", "--max_steps", str(steps),
        "--max_length", str(case.seq_len), "--learning_rate", str(LR_PREF[case.method]),
        "--lr_scheduler_type", "linear", "--warmup_steps", "0", "--weight_decay", "0",
        "--max_grad_norm", "1.0", "--optim", "adamw_torch_fused", "--bf16", "true",
        "--dtype", "bfloat16", "--attn_implementation", "sdpa",
        "--gradient_checkpointing", "true" if case.grad_ckpt else "false",
        "--logging_steps", str(LOG_STEPS), "--save_strategy", "no", "--report_to", "none",
        "--dataloader_num_workers", "2", "--seed", "42", "--deepspeed", str(ds),
    ]  # fmt: skip
    if case.method != "full":
        args += ["--use_peft", "--lora_r", "16", "--lora_alpha", "32", "--lora_dropout", "0.05",
                 "--lora_target_modules", "all-linear"]  # fmt: skip
    if case.method == "qlora":
        args += ["--load_in_4bit", "--bnb_4bit_quant_type", "nf4", "--use_bnb_nested_quant"]
    return args


def trl_data_dir(data: Path) -> Path:
    """DATA-trl/train.jsonl beside the data file: TRL's script loads --dataset_name with
    `datasets.load_dataset`, which reads a local folder's train.jsonl as its train split."""
    folder = data.parent / f"{data.stem}-trl"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / "train.jsonl"
    if not target.exists() or target.read_bytes() != data.read_bytes():
        target.write_bytes(data.read_bytes())
    return folder


def dojo_ds_config(case: Case, work: Path) -> Path:
    """The DeepSpeed JSON dojo train writes for the row (work/ds-dojo-ROWKEY.json, made by
    write_dojo_ds_configs before the runs)."""
    return work / f"ds-dojo-{case.method}-z{case.zero}-{case.objective}.json"


def write_dojo_ds_configs(cases: list[Case], models: dict[str, Path], data: dict[str, Path],
                          work: Path) -> None:  # fmt: skip
    """`dojo train --dry-run` with the dojo system's flags of each row a TRL script runs: the
    run files it writes hold the DeepSpeed JSON dojo's own run uses (HF's values left "auto"),
    given to TRL's script as a TRL user passes one (--deepspeed)."""
    for c in cases:
        if not ON_DOJO_JSON & set(c.systems):
            continue
        run_dir = work / f"dry-{dojo_ds_config(c, work).stem}"
        argv = ["train", "--gpus", "0", "--model", str(models[c.shape]), "--data",
                str(data[c.data]), "--template", "chatml", *dojo_settings(c, "dojo"),
                "--output-dir", str(run_dir), "--force", "--dry-run"]  # fmt: skip
        from memory import dojo_cli

        dojo_cli(argv)
        dojo_ds_config(c, work).write_text((run_dir / "ds_config.json").read_text())


def write_ds_configs(work: Path) -> None:
    """work/ds-zeroN.json: bench/baseline_trainer.py's DeepSpeed JSONs, for trl-ds (once, before
    runs start at once on several GPUs)."""
    from baseline_trainer import ds_config

    for zero in (0, 1, 2, 3):
        (work / f"ds-zero{zero}.json").write_text(json.dumps(ds_config(zero, "none", {}), indent=1))


class GpuPeak(threading.Thread):
    """nvidia-smi memory.used of each GPU every 0.2 s; peak() since the last reset(gpu)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peaks: dict[int, float] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def run(self) -> None:
        q = ["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"]
        while not self.stop.is_set():
            out = subprocess.run(q, capture_output=True, text=True).stdout
            with self.lock:
                for line in out.splitlines():
                    try:
                        i, mib = (x.strip() for x in line.split(","))
                        self.peaks[int(i)] = max(self.peaks.get(int(i), 0.0), float(mib))
                    except ValueError:
                        continue
            self.stop.wait(0.2)

    def reset(self, gpu: int) -> None:
        with self.lock:
            self.peaks[gpu] = 0.0

    def peak_gib(self, gpu: int) -> float:
        with self.lock:
            return round(self.peaks.get(gpu, 0.0) / 1024, 2)


def sequences(record: dict[str, Any]) -> list[list[dict[str, str]]]:
    """The sequences a record trains: a chat's messages, a preference pair's prompt with each
    answer (DPO's two sequences a row), or an unpaired row's prompt with its completion (KTO's)."""
    if "messages" in record:
        return [record["messages"]]
    if "completion" in record:
        return [record["prompt"] + record["completion"]]
    return [record["prompt"] + record[side] for side in ("chosen", "rejected")]


def attention_length(data: Path, seq_len: int, tokenizer: Path) -> float:
    """Token-weighted mean sample length T (truncated at seq_len): the attention term of MFU."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer / "tokenizer.json"))
    lens = []
    for line in data.read_text().splitlines():
        for msgs in sequences(json.loads(line)):
            text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in msgs)
            lens.append(min(seq_len, len(tok.encode(text).ids)))
    return sum(n * n for n in lens) / max(sum(lens), 1)


def measure(run: Run, case: Case, model: Path, data: Path, gpu: int, work: Path,
            smi: GpuPeak, t_eff: float) -> dict[str, Any]:  # fmt: skip
    """One run: its command, the step log it leaves, its rates and peaks."""
    tag = f"{run.row}-{run.system.replace(' ', '').replace('-', '')}-{run.rep}".replace("--", "")
    out = work / f"run-{tag}"
    log_file = work / f"steps-{tag}.json"
    log_file.unlink(missing_ok=True)
    summary_file = out / "dojo_summary.json"  # dojo's runs: graphs a compiled run made late
    summary_file.unlink(missing_ok=True)  # a warm machine's earlier call's
    argv, env = command(case, run.system, model, data, out, run.steps, gpu, work)
    smi.reset(gpu)
    t0 = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True,
                       env={**os.environ, **env, "BENCH_STEPLOG": str(log_file)})  # fmt: skip
    (work / f"{tag}.log").write_text(p.stdout + p.stderr)
    steplog = json.loads(log_file.read_text()) if log_file.exists() else {}
    r = rates(steplog)
    summary = json.loads(summary_file.read_text()) if summary_file.exists() else {}
    graphs = summary.get("compiled_graphs_after_step1")
    from dojo.modelspec import resolve_model

    spec = resolve_model(str(model / "config.json"))
    tps = r["tokens_per_s"] or 0
    flops = 6 * spec.params + 12 * spec.num_layers * spec.hidden_size * t_eff
    return {
        "row": run.row,
        "system": run.system,
        "rep": run.rep,
        "gpu": gpu,
        "rc": p.returncode,
        "wall_s": round(time.monotonic() - t0, 1),
        "est_s": round(run.est_s, 1),
        "tokens_per_s": r["tokens_per_s"],
        "windows": r["windows"],
        "step_ms": r.get("step_ms"),
        "tokens_per_step": r["tokens_per_step"],
        "mfu": round(tps * flops / PEAK_BF16, 4) if tps else None,
        "peak_alloc_gib": steplog.get("peak_alloc_gib"),
        "peak_reserved_gib": steplog.get("peak_reserved_gib"),
        "smi_peak_gib": smi.peak_gib(gpu),
        "losses": steplog.get("losses", {}),
        **({"detail": steplog["detail"]} if "detail" in steplog else {}),
        **({"compiled_graphs_after_step1": graphs} if graphs is not None else {}),
        "command": " ".join(shlex.quote(x) for x in argv),
        "tail": "" if p.returncode == 0 else (p.stdout + p.stderr)[-2000:],
    }


def run_gpu(a: argparse.Namespace, plans: list[RowPlan], gpus: list[int], work: Path) -> None:
    data = speed_data(work)
    write_ds_configs(work)
    # weights in a child process: this one never makes a CUDA context on a GPU the runs use
    shapes = sorted({p.case.shape for p in plans})
    subprocess.run([sys.executable, str(BENCH / "workload.py"), "--work", str(work), *shapes],
                   check=True)  # fmt: skip
    models = {s: work / f"model-{s}" for s in shapes}
    write_dojo_ds_configs([p.case for p in plans], models, data, work)
    t_eff: dict[tuple[str, int], float] = {}
    for p in plans:
        key = (p.case.data, p.case.seq_len)
        if key not in t_eff:
            t_eff[key] = attention_length(data[p.case.data], p.case.seq_len, models[p.case.shape])
    smi = GpuPeak()
    smi.start()
    done: queue.Queue[RowPlan] = queue.Queue()
    call = {"commit": git_commit(), "device": gpu_name(), "command": a.command, "gpus": gpus,
            "spread": a.spread, "steps": a.steps, "repeats": a.repeats,
            "warmup_steps": a.warmup_steps if a.warmup else 0,
            "skipped": {}, "dropped": {}, "warmups": [], "runs": []}  # fmt: skip
    doc = {"benchmark": "speed", "set": a.set, "calls": [call]}
    lock = threading.Lock()
    call["setup_s"] = round(time.monotonic() - a.t0, 1)  # data, weights, dry runs: PREP_S

    def one(r: Run, gpu: int, p: RowPlan) -> None:
        res = measure(r, p.case, models[p.case.shape], data[p.case.data], gpu, work, smi,
                      t_eff[(p.case.data, p.case.seq_len)])  # fmt: skip
        with lock:
            call["warmups" if r.rep < 0 else "runs"].append(res)
            call["skipped"] = {q.name: q.skipped for q in plans if q.skipped}
            call["dropped"] = {q.name: q.dropped for q in plans if q.dropped}
            Path(a.out).write_text(json.dumps(doc, indent=1))
        short = {k: v for k, v in res.items() if k not in ("tail", "command", "losses")}
        print(json.dumps(short), flush=True)
        if res["rc"]:
            print(res["tail"][-1500:], flush=True)

    def row(p: RowPlan) -> None:
        """The row's waves in order; a wave's runs at once, one slot (GPU) each, a slot's runs
        one after another."""
        for w in range(len(p.waves)):
            slots: dict[int, list[Run]] = {}
            for r, slot in p.assign(w):
                slots.setdefault(slot, []).append(r)

            def lane(runs: list[Run], gpu: int) -> None:
                for r in runs:
                    one(r, gpu, p)

            threads = [threading.Thread(target=lane, args=(runs, p.gpus[slot]))
                       for slot, runs in slots.items()]  # fmt: skip
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        done.put(p)

    def start(p: RowPlan) -> None:
        threading.Thread(target=row, args=(p,), daemon=True).start()

    schedule(plans, gpus, a.limit_s, start, done.get, lambda: time.monotonic() - a.t0)
    call["dropped"] = {q.name: q.dropped for q in plans if q.dropped}
    Path(a.out).write_text(json.dumps(doc, indent=1))
    smi.stop.set()


def print_plan(a: argparse.Namespace, plans: list[RowPlan], gpus: list[int]) -> None:
    print(f"speed set {a.set}: {len(plans)} rows, {a.repeats} rounds of {a.steps} steps"
          + (f" after a {a.warmup_steps}-step warm-up of each system" if a.warmup else "")
          + f", GPUs {gpus}{' (spread)' if a.spread else ''}, limit {a.limit_s:.0f} s\n")  # fmt: skip
    print("| row | systems | runs | est. s, one GPU | est. s, as run | left out |")
    print("|---|---|---|---|---|---|")
    for p in plans:
        runs = sum(len(w) for w in p.waves)
        one = sum(r.est_s for w in p.waves for r in w)
        left = "; ".join(f"{s}: {why}" for s, why in p.skipped.items())
        print(
            f"| {p.name} | {', '.join(p.systems)} | {runs} | {one:.0f} | {p.cost_s():.0f} | {left} |"
        )
    sims = [RowPlan(p.name, p.case, p.systems, p.skipped, p.waves, p.width) for p in plans]
    setup = sum(PREP_S.get(shape, 35.0) for shape in {p.case.shape for p in plans})
    span = simulate(sims, gpus, a.limit_s, setup)
    kept = [p.name for p in sims if not p.dropped]
    print(f"\nestimated: {span:.0f} s on {len(gpus)} GPU(s); runs {', '.join(kept) or 'nothing'}")
    for p in sims:
        if p.dropped:
            print(f"dropped {p.name}: {p.dropped}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--set", choices=sorted(SPEED_SETS), help="the set to run or plan (needed)")
    ap.add_argument("--only", nargs="*", help="rows of the set (default: all, in its order)")
    ap.add_argument(
        "--systems",
        nargs="*",
        help="only these systems, each round in this order (e.g. dojo plain trl)",
    )
    ap.add_argument("--out", help="result file (GPU runs)")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--warmup", action="store_true", help="each system once first, unrecorded")
    ap.add_argument("--warmup-steps", type=int, default=3)
    ap.add_argument("--gpus", default="0", help="GPU ids, e.g. 0,1,2,3")
    ap.add_argument("--spread", action="store_true", help="a round's systems on several GPUs")
    ap.add_argument("--limit-s", type=float, default=560.0, help="rows that would end later drop")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and its cost")
    ap.add_argument("--calibrate", action="store_true",
                    help="the recorded runs' wall times against the cost model (bench/results)")  # fmt: skip
    ap.add_argument("--work", default="/tmp/dojo-bench")
    a = ap.parse_args()
    if a.calibrate:
        print_calibration()
        return
    if not a.set:
        ap.error("--set is needed (or --calibrate)")
    a.t0 = time.monotonic()  # the limit counts from here: weights and data are made first
    a.gpu_ids = [int(g) for g in a.gpus.split(",")]
    a.command = "python3 bench/speed.py " + " ".join(shlex.quote(x) for x in sys.argv[1:])
    gpus = a.gpu_ids
    if a.dry_run:
        with tempfile.TemporaryDirectory() as tmp:
            print_plan(a, plan_rows(a, Path(tmp)), gpus)
        return
    if not a.out:
        ap.error("--out FILE is needed to run on the GPU (or --dry-run)")
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    plans = plan_rows(a, work)
    print_plan(a, plans, gpus)
    run_gpu(a, plans, gpus, work)


def medians(runs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (row, system): the median tokens/s of its successful runs, their range and count."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault((r["row"], r["system"]), []).append(r)
    out = {}
    for key, rs in groups.items():
        ok = [r["tokens_per_s"] for r in rs if r["rc"] == 0 and r.get("tokens_per_s")]
        out[key] = {
            "median": statistics.median(ok) if ok else None,
            "min": min(ok) if ok else None,
            "max": max(ok) if ok else None,
            "n": len(ok),
            "failed": len(rs) - len(ok),
        }
    return out


if __name__ == "__main__":
    main()
