"""The Jinja environment chat templates run in: transformers' sandbox, plus a render budget.

Copied from transformers 5.x ``_cached_compile_jinja_template``: ``ImmutableSandboxedEnvironment(
trim_blocks=True, lstrip_blocks=True)`` with ``jinja2.ext.loopcontrols``, globals
``raise_exception``, ``strftime_now``, a limited ``dict`` and an underscore-refusing ``namespace``,
and a ``tojson`` filter that keeps key order and non-ASCII (Jinja's own escapes HTML).
``{% generation %}`` blocks render their body (transformers uses them only for assistant masks).

Hardening on top (a chat template is code from the internet): an unsafe attribute raises at once
instead of becoming a silent undefined, and each render has a budget: range() items, output
characters, the size of strings built with + / * / namespace, and wall time. jinja2 is imported
inside functions only, so importing this module stays cheap.
"""

import contextvars
import json
import time
from collections.abc import Mapping
from datetime import datetime
from functools import lru_cache
from typing import Any

from dojo.errors import TemplateError

MAX_RANGE_ITEMS = 1_000_000
"""range() items one render may iterate, summed over all range() calls (nested loops multiply)."""
MAX_OUTPUT_CHARS = 50_000_000
"""Rendered characters (~12M tokens): far above any real conversation, far below memory limits."""
MAX_STRING_CHARS = 50_000_000
"""Largest string a template may build with +, *, ~ into a namespace."""
MAX_SECONDS = 30.0
"""Wall time of one render; real templates take milliseconds even on long conversations."""


class _Budget:
    def __init__(self) -> None:
        self.deadline = time.monotonic() + MAX_SECONDS
        self.range_left = MAX_RANGE_ITEMS

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise _Runaway(f"render took longer than {MAX_SECONDS:g} s")


class _Runaway(Exception):
    """A template exceeded its render budget (a loop that does not end, output that explodes)."""


_TICK_FILTER = "dojo_budget"  # the filter _parse wraps around every for-loop's iterable
_BUDGET: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar(
    "dojo_chat_budget", default=None
)


def _budget() -> _Budget:
    b = _BUDGET.get()
    if b is None:  # rendering outside render_source (e.g. a test calling the template directly)
        b = _Budget()
        _BUDGET.set(b)
    return b


class _CappedRange:
    """``range`` as the Jinja sandbox allows it (<= 100000 items), counting iterated items."""

    def __init__(self, rng: range) -> None:
        self._rng = rng

    def _count(self, items: Any) -> Any:
        b = _budget()
        for i, x in enumerate(items):
            if i % 1024 == 0:
                b.tick()
            b.range_left -= 1
            if b.range_left < 0:
                raise _Runaway(f"range() iterated more than {MAX_RANGE_ITEMS} items")
            yield x

    def __iter__(self) -> Any:
        return self._count(self._rng)

    def __reversed__(self) -> Any:
        return self._count(reversed(self._rng))

    def __len__(self) -> int:
        return len(self._rng)

    def __getitem__(self, i: Any) -> Any:
        r = self._rng[i]
        return _CappedRange(r) if isinstance(r, range) else r

    def __contains__(self, x: Any) -> bool:
        return x in self._rng

    def __repr__(self) -> str:
        return repr(self._rng)


def _ticking(items: Any) -> Any:
    """Yield ``items`` unchanged, checking the wall-time budget every 256 of them."""
    b = _budget()
    for i, x in enumerate(items):
        if i % 256 == 0:
            b.tick()
        yield x


def _check_size(value: Any) -> Any:
    if isinstance(value, (str, list, tuple)) and len(value) > MAX_STRING_CHARS:
        raise _Runaway(f"template built a value of {len(value)} items (limit {MAX_STRING_CHARS})")
    return value


