"""Quirks of the bundled Phi, DeepSeek and InternLM chat templates.

Fast tests spell the expected text out by hand from each official template's logic (the logic
is quoted next to each test); the slow test renders the same conversations with transformers' own
renderer (what ``apply_chat_template`` runs: ``_normalize_chat_messages`` then
``render_jinja_template``) and requires byte equality, errors included.
"""

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from dojo.chat.template import render
from dojo.errors import TemplateError
from tests.helpers.chat_cases import CASES as PUBLIC_CASES

CHAT_DIR = Path(__file__).resolve().parent.parent / "templates" / "chat"
BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
MINE = (
    "phi-3-mini-instruct",
    "phi-3.5-mini-instruct",
    "phi-4",
    "phi-4-initial",
    "deepseek-v2",
    "deepseek-v3",
    "deepseek-r1",
    "deepseek-r1-initial",
    "deepseek-r1-distill-qwen",
    "internlm2-chat",
    "internlm2.5-chat",
)
DEEPSEEK_CHAT = ("deepseek-v3", "deepseek-r1", "deepseek-r1-initial", "deepseek-r1-distill-qwen")


def u(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def a(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def s(text: str) -> dict[str, Any]:
    return {"role": "system", "content": text}


CALL = {"type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
# An OpenAI-style tool round with content "" on the calling turn (content None is another case).
TOOL_ROUND = [
    u("Weather in Paris?"),
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "content": '{"temp": 21}'},
    {"role": "tool", "content": '{"temp": 22}'},
    a("It is 21 C."),
]
TOOL_CALL_NONE = [u("Weather?"), {"role": "assistant", "content": None, "tool_calls": [CALL]}]
THINK = [u("2+2?"), a("<think>\nadd them\n</think>\n\n4"), u("and 3+3?")]
TWO_SYSTEMS = [s("A"), u("Hi"), s("B")]
UNICODE = [s(""), u("héllo 世界 🙂"), a("")]
TWO_USERS = [u("first"), u("second")]


PUBLIC_SHA = {c["template"]: c["template_sha256"] for c in PUBLIC_CASES}


@pytest.mark.parametrize("name", MINE)
def test_official_flag_matches_public_sha(name: str) -> None:
    # "official": true claims the file is the Hub string byte-for-byte; the public cases carry
    # the sha256 of that string, so the claim is checked, and no trailing newline crept in.
    side = json.loads((CHAT_DIR / f"{name}.json").read_text(encoding="utf-8"))
    data = (CHAT_DIR / f"{name}.jinja").read_bytes()
    assert (hashlib.sha256(data).hexdigest() == PUBLIC_SHA[name]) is side["official"]
    assert not data.endswith(b"\n")


# --- Phi ---------------------------------------------------------------------------------------


def test_phi3_mini_renders_system_and_appends_eos_without_generation_prompt() -> None:
    # {% if message['role'] == 'system' %}... {% else %}{{ eos_token }}{% endif %}
    out = render("phi-3-mini-instruct", [s("Be brief."), u("Hi")])
    assert out == "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|endoftext|>"


def test_phi3_mini_keeps_empty_system_but_phi35_drops_it() -> None:
    # phi-3.5 tests `message['role'] == 'system' and message['content']`; phi-3 only the role.
    msgs = [s(""), u("Hi")]
    assert render("phi-3-mini-instruct", msgs, add_generation_prompt=True) == (
        "<|system|>\n<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\n"
    )
    assert render("phi-3.5-mini-instruct", msgs, add_generation_prompt=True) == (
        "<|user|>\nHi<|end|>\n<|assistant|>\n"
    )


def test_phi3_silently_drops_unknown_roles() -> None:
    msgs = [u("Hi"), {"role": "tool", "content": "ignored"}]
    out = render("phi-3.5-mini-instruct", msgs, add_generation_prompt=True)
    assert out == "<|user|>\nHi<|end|>\n<|assistant|>\n"


def test_phi4_initial_ignores_add_generation_prompt() -> None:
    # Initial: each user turn ends with '<|im_start|>assistant<|im_sep|>'; nothing reads
    # add_generation_prompt. Fixed: the header belongs to the assistant message / the prompt.
    head = "<|im_start|>user<|im_sep|>Hi<|im_end|>"
    assert render("phi-4-initial", [u("Hi")]) == head + "<|im_start|>assistant<|im_sep|>"
    assert render("phi-4", [u("Hi")]) == head
    done = [u("Hi"), a("Yo")]
    full = head + "<|im_start|>assistant<|im_sep|>Yo<|im_end|>"
    assert render("phi-4-initial", done, add_generation_prompt=True) == full
    assert render("phi-4", done, add_generation_prompt=True) == (
        full + "<|im_start|>assistant<|im_sep|>"
    )


# --- DeepSeek ----------------------------------------------------------------------------------


def test_deepseek_v2_layout_and_bos() -> None:
    msgs = [s("S"), u("Hi"), a("Yo"), u("Q")]
    out = render("deepseek-v2", msgs, add_generation_prompt=True)
    assert out == BOS + "S\n\nUser: Hi\n\nAssistant: Yo" + EOS + "User: Q\n\nAssistant:"


@pytest.mark.parametrize(
    ("name", "gen"),
    [
        ("deepseek-r1", "<think>\n"),
        ("deepseek-r1-initial", ""),
        ("deepseek-r1-distill-qwen", "<think>\n"),
    ],
)
def test_deepseek_r1_strips_think_from_history_and_prefills_think(name: str, gen: str) -> None:
    # content.split('</think>')[-1] keeps what follows the tag, including its "\n\n".
    out = render(name, THINK, add_generation_prompt=True)
    assert out == (
        BOS + "<｜User｜>2+2?<｜Assistant｜>\n\n4" + EOS + "<｜User｜>and 3+3?<｜Assistant｜>" + gen
    )


def test_deepseek_v3_keeps_think_text_in_history() -> None:
    out = render("deepseek-v3", THINK, add_generation_prompt=True)
    assert out == (
        BOS
        + "<｜User｜>2+2?<｜Assistant｜><think>\nadd them\n</think>\n\n4"
        + EOS
        + "<｜User｜>and 3+3?<｜Assistant｜>"
    )


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("deepseek-v3", BOS + "A\n\nB<｜User｜>Hi<｜Assistant｜>"),
        ("deepseek-r1", BOS + "A\n\nB<｜User｜>Hi<｜Assistant｜><think>\n"),
        ("deepseek-r1-distill-qwen", BOS + "B<｜User｜>Hi<｜Assistant｜><think>\n"),
    ],
)
def test_deepseek_system_messages_hoisted_joined_or_last_wins(name: str, expected: str) -> None:
    # V3/R1 join every system message with a blank line and put them first; the distill
    # template keeps only the last one.
    assert render(name, TWO_SYSTEMS, add_generation_prompt=True) == expected


