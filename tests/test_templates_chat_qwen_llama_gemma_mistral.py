"""Quirks of the bundled Qwen, Llama 3, Gemma and Mistral templates, rendered through dojo.

The expected strings in the fast tests are written by hand from the official templates' logic (the
comment above each says which lines of the template produce it); JSON inside them comes from
``json.dumps``, which is what the transformers ``tojson`` filter calls (key order kept, non-ASCII
kept, no HTML escaping). The slow test renders a battery of awkward conversations with transformers'
own renderer, the ground truth, and asserts byte equality, or that both refuse.
"""

import hashlib
import json
import time
from pathlib import Path

import pytest

from dojo.chat.template import render
from dojo.errors import DojoError, TemplateError
from tests.helpers.chat_cases import CASES, SIDECAR_KEYS

CHAT_DIR = Path(__file__).resolve().parent.parent / "templates" / "chat"

NAMES = (
    "qwen2.5-instruct",
    "qwen3",
    "qwen3-initial",
    "llama-3-instruct",
    "llama-3.1-instruct",
    "llama-3.2-instruct",
    "gemma-2-it",
    "gemma-3-it",
    "mistral-7b-instruct-v0.1",
    "mistral-7b-instruct-v0.2",
    "mistral-nemo-instruct-2407",
)

QWEN_DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
LLAMA31_HEADER = (
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
    "Cutting Knowledge Date: December 2023\nToday Date: {date}\n\n"
)
# The apostrophe and the accents catch a tojson that HTML-escapes or ASCII-escapes.
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Météo d'une ville (°C)",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def _call(city: str, call_id: str | None = None) -> dict:
    call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": city}}}
    return call if call_id is None else {"id": call_id, **call}


def _sidecar(name: str) -> dict:
    return json.loads((CHAT_DIR / f"{name}.json").read_text(encoding="utf-8"))


# --- the files themselves -------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_template_is_the_official_text(name: str) -> None:
    # The public cases' template_sha256 is sha256 of the exact official chat_template string.
    shas = {c["template_sha256"] for c in CASES if c["template"] == name}
    assert len(shas) == 1
    digest = hashlib.sha256((CHAT_DIR / f"{name}.jinja").read_bytes()).hexdigest()
    assert digest == shas.pop()


@pytest.mark.parametrize("name", NAMES)
def test_sidecar_fields(name: str) -> None:
    meta = _sidecar(name)
    assert set(meta) == SIDECAR_KEYS
    assert meta["official"] is True
    assert set(meta["supports"]) == {"system", "tools", "thinking"}
    source = (CHAT_DIR / f"{name}.jinja").read_text(encoding="utf-8")
    # A template that never mentions tools/thinking cannot claim to support them.
    if meta["supports"]["tools"]:
        assert "tool" in source
    if meta["supports"]["thinking"]:
        assert "<think>" in source


@pytest.mark.parametrize("name", NAMES)
def test_assistant_turn_ends_with_the_stop_token(name: str) -> None:
    stop = _sidecar(name)["stop_token"]
    out = render(
        name, [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "REPLY"}]
    )
    assert f"REPLY{stop}" in out


def test_bundled_tokens_are_the_defaults() -> None:
    chat = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]
    assert render("llama-3-instruct", chat) == (
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nYo<|eot_id|>"
    )
    assert render("mistral-7b-instruct-v0.2", chat, bos_token="<BOS>", eos_token="<EOS>") == (
        "<BOS> [INST] Hi [/INST] Yo<EOS>"
    )


# --- Qwen ----------------------------------------------------------------------------------------


def test_qwen25_adds_its_default_system_prompt() -> None:
    out = render("qwen2.5-instruct", [{"role": "user", "content": "Hi"}])
    assert out == (
        f"<|im_start|>system\n{QWEN_DEFAULT_SYSTEM}<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
    )


