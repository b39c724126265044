"""Read local conversation files row by row, with ``file:line`` for every problem. Pure (stdlib).

API (used by the launcher's preflight before launch, and by the worker through dojo.train.worker.examples):

    read_rows(paths: list[str], *, template=None, columns=None) -> RowsReport
        .rows          list of (source "file:line", messages or PlainText)  valid rows, in order
        .bad           list of (source, reason)                 skipped rows, never padded
        .format_counts {"messages": n, "sharegpt": n, "alpaca": n, "prompt_completion": n, "text": n}
        .passthrough   Hub datasets, .parquet and .csv files, left to the worker (dojo.train.worker.examples)

``paths`` are --data values (dojo.train.sources: files, folders, Hub specs, =WEIGHT). The
passthrough ones are checked here too, before launch and cheaply (dojo.train.data_check): a
.parquet file must carry the PAR1 magic at both ends; a .parquet/.csv file a format's columns
(after --data-columns) and a valid row among its first rows; a Hub id must be in the local cache
or reachable on the Hub (checked by the launcher, not by every rank).

JSON Lines end at "\n" only (one trailing "\r" is dropped): json.dumps(ensure_ascii=False) writes
U+2028, U+2029 and U+0085 raw inside strings, and str.splitlines would cut a row there.

Raises DataError (one line, naming the path) for a missing path, a folder, an empty or binary file,
an unsupported extension and malformed JSON (with its line). A row that parses but is not a usable
conversation (unknown format, missing fields, wrong roles, empty, no assistant text) is a *bad
row*: reported with its line and skipped. With ``template`` each row is also rendered once and a
row the template refuses (e.g. roles that do not alternate) is a bad row too.
"""

import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dojo import safe_load
from dojo._io import file_kind
from dojo.chat.conversation import FORMATS, Message, PlainText, to_example
from dojo.errors import DataError, DojoError
from dojo.safe_load import clip
from dojo.train import data_check, sources
from dojo.train.preference import Preference, to_preference

ROW_SUFFIXES = (".jsonl", ".ndjson", ".json")
"""Read here. .json holds one array of records, one record, or (as `datasets` accepts) JSON lines."""
PASSTHROUGH_SUFFIXES = (".parquet", ".csv")
"""Read by the worker with `datasets` (pyarrow is not stdlib); schema and first rows checked
here before launch."""
_TABLE_SUFFIXES = (".tsv",)
Example = list[Message] | PlainText
"""What a valid row becomes: messages (rendered with the chat template) or plain text."""
Row = Example | Preference
"""A valid row of any objective: an SFT example, or a preference pair / unpaired answer."""
_SNIFF_BYTES = 8192  # a NUL byte in the first 8 KiB means binary, as git and grep decide
MAX_FILE_BYTES = 4 << 30
"""A .jsonl/.json file is read whole (by the preflight, then by every rank): 4 GiB of JSON is
some 40 GiB of Python objects. Larger data goes in several files."""
MAX_ROW_CHARS = 64 << 20
"""Characters in one JSON-lines row: a 1M-token conversation is ~4 MB of JSON (dojo.chat.files)."""


@dataclass(frozen=True)
class RowsReport:
    rows: list[tuple[str, Row]] = field(default_factory=list)
    bad: list[tuple[str, str]] = field(default_factory=list)
    format_counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FORMATS, 0))
    passthrough: list[str] = field(default_factory=list)

    @property
    def valid(self) -> int:
        """Valid rows: those in ``rows`` and the Parquet/CSV rows the preflight counted (the
        worker reads those files itself, so they are counted here, not kept)."""
        return sum(self.format_counts.values())

    def summary(self, limit: int = 5) -> str:
        """One line for the user, plus the first ``limit`` bad rows."""
        fmts = ", ".join(f"{k} {v}" for k, v in self.format_counts.items() if v)
        lines = [f"{self.valid} valid rows ({fmts or 'none'}), {len(self.bad)} bad"]
        lines += [f"  skipped {src}: {why}" for src, why in self.bad[:limit]]
        if len(self.bad) > limit:
            lines.append(f"  ... and {len(self.bad) - limit} more bad rows")
        return "\n".join(lines)


