"""Pre-checks for Jinja's filters and the str/bytes/int methods a template may call.

``filter_precheck(name, args)`` and ``method_precheck(obj, args, kwargs)`` raise ``Runaway`` when
the call would build more than the limits in ``dojo.chat.limits`` allow, or do work quadratic in
its input; otherwise they return None and the original filter or method runs unchanged, so the
rendering stays byte-identical to transformers'. Bounds are from the arguments only.
"""

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from dojo.chat.limits import (
    MAX_ITEMS,
    MAX_QUADRATIC_STEPS,
    MAX_SCAN_CHARS,
    MAX_STRING_CHARS,
    Runaway,
    refuse,
    str_cost,
    weight,
)

Known = Mapping[int, int]


def _int(x: Any) -> int:
    """An int argument as Python would take it (bool is an int); other types: 0 (the call
    itself then raises TypeError, which is the template's own error, not a blow-up)."""
    return int(x) if isinstance(x, int) else 0


def _text_len(x: Any, known: Known) -> int:
    return len(x) if isinstance(x, str) else weight(x, known)


def _as_text(x: Any) -> str:
    return x if isinstance(x, str) else ""


def counted(items: Iterable[Any], what: str) -> Iterator[Any]:
    """Iterate ``items``, refusing past MAX_ITEMS (a lazy iterable a filter would materialise)."""
    for i, x in enumerate(items):
        if i >= MAX_ITEMS:
            raise Runaway(f"{what} iterated more than {MAX_ITEMS} items")
        yield x


def collect(items: Iterable[Any], what: str, sep: int, k: Known) -> list[Any]:
    """A lazy iterable about to be joined, as a list, refused as soon as the joined text would
    pass MAX_STRING_CHARS (its items are built one by one: a bound up front cannot see them)."""
    out, total = [], 0
    for x in counted(items, what):
        total += (len(x) if isinstance(x, str) else weight(x, k)) + sep
        if total > MAX_STRING_CHARS:
            raise Runaway(f"{what} would join more than {MAX_STRING_CHARS} characters")
        out.append(x)
    return out


def lazy(x: Any) -> bool:
    """An iterator/generator: its length is unknown until it is consumed."""
    return not isinstance(x, (str, bytes, list, tuple, dict, Mapping)) and hasattr(x, "__next__")


# ---- filters -------------------------------------------------------------------------------


def _center(a: dict[str, Any], k: Known) -> float:
    return max(_text_len(a["value"], k), _int(a.get("width")))


def _indent(a: dict[str, Any], k: Known) -> float:
    s, width = a["s"], a.get("width")
    w = len(width) if isinstance(width, str) else _int(width)
    lines = _as_text(s).count("\n") + 2 if isinstance(s, str) else weight(s, k)
    return _text_len(s, k) + lines * max(w, 0)


def _wordwrap(a: dict[str, Any], k: Known) -> float:
    n = _text_len(a["s"], k)
    refuse("wordwrap's input", n, MAX_SCAN_CHARS)
    wrap = a.get("wrapstring")
    return n * (1 + (len(wrap) if isinstance(wrap, str) else 2)) + 2


def _truncate(a: dict[str, Any], k: Known) -> float:
    end = a.get("end")
    return _text_len(a["s"], k) + (len(end) if isinstance(end, str) else weight(end, k))


def _replace(a: dict[str, Any], k: Known) -> float:
    return replace_bound(a["s"], a.get("old"), a.get("new"), a.get("count"), k)


def replace_bound(s: Any, old: Any, new: Any, count: Any, k: Known) -> float:
    text = s if isinstance(s, str) else None
    n = len(text) if text is not None else weight(s, k)
    old_s = old if isinstance(old, str) else str(old) if isinstance(old, (int, float)) else ""
    grow = (len(new) if isinstance(new, str) else weight(new, k)) - len(old_s)
    if grow <= 0:
        return n
    hits = (text.count(old_s) if text is not None and old_s else n + 1) if old_s else n + 1
    if isinstance(count, int) and count >= 0:
        hits = min(hits, count)
    return n + hits * grow


def _join(a: dict[str, Any], k: Known) -> float:
    value, sep = a["value"], a.get("d")
    return join_bound(value, sep if isinstance(sep, str) else str(sep), k)


def join_bound(value: Any, sep: str, k: Known) -> float:
    if isinstance(value, str):
        refuse("joining the characters of a string", len(value), MAX_ITEMS)
        return len(value) * (1 + len(sep))
    if isinstance(value, Mapping):
        value = list(value)
    if not isinstance(value, (list, tuple)):
        return 0  # lazy: the caller materialised it with ``counted`` already, or it is not iterable
    total = max(len(value) - 1, 0) * len(sep)
    for item in value:
        total += len(item) if isinstance(item, str) else weight(item, k)
        if total > MAX_STRING_CHARS:
            break
    return total