def test_qwen25_tools_tool_calls_and_grouped_tool_results() -> None:
    chat = [
        {"role": "user", "content": "Weather in Paris and Oslo?"},
        {"role": "assistant", "content": "", "tool_calls": [_call("Paris"), _call("Oslo")]},
        {"role": "tool", "content": "18C"},
        {"role": "tool", "content": "5C"},
        {"role": "assistant", "content": "Paris 18C, Oslo 5C."},
    ]
    out = render("qwen2.5-instruct", chat, tools=[WEATHER_TOOL])
    # No system message: the default prompt opens the tools system block; empty content adds no
    # newline before the first <tool_call>; consecutive tool messages share one user turn.
    assert out == (
        f"<|im_start|>system\n{QWEN_DEFAULT_SYSTEM}\n\n# Tools\n\nYou may call one or more functions"
        " to assist with the user query.\n\nYou are provided with function signatures within "
        "<tools></tools> XML tags:\n<tools>\n"
        + json.dumps(WEATHER_TOOL, ensure_ascii=False)
        + "\n</tools>\n\nFor each function call, return a json object with function name and "
        "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\nWeather in Paris and Oslo?<|im_end|>\n"
        "<|im_start|>assistant"
        '\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
        '\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
        "<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n18C\n</tool_response>"
        "\n<tool_response>\n5C\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\nParis 18C, Oslo 5C.<|im_end|>\n"
    )
    assert "d'une" in out and "\\u00e9" not in out


def test_qwen25_empty_content() -> None:
    out = render(
        "qwen2.5-instruct", [{"role": "system", "content": ""}, {"role": "user", "content": ""}]
    )
    assert out == "<|im_start|>system\n<|im_end|>\n<|im_start|>user\n<|im_end|>\n"


@pytest.mark.parametrize("name", ["qwen3", "qwen3-initial"])
def test_qwen3_strips_thinking_from_history(name: str) -> None:
    chat = [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "<think>\nadd\n</think>\n\n4"},
        {"role": "user", "content": "3+3?"},
    ]
    # The assistant turn precedes the last user query: only the text after </think> survives.
    assert render(name, chat, add_generation_prompt=True) == (
        "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"
        "<|im_start|>user\n3+3?<|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.mark.parametrize("name", ["qwen3", "qwen3-initial"])
def test_qwen3_final_turn_keeps_thinking_or_gets_an_empty_block(name: str) -> None:
    kept = render(
        name,
        [
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "<think>\nadd\n</think>\n\n4"},
        ],
    )
    assert kept == (
        "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n<think>\nadd\n</think>\n\n4<|im_end|>\n"
    )
    # A reply with no thinking after the last query still gets '<think>\n\n</think>\n\n'.
    empty = render(
        name, [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    )
    assert empty.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\nHello<|im_end|>\n")


@pytest.mark.parametrize("name", ["qwen3", "qwen3-initial"])
def test_qwen3_reasoning_content_in_a_multi_step_tool_turn(name: str) -> None:
    chat = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "need the tool",
            "tool_calls": [_call("Paris")],
        },
        {"role": "tool", "content": "18C"},
        {"role": "assistant", "content": "18C in Paris.", "reasoning_content": "got it"},
    ]
    # Both assistant turns follow the last real user query, so both keep their reasoning.
    assert render(name, chat) == (
        "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nneed the tool\n</think>\n\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\n18C\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n<think>\ngot it\n</think>\n\n18C in Paris.<|im_end|>\n"
    )


@pytest.mark.parametrize("name", ["qwen3", "qwen3-initial"])
def test_qwen3_enable_thinking(name: str) -> None:
    chat = [{"role": "user", "content": "Hi"}]
    off = render(name, chat, add_generation_prompt=True, enable_thinking=False)
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    for on in (
        render(name, chat, add_generation_prompt=True),
        render(name, chat, add_generation_prompt=True, enable_thinking=True),
    ):
        assert on == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_qwen3_revision_handles_missing_content_initial_does_not() -> None:
    chat = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "tool_calls": [_call("Paris")]},
        {"role": "tool", "content": "22C"},
    ]
    # content=None is dropped (as transformers does); the revised template reads it as ''.
    assert render("qwen3", chat) == (
        "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\n22C\n</tool_response><|im_end|>\n"
    )
    with pytest.raises(TemplateError, match="qwen3-initial"):
        render("qwen3-initial", chat)


