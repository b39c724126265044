"""dojo.chat.failures: every error a template raises while rendering comes with a hint.

The hint says where the template stopped (its line, and the message it was on when a loop
variable is one of the messages) and what to change. Through the CLI: one error line, one hint
line, exit 1, never "internal error".
"""

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dojo.chat.template import ChatTemplate, load_template, render
from dojo.errors import DataError, TemplateError

MSGS = [
    {"role": "system", "content": "S"},
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "yo"},
]
LOOP = "{% for message in messages %}\n{% if message.role == 'user' %}\n{{ X }}\n{% endif %}\n{% endfor %}"

# (template, text the error must contain, text the hint must contain)
FAULTS = [
    ("{{ raise_exception('no system messages') }}", "template 'fault.jinja': no system messages", "refused this conversation"),
    (LOOP.replace("X", "raise_exception('users may not speak')"), "users may not speak", "at message 1 (role 'user'), line 3"),
    ("{{ [1, 'a']|sort }}", "TypeError: '<' not supported", "sorts or compares values of different types"),
    ("{{ [none, 1]|sort }}", "TypeError", "compares values of different types"),
    ("{{ messages|max }}", "TypeError", "compares values of different types"),
    ("{{ messages|unique|list }}", "TypeError: unhashable type: 'dict'", "check that message's fields"),
    ("{{ messages|sum }}", "TypeError", "check that message's fields"),
    ("{{ ''.join(messages) }}", "TypeError", "check that message's fields"),
    ("{{ messages|dictsort }}", "failed", "check that message's fields"),
    (LOOP.replace("X", "message.tool_calls.function.name"), "has no attribute 'tool_calls'", "tool_calls must be a list"),
    ("{% for m in messages %}{% for tc in m.content %}{{ tc.function.name }}{% endfor %}{% endfor %}", "has no attribute 'function'", "at message 0"),
    ("{{ messages[0].nosuch.x }}", "'dict object' has no attribute 'nosuch'", "reads a field the conversation does not have"),
    ("{{ nosuch.x }}", "'nosuch' is undefined", "pass it with --var"),
    ("{{ 'x'.encode('nosuch') }}", "LookupError: unknown encoding: nosuch", "codec that does not exist"),
    ("{{ 'x\\udcff'.encode('utf-8') }}", "UnicodeEncodeError", "hint"),
    ("{{ b }}{{ 'caf\\xe9'.encode('latin-1').decode('utf-8') }}", "UnicodeDecodeError", "hint"),
    ("{{ 1 / 0 }}", "ZeroDivisionError", "hint"),
    ("{{ messages|slice(0)|list }}", "ZeroDivisionError", "hint"),
    ("{{ 'a' < 1 }}", "TypeError", "compares values of different types"),
    ("{{ {1: 'a', 'b': 2}|tojson(sort_keys=true) }}", "TypeError", "compares values of different types"),
    ("{{ namespace()|tojson }}", "is not JSON serializable", "hint"),
    ("{{ strftime_now(5) }}", "TypeError", "hint"),
    ("{{ '%d' % 'x' }}", "TypeError", "hint"),
    ("{{ 'x' % 5 }}", "TypeError: not all arguments converted", "hint"),
    ("{{ '%(a)s' % 5 }}", "TypeError", "hint"),
    ("{{ '{0:d}'.format('a') }}", "ValueError: Unknown format code", "hint"),
    ("{{ '{a}'.format(b=1) }}", "KeyError", "hint"),
    ("{{ ('1' * 4000)|int * ('1' * 4000)|int }}", "Exceeds the limit", "hint"),
    ("{{ 'x'|wordwrap(0) }}", "ValueError", "hint"),
    ("{{ range(1, 2, 0) }}", "ValueError", "hint"),
    ("{{ lipsum(1, false, 5, 5) }}", "ValueError", "hint"),
    ("{{ messages|map('nosuch')|list }}", "No filter named 'nosuch'", "the template failed"),
    ("{{ messages|selectattr('role', 'nosuchtest')|list }}", "No test named 'nosuchtest'", "the template failed"),
    ("{% for a, b, c in messages %}{% endfor %}", "ValueError", "hint"),
    ("{{ (messages|length) ** 'x' }}", "TypeError", "hint"),
    ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "recursion too deep", "calls itself without end"),
    ("{{ ''.__class__ }}", "refused by the sandbox", "Python internals"),
    ("{{ messages.append(1) }}", "refused by the sandbox", "Python internals"),
    ("{{ 'x' * 10**9 }}", "stopped", "grows without end"),
    ("{% set x = namespace(a=1) %}{{ x.b.c }}", "has no attribute 'b'", "reads a field"),
    ("{{ cycler(1).next().x.y }}", "failed", "hint"),
    ("{{ joiner()().x.y }}", "failed", "hint"),
    ("{{ (messages|first).content.splitlines(3, 4) }}", "TypeError", "hint"),
    ("{{ 'x'.center('y') }}", "TypeError", "hint"),
    ("{{ 'x'|indent(none) }}", "TypeError", "hint"),
    ("{{ 'x'|center('a') }}", "TypeError", "hint"),
    ("{{ dict(1) }}", "TypeError", "hint"),
    ("{{ 'x'|truncate('a') }}", "TypeError", "hint"),
    ("{{ 'x'|replace(1, 2, 'a') }}", "TypeError", "hint"),
]  # fmt: skip