def is_hub_name(ref: str) -> bool:
    """'owner/name[:subset][@split]' that is not a local path: a Hub dataset for the worker."""
    return sources.is_hub_spec(ref)


def jsonl_lines(text: str) -> Iterator[tuple[int, str]]:
    """(1-based line number, line) of JSON Lines text: split at "\n" only, one "\r" dropped."""
    for n, line in enumerate(text.split("\n"), start=1):
        yield n, line[:-1] if line.endswith("\r") else line


def read_rows(
    paths: list[str],
    *,
    template: Any = None,
    hub_check: bool | None = None,
    columns: dict[str, str] | None = None,
    count_tables: bool | None = None,
    objective: str = "sft",
    require_columns: bool = False,
) -> RowsReport:
    """Every row of every local JSON file (see module docstring). ``paths`` are --data values
    (dojo.train.sources: files, folders, Hub datasets, =WEIGHT); ``columns`` {source: target}
    renames columns before a row is read. Parquet/CSV files and Hub datasets go to
    ``passthrough`` (as file paths / the Hub spec) after a cheap check. ``objective``: sft
    reads conversations, the others preference rows (dojo.train.preference).

    ``hub_check``: ask the cache/Hub whether a Hub id can be read; None = only outside a
    launched rank (LOCAL_RANK unset): the launcher checked before launch, ranks need not ask.
    ``count_tables``: validate every Parquet/CSV row into the counts (``valid``, ``bad``);
    None = outside a launched rank, as for hub_check (ranks read those rows with `datasets`).
    ``require_columns``: every ``columns`` source must be a column of some local file (the
    launcher's check of --data, all sources at once; a rank reads one source at a time, and
    --eval-data need not have the training data's columns).
    """
    report = RowsReport()
    if not paths:
        raise DataError("--data: no data file given", hint="pass --data FILE.jsonl (or a Hub id)")
    outside_rank = os.environ.get("LOCAL_RANK") is None
    hub_check = outside_rank if hub_check is None else hub_check
    count_tables = outside_rank if count_tables is None else count_tables
    cols = columns or {}
    seen: set[str] = set()
    hub = False
    for spec in paths:
        src = sources.parse(spec)
        if src.kind == "hub":
            if hub_check:
                data_check.check_hub_dataset(src.name)
            report.passthrough.append(src.key())
            hub = True
            continue
        for ref in src.files:
            seen |= _read_file(report, ref, template, cols, count_tables, objective)
    if require_columns and not hub:  # a Hub dataset's columns are known to the ranks only
        _check_columns_exist(cols, seen, paths)
    return report


def _check_columns_exist(cols: dict[str, str], seen: set[str], paths: list[str]) -> None:
    """A --data-columns SOURCE no file has: the mapping would be dropped unsaid (and the rows
    read as they are, or refused for a missing column the user believes mapped)."""
    for source, target in cols.items():
        if source not in seen:
            shown = ", ".join(sorted(seen)[:12]) + (", ..." if len(seen) > 12 else "")
            raise DataError(
                f"--data-columns {target}={source}: no row of --data {', '.join(paths)} has a "
                f"column {source!r}",
                hint=f"the right side names a column of your data: {shown or '(none)'}",
            )


