"""`dojo train` from flags to exit code: resolve, preflight, write train.json + ds_config.json, launch.

Nothing is written before every check passed; ``--dry-run`` writes nothing and launches nothing.
"""

import json
import shutil
from pathlib import Path
from typing import Any

from dojo import _io, _output
from dojo.errors import LaunchError
from dojo.train import checkpoints, launch, preflight, rank_status
from dojo.train import config as train_config
from dojo.train.config import TrainConfig
from dojo.train.preflight import Plan


def resolve(config_path: Path | None, flags: dict[str, Any]) -> TrainConfig:
    file_values = train_config.load(config_path) if config_path is not None else {}
    return train_config.check(train_config.merge(file_values, flags))


def plan(cfg: TrainConfig, *, force: bool, present: list[Any] | None = None) -> Plan:
    """Every check, cheapest first; raises one DojoError on the first failure."""
    devices = preflight.resolve_devices(cfg, present)
    preflight.check_extras(cfg, devices)
    compile_on(cfg, devices)  # --compile on without CUDA: refused before anything is read
    precision = preflight.resolve_precision(cfg, devices)
    kind, spec = preflight.resolve_model(cfg)
    preflight.check_template(cfg, kind)
    data = cfg.data or preflight.default_data()
    data_info = preflight.check_data(cfg, data)
    preflight.check_output(cfg, spec, force=force)
    resume_from = preflight.check_resume(cfg, devices)
    est, notes = fit_check(cfg, devices, spec, present, force=force)
    notes.append("data: " + data_info["summary"])  # valid/bad counts, first bad rows with line
    if cfg.trust_remote_code:
        notes.append("warning: --trust-remote-code is ON: the model's own Python code will run")
    return Plan(
        cfg, devices, precision, kind, spec, tuple(data), data_info, resume_from, est, tuple(notes)
    )


def fit_check(
    cfg: TrainConfig, devices: launch.Devices, spec: Any, present: list[Any] | None, *, force: bool
) -> tuple[Any, list[str]]:
    """dojo estimate for this exact run; on GPUs that it does not fit: the table and a stop."""
    from dojo import estimate as est_mod
    from dojo.gpus import list_gpus

    notes: list[str] = []
    if spec is None or not hasattr(est_mod, "estimate"):
        return None, notes
    gpu_mem = host_mem = None
    if devices.kind == "cuda":
        found = list_gpus() if present is None else present
        mems = [g.memory_gib for g in found if g.index in devices.ids]
        gpu_mem = min(mems) if mems else None
        host_mem = host_memory_gib()
    setup = est_mod.Setup(
        stage=cfg.zero_stage,
        method=cfg.method,  # type: ignore[arg-type]
        num_gpus=max(1, devices.world_size),
        num_nodes=cfg.num_nodes or 1,
        offload_optimizer=cfg.offload,  # type: ignore[arg-type]
        offload_param=cfg.offload_param,  # type: ignore[arg-type]
        micro_batch=cfg.micro_batch,
        seq_len=cfg.seq_len,
        grad_ckpt=cfg.grad_ckpt,
        lora_rank=cfg.lora_r,
        lora_dropout=cfg.lora_dropout,
        overlap_comm=cfg.overlap_comm,
        bucket_size=cfg.resolved_bucket_size(getattr(spec, "params", None)),
        attention="eager" if cfg.attn == "eager" else "sdpa",
        liger=liger_on(cfg, devices),
        gpu_memory_gib=gpu_mem,
        cpu_memory_gib=host_mem,
    )
    est = est_mod.estimate(spec, setup)
    gpu_ok = gpu_mem is None or est.gpu_total_gib <= gpu_mem
    if devices.kind == "cuda" and not gpu_ok:
        table = _estimate_table(est)
        msg = f"this run needs about {est.gpu_total_gib:.1f} GiB per GPU, the GPUs have {gpu_mem:.1f} GiB"
        hint = "try " + "; ".join(_suggestions(cfg)) + "; or pass --force to launch anyway"
        if not force:
            _output.info(table)
            raise LaunchError(msg, hint=hint)
        notes.append(f"warning: {msg}; launching anyway (--force)")
    elif host_mem is not None and est.cpu_total_gib > host_mem:
        # A warning, not a stop: MemTotal can read low on machines whose RAM grows on demand
        # (memory-balloon VMs), and a cgroup can sit below it.
        notes.append(
            f"warning: this run needs about {est.cpu_total_gib:.1f} GiB of host RAM (offloaded "
            f"states, pinned), this machine reports {host_mem:.1f} GiB; if the kernel kills a rank, "
            "try " + "; ".join(_suggestions(cfg, host=True))
        )
    return est, notes