def _tojson(a: dict[str, Any], k: Known) -> float:
    indent, seps = a.get("indent"), a.get("separators")
    ind = len(indent) if isinstance(indent, str) else max(_int(indent), 0)
    sep = 2
    if isinstance(seps, (list, tuple)):
        sep = sum(len(s) for s in seps if isinstance(s, str))
    ascii_ = bool(a.get("ensure_ascii"))
    return json_bound(a["x"], ind, indent is not None, sep, ascii_, k)


def json_bound(x: Any, ind: int, newlines: bool, sep: int, ascii_: bool, k: Known) -> float:
    """Upper bound on len(json.dumps(x, indent=..., separators=...)); depth-aware for indent."""
    memo: dict[tuple[int, int], float] = {}

    def walk(v: Any, depth: int) -> float:
        if isinstance(v, str):
            return 12 * len(v) + 2 if ascii_ and not v.isascii() else str_cost(v)
        if isinstance(v, (list, tuple, Mapping)):
            key = (id(v), depth)
            if key not in memo:
                pairs = v.items() if isinstance(v, Mapping) else ((None, i) for i in v)
                line = (1 + ind * (depth + 1)) if newlines else 0
                total = 2.0 + (1 + ind * depth if newlines else 0)
                for kk, vv in pairs:
                    total += line + sep + walk(vv, depth + 1)
                    total += 0 if kk is None else walk(kk, depth + 1) + sep
                    if total > MAX_STRING_CHARS:
                        break
                memo[key] = total
            return memo[key]
        return weight(v, k)

    if not ascii_ and not newlines:  # weight counts ", " and ": " already; cached for inputs
        return weight(x, k) * (1 if sep == 2 else 1 + sep)
    return walk(x, 0)


def _pprint(a: dict[str, Any], k: Known) -> float:
    w = weight(a["value"], k)
    # pprint indents nested values by up to the width of the keys before them: lines x width.
    return 2 * w + 4 if isinstance(a["value"], (str, int, float)) else w * w


def _format(a: dict[str, Any], k: Known) -> float:
    from dojo.chat.limits import printf_bound

    value = a["value"]
    fmt = value if isinstance(value, str) else str(value)[:MAX_STRING_CHARS]
    kwargs, args = a.get("kwargs") or {}, a.get("args") or ()
    return printf_bound(fmt, kwargs or tuple(args), k)


