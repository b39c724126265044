"""dojo.chat.limits and guards: one filter, global or method call must not hang or eat memory.

Jinja checks nothing inside a single call, so each of these used to allocate gigabytes or run
for minutes between two budget checks. Each must now be refused with a TemplateError (and a
hint), fast (< 2 s) and with little memory (tracemalloc peak < 200 MB); the whole list also
runs in a child process under RLIMIT_AS = 1.5 GiB. Real templates must render unchanged: a
differential fuzz compares dojo's sandbox with a plain Jinja sandbox on small inputs.
"""

import json
import subprocess
import sys
import textwrap
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dojo.chat import sandbox as chat_sandbox
from dojo.chat.template import ChatTemplate, render
from dojo.errors import DojoError, TemplateError

MSGS = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
BIG = 10**9

# One call (filter, global, method, operator, literal) that would build > 1 GB or run for minutes.
ONE_CALL = [
    "{{ lipsum(n=10**8) }}",
    "{{ lipsum(n=1000, min=10**6, max=10**7) }}",
    "{{ 'x'|center(2*10**9) }}",
    "{{ messages|center(10**9) }}",
    "{{ ('x ' * 10**7)|wordwrap(1) }}",
    "{{ ('x' * 10**6)|wordwrap(1, wrapstring='y' * 100) }}",
    "{{ messages|tojson(indent=2*10**8) }}",
    "{{ messages|tojson(indent='x' * 10**7) }}",
    "{{ messages|tojson(separators=('x' * 10**7, ':')) }}",
    "{{ [[[[1]*100]*100]*100]|tojson(indent=100) }}",
    "{{ '%*s' % (10**9, 'x') }}",
    "{{ '%.*f' % (10**9, 1.5) }}",
    "{{ '%0999999999d' % 1 }}",
    "{{ '%s' % ('x' * 40000000,) ~ '%s' % ('y' * 40000000,) }}",
    "{{ '%(a)999999999s' % {'a': 1} }}",
    "{{ '%*s'|format(10**9, 'x') }}",
    "{{ '%s%s%s%s%s%s'|format(*(['x' * 10**7] * 6)) }}",
    "{{ '{:>1000000000}'.format(1) }}",
    "{{ '{0:{1}}'.format('x', 10**9) }}",
    "{{ '{:.999999999f}'.format(1.5) }}",
    "{{ ('{0}' * 1000).format('x' * 10**6) }}",
    "{{ '{a:{b}}'.format_map({'a': 'x', 'b': 10**9}) }}",
    "{{ 'x' * 10**10 }}",
    "{{ ['x'] * 10**9 }}",
    "{{ [[[0] * 1000] * 1000] * 1000 }}",
    "{{ (2 ** 1000) ** 1000 }}",
    "{{ (10 ** 999) * (10 ** 999) * (10 ** 999) * (10 ** 999) * (10 ** 999) * (10 ** 999) * (10 ** 999) * (10 ** 999) * (10 ** 999) * (10 ** 999) * (10 ** 999) * (10 ** 999) * (10 ** 999) * (10 ** 999) * (10 ** 999) * (10 ** 999) * (10 ** 999) * (10 ** 999) * (10 ** 999) * (10 ** 999) * (10 ** 999) * (10 ** 999) * (10 ** 999) * (10 ** 999) * (10 ** 999) * (10 ** 999) * (10 ** 999) * (10 ** 999) * (10 ** 999) * (10 ** 999) * (10 ** 999) * (10 ** 999) * (10 ** 999) * (10 ** 999) }}",
    "{{ range(10**10) }}",
    "{{ range(100000)|join('x' * 1000) }}",
    "{{ ('x' * 10**7)|join(',') }}",
    "{{ ['x' * 10**7, 'y' * 10**7, 'z' * 10**7, 'w' * 10**7, 'v' * 10**7, 'u' * 10**7]|join }}",
    "{{ (['x' * 10**7] * 6)|join }}",
    "{{ range(100000)|map('string')|join('y' * 1000) }}",
    "{{ ('a\\n' * 100000)|indent(width=10**9) }}",
    "{{ ('a\\n' * 100000)|indent(width='x' * 10**6) }}",
    "{{ 'x'|truncate(5, end='y' * 10**8) }}",
    "{{ ('a' * 10**6)|replace('a', 'b' * 100) }}",
    "{{ ('a' * 10**6)|replace('', 'b' * 100) }}",
    "{{ 'x'.ljust(10**9) }}",
    "{{ 'x'.rjust(10**9, '-') }}",
    "{{ 'x'.center(10**9) }}",
    "{{ 'x'.zfill(10**9) }}",
    "{{ ('\\t' * 1000).expandtabs(10**7) }}",
    "{{ ('a' * 10**6).replace('a', 'b' * 100) }}",
    "{{ ('x' * 1000).join(['y' * 10**5] * 1000) }}",
    "{{ ''.join(range(10**5)|map('string')|map('center', 1000)) }}",
    "{{ ('x' * 10**6).translate({120: 'y' * 1000}) }}",
    "{{ ('x' * 10**7).encode('utf-32') }}",
    "{{ (10).to_bytes(10**10, 'big') }}",
    "{{ ('x ' * 5 * 10**6).split() }}",
    "{{ ('x\\n' * 5 * 10**6).splitlines() }}",
    "{{ ('x' * 10**7)|list }}",
    "{{ ('x' * 10**7)|sort }}",
    "{{ [1]|batch(10**9, 'x')|list }}",
    "{{ [1]|slice(10**9)|list }}",
    "{{ ([[0] * 10000] * 10000)|sum(start=[]) }}",
    "{{ strftime_now('%c' * 10**6) }}",
    "{{ ('x' * 10**7)|title }}",
    "{{ ('http://x.y ' * 10**6)|urlize }}",
    "{{ ('x' * 10**7)|wordcount }}",
    "{{ ('<&>' * 10**7)|e }}",
    "{{ ('\\u00e9' * 10**7)|urlencode }}",
    "{{ ([[[0] * 100] * 100] * 100)|pprint }}",
    "{% set a = [0] * 1000 %}{% set b = [a, a, a, a, a, a, a, a, a, a] %}"
    "{% set c = [b, b, b, b, b, b, b, b, b, b] %}{% set d = [c, c, c, c, c, c, c, c, c, c] %}"
    "{% set e = [d, d, d, d, d, d, d, d, d, d] %}{{ e }}",
    "{% set x = 'x' * 40000000 %}{{ x ~ x ~ x }}",
    "{% set x = 'x' * 40000000 %}{% set d = {'a': x, 'b': x} %}{{ d }}",
    "{% set ns = namespace(v=[0] * 1000) %}{% for i in range(5) %}{% set ns.v = [ns.v] * 1000 %}{% endfor %}",
    "{% set ns = namespace(v=1) %}{% for i in range(300) %}{% set ns.v = [ns.v] %}{% endfor %}{{ ns.v }}",
    "{{ dict.fromkeys(range(100000), 'x' * 1000) }}",
    "{% macro m() %}{{ 'x' * 40000000 }}{{ 'y' * 40000000 }}{% endmacro %}{{ m() }}",
    # containers kept by globals (cycler's items) are weighed where they are turned into text
    "{% set x = 'x' * 40000000 %}{{ cycler(x, x, x, x).items }}",
    "{% set x = 'x' * 40000000 %}{{ cycler(x, x, x, x).items|string }}",
    "{% set x = 'x' * 40000000 %}{{ cycler(x, x, x).items ~ '' }}",
    "{% set x = 'x' * 40000000 %}{{ '{!r}{!r}'.format(cycler(x, x).items, 1) }}",
    "{% set x = 'x' * 40000000 %}{{ cycler(x, x, x).items|trim }}",
    # Markup (|safe) has its own str methods and % and format
    "{{ ('x'|safe).ljust(10**9) }}",
    "{{ ('{0:>1000000000}'|safe).format(1) }}",
    "{{ ('%*s'|safe) % (10**9, 'x') }}",
    "{{ ('x'|forceescape) * 10**9 }}",
]
ONE_CALL_IDS = [s[:60] for s in ONE_CALL]