def host_memory_gib() -> float | None:
    """RAM this machine reports (MemTotal, or a lower cgroup v2/v1 limit); None if unknown."""
    import contextlib
    import os

    sizes: list[float] = []
    with contextlib.suppress(ValueError, OSError, AttributeError):
        sizes.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            value = Path(limit).read_text().strip()
        except OSError:
            continue
        if value.isdigit() and int(value) < 1 << 60:  # "max" / 2^63-ish mean no limit
            sizes.append(int(value))
    return min(sizes) / 2**30 if sizes else None


def _cuda_switch(flag: str, value: str, devices: launch.Devices, why: str) -> bool | None:
    """An on/off/auto CUDA-only feature: on without CUDA is an error; off or no CUDA -> False;
    on -> True; auto -> None (the caller decides)."""
    if value == "on" and devices.kind != "cuda":
        raise LaunchError(
            f"--{flag} on needs CUDA GPUs ({why})", hint=f"use --{flag} auto or off on a CPU run"
        )
    if value == "off" or devices.kind != "cuda":
        return False
    return True if value == "on" else None


def liger_on(cfg: TrainConfig, devices: launch.Devices) -> bool:
    """Liger's fused linear cross-entropy: Triton kernels, so CUDA only."""
    import importlib.util

    on = _cuda_switch("liger", cfg.liger, devices, "Liger's kernels are Triton")
    return on if on is not None else importlib.util.find_spec("liger_kernel") is not None


def compile_on(cfg: TrainConfig, devices: launch.Devices) -> bool:
    """Regional torch.compile: Inductor's Triton kernels, so CUDA only (like Liger). auto: only
    the setups it was measured to work and help in (full, ZeRO 0-2, no offload, no grad-ckpt)."""
    import importlib.util

    on = _cuda_switch("compile", cfg.compile, devices, "Inductor generates Triton kernels")
    if on is not None:
        return on
    measured = (
        cfg.method == "full" and cfg.zero_stage <= 2 and cfg.offload == "none" and not cfg.grad_ckpt
    )
    return measured and importlib.util.find_spec("triton") is not None


def _estimate_table(est: Any) -> str:
    from dojo.estimate import table as estimate_table

    return estimate_table.render_plain([est])


def _suggestions(cfg: TrainConfig, *, host: bool = False) -> list[str]:
    out = []
    if host:  # offloaded states exceed host RAM: shard over more ranks, shrink or stop offloading
        if cfg.zero_stage < 3:
            out.append("--zero 3 (pins less host memory)")
        if cfg.method == "full":
            out.append("--method lora")
        out.append("--offload none")
        return out
    if cfg.zero_stage < 3:
        out.append(f"--zero {cfg.zero_stage + 1}")
    if cfg.offload == "none" and cfg.zero_stage > 0:
        out.append("--offload cpu")
    if not cfg.grad_ckpt:
        out.append("--grad-ckpt")
    if cfg.micro_batch > 1:
        out.append(f"--micro-batch {max(1, cfg.micro_batch // 2)}")
    if cfg.method == "full":
        out.append("--method lora")
    return out


def build_ds_config(cfg: TrainConfig, spec: Any) -> dict[str, Any]:
    from dojo.zero import ZeroConfig, build_ds_config

    zc = ZeroConfig(
        stage=cfg.zero_stage,
        offload=cfg.offload,
        offload_param=cfg.offload_param if cfg.zero_stage == 3 else None,
        optimizer=cfg.optimizer,
        scheduler=cfg.scheduler,
        overlap_comm=cfg.overlap_comm,
        bucket_size=cfg.resolved_bucket_size(getattr(spec, "params", None)),
        precision="auto",  # TrainingArguments bf16/fp16 decide (the worker sets them)
        hidden_size=getattr(spec, "hidden_size", None),
    )
    return build_ds_config(zc)


def hf_optim(p: Plan) -> str:
    # Fused AdamW is the transformers 5.24 default on CUDA; the plain loop is the safe CPU one.
    return "adamw_torch_fused" if p.devices.kind == "cuda" else "adamw_torch"


