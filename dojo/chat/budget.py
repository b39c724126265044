"""One render's budget: wall time, range() items, memory growth, and the checks Jinja's hooks call.

``render_source`` (dojo.chat.sandbox) starts a ``Budget`` per render in a context variable; the
environment's hooks (getattr, call, binops, filters, loops) tick it. Sizes are bounded with
dojo.chat.limits and dojo.chat.guards before anything is built.
"""

import contextvars
import functools
import inspect
import time
from typing import Any

from dojo.chat import guards, limits
from dojo.chat.limits import Runaway as _Runaway
from dojo.chat.limits import check_value

MAX_RANGE_ITEMS = 1_000_000
"""range() items one render may iterate, summed over all range() calls (nested loops multiply)."""
MAX_MEMORY_GROWTH = 512 * 2**20
"""Resident memory one render may add (a loop appending to a {% set %} block, checked often)."""


class InputWeights(dict[int, int]):
    """id -> weight of the render's input containers, computed on first use: most renders
    never weigh a container, and the ones that do then look ``messages`` up in O(1)."""

    def __init__(self, *inputs: Any) -> None:
        super().__init__()
        self._inputs: tuple[Any, ...] | None = inputs

    def _index(self) -> None:
        if self._inputs is not None:
            inputs, self._inputs = self._inputs, None
            self.update(limits.index_inputs(*inputs))

    def __contains__(self, key: object) -> bool:
        self._index()
        return super().__contains__(key)

    def __getitem__(self, key: int) -> int:
        self._index()
        return super().__getitem__(key)


class Budget:
    def __init__(self, *inputs: Any, seconds: float = 30.0, output_chars: int = 50_000_000) -> None:
        self.seconds, self.output_chars = seconds, output_chars
        self.deadline = time.monotonic() + seconds
        self.range_left = MAX_RANGE_ITEMS
        self.known = InputWeights(*inputs)
        self.ticks = 0
        self.built = 0
        self.rss0 = _rss()

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise _Runaway(f"render took longer than {self.seconds:g} s")
        self.ticks += 1
        if self.ticks % 2048 == 0:
            self.check_memory()

    def grew(self, value: Any) -> Any:
        """Count the size of a value just built; every 8M characters, look at memory too
        (one tick can build a megabyte: ticks alone would let a loop build gigabytes)."""
        if isinstance(value, (str, list, tuple, dict)):
            # a list costs 8 bytes an item, plus its items: count it as 8 characters an item
            self.built += len(value) if isinstance(value, str) else 8 * len(value)
            if self.built > 8_000_000:
                self.built = 0
                self.check_memory()
        return value

    def check_memory(self) -> None:
        if self.rss0 and _rss() - self.rss0 > MAX_MEMORY_GROWTH:
            raise _Runaway(f"render used more than {MAX_MEMORY_GROWTH >> 20} MiB of memory")