def _render(source: str) -> str:
    return render(ChatTemplate.from_source(source, name="evil.jinja"), MSGS)


@pytest.mark.parametrize("source", ONE_CALL, ids=ONE_CALL_IDS)
def test_one_call_is_refused_fast(source: str) -> None:
    t0 = time.process_time()  # CPU time: the machine may be shared, the work must be small
    with pytest.raises(TemplateError) as info:
        _render(source)
    elapsed = time.process_time() - t0
    err = info.value
    assert "evil.jinja" in err.message and err.hint, (err.message, err.hint)
    assert "out of memory" not in err.message
    assert elapsed < 2.0, f"{elapsed:.2f} s"


@pytest.mark.slow  # tracemalloc slows the refused work tenfold: about 40 s for the list
@pytest.mark.parametrize("source", ONE_CALL, ids=ONE_CALL_IDS)
def test_one_call_is_refused_small(source: str) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(TemplateError):
            _render(source)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 200 * 2**20, f"peak {peak / 2**20:.0f} MiB"


# Loops: many cheap steps, each one fine; the time and memory budgets stop them.
LOOPS = [
    "{% set y %}{% for i in range(1000) %}{{ 'x' * 1000000 }}{% endfor %}{% endset %}{{ y|length }}",
    "{% set y %}{% for i in range(100000) %}{{ (i|string) * 10000 }}{% endfor %}{% endset %}",
    "{% set s = 'x' * 3000 %}{% set y %}{% for a in s %}{% for b in s %}{{ a ~ b }}"
    "{% endfor %}{% endfor %}{% endset %}{{ y|length }}",
    "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% else %}x{% endif %}{% endmacro %}{{ f(40) }}",
    "{% set s = 'x' * 100000 %}{% for a in s %}{% for b in s %}{{ b }}{% endfor %}{% endfor %}",
    # loop.length must not copy 40M characters into a list of 40M items
    "{% for c in 'x' * 40000000 %}{% if loop.last %}{{ loop.length }}{% endif %}{% endfor %}",
    # 8 MB lists, each fine, 1.2 GB together: the memory check counts what was built
    "".join(f"{{% set a{i} = [{i}] * 999999 %}}" for i in range(150)),
]