def run_record(p: Plan, run_dir: Path, tokenizer_path: str, model_path: str) -> dict[str, Any]:
    """train.json: the resolved config plus what the launcher decided (devices, paths, estimate)."""
    cfg = p.cfg
    return {
        **train_config.to_dict(cfg),
        "data": list(p.data_paths),
        "run_dir": str(run_dir),
        "output_dir": str(run_dir),
        "ds_config": str(run_dir / "ds_config.json"),
        "device": p.devices.kind,
        "world_size": p.devices.world_size * (cfg.num_nodes or 1),
        "precision_resolved": p.precision,
        "lr_resolved": cfg.resolved_lr(),
        "hf_optim": hf_optim(p),
        "liger_resolved": liger_on(cfg, p.devices),
        "compile_resolved": compile_on(cfg, p.devices),
        "model_kind": p.model_kind,
        "model_path": model_path,
        "tokenizer_path": tokenizer_path,
        "resume_from": p.resume_from,
        "estimated_gpu_gib": p.estimated_gpu_gib,
        "tensorboard": _has("tensorboard"),
    }


def _has(mod: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(mod) is not None


def main(config_path: Path | None, flags: dict[str, Any], *, force: bool, dry_run: bool) -> int:
    cfg = resolve(config_path, flags)
    p = plan(cfg, force=force)
    run_dir = Path(cfg.output_dir).resolve()
    ds = build_ds_config(cfg, p.spec)
    from dojo.zero.explain import explain_optim_sched

    port = cfg.master_port or launch.free_port()
    cmd = launch.build_command(cfg, run_dir, p.devices, port)
    env = launch.launch_env(p.devices)
    for line in p.notes:
        _output.info(line)
    for line in explain_optim_sched(ds, hf_optim(p), "linear"):
        _output.info(line)
    where = (
        f"{p.devices.world_size} CPU process(es)"
        if p.devices.kind == "cpu"
        else (f"GPUs {','.join(map(str, p.devices.ids))}" if p.devices.ids else "hostfile slots")
    )
    est = (
        f", estimate {p.estimated_gpu_gib:.2f} GiB per GPU"
        if p.estimated_gpu_gib is not None
        else ""
    )
    _output.info(f"dojo train: {cfg.method}, ZeRO-{cfg.zero_stage}, {where}, {p.precision}{est}")
    if dry_run:
        model_path = cfg.model or str(run_dir / "tiny-model")
        record = run_record(p, run_dir, model_path, model_path)
        _output.echo(launch.format_command(cmd, env if p.devices.kind == "cpu" else None))
        _output.echo(_output.dumps({"train": record, "ds_config": ds}))
        return 0
    model_path, tokenizer_path = _prepare_model(p, run_dir)
    record = run_record(p, run_dir, tokenizer_path, model_path)
    _write_run_files(run_dir, record, ds, force=force or cfg.resume)
    _output.info(f"run config: {run_dir / 'train.json'}")
    _output.info(f"deepspeed config: {run_dir / 'ds_config.json'}")
    if p.resume_from:
        _output.info(f"resuming from {p.resume_from}")
    _output.info("launch: " + launch.format_command(cmd, env if p.devices.kind == "cpu" else None))
    rank_status.clear(run_dir)
    rc = launch.run(cmd, env)
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
        _output.error(
            f"training failed (launcher exit code {rc})",
            f"see the rank output above; complete checkpoints in {run_dir} can be continued with --resume",
        )
    else:
        _output.info(f"done: {run_dir / 'dojo_summary.json'}")
    return rc


def _prepare_model(p: Plan, run_dir: Path) -> tuple[str, str]:
    """(model path, tokenizer path); the tiny default is written into the run folder."""
    if p.model_kind != "tiny":
        model = str(p.cfg.model)
        ref = str(Path(model).expanduser().resolve()) if p.model_kind == "local" else model
        return ref, ref
    from dojo.train.tiny import materialize_tiny_model

    folder = run_dir / "tiny-model"
    if not (folder / "config.json").is_file():
        run_dir.mkdir(parents=True, exist_ok=True)
        materialize_tiny_model(folder)
    return str(folder), str(folder)


def _write_run_files(
    run_dir: Path, record: dict[str, Any], ds: dict[str, Any], *, force: bool
) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    if force and not record["resume"]:
        # Starting over in the same folder: stale checkpoints would be taken by a later --resume.
        for _, path, _ in checkpoints.list_checkpoints(run_dir):
            shutil.rmtree(path, ignore_errors=True)
    _io.write_text_atomic(run_dir / "train.json", json.dumps(record, indent=2) + "\n", force=True)
    _io.write_text_atomic(run_dir / "ds_config.json", json.dumps(ds, indent=2) + "\n", force=True)
