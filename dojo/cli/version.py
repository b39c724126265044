"""`dojo --version`: the root callback (the app's only global option)."""

from typing import Annotated

import typer


def _show(value: bool) -> None:
    if value:
        from dojo import __version__, _output

        _output.echo(f"dojo {__version__}")
        raise typer.Exit(0)


def root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print dojo's version and exit.", callback=_show, is_eager=True
        ),
    ] = False,
) -> None:
    """Fine-tune open LLMs with DeepSpeed: ZeRO configs, memory estimates, launch, chat templates."""
