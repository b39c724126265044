"""PLACEHOLDER: owned by the estimate work; replaced in full."""

import typer


def estimate_cmd() -> None:
    """Placeholder."""
    raise typer.Exit(3)
