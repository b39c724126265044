"""The Jinja environment chat templates run in: transformers' sandbox, plus a render budget.

Copied from transformers 5.x ``_cached_compile_jinja_template``: ``ImmutableSandboxedEnvironment(
trim_blocks=True, lstrip_blocks=True)`` with ``jinja2.ext.loopcontrols``, globals
``raise_exception``, ``strftime_now``, a limited ``dict`` and an underscore-refusing ``namespace``,
and a ``tojson`` filter that keeps key order and non-ASCII (Jinja's own escapes HTML).
``{% generation %}`` blocks render their body (transformers uses them only for assistant masks).

Hardening on top (a chat template is code from the internet): an unsafe attribute raises at once
instead of becoming a silent undefined, and each render has a budget: range() items, wall time,
memory growth, and the size of every value built. Jinja runs a filter or a method call without
looking at the clock, so each filter, global and str/bytes method is bounded BEFORE it runs
(dojo.chat.guards); literals, ``~`` and captured blocks are checked as they are built. jinja2 is
imported inside functions only, so importing this module stays cheap.
"""

import functools
import json
from collections.abc import Mapping
from datetime import datetime
from functools import lru_cache
from typing import Any

from dojo.chat import budget as _budget
from dojo.chat import guards, limits
from dojo.chat.budget import MAX_MEMORY_GROWTH, MAX_RANGE_ITEMS  # noqa: F401 - the budget's knobs
from dojo.chat.failures import explain
from dojo.chat.limits import Runaway as _Runaway
from dojo.chat.limits import check_value
from dojo.errors import TemplateError

MAX_OUTPUT_CHARS = 50_000_000
"""Rendered characters (~12M tokens): far above any real conversation, far below memory limits."""
MAX_STRING_CHARS = limits.MAX_STRING_CHARS
"""Largest string a template may build with +, *, ~ into a namespace."""
MAX_SECONDS = 30.0
"""Wall time of one render; real templates take milliseconds even on long conversations."""
MAX_LIPSUM_WORDS = 1_000_000

_TICK_FILTER = "dojo_budget"  # wraps every for-loop's iterable
_SIZE_FILTER = "dojo_size"  # wraps list/tuple/dict literals that are not constants
_CONCAT_FILTER = "dojo_concat"  # replaces `a ~ b ~ c`


