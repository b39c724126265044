"""``dojo chat-template check``: what a template means for training, on a sample conversation.

Reports (all from real renders, nothing assumed from the template's name):
- prefix-preserving: for every assistant turn k, rendering messages[:k] with the generation
  prompt, and messages[:k+1] without, are both prefixes of the full rendering. A loss mask built
  by re-rendering prefixes (TRL-style) is only correct when this holds; dojo's own spans do not
  need it (one render, see dojo.chat.spans).
- the assistant spans (the characters trained on), and whether each ends with the stop token;
- whether a ``<think>`` block in an earlier assistant turn survives into the rendered history.
"""

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dojo.chat.spans import SpanReport
from dojo.errors import TemplateError

if TYPE_CHECKING:
    from dojo.chat.template import ChatTemplate

REASONING = "2 plus 2 makes 4."
SAMPLE: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a concise assistant."},
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": f"<think>\n{REASONING}\n</think>\n\nThe answer is 4."},
    {"role": "user", "content": "And 3+3?"},
    {"role": "assistant", "content": "The answer is 6."},
]
"""Default conversation: a system prompt, two turns, reasoning in the first reply."""


@dataclass(frozen=True)
class CheckReport:
    """Everything ``check`` found; ``to_dict`` is what ``--json`` prints."""

    template: str
    messages: list[dict[str, Any]]
    spans: SpanReport
    prefix_preserving: bool
    prefix_problem: str | None
    stop_token: str | None
    ends_with_stop: bool
    thinking_in_history: bool | None
    """None when the sample has no reasoning in a non-final assistant turn."""
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "template": self.template,
            "prefix_preserving": self.prefix_preserving,
            "prefix_problem": self.prefix_problem,
            "stop_token": self.stop_token,
            "ends_with_stop": self.ends_with_stop,
            "thinking_in_history": self.thinking_in_history,
            "assistant_spans": [
                {"start": a, "end": b, "text": self.spans.text[a:b], "ends_with_stop": s}
                for (a, b), s in zip(self.spans.spans, self.spans.ends_with_stop, strict=True)
            ],
            "missing_assistant_messages": self.spans.missing,
            "rendered": self.spans.text,
            "notes": self.notes,
        }


def _first_diff(a: str, b: str) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def _prefix_problem(
    template: Any, messages: list[dict[str, Any]], full: str, kw: dict[str, Any]
) -> str | None:
    from dojo.chat.template import render

    for k, m in enumerate(messages):
        if m.get("role") != "assistant":
            continue
        for upto, gen in ((k, True), (k + 1, False)):
            if upto == 0:
                continue
            try:
                part = render(template, messages[:upto], add_generation_prompt=gen, **kw)
            except TemplateError as e:
                return f"rendering messages[:{upto}] fails: {e.message}"
            if not full.startswith(part):
                at = _first_diff(part, full)
                what = "prompt before" if gen else "conversation through"
                return (
                    f"{what} message {k} is not a prefix of the full rendering "
                    f"(differs at char {at}: {part[at : at + 30]!r} vs {full[at : at + 30]!r})"
                )
    return None


def check(template: Any, messages: list[dict[str, Any]] | None = None, **kw: Any) -> CheckReport:
    """Analyse ``template`` on ``messages`` (default: SAMPLE). ``kw`` go to ``render``."""
    from dojo.chat.template import load_template, span_report

    tpl = load_template(template)
    notes: list[str] = []
    msgs = list(messages) if messages is not None else list(SAMPLE)
    try:
        report = span_report(tpl, msgs, **kw)
    except TemplateError as e:
        if messages is not None or msgs[0]["role"] != "system":
            raise
        notes.append(f"the template refuses a system message ({e.message}); checked without it")
        msgs = msgs[1:]
        report = span_report(tpl, msgs, **kw)
    problem = _prefix_problem(tpl, msgs, report.text, kw)
    reasoning = _history_reasoning(msgs)
    thinking = None if reasoning is None else reasoning in report.text
    if tpl.stop_token is None:
        notes.append("the template writes no end-of-turn token after the assistant's reply")
    for i in report.missing:
        notes.append(f"assistant message {i}: its content was not found in the rendering")
    return CheckReport(
        template=tpl.name,
        messages=msgs,
        spans=report,
        prefix_preserving=problem is None,
        prefix_problem=problem,
        stop_token=tpl.stop_token,
        ends_with_stop=bool(report.spans) and all(report.ends_with_stop),
        thinking_in_history=thinking,
        notes=notes,
    )


UNTRAINED_HINT = (
    "dojo trains the assistant replies it finds in the rendering: use a template that writes "
    "each message's content, e.g. a bundled one (dojo chat-template list)"
)


def untrained_problem(spans: SpanReport, messages: list[dict[str, Any]], ref: str,
                      conversation: str = "the conversation",
                      flag: str = "--template") -> tuple[str, str] | None:  # fmt: skip
    """(message, hint) when the rendering marks no assistant token for training: a run with
    this template would train on nothing. None when some reply is marked, or when ``messages``
    hold no assistant reply with text (the conversation, not the template, is then the cause)."""
    from dojo.chat.spans import _text_of

    replies = [m for m in messages if m.get("role") == "assistant" and _text_of(m.get("content"))]
    if spans.spans or not replies:
        return None
    what = f"--template {ref}:" if flag == "--template" else f"--model {ref}: its chat template"
    return (f"{what} marks no assistant tokens for training (its rendering of "
            f"{conversation} holds none of the {len(replies)} assistant replies)", UNTRAINED_HINT)  # fmt: skip


def check_trains(
    ref: str, flag: str = "--template", template: "ChatTemplate | None" = None
) -> None:
    """TemplateError when --template ``ref`` (or --model ``ref``'s own template) marks none of
    SAMPLE's assistant replies for training. A template that cannot render SAMPLE is left to
    the data check, which renders the real rows. ``template``: ``ref`` already loaded."""
    from dojo.chat.template import load_template

    tpl = template if template is not None else load_template(ref, flag=flag)
    try:
        report = check(tpl)
    except TemplateError:
        return
    problem = untrained_problem(report.spans, report.messages, ref, "a sample conversation", flag)
    if problem:
        raise TemplateError(*problem)


def _history_reasoning(msgs: list[dict[str, Any]]) -> str | None:
    last = max((i for i, m in enumerate(msgs) if m.get("role") == "assistant"), default=-1)
    for i, m in enumerate(msgs):
        if m.get("role") != "assistant" or i == last:
            continue
        content = m.get("content")
        if isinstance(content, str) and "</think>" in content:
            return content.partition("</think>")[0].replace("<think>", "").strip()
        if m.get("reasoning_content"):
            return str(m["reasoning_content"]).strip()
    return None


def marked(report: SpanReport, open_mark: str = "[[", close_mark: str = "]]") -> str:
    """The rendering with each assistant span wrapped in markers (for a pipe, no colour)."""
    out, at = [], 0
    for a, b in report.spans:
        out += [report.text[at:a], open_mark, report.text[a:b], close_mark]
        at = b
    out.append(report.text[at:])
    return "".join(out)