def test_qwen3_tools_keep_non_ascii() -> None:
    out = render(
        "qwen3",
        [{"role": "system", "content": "Sé bref."}, {"role": "user", "content": "你好"}],
        tools=[WEATHER_TOOL],
    )
    assert out.startswith("<|im_start|>system\nSé bref.\n\n# Tools\n")
    assert "\n" + json.dumps(WEATHER_TOOL, ensure_ascii=False) + "\n</tools>" in out
    assert out.endswith("<|im_start|>user\n你好<|im_end|>\n")


# --- Llama 3 -------------------------------------------------------------------------------------


def test_llama31_date_default_comes_from_the_template() -> None:
    chat = [
        {"role": "system", "content": "  Be brief. \n"},
        {"role": "user", "content": " Grüße 👋 "},
    ]
    # date_string defaults to "26 Jul 2024" inside the template; system and user content are trimmed.
    expected = LLAMA31_HEADER.format(date="26 Jul 2024") + (
        "Be brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nGrüße 👋<|eot_id|>"
    )
    assert render("llama-3.1-instruct", chat) == expected
    assert "Today Date: 01 Jan 2025\n" in render(
        "llama-3.1-instruct", chat, date_string="01 Jan 2025"
    )


def test_llama32_date_defaults_to_today() -> None:
    before = time.strftime("%d %b %Y")
    out = render("llama-3.2-instruct", [{"role": "user", "content": "Hi"}])
    after = time.strftime("%d %b %Y")
    assert f"Today Date: {before}\n" in out or f"Today Date: {after}\n" in out
    assert "Today Date: 26 Jul 2024" in render(
        "llama-3.2-instruct", [{"role": "user", "content": "Hi"}], date_string="26 Jul 2024"
    )


@pytest.mark.parametrize("name", ["llama-3.1-instruct", "llama-3.2-instruct"])
def test_llama3x_custom_tools_call_and_result(name: str) -> None:
    chat = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "tool_calls": [_call("Paris")]},
        {"role": "tool", "content": "18C"},
        {"role": "assistant", "content": "It is 18C."},
    ]
    out = render(name, chat, tools=[WEATHER_TOOL], date_string="26 Jul 2024")
    # tools_in_user_message defaults to true: the tools go into the first user turn, indent=4;
    # a string tool result is still passed through tojson (strings are iterable in Jinja).
    assert out == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n"
        "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please respond"
        " with a JSON for a function call with its proper arguments that best answers the given "
        'prompt.\n\nRespond in the format {"name": function name, "parameters": dictionary of '
        "argument name and its value}.Do not use variables.\n\n"
        + json.dumps(WEATHER_TOOL, indent=4, ensure_ascii=False)
        + "\n\nWeather in Paris?<|eot_id|>"
        '<|start_header_id|>assistant<|end_header_id|>\n\n{"name": "get_weather", "parameters": '
        '{"city": "Paris"}}<|eot_id|>'
        '<|start_header_id|>ipython<|end_header_id|>\n\n"18C"<|eot_id|>'
        "<|start_header_id|>assistant<|end_header_id|>\n\nIt is 18C.<|eot_id|>"
    )


@pytest.mark.parametrize("name", ["llama-3.1-instruct", "llama-3.2-instruct"])
def test_llama3x_refuses_parallel_tool_calls(name: str) -> None:
    chat = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "tool_calls": [_call("Paris"), _call("Oslo")]},
    ]
    with pytest.raises(TemplateError, match="only supports single tool-calls"):
        render(name, chat)


def test_llama31_builtin_tools_use_python_tag_and_eom() -> None:
    chat = [
        {"role": "user", "content": "Search it"},
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "type": "function",
                    "function": {"name": "brave_search", "arguments": {"query": "dojo"}},
                }
            ],
        },
    ]
    out = render(
        "llama-3.1-instruct",
        chat,
        builtin_tools=["brave_search", "wolfram_alpha", "code_interpreter"],
    )
    # code_interpreter is filtered out of the Tools line; a builtin call ends with <|eom_id|>.
    assert out == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n"
        "Tools: brave_search, wolfram_alpha\n\nCutting Knowledge Date: December 2023\n"
        "Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nSearch it<|eot_id|>"
        '<|start_header_id|>assistant<|end_header_id|>\n\n<|python_tag|>brave_search.call(query="dojo")<|eom_id|>'
    )


