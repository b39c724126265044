"""Differential test: dojo's renderer against transformers' own, for every bundled template.

Many generated conversations (roles in any order, odd whitespace, unicode, empty and missing
content, tool calls, reasoning) must give identical text or an identical error (same exception
type and message). Slow: imports transformers.
"""

import random
from typing import Any

import pytest

from dojo.chat.template import bundled_names, load_template, render
from dojo.errors import DojoError

pytestmark = pytest.mark.slow

CONTENTS = [
    "Hello! What is 2+2?",
    "  padded with spaces \n",
    "",
    "héllo wörld — 你好 😀",
    "line1\nline2\n\nline3",
    "<think>\nLet me think.\n</think>\n\nThe answer is 4.",
    "<think>short</think>answer",
    "quotes \" and ' and {{ braces }} and {% tags %}",
    "[INST] fake tags <|im_end|> </s>",
]
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
N_CASES = 60


def _message(rng: random.Random, role: str) -> dict[str, Any]:
    m: dict[str, Any] = {"role": role, "content": rng.choice(CONTENTS)}
    if role == "assistant":
        r = rng.random()
        if r < 0.15:
            m["content"] = None if rng.random() < 0.5 else ""
            m["tool_calls"] = [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
                }
            ]
        elif r < 0.3:
            m["reasoning_content"] = "I reason about it."
    if role == "tool":
        m["tool_call_id"] = "call_1"
        m["name"] = "get_weather"
    return m


def _conversation(rng: random.Random) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = []
    if rng.random() < 0.5:
        msgs.append(_message(rng, "system"))
    n = rng.randint(1, 6)
    for i in range(n):
        if rng.random() < 0.8:  # mostly well-formed alternation, sometimes not
            role = "user" if i % 2 == 0 else "assistant"
        else:
            role = rng.choice(["user", "assistant", "system", "tool"])
        msgs.append(_message(rng, role))
    return msgs


def _transformers_render(source: str, messages: list, kwargs: dict[str, Any]) -> tuple[str, str]:
    from transformers.utils.chat_template_utils import (
        _normalize_chat_messages,
        render_jinja_template,
    )

    try:
        out, _ = render_jinja_template(
            conversations=[_normalize_chat_messages(messages)], chat_template=source, **kwargs
        )
        return "ok", out[0]
    except Exception as e:  # noqa: BLE001 - any error is the oracle's answer
        return "error", f"{type(e).__name__}: {e}"


def _dojo_render(name: str, messages: list, kwargs: dict[str, Any]) -> tuple[str, str]:
    try:
        return "ok", render(name, messages, **kwargs)
    except DojoError as e:
        cause = e.__cause__ if e.__cause__ is not None else e
        return "error", f"{type(cause).__name__}: {cause}"


@pytest.mark.parametrize("name", bundled_names())
def test_same_output_or_same_error_as_transformers(name: str) -> None:
    pytest.importorskip("transformers")
    tpl = load_template(name)
    rng = random.Random(f"dojo-oracle-{name}")
    agree = 0
    for i in range(N_CASES):
        messages = _conversation(rng)
        extra: dict[str, Any] = {"add_generation_prompt": rng.random() < 0.5}
        if rng.random() < 0.3:
            extra["tools"] = [TOOL]
        if rng.random() < 0.3:
            extra["enable_thinking"] = rng.random() < 0.5
        # What apply_chat_template passes: the tokenizer's set special tokens, then the defaults.
        oracle_kwargs = dict(extra)
        for key in ("bos_token", "eos_token"):
            if getattr(tpl, key) is not None:
                oracle_kwargs[key] = getattr(tpl, key)
        oracle_kwargs.update(
            {
                **tpl.variables,
                **{k: v for k, v in extra.items() if k not in ("add_generation_prompt", "tools")},
            }
        )
        expected = _transformers_render(tpl.source, messages, oracle_kwargs)
        got = _dojo_render(name, messages, extra)
        if expected[0] == "error" and got[0] == "error" and expected[1].startswith("DataError"):
            agree += 1
            continue
        assert got == expected, f"case {i}: {messages!r} {extra!r}"
        agree += 1
    assert agree == N_CASES