@pytest.mark.slow  # each runs its 1 s budget out
@pytest.mark.parametrize("source", LOOPS, ids=[s[:60] for s in LOOPS])
def test_loops_stop_within_the_budget(source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chat_sandbox, "MAX_SECONDS", 1.0)
    t0 = time.monotonic()
    with pytest.raises(TemplateError, match="stopped") as info:
        _render(source)
    assert time.monotonic() - t0 < 5.0 and info.value.hint


_CHILD = textwrap.dedent(
    """
    import json, resource, sys, time
    resource.setrlimit(resource.RLIMIT_AS, (1536 * 2**20, 1536 * 2**20))
    from dojo.chat import sandbox
    from dojo.chat.template import ChatTemplate, render
    from dojo.errors import TemplateError
    sandbox.MAX_SECONDS = 1.5
    out = []
    for src in json.load(sys.stdin):
        t0 = time.monotonic()
        try:
            render(ChatTemplate.from_source(src, name="evil"), [{"role": "user", "content": "hi"}])
            kind = "rendered"
        except TemplateError as e:
            kind = "out of memory" if "out of memory" in e.message else "refused"
        except MemoryError:
            kind = "MemoryError"
        out.append([kind, time.monotonic() - t0])
    print(json.dumps(out))
    """
)


@pytest.mark.slow  # every case again in a child process: about 20 s
def test_every_case_under_a_1_5_gib_address_space_limit() -> None:
    """In a child with RLIMIT_AS = 1.5 GiB: a MemoryError (or a kill) would mean an allocation
    ran before its bound was checked."""
    cases = ONE_CALL + LOOPS
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(proc.stdout)
    for src, (kind, elapsed) in zip(cases, results, strict=True):
        assert kind == "refused", (src, kind)
        assert elapsed < 6.0, (src, elapsed)