def test_llama3_empty_content_is_trimmed_to_nothing() -> None:
    assert render("llama-3-instruct", [{"role": "user", "content": "   "}]) == (
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n<|eot_id|>"
    )


# --- Gemma ---------------------------------------------------------------------------------------


def test_gemma2_refuses_a_system_message() -> None:
    with pytest.raises(TemplateError, match="System role not supported") as e:
        render(
            "gemma-2-it",
            [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        )
    assert "gemma-2-it" in str(e.value)


@pytest.mark.parametrize("name", ["gemma-2-it", "gemma-3-it"])
def test_gemma_model_role_and_trimmed_content(name: str) -> None:
    chat = [{"role": "user", "content": "  Hi 🙂 "}, {"role": "assistant", "content": " Hello\n"}]
    assert render(name, chat, add_generation_prompt=True) == (
        "<bos><start_of_turn>user\nHi 🙂<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n"
        "<start_of_turn>model\n"
    )


@pytest.mark.parametrize("name", ["gemma-2-it", "gemma-3-it"])
def test_gemma_roles_must_alternate(name: str) -> None:
    with pytest.raises(TemplateError, match="Conversation roles must alternate"):
        render(name, [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])


def test_gemma3_folds_system_into_first_user_turn() -> None:
    chat = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "Bye"},
    ]
    assert render("gemma-3-it", chat) == (
        "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n"
        "<start_of_turn>user\nBye<end_of_turn>\n"
    )


def test_gemma3_list_content_and_images() -> None:
    chat = [
        {"role": "system", "content": [{"type": "text", "text": "Sys"}]},
        {
            "role": "user",
            "content": [{"type": "image"}, {"type": "text", "text": " Describe it. "}],
        },
    ]
    assert render("gemma-3-it", chat) == (
        "<bos><start_of_turn>user\nSys\n\n<start_of_image>Describe it.<end_of_turn>\n"
    )


# --- Mistral -------------------------------------------------------------------------------------


def test_mistral_v01_spacing_and_no_system() -> None:
    chat = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "Bye"},
    ]
    assert (
        render("mistral-7b-instruct-v0.1", chat)
        == "<s>[INST] Hi [/INST]Hello</s> [INST] Bye [/INST]"
    )
    with pytest.raises(TemplateError, match="Only user and assistant roles are supported!"):
        render(
            "mistral-7b-instruct-v0.1",
            [{"role": "user", "content": "Hi"}, {"role": "tool", "content": "x"}],
        )


def test_mistral_v02_system_folding_and_errors() -> None:
    chat = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "A"},
        {"role": "assistant", "content": "B"},
    ]
    assert render("mistral-7b-instruct-v0.2", chat) == "<s> [INST] S\n\nA [/INST] B</s>"
    with pytest.raises(
        TemplateError, match="After the optional system message, conversation roles must alternate"
    ):
        render(
            "mistral-7b-instruct-v0.2",
            [{"role": "system", "content": "S"}, {"role": "assistant", "content": "B"}],
        )
    with pytest.raises(
        TemplateError, match="with the exception of an initial optional system message"
    ):
        render(
            "mistral-7b-instruct-v0.2",
            [{"role": "user", "content": "A"}, {"role": "tool", "content": "x"}],
        )


def test_mistral_nemo_system_goes_into_the_last_user_turn() -> None:
    chat = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "A"},
        {"role": "assistant", "content": "B"},
        {"role": "user", "content": "C"},
        {"role": "assistant", "content": "D"},
    ]
    # The last *message* is an assistant turn, so no user turn is "loop.last": the system is lost.
    assert render("mistral-nemo-instruct-2407", chat) == "<s>[INST]A[/INST]B</s>[INST]C[/INST]D</s>"
    assert (
        render("mistral-nemo-instruct-2407", chat[:4])
        == "<s>[INST]A[/INST]B</s>[INST]S\n\nC[/INST]"
    )


