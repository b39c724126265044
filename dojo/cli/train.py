"""`dojo train`: check everything, write the run's config files, launch DeepSpeed's runner.

Every option comes from the run schema (dojo.run.schema) and defaults to "not given", so a
--config file value is never silently overridden.
"""

from typing import Annotated, Any

import typer

from dojo.cli.options import with_run_options


@with_run_options("train")
def train_cmd(
    opts: dict[str, Any],
    config: Annotated[
        str | None,
        typer.Option(
            "--config",
            "-c",
            help="Run YAML file, or a bundled preset by name (full, lora, qlora); flags override it.",
            metavar="FILE|PRESET",
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Train into an --output-dir that holds an earlier run, starting over: its "
            "checkpoints are removed (--resume continues it instead)",
        ),
    ] = False,
    skip_fit_check: Annotated[
        bool,
        typer.Option(
            "--skip-fit-check",
            help="Launch even if the estimate says the run will not fit the GPUs, or their free "
            "memory",
        ),
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Check, write the run files (never into a folder holding a run) and print the exact "
            "launch command; launch nothing",
        ),
    ] = False,
    print_config: Annotated[
        bool,
        typer.Option(
            "--print-config", help="Print every option, resolved, as a YAML run file; do nothing"
        ),
    ] = False,
) -> None:
    """Fine-tune a causal LM with HF Trainer + DeepSpeed (full, LoRA or QLoRA) on the chosen GPUs.

    Precedence: built-in default < --config file < flag. With no --model and no --data it trains
    the bundled tiny model on the bundled demo chats (CPU included).

    \b
    dojo train --nproc 2 --output-dir runs/demo
    dojo train --gpus 0,1 --model ./Llama-3.2-1B --data chats.jsonl --zero 2
    dojo train --config qlora --gpus 0 --dry-run
    """
    from dojo.train import driver

    rc = driver.main(
        config, opts, force=force, skip_fit_check=skip_fit_check, dry_run=dry_run,
        print_config=print_config,
    )  # fmt: skip
    if rc:
        raise typer.Exit(rc)
