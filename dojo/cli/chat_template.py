"""``dojo chat-template``: list, show, render and check chat templates.

Example: ``dojo chat-template render --template qwen3 --messages chat.json --add-generation-prompt``
"""

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from dojo import _output
from dojo.errors import DataError, DojoError, TemplateError
from dojo.safe_load import clip, shorten

if TYPE_CHECKING:
    from dojo.chat.check import CheckReport

chat_app = typer.Typer(
    no_args_is_help=True,
    help="Render chat templates exactly as transformers does, and check them for training.",
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

TemplateOpt = Annotated[
    str,
    typer.Option(
        "--template",
        help="Bundled name (see 'dojo chat-template list'), a .jinja file, a tokenizer_config.json, "
        "or a local model folder (chat_template.jinja or tokenizer_config.json, with its tokens).",
    ),
]
MessagesHelp = (
    "JSON file ('-' for stdin) with one conversation: OpenAI {'messages': [{role, content}]} "
    "or a bare list of messages, ShareGPT {'conversations': [{from, value}]}, or Alpaca "
    "{instruction, input, output}. The format is detected."
)
VarOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--var",
        help='Template variable KEY=VALUE (VALUE parsed as JSON if it can be: true, 3, "x"). Repeatable.',
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]


@chat_app.command("list")
def list_cmd(as_json: JsonOpt = False) -> None:
    """List the bundled chat templates: family and whether they handle system/tools/thinking.

    \b
    dojo chat-template list
    dojo chat-template list --json
    """
    # Sidecar metadata only: compiling every template (jinja2) made listing take 0.5-0.8 s.
    from dojo.chat.listing import bundled_rows

    rows = bundled_rows()
    if as_json:
        _output.echo(_output.dumps(rows))
        return
    header = ["name", "family", "system", "tools", "thinking", "official", "model"]
    table = [
        [str(r["name"]), str(r["family"])] + [_yn(r[k]) for k in header[2:6]] + [str(r["model"])]
        for r in rows
    ]
    if _output.stdout_is_tty():
        from rich.console import Console
        from rich.table import Table

        def rich_table(cols: int, caption: str | None = None) -> Table:
            rt = Table(*header[:cols], caption=caption)
            for row in table:
                rt.add_row(*row[:cols])
            return rt

        console = Console()
        rt = rich_table(len(header))
        # A table wider than the terminal has its cells cut to "…" by rich, names too, and a
        # name is what --template takes: the model id column goes first (it is in --json).
        unbounded = console.options.update_width(sys.maxsize)
        if console.measure(rt, options=unbounded).maximum > console.width:
            rt = rich_table(len(header) - 1, caption="model ids: --json")
        console.print(rt)
        return
    widths = [max(len(x) for x in col) for col in zip(header, *table, strict=False)]
    for row in [header, *table]:
        _output.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


