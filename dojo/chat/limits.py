"""Size bounds the chat-template sandbox checks BEFORE an operation allocates.

Jinja checks nothing inside one filter or method call, so ``'x'|center(2*10**9)`` or
``lipsum(n=10**8)`` allocate gigabytes (or run for minutes) between two budget checks. Every
string-producing filter, global and method therefore gets an upper bound on the size of what it
would build, computed from its arguments in O(input) without building it; over the limit, it
raises ``Runaway`` instead of running. ``weight`` bounds what ``str()``/``repr()``/``tojson`` of a
value can produce, so values that share structure (``[[x] * 1000] * 1000``) are counted expanded.

Bounds over-approximate, so a refusal can only hit values near the limits, which no real chat
template comes close to (real renders are kilobytes to megabytes).
"""

import contextlib
import re
from collections.abc import Iterator, Mapping
from typing import Any

MAX_STRING_CHARS = 50_000_000
"""Largest value (string, or the text of a list/dict) a template may build."""
MAX_ITEMS = 1_000_000
"""Longest list a template may build, or split a string into (each item costs ~50-100 bytes)."""
MAX_DEPTH = 200
"""Deepest nesting of lists/dicts a template may build (str() and tojson recurse on it)."""
MAX_INT_BITS = 100_000
"""Largest integer a template may build (~30,000 digits; str() refuses past 4,300 anyway)."""
MAX_SCAN_CHARS = 1_000_000
"""Longest string for the regex/textwrap based filters (wordwrap, title, urlize, striptags)."""
MAX_QUADRATIC_STEPS = 50_000_000
"""Element copies allowed in an operation quadratic in its input (sum of lists, striptags)."""


class Runaway(Exception):
    """A template exceeded its render budget (a loop that does not end, output that explodes)."""


def refuse(what: str, size: float, limit: int) -> None:
    if size > limit:
        raise Runaway(f"{what} would be {_human(size)} (limit {_human(limit)})")


def _human(n: float) -> str:
    return f"{n:.3g}" if n >= 1e7 else str(int(n))


# ---- weight: an upper bound on len(str(x)) -----------------------------------------------


def str_cost(s: str) -> int:
    """Upper bound on len(repr(s)) and len(json.dumps(s, ensure_ascii=False))."""
    n = len(s)
    if n < 4096 or (s.isascii() and s.isprintable()):
        if n < 4096:
            return 10 * n + 2
        return n + s.count("\\") + s.count('"') + s.count("'") + 2
    # Escaped as \n, \t, \r (2 chars); anything else not printable as up to \U0010ffff (10).
    ws = s.count("\n") + s.count("\r") + s.count("\t")
    rest = s.translate(_WS_DEL)
    other = 0 if rest.isprintable() else len(rest)
    return n + ws + 9 * other + s.count("\\") + s.count('"') + s.count("'") + 2


_WS_DEL = {ord("\n"): None, ord("\r"): None, ord("\t"): None}


def weight(x: Any, known: Mapping[int, int] | None = None) -> int:
    """Upper bound on len(str(x)); ``known`` maps id() of containers already weighed."""
    if isinstance(x, str):
        return len(x)
    return _inner(x, {} if known is None else known, {}, 0)


def _inner(x: Any, known: Mapping[int, int], memo: dict[int, int], depth: int) -> int:
    if isinstance(x, str):
        return str_cost(x)
    if x is None or isinstance(x, bool):
        return 5
    if isinstance(x, int):
        return x.bit_length() * 31 // 100 + 3
    if isinstance(x, float):
        return 25
    if isinstance(x, (bytes, bytearray)):
        return 4 * len(x) + 14
    items = _children(x)
    if items is None:
        return 64  # loop, macro, cycler, undefined, range...: short reprs
    key = id(x)
    if key in known:
        return known[key]
    if key in memo:
        return memo[key]
    if depth > MAX_DEPTH:
        raise Runaway(f"a value nested deeper than {MAX_DEPTH} levels")
    total = 16
    for item in items:
        total += _inner(item, known, memo, depth + 1) + 2
        if total > MAX_STRING_CHARS:  # no need to count further: it is refused
            break
    memo[key] = total
    return total


def _children(x: Any) -> Iterator[Any] | None:
    if isinstance(x, (list, tuple)):
        if len(x) > MAX_ITEMS:
            raise Runaway(f"a list of {len(x)} items (limit {MAX_ITEMS})")
        return iter(x)
    if isinstance(x, Mapping) or type(x).__name__ in ("dict_items", "dict_keys", "dict_values"):
        if len(x) > MAX_ITEMS:
            raise Runaway(f"a mapping of {len(x)} items (limit {MAX_ITEMS})")
        return _flatten(x.items()) if isinstance(x, Mapping) else iter(x)
    if type(x).__name__ in ("Namespace", "TemplateNamespace"):  # jinja2.utils.Namespace
        return iter([object.__getattribute__(x, "_Namespace__attrs")])
    return None


def _flatten(pairs: Any) -> Iterator[Any]:
    for k, v in pairs:
        yield k
        yield v


def repr_bound(x: Any, known: Mapping[int, int] | None = None) -> int:
    """Upper bound on len(repr(x)) (strings count their escapes)."""
    return _inner(x, {} if known is None else known, {}, 0)


def index_inputs(*values: Any) -> dict[int, int]:
    """Weigh the render's inputs once, so each use of ``messages`` costs a dict lookup."""
    memo: dict[int, int] = {}
    for v in values:
        # too deep or too long to index: weighed (and refused) where it is used
        with contextlib.suppress(Runaway):
            _inner(v, {}, memo, 0)
    return memo


def check_value(value: Any, known: Mapping[int, int] | None = None) -> Any:
    """``value`` unchanged, or Runaway when it is larger than a template may build."""
    if isinstance(value, str):
        refuse("a string", len(value), MAX_STRING_CHARS)
    elif isinstance(value, int) and not isinstance(value, bool):
        refuse("an integer's bit length", value.bit_length(), MAX_INT_BITS)
    elif _children(value) is not None:
        refuse("a value's text", weight(value, known), MAX_STRING_CHARS)
    return value


# ---- printf-style % and str.format ---------------------------------------------------------

_PRINTF = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d*))?[hlL]?(.?)", re.S)
_DIGITS = re.compile(r"\d+")


def digit_sum(text: str) -> float:
    """Sum of every number written in ``text``: bounds all widths/precisions it can hold."""
    total = 0.0
    for d in _DIGITS.findall(text):
        total += float("inf") if len(d) > 15 else int(d)
    return total


def printf_bound(fmt: str, args: Any, known: Mapping[int, int]) -> float:
    """Upper bound on len(fmt % args)."""
    n_conv = fmt.count("%")
    bound = len(fmt) + digit_sum(fmt) + 8 * n_conv
    if isinstance(args, Mapping) and not isinstance(args, tuple):
        return bound + n_conv * (_inner(args, known, {}, 0) + 8)
    values = args if isinstance(args, tuple) else (args,)
    if "*" in fmt:  # widths and precisions taken from the arguments
        bound += sum(abs(v) for v in values if isinstance(v, int))
    return bound + sum(_inner(v, known, {}, 0) for v in values)


def format_field_bound(value: Any, spec: str, known: Mapping[int, int]) -> float:
    """Upper bound on len(format(value, spec)) (a str.format replacement field)."""
    return weight(value, known) + digit_sum(spec) + len(spec) + 8
