"""`dojo chat RUN_DIR`: talk to a trained run through the chat template it trained with.

Thin: checks the flags and the run folder (torch-free, dojo.train.outputs), then hands over to
dojo.train.worker.serve, which loads the model.
"""

import sys
from typing import Annotated

import typer

from dojo.cli.options import RunDirArg

DEVICES = ("auto", "cpu", "cuda")


def chat_cmd(
    run_dir: RunDirArg,
    prompt: Annotated[
        str | None,
        typer.Option(
            "--prompt", "-p", metavar="TEXT", help="Answer this one message on stdout, then exit."
        ),
    ] = None,
    system: Annotated[
        str | None,
        typer.Option(
            "--system", metavar="TEXT", help="System message put before the conversation."
        ),
    ] = None,
    max_new_tokens: Annotated[
        int,
        typer.Option("--max-new-tokens", min=1, metavar="INT", help="Longest answer, in tokens."),
    ] = 512,
    temperature: Annotated[
        float,
        typer.Option(
            "--temperature", min=0.0, metavar="NUMBER", help="Sampling temperature; 0 = greedy."
        ),
    ] = 0.7,
    device: Annotated[
        str,
        typer.Option("--device", metavar="auto|cpu|cuda", help="auto = a GPU when there is one."),
    ] = "auto",
    template: Annotated[
        str | None,
        typer.Option(
            "--template",
            metavar="NAME|FILE",
            help="Another chat template than the run's (bundled name or .jinja file).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Chat with a trained run: interactive on a terminal, or one answer with --prompt.

    Loads what the run saved (full model, LoRA/QLoRA adapter on its base, or RUN_DIR/merged),
    renders every turn with the chat template the run trained with, and streams the answer.
    Without --prompt and without a terminal, stdin is the one message.

    \b
    dojo chat runs/demo
    dojo chat runs/demo --prompt "What is ZeRO-3?" --max-new-tokens 64 --temperature 0
    """
    from dojo.errors import DojoError
    from dojo.train import outputs

    if device not in DEVICES:
        raise DojoError(
            f"--device {device!r} is not one of {', '.join(DEVICES)}", hint="--device auto"
        )
    if prompt is not None and not prompt.strip():
        raise DojoError("--prompt is empty", hint="give the message to answer: --prompt TEXT")
    outputs.require_extras("chat", adapter=False)
    out = outputs.inspect(run_dir)
    outputs.require_extras("chat", adapter=out.kind == "adapter")
    from dojo.train.worker import serve

    rc = serve.run(
        out,
        prompt=prompt,
        system=system,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        device=device,
        template=template,
        interactive=sys.stdin.isatty(),
    )
    if rc:
        raise typer.Exit(rc)