@pytest.mark.parametrize("name", DEEPSEEK_CHAT)
def test_deepseek_bos_comes_from_the_tokenizer(name: str) -> None:
    assert render(name, [u("Hi")]).startswith(BOS + "<｜User｜>Hi")
    assert render(name, [u("Hi")], bos_token="").startswith("<｜User｜>Hi")


def test_deepseek_r1_renders_tool_calls_and_outputs() -> None:
    out = render("deepseek-r1", TOOL_ROUND, add_generation_prompt=True)
    assert out == (
        BOS
        + "<｜User｜>Weather in Paris?<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>"
        + 'function<｜tool▁sep｜>get_weather\n```json\n{"city": "Paris"}\n```<｜tool▁call▁end｜>'
        + "<｜tool▁calls▁end｜>"
        + EOS
        + '<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>{"temp": 21}<｜tool▁output▁end｜>'
        + '<｜tool▁output▁begin｜>{"temp": 22}<｜tool▁output▁end｜><｜tool▁outputs▁end｜>'
        + "It is 21 C."
        + EOS
        + "<｜Assistant｜><think>\n"
    )


def test_deepseek_v3_drops_tool_calls_unless_content_is_none() -> None:
    # V3 only renders tool_calls under `message['content'] is none`: with content "" the call is
    # lost and an empty assistant turn is written; the outputs are joined with "\n".
    out = render("deepseek-v3", TOOL_ROUND, add_generation_prompt=True)
    assert out == (
        BOS
        + "<｜User｜>Weather in Paris?<｜Assistant｜>"
        + EOS
        + '<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>{"temp": 21}<｜tool▁output▁end｜>'
        + '\n<｜tool▁output▁begin｜>{"temp": 22}<｜tool▁output▁end｜><｜tool▁outputs▁end｜>'
        + "It is 21 C."
        + EOS
        + "<｜Assistant｜>"
    )


