"""dojo.chat.sandbox: a chat template is code downloaded with a model; it runs in Jinja's
immutable sandbox with a render budget. Python internals, imports and file reads are refused,
runaway loops stop, and a refused template changes nothing."""

import json
import time
from pathlib import Path

import pytest

from dojo.chat import sandbox as chat_sandbox
from dojo.chat.template import ChatTemplate, render
from dojo.errors import TemplateError

MSGS = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
SECRET = "s3cr3t-token-do-not-leak"

# (template, text the TemplateError must contain)
INTERNALS = [
    ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "refused by the sandbox"),
    ("{{ messages.__class__.__base__ }}", "refused by the sandbox"),
    ("{{ cycler.__init__.__globals__.os.popen('id').read() }}", "refused by the sandbox"),
    ("{{ lipsum.__globals__['os'].environ }}", "refused by the sandbox"),
    ("{{ raise_exception.__globals__ }}", "refused by the sandbox"),
    ("{{ strftime_now.__globals__['datetime'] }}", "refused by the sandbox"),
    ("{{ namespace.__init__.__globals__ }}", "refused by the sandbox"),
    ("{{ dict.__class__.__subclasses__() }}", "refused by the sandbox"),
    ("{{ self._TemplateReference__context }}", "refused by the sandbox"),
    ("{{ '{0.__class__.__mro__}'.format(messages) }}", "refused by the sandbox"),
    ("{{ '%s'|format(messages.__class__) }}", "refused by the sandbox"),
    ("{{ messages|attr('__class__') }}", "refused by the sandbox"),
    ("{{ (messages|first).__class__.__init__ }}", "refused by the sandbox"),
    ("{% set ns = namespace() %}{% set ns._x = 1 %}", "underscore"),
    # Immutable sandbox: the caller's messages cannot be changed by the template.
    ("{{ messages.append({'role': 'user'}) }}", "refused by the sandbox"),
    ("{{ messages[0].update({'role': 'system'}) }}", "refused by the sandbox"),
    ("{{ messages.pop() }}", "refused by the sandbox"),
]
IMPORTS_AND_FILES = [
    ("{% import 'os' as os %}{{ os.system('id') }}", "no loader"),
    ("{% from 'subprocess' import run %}{{ run('id') }}", "no loader"),
    ("{% include 'secret.txt' %}", "no loader"),
    ("{% include '/etc/passwd' %}", "no loader"),
    ("{% extends 'secret.txt' %}", "no loader"),
    ("{{ open('secret.txt').read() }}", "'open' is undefined"),
    ("{{ __import__('os').getcwd() }}", "is undefined"),
    ("{{ self.__init__.__globals__['__builtins__'] }}", "refused by the sandbox"),
]
RUNAWAY = [
    ("{{ 'x' * 100000000 }}", "beyond the size limit"),
    ("{{ [0] * 100000000 }}", "beyond the size limit"),
    ("{{ 2 ** 100000 }}", "exponent 100000 is too large"),
    ("{{ range(10**9)|list|length }}", "Range too big"),
    (
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        "range() iterated more than",
    ),
    (
        "{% set ns = namespace(s='ab') %}{% for i in range(60) %}"
        "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
        "built a value",
    ),
    ("{% for i in range(100000) %}{{ 'x' * 10000 }}{% endfor %}", "output grew past"),
    ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "recursion too deep"),
    ("{% for m in messages recursive %}{{ loop(messages) }}{% endfor %}", "recursion too deep"),
    # Nested loops over a plain string call nothing the sandbox intercepts: only the wall-time
    # budget stops them (10^10 iterations, hours without it).
    (
        "{% set s = 'x' * 100000 %}{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}",
        "render took longer than",
    ),
    (
        "{% set s = messages * 20000 %}{% for a in s %}{% for b in s %}{{ '' }}{% endfor %}{% endfor %}",
        "render took longer than",
    ),
]


@pytest.fixture
def short_budget(monkeypatch: pytest.MonkeyPatch) -> float:
    """A 0.5 s render budget instead of 30 s, so the wall-time cases stay fast."""
    monkeypatch.setattr(chat_sandbox, "MAX_SECONDS", 0.5)
    return 0.5


def _refused(source: str) -> TemplateError:
    tpl = ChatTemplate.from_source(source, name="evil.jinja")
    with pytest.raises(TemplateError) as e:
        render(tpl, MSGS)
    return e.value


def test_environment_is_the_immutable_sandbox() -> None:
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    assert isinstance(chat_sandbox._environment(), ImmutableSandboxedEnvironment)


@pytest.mark.parametrize(("source", "needle"), INTERNALS, ids=lambda x: str(x)[:40])
def test_python_internals_are_refused(source: str, needle: str) -> None:
    err = _refused(source)
    assert needle in err.message and "evil.jinja" in err.message


@pytest.mark.parametrize(("source", "needle"), IMPORTS_AND_FILES, ids=lambda x: str(x)[:40])
def test_imports_and_file_reads_are_refused(
    source: str, needle: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "secret.txt").write_text(SECRET)
    monkeypatch.chdir(tmp_path)
    err = _refused(source)
    assert needle in err.message
    assert SECRET not in err.message + str(err.hint)


@pytest.mark.parametrize(("source", "needle"), RUNAWAY, ids=lambda x: str(x)[:40])
def test_runaway_templates_stop(source: str, needle: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The wall-time cases get a 0.5 s budget so they stay fast; the others a 5 s one, so that on
    # a loaded machine the clock never stops them before the check they are about.
    budget = 0.5 if needle == "render took longer than" else 5.0
    monkeypatch.setattr(chat_sandbox, "MAX_SECONDS", budget)
    t0 = time.monotonic()
    err = _refused(source)
    assert needle in err.message
    assert time.monotonic() - t0 < budget + 4.0  # the budget, not the template, decides


def test_messages_are_not_mutated_by_a_refused_template() -> None:
    msgs = json.loads(json.dumps(MSGS))
    with pytest.raises(TemplateError):
        render(ChatTemplate.from_source("{{ messages[0].clear() }}"), msgs)
    assert msgs == MSGS


def test_ordinary_loops_still_render(short_budget: float) -> None:
    """The loop guard changes nothing for real templates: loop.length/last, else, filters."""
    src = (
        "{% for m in messages if m.role != 'system' %}{{ loop.index }}/{{ loop.length }}:"
        "{{ m.content }}{% if not loop.last %},{% endif %}{% else %}none{% endfor %}"
        "|{% for i in [3, 1, 2]|sort %}{{ i }}{% endfor %}|{% for x in [] %}x{% else %}e{% endfor %}"
    )
    assert render(ChatTemplate.from_source(src), MSGS) == "1/2:hi,2/2:hello|123|e"


def test_cli_refuses_an_evil_template_in_one_line(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "evil.jinja").write_text("{{ cycler.__init__.__globals__.os.popen('id').read() }}")
    (tmp_path / "chat.json").write_text(json.dumps({"messages": MSGS}))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DOJO_DEBUG", raising=False)
    r = cli("chat-template", "render", "--template", "evil.jinja", "--messages", "chat.json")
    assert r.exit_code == 1 and r.stdout == ""
    assert r.stderr.startswith("error: template 'evil.jinja' was refused by the sandbox")
    assert "Traceback" not in r.stderr and r.stderr.count("error:") == 1