def _tpl(source: str) -> ChatTemplate:
    return ChatTemplate.from_source(source, name="fault.jinja")


@pytest.mark.parametrize(("source", "msg", "hint"), FAULTS, ids=[f[0][:50] for f in FAULTS])
def test_every_render_failure_has_a_hint(source: str, msg: str, hint: str) -> None:
    with pytest.raises(TemplateError) as info:
        render(_tpl(source), MSGS)
    e = info.value
    assert e.message.startswith("template 'fault.jinja'"), e.message
    assert msg in e.message, e.message
    assert e.hint and (hint == "hint" or hint in e.hint), e.hint


@pytest.mark.parametrize(
    ("source", "msg", "hint"), FAULTS[:25], ids=[f[0][:50] for f in FAULTS[:25]]
)
def test_cli_prints_error_and_hint(cli, tmp_path: Path, source: str, msg: str, hint: str) -> None:
    (tmp_path / "fault.jinja").write_text(source, encoding="utf-8")
    (tmp_path / "chat.json").write_text(json.dumps(MSGS), encoding="utf-8")
    tpl, chat = str(tmp_path / "fault.jinja"), str(tmp_path / "chat.json")
    r = cli("chat-template", "render", "--template", tpl, "--messages", chat)
    assert r.exit_code == 1 and r.stdout == "", r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: ") and lines[1].startswith("hint: ")
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr


def test_raise_exception_message_is_kept_exactly() -> None:
    with pytest.raises(TemplateError) as info:
        render(_tpl("{{ raise_exception('Conversation roles must alternate') }}"), MSGS)
    assert info.value.message == "template 'fault.jinja': Conversation roles must alternate"
    assert type(info.value.__cause__).__name__ == "TemplateError"  # as transformers raises it


# Bundled templates given malformed tool_calls straight through the library (the CLI refuses them
# earlier, see test_chat_files.py): rendered text or an error that names the message.
TOOL_TEMPLATES = [
    "qwen2.5-instruct",
    "qwen3",
    "llama-3.1-instruct",
    "mistral-nemo-instruct-2407",
    "deepseek-v3",
]
BAD_CALLS = [
    "abc",
    5,
    {"name": "f"},
    [5],
    [{}],
    [{"function": "f"}],
    [{"function": {"arguments": 1}}],
    [None],
]


@pytest.mark.parametrize("name", TOOL_TEMPLATES)
@pytest.mark.parametrize("calls", BAD_CALLS, ids=[json.dumps(c) for c in BAD_CALLS])
def test_malformed_tool_calls_in_real_templates(name: str, calls: object) -> None:
    msgs = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": calls},
    ]
    try:
        out = render(load_template(name), msgs)
    except TemplateError as e:
        assert e.hint, e.message
        assert "message 1" in e.hint or "tool" in e.hint, e.hint
    else:
        assert isinstance(out, str)


# ---- fuzz: templates mixing faults -------------------------------------------------------------

PIECES = st.sampled_from(
    [
        "{{ raise_exception('x') }}", "{{ [1, 'a']|sort }}", "{{ messages[0].nosuch.y }}",
        "{{ 'x'.encode('nosuch') }}", "{{ 1 / 0 }}", "{{ 'x' * 10**9 }}", "{{ ''.__class__ }}",
        "{% for m in messages %}{{ m.content }}{% endfor %}", "{{ m.role }}", "{{ messages|tojson }}",
        "{% for m in messages %}{{ m.tool_calls|tojson }}{% endfor %}", "{{ '%s' % messages }}",
        "{{ messages|map(attribute='content')|join('|') }}", "{{ messages|last|attr('role') }}",
        "{% if messages[0].role == 'system' %}{{ raise_exception('no system') }}{% endif %}",
        "{{ 'x'|center(10) }}", "{{ lipsum(2)|length }}", "{{ messages|batch(2)|list|length }}",
        "{{ (messages|first).content.split()|sort|first }}", "{{ range(3)|sum }}", "\n", "text ",
    ]
)  # fmt: skip
FUZZ_MSGS = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user", "assistant", "tool"]),
         "content": st.one_of(st.text(max_size=10), st.none(), st.lists(st.integers(), max_size=2))},
        optional={"tool_calls": st.one_of(st.text(max_size=3), st.lists(st.dictionaries(st.text(max_size=3), st.integers()), max_size=2))},
    ),
    min_size=1, max_size=4,
)  # fmt: skip


@pytest.mark.slow  # hypothesis: seconds; `make test` runs it
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(PIECES, min_size=1, max_size=5).map("".join), FUZZ_MSGS)
def test_fuzz_every_failure_has_a_hint(source: str, msgs: list[dict[str, object]]) -> None:
    try:
        out = render(_tpl(source), msgs)
    except TemplateError as e:
        assert e.message.startswith("template 'fault.jinja'") and e.hint, (e.message, e.hint)
    except DataError as e:
        assert e.hint or "message" in e.message
    else:
        assert isinstance(out, str)
