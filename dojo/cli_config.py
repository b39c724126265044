"""PLACEHOLDER: owned by the config work; replaced in full."""

import typer


def config_cmd() -> None:
    """Placeholder."""
    raise typer.Exit(3)
