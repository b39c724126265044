"""Typer options made from the run schema, so every command spells and parses an option the same.

``with_run_options("estimate")`` wraps a command body ``fn(opts: dict, **own)``: Typer sees the
body's own parameters, then one option per schema field the command takes (all defaulting to
None = "not given"), listed under its group's --help section; the body receives the raw given
values in ``opts``, and under the key ``__spelled__`` how each given flag was spelled (an alias
counts), for error messages.
"""

import inspect
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer

from dojo.run.schema import OPTIONS, command_options

RunDirArg = Annotated[
    str,
    typer.Argument(
        metavar="RUN_DIR",
        help="A `dojo train` --output-dir (or one of its checkpoint-N folders).",
        show_default=False,
    ),
]
"""The run folder `dojo chat` and `dojo export` read."""

ARGV: list[str] = []
"""The command line being run (set by dojo.cli.main): errors name the flag as the user typed it."""


def spelled(name: str) -> str:
    """The spelling of option ``name`` on the command line (an alias counts), else the canonical."""
    flags = [f.split("/")[0] for f in OPTIONS[name].flags]
    for arg in ARGV:
        for f in flags:
            if arg == f or arg.startswith(f + "="):
                return f
    return flags[0]


def _param(name: str) -> inspect.Parameter:
    opt = OPTIONS[name]
    kind: Any = {"bool": bool | None, "list": list[str] | None}.get(opt.kind, str | None)
    info = typer.Option(
        *opt.flags,
        help=opt.help_text(),
        metavar=opt.shown_metavar or None,
        show_default=False,
    )
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[kind, info]
    )


def with_run_options(command: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    names = list(command_options(command))

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        own = [p for p in inspect.signature(fn).parameters.values() if p.name != "opts"]
        params = [*(p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own)]
        params += [_param(n) for n in names]

        def show_help(value: bool) -> None:
            if value:
                from dojo.cli.help import render

                sys.stdout.write(render(command, fn.__doc__, own, names))
                raise typer.Exit(0)

        params.append(
            inspect.Parameter(
                "help_",
                inspect.Parameter.KEYWORD_ONLY,
                default=False,
                annotation=Annotated[
                    bool,
                    typer.Option("--help", "-h", is_eager=True, expose_value=True,
                                 callback=show_help, help="Show this message and exit."),
                ],
            )
        )  # fmt: skip

        def command_body(**kwargs: Any) -> Any:
            kwargs.pop("help_", None)
            opts = {n: kwargs.pop(n) for n in names}
            opts["__spelled__"] = {n: spelled(n) for n in names if opts[n] is not None}
            for n in names:  # a repeatable option not given arrives as []
                if opts[n] == []:
                    opts[n] = None
            return fn(opts, **kwargs)

        command_body.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command_body.__annotations__ = {p.name: p.annotation for p in params}
        command_body.__doc__ = fn.__doc__
        command_body.__name__ = fn.__name__
        return command_body

    return wrap
