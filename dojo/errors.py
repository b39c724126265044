"""The one error type that crosses the CLI boundary.

The core raises ``DojoError("what went wrong", hint="what to do next")`` and never prints;
``dojo.cli.main`` turns it into ``error: ...`` / ``hint: ...`` on stderr and exit code 1.
"""


class DojoError(Exception):
    """A user or environment problem, with an optional hint naming the fix."""

    exit_code = 1

    def __init__(
        self, message: str, hint: str | None = None, more: tuple[tuple[str, str], ...] = ()
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.more = more
        """Further problems found by the same check, each (message, hint): one line each."""

    @classmethod
    def of(cls, problems: list[tuple[str, str]]) -> "DojoError":
        """One error for every problem a check found (the first is the message)."""
        (message, hint), *rest = problems
        return cls(message, hint, tuple(rest))

    def lines(self) -> list[tuple[str, str | None]]:
        return [(self.message, self.hint), *self.more]


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
