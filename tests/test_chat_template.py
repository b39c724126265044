"""Renderer semantics (as transformers' apply_chat_template), the sandbox and the render budget."""

import json
from pathlib import Path

import pytest

from dojo.chat import sandbox as chat_sandbox
from dojo.chat.template import ChatTemplate, assistant_spans, load_template, render
from dojo.errors import DataError, TemplateError

USER = [{"role": "user", "content": "hi"}]


def inline(source: str, **kw: object) -> ChatTemplate:
    return ChatTemplate.from_source(source, **kw)  # type: ignore[arg-type]


def test_trim_and_lstrip_blocks() -> None:
    src = "{% for m in messages %}\n    {% if true %}\n[{{ m.content }}]\n    {% endif %}\n{% endfor %}"
    assert render(inline(src), USER) == "[hi]\n"


def test_tojson_keeps_key_order_and_non_ascii() -> None:
    out = render(inline("{{ x | tojson }}"), USER, x={"b": 1, "a": "é<>&"})
    assert out == '{"b": 1, "a": "é<>&"}'
    assert render(inline("{{ x | tojson(indent=2) }}"), USER, x={"k": [1]}) == json.dumps(
        {"k": [1]}, indent=2
    )


def test_none_valued_keys_are_dropped() -> None:
    src = "{% for m in messages %}{{ 'tc' if m.tool_calls is defined else 'none' }}{% endfor %}"
    assert (
        render(inline(src), [{"role": "assistant", "content": "x", "tool_calls": None}]) == "none"
    )


def test_reasoning_fields_are_aliased() -> None:
    src = "{% for m in messages %}{{ m.reasoning_content }}|{{ m.thinking }}{% endfor %}"
    assert render(inline(src), [{"role": "assistant", "content": "a", "reasoning": "r"}]) == "r|r"


def test_tools_and_documents_are_defined_but_none_by_default() -> None:
    src = "{{ tools is defined }} {{ tools is none }} {{ documents is none }}"
    assert render(inline(src), USER) == "True True True"
    assert render(inline("{{ tools[0].name }}"), USER, tools=[{"name": "f"}]) == "f"


def test_unset_tokens_are_undefined_and_set_tokens_passed() -> None:
    src = "{{ bos_token is defined }}{{ eos_token }}"
    assert render(inline(src), USER) == "False"
    assert render(inline(src, eos_token="</s>"), USER) == "False</s>"
    assert render(inline(src), USER, bos_token="<s>", eos_token="E") == "TrueE"


def test_variables_override_template_defaults() -> None:
    tpl = ChatTemplate.from_source("{{ d }}", variables={"d": "default"})
    assert render(tpl, USER) == "default"
    assert render(tpl, USER, d="given") == "given"


def test_strftime_now_and_namespace_and_loopcontrols() -> None:
    src = "{% set ns = namespace(n=0) %}{% for i in range(5) %}{% if i == 3 %}{% break %}{% endif %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}{{ strftime_now('%Y')|length }}"
    assert render(inline(src), USER) == "34"


def test_generation_block_renders_its_body() -> None:
    assert render(inline("a{% generation %}b{% endgeneration %}c"), USER) == "abc"


def test_raise_exception_names_template_and_message() -> None:
    with pytest.raises(TemplateError) as info:
        render(inline("{{ raise_exception('no system') }}", name="t1"), USER)
    assert info.value.message == "template 't1': no system"
    assert str(info.value.__cause__) == "no system"


def test_syntax_error_names_the_line(tmp_path: Path) -> None:
    """A file is named by the flag it came with; a template given as text by its name."""
    bad = tmp_path / "bad.jinja"
    bad.write_text("ok\n{% if %}\n", encoding="utf-8")
    said = "does not parse: line 2: Expected an expression, got 'end of statement block'"
    with pytest.raises(TemplateError) as info:
        load_template(str(bad))
    assert info.value.message == f"--template {str(bad)!r}: {said}"
    with pytest.raises(TemplateError) as info:
        inline(bad.read_text(encoding="utf-8"), name="t1")
    assert info.value.message == f"template 't1' {said}"


@pytest.mark.parametrize(
    "src",
    [
        "{{ ''.__class__.__mro__ }}",
        "{{ ''.__class__ }}",
        "{{ raise_exception.__globals__ }}",
        "{{ strftime_now.__code__ }}",
        "{{ messages.__class__.__base__.__subclasses__() }}",
        "{% set ns = namespace() %}{% set ns._x = 1 %}",
    ],
)
def test_sandbox_refuses_python_internals(src: str) -> None:
    with pytest.raises(TemplateError, match="refused by the sandbox"):
        render(inline(src), USER)


def test_immutable_sandbox_refuses_mutation() -> None:
    with pytest.raises(TemplateError, match="refused by the sandbox"):
        render(inline("{% set x = [] %}{{ x.append(1) }}"), USER)


def test_nested_ranges_are_capped() -> None:
    src = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    with pytest.raises(TemplateError, match="range"):
        render(inline(src), USER)


