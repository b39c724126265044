"""`dojo export RUN_DIR`: one servable model folder (adapter merged in 16-bit, or re-saved).

Thin: every check that needs no torch (the run folder, -o, --dtype, --push-to-hub and the login)
runs first, then dojo.train.worker.export loads, merges and writes.
"""

from pathlib import Path
from typing import Annotated

import typer

from dojo.cli.options import RunDirArg

DTYPES = ("bf16", "fp16", "fp32")


def export_cmd(
    run_dir: RunDirArg,
    output: Annotated[
        str | None,
        typer.Option(
            "--output", "-o", metavar="DIR", help="Folder to write [default: RUN_DIR/export]."
        ),
    ] = None,
    dtype: Annotated[
        str | None,
        typer.Option(
            "--dtype",
            metavar="bf16|fp16|fp32",
            help="Weights' dtype [default: the run's --precision].",
            show_default=False,
        ),
    ] = None,
    push_to_hub: Annotated[
        str | None,
        typer.Option(
            "--push-to-hub",
            metavar="REPO",
            help="Also upload the folder to this Hub model repo (token from 'hf auth login').",
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Replace an earlier export (never a run or checkpoint folder)."
        ),
    ] = False,
) -> None:
    """Write a standalone model folder: LoRA/QLoRA merged into the base, safetensors, tokenizer.

    The adapter is merged into the base loaded unquantized in --dtype (never into 4-bit weights);
    a full fine-tune is re-saved. The tokenizer carries the chat template the run trained with,
    and generation_config.json stops on its end-of-turn token. transformers and vLLM load it as is.

    \b
    dojo export runs/demo
    dojo export runs/demo -o llama-1b-chat --dtype bf16 --push-to-hub me/llama-1b-chat
    """
    from dojo import _output
    from dojo.errors import DojoError
    from dojo.train import outputs

    if dtype is not None and dtype not in DTYPES:
        raise DojoError(f"--dtype {dtype!r} is not one of {', '.join(DTYPES)}", hint="--dtype bf16")
    outputs.require_extras("export", adapter=False)
    out = outputs.inspect(run_dir, use_merged=False)
    outputs.require_extras("export", adapter=out.kind == "adapter")
    dest = outputs.export_target(out.folder, output, force=force)
    repo = outputs.check_repo_id(push_to_hub) if push_to_hub is not None else None
    from dojo.train.worker import export

    chosen = dtype or out.run.kernels.precision
    _output.info(f"dojo export: {out.describe()} -> {dest} ({chosen})")
    export.export(out, dest, dtype=chosen, force=force)
    _output.info(f"exported: {dest}")
    if repo is not None:
        url = outputs.push(dest, repo, out.folder)
        _output.info(f"pushed: {url}")
    _output.echo(str(Path(dest)))
