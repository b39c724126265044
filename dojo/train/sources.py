"""What ``--data`` names: local files and folders, Hub datasets, and their mixing weights. Pure.

Syntax of one ``--data`` value (also a ``data:`` YAML list item):

    PATH                   a .jsonl/.ndjson/.json/.parquet/.csv file, or a folder: every such
                           file directly in it, sorted by name
    OWNER/NAME[:SUBSET][@SPLIT]
                           a Hub dataset (SUBSET = its config name; SPLIT defaults to train and
                           may slice: train[:10%])
    ...=WEIGHT             any of the above with a mixing weight (a positive number), e.g.
                           --data a.jsonl=0.7 --data org/ds:en@train=0.3

Why ``=`` for the weight and not ``:``: ``:`` already separates a Hub subset (``org/ds:en``) and
starts every Windows path (``C:\\data``). A value that exists on disk as written is always a path,
so a Hive folder such as ``part=1`` stays a folder. ``--data-ratios 0.7,0.3`` is the same as
inline weights, one per --data in order; give one or the other. Weights are relative: they are
normalised to sum to 1.

Column mapping (``--data-columns messages=conversation``, or a YAML mapping ``data_columns:
{messages: conversation}``): the source column is renamed to the format column dojo detects,
in every source that has it.
"""

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dojo.errors import DataError
from dojo.safe_load import clip, shorten

FILE_SUFFIXES = (".jsonl", ".ndjson", ".json", ".parquet", ".csv")
"""Files a folder contributes (and files --data reads)."""
COLUMN_TARGETS = (
    "messages", "conversations", "instruction", "input", "output", "system", "history",
    "text", "prompt", "completion", "chosen", "rejected", "label",
)  # fmt: skip
"""Columns dojo reads a format from: the left side of --data-columns."""
_HUB = re.compile(
    r"(?P<name>[A-Za-z0-9][\w.-]*/[\w.-]+)(?::(?P<subset>[\w.-]+))?(?:@(?P<split>[\w.:%+\[\]-]+))?"
)
_NUMBER = re.compile(r"[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?")
_SYNTAX = "PATH, OWNER/NAME[:SUBSET][@SPLIT], optionally =WEIGHT (e.g. a.jsonl=0.7)"


@dataclass(frozen=True)
class Source:
    spec: str
    """The --data value as given (for messages)."""
    kind: str
    """file | hub"""
    name: str
    """The path (file kind) or OWNER/NAME (hub kind)."""
    files: tuple[str, ...] = ()
    """file kind: the files read (a folder's supported files, sorted)."""
    subset: str | None = None
    split: str = "train"
    weight: float | None = None

    def key(self) -> str:
        """What names this source in rows' "source[i]" and in messages."""
        return self.name if self.kind == "file" else self.spec.rsplit("=", 1)[0]


def on_disk(text: str) -> bool:
    """Something exists at this path; False for a name the OS refuses (too long, NUL byte)."""
    try:
        return Path(text).expanduser().exists()
    except (OSError, ValueError):
        return False


def is_hub_spec(text: str) -> bool:
    """OWNER/NAME[:SUBSET][@SPLIT] that is not a local path."""
    if text.startswith((".", "/", "~")) or on_disk(text):
        return False
    m = _HUB.fullmatch(text)
    return m is not None and not m["name"].lower().endswith(FILE_SUFFIXES + (".tsv",))


