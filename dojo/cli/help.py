"""``--help`` of the commands that take run options, one section per option group.

Click's plain help lists every option in one block (a few hundred lines for ``dojo train``), and
rich's panels cost a few tenths of a second and truncate flags at 80 columns; this writes the
same text as click, grouped by the run schema's sections, with nothing imported.
"""

import inspect
import shutil
import textwrap
from typing import get_args

from dojo.run.schema import GROUPS, OPTIONS


def render(command: str, doc: str | None, own: list[inspect.Parameter], names: list[str]) -> str:
    """The help text of ``dojo COMMAND``: usage, the docstring, the command's own options, then
    each run-option group it takes."""
    width = max(60, min(110, shutil.get_terminal_size((100, 24)).columns))
    out = [f"Usage: dojo {command} [OPTIONS]", ""]
    out += [_doc(doc or "", width), ""]
    rows = [_own_row(p) for p in own]
    rows.append(("-h, --help", "Show this message and exit."))
    sections = [("Options", rows)]
    for group, (panel, _) in GROUPS.items():
        mine = [OPTIONS[n] for n in names if OPTIONS[n].group == group]
        if mine:
            sections.append((panel, [(_flags(o.flags, o.shown_metavar), o.help_text())
                                     for o in mine]))  # fmt: skip
    left = min(34, max(len(f) for _, rows in sections for f, _ in rows) + 2)
    for title, rows in sections:
        out.append(f"{title}:")
        for flags, text in rows:
            out += _row(flags, text, left, width)
        out.append("")
    if "model" in names and command != "train":  # train needs weights: no alias names them
        from dojo.architectures import alias_help

        out.append("Size aliases for --model:")
        out += textwrap.wrap(alias_help(), width, initial_indent="  ", subsequent_indent="  ")
    return "\n".join(out).rstrip() + "\n"


def _doc(doc: str, width: int) -> str:
    """The docstring as click shows it: paragraphs wrapped, a ``\\b`` block kept as written."""
    parts = []
    for para in inspect.cleandoc(doc).split("\n\n"):
        if para.startswith("\b"):
            parts.append("\n".join("  " + line for line in para[1:].strip("\n").splitlines()))
        else:
            parts.append(textwrap.fill(" ".join(para.split()), width, initial_indent="  ",
                                       subsequent_indent="  "))  # fmt: skip
    return "\n\n".join(parts)


def _row(flags: str, text: str, left: int, width: int) -> list[str]:
    body = textwrap.wrap(text, max(20, width - left - 2)) or [""]
    if len(flags) + 2 > left:
        lines = ["  " + flags]
        lines += [" " * (left + 2) + b for b in body]
        return lines
    first = f"  {flags:<{left}}{body[0]}"
    return [first, *(" " * (left + 2) + b for b in body[1:])]


def _flags(flags: tuple[str, ...], metavar: str) -> str:
    shown = ", ".join(flags)
    return f"{shown} {metavar}" if metavar else shown


def _own_row(p: inspect.Parameter) -> tuple[str, str]:
    """A command's own Typer option (Annotated[type, typer.Option(...)]) as (flags, help)."""
    info = get_args(p.annotation)[1]
    decls = list(info.param_decls)
    if isinstance(info.default, str) and info.default.startswith("-"):  # Annotated's first flag
        decls.insert(0, info.default)
    decls = decls or ["--" + p.name.replace("_", "-")]
    return _flags(tuple(decls), info.metavar or ""), info.help or ""