def _rss() -> int:
    """Resident bytes of this process (0 where /proc is missing: the check is then off)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * 4096
    except (OSError, ValueError, IndexError):
        return 0


BUDGET: contextvars.ContextVar[Budget | None] = contextvars.ContextVar(
    "dojo_chat_budget", default=None
)


def current() -> Budget:
    b = BUDGET.get()
    if b is None:  # rendering outside render_source (e.g. a test calling the template directly)
        b = Budget()
        BUDGET.set(b)
    return b


class CappedRange:
    """``range`` as the Jinja sandbox allows it (<= 100000 items), counting iterated items."""

    def __init__(self, rng: range) -> None:
        self._rng = rng

    def _count(self, items: Any) -> Any:
        b = current()
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
        return CappedRange(r) if isinstance(r, range) else r

    def __contains__(self, x: Any) -> bool:
        return x in self._rng

    def __repr__(self) -> str:
        return repr(self._rng)


class Ticking:
    """A for-loop's iterable, checking the budget every 256 items. Keeps ``len``: Jinja's
    ``loop.length``/``loop.last`` would otherwise copy the rest of the items into a list."""

    def __init__(self, items: Any) -> None:
        self._items = items

    def __iter__(self) -> Any:
        b = current()
        for i, x in enumerate(self._items):
            if i % 256 == 0:
                b.tick()
            yield x

    def __len__(self) -> int:
        return len(self._items)


def ticking(items: Any) -> Any:
    """``items`` wrapped in Ticking (with a length only when ``items`` has one)."""
    if hasattr(items, "__len__"):
        return Ticking(items)
    return iter(Ticking(items))


def check_size(value: Any) -> Any:
    return check_value(value, current().known)


def concat_parts(parts: Any) -> str:
    """``a ~ b ~ c`` (Jinja's str_join), refusing before the joined string exists."""
    out, total, known = [], 0, current().known
    for p in parts:
        if not isinstance(p, str):  # str() of a container shares nothing: bound it first
            limits.refuse("a part of ~", total + limits.weight(p, known), limits.MAX_STRING_CHARS)
        s = str(p)
        total += len(s)
        if total > limits.MAX_STRING_CHARS:
            raise _Runaway(f"template built a value of more than {limits.MAX_STRING_CHARS} chars")
        out.append(s)
    return str(current().grew("".join(out)))


def finalize(value: Any) -> Any:
    """Every ``{{ value }}``: bounded before str() expands it (a tuple a cycler kept, say).
    Also runs on constants at compile time, where no render (and no budget) exists yet."""
    if isinstance(value, str):
        return value
    b = BUDGET.get()
    return check_value(value, b.known if b is not None else {})


def concat_buffer(buf: Any) -> str:
    """Jinja's ``concat`` for captured output ({% set %} blocks, macros, filter blocks)."""
    buf, cap = list(buf), current().output_chars
    if sum(len(s) for s in buf) > cap:
        raise _Runaway(f"a captured block grew past {cap} characters")
    return str(current().grew("".join(buf)))


def guard_filter(name: str, func: Any) -> Any:
    """``func`` with its result bounded before it runs (guards.FILTER_BOUNDS) and after."""
    pass_arg = getattr(func, "jinja_pass_arg", None)
    first = 0 if pass_arg is None else 1
    try:
        sig: inspect.Signature | None = inspect.signature(func)
    except (TypeError, ValueError):
        sig = None
    materialise = name in ("join", "sum")
    # Jinja's async-capable filters (list, slice, map...) take the eval context but show the
    # signature of their sync function, which lacks it: bind without it then.
    params = list(sig.parameters) if sig is not None else []
    skip = (
        first
        if first and params[:1] not in (["eval_ctx"], ["environment"], ["env"], ["context"])
        else 0
    )

    @functools.wraps(func)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        b = current()
        b.tick()
        if name in guards.ITERATING and len(args) > first and guards.lazy(args[first]):
            value: Any = guards.counted(args[first], f"|{name}")
            if name == "join":
                sep = args[first + 1] if len(args) > first + 1 else kwargs.get("d", "")
                value = guards.collect(args[first], "|join", len(str(sep)), b.known)
            elif materialise:
                value = list(value)
            args = (*args[:first], value, *args[first + 1 :])
        if sig is not None and name in guards.FILTER_BOUNDS:
            try:
                bound = sig.bind(*args[skip:], **kwargs)
            except TypeError:
                bound = None  # the filter raises its own, clearer, TypeError
            if bound is not None:
                bound.apply_defaults()
                named = dict(list(bound.arguments.items())[first - skip :])
                guards.filter_precheck(name, named, b.known)
        return b.grew(check_value(func(*args, **kwargs), b.known))

    return guarded


def binop_precheck(operator: str, left: Any, right: Any, known: dict[int, int]) -> None:
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
                limits.refuse(
                    "a repeated value's text", limits.weight(a, known) * n, limits.MAX_STRING_CHARS
                )
        if isinstance(left, int) and isinstance(right, int):
            bits = left.bit_length() + right.bit_length()
            limits.refuse("an integer's bit length", bits, limits.MAX_INT_BITS)
    elif operator == "+" and isinstance(left, seq) and isinstance(right, seq):
        limits.refuse(
            "a joined value's text",
            limits.weight(left, known) + limits.weight(right, known),
            limits.MAX_STRING_CHARS,
        )
    elif operator == "%" and isinstance(left, (str, bytes)):
        fmt = left if isinstance(left, str) else left.decode("latin-1")
        limits.refuse(
            "the result of %", limits.printf_bound(fmt, right, known), limits.MAX_STRING_CHARS
        )
