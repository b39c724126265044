"""PLACEHOLDER: owned by the chat-template work; replaced in full."""

import typer

chat_app = typer.Typer(no_args_is_help=True, help="Render chat templates exactly as transformers does.")


@chat_app.command("list")
def list_cmd() -> None:
    """Placeholder."""
    raise typer.Exit(3)
