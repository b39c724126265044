"""JSON and YAML from users' files, with limits: hostile input gives one clear error, never a hang.

``json``/``yaml`` alone accept what later breaks us: 5,000 nested brackets (RecursionError),
a 420-byte YAML "billion laughs" (10^9 nodes once anything walks it), duplicate keys (the last one
silently wins), NaN and ``1e400`` (inf) as sizes, Latin-1 bytes (UnicodeDecodeError), a FIFO given
as a file (open() blocks forever). Here each of those is a :class:`LoadError` naming the file.

    load_json(Path("ds.json"), what="--check 'ds.json'")
    load_json(line, what="--data rows.jsonl:3")        # one JSON-lines line is just text
    load_yaml(Path("run.yaml"), what="--config 'run.yaml'")
"""

import math
import os
import stat
from pathlib import Path
from typing import Any

from dojo.errors import DojoError

MAX_DEPTH = 64
"""Nesting (objects/arrays/mappings/sequences) allowed; real configs and chat rows use < 10."""
MAX_YAML_NODES = 10_000
"""Nodes a YAML document may expand to with its aliases counted each time they are used."""
MAX_YAML_ALIAS_CHARS = 1_000_000
"""Scalar characters a YAML document may expand to through aliases (1 MB of text)."""
SHOWN = 60
"""Longest value echoed back in a message: a 1 MB key must not become a 1 MB error line."""

Source = str | bytes | Path


class LoadError(DojoError):
    """A file or text that is not acceptable JSON/YAML. ``reason`` is a short tag for callers
    (syntax, duplicate, depth, nonfinite, aliases, encoding, file); line/column are 1-based."""

    def __init__(
        self,
        message: str,
        hint: str | None = None,
        *,
        reason: str,
        detail: str = "",
        line: int = 0,
        column: int = 0,
    ) -> None:
        super().__init__(message, hint)
        self.reason = reason
        self.detail = detail
        self.line = line
        self.column = column


def shorten(value: object, limit: int = SHOWN) -> str:
    """repr() of a value, cut to ``limit`` characters with an ellipsis. An integer past
    Python's int-string limit (4,300 digits), where repr() raises, is described instead."""
    try:
        return clip(repr(value), limit)
    except ValueError:
        return clip(_described(value), limit)


def _described(value: object) -> str:
    if isinstance(value, int):  # log10(2) digits per bit: the string itself is what fails
        return f"<an integer of about {int(abs(value).bit_length() * 0.30103) + 1:,} digits>"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(shorten(v) for v in value[:8]) + "]"
    if isinstance(value, dict):
        return (
            "{" + ", ".join(f"{shorten(k)}: {shorten(v)}" for k, v in list(value.items())[:8]) + "}"
        )
    return f"<{type(value).__name__}>"


def clip(text: str, limit: int = SHOWN) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------- reading files


def read_text(path: Path, *, what: str, max_bytes: int | None = None) -> str:
    """UTF-8 text of a regular file. stat() comes before open(): a FIFO, a device, a folder or a
    symlink loop is named as such instead of blocking or reading forever."""
    hint = "give the path of a regular text file"
    try:
        st = path.stat()
    except FileNotFoundError:
        raise LoadError(f"{what}: no such file", hint, reason="file") from None
    except OSError as e:  # ELOOP, EACCES, ENAMETOOLONG...
        raise LoadError(f"{what}: cannot read it ({e.strerror})", hint, reason="file") from None
    from dojo._io import file_kind  # _io imports this module (shorten)

    kind = file_kind(st.st_mode)
    if kind is not None:
        raise LoadError(f"{what}: is {kind}, not a regular file", hint, reason="file")
    if max_bytes is not None and st.st_size > max_bytes:
        raise LoadError(
            f"{what}: is {st.st_size:,} bytes; more than {max_bytes:,} is not a real one",
            hint,
            reason="file",
        )
    try:
        # O_NONBLOCK: if the path was swapped for a FIFO after stat(), open() still returns.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise LoadError(f"{what}: is not a regular file", hint, reason="file")
            data = f.read() if max_bytes is None else f.read(max_bytes + 1)
    except OSError as e:
        raise LoadError(f"{what}: cannot read it ({e.strerror})", hint, reason="file") from None
    return decode(data, what=what)