@lru_cache(maxsize=1)
def _environment() -> Any:
    import jinja2
    import jinja2.ext
    import jinja2.nodes
    from jinja2.exceptions import SecurityError
    from jinja2.sandbox import (
        MAX_RANGE,
        ImmutableSandboxedEnvironment,
        SandboxedEscapeFormatter,
        SandboxedFormatter,
        safe_range,
    )
    from jinja2.utils import Namespace, generate_lorem_ipsum
    from jinja2.visitor import NodeTransformer
    from markupsafe import Markup

    from dojo.chat.failures import raised_class

    Raised = raised_class()

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

    def wrap(node: Any, filter_name: str) -> Any:
        return jinja2.nodes.Filter(node, filter_name, [], [], None, None, lineno=node.lineno)

    def literal(node: Any) -> bool:
        if isinstance(node, jinja2.nodes.Const):
            return True
        if isinstance(node, (jinja2.nodes.List, jinja2.nodes.Tuple)):
            return all(literal(n) for n in node.items)
        if isinstance(node, jinja2.nodes.Dict):
            return all(literal(p.key) and literal(p.value) for p in node.items)
        return False

    class Guard(NodeTransformer):
        # Every {% for %} iterates through _budget.ticking: nested loops over plain strings or lists
        # call nothing the budget sees, so without this they run for hours.
        def visit_For(self, node: Any) -> Any:
            self.generic_visit(node)
            node.iter = wrap(node.iter, _TICK_FILTER)
            return node

        # [x, x, x] and {'a': x} build values Jinja never looks at: [[big] * 9] * 9 * 9...
        def visit_List(self, node: Any) -> Any:
            return self._container(node)

        def visit_Tuple(self, node: Any) -> Any:
            return self._container(node)

        def visit_Dict(self, node: Any) -> Any:
            return self._container(node)

        def _container(self, node: Any) -> Any:
            self.generic_visit(node)
            if getattr(node, "ctx", "load") != "load" or literal(node):
                return node
            return wrap(node, _SIZE_FILTER)

        def visit_Concat(self, node: Any) -> Any:
            self.generic_visit(node)
            return wrap(jinja2.nodes.List(node.nodes, lineno=node.lineno), _CONCAT_FILTER)

    class CappedFormatter(SandboxedFormatter):
        # str.format: each replacement field is bounded before format() builds it.
        total = 0.0

        def format_field(self, value: Any, format_spec: str) -> Any:
            self.total += limits.format_field_bound(value, format_spec, _budget.current().known)
            limits.refuse("the result of .format()", self.total, limits.MAX_STRING_CHARS)
            return super().format_field(value, format_spec)

        def convert_field(self, value: Any, conversion: Any) -> Any:
            if conversion in ("r", "a"):  # repr() runs before format_field sees the value
                bound = limits.repr_bound(value, _budget.current().known)
                limits.refuse("the result of .format()", self.total + bound, MAX_STRING_CHARS)
            return super().convert_field(value, conversion)

    class CappedEscapeFormatter(CappedFormatter, SandboxedEscapeFormatter):
        pass

    class Env(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"+", "*", "**", "%"})
        concat = staticmethod(_budget.concat_buffer)

        def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
            raise SecurityError(
                f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe"
            )

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            b = _budget.current()
            b.tick()
            if operator == "+" and type(left) is str and type(right) is str:  # the common case
                if len(left) + len(right) > limits.MAX_STRING_CHARS:
                    raise _Runaway("template built a value beyond the size limit")
                return b.grew(left + right)
            _budget.binop_precheck(operator, left, right, b.known)
            return b.grew(check_value(super().call_binop(context, operator, left, right), b.known))

        def _parse(self, source: str, name: str | None, filename: str | None) -> Any:
            return Guard().visit(super()._parse(source, name, filename))

        def getattr(self, obj: Any, attribute: str) -> Any:
            _budget.current().tick()
            return super().getattr(obj, attribute)

        def getitem(self, obj: Any, argument: Any) -> Any:
            _budget.current().tick()
            return super().getitem(obj, argument)

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
            b = _budget.current()
            b.tick()
            if getattr(__obj, "__name__", "") == "join" and args and guards.lazy(args[0]):
                sep = getattr(__obj, "__self__", "")
                sep_len = len(sep) if isinstance(sep, (str, bytes)) else 0
                args = (guards.collect(args[0], ".join()", sep_len, b.known), *args[1:])
            guards.method_precheck(__obj, args, kwargs, b.known)
            return b.grew(check_value(super().call(__context, __obj, *args, **kwargs), b.known))

        def wrap_str_format(self, value: Any) -> Any:
            # jinja's own, with a formatter that bounds each field before formatting it.
            if getattr(value, "__name__", "") not in ("format", "format_map"):
                return None
            f_self = getattr(value, "__self__", None)
            if not isinstance(f_self, str) or not callable(value):
                return None
            str_type, is_map = type(f_self), value.__name__ == "format_map"

            def wrapper(*args: Any, **kwargs: Any) -> str:
                if is_map:
                    if kwargs or len(args) != 1:
                        raise TypeError("format_map() takes exactly one argument")
                    kwargs, args = args[0], ()
                fmt: Any = (
                    CappedEscapeFormatter(self, escape=f_self.escape)
                    if isinstance(f_self, Markup)
                    else CappedFormatter(self)
                )
                return str_type(fmt.vformat(f_self, args, kwargs))

            return functools.update_wrapper(wrapper, value)

    def raise_exception(message: Any) -> None:
        raise Raised(message)

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
        if isinstance(format, str):  # %c is 24 characters from 2: 64x bounds every directive
            limits.refuse("strftime_now's result", 64 * len(format), limits.MAX_STRING_CHARS)
        return datetime.now().strftime(format)

    def lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:  # noqa: A002
        words = (n if isinstance(n, int) else 0) * (max if isinstance(max, int) else 0)
        limits.refuse("lipsum's words", words, MAX_LIPSUM_WORDS)
        return str(generate_lorem_ipsum(n=n, html=html, min=min, max=max))

    def capped_range(*args: int) -> _budget.CappedRange:
        rng = range(*args)  # O(1): its length is known before any item exists
        try:
            n = len(rng)
        except OverflowError:  # more items than a C ssize_t holds
            n = MAX_RANGE + 1
        if n > MAX_RANGE:
            raise _Runaway(f"Range too big: range() of {n} items (limit {MAX_RANGE})")
        return _budget.CappedRange(safe_range(*args))

    class TemplateDict:
        def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            return dict(*args, **kwargs)

        def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            if args and guards.lazy(args[0]):
                args = (list(guards.counted(args[0], "dict.fromkeys")), *args[1:])
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
            _budget.current().tick()
            Namespace.__setitem__(self, name, _budget.check_size(value))

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
        finalize=_budget.finalize,
    )
    env.filters["tojson"] = tojson
    env.filters["wordcount"] = guards.wordcount  # same count, without a list of every word
    for fname, func in list(env.filters.items()):
        env.filters[fname] = _budget.guard_filter(fname, func)
    # pass_context keeps Jinja from folding these at compile time (`for x in [1, 2]`).
    env.filters[_TICK_FILTER] = jinja2.pass_context(lambda _ctx, items: _budget.ticking(items))
    env.filters[_SIZE_FILTER] = jinja2.pass_context(lambda _ctx, v: _budget.check_size(v))
    env.filters[_CONCAT_FILTER] = jinja2.pass_context(
        lambda _ctx, parts: _budget.concat_parts(parts)
    )
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = TemplateDict()
    env.globals["namespace"] = TemplateNamespace
    env.globals["range"] = capped_range
    env.globals["lipsum"] = lipsum
    return env


