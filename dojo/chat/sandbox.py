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

import contextvars
import functools
import inspect
import json
import time
from collections.abc import Mapping
from datetime import datetime
from functools import lru_cache
from typing import Any

from dojo.chat import guards, limits
from dojo.chat.failures import explain
from dojo.chat.limits import Runaway as _Runaway
from dojo.chat.limits import check_value
from dojo.errors import TemplateError

MAX_RANGE_ITEMS = 1_000_000
"""range() items one render may iterate, summed over all range() calls (nested loops multiply)."""
MAX_OUTPUT_CHARS = 50_000_000
"""Rendered characters (~12M tokens): far above any real conversation, far below memory limits."""
MAX_STRING_CHARS = limits.MAX_STRING_CHARS
"""Largest string a template may build with +, *, ~ into a namespace."""
MAX_SECONDS = 30.0
"""Wall time of one render; real templates take milliseconds even on long conversations."""
MAX_MEMORY_GROWTH = 512 * 2**20
"""Resident memory one render may add (a loop appending to a {% set %} block, checked often)."""
MAX_LIPSUM_WORDS = 1_000_000


class _Budget:
    def __init__(self, known: dict[int, int] | None = None) -> None:
        self.deadline = time.monotonic() + MAX_SECONDS
        self.range_left = MAX_RANGE_ITEMS
        self.known = known or {}
        self.ticks = 0
        self.rss0 = _rss()

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise _Runaway(f"render took longer than {MAX_SECONDS:g} s")
        self.ticks += 1
        if self.ticks % 2048 == 0 and self.rss0 and _rss() - self.rss0 > MAX_MEMORY_GROWTH:
            raise _Runaway(f"render used more than {MAX_MEMORY_GROWTH >> 20} MiB of memory")


