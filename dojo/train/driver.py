"""`dojo train` from flags to exit code: resolve, preflight, write train.json + ds_config.json, launch.

A run without DeepSpeed (--zero none) writes no ds_config.json; DeepSpeed's runner still starts
the ranks (it is only the process launcher then) and the Trainer runs DDP across them.

Nothing is written before every check passed. ``--dry-run`` launches nothing; it writes the run
files the printed command references, so the command can be pasted and run, except into a folder
that holds a run (--resume, --force): that one it leaves as it is.
"""

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from dojo import _io, _output
from dojo.errors import LaunchError
from dojo.paths import RUN_FILE
from dojo.run import inputs, render, resolve
from dojo.run.run import Run
from dojo.run.schema import RunOptions
from dojo.train import checkpoints, launch, preflight, rank_status, vocab
from dojo.train.preflight import Plan

DS_FILE = "ds_config.json"
"""The DeepSpeed JSON beside the run record (none for --zero none)."""
SKIP_FIT = "--skip-fit-check"
"""The flag that launches a run the memory checks refuse. Not --force, which starts a run folder
over and removes its checkpoints: wanting one must never do the other."""


def plan(
    options: RunOptions, given: set[str], *, force: bool, dry_run: bool = False,
    present: list[Any] | None = None, skip_fit_check: bool = False,
) -> Plan:  # fmt: skip
    """Every check, cheapest first; raises one DojoError on the first failure."""
    from dojo.gpus import VISIBLE_ENV, list_gpus

    found = list_gpus() if present is None else present
    visible = os.environ.get(VISIBLE_ENV)
    machine, devices, notes = preflight.place(
        options.devices, found, dry_run=dry_run, visible=visible
    )
    preflight.check_extras(
        options.model.method, devices, dry_run=dry_run, objective=options.objective.objective
    )
    per_node = devices.world_size or max(1, len(found))
    resolve.resolve(options, machine=machine, gpus=devices.ids, gpus_per_node=per_node, given=given)
    model = options.model
    kind, spec = preflight.resolve_model(model.model, model.revision, dry_run=dry_run)

    run = resolve.resolve(
        options, machine=machine, spec=spec, gpus=devices.ids, gpus_per_node=per_node, given=given
    )
    preflight.check_init(run, kind)
    preflight.check_model_files(run, kind)
    preflight.check_quantized(run, spec)
    preflight.check_template(run.model.template, run.model.model, kind)
    added = vocab.check_before_launch(run, run.model.model if kind == "local" else None)
    data = run.data.data or preflight.default_data(run.objective.objective)
    data_info = preflight.check_data(
        data, columns=run.data.data_columns, ratios=run.data.data_ratios,
        objective=run.objective.objective,
    )  # fmt: skip
    eval_info = preflight.check_eval_data(run, data_info)
    preflight.check_output(run, spec, force=force)
    resume_from = preflight.check_resume(run, kind)
    est, fit_notes = fit_check(run, spec, machine, anyway=skip_fit_check)
    notes += fit_notes
    if devices.kind == "cuda" and run.devices.num_nodes == 1:
        notes += occupied_check(est.gpu_total_gib, found, devices.ids, anyway=skip_fit_check)
    notes.append("data: " + data_info["summary"])
    if eval_info:
        notes.append("eval: " + eval_info)
    if added:
        notes.append(f"note: the template's tokens {', '.join(added)} are not in the vocabulary: "
                     "they will be added and their embedding rows trained")  # fmt: skip
    if run.model.trust_remote_code:
        notes.append("warning: --trust-remote-code is ON: the model's own Python code will run")
    notes += stage_advice(run)
    return Plan(run, devices, kind, spec, tuple(data), data_info, resume_from, est, tuple(notes))


def header(p: Plan) -> str:
    """The run's first line. On CPU processes it names no GPU: there are none, and the estimate
    is a GPU figure (a CPU run's memory is the host's)."""
    run, devices = p.run, p.devices
    if devices.kind == "cpu":
        n = devices.world_size
        where = f"{n} CPU process{'es' if n != 1 else ''}"
    else:
        where = f"GPUs {','.join(map(str, devices.ids))}" if devices.ids else "hostfile slots"
    est = ""
    if devices.kind == "cuda" and p.estimate is not None:
        est = f", estimate {p.estimate.gpu_total_gib:.2f} GiB per GPU"
    what: str = run.model.method
    if run.objective.preference:
        what = f"{run.objective.objective.upper()} {what}"
    zero = f"ZeRO-{run.zero.stage}" if run.zero.deepspeed else "no DeepSpeed"
    return f"dojo train: {what}, {zero}, {where}, {run.kernels.precision}{est}"