def _scan(name: str) -> Callable[[dict[str, Any], Known], float]:
    """Regex/split based filters: linear output, but list-of-pieces memory and slow regexes."""

    def bound(a: dict[str, Any], k: Known) -> float:
        value = next(iter(a.values()))
        n = _text_len(value, k)
        refuse(f"{name}'s input", n, MAX_SCAN_CHARS)
        if name == "urlize":
            extra = sum(len(a[x]) for x in ("target", "rel") if isinstance(a.get(x), str))
            return n * 3 + (n // 2 + 1) * (80 + extra)
        return 3 * n + 2

    return bound


def _escape(a: dict[str, Any], k: Known) -> float:
    v = next(iter(a.values()))
    if isinstance(v, str):
        return len(v) + 4 * sum(v.count(c) for c in "&<>\"'")
    return 6 * weight(v, k)


def _times(n: int) -> Callable[[dict[str, Any], Known], float]:
    return lambda a, k: n * _text_len(next(iter(a.values())), k) + 16


MAX_SLICES = 100_000
"""|slice(n) makes n lists even for 3 items, |batch(n, fill) pads to n: real templates use 2-10."""


def _batch(a: dict[str, Any], k: Known) -> float:
    refuse("batch's line count", _int(a.get("linecount")), MAX_SLICES)
    return _items(a, k)


def _slice(a: dict[str, Any], k: Known) -> float:
    refuse("slice's number of slices", _int(a.get("slices")), MAX_SLICES)
    return _items(a, k)


def _items(a: dict[str, Any], k: Known) -> float:
    value = next(iter(a.values()))
    if isinstance(value, str):
        refuse("a list of a string's characters", len(value), MAX_ITEMS)
    return 0


def _sum(a: dict[str, Any], k: Known) -> float:
    # sum() of lists copies the growing result once per item: quadratic in a single C call.
    value, start = a["iterable"], a.get("start")
    if isinstance(value, (list, tuple)) and any(isinstance(v, (list, tuple)) for v in value):
        total = sum(len(v) for v in value if isinstance(v, (list, tuple)))
        refuse("summing lists (copies)", len(value) * total, MAX_QUADRATIC_STEPS)
        refuse("a list", total + (len(start) if isinstance(start, list) else 0), MAX_ITEMS)
    return 0


FILTER_BOUNDS: dict[str, Callable[[dict[str, Any], Known], float]] = {
    "center": _center,
    "indent": _indent,
    "wordwrap": _wordwrap,
    "truncate": _truncate,
    "replace": _replace,
    "join": _join,
    "tojson": _tojson,
    "pprint": _pprint,
    "format": _format,
    "title": _scan("title"),
    "striptags": _scan("striptags"),
    "urlize": _scan("urlize"),
    "wordcount": _scan("wordcount"),
    "e": _escape,
    "escape": _escape,
    "forceescape": _escape,
    "xmlattr": _times(6),
    "urlencode": _times(12),
    "string": _times(1),
    "trim": _times(1),
    "safe": _times(1),
    "upper": _times(3),
    "lower": _times(3),
    "capitalize": _times(3),
    "batch": _batch,
    "slice": _slice,
    "list": _items,
    "sort": _items,
    "unique": _items,
    "groupby": _items,
    "sum": _sum,
}
"""Filter name -> upper bound on the size of its result (it raises Runaway for a refused input)."""
ITERATING = frozenset(
    [
        "list",
        "sort",
        "unique",
        "groupby",
        "batch",
        "slice",
        "join",
        "sum",
        "min",
        "max",
        "first",
        "last",
        "reverse",
        "random",
        "map",
        "select",
        "reject",
        "selectattr",
        "rejectattr",
        "dictsort",
        "items",
        "length",
        "count",
    ]
)
"""Filters that consume an iterable: a lazy one is counted while they do."""


def filter_precheck(name: str, bound_args: dict[str, Any], known: Known) -> None:
    fn = FILTER_BOUNDS.get(name)
    if fn is not None:
        refuse(f"the result of |{name}", fn(bound_args, known), MAX_STRING_CHARS)


# ---- methods on str / bytes / int ----------------------------------------------------------

_SPLIT_SEPS = ("\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")


def _arg(args: tuple[Any, ...], kwargs: Mapping[str, Any], i: int, name: str) -> Any:
    return args[i] if len(args) > i else kwargs.get(name)


def method_precheck(obj: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any], k: Known) -> None:
    """Refuse a str/bytes/int method call whose result would be over the limits."""
    owner, name = getattr(obj, "__self__", None), getattr(obj, "__name__", "")
    if isinstance(owner, int) and name == "to_bytes":
        refuse("int.to_bytes' length", _int(_arg(args, kwargs, 0, "length")), MAX_STRING_CHARS)
        return
    if not isinstance(owner, (str, bytes, bytearray)):
        return
    n, what = len(owner), f"the result of .{name}()"
    if name in ("ljust", "rjust", "center", "zfill"):
        refuse(what, max(n, _int(_arg(args, kwargs, 0, "width"))), MAX_STRING_CHARS)
    elif name == "expandtabs":
        tab = _arg(args, kwargs, 0, "tabsize")
        size = 8 if tab is None else max(_int(tab), 0)
        tabs = owner.count("\t") if isinstance(owner, str) else owner.count(b"\t")
        refuse(what, n + tabs * size, MAX_STRING_CHARS)
    elif name == "replace":
        count = _arg(args, kwargs, 2, "count")
        refuse(what, _bytes_safe_replace(owner, args, count, k), MAX_STRING_CHARS)
    elif name == "join" and args and isinstance(args[0], (str, list, tuple, Mapping)):
        refuse(
            what,
            join_bound(args[0], str(owner) if isinstance(owner, str) else "", k) + n,
            MAX_STRING_CHARS,
        )
    elif name == "translate":
        table = _arg(args, kwargs, 0, "table")
        vals = (
            table.values()
            if isinstance(table, Mapping)
            else table
            if isinstance(table, (list, tuple))
            else ()
        )
        longest = max((len(v) if isinstance(v, (str, bytes)) else 1 for v in vals), default=1)
        refuse(what, n * max(longest, 1), MAX_STRING_CHARS)
    elif name in ("encode", "hex", "upper", "lower", "title", "casefold", "swapcase", "capitalize"):
        refuse(what, 10 * n + 16 if name == "encode" else 3 * n + 8, MAX_STRING_CHARS)
    elif name in ("split", "rsplit", "splitlines"):
        refuse(f"the pieces of .{name}()", _pieces(owner, name, args, kwargs), MAX_ITEMS)


def _bytes_safe_replace(owner: Any, args: tuple[Any, ...], count: Any, k: Known) -> float:
    if isinstance(owner, str):
        return replace_bound(
            owner, args[0] if args else "", args[1] if len(args) > 1 else "", count, k
        )
    new = args[1] if len(args) > 1 else b""
    hits = (
        owner.count(args[0]) if args and isinstance(args[0], bytes) and args[0] else len(owner) + 1
    )
    return len(owner) + hits * len(new) if isinstance(new, (bytes, bytearray)) else len(owner)


def _pieces(owner: Any, name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> float:
    n = len(owner)
    if n < MAX_ITEMS:
        return n
    if name == "splitlines":
        return sum(owner.count(s) for s in _SPLIT_SEPS) + 1 if isinstance(owner, str) else n
    sep = _arg(args, kwargs, 0, "sep")
    maxsplit = _arg(args, kwargs, 1, "maxsplit")
    pieces = owner.count(sep) + 1 if isinstance(sep, (str, bytes)) and sep else n
    if isinstance(maxsplit, int) and maxsplit >= 0:
        pieces = min(pieces, maxsplit + 1)
    return pieces


WORD_RE = re.compile(r"\w+")


def wordcount(s: Any) -> int:
    """Jinja's |wordcount without the list of every word (findall) that it builds first."""
    from markupsafe import soft_str

    return sum(1 for _ in WORD_RE.finditer(soft_str(s)))
