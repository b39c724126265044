"""`dojo config --explain`: which optimizer/scheduler really runs, and what overlap_comm costs.

Pure functions returning lines; the CLI prints them on stderr, `dojo train` can reuse them.

Source for the precedence rules: transformers 5.24 ``integrations/deepspeed.py``
``deepspeed_optim_sched``: a DeepSpeed ``"optimizer"`` block always becomes a ``DummyOptim``
(TrainingArguments ``optim`` is never read), a ``"scheduler"`` block always becomes a
``DummyScheduler`` (``lr_scheduler_type`` is never read); neither case logs anything.
"""

from typing import Any

from dojo.run.groups.zero import hf_auto_reduce_bucket

DEFAULT_HF_OPTIM = "adamw_torch_fused"
"""TrainingArguments.optim default in transformers 5.24 with torch >= 2.8 (else adamw_torch)."""
DEFAULT_HF_SCHEDULER = "linear"
"""TrainingArguments.lr_scheduler_type default."""
EXAMPLE_HIDDEN = 4096
"""Hidden size used to illustrate "auto" buckets when no --model is given (Llama-2/3 7-8B)."""


def precedence_warnings(ds: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, message) for each DeepSpeed block that silently overrides a TrainingArguments value."""
    out = []
    if isinstance(ds.get("optimizer"), dict):
        out.append(
            (
                "optimizer",
                'the DeepSpeed "optimizer" block wins: TrainingArguments optim (--optim) is silently '
                "ignored by the HF Trainer; drop the block to use the Trainer's optimizer",
            )
        )
    if isinstance(ds.get("scheduler"), dict):
        out.append(
            (
                "scheduler",
                'the DeepSpeed "scheduler" block wins: TrainingArguments lr_scheduler_type is silently '
                "ignored by the HF Trainer; drop the block to use the Trainer's scheduler",
            )
        )
    return out


def explain_optim_sched(
    ds_config: dict[str, Any], hf_optimizer: str | None = None, hf_scheduler: str | None = None
) -> list[str]:
    """Which optimizer and LR scheduler the HF Trainer will actually use with this DeepSpeed config.

    Args:
        ds_config: the DeepSpeed config dict.
        hf_optimizer: TrainingArguments.optim, or None for its default.
        hf_scheduler: TrainingArguments.lr_scheduler_type, or None for its default.
    """
    optim = hf_optimizer or f"{DEFAULT_HF_OPTIM} (default)"
    sched = hf_scheduler or f"{DEFAULT_HF_SCHEDULER} (default)"
    ds_opt = ds_config.get("optimizer") if isinstance(ds_config.get("optimizer"), dict) else None
    ds_sched = ds_config.get("scheduler") if isinstance(ds_config.get("scheduler"), dict) else None
    lines = []
    if ds_opt is not None:
        lines.append(
            f'optimizer: DeepSpeed {ds_opt.get("type", "?")} from the config\'s "optimizer" block; '
            '"auto" params come from TrainingArguments learning_rate, adam_beta1/adam_beta2, '
            "adam_epsilon, weight_decay"
        )
        lines.append(
            f"  TrainingArguments optim={optim} is silently ignored: the DeepSpeed config wins "
            "(the Trainer hands DeepSpeed a DummyOptim whenever the config has an optimizer)"
        )
    else:
        lines.append(
            f"optimizer: TrainingArguments optim={optim}, built by Trainer.create_optimizer and "
            'wrapped by DeepSpeed (the Trainer sets "zero_allow_untested_optimizer": true)'
        )
        lines.extend(_offload_client_optimizer(ds_config))
    if ds_sched is not None:
        kind = ds_sched.get("type", "?")
        lines.append(
            f'scheduler: DeepSpeed {kind} from the config\'s "scheduler" block, stepping the '
            f'{"DeepSpeed" if ds_opt is not None else "Trainer"} optimizer; "auto" warmup_max_lr <- '
            "learning_rate, warmup_num_steps <- warmup_steps, total_num_steps <- the computed steps"
        )
        lines.append(
            f"  TrainingArguments lr_scheduler_type={sched} is silently ignored: the DeepSpeed config "
            "wins (the Trainer hands DeepSpeed a DummyScheduler)"
        )
        if kind == "WarmupLR":
            lines.append(
                "  WarmupLR keeps the LR constant after warmup (the Trainer's 'linear' decays it to 0)"
            )
    elif ds_opt is not None:
        lines.append(
            f"scheduler: TrainingArguments lr_scheduler_type={sched}, built by Trainer.create_scheduler "
            "on the DeepSpeed optimizer when DeepSpeed initialises (DummyScheduler callable)"
        )
    else:
        lines.append(
            f"scheduler: TrainingArguments lr_scheduler_type={sched}, built by the Trainer"
        )
    return lines


def _offload_client_optimizer(ds: dict[str, Any]) -> list[str]:
    zero = ds.get("zero_optimization") or {}
    block = zero.get("offload_optimizer") if isinstance(zero, dict) else None
    device = block.get("device", "none") if isinstance(block, dict) else "none"
    if device not in ("cpu", "nvme"):
        return []
    if ds.get("zero_force_ds_cpu_optimizer", True) is False:
        return [
            f'  offload to {device} with a torch optimizer: "zero_force_ds_cpu_optimizer": false lets it '
            "run, but the step runs as plain torch on CPU, much slower than DeepSpeedCPUAdam; "
            "prefer --optimizer ds"
        ]
    return [
        f"  offload to {device} with a torch optimizer: DeepSpeed raises ZeRORuntimeException at init "
        'unless "zero_force_ds_cpu_optimizer": false; use --optimizer ds'
    ]


def _fmt_bytes(n: float) -> str:
    if n >= 2**30:
        return f"{n / 2**30:.2f} GiB ({n / 1e9:.2f} GB)"
    return f"{n / 2**20:.1f} MiB"


def explain_overlap_comm(ds_config: dict[str, Any], hidden_size: int | None = None) -> list[str]:
    """The GPU memory of the communication buckets, with and without overlap_comm, both rules.

    "current" follows the installed DeepSpeed code; "docs" is the HF/DeepSpeed docs' 4.5x rule
    (docs/estimate.md, "Communication buckets"). Uses dojo.estimate.comm_buffer_bytes.
    """
    from dojo.estimate import comm_buffer_bytes

    zero = ds_config.get("zero_optimization") or {}
    stage = int(zero.get("stage", 0))
    if stage == 0:
        return ["overlap_comm: not used at stage 0 (no ZeRO buckets)"]
    overlap = bool(zero.get("overlap_comm", stage == 3))  # DeepSpeed default: True only at stage 3
    rbs, agbs = (
        zero.get("reduce_bucket_size", 500_000_000),
        zero.get("allgather_bucket_size", 500_000_000),
    )
    note = ""
    if rbs == "auto":
        h = hidden_size or EXAMPLE_HIDDEN
        rbs = hf_auto_reduce_bucket(h)
        note = (
            ""
            if hidden_size
            else f' ("auto" = hidden_size^2; shown for h={h}, pass --model for yours)'
        )
    rbs, agbs = int(rbs), int(agbs)
    on = comm_buffer_bytes(stage, rbs, agbs, True, "current")
    off = comm_buffer_bytes(stage, rbs, agbs, False, "current")
    docs = comm_buffer_bytes(stage, rbs, agbs, True, "docs")
    state = "on" if overlap else "off"
    lines = [
        f"overlap_comm {state} at stage {stage}: reduce_bucket_size={rbs:,}{note}, "
        f"allgather_bucket_size={agbs:,}"
    ]
    if stage == 3:
        lines.append(
            f"  current DeepSpeed: one 2 B x reduce_bucket_size bucket = {_fmt_bytes(on)} either way; "
            "at stage 3 overlap_comm only moves the reduction to its own stream (costs no buffer)"
        )
        lines.append("  the docs' 4.5x rule is stated for ZeRO-2 only")
        return lines
    lines.append(
        f"  current DeepSpeed: 2 B x reduce_bucket_size per bucket, {_fmt_bytes(on)} with overlap_comm, "
        f"{_fmt_bytes(off)} without: overlap_comm costs {_fmt_bytes(on - off)}"
    )
    lines.append(
        f"  docs' 4.5x rule: 4.5 x (allgather + reduce bucket) x 2 B = {_fmt_bytes(docs)} with overlap_comm; "
        "it predates DeepSpeed 0.4 (PR #1042 removed the multiplier), today's code does not allocate it"
    )
    return lines
