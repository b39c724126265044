"""Where the assistant's words are in a rendered conversation: the characters the loss trains on.

Computed from ONE render: each message's content is located, in message order, in the rendered
text (a cursor moves forward, so a user quoting the assistant cannot steal its span). An
assistant span is then extended over the stop token that follows it (after optional whitespace)
so the model learns to end its turn.

When a template rewrites assistant content, the span covers what the template emitted:
- stripped content (``content.strip()``, llama-2, vicuna): the stripped text is found;
- ``<think>...</think>`` removed from history turns (qwen3, deepseek-r1): only the answer after
  ``</think>`` is found, so the span covers the answer alone;
- reasoning the template does emit (``reasoning_content``, or the last turn's think block): the
  span starts at the ``<think>`` that opens it, so the reasoning is trained too.
Messages whose content cannot be found (empty content, tool-call-only turns, content a template
drops) get no span; ``missing`` in ``locate_spans`` names them.
"""

from dataclasses import dataclass
from typing import Any

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


@dataclass(frozen=True)
class SpanReport:
    """Spans of assistant text plus the assistant messages that could not be located."""

    text: str
    spans: list[tuple[int, int]]
    """(start, end) character offsets, end exclusive, in message order."""
    ends_with_stop: list[bool]
    """Per span: whether it was extended over the template's stop token."""
    missing: list[int]
    """Indexes (into messages) of assistant messages with no span."""


def _text_of(content: Any) -> str:
    # OpenAI content blocks: [{"type": "text", "text": ...}, ...]
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return ""


def _split_think(text: str) -> tuple[str, str]:
    """(reasoning, answer) for content written as '<think>...</think>answer'."""
    if THINK_CLOSE in text:
        head, _, tail = text.partition(THINK_CLOSE)
        return head.replace(THINK_OPEN, "").strip(), tail.strip()
    return "", text


def _find(rendered: str, needles: list[str], start: int) -> tuple[int, int] | None:
    for needle in needles:
        if needle:
            at = rendered.find(needle, start)
            if at >= 0:
                return at, at + len(needle)
    return None


def locate_spans(
    rendered: str, messages: list[dict[str, Any]], stop_token: str | None
) -> SpanReport:
    """Find each assistant message's emitted content in ``rendered`` (see module docstring)."""
    cursor = 0
    spans: list[tuple[int, int]] = []
    stops: list[bool] = []
    missing: list[int] = []
    for i, m in enumerate(messages):
        text = _text_of(m.get("content"))
        if m.get("role") != "assistant":
            hit = _find(rendered, [text.strip(), text], cursor)
            if hit is not None:
                cursor = hit[1]
            continue
        reasoning, answer = _split_think(text)
        reasoning = reasoning or str(m.get("reasoning_content") or "").strip()
        hit = _find(rendered, [text.strip(), text, answer], cursor)
        if hit is None:
            missing.append(i)
            continue
        start, end = hit
        if reasoning and reasoning not in rendered[start:end]:
            # The template emitted the reasoning before the answer: train on it too.
            r_at = rendered.rfind(reasoning, cursor, start)
            if r_at >= 0:
                opened = rendered.rfind(THINK_OPEN, cursor, r_at)
                start = min(start, opened if opened >= 0 else r_at)
        stop = False
        if stop_token:
            after = end
            while after < len(rendered) and rendered[after] in " \t\n\r":
                after += 1
            if rendered.startswith(stop_token, after):
                end, stop = after + len(stop_token), True
        spans.append((start, end))
        stops.append(stop)
        cursor = end
    return SpanReport(rendered, spans, stops, missing)