# ---- nothing changes for templates that stay within the limits -----------------------------

SAFE_EXPRS = [
    "'ab cd'|center(9)", "'a\\nb'|indent(2)", "'a\\nb'|indent('> ', first=true)",
    "'one two three'|wordwrap(5)", "'hello world'|truncate(8, end='~')",
    "'aXbX'|replace('X', 'yy')", "'aXbX'|replace('X', 'yy', 1)", "[1, 'a', none]|join('-')",
    "messages|tojson", "messages|tojson(indent=2)", "{'a': [1, {'b': 'é'}]}|tojson(indent='\\t')",
    "'%5s|%-4d|%.2f' % ('x', 3, 1.5)", "'%(a)s' % {'a': 1}", "'%s-%s'|format(1, 2)",
    "'{:>6}{:^5}{!r}'.format('a', 'b', 'c')", "'{a}'.format_map({'a': 3})", "'ab' * 3",
    "[1, 2] * 2", "2 ** 10", "'x'.ljust(4, '.')", "'x'.zfill(3)", "'a\\tb'.expandtabs(4)",
    "'-'.join(['a', 'b'])", "'abc'.translate({97: 'xy'})", "'a b  c'.split()",
    "'a\\nb'.splitlines()", "'ab'|list", "[3, 1, 2]|sort", "[1, 2, 3, 4]|batch(3, 0)|list",
    "[1, 2, 3]|slice(2)|list", "[[1], [2]]|sum(start=[])", "'a b'|title", "'a b c'|wordcount",
    "'<a>&'|e", "'é x'|urlencode", "{'a': [1, 2]}|pprint", "'x y'|upper ~ 'Q'|lower",
    "messages|map(attribute='role')|join(',')", "[messages[0], {'k': messages[1].content}]",
    "(1, 'a')", "{'r': messages[0].role}", "lipsum(1, false, 5, 10)|length > 0",
    "namespace(a=[1, 2]).a", "dict(a=1)", "range(3)|list", "'a' ~ 1 ~ none ~ [2]",
    "'ab'.encode('utf-8')", "(255).to_bytes(2, 'big')", "'%c' % 65", "'abc'|reverse",
]  # fmt: skip


def _reference_env() -> Any:
    """A plain transformers-style sandbox: what the output must equal."""
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = (
        lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(  # noqa: E501
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )
    )
    return env


REFERENCE = _reference_env()


@pytest.mark.parametrize("expr", SAFE_EXPRS)
def test_safe_expressions_render_exactly_as_plain_jinja(expr: str) -> None:
    source = "{{ " + expr + " }}"
    want = REFERENCE.from_string(source).render(messages=MSGS)
    if "lipsum" in expr:  # random text: compare the shape only
        assert _render(source) == want == "True"
        return
    assert _render(source) == want


@pytest.mark.slow  # hypothesis: seconds; `make test` runs it
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(SAFE_EXPRS), min_size=1, max_size=4), st.sampled_from(["~", "+"]))
def test_fuzz_combined_safe_expressions_match_plain_jinja(exprs: list[str], op: str) -> None:
    """Random chains of the safe expressions: the same text as a plain sandbox, or both fail."""
    exprs = [e for e in exprs if "lipsum" not in e]
    if not exprs:
        return
    source = "{{ " + f" {op} ".join(f"({e})" for e in exprs) + " }}"
    try:
        want: str | None = REFERENCE.from_string(source).render(messages=MSGS)
    except Exception:  # noqa: BLE001 - e.g. str + list: dojo must fail too, with a TemplateError
        want = None
    if want is None:
        with pytest.raises(TemplateError):
            _render(source)
    else:
        assert _render(source) == want