def _rss() -> int:
    """Resident bytes of this process (0 where /proc is missing: the check is then off)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * 4096
    except (OSError, ValueError, IndexError):
        return 0


_TICK_FILTER = "dojo_budget"  # wraps every for-loop's iterable
_SIZE_FILTER = "dojo_size"  # wraps list/tuple/dict literals that are not constants
_CONCAT_FILTER = "dojo_concat"  # replaces `a ~ b ~ c`
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
    """Yield ``items`` unchanged, checking the budget every 256 of them."""
    b = _budget()
    for i, x in enumerate(items):
        if i % 256 == 0:
            b.tick()
        yield x


def _check_size(value: Any) -> Any:
    return check_value(value, _budget().known)


def _concat_parts(parts: Any) -> str:
    """``a ~ b ~ c`` (Jinja's str_join), refusing before the joined string exists."""
    out, total = [], 0
    for p in parts:
        s = str(p)
        total += len(s)
        if total > limits.MAX_STRING_CHARS:
            raise _Runaway(f"template built a value of more than {limits.MAX_STRING_CHARS} chars")
        out.append(s)
    return "".join(out)


def _concat_buffer(buf: Any) -> str:
    """Jinja's ``concat`` for captured output ({% set %} blocks, macros, filter blocks)."""
    buf = list(buf)
    if sum(len(s) for s in buf) > MAX_OUTPUT_CHARS:
        raise _Runaway(f"a captured block grew past {MAX_OUTPUT_CHARS} characters")
    return "".join(buf)


def _guard_filter(name: str, func: Any) -> Any:
    """``func`` with its result bounded before it runs (guards.FILTER_BOUNDS) and after."""
    pass_arg = getattr(func, "jinja_pass_arg", None)
    first = 0 if pass_arg is None else 1
    try:
        sig: inspect.Signature | None = inspect.signature(func)
    except (TypeError, ValueError):
        sig = None
    materialise = name in ("join", "sum")

    @functools.wraps(func)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        b = _budget()
        b.tick()
        if name in guards.ITERATING and len(args) > first and guards.lazy(args[first]):
            items = guards.counted(args[first], f"|{name}")
            value = list(items) if materialise else items
            args = (*args[:first], value, *args[first + 1 :])
        if sig is not None and name in guards.FILTER_BOUNDS:
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError:
                bound = None  # the filter raises its own, clearer, TypeError
            if bound is not None:
                bound.apply_defaults()
                named = dict(list(bound.arguments.items())[first:])
                guards.filter_precheck(name, named, b.known)
        return check_value(func(*args, **kwargs), b.known)

    return guarded


@lru_cache(maxsize=1)
def _environment() -> Any:
    import jinja2
    import jinja2.ext
    import jinja2.nodes
    from jinja2.exceptions import SecurityError
    from jinja2.sandbox import (
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

    class Guard(NodeTransformer):  # type: ignore[misc]
        # Every {% for %} iterates through _ticking: nested loops over plain strings or lists
        # call nothing the budget sees, so without this they run for hours (issue 7).
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

    class CappedFormatter(SandboxedFormatter):  # type: ignore[misc]
        # str.format: each replacement field is bounded before format() builds it.
        total = 0

        def format_field(self, value: Any, format_spec: str) -> Any:
            self.total += limits.format_field_bound(value, format_spec, _budget().known)
            limits.refuse("the result of .format()", self.total, limits.MAX_STRING_CHARS)
            return super().format_field(value, format_spec)

    class CappedEscapeFormatter(CappedFormatter, SandboxedEscapeFormatter):  # type: ignore[misc]
        pass

    class Env(ImmutableSandboxedEnvironment):  # type: ignore[misc]
        intercepted_binops = frozenset({"+", "*", "**", "%"})
        concat = staticmethod(_concat_buffer)

        def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
            raise SecurityError(
                f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe"
            )

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            b = _budget()
            b.tick()
            _binop_precheck(operator, left, right, b.known)
            return check_value(super().call_binop(context, operator, left, right), b.known)

        def _parse(self, source: str, name: str | None, filename: str | None) -> Any:
            return Guard().visit(super()._parse(source, name, filename))

        def getattr(self, obj: Any, attribute: str) -> Any:
            _budget().tick()
            return super().getattr(obj, attribute)

        def getitem(self, obj: Any, argument: Any) -> Any:
            _budget().tick()
            return super().getitem(obj, argument)

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
            b = _budget()
            b.tick()
            if getattr(__obj, "__name__", "") == "join" and args and guards.lazy(args[0]):
                args = (list(guards.counted(args[0], ".join()")), *args[1:])
            guards.method_precheck(__obj, args, kwargs, b.known)
            return check_value(super().call(__context, __obj, *args, **kwargs), b.known)

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

    def capped_range(*args: int) -> _CappedRange:
        return _CappedRange(safe_range(*args))

    class TemplateDict:
        def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            return dict(*args, **kwargs)

        def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            if args and guards.lazy(args[0]):
                args = (list(guards.counted(args[0], "dict.fromkeys")), *args[1:])
            return dict.fromkeys(*args, **kwargs)

    class TemplateNamespace(Namespace):  # type: ignore[misc]
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
    env.filters["wordcount"] = guards.wordcount  # same count, without a list of every word
    for fname, func in list(env.filters.items()):
        env.filters[fname] = _guard_filter(fname, func)
    # pass_context keeps Jinja from folding these at compile time (`for x in [1, 2]`).
    env.filters[_TICK_FILTER] = jinja2.pass_context(lambda _ctx, items: _ticking(items))
    env.filters[_SIZE_FILTER] = jinja2.pass_context(lambda _ctx, v: _check_size(v))
    env.filters[_CONCAT_FILTER] = jinja2.pass_context(lambda _ctx, parts: _concat_parts(parts))
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = TemplateDict()
    env.globals["namespace"] = TemplateNamespace
    env.globals["range"] = capped_range
    env.globals["lipsum"] = lipsum
    return env


def _binop_precheck(operator: str, left: Any, right: Any, known: dict[int, int]) -> None:
    """Refuse ``left <op> right`` when its result would be over the limits, before computing it."""
    seq = (str, bytes, list, tuple)
    if operator == "**" and isinstance(right, int) and isinstance(left, int):
        if right > 1000:
            raise _Runaway(f"exponent {right} is too large")
        limits.refuse("an integer's bit length", left.bit_length() * right, limits.MAX_INT_BITS)
    elif operator == "*":
        for a, n in ((left, right), (right, left)):
            if isinstance(a, seq) and isinstance(n, int) and n > 0:
                if len(a) * n > limits.MAX_STRING_CHARS or (
                    not isinstance(a, (str, bytes)) and len(a) * n > limits.MAX_ITEMS
                ):
                    raise _Runaway("template built a value beyond the size limit")
                limits.refuse("a repeated value's text", limits.weight(a, known) * n, MAX_STRING_CHARS)
        if isinstance(left, int) and isinstance(right, int):
            bits = left.bit_length() + right.bit_length()
            limits.refuse("an integer's bit length", bits, limits.MAX_INT_BITS)
    elif operator == "+" and isinstance(left, seq) and isinstance(right, seq):
        limits.refuse(
            "a joined value's text",
            limits.weight(left, known) + limits.weight(right, known),
            MAX_STRING_CHARS,
        )
    elif operator == "%" and isinstance(left, (str, bytes)):
        fmt = left if isinstance(left, str) else left.decode("latin-1")
        limits.refuse("the result of %", limits.printf_bound(fmt, right, known), MAX_STRING_CHARS)


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
    except (RecursionError, MemoryError, ValueError, OverflowError) as e:
        # a 5,000-digit number literal, or brackets nested thousands deep
        raise TemplateError(
            f"template {name!r} does not parse: {type(e).__name__}: {e}",
            hint="the template is not a usable chat template; check the file is the right one",
        ) from e


def render_source(source: str, name: str, **context: Any) -> str:
    """Render under the budget; every failure becomes a TemplateError with a hint."""
    compiled = compile_template(source, name)
    messages = context.get("messages")
    token = _BUDGET.set(_Budget())
    try:
        _budget().known.update(limits.index_inputs(*context.values()))
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