_BOMS = (
    (b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16"),
)  # fmt: skip


def wide_encoding(data: bytes) -> str | None:
    """ "UTF-16" or "UTF-32" for text saved so (Windows editors, PowerShell's ``>``), by its
    byte-order mark or, without one, by the NUL byte beside each ASCII character; else None.
    Such a file holds NUL bytes, so without this check it would be called binary."""
    for bom, name in _BOMS:
        if data.startswith(bom):
            return name
    sample = data[:4096]
    quarter = len(sample) // 4
    if quarter < 2:
        return None
    # ASCII text: every other byte (UTF-16) or three bytes in four (UTF-32) are NUL.
    zeros = [sample[k::4].count(0) for k in range(4)]
    full = [z >= 0.9 * quarter for z in zeros]
    if sum(full) == 3 and (not full[0] or not full[3]):
        return "UTF-32"
    if (full[0] and full[2] and not full[1] and not full[3]) or (
        full[1] and full[3] and not full[0] and not full[2]
    ):
        return "UTF-16"
    return None


def wide_hint(name: str) -> str:
    return f"save it as UTF-8, e.g. iconv -f {name.lower()} -t utf-8 IN > OUT"


def decode(data: bytes, *, what: str) -> str:
    """UTF-8 (a leading BOM is dropped); anything else names the first bad byte, and UTF-16
    or UTF-32 text is named as such."""
    wide = wide_encoding(data)
    try:
        if wide is None:
            return data.decode("utf-8-sig")
        data.decode("utf-8")  # no BOM: valid UTF-8 as far as bytes go, only its NULs tell
        raise LoadError(
            f"{what} is {wide} text, not UTF-8", hint=wide_hint(wide), reason="encoding", line=1
        )
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        kind = f"; it is {wide}" if wide else ""
        raise LoadError(
            f"{what} is not UTF-8 text (byte 0x{data[e.start]:02x} on line {line}{kind})",
            hint=wide_hint(wide)
            if wide
            else "save it as UTF-8, e.g. iconv -f latin1 -t utf-8 IN > OUT",
            reason="encoding",
            line=line,
        ) from None


def _text(source: Source, what: str, max_bytes: int | None) -> str:
    if isinstance(source, Path):
        return read_text(source, what=what, max_bytes=max_bytes)
    if isinstance(source, bytes):
        if max_bytes is not None and len(source) > max_bytes:
            raise LoadError(
                f"{what}: more than {max_bytes:,} bytes", "is it the right file?", reason="file"
            )
        return decode(source, what=what)
    return source


# ---------------------------------------------------------------- JSON


def nesting_exceeds(value: Any, max_depth: int) -> bool:
    """True when parsed JSON/YAML ``value`` nests lists/dicts deeper than ``max_depth``.
    Iterative (no recursion to blow up) and proportional to the number of containers, not to
    the text: a 12 MB chat file with 60k objects takes ~30 ms."""
    if not isinstance(value, (dict, list)):  # a row that is null, a number, a string
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > max_depth:
            return True
        kids = node.values() if isinstance(node, dict) else node
        stack.extend((k, depth + 1) for k in kids if isinstance(k, (dict, list)))
    return False


def load_json(
    source: Source,
    *,
    what: str,
    finite: bool = True,
    max_depth: int = MAX_DEPTH,
    max_bytes: int | None = None,
) -> Any:
    """Parse one JSON document (a str is the text itself, a Path a file to read)."""
    text = _text(source, what, max_bytes)
    import json

    bad: list[_Bad] = []  # non-finite literals seen, in order; each learns its key if it has one

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                raise _Duplicate(key)
            if isinstance(value, _Bad) and not value.key:
                value.key = key
            out[key] = value
        return out

    def number(s: str) -> float:
        value = float(s)
        if finite and not math.isfinite(value):
            bad.append(_Bad(value, s))
            return bad[-1]
        return value

    def constant(s: str) -> float:
        if finite:
            bad.append(_Bad(float(s), s))
            return bad[-1]
        return float(s)

    try:
        data = json.loads(
            text, object_pairs_hook=pairs, parse_float=number, parse_constant=constant
        )
    except json.JSONDecodeError as e:
        raise LoadError(
            f"{what} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}",
            hint="fix the JSON syntax (a trailing comma or a missing quote?)",
            reason="syntax",
            detail=e.msg,
            line=e.lineno,
            column=e.colno,
        ) from None
    except _Duplicate as e:
        raise LoadError(
            f"{what} has the key {shorten(e.args[0])} twice in one object",
            hint="keep one; JSON readers silently use the last and drop the other",
            reason="duplicate",
        ) from None
    except RecursionError:
        raise _too_deep(what, max_depth) from None
    except ValueError as e:  # an integer literal of more than 4300 digits
        raise LoadError(
            f"{what} holds a number that is too long ({clip(str(e))})",
            hint="numbers in a config are at most a few digits long",
            reason="number",
        ) from None
    if bad:
        key = f" (key {shorten(bad[0].key)})" if bad[0].key else ""
        raise _nonfinite(what, bad[0].literal, key)
    if isinstance(data, (dict, list)) and nesting_exceeds(data, max_depth):
        raise _too_deep(what, max_depth)
    return data


class _Duplicate(Exception):
    pass


class _Bad(float):
    """Stands in for a non-finite number until parsing ends, to name its key in the error."""

    def __new__(cls, value: float, literal: str) -> "_Bad":
        return super().__new__(cls, value)

    def __init__(self, value: float, literal: str) -> None:
        self.literal = literal
        self.key = ""


def _nonfinite(what: str, literal: str, key: str = "") -> LoadError:
    return LoadError(
        f"{what} holds the non-finite number {shorten(literal)}{key}",
        hint="use a finite number; NaN, Infinity and values past 1.8e308 are not sizes",
        reason="nonfinite",
    )


def _too_deep(what: str, max_depth: int) -> LoadError:
    return LoadError(
        f"{what} nests deeper than {max_depth} levels",
        hint="real configs nest a few levels; this looks generated or hostile",
        reason="depth",
    )


# ---------------------------------------------------------------- YAML


def load_yaml(
    source: Source,
    *,
    what: str,
    finite: bool = True,
    max_depth: int = MAX_DEPTH,
    max_nodes: int = MAX_YAML_NODES,
    max_alias_chars: int = MAX_YAML_ALIAS_CHARS,
    max_bytes: int | None = None,
) -> Any:
    """Parse one YAML document with yaml.SafeLoader, plus depth, alias and duplicate-key limits."""
    text = _text(source, what, max_bytes)

    from dojo import _safe_yaml

    return _safe_yaml.load(
        text,
        what=what,
        finite=finite,
        max_depth=max_depth,
        max_nodes=max_nodes,
        max_alias_chars=max_alias_chars,
    )
