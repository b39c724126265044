"""`dojo train`: check everything, write the run's config files, launch DeepSpeed's runner.

Every option defaults to "not given" so a --config file value is never silently overridden.
"""

from pathlib import Path
from typing import Annotated

import typer

_RUN = "Run"
_MODEL = "Model and data"
_OPT = "Optimisation"
_LORA = "LoRA / QLoRA"
_DS = "DeepSpeed and devices"


def train_cmd(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", "-c", help="Run YAML (templates/train/*.yaml); flags override it."
        ),
    ] = None,
    method: Annotated[
        str | None, typer.Option(help="full | lora | qlora [default: lora]", rich_help_panel=_RUN)
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            help="Local model folder or Hub id [default: bundled tiny model]",
            rich_help_panel=_MODEL,
        ),
    ] = None,
    data: Annotated[
        list[str] | None,
        typer.Option(
            help="jsonl/json/parquet file or Hub dataset; repeat for several [default: bundled demo chats]",
            rich_help_panel=_MODEL,
        ),
    ] = None,
    template: Annotated[
        str | None,
        typer.Option(
            help="Bundled chat template name or .jinja file [default: the model's own]",
            rich_help_panel=_MODEL,
        ),
    ] = None,
    seq_len: Annotated[
        int | None,
        typer.Option(help="Max tokens per sample [default: 1024]", rich_help_panel=_MODEL),
    ] = None,
    overflow: Annotated[
        str | None,
        typer.Option(
            help="Samples over --seq-len: truncate | drop [default: truncate]",
            rich_help_panel=_MODEL,
        ),
    ] = None,
    packing: Annotated[
        bool | None,
        typer.Option(
            "--packing/--no-packing",
            help="Pack short samples into full rows",
            rich_help_panel=_MODEL,
        ),
    ] = None,
    trust_remote_code: Annotated[
        bool | None,
        typer.Option(
            "--trust-remote-code/--no-trust-remote-code",
            help="Run Python code shipped with the model (off by default)",
            rich_help_panel=_MODEL,
        ),
    ] = None,
    micro_batch: Annotated[
        int | None, typer.Option(help="Samples per GPU per step [default: 4]", rich_help_panel=_OPT)
    ] = None,
    grad_accum: Annotated[
        int | None,
        typer.Option(help="Gradient accumulation steps [default: 1]", rich_help_panel=_OPT),
    ] = None,
    lr: Annotated[
        float | None,
        typer.Option(
            help="Peak learning rate [default: 2e-4 LoRA, 2e-5 full]", rich_help_panel=_OPT
        ),
    ] = None,
    warmup_steps: Annotated[
        int | None, typer.Option(help="Warmup steps [default: 0]", rich_help_panel=_OPT)
    ] = None,
    epochs: Annotated[
        float | None, typer.Option(help="Epochs [default: 1]", rich_help_panel=_OPT)
    ] = None,
    max_steps: Annotated[
        int | None,
        typer.Option(
            help="Stop after N optimizer steps (overrides --epochs)", rich_help_panel=_OPT
        ),
    ] = None,
    grad_ckpt: Annotated[
        bool | None,
        typer.Option(
            "--grad-ckpt/--no-grad-ckpt", help="Gradient checkpointing", rich_help_panel=_OPT
        ),
    ] = None,
    overlap_comm: Annotated[
        bool | None,
        typer.Option(
            "--overlap-comm/--no-overlap-comm",
            help="Overlap gradient reduction with backward [default: on]",
            rich_help_panel=_OPT,
        ),
    ] = None,
    bucket_size: Annotated[
        str | None,
        typer.Option(
            help="reduce_bucket_size in elements, e.g. 2e8 [default: 5e8 for full ZeRO-1/2, "
            "else auto = hidden^2]",
            rich_help_panel=_OPT,
        ),
    ] = None,
    attn: Annotated[
        str | None,
        typer.Option(
            help="Attention: auto, sdpa, eager, flex_attention, flash_attention_2 [default: auto]",
            rich_help_panel=_OPT,
        ),
    ] = None,
    liger: Annotated[
        str | None,
        typer.Option(
            help="Liger kernels incl. fused linear cross-entropy: auto (CUDA + liger-kernel), on, off",
            rich_help_panel=_OPT,
        ),
    ] = None,
    compile: Annotated[
        str | None,
        typer.Option(
            "--compile",
            help="torch.compile each decoder layer: auto (CUDA full fine-tuning, ZeRO<=2, "
            "no offload/ckpt), on, off [default: auto]",
            rich_help_panel=_OPT,
        ),
    ] = None,
    save_model: Annotated[
        bool | None,
        typer.Option(
            "--save-model/--no-save-model",
            help="Write the final model or adapter [default: on]",
            rich_help_panel=_RUN,
        ),
    ] = None,
    optimizer: Annotated[
        str | None,
        typer.Option(
            help="Optimizer from hf (Trainer) or ds (DeepSpeed JSON) [default: hf]",
            rich_help_panel=_OPT,
        ),
    ] = None,
    scheduler: Annotated[
        str | None,
        typer.Option(help="LR scheduler from hf or ds [default: hf]", rich_help_panel=_OPT),
    ] = None,
    precision: Annotated[
        str | None,
        typer.Option(
            help="auto | bf16 | fp16 | fp32 [default: auto = bf16 on GPU, fp32 on CPU]",
            rich_help_panel=_OPT,
        ),
    ] = None,
    seed: Annotated[
        int | None, typer.Option(help="Random seed [default: 42]", rich_help_panel=_OPT)
    ] = None,
    lora_r: Annotated[
        int | None, typer.Option(help="LoRA rank [default: 16]", rich_help_panel=_LORA)
    ] = None,
    lora_alpha: Annotated[
        int | None, typer.Option(help="LoRA alpha [default: 32]", rich_help_panel=_LORA)
    ] = None,
    lora_dropout: Annotated[
        float | None, typer.Option(help="LoRA dropout [default: 0.05]", rich_help_panel=_LORA)
    ] = None,
    lora_targets: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated module names [default: all-linear]", rich_help_panel=_LORA
        ),
    ] = None,
    merge: Annotated[
        bool | None,
        typer.Option(
            "--merge/--no-merge",
            help="Also write merged weights to OUTPUT/merged",
            rich_help_panel=_LORA,
        ),
    ] = None,
    output_dir: Annotated[
        str | None,
        typer.Option(
            "--output-dir", "-o", help="Run folder [default: runs/dojo]", rich_help_panel=_RUN
        ),
    ] = None,
    resume: Annotated[
        bool | None,
        typer.Option(
            "--resume/--no-resume",
            help="Continue from the latest complete checkpoint",
            rich_help_panel=_RUN,
        ),
    ] = None,
    save_steps: Annotated[
        int | None,
        typer.Option(
            help="Checkpoint every N steps, 0 = never [default: 50]", rich_help_panel=_RUN
        ),
    ] = None,
    save_total_limit: Annotated[
        int | None, typer.Option(help="Checkpoints kept [default: 2]", rich_help_panel=_RUN)
    ] = None,
    logging_steps: Annotated[
        int | None, typer.Option(help="Log every N steps [default: 1]", rich_help_panel=_RUN)
    ] = None,
    zero: Annotated[
        int | None, typer.Option(help="ZeRO stage 0-3 [default: 2]", rich_help_panel=_DS)
    ] = None,
    offload: Annotated[
        str | None,
        typer.Option(help="Optimizer offload: none | cpu [default: none]", rich_help_panel=_DS),
    ] = None,
    offload_param: Annotated[
        str | None,
        typer.Option(
            help="Parameter offload (ZeRO-3): none | cpu [default: none]", rich_help_panel=_DS
        ),
    ] = None,
    gpus: Annotated[
        str | None,
        typer.Option(
            help="'all' or ids like 0,1 [default: all GPUs, else CPU]", rich_help_panel=_DS
        ),
    ] = None,
    nproc: Annotated[
        int | None,
        typer.Option(help="CPU processes when there is no GPU [default: 1]", rich_help_panel=_DS),
    ] = None,
    hostfile: Annotated[
        str | None,
        typer.Option(help="DeepSpeed hostfile for several machines", rich_help_panel=_DS),
    ] = None,
    num_nodes: Annotated[
        int | None, typer.Option(help="Machines to use from the hostfile", rich_help_panel=_DS)
    ] = None,
    master_addr: Annotated[
        str | None, typer.Option(help="First machine's address (multi-node)", rich_help_panel=_DS)
    ] = None,
    master_port: Annotated[
        int | None, typer.Option(help="Rendezvous port [default: a free one]", rich_help_panel=_DS)
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Launch even if the estimate says it will not fit; reuse --output-dir"
        ),
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="Print the exact command and resolved config; launch nothing"
        ),
    ] = False,
) -> None:
    """Fine-tune a causal LM with HF Trainer + DeepSpeed (full, LoRA or QLoRA) on the chosen GPUs.

    Precedence: built-in default < --config file < flag. With no --model and no --data it trains
    the bundled tiny model on the bundled demo chats (CPU included).

    \b
    dojo train --nproc 2 --output-dir runs/demo
    dojo train --gpus 0,1 --model ./Llama-3.2-1B --data chats.jsonl --zero 2
    dojo train --config templates/train/qlora.yaml --gpus 0 --dry-run
    """
    from dojo.train import driver as train_run

    flags = {
        k: v for k, v in locals().items() if k not in ("config", "force", "dry_run", "train_run")
    }
    if flags.get("data") == []:
        flags["data"] = None
    flags["zero_stage"] = flags.pop("zero")
    rc = train_run.main(config, flags, force=force, dry_run=dry_run)
    if rc:
        raise typer.Exit(rc)