def stage_advice(run: Run) -> list[str]:
    """Say where a stage buys nothing, and what a run without DeepSpeed gives up; never change
    what the user asked for."""
    if not run.zero.deepspeed and run.model.method == "full" and run.kernels.precision != "fp32":
        return [
            f"note: --zero none trains the {run.kernels.precision} weights themselves, with AdamW "
            f"states in {run.kernels.precision} (a plain Trainer script's run): no fp32 master "
            "copy, so updates below the weights' precision are lost; ZeRO 0-3 keep fp32 master "
            "weights"
        ]
    if (
        run.zero.stage == 3
        and run.world_size == 1
        and run.model.adapters
        and run.zero.offload_param == "none"
    ):
        one = "one CPU process" if run.device == "cpu" else "one GPU"
        return [
            f"note: ZeRO-3 on {one} shards nothing; with a frozen base it only adds per-layer "
            "gathers. --zero 2 (or 0) runs the same training faster with the same memory for "
            "the weights"
        ]
    return []


def fit_check(run: Run, spec: Any, machine: Any, *, anyway: bool) -> tuple[Any, list[str]]:
    """dojo estimate for this exact run. "does not fit": the table and a stop (unless
    --skip-fit-check: ``anyway``);
    "tight" (within 5% of the card, where the allocator thrashes, or over it in the case some
    runs of these settings take: est.step_remap): a warning. Host RAM is only ever a warning:
    MemTotal can read low on machines whose RAM grows on demand (balloon VMs)."""
    from dojo.estimate.model import estimate
    from dojo.estimate.result import GIB

    notes: list[str] = []
    gpu_mem = machine.gpu_memory_gib if machine.cuda else None
    host_mem = machine.host_memory_gib if run.device == "cuda" else None
    est = estimate(spec, render.estimate_setup(run, gpu_mem, None))
    need = f"this run needs about {est.gpu_total_gib:.1f} GiB per GPU"
    if est.verdict == "does not fit":
        from dojo.estimate import table

        msg = f"{need}, the GPUs have {gpu_mem:.1f} GiB"
        hint = "try " + "; ".join(_suggestions(run)) + f"; or pass {SKIP_FIT} to launch anyway"
        if not anyway:
            _output.info(table.render_plain([est]))
            raise LaunchError(msg, hint=hint)
        notes.append(f"warning: {msg}; launching anyway ({SKIP_FIT})")
    elif est.verdict == "tight":
        headroom = "; for headroom try " + "; ".join(_suggestions(run)[:2])
        if est.tight_by_remap:  # the case some checkpointed ZeRO-1/2 runs take (its note)
            most = est.gpu_total_with_remap / GIB
            notes.append(
                f"warning: {need}, up to {most:.1f} GiB where DeepSpeed's optimizer step maps "
                f"its largest transient anew (some checkpointed ZeRO-1/2 runs do), more than the "
                f"GPUs' {gpu_mem:.1f} GiB" + headroom
            )
        else:
            notes.append(
                f"warning: {need}, within 5% of the GPUs' {gpu_mem:.1f} GiB: near the limit the "
                "allocator frees and retries (several times slower) or runs out" + headroom
            )
    if host_mem is not None and est.cpu_total_gib > host_mem:
        notes.append(
            f"warning: this run needs about {est.cpu_total_gib:.1f} GiB of host RAM (offloaded "
            f"states, pinned), this machine reports {host_mem:.1f} GiB; if the kernel kills a rank, "
            "try " + "; ".join(_suggestions(run, host=True))
        )
    return est, notes


BUSY_GIB = 1.0
"""A GPU with more than this in use (nvidia-smi memory.used) before launch is shared: an idle
GPU's driver shows none to a few hundred MiB."""


def occupied_check(
    need_gib: float, found: list[Any], ids: tuple[int, ...], *, anyway: bool
) -> list[str]:
    """The verdict above is against a whole card; a GPU other processes already use gives the
    run only what is free on it. Refused where this run needs more than that (unless
    --skip-fit-check: ``anyway``),
    a warning within 5% of it, a note otherwise."""
    busy = [g for g in found if g.index in ids and g.used_gib > BUSY_GIB]
    if not busy:
        return []
    worst = min(busy, key=lambda g: g.memory_gib - g.used_gib)
    free = worst.memory_gib - worst.used_gib
    what = (f"GPU {worst.index} already has {worst.used_gib:.1f} GiB in use by other processes "
            f"(nvidia-smi), {free:.1f} GiB free; this run needs about {need_gib:.1f} GiB per GPU")  # fmt: skip
    if need_gib > free:
        if not anyway:
            raise LaunchError(what, hint="free that GPU, name idle ones with --gpus (nvidia-smi "
                              f"shows their use), or pass {SKIP_FIT} to launch anyway")  # fmt: skip
        return [f"warning: {what}; launching anyway ({SKIP_FIT})"]
    if need_gib > 0.95 * free:
        return [f"warning: {what}: within 5% of what is free, where the allocator frees and "
                "retries (several times slower) or runs out"]  # fmt: skip
    shared = ", ".join(f"{g.index} ({g.used_gib:.1f} GiB)" for g in busy)
    return [f"note: GPUs shared with other processes: {shared}; this run fits in what is free"]


