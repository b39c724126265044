"""The one error type that crosses the CLI boundary.

The core raises ``DojoError("what went wrong", hint="what to do next")`` and never prints;
``dojo.cli.main`` turns it into ``error: ...`` / ``hint: ...`` on stderr and exit code 1.
"""


class DojoError(Exception):
    """A user or environment problem, with an optional hint naming the fix."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class ConfigError(DojoError):
    """A bad DeepSpeed or run configuration (flag, YAML or JSON)."""


class EstimateError(DojoError):
    """A model or setting the memory estimator cannot use."""


class TemplateError(DojoError):
    """A chat template that is unknown, does not parse, or refused the conversation."""


class DataError(DojoError):
    """Conversations or dataset rows that are not usable."""


class LaunchError(DojoError):
    """A training run that cannot be launched (GPUs, ports, output folder, extras)."""


class MissingExtraError(DojoError):
    """An optional dependency group is not installed."""