@chat_app.command("show")
def show_cmd(
    name: Annotated[str, typer.Argument(help="Bundled template name.")], as_json: JsonOpt = False
) -> None:
    """Print a template's Jinja text exactly (its tokens and defaults go to stderr).

    \b
    dojo chat-template show llama-2-chat
    dojo chat-template show qwen3 --json
    """
    from dojo.chat.template import load_template

    t = load_template(name)
    meta = {
        "name": t.name,
        "family": t.family,
        "model": t.model,
        "official": t.official,
        "bos_token": t.bos_token,
        "eos_token": t.eos_token,
        "stop_token": t.stop_token,
        "variables": t.variables,
        "supports": t.supports,
    }
    if as_json:
        _output.echo(_output.dumps({**meta, "source": t.source}))
        return
    _output.info(" ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in meta.items()))
    _output.echo(t.source, end="")


@chat_app.command("render")
def render_cmd(
    template: TemplateOpt,
    messages: Annotated[str, typer.Option("--messages", help=MessagesHelp)],
    add_generation_prompt: Annotated[
        bool,
        typer.Option(
            "--add-generation-prompt", help="End with the assistant header, ready to generate."
        ),
    ] = False,
    tools: Annotated[
        str | None, typer.Option("--tools", help="JSON file with a list of tool schemas.")
    ] = None,
    var: VarOpt = None,
    bos_token: Annotated[
        str | None, typer.Option("--bos-token", help="Override the template's bos_token.")
    ] = None,
    eos_token: Annotated[
        str | None, typer.Option("--eos-token", help="Override the template's eos_token.")
    ] = None,
) -> None:
    """Render a conversation; prints exactly the rendered text, nothing added.

    \b
    dojo chat-template render --template qwen3 --messages chat.json --add-generation-prompt
    dojo chat-template render --template ./my-model --messages - --var enable_thinking=false < chat.json
    dojo chat-template render --template llama-3.1-instruct --messages chat.json --var date_string='"26 Jul 2024"'
    """
    from dojo.chat.template import load_template, render

    tpl = load_template(template)
    msgs = read_messages(messages)
    out = render(
        tpl,
        msgs,
        add_generation_prompt=add_generation_prompt,
        tools=read_tools(tools),
        bos_token=bos_token,
        eos_token=eos_token,
        **parse_vars(var),
    )
    _output.echo(_checked_text(out, "the rendering"), end="")


@chat_app.command("check")
def check_cmd(
    template: TemplateOpt,
    messages: Annotated[
        str | None, typer.Option("--messages", help=MessagesHelp + " Default: a built-in sample.")
    ] = None,
    var: VarOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Check a template for training: prefix-preserving? assistant spans, stop token, thinking in history.

    \b
    dojo chat-template check --template qwen3
    dojo chat-template check --template ./my-model --messages chat.json --json
    """
    from dojo.chat.check import check, untrained_problem
    from dojo.chat.template import load_template

    tpl = load_template(template)
    msgs = read_messages(messages) if messages is not None else None
    rep = check(tpl, msgs, **parse_vars(var))
    _checked_text(rep.spans.text, "the rendering")
    if as_json:
        _output.echo(_output.dumps(rep.to_dict()))
    else:
        _print_check(rep)
    problem = untrained_problem(rep.spans, rep.messages, template)
    if problem:  # after the report, which shows what the template rendered instead
        raise TemplateError(*problem)


def _print_check(rep: "CheckReport") -> None:
    from dojo.chat.check import marked

    thinking = {None: "n/a (no reasoning in an earlier turn)", True: "kept", False: "stripped"}
    lines = [
        f"template:            {rep.template}",
        "prefix-preserving:   " + ("yes" if rep.prefix_preserving else f"no: {rep.prefix_problem}"),
        f"stop token:          {rep.stop_token if rep.stop_token else '(none)'}",
        f"turns end with stop: {_yn(rep.ends_with_stop)}",
        f"thinking in history: {thinking[rep.thinking_in_history]}",
        f"assistant spans:     {len(rep.spans.spans)} ({sum(b - a for a, b in rep.spans.spans)} chars trained on)",
    ]
    for note in rep.notes:
        lines.append(f"note: {note}")
    for line in lines:
        _output.echo(line)
    _output.echo("")
    if _output.stdout_is_tty():
        from rich.console import Console
        from rich.text import Text

        text = Text(rep.spans.text)
        for a, b in rep.spans.spans:
            text.stylize("bold black on green", a, b)
        Console(highlight=False).print(text)
    else:
        _output.echo("rendering, assistant spans marked [[ ]]:")
        _output.echo(marked(rep.spans))


def _yn(flag: bool) -> str:
    return "yes" if flag else "no"


_HOLDS = {"--messages": "one JSON conversation", "--tools": "a JSON list of tool schemas"}


def _read_json(arg: str, flag: str) -> Any:
    from dojo.chat import files

    holds = _HOLDS.get(flag, "one JSON document")
    if arg == "-":
        raw = _read_stdin(flag)
    else:
        raw = files.read_text(
            Path(arg),
            flag,
            DataError,
            regular_only=False,
            what="a JSON file, or - for stdin",
            noun="JSON",
        )
    if not raw.strip():
        raise DataError(f"{flag} {shorten(arg, 200)} is empty", hint=f"the file must hold {holds}")
    if "\x00" in raw:  # a NUL byte means binary (git's and grep's rule)
        raise DataError(
            f"{flag} {shorten(arg, 200)} is a binary file, not JSON", hint="give a .json file"
        )
    try:
        return json.loads(raw)
    except RecursionError as e:
        raise DataError(
            f"{flag} {shorten(arg, 200)} nests lists/objects too deeply to parse",
            hint=f"the file must hold {holds}, a few levels deep",
        ) from e
    except json.JSONDecodeError as e:
        raise DataError(
            f"{flag} {shorten(arg, 200)} is not valid JSON: {clip(str(e), 200)}",
            hint=f"the file must hold {holds}",
        ) from e
    except ValueError as e:  # json.loads past Python's int-string limit
        raise DataError(
            f"{flag} {shorten(arg, 200)} holds an integer of more than {sys.get_int_max_str_digits():,} digits",
            hint=f"the file must hold {holds}; write such a number as a string",
        ) from e


def _read_stdin(flag: str) -> str:
    from dojo.chat import files

    buffer = getattr(sys.stdin, "buffer", None)
    try:
        if buffer is None:  # a text stream (tests, embedding): already decoded
            return sys.stdin.read(files.MAX_FILE_BYTES + 1)[: files.MAX_FILE_BYTES + 1]
        data = buffer.read(files.MAX_FILE_BYTES + 1)
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(
            f"{flag} '-' (stdin) cannot be read: {e}", hint="pipe a JSON file in"
        ) from e
    if len(data) > files.MAX_FILE_BYTES:
        raise DataError(
            f"{flag} '-' (stdin) is larger than {files.MAX_FILE_BYTES >> 20} MiB",
            hint="one conversation is far smaller; is it the right input?",
        )
    return files.decode(data, f"{flag} '-' (stdin)", DataError)


def _checked_text(text: str, what: str) -> str:
    """``text``, or a TemplateError when it cannot be written as UTF-8 (a lone surrogate from a
    --var, a token, or the template itself), instead of a UnicodeEncodeError at print time."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise TemplateError(
            f"{what} holds U+{ord(text[e.start]):04X} at character {e.start}, a lone "
            "surrogate that cannot be written as UTF-8",
            hint="it came from a --var/--bos-token/--eos-token value or the template: "
            "pass valid UTF-8 text",
        ) from e
    return text


def read_messages(arg: str) -> list[dict[str, Any]]:
    """Load --messages and normalise it to OpenAI messages (roles checked)."""
    from dojo.chat.conversation import to_messages

    record = _read_json(arg, "--messages")
    try:
        _fmt, msgs = to_messages(record)
    except DojoError as e:
        raise DataError(f"--messages {shorten(arg, 200)}: {e.message}", hint=e.hint) from e
    return msgs


def read_tools(arg: str | None) -> list[dict[str, Any]] | None:
    """Load --tools: a JSON list of tool schemas (or {"tools": [...]})."""
    if arg is None:
        return None
    data = _read_json(arg, "--tools")
    if isinstance(data, dict) and "tools" in data:
        data = data["tools"]
    example = (
        'e.g. [{"type": "function", "function": {"name": "get_weather", "parameters": {...}}}]'
    )
    if not isinstance(data, list):
        raise DataError(
            f"--tools {shorten(arg, 200)} must be a JSON list of tool schemas, not {type(data).__name__}",
            hint=example,
        )
    for i, tool in enumerate(data):
        if not isinstance(tool, dict):
            raise DataError(
                f"--tools {shorten(arg, 200)}: tool {i} is {type(tool).__name__} {shorten(tool)}, not an "
                "object (a tool schema)",
                hint=example,
            )
        if "role" in tool and "function" not in tool:
            raise DataError(
                f"--tools {shorten(arg, 200)}: tool {i} has a 'role': it is a chat message, not a tool schema",
                hint="give the conversation with --messages and the tool schemas with --tools",
            )
    return data


def parse_vars(items: list[str] | None) -> dict[str, Any]:
    """--var KEY=VALUE pairs; VALUE is JSON when it parses (true, 3, "x", [..]), else a string."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise DojoError(
                f"--var {shorten(item)} is not KEY=VALUE with KEY a name",
                hint="e.g. --var enable_thinking=false --var date_string='26 Jul 2024'",
            )
        try:
            out[key] = json.loads(value)
        except (ValueError, RecursionError):
            out[key] = value
    return out