def _suggestions(run: Run, *, host: bool = False) -> list[str]:
    out = []
    if host:  # offloaded states exceed host RAM: shard over more ranks, shrink or stop offloading
        if run.zero.level < 3:
            out.append("--zero 3 (pins less host memory)")
        if run.model.method == "full":
            out.append("--method lora")
        out.append("--offload none")
        return out
    if not run.zero.deepspeed:  # DeepSpeed shards (several GPUs) or offloads (one)
        out.append("--zero 3" if run.world_size > 1 else "--zero 2 --offload cpu")
    elif run.zero.level < 3:
        out.append(f"--zero {run.zero.level + 1}")
    if run.zero.offload == "none" and run.zero.level > 0:
        out.append("--offload cpu")
    if not run.kernels.grad_ckpt:
        out.append("--grad-ckpt")
    if run.loop.micro_batch > 1:
        out.append(f"--micro-batch {max(1, run.loop.micro_batch // 2)}")
    if (
        run.model.method == "full"
        and run.zero.deepspeed
        and run.zero.offload == "none"
        and run.world_size == 1
        and run.kernels.precision == "bf16"
    ):  # what a plain Trainer script (and TRL's SFTTrainer) runs on one GPU: see stage_advice
        out.append("--zero none (bf16 weights and AdamW states, 8 B a parameter instead of 16)")
    if run.model.method == "full":
        out.append("--method lora")
    return out


def record(p: Plan, run_dir: Path, model_path: str, tokenizer_path: str) -> dict[str, Any]:
    """train.json: the Run, the paths the launcher decided, and the estimate."""
    est = p.estimate
    return {
        "run": p.run.to_dict(),
        "paths": {
            "run_dir": str(run_dir),
            "ds_config": str(run_dir / DS_FILE) if p.run.zero.deepspeed else None,
            "model": model_path,
            "tokenizer": tokenizer_path,
            "data": list(p.data_paths),
            "resume_from": p.resume_from,
        },
        "model_kind": p.model_kind,
        "estimate": None if est is None else {
            "device_gib": round(est.gpu_total / 2**30, 3),
            "allocated_gib": round(est.allocated / 2**30, 3),
            "host_gib": round(est.cpu_total / 2**30, 3),
        },
    }  # fmt: skip


def main(
    config_path: str | None, flags: dict[str, Any], *, force: bool, dry_run: bool,
    print_config: bool = False, skip_fit_check: bool = False,
) -> int:  # fmt: skip
    started = time.monotonic()
    file_values = inputs.load_file(config_path) if config_path is not None else {}
    options = inputs.merge("train", file_values, flags)
    given = inputs.given(flags) | set(file_values)
    if print_config:
        _output.echo(inputs.to_yaml(options))
        return 0
    p = plan(options, given, force=force, dry_run=dry_run, skip_fit_check=skip_fit_check)
    run = p.run
    run_dir = Path(run.output.output_dir).resolve()
    ds = render.ds_config(run, p.spec)
    from dojo.zero.explain import explain_optim_sched

    port = run.devices.master_port or launch.free_port()
    cmd = launch.build_command(run, run_dir, p.devices, port)
    env = launch.launch_env(p.devices, expandable=run.kernels.expandable)
    for line in p.notes:
        _output.info(line)
    for line in run.assumed:
        _output.info(f"assumed: {line}")
    if ds is not None:
        for line in explain_optim_sched(ds, run.loop.hf_optim, run.loop.lr_scheduler):
            _output.info(line)
    else:
        _output.info(f"optimizer: TrainingArguments optim={run.loop.hf_optim}, scheduler: "
                     f"lr_scheduler_type={run.loop.lr_scheduler}, built by the Trainer (no "
                     "DeepSpeed)")  # fmt: skip
    _output.info(header(p))
    # A dry run into a run's folder (--resume, --force) leaves it as it is: chat, export and a
    # later --resume read its train.json as the record of the weights there.
    writes = not (dry_run and preflight.holds_run(run_dir))
    if writes:
        model_path, tokenizer_path = _prepare_model(p, run_dir)
        rec = record(p, run_dir, model_path, tokenizer_path)
        _write_run_files(run_dir, rec, ds, force=force or run.output.resume, dry_run=dry_run)
    shown = launch.format_command(cmd, env)
    files = [run_dir / RUN_FILE] + ([run_dir / DS_FILE] if ds is not None else [])
    if dry_run:
        if writes:
            _output.info(f"run files: {', '.join(map(str, files))}")
        else:
            _output.info(
                f"note: --dry-run wrote nothing: {run_dir} holds a run, whose run files stay as "
                "they are; the command below would read those, so launch this plan with the same "
                "flags without --dry-run"
            )
        _output.echo(shown)
        return 0
    _output.info(f"run config: {run_dir / RUN_FILE}")
    if ds is not None:
        _output.info(f"deepspeed config: {run_dir / DS_FILE}")
    if p.resume_from:
        _output.info(f"resuming from {p.resume_from}")
    _output.info("launch: " + shown)
    rank_status.clear(run_dir)
    rc = launch.run(cmd, env)
    if rc not in (0, 130) and rank_status.all_done(run_dir, run.world_size):
        _output.info(f"warning: every rank finished (model, checkpoints and summary written), then "
                     f"a process exited with code {rc} as it shut down; the run is complete")  # fmt: skip
        rc = 0
    if rc == 130:
        _output.info("interrupted: every process of the run was stopped")
    elif rc != 0:
        dead = rank_status.describe_failure(run_dir)
        for line in dead:
            _output.info(line)
        if dead:
            _output.info(
                "(DeepSpeed's 'exits with return code' line names the last rank it started, "
                "not necessarily the one that failed)"
            )
        _output.error(f"training failed (launcher exit code {rc})", failure_hint(run_dir))
    else:
        _output.info(final_line(run_dir, time.monotonic() - started))
    return rc