def _read_file(
    report: RowsReport,
    ref: str,
    template: Any,
    cols: dict[str, str],
    count_tables: bool,
    objective: str = "sft",
) -> set[str]:
    """Reads one file into ``report``; returns the column names its rows use."""

    def validate(record: Any) -> Any:
        return validate_record(sources.rename(record, cols), objective)

    def count(source: str, record: Any) -> None:
        try:
            fmt, _ = validate(record)
        except DojoError as e:
            report.bad.append((source, e.message))
            return
        report.format_counts[fmt] = report.format_counts.get(fmt, 0) + 1

    tally = count if count_tables else None
    path = _check_file(ref)
    if path.suffix.lower() == ".csv":
        names = data_check.check_csv(path, ref, validate, cols, tally)
        report.passthrough.append(ref)
        return set(names)
    if path.suffix.lower() in PASSTHROUGH_SUFFIXES:
        names = data_check.check_parquet(path, ref, validate, cols, tally)
        report.passthrough.append(ref)
        return set(names)
    try:
        records = _records(path, ref)
    except RecursionError:  # json.loads recurses once per level of nesting
        raise DataError(
            f"--data {ref}: a row is nested too deeply to be a conversation",
            hint='each row is one object: {"messages": [{"role": ..., "content": ...}]}',
        ) from None
    seen: set[str] = set()
    for source, record in records:
        if isinstance(record, Unreadable):
            report.bad.append((source, record.reason))
            continue
        if isinstance(record, dict):
            seen.update(map(str, record))
        nested = safe_load.nesting_exceeds(record, safe_load.MAX_DEPTH)
        if nested:
            report.bad.append((source, f"nested deeper than {safe_load.MAX_DEPTH} levels"))
            continue
        _add(report, source, sources.rename(record, cols), template, objective)
    return seen


def validate_record(record: Any, objective: str = "sft") -> tuple[str, Row]:
    """(format, messages or PlainText) for a usable row; DataError saying why not. A
    preference ``objective`` reads a Pair or Unpaired row instead."""
    if objective != "sft":
        return to_preference(record, objective)
    try:
        return _sft_example(record)
    except DataError:
        if _preference_row(record):
            raise _preference_for_sft(record) from None
        raise


def _sft_example(record: Any) -> tuple[str, Example]:
    fmt, messages = to_example(record)
    if isinstance(messages, PlainText):
        return fmt, messages  # to_example refused an empty text/completion
    replies = [m for m in messages if m["role"] == "assistant"]
    if not replies:
        raise DataError("no assistant turn: nothing to train on")
    if not any(_has_text(m.get("content")) for m in replies):
        raise DataError("every assistant turn is empty: nothing to train on")
    return fmt, messages


def _preference_row(record: Any) -> bool:
    """A pair of answers to compare (TRL's prompt/chosen/rejected, LLaMA-Factory's
    conversations + chosen/rejected): a preference objective's row, not a conversation."""
    return isinstance(record, dict) and "chosen" in record and "rejected" in record


def _preference_for_sft(record: dict[str, Any]) -> DataError:
    keys = ", ".join(sorted(map(str, record)))
    return DataError(
        f"a preference row (keys: {keys}), and --objective sft trains conversations: pass "
        "--objective dpo (or orpo, simpo) to train on the chosen/rejected pairs"
    )


def _add(
    report: RowsReport, source: str, record: Any, template: Any, objective: str = "sft"
) -> None:
    try:
        fmt, messages = validate_record(record, objective)
        if template is not None and isinstance(messages, list):
            _render_check(template, messages)
    except DojoError as e:
        report.bad.append((source, e.message))
        return
    report.format_counts[fmt] = report.format_counts.get(fmt, 0) + 1
    report.rows.append((source, messages))


def _render_check(template: Any, messages: list[Message]) -> None:
    from dojo.chat.template import span_report  # jinja2 stays out of plain imports

    spans = span_report(template, messages)
    if not spans.spans:
        raise DataError("the chat template dropped every assistant reply")


def _has_text(content: Any) -> bool:
    if isinstance(content, str):
        return bool(content.strip())
    if isinstance(content, list):
        return any(isinstance(b, dict) and str(b.get("text", "")).strip() for b in content)
    return False