def test_mistral_nemo_tools_calls_and_results() -> None:
    chat = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "tool_calls": [_call("Paris", "abc123def")]},
        {"role": "tool", "tool_call_id": "abc123def", "content": "18C"},
        {"role": "assistant", "content": "It is 18C."},
    ]
    out = render("mistral-nemo-instruct-2407", chat, tools=[WEATHER_TOOL])
    # String fields of the tool are pasted raw (not JSON-escaped), others go through tojson; the
    # tool result content is pasted raw too (|string), and the call id must be 9 characters.
    fn = WEATHER_TOOL["function"]
    assert out == (
        '<s>[AVAILABLE_TOOLS][{"type": "function", "function": {"name": "get_weather", '
        f'"description": "{fn["description"]}", "parameters": '
        + json.dumps(fn["parameters"], ensure_ascii=False)
        + "}}][/AVAILABLE_TOOLS][INST]Weather in Paris?[/INST]"
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abc123def"}]</s>'
        '[TOOL_RESULTS]{"content": 18C, "call_id": "abc123def"}[/TOOL_RESULTS]It is 18C.</s>'
    )
    bad = [chat[0], {"role": "assistant", "tool_calls": [_call("Paris", "abc")]}]
    with pytest.raises(TemplateError, match="length 9"):
        render("mistral-nemo-instruct-2407", bad)


# --- differential check against transformers (the ground truth) ----------------------------------

_QUIRK_CASES: list[tuple[list[dict], dict]] = [
    ([{"role": "user", "content": "Hi"}], {"add_generation_prompt": True}),
    ([{"role": "user", "content": ""}, {"role": "assistant", "content": ""}], {}),
    (
        [{"role": "system", "content": " Sys \n"}, {"role": "user", "content": " Grüße 👋 你好 "}],
        {"add_generation_prompt": True},
    ),
    ([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], {}),
    ([{"role": "assistant", "content": "first"}], {}),
    (
        [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "<think>\nr\n</think>\n\nb"},
            {"role": "user", "content": "c"},
        ],
        {"add_generation_prompt": True},
    ),
    (
        [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "b", "reasoning_content": "r"},
        ],
        {},
    ),
    ([{"role": "user", "content": "a"}], {"add_generation_prompt": True, "enable_thinking": False}),
    ([{"role": "user", "content": "a"}], {"date_string": "01 Jan 2025"}),
    (
        [
            {"role": "system", "content": "S"},
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [_call("Paris", "abc123def")]},
            {"role": "tool", "tool_call_id": "abc123def", "content": "18C"},
            {"role": "assistant", "content": "It is 18C."},
        ],
        {"tools": [WEATHER_TOOL]},
    ),
    (
        [
            {"role": "user", "content": "Search"},
            {"role": "assistant", "tool_calls": [_call("Paris")]},
        ],
        {
            "builtin_tools": ["brave_search"],
            "tools_in_user_message": False,
            "tools": [WEATHER_TOOL],
        },
    ),
    (
        [
            {"role": "system", "content": "S"},
            {"role": "user", "content": [{"type": "text", "text": "t"}]},
        ],
        {},
    ),
]


def _oracle(source: str, messages: list[dict], tools: list | None, **kwargs: object) -> str:
    # apply_chat_template(tokenize=False) = normalize messages (drop None keys) + render_jinja_template.
    from transformers.utils.chat_template_utils import (
        _normalize_chat_messages,
        render_jinja_template,
    )

    rendered, _ = render_jinja_template(
        [_normalize_chat_messages(messages)], tools=tools, chat_template=source, **kwargs
    )
    return rendered[0]


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_quirk_battery_matches_transformers(name: str) -> None:
    pytest.importorskip("transformers")
    meta = _sidecar(name)
    source = (CHAT_DIR / f"{name}.jinja").read_text(encoding="utf-8")
    tokens = {k: meta[k] for k in ("bos_token", "eos_token") if meta[k] is not None}
    compared = 0
    for i, (messages, opts) in enumerate(_QUIRK_CASES):
        opts = dict(opts)
        tools = opts.pop("tools", None)
        kwargs = {**tokens, **meta["variables"], **opts}
        try:
            want: str | None = _oracle(source, messages, tools, **kwargs)
        except Exception:  # the official template refuses this conversation
            want = None
        if want is None:
            with pytest.raises(DojoError):
                render(name, messages, tools=tools, **opts)
        else:
            assert render(name, messages, tools=tools, **opts) == want, f"case {i}"
            compared += 1
    assert compared >= 3  # the battery must exercise real renders, not only refusals