def test_single_range_above_jinja_limit_is_refused() -> None:
    with pytest.raises(TemplateError):
        render(inline("{% for i in range(10**7) %}{% endfor %}"), USER)


def test_string_explosion_is_capped() -> None:
    with pytest.raises(TemplateError, match="stopped"):
        render(inline("{{ 'x' * 10**9 }}"), USER)
    src = "{% set ns = namespace(s='xx') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"
    with pytest.raises(TemplateError, match="stopped"):
        render(inline(src), USER)


def test_output_size_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chat_sandbox, "MAX_OUTPUT_CHARS", 1000)
    with pytest.raises(TemplateError, match="output grew"):
        render(inline("{% for i in range(2000) %}x{% endfor %}"), USER)


def test_wall_time_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chat_sandbox, "MAX_SECONDS", 0.0)
    with pytest.raises(TemplateError, match="longer than"):
        render(inline("{% for i in range(5000) %}{{ i }}{% endfor %}"), USER)


def test_range_still_behaves_like_range() -> None:
    src = "{{ range(3)|list }}{{ range(4)|length }}{% for i in range(3, 0, -1) %}{{ i }}{% endfor %}{{ range(5)[1] }}{% for i in range(3)|reverse %}{{ i }}{% endfor %}"
    assert render(inline(src), USER) == "[0, 1, 2]43211210"


def test_bad_messages_are_data_errors() -> None:
    for bad in ([], "hi", [1], None):
        with pytest.raises(DataError):
            render("chatml", bad)


def test_reserved_variable_is_refused() -> None:
    with pytest.raises(TemplateError, match="reserved"):
        render(ChatTemplate.from_source("x", variables={"messages": []}), USER)


def test_unknown_template_lists_close_names() -> None:
    with pytest.raises(TemplateError) as info:
        load_template("chatm")
    assert "chatml" in (info.value.hint or "")


def test_model_folder_with_tokenizer_config(tmp_path: Path) -> None:
    cfg = {
        "bos_token": {"content": "<B>", "lstrip": False},
        "eos_token": "<E>",
        "unk_token": "<U>",
        "chat_template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}{{ unk_token }}",
    }
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(cfg), encoding="utf-8")
    assert render(str(tmp_path), USER) == "<B>hi<E><U>"
    assert render(str(tmp_path / "tokenizer_config.json"), USER, eos_token="!") == "<B>hi!<U>"
    # chat_template.jinja wins over tokenizer_config.json, as in transformers.
    (tmp_path / "chat_template.jinja").write_text("J{{ eos_token }}", encoding="utf-8")
    assert render(str(tmp_path), USER) == "J<E>"


def test_model_folder_named_template_list(tmp_path: Path) -> None:
    cfg = {
        "chat_template": [
            {"name": "tool_use", "template": "T"},
            {"name": "default", "template": "D"},
        ]
    }
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(cfg), encoding="utf-8")
    assert render(str(tmp_path), USER) == "D"


def test_model_folder_without_template(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text("{}", encoding="utf-8")
    with pytest.raises(TemplateError, match="no chat template"):
        load_template(str(tmp_path))


def test_assistant_spans_cover_content_and_stop_token() -> None:
    msgs = [
        {"role": "user", "content": "Paris?"},
        {"role": "assistant", "content": "Paris"},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": "Paris"},
    ]
    text, spans = assistant_spans("chatml", msgs)
    assert [text[a:b] for a, b in spans] == ["Paris<|im_end|>", "Paris<|im_end|>"]
    # The user's "Paris?" is not mistaken for the first reply.
    assert text[: spans[0][0]].endswith("<|im_start|>assistant\n")


def test_assistant_spans_stripped_content_and_missing() -> None:
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "  a  "}]
    text, spans = assistant_spans("llama-2-chat", msgs)
    assert [text[a:b] for a, b in spans] == ["a </s>"]
    _, spans = assistant_spans(
        "chatml", [{"role": "user", "content": "q"}, {"role": "assistant", "content": ""}]
    )
    assert spans == []


def test_assistant_spans_include_reasoning_the_template_emits() -> None:
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "<think>r</think>a"}]
    text, spans = assistant_spans("chatml", msgs)
    assert [text[a:b] for a, b in spans] == ["<think>r</think>a<|im_end|>"]


def test_assistant_spans_reasoning_content_field() -> None:
    src = (
        "{% for m in messages %}{% if m.role == 'assistant' %}<think>{{ m.reasoning_content }}</think>"
        "{% endif %}{{ m.content }}<end>{% endfor %}"
    )
    tpl = ChatTemplate.from_source(src, stop_token="<end>")
    msgs = [
        {"role": "user", "content": "r"},
        {"role": "assistant", "content": "a", "reasoning_content": "r"},
    ]
    text, spans = assistant_spans(tpl, msgs)
    assert [text[a:b] for a, b in spans] == ["<think>r</think>a<end>"]