def failure_hint(run_dir: Path) -> str:
    """Where to look; --resume only where a complete checkpoint is there to continue from."""
    if checkpoints.latest_complete(run_dir) is None:
        return "see the rank output above"
    return f"see the rank output above; complete checkpoints in {run_dir} can be continued with --resume"


def final_line(run_dir: Path, wall_s: float) -> str:
    """Where the model went, the final loss, memory measured beside estimated, the wall time."""
    from dojo.train.summary import describe

    try:
        summary = json.loads((run_dir / "dojo_summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return f"done in {wall_s:.0f} s: {run_dir}"
    return describe(summary, run_dir, wall_s)


def _prepare_model(p: Plan, run_dir: Path) -> tuple[str, str]:
    """(model path, tokenizer path); the tiny default is written into the run folder."""
    if p.model_kind != "tiny":
        model = str(p.run.model.model)
        ref = str(Path(model).expanduser().resolve()) if p.model_kind == "local" else model
        return ref, ref
    import importlib.util

    from dojo.errors import MissingExtraError
    from dojo.train.tiny import materialize_tiny_model

    if importlib.util.find_spec("tokenizers") is None:
        raise MissingExtraError(
            "the bundled tiny model's tokenizer is built with tokenizers, not installed",
            hint="pip install -e '.[train]' in dojo's clone",
        )
    folder = run_dir / "tiny-model"
    if not (folder / "config.json").is_file():
        run_dir.mkdir(parents=True, exist_ok=True)
        materialize_tiny_model(folder)
    return str(folder), str(folder)


def _write_run_files(
    run_dir: Path, rec: dict[str, Any], ds: dict[str, Any] | None, *, force: bool, dry_run: bool
) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    if force and not rec["run"]["output"]["resume"]:
        # Starting over in the same folder: stale checkpoints would be taken by a later --resume.
        stale = [path for _, path, _ in checkpoints.list_checkpoints(run_dir)]
        for path in stale:
            shutil.rmtree(path, ignore_errors=True)
        if stale:
            names = ", ".join(path.name for path in stale)
            _output.info(f"--force: starting over in {run_dir}: removed the earlier run's "
                         f"checkpoints ({names})")  # fmt: skip
    mark = run_dir / preflight.DRY_RUN_MARK
    if dry_run and not any(p.name not in preflight.DRY_RUN_FILES for p in run_dir.iterdir()):
        mark.touch()
    elif not dry_run and mark.exists():
        mark.unlink()
    _io.write_text_atomic(run_dir / RUN_FILE, json.dumps(rec, indent=2) + "\n", force=True)
    if ds is not None:
        _io.write_text_atomic(run_dir / DS_FILE, json.dumps(ds, indent=2) + "\n", force=True)
    else:  # an earlier run's JSON would say this one used DeepSpeed
        (run_dir / DS_FILE).unlink(missing_ok=True)


def load_record(path: str | Path) -> tuple[Run, dict[str, Any]]:
    """train.json -> (the Run, the rest of the record); what the worker reads."""
    rec = json.loads(Path(path).read_text(encoding="utf-8"))
    return Run.from_dict(rec["run"]), rec
