"""The chat-template renderer (dojo.chat.template) under hypothesis: any JSON as messages and
tools, through every bundled template, and random template text, give a string or a DojoError."""

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dojo.chat.template import ChatTemplate, bundled_names, load_template, render
from dojo.errors import DataError, DojoError, TemplateError
from tests.helpers.fuzz import FAST, conversations, json_values, message

pytestmark = pytest.mark.slow  # hypothesis: seconds a property; `make test` runs them

TEMPLATES = {name: load_template(name) for name in bundled_names()}


@FAST
@given(
    st.sampled_from(sorted(TEMPLATES)),
    conversations,
    st.booleans(),
    st.one_of(st.none(), st.lists(json_values, max_size=2)),
)
def test_bundled_templates_never_crash(
    name: str, msgs: Any, add_generation_prompt: bool, tools: Any
) -> None:
    """Any JSON as messages/tools: a rendered string or a DojoError, nothing else."""
    try:
        out = render(
            TEMPLATES[name], msgs, add_generation_prompt=add_generation_prompt, tools=tools
        )
    except DojoError as e:
        assert e.message and "Traceback" not in e.message
        return
    assert isinstance(out, str)


JINJA_BITS = st.sampled_from(
    [
        "{{ ", " }}", "{% ", " %}", "{# ", " #}", "for m in messages", "endfor", "if ", "endif",
        "else", "m.content", "m['role']", "messages[0]", "|length", "|tojson", "|trim", "|upper",
        "raise_exception('no')", "loop.index", "namespace(x=1)", "set ", " = ", "(", ")", "[", "]",
        "'", '"', "~", " + ", " * ", "range(", "10", "-1", "1.5", "none", "true", "macro f()",
        "endmacro", "f()", "recursive", "loop(messages)", "__class__", ".", ",", "\n",
        "add_generation_prompt", "bos_token", "tools", "strftime_now('%Y')", "dict(a=1)",
        "| selectattr('role', 'equalto', 'user') | list", "|first", "|last", "|join(',')",
    ]
)  # fmt: skip
sources = st.one_of(
    st.lists(JINJA_BITS, max_size=25).map("".join),
    st.text(max_size=80),
)


@FAST
@given(sources, st.lists(message, min_size=1, max_size=3))
def test_any_template_source_fails_only_with_dojo_errors(source: str, msgs: Any) -> None:
    """Random template text (mostly broken Jinja): compile + render give str or a DojoError."""
    try:
        out = render(
            ChatTemplate.from_source(source, name="fuzz"), msgs, add_generation_prompt=True
        )
    except TemplateError as e:
        assert "'fuzz'" in e.message  # names the template
        return
    except DataError:  # a message that is not an object
        return
    assert isinstance(out, str)