def test_deepseek_v3_ending_on_tool_output_gets_no_generation_prompt() -> None:
    out = render("deepseek-v3", TOOL_ROUND[:3], add_generation_prompt=True)
    assert out.endswith('{"temp": 21}<｜tool▁output▁end｜><｜tool▁outputs▁end｜>')


@pytest.mark.parametrize("name", DEEPSEEK_CHAT)
def test_deepseek_tool_call_with_content_none_fails(name: str) -> None:
    # transformers drops None-valued keys first, so `message['content']` is undefined, the
    # `is none` branch is skipped and '<｜Assistant｜>' + undefined raises.
    with pytest.raises(TemplateError, match=name):
        render(name, TOOL_CALL_NONE)


# --- InternLM ----------------------------------------------------------------------------------


def test_internlm2_5_is_chatml_after_bos_for_any_role() -> None:
    msgs = [s("S"), u("Hi"), {"role": "tool", "content": "r"}]
    body = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
    body += "<|im_start|>tool\nr<|im_end|>\n"
    assert render("internlm2.5-chat", msgs) == "<s>" + body
    assert render("internlm2-chat", msgs) == "<s>" + body + "</s>"
    assert render("internlm2-chat", msgs, add_generation_prompt=True) == (
        "<s>" + body + "<|im_start|>assistant\n"
    )


# --- all of them -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", MINE)
def test_unicode_and_empty_contents_pass_through(name: str) -> None:
    out = render(name, UNICODE, add_generation_prompt=True)
    assert out.count("héllo 世界 🙂") == 1


@pytest.mark.parametrize("name", MINE)
def test_no_role_alternation_check(name: str) -> None:
    # None of these templates calls raise_exception: consecutive user turns render in order.
    out = render(name, TWO_USERS)
    assert 0 <= out.index("first") < out.index("second")


# --- oracle ------------------------------------------------------------------------------------

CONVERSATIONS = {
    "think": THINK,
    "two_systems": TWO_SYSTEMS,
    "tool_round": TOOL_ROUND,
    "tool_call_none": TOOL_CALL_NONE,
    "unicode_empty": UNICODE,
    "two_users": TWO_USERS,
    "tool_last": TOOL_ROUND[:3],
}


def _hf_render(name: str, messages: list[dict[str, Any]], gen: bool) -> str:
    from transformers.utils.chat_template_utils import (
        _normalize_chat_messages,
        render_jinja_template,
    )

    side = json.loads((CHAT_DIR / f"{name}.json").read_text(encoding="utf-8"))
    source = (CHAT_DIR / f"{name}.jinja").read_text(encoding="utf-8")
    tokens = {k: side[k] for k in ("bos_token", "eos_token") if side[k] is not None}
    out, _ = render_jinja_template(
        [_normalize_chat_messages(messages)],
        chat_template=source,
        add_generation_prompt=gen,
        **tokens,
        **side["variables"],
    )
    return str(out[0])


@pytest.mark.slow
@pytest.mark.parametrize("gen", [False, True])
@pytest.mark.parametrize("conv", sorted(CONVERSATIONS))
@pytest.mark.parametrize("name", MINE)
def test_matches_transformers(name: str, conv: str, gen: bool) -> None:
    pytest.importorskip("transformers")
    messages = CONVERSATIONS[conv]
    try:
        expected = _hf_render(name, messages, gen)
    except Exception as e:  # the official template raises: dojo must raise too
        with pytest.raises(TemplateError):
            render(name, messages, add_generation_prompt=gen)
        assert type(e).__name__ in {"UndefinedError", "TemplateError", "TypeError"}
        return
    assert render(name, messages, add_generation_prompt=gen) == expected
