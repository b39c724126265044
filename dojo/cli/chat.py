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
    # Numbers arrive as text and are parsed as dojo train's are (run.field.Option): one error
    # line with an example, and NaN or inf refused (a bare float range lets them through).
    max_new_tokens: Annotated[
        str,
        typer.Option("--max-new-tokens", metavar="INT", help="Longest answer, in tokens."),
    ] = "512",
    temperature: Annotated[
        str,
        typer.Option("--temperature", metavar="NUMBER", help="Sampling temperature; 0 = greedy."),
    ] = "0.7",
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

    tokens = int(_number("--max-new-tokens", max_new_tokens, integer=True, lo=1, example="256"))
    temp = _number("--temperature", temperature, integer=False, lo=0.0, example="0")
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
        max_new_tokens=tokens,
        temperature=temp,
        device=device,
        template=template,
        interactive=sys.stdin.isatty(),
    )
    if rc:
        raise typer.Exit(rc)


def _number(flag: str, raw: str, *, integer: bool, lo: float, example: str) -> float:
    """A finite number of at least ``lo``, or dojo train's error for the flag."""
    from dojo.run.field import Option

    option = Option(
        name=flag[2:],
        group="chat",
        panel="",
        kind="int" if integer else "float",
        default=None,
        help="",
        why="",
        flags=(flag,),
        lo=lo,
        example=example,
    )
    value: float = option.parse(raw)
    return value