def _check_file(ref: str) -> Path:
    """A regular file with a suffix dojo reads. stat() before open(): a FIFO would block the
    open (and the preflight) forever, /dev/zero and /dev/urandom never end."""
    path = Path(ref).expanduser()
    shown = clip(ref, 200)  # the OS refuses long names: ENAMETOOLONG below, with the value
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.lexists(path):
            raise DataError(
                f"--data {shown}: a broken symbolic link (to {os.readlink(path)!r})",
                hint="point the link at the data file, or give the file's own path",
            ) from None
        raise DataError(
            f"--data {shown}: no such file", hint="check the path (or give a Hub id)"
        ) from None
    except (OSError, ValueError) as e:  # ELOOP, EACCES, ENAMETOOLONG, a NUL byte in the path
        raise DataError(
            f"--data {shown}: cannot read it ({getattr(e, 'strerror', None) or e})",
            hint="give the path of a readable data file",
        ) from None
    kind = file_kind(st.st_mode)
    if kind is not None:
        raise DataError(
            f"--data {shown} is {kind}, not a regular file",
            hint="save the data to a regular .jsonl, .json, .parquet or .csv file first",
        )
    suffix = path.suffix.lower()
    if suffix in _TABLE_SUFFIXES:
        raise DataError(f"--data {shown}: CSV/TSV is not read by dojo", hint=data_check.CSV_HINT)
    if suffix not in ROW_SUFFIXES + PASSTHROUGH_SUFFIXES:
        raise DataError(
            f"--data {shown}: unsupported file type {suffix or '(no extension)'!r}",
            hint="use .jsonl (one conversation per line), .json or .parquet",
        )
    return path


