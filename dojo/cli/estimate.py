"""``dojo estimate``: GPU and host memory per ZeRO stage for a model and a training setup.

Example: ``dojo estimate --model 7b --num-gpus 8 --seq-len 4096 --grad-ckpt``
"""

import enum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from dojo.architectures import alias_help

if TYPE_CHECKING:
    from dojo.estimate import Setup


class ZeroChoice(str, enum.Enum):
    s0 = "0"
    s1 = "1"
    s2 = "2"
    s3 = "3"
    all = "all"


class MethodChoice(str, enum.Enum):
    full = "full"
    lora = "lora"
    qlora = "qlora"


class OffloadChoice(str, enum.Enum):
    none = "none"
    cpu = "cpu"
    nvme = "nvme"


class RuleChoice(str, enum.Enum):
    current = "current"
    docs = "docs"


class AttentionChoice(str, enum.Enum):
    sdpa = "sdpa"
    flash_attention_2 = "flash_attention_2"
    eager = "eager"


def estimate_cmd(
    model: Annotated[
        str,
        typer.Option(
            "--model",
            help="Size alias, architecture name (llama-3.1-8b, qwen2.5-7b, ...), config.json or "
            f"model folder, or Hub id (org/name). Aliases: {alias_help()}.",
        ),
    ],
    zero: Annotated[
        ZeroChoice, typer.Option("--zero", help="ZeRO stage; 'all' lists every stage and offload.")
    ] = ZeroChoice.all,
    method: Annotated[MethodChoice, typer.Option("--method")] = MethodChoice.full,
    num_gpus: Annotated[int, typer.Option("--num-gpus", help="GPUs per node.")] = 1,
    num_nodes: Annotated[int, typer.Option("--num-nodes")] = 1,
    offload: Annotated[
        OffloadChoice | None,
        typer.Option("--offload", help="Offload the optimizer (at stage 3 also the params)."),
    ] = None,
    offload_param: Annotated[
        OffloadChoice | None, typer.Option("--offload-param", help="Stage 3 only.")
    ] = None,
    micro_batch: Annotated[int, typer.Option("--micro-batch", help="Sequences per GPU.")] = 1,
    seq_len: Annotated[int, typer.Option("--seq-len", help="Tokens per sequence.")] = 2048,
    grad_ckpt: Annotated[bool, typer.Option("--grad-ckpt/--no-grad-ckpt")] = False,
    overlap_comm: Annotated[
        bool | None,
        typer.Option("--overlap-comm/--no-overlap-comm", help="Default: on at stage 3 only."),
    ] = None,
    bucket_size: Annotated[
        int | None,
        typer.Option("--bucket-size", help="Reduce/allgather bucket, elements (default hidden^2)."),
    ] = None,
    overlap_rule: Annotated[
        RuleChoice,
        typer.Option("--overlap-rule", help="current: today's DeepSpeed; docs: the 4.5x rule."),
    ] = RuleChoice.current,
    lora_rank: Annotated[int, typer.Option("--lora-rank")] = 16,
    attention: Annotated[AttentionChoice, typer.Option("--attention")] = AttentionChoice.sdpa,
    gpu_memory: Annotated[
        float | None,
        typer.Option("--gpu-memory", help="GiB per GPU for the verdict (default: local GPU)."),
    ] = None,
    cpu_memory: Annotated[
        float | None, typer.Option("--cpu-memory", help="Host RAM per node, GiB.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Estimate GPU and host memory per ZeRO stage (full, LoRA or QLoRA)."""
    from dojo import _output
    from dojo import estimate as est
    from dojo.errors import EstimateError
    from dojo.estimate import table as estimate_table
    from dojo.modelspec import resolve_model

    if bucket_size is not None and bucket_size <= 0:  # before any network access
        raise EstimateError(
            f"--bucket-size {bucket_size}: must be positive",
            hint="use e.g. --bucket-size 500000000, or leave it out for HF's auto (hidden^2)",
        )
    if gpu_memory is None:
        from dojo.gpus import list_gpus

        gpus = list_gpus()
        gpu_memory = min(g.memory_gib for g in gpus) if gpus else None
    base = est.Setup(
        method=method.value,
        num_gpus=num_gpus,
        num_nodes=num_nodes,
        micro_batch=micro_batch,
        seq_len=seq_len,
        grad_ckpt=grad_ckpt,
        overlap_comm=overlap_comm,
        bucket_size=bucket_size,
        overlap_rule=overlap_rule.value,
        lora_rank=lora_rank,
        attention=attention.value,
        gpu_memory_gib=gpu_memory,
        cpu_memory_gib=cpu_memory,
    )
    est.validate(base)
    setups = plan_rows(
        base,
        zero.value,
        None if offload is None else offload.value,
        None if offload_param is None else offload_param.value,
    )
    spec = resolve_model(model)
    rows = [est.estimate(spec, s) for s in setups]
    if as_json:
        _output.echo(_output.dumps(estimate_table.payload(rows)))
    elif _output.stdout_is_tty():
        estimate_table.render_rich(rows)
    else:
        _output.echo(estimate_table.render_plain(rows))
    for note in dict.fromkeys(n for r in rows for n in r.notes):
        _output.info(f"note: {note}")
    if gpu_memory is None and not as_json:
        _output.info("note: no GPU found and no --gpu-memory given, so no fits verdict")


def plan_rows(
    base: "Setup", zero: str, offload: str | None, offload_param: str | None
) -> list["Setup"]:
    """The stage/offload rows to show. --offload at stage 3 also offloads params by default."""
    from dataclasses import replace

    from dojo.errors import EstimateError

    stages = [0, 1, 2, 3] if zero == "all" else [int(zero)]
    if offload_param not in (None, "none") and zero != "all" and int(zero) != 3:
        raise EstimateError(
            f"--offload-param {offload_param} exists only at ZeRO stage 3, got --zero {zero}",
            hint="use --zero 3, or drop --offload-param",
        )
    if offload not in (None, "none") and zero == "0":
        raise EstimateError(
            f"--offload {offload} needs ZeRO stage 1-3, got --zero 0", hint="use --zero 2 or 3"
        )
    combos: list[tuple[int, Any, Any]] = []  # (stage, optimizer offload, param offload)
    for st in stages:
        if offload is None and offload_param is None and zero == "all":
            # The DeepSpeed estimators' menu: each stage bare, then with CPU offload.
            combos.append((st, "none", "none"))
            if st in (1, 2):
                combos.append((st, "cpu", "none"))
            if st == 3:
                combos += [(st, "cpu", "none"), (st, "cpu", "cpu")]
            continue
        opt = offload or "none"
        if st == 0 and (opt != "none" or offload_param not in (None, "none")):
            continue
        param = offload_param if offload_param is not None else (opt if st == 3 else "none")
        combos.append((st, opt if st else "none", param if st == 3 else "none"))
    return [replace(base, stage=st, offload_optimizer=o, offload_param=p) for st, o, p in combos]