def _weight(text: str, spec: str, flag: str) -> tuple[str, float | None]:
    """(the source, its weight or None) for a --data value; ``text`` is it stripped.

    ``=`` starts a weight unless the whole value is a path on disk (a Hive folder ``part=1``).
    What follows the last ``=`` is refused, not taken for part of a path, when it reads as a
    number to Python (-1, nan, inf, 1e400) or when what precedes it exists: ``a.jsonl=-1``
    names a bad weight, not a missing file."""
    source, eq, raw = text.rpartition("=")
    if not eq or not source or on_disk(text):
        return text, None
    if _NUMBER.fullmatch(raw):
        weight: float | None = float(raw)
    else:
        try:
            float(raw)
        except ValueError:
            if not (on_disk(source) or is_hub_spec(source)):
                return text, None  # no weight: a path with "=" in it (reported missing later)
        weight = None
    if weight is None or not (weight > 0 and math.isfinite(weight)):
        raise DataError(
            f"{flag} {clip(spec, 100)}: weight {clip(raw)} must be a positive number",
            hint="a weight is a positive number, relative to the others: "
            "--data a.jsonl=0.7 --data b.jsonl=0.3",
        )
    return source, weight


def parse(spec: str, flag: str = "--data") -> Source:
    """One --data value -> Source (files of a folder listed); DataError naming the flag."""
    text = spec.strip()
    if not text:
        raise DataError(f"{flag} {spec!r}: empty", hint=f"give {_SYNTAX}")
    text, weight = _weight(text, spec, flag)
    if is_hub_spec(text):
        h = _HUB.fullmatch(text)
        assert h is not None
        return Source(spec, "hub", h["name"], (), h["subset"], h["split"] or "train", weight)
    path = Path(text).expanduser()
    if on_disk(text) and path.is_dir():
        files = sorted(
            str(p) for p in path.iterdir() if p.is_file() and p.suffix.lower() in FILE_SUFFIXES
        )
        if not files:
            raise DataError(
                f"{flag} {clip(spec, 200)}: the folder holds no {'/'.join(FILE_SUFFIXES)} file",
                hint="put the data files directly in it, or pass a file",
            )
        return Source(spec, "file", text, tuple(files), weight=weight)
    return Source(spec, "file", text, (text,), weight=weight)


def parse_all(
    specs: list[str] | tuple[str, ...], ratios: tuple[float, ...] = (), flag: str = "--data"
) -> list[Source]:
    """Every --data value, with --data-ratios folded in; weights normalised to sum to 1 (or all
    None: no mixing, sources are read one after the other)."""
    sources = [parse(s, flag) for s in specs]
    inline = [s.weight for s in sources]
    if ratios:
        if any(w is not None for w in inline):
            raise DataError(
                "--data-ratios: the --data values carry =WEIGHT already",
                hint="give one or the other",
            )
        if len(ratios) != len(sources):
            raise DataError(
                f"--data-ratios {shorten(','.join(map(str, ratios)))}: {len(ratios)} ratio(s) "
                f"for {len(sources)} --data source(s)",
                hint="give one ratio per --data, in order",
            )
        inline = list(ratios)
    if all(w is None for w in inline):
        return sources
    if any(w is None for w in inline):
        missing = next(s.spec for s, w in zip(sources, inline, strict=True) if w is None)
        raise DataError(
            f"{flag} {clip(missing, 200)}: no mixing weight while other sources have one",
            hint="give every source a weight (a.jsonl=0.7 b.parquet=0.3) or none",
        )
    given = [w for w in inline if w is not None]
    shares = normalise(given)
    for s, w, share in zip(sources, inline, shares, strict=True):
        if share <= 0:
            raise DataError(
                f"{flag} {clip(s.spec, 200)}: weight {w:g} is too small next to {max(given):g} "
                "(its share rounds to 0)",
                hint="give weights of a similar scale, e.g. a.jsonl=0.7 b.jsonl=0.3",
            )
    return [
        Source(s.spec, s.kind, s.name, s.files, s.subset, s.split, share)
        for s, share in zip(sources, shares, strict=True)
    ]


def check_repeats(srcs: list[Source], flag: str = "--data") -> None:
    """A file or Hub dataset two values name (a.jsonl twice, a.jsonl and ./a.jsonl, a folder and
    a file in it) would have its rows read twice, silently doubling them: DataError naming both.
    A mix weights a source with =WEIGHT, so a repeat asks nothing it could not."""
    hint = "give each file once (a folder reads every data file in it)"
    if flag == "--data":
        hint += "; to weight a source in a mix use =WEIGHT: --data a.jsonl=0.7 --data b.jsonl=0.3"
    seen: dict[tuple[str | None, ...], Source] = {}
    for src in srcs:
        keys = _identities(src)
        for key, shown in keys.items():
            if key in seen:
                raise DataError(_repeat_message(src, seen[key], shown, flag), hint=hint)
        seen.update(dict.fromkeys(keys, src))


