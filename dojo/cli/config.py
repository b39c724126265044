"""`dojo config`: write a DeepSpeed ZeRO JSON for the HF Trainer, or lint one.

Examples:
    dojo config --stage 2 > ds_zero2.json
    dojo config --stage 3 --offload cpu --optimizer ds --model 8b -o ds.json --explain
    dojo config --check ds.json
"""

from typing import TYPE_CHECKING, Annotated

import typer

from dojo import _output
from dojo.errors import ConfigError

if TYPE_CHECKING:
    from dojo.zero import ZeroConfig


def _parse_count(text: str, flag: str) -> int:
    """An element count written as 200000000, 2e8 or 2_0000_0000."""
    try:
        value = float(text.replace("_", ""))
    except ValueError:
        value = float("nan")
    if value != value or value != int(value):
        raise ConfigError(
            f"{flag} {text!r} is not a whole number of elements",
            hint=f"e.g. {flag} 2e8 or {flag} 200000000",
        )
    return int(value)


def config_cmd(
    stage: Annotated[int | None, typer.Option(help="ZeRO stage: 0, 1, 2 or 3.")] = None,
    offload: Annotated[
        str,
        typer.Option(
            help="Offload optimizer states: none, cpu or nvme (stages 1-3; at stage 3 also params)."
        ),
    ] = "none",
    offload_param: Annotated[
        str | None,
        typer.Option(
            help="Offload parameters: none, cpu or nvme (stage 3 only). Default: as --offload."
        ),
    ] = None,
    nvme_path: Annotated[
        str | None, typer.Option(help="Local NVMe folder, needed for nvme offload.")
    ] = None,
    overlap_comm: Annotated[
        bool,
        typer.Option(
            help="Overlap gradient reduction with backward (costs one extra bucket at stages 1-2)."
        ),
    ] = True,
    bucket_size: Annotated[
        str | None,
        typer.Option(
            help='reduce/allgather bucket size in elements, e.g. 2e8. Default "auto" (hidden_size^2).'
        ),
    ] = None,
    optimizer: Annotated[
        str,
        typer.Option(
            help='hf = TrainingArguments optim; ds = a DeepSpeed AdamW block ("auto" params).'
        ),
    ] = "hf",
    scheduler: Annotated[
        str,
        typer.Option(
            help="hf = TrainingArguments lr_scheduler_type; ds = a DeepSpeed WarmupDecayLR block."
        ),
    ] = "hf",
    precision: Annotated[
        str, typer.Option(help="bf16, fp16, or auto (TrainingArguments --bf16/--fp16 decide).")
    ] = "auto",
    model: Annotated[
        str | None,
        typer.Option(
            help='Resolve the "auto" bucket sizes from this model\'s hidden size (alias, name, config.json).'
        ),
    ] = None,
    output: Annotated[
        str | None, typer.Option("-o", "--output", help="Write the JSON here instead of stdout.")
    ] = None,
    force: Annotated[bool, typer.Option(help="Replace an existing -o file.")] = False,
    explain: Annotated[
        bool,
        typer.Option(
            help="Say on stderr which optimizer/scheduler will run and what overlap_comm costs."
        ),
    ] = False,
    check: Annotated[
        str | None,
        typer.Option(
            help="Lint an existing DeepSpeed JSON instead of writing one.", metavar="FILE"
        ),
    ] = None,
) -> None:
    """Write a DeepSpeed ZeRO config (JSON) for the HF Trainer, or --check an existing one."""
    if check is not None:
        if stage is not None or output is not None:
            raise ConfigError(
                "--check FILE lints a file and takes no --stage or -o",
                hint=f"run 'dojo config --check {check}' alone",
            )
        raise typer.Exit(_run_check(check))
    if stage is None:
        raise ConfigError(
            "missing --stage", hint="choose --stage 0, 1, 2 or 3, e.g. dojo config --stage 2"
        )
    from dojo import zero

    cfg = zero.ZeroConfig(
        stage=stage,
        offload=offload,
        offload_param=offload_param,
        nvme_path=nvme_path,
        overlap_comm=overlap_comm,
        bucket_size=None if bucket_size is None else _parse_count(bucket_size, "--bucket-size"),
        optimizer=optimizer,
        scheduler=scheduler,
        precision=precision,
    )
    cfg.check()  # flag errors first, before touching the model or the output file
    if output is not None:
        from dojo._io import check_writable

        check_writable(output, force=force)
    if model is not None:
        cfg = _with_model(cfg, model)
    if nvme_path and "nvme" not in (cfg.offload, cfg.offload_param_device):
        _output.warn(f"--nvme-path {nvme_path} is unused: nothing is offloaded to nvme")
    ds = zero.build_ds_config(cfg)
    if explain:
        from dojo.zero import explain as zero_explain

        for line in zero_explain.explain_optim_sched(ds):
            _output.info(line)
        for line in zero_explain.explain_overlap_comm(ds, cfg.hidden_size):
            _output.info(line)
    text = _output.dumps(ds) + "\n"
    if output is None:
        _output.echo(text, end="")
        return
    from dojo._io import write_text_atomic

    write_text_atomic(output, text, force=force)
    _output.info(f"wrote {output}")


def _with_model(cfg: "ZeroConfig", model: str) -> "ZeroConfig":
    import dataclasses

    from dojo.modelspec import resolve_model

    spec = resolve_model(model)
    return dataclasses.replace(
        cfg,
        hidden_size=spec.hidden_size,
        largest_param=spec.vocab_size * spec.hidden_size,
    )


def _run_check(path: str) -> int:
    from dojo.zero.check import check_file

    findings = check_file(path)
    for f in findings:
        _output.echo(f.format(path))
    errors = sum(f.level == "error" for f in findings)
    warnings = len(findings) - errors
    if not findings:
        _output.info(f"{path}: ok")
    else:
        _output.info(f"{path}: {errors} error(s), {warnings} warning(s)")
    return 1 if errors else 0
