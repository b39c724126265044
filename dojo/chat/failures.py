"""Turn whatever a template raised into a TemplateError that says where and what to change.

Jinja rewrites tracebacks so the template's own frames carry its line numbers and variables;
the deepest one tells the line, and a local that IS one of the rendered message dicts tells
which message the template was on (``for message in messages`` and its variants).
"""

import traceback
from functools import lru_cache
from typing import Any

from dojo.errors import TemplateError

_TOOL_CALLS_SHAPE = (
    'tool_calls must be a list of {"type": "function", "function": {"name": ..., '
    '"arguments": {...}}}'
)


@lru_cache(maxsize=1)
def raised_class() -> Any:
    """The exception raise_exception(...) raises: a jinja2 TemplateError, told apart here."""
    import jinja2

    # Named like its base: callers (and transformers' users) see type(e).__name__ == "TemplateError".
    class TemplateError(jinja2.exceptions.TemplateError):  # noqa: N818
        pass

    return TemplateError


def _where(e: BaseException, source: str, messages: Any) -> tuple[str, int | None, str]:
    """("line N: <text>", message index or None, the line's text) from the template frames."""
    line_no, frame_locals = None, {}
    for frame, lineno in traceback.walk_tb(e.__traceback__):
        if frame.f_code.co_filename == "<template>":
            line_no, frame_locals = lineno, dict(frame.f_locals)
    if line_no is None:
        return "", None, ""
    lines = source.splitlines()
    text = lines[line_no - 1].strip() if 0 < line_no <= len(lines) else ""
    index = None
    if isinstance(messages, list):
        ids = {id(m): i for i, m in enumerate(messages)}
        for value in frame_locals.values():
            if id(value) in ids:
                index = ids[id(value)]
                break
    shown = text if len(text) <= 80 else text[:77] + "..."
    return f"line {line_no}: {shown}", index, text


def _at(where: str, index: int | None, messages: Any) -> str:
    parts = []
    if index is not None:
        role = messages[index].get("role") if isinstance(messages[index], dict) else None
        parts.append(f"at message {index}" + (f" (role {role!r})" if role else ""))
    if where:
        parts.append(where)
    return ", ".join(parts)


def explain(e: BaseException, name: str, source: str, messages: Any) -> TemplateError:
    """The TemplateError (with a hint) for an exception raised while rendering ``name``."""
    import jinja2

    from dojo.chat.limits import Runaway

    where, index, text = _where(e, source, messages)
    at = _at(where, index, messages)
    at_s = f" ({at})" if at else ""
    if isinstance(e, jinja2.exceptions.SecurityError):
        return TemplateError(
            f"template {name!r} was refused by the sandbox: {e}",
            hint=f"a chat template may not reach Python internals{at_s}; use another template",
        )
    if isinstance(e, raised_class()):
        # The template's own words come through unchanged; the hint says where it stopped.
        return TemplateError(
            f"template {name!r}: {e}",
            hint=f"the template refused this conversation{at_s}: change the messages "
            "(roles, order, fields) to what it accepts, or use another template",
        )
    if isinstance(e, Runaway):
        return TemplateError(
            f"template {name!r} stopped: {e}",
            hint=f"the template loops or grows without end{at_s}: no real chat template needs "
            "this much; use another template",
        )
    if isinstance(e, RecursionError):
        return TemplateError(
            f"template {name!r} stopped: recursion too deep",
            hint=f"a macro or recursive loop calls itself without end{at_s}",
        )
    if isinstance(e, MemoryError):
        return TemplateError(
            f"template {name!r} stopped: out of memory",
            hint=f"the template builds a value too large for this machine{at_s}",
        )
    if isinstance(e, jinja2.exceptions.UndefinedError):
        what = f"template {name!r} failed: {e}"
        return TemplateError(what, hint=_field_hint(text, at_s))
    if isinstance(e, jinja2.exceptions.TemplateError):
        return TemplateError(
            f"template {name!r}: {e}", hint=f"the template failed{at_s}; use another template"
        )
    return TemplateError(
        f"template {name!r} failed: {type(e).__name__}: {e}", hint=_type_hint(e, text, at_s)
    )


def _field_hint(text: str, at_s: str) -> str:
    if "tool_call" in text:
        return f"a message's tool call lacks a field the template reads{at_s}: {_TOOL_CALLS_SHAPE}"
    return (
        f"the template reads a field the conversation does not have{at_s}: add it to the "
        "message (or pass it with --var), or use another template"
    )


def _type_hint(e: BaseException, text: str, at_s: str) -> str:
    if "tool_call" in text:
        return f"the template cannot use this message's tool calls{at_s}: {_TOOL_CALLS_SHAPE}"
    if isinstance(e, TypeError) and "not supported between" in str(e):
        return f"the template sorts or compares values of different types{at_s}"
    if isinstance(e, LookupError) and "encoding" in str(e):
        return f"the template asks Python for a codec that does not exist{at_s}"
    return (
        f"the template failed on this conversation{at_s}: check that message's fields have "
        "the types the template expects (content a string, tool_calls a list); if they do, "
        "the template itself is broken: use another template"
    )
