"""The ``dojo`` command line: a Typer app (config, estimate, train, chat-template, chat, export,
--version), and the one error funnel.

Top-level imports stay stdlib + typer + dojo's light modules so ``dojo --help`` answers in a
fraction of a second; each command imports its core module inside its body.
"""

import os
import sys

import typer

from dojo import _output
from dojo.cli import chat, export, version
from dojo.cli.chat_template import chat_app
from dojo.cli.config import config_cmd
from dojo.cli.estimate import estimate_cmd
from dojo.cli.train import train_cmd
from dojo.errors import DojoError

app = typer.Typer(
    name="dojo",
    help="Fine-tune open LLMs with DeepSpeed: ZeRO configs, memory estimates, launch, chat templates.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
# Their --help is dojo.cli.help's, one section per option group.
app.command("config", add_help_option=False)(config_cmd)
app.command("estimate", add_help_option=False)(estimate_cmd)
app.command("train", add_help_option=False, context_settings={"allow_interspersed_args": True})(
    train_cmd
)
app.add_typer(chat_app, name="chat-template")
app.command("chat")(chat.chat_cmd)
app.command("export")(export.export_cmd)
app.callback()(version.root)


def _debug() -> bool:
    return os.environ.get("DOJO_DEBUG", "") not in ("", "0")


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; every failure becomes one ``error:`` line (and a ``hint:``) on stderr."""
    args = sys.argv[1:] if argv is None else argv
    from dojo.cli import options

    options.ARGV[:] = args
    try:
        rc = app(args=args, prog_name="dojo", standalone_mode=False)
    except DojoError as e:
        if _debug():
            raise
        for message, hint in e.lines():
            _output.error(message, hint)
        sys.exit(e.exit_code)
    except typer.TyperException as e:  # usage errors: bad flag, bad value, missing argument
        if _debug():
            raise
        if type(e).__name__ == "NoArgsIsHelpError":  # bare `dojo` or `dojo chat-template`
            _output.echo(e.format_message())
            sys.exit(0)
        msg = e.format_message()
        msg = msg[:1].lower() + msg[1:]
        # The failing command's own path ("dojo chat-template" for an unknown subcommand),
        # so the hint never names a command that does not exist.
        path = getattr(getattr(e, "ctx", None), "command_path", None)
        if not path:
            path = " ".join(["dojo", *(a for a in args[:2] if not a.startswith("-"))])
        _output.error(msg.rstrip("."), f"see '{path} --help'")
        sys.exit(getattr(e, "exit_code", 2))
    except (typer.Abort, KeyboardInterrupt):
        sys.stderr.write("\naborted\n")
        sys.exit(130)
    except BrokenPipeError:  # `dojo config | head` closed stdout early
        sys.exit(0)
    except Exception as e:  # noqa: BLE001 - last line of defence: no traceback for users
        if _debug():
            raise
        _output.error(
            f"internal error: {type(e).__name__}: {e}",
            "rerun with DOJO_DEBUG=1 for the traceback and report it",
        )
        sys.exit(1)
    sys.exit(rc if isinstance(rc, int) else 0)