def _read_bytes(path: Path, ref: str) -> bytes:
    """At most MAX_FILE_BYTES; O_NONBLOCK, so a path swapped for a FIFO since the stat() in
    _check_file cannot block the open either."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if file_kind(st.st_mode) is not None:
                raise DataError(f"--data {ref} is {file_kind(st.st_mode)}, not a regular file")
            if st.st_size > MAX_FILE_BYTES:
                raise _too_large(ref, st.st_size)
            # read(n) allocates n bytes up front: ask for the size stat() gave, then for what
            # a file still being written grew by, never past the limit.
            chunks = [f.read(st.st_size + 1)]
            size = len(chunks[0])
            while size > st.st_size and size <= MAX_FILE_BYTES:
                chunk = f.read(min(1 << 24, MAX_FILE_BYTES + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
    except OSError as e:
        raise DataError(f"--data {ref}: cannot read: {e.strerror}") from None
    except MemoryError:
        raise DataError(
            f"--data {ref}: {path.stat().st_size:,} bytes do not fit in this machine's memory",
            hint="split it into smaller files, or use a machine with more memory",
        ) from None
    if size > MAX_FILE_BYTES:
        raise _too_large(ref, size)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _too_large(ref: str, size: int) -> DataError:
    return DataError(
        f"--data {ref} is {size:,} bytes; dojo reads a JSON file whole, up to "
        f"{MAX_FILE_BYTES >> 30} GiB",
        hint="split it into smaller files and pass their folder (--data DIR)",
    )


def _read_text(path: Path, ref: str) -> str:
    raw = _read_bytes(path, ref)
    if not raw.strip():
        raise DataError(f"--data {ref} is empty", hint="it needs one conversation per line")
    wide = safe_load.wide_encoding(raw)
    if wide is not None:
        raise DataError(f"--data {ref} is {wide} text, not UTF-8", hint=safe_load.wide_hint(wide))
    if b"\x00" in raw[:_SNIFF_BYTES]:
        raise DataError(f"--data {ref} is a binary file, not JSON", hint="use .jsonl or .json")
    try:
        return raw.decode("utf-8-sig")  # a UTF-8 BOM from Windows editors is fine
    except UnicodeDecodeError as e:
        raise DataError(
            f"--data {ref}: not UTF-8 text (byte {e.start})", hint="save the file as UTF-8"
        ) from e


@dataclass(frozen=True)
class Unreadable:
    """A row that is JSON but cannot be read into Python: one bad row, not a fatal error."""

    reason: str


def _long_int(_e: ValueError) -> Unreadable:
    # json.loads raises a plain ValueError past Python's int-string limit (4,300 digits).
    limit = sys.get_int_max_str_digits()
    return Unreadable(f"holds an integer of more than {limit:,} digits, not a value a row uses")


def _records(path: Path, ref: str) -> list[tuple[str, Any]]:
    text = _read_text(path, ref)
    name = str(ref)
    if path.suffix.lower() == ".json":
        first = text.lstrip()[:1]
        if first == "[":
            return _json_array(text, name)
        where = f"{name}:{_line_of(text, len(text) - len(text.lstrip()))}"
        try:
            return [(where, json.loads(text))]
        except json.JSONDecodeError as e:
            if not _first_line_is_json(text):  # not JSON lines either: report the document's error
                raise DataError(
                    f"--data {name}:{e.lineno}: not valid JSON ({e.msg}, column {e.colno})",
                    hint=_not_json_hint(name, e.lineno, text.split("\n", 1)[0]),
                ) from e
        except ValueError as e:
            return [(where, _long_int(e))]
    return _json_lines(text, name)


def _first_line_is_json(text: str) -> bool:
    line = next((ln for _, ln in jsonl_lines(text) if ln.strip()), "")
    try:
        json.loads(line)
    except json.JSONDecodeError:
        return False
    except ValueError:  # JSON, with an integer too long for Python
        return True
    return True


def _json_lines(text: str, name: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for n, line in jsonl_lines(text):
        if not line.strip():
            continue
        if len(line) > MAX_ROW_CHARS:
            out.append((f"{name}:{n}", Unreadable(
                f"a row of {len(line):,} characters; more than {MAX_ROW_CHARS:,} is not one "
                "conversation")))  # fmt: skip
            continue
        try:
            out.append((f"{name}:{n}", json.loads(line)))
        except json.JSONDecodeError as e:
            raise DataError(
                f"--data {name}:{n}: not valid JSON ({e.msg}, column {e.colno})",
                hint=_not_json_hint(name, n, line),
            ) from e
        except ValueError as e:
            out.append((f"{name}:{n}", _long_int(e)))
    return out


def _not_json_hint(name: str, n: int, line: str) -> str:
    if n == 1 and data_check.looks_like_csv(line):
        return "it looks like CSV; " + data_check.CSV_HINT
    if name.lower().endswith(".json"):
        return "a .json file must hold one JSON array or object of conversations, or JSON lines"
    return "each line must hold one JSON object"


def _json_array(text: str, name: str) -> list[tuple[str, Any]]:
    """Elements of a top-level array, each with the line it starts on."""
    decoder = json.JSONDecoder()
    pos = text.index("[") + 1
    out: list[tuple[str, Any]] = []
    try:
        while True:
            pos = _skip_ws(text, pos)
            if text.startswith("]", pos):
                break
            try:
                value, end = decoder.raw_decode(text, pos)
            except json.JSONDecodeError:
                raise
            except ValueError as e:  # an integer past Python's limit: skip this element only
                value, end = _long_int(e), _LENIENT.raw_decode(text, pos)[1]
            out.append((f"{name}:{_line_of(text, pos)}", value))
            pos = _skip_ws(text, end)
            if text.startswith(",", pos):
                pos += 1
            elif not text.startswith("]", pos):
                raise json.JSONDecodeError("expected ',' or ']'", text, pos)
    except json.JSONDecodeError as e:
        raise DataError(
            f"--data {name}:{e.lineno}: not valid JSON ({e.msg}, column {e.colno})",
            hint="the file must hold one JSON array of conversations",
        ) from e
    if text[pos + 1 :].strip():
        line = _line_of(text, pos + 1)
        raise DataError(f"--data {name}:{line}: not valid JSON (extra data after the array)")
    return out


# Finds where an element with a too-long integer ends: parse_int=len never converts digits.
_LENIENT = json.JSONDecoder(parse_int=len)


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1
