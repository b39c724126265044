"""PLACEHOLDER: owned by the train work; replaced in full."""

import typer


def train_cmd() -> None:
    """Placeholder."""
    raise typer.Exit(3)