@lru_cache(maxsize=64)
def _compile(source: str) -> Any:
    return _environment().from_string(source)


def compile_template(source: str, name: str, subject: str | None = None) -> Any:
    """The compiled template, or a TemplateError naming the file and line that does not parse.

    ``subject`` is how the message names the template (e.g. ``--template 'x.jinja':``, the flag
    the user gave it with); by default ``template 'NAME'``.
    """
    import jinja2

    subject = subject if subject is not None else f"template {name!r}"
    if not isinstance(source, str):
        raise TemplateError(f"{subject} is {type(source).__name__}, not text")
    try:
        return _compile(source)
    except jinja2.TemplateSyntaxError as e:
        raise TemplateError(
            f"{subject} does not parse: line {e.lineno}: {e.message}",
            hint="fix the Jinja syntax at that line",
        ) from e
    except (RecursionError, MemoryError, ValueError, OverflowError) as e:
        # a 5,000-digit number literal, or brackets nested thousands deep
        raise TemplateError(
            f"{subject} does not parse: {type(e).__name__}: {e}",
            hint="the template is not a usable chat template; check the file is the right one",
        ) from e


def render_source(source: str, name: str, **context: Any) -> str:
    """Render under the budget; every failure becomes a TemplateError with a hint."""
    compiled = compile_template(source, name)
    messages = context.get("messages")
    token = _budget.BUDGET.set(
        _budget.Budget(*context.values(), seconds=MAX_SECONDS, output_chars=MAX_OUTPUT_CHARS)
    )
    try:
        parts: list[str] = []
        size = 0
        for chunk in compiled.generate(**context):
            size += len(chunk)
            if size > MAX_OUTPUT_CHARS:
                raise _Runaway(f"output grew past {MAX_OUTPUT_CHARS} characters")
            parts.append(chunk)
        return "".join(parts)
    except TemplateError:
        raise
    except Exception as e:  # noqa: BLE001 - the template's code raised it: say where and why
        raise explain(e, name, source, messages) from e
    finally:
        _budget.BUDGET.reset(token)


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