def _identities(src: Source) -> dict[tuple[str | None, ...], str]:
    """What ``src`` reads, however spelled -> as it names it: each file's real path, or the Hub
    dataset's (name, subset, split)."""
    if src.kind == "hub":
        return {("hub", src.name, src.subset, src.split): src.name}
    return {("file", os.path.realpath(os.path.expanduser(f))): f for f in src.files}


def _repeat_message(later: Source, earlier: Source, shown: str, flag: str) -> str:
    """``later`` reads ``shown``, which ``earlier`` reads too."""
    first = f"{flag} {clip(earlier.spec, 200)}"

    def shape(s: Source) -> str:
        return "dataset" if s.kind == "hub" else "file" if s.files == (s.name,) else "folder"

    if later.key() == earlier.key():
        what = "given twice"
    elif (
        shape(later) == shape(earlier) and _identities(later).keys() == _identities(earlier).keys()
    ):
        what = f"the same {shape(later)} as {first}"
    else:
        what = f"{clip(shown, 200)} is read by {first} too"
    return f"{flag} {clip(later.spec, 200)}: {what}, so each of its rows would count twice"


def normalise(weights: list[float]) -> list[float]:
    """Weights -> shares summing to 1. Each is divided by the largest first: 1e308 + 1e308
    overflows to inf, 1 + 1 does not."""
    top = max(weights)
    scaled = [w / top for w in weights]
    total = sum(scaled)
    return [w / total for w in scaled]


def parse_ratios(text: Any) -> tuple[float, ...]:
    """--data-ratios "0.7,0.3" (or a YAML list) -> positive floats."""
    if text is None or text == "":
        return ()
    items = text if isinstance(text, list | tuple) else str(text).split(",")
    out = []
    for item in items:
        try:
            w = float(item) if isinstance(item, (int, float)) else float(str(item).strip())
        except (ValueError, OverflowError):  # OverflowError: an int past float's range
            w = -1.0
        if not (w > 0 and math.isfinite(w)):
            raise DataError(
                f"--data-ratios {clip(text, 200) if isinstance(text, str) else shorten(text, 200)}: "
                f"{shorten(item if isinstance(item, (int, float)) else str(item).strip())} is not a "
                "positive number",
                hint="e.g. --data-ratios 0.7,0.3 (one per --data, in order)",
            )
        out.append(w)
    return tuple(out)


def parse_columns(items: Any) -> dict[str, str]:
    """--data-columns TARGET=SOURCE (repeatable; or a YAML mapping) -> {source: target}."""
    if not items:
        return {}
    if isinstance(items, dict):
        items = [f"{k}={v}" for k, v in items.items()]
    if isinstance(items, str):
        items = [items]
    out: dict[str, str] = {}
    for item in items:
        for part in str(item).split(","):
            target, eq, source = part.partition("=")
            target, source = target.strip(), source.strip()
            if not eq or not target or not source:
                raise DataError(
                    f"--data-columns {item}: expected TARGET=SOURCE",
                    hint="e.g. --data-columns messages=conversation",
                )
            if target not in COLUMN_TARGETS:
                raise DataError(
                    f"--data-columns {item}: {target!r} is not a column dojo reads",
                    hint=f"the left side is one of {', '.join(COLUMN_TARGETS)}",
                )
            out[source] = target
    return out


def rename(record: Any, columns: dict[str, str]) -> Any:
    """The record with mapped columns renamed (a new dict; non-dicts unchanged)."""
    if not columns or not isinstance(record, dict):
        return record
    return {columns.get(k, k): v for k, v in record.items()}