HUGE = st.sampled_from(["10**9", "2*10**9", "10**7", "-10**9", "10**18", "'x' * 10**7"])
CALLS = st.sampled_from(
    [
        "'x'|center({n})", "'a\\nb'|indent({n})", "'x'.ljust({n})", "'x'.zfill({n})",
        "'%*s' % ({n}, 'x')", "'{{:>{{}}}}'.format(1, {n})", "lipsum({n})", "range({n})|list",
        "[1]|batch({n})|list", "'\\t'.expandtabs({n})", "'x' * ({n})", "['x'] * ({n})",
        "messages|tojson(indent={n})", "'ab'|wordwrap({n})", "'x'|truncate({n}, end='y' * 9)",
        "(7).to_bytes({n}, 'big')", "[1]|slice({n})|list", "'%.*f' % ({n}, 1.0)",
    ]
)  # fmt: skip


@pytest.mark.slow  # hypothesis: seconds; `make test` runs it
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(CALLS, HUGE)
def test_fuzz_huge_arguments_are_refused_or_small(call: str, n: str) -> None:
    """Any of the sized calls with any huge size: a TemplateError with a hint, in under 2 s."""
    source = "{{ " + call.format(n=n) + " }}"
    t0 = time.process_time()
    try:
        out = _render(source)
    except DojoError as e:
        assert e.hint, e.message
    else:
        assert len(out) <= chat_sandbox.MAX_OUTPUT_CHARS
    assert time.process_time() - t0 < 2.0, source


# Each bounded filter refuses BEFORE it runs: the message names the filter's own bound.
S = "{% set s = 'x' * 20000000 %}"
PRECHECKED = {
    "center": "{{ 'x'|center(10**9) }}",
    "indent": "{{ 'a\\nb'|indent(10**9) }}",
    "wordwrap": S + "{{ s|wordwrap(5) }}",
    "truncate": S + "{{ s|truncate(1, end=s ~ s) }}",
    "replace": "{{ ('x' * 10**6)|replace('x', 'yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy') }}",
    "join": "{{ (['x' * 10**7] * 4)|join('y' * 10**7) }}",
    "tojson": "{{ messages|tojson(indent=10**9) }}",
    "pprint": "{{ ([[0] * 5000] * 2)|pprint }}",
    "format": "{{ '%*s'|format(10**9, 'x') }}",
    "title": S + "{{ s|title }}",
    "striptags": S + "{{ s|striptags }}",
    "urlize": S + "{{ s|urlize }}",
    "wordcount": S + "{{ s|wordcount }}",
    "e": "{% set t = '<' * 20000000 %}{{ t|e }}",
    "escape": "{% set t = '&' * 20000000 %}{{ t|escape }}",
    "forceescape": "{% set t = '>' * 20000000 %}{{ t|forceescape }}",
    "xmlattr": S + "{{ {'a': s}|xmlattr }}",
    "urlencode": S + "{{ s|urlencode }}",
    "upper": S + "{{ s|upper }}",
    "lower": S + "{{ s|lower }}",
    "capitalize": S + "{{ s|capitalize }}",
    "string": S + "{{ cycler(s, s, s).items|string }}",
    "trim": S + "{{ cycler(s, s, s).items|trim }}",
    "safe": S + "{{ cycler(s, s, s).items|safe }}",
    "batch": "{{ [1]|batch(10**6)|list }}",
    "slice": "{{ [1]|slice(10**6)|list }}",
    "list": "{{ ('x' * 10**7)|list }}",
    "sort": "{{ ('x' * 10**7)|sort }}",
    "unique": "{{ ('x' * 10**7)|unique|list }}",
    "groupby": "{{ ('x' * 10**7)|groupby('x') }}",
    "sum": "{{ ([[0] * 3000] * 3000)|sum(start=[]) }}",
}


def test_every_bounded_filter_has_a_case() -> None:
    from dojo.chat.guards import FILTER_BOUNDS

    assert set(PRECHECKED) == set(FILTER_BOUNDS)


@pytest.mark.parametrize("name", sorted(PRECHECKED))
def test_bounded_filter_refuses_before_running(name: str) -> None:
    t0 = time.process_time()
    with pytest.raises(TemplateError, match="stopped") as info:
        _render(PRECHECKED[name])
    msg = info.value.message
    assert (
        f"|{name}" in msg
        or f"{name}'s" in msg
        or "a list of a string" in msg
        or (name == "sum" and "summing lists" in msg)
    ), msg
    assert time.process_time() - t0 < 2.0