@lru_cache(maxsize=1)
def _environment() -> Any:
    import jinja2
    import jinja2.ext
    import jinja2.nodes
    from jinja2.exceptions import SecurityError
    from jinja2.sandbox import ImmutableSandboxedEnvironment, safe_range
    from jinja2.utils import Namespace

    class GenerationPassthrough(jinja2.ext.Extension):
        # transformers' AssistantTracker tag: the body renders unchanged.
        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(
                lineno
            )

        def _body(self, caller: Any) -> str:
            return str(caller())

    class Env(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"+", "*", "**"})

        def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
            raise SecurityError(
                f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe"
            )

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            _budget().tick()
            if operator == "**" and isinstance(right, int) and right > 1000:
                raise _Runaway(f"exponent {right} is too large")
            if operator == "*":
                for a, b in ((left, right), (right, left)):
                    sized = isinstance(a, (str, list, tuple)) and isinstance(b, int)
                    if sized and len(a) * b > MAX_STRING_CHARS:
                        raise _Runaway("template built a value beyond the size limit")
            return _check_size(super().call_binop(context, operator, left, right))

        def _parse(self, source: str, name: str | None, filename: str | None) -> Any:
            # Every {% for %} iterates through _ticking: nested loops over plain strings or lists
            # call nothing the budget sees, so without this they run for hours (issue 7).
            tree = super()._parse(source, name, filename)
            for node in tree.find_all(jinja2.nodes.For):
                node.iter = jinja2.nodes.Filter(
                    node.iter, _TICK_FILTER, [], [], None, None, lineno=node.iter.lineno
                )
            return tree

        def getattr(self, obj: Any, attribute: str) -> Any:
            _budget().tick()
            return super().getattr(obj, attribute)

        def getitem(self, obj: Any, argument: Any) -> Any:
            _budget().tick()
            return super().getitem(obj, argument)

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
            _budget().tick()
            return super().call(__context, __obj, *args, **kwargs)

    def raise_exception(message: Any) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        x: Any,
        ensure_ascii: bool = False,
        indent: Any = None,
        separators: Any = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    def strftime_now(format: str) -> str:  # noqa: A002 - transformers' signature
        return datetime.now().strftime(format)

    def capped_range(*args: int) -> _CappedRange:
        return _CappedRange(safe_range(*args))

    class TemplateDict:
        def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            return dict(*args, **kwargs)

        def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            return dict.fromkeys(*args, **kwargs)

    class TemplateNamespace(Namespace):
        def __init__(*args: Any, **kwargs: Any) -> None:
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                TemplateNamespace._check_name(name)
            Namespace.__init__(self, attrs)

        def __setitem__(self, name: str, value: Any) -> None:
            TemplateNamespace._check_name(name)
            _budget().tick()
            Namespace.__setitem__(self, name, _check_size(value))

        @staticmethod
        def _check_name(name: Any) -> None:
            if isinstance(name, str) and name.startswith("_"):
                raise SecurityError(
                    "Chat templates cannot store underscore-prefixed attributes on a namespace, "
                    f"but got {name!r}. Please rename the attribute."
                )

    env = Env(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[GenerationPassthrough, jinja2.ext.loopcontrols],
    )
    env.filters["tojson"] = tojson
    # pass_context keeps Jinja from folding a constant loop (`for x in [1, 2]`) at compile time.
    env.filters[_TICK_FILTER] = jinja2.pass_context(lambda _ctx, items: _ticking(items))
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = TemplateDict()
    env.globals["namespace"] = TemplateNamespace
    env.globals["range"] = capped_range
    return env


@lru_cache(maxsize=64)
def _compile(source: str) -> Any:
    return _environment().from_string(source)


def compile_template(source: str, name: str) -> Any:
    """The compiled template, or a TemplateError naming the file and line that does not parse."""
    import jinja2

    if not isinstance(source, str):
        raise TemplateError(f"template {name!r} is {type(source).__name__}, not text")
    try:
        return _compile(source)
    except jinja2.TemplateSyntaxError as e:
        raise TemplateError(
            f"template {name!r} does not parse: line {e.lineno}: {e.message}",
            hint="fix the Jinja syntax at that line",
        ) from e


def render_source(source: str, name: str, **context: Any) -> str:
    """Render under the budget; every failure becomes a TemplateError naming the template."""
    import jinja2

    compiled = compile_template(source, name)
    token = _BUDGET.set(_Budget())
    try:
        parts: list[str] = []
        size = 0
        for chunk in compiled.generate(**context):
            size += len(chunk)
            if size > MAX_OUTPUT_CHARS:
                raise _Runaway(f"output grew past {MAX_OUTPUT_CHARS} characters")
            parts.append(chunk)
        return "".join(parts)
    except jinja2.exceptions.SecurityError as e:
        raise TemplateError(
            f"template {name!r} was refused by the sandbox: {e}",
            hint="a chat template may not reach Python internals; use another template",
        ) from e
    except jinja2.exceptions.TemplateError as e:
        # raise_exception(...) and undefined values; the template's own words come through.
        raise TemplateError(f"template {name!r}: {e}") from e
    except _Runaway as e:
        raise TemplateError(
            f"template {name!r} stopped: {e}", hint="the template loops or grows without end"
        ) from e
    except RecursionError as e:
        raise TemplateError(f"template {name!r} stopped: recursion too deep") from e
    except (
        TypeError,
        ValueError,
        KeyError,
        IndexError,
        AttributeError,
        OverflowError,
        ZeroDivisionError,
    ) as e:
        raise TemplateError(f"template {name!r} failed: {type(e).__name__}: {e}") from e
    finally:
        _BUDGET.reset(token)


def plain(value: Any) -> Any:
    """transformers' ``_plain_template_data``: only JSON types reach the template."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    return f"<{type(value).__name__}>"
