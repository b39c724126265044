"""Quirks of chatml, zephyr-7b-beta, vicuna, llama-2-chat, yi-1.5-chat, baichuan2-chat, glm-4-9b-chat.

Expected strings are written from reading each official template; the oracle test
(test_templates_chat_oracle.py) checks the same templates against transformers itself.
"""

import pytest

from dojo.chat.template import render
from dojo.errors import TemplateError


def U(c: str) -> dict:
    return {"role": "user", "content": c}


def A(c: str) -> dict:
    return {"role": "assistant", "content": c}


def S(c: str) -> dict:
    return {"role": "system", "content": c}


def test_chatml_keeps_content_raw_and_unicode() -> None:
    out = render("chatml", [U("  héllo 😀\n"), A("")], add_generation_prompt=False)
    assert out == "<|im_start|>user\n  héllo 😀\n<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n"


def test_chatml_renders_any_role_name() -> None:
    assert (
        render("chatml", [{"role": "tool", "content": "42"}]) == "<|im_start|>tool\n42<|im_end|>\n"
    )


def test_zephyr_generation_prompt_keeps_the_newline_after_the_tag() -> None:
    out = render("zephyr-7b-beta", [S("s"), U("u")], add_generation_prompt=True)
    # trim_blocks trims after {% %} tags only: the newline after {{ }} stays.
    assert out == "<|system|>\ns</s>\n<|user|>\nu</s>\n<|assistant|>\n"
    # A conversation ending on the assistant still gets a (second) header when asked.
    assert render("zephyr-7b-beta", [U("u"), A("a")], add_generation_prompt=True).endswith(
        "a</s>\n<|assistant|>\n"
    )


def test_zephyr_uses_eos_token_override() -> None:
    assert render("zephyr-7b-beta", [U("u")], eos_token="<E>") == "<|user|>\nu<E>\n"


def test_llama2_system_folded_into_first_user_and_stripped() -> None:
    # strip() runs on "<<SYS>>...<</SYS>>\n\n" + content, so the first user's leading spaces stay.
    out = render(
        "llama-2-chat", [S("sys"), U("  q1 "), A(" a1 "), U("q2")], add_generation_prompt=True
    )
    assert out == "<s>[INST] <<SYS>>\nsys\n<</SYS>>\n\n  q1 [/INST] a1 </s><s>[INST] q2 [/INST]"


def test_llama2_ignores_generation_prompt_and_has_no_default_system() -> None:
    assert render("llama-2-chat", [U("q")]) == render(
        "llama-2-chat", [U("q")], add_generation_prompt=True
    )
    assert "<<SYS>>" not in render("llama-2-chat", [U("q")])


@pytest.mark.parametrize("name", ["llama-2-chat", "vicuna"])
def test_roles_must_alternate(name: str) -> None:
    with pytest.raises(TemplateError, match="Conversation roles must alternate"):
        render(name, [U("a"), U("b")])
    with pytest.raises(TemplateError, match="Conversation roles must alternate"):
        render(name, [S("s"), A("a")])


def test_vicuna_system_strip_and_bos_once() -> None:
    out = render("vicuna", [S(" sys "), U(" q "), A(" a "), U("q2")], add_generation_prompt=True)
    assert out == "<s>sys\n\nUSER: q\nASSISTANT: a</s>\nUSER: q2\nASSISTANT:"


def test_yi_system_is_bare_and_generation_prompt_is_ignored() -> None:
    out = render("yi-1.5-chat", [S("sys"), U("q")])
    assert out == "sys<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n"
    assert out == render("yi-1.5-chat", [S("sys"), U("q")], add_generation_prompt=True)


def test_yi_only_first_message_counts_as_system() -> None:
    # A later system message is silently dropped (the loop renders only user/assistant).
    assert (
        render("yi-1.5-chat", [U("q"), S("late")])
        == "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n"
    )


def test_baichuan2_last_system_wins_trimmed_and_no_end_token() -> None:
    out = render(
        "baichuan2-chat", [S("first"), S("  second \n"), U("q"), A("a")], add_generation_prompt=True
    )
    assert out == "second<reserved_106>q<reserved_107>a"


def test_baichuan2_generation_prompt() -> None:
    assert (
        render("baichuan2-chat", [U("q")], add_generation_prompt=True)
        == "<reserved_106>q<reserved_107>"
    )
    assert render("baichuan2-chat", [U("q")]) == "<reserved_106>q"


def test_glm4_prefix_metadata_and_empty_content_skipped() -> None:
    msgs = [U("q"), {"role": "assistant", "metadata": "get_weather", "content": "{}"}, A("")]
    out = render("glm-4-9b-chat", msgs, add_generation_prompt=True)
    assert out == "[gMASK]<sop><|user|>\nq<|assistant|>get_weather\n{}<|assistant|>"


def test_glm4_tools_come_from_a_message_not_the_tools_argument() -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": {"a": 1}}}
    plain = render("glm-4-9b-chat", [U("q")], tools=[tool])
    assert "可用工具" not in plain
    out = render("glm-4-9b-chat", [{"role": "system", "content": "", "tools": [tool]}, U("q")])
    assert out.startswith("[gMASK]<sop><|system|>\n你是一个名为 ChatGLM 的人工智能助手。")
    assert (
        '## f\n\n{\n    "name": "f",\n    "parameters": {\n        "a": 1\n    }\n}\n在调用上述函数时'
        in out
    )
    assert out.endswith("<|user|>\nq")


def test_glm4_observation_role() -> None:
    out = render("glm-4-9b-chat", [U("q"), {"role": "observation", "content": "r"}])
    assert out == "[gMASK]<sop><|user|>\nq<|observation|>\nr"
