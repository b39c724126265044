"""Conversations -> token ids with assistant-only labels. Imported only inside the worker.

API (the worker: ``worker_data.build``):

    load_rows(paths: list[str], columns=None) -> RowsReport
        local .jsonl/.json through dojo.train.rows; .parquet/.csv files and Hub datasets
        (OWNER/NAME[:SUBSET][@SPLIT]) through `datasets` (imported here, lazily); every record is
        renamed by ``columns`` and validated the same way.
    build_examples(rows, tokenizer, template, *, seq_len, overflow="truncate") -> (examples, report)
        rows: a RowsReport (its bad rows are counted) or a list of (source, messages).
        examples: [{"input_ids": [...], "labels": [...]}], labels -100 outside assistant spans
        (PlainText rows: no template, the tokenizer's BOS, the completion + an eos trained).
        report: DataReport (.to_dict() for the run log and dojo_summary.json).

Masking: ``dojo.chat.template.assistant_spans`` renders each conversation ONCE and returns the
character spans of assistant content (+ the end-of-turn token); the fast tokenizer's
offset_mapping maps them to tokens: a token is trained when its characters overlap a span. No
prefix is re-rendered. The rendered text is tokenized with ``add_special_tokens=False``: templates
write their own BOS (Llama-3 ``<|begin_of_text|>``, Mistral ``<s>``) and a tokenizer that adds one
too would start every sample with two.

Over-long samples (> seq_len tokens): ``truncate`` keeps the first seq_len tokens (dropped anyway
if no trained token is left), ``drop`` skips them; both are counted.
"""

from dataclasses import asdict, dataclass, field
from typing import Any

from dojo.chat.conversation import PlainText
from dojo.errors import DataError, DojoError
from dojo.train import sources
from dojo.train.rows import Example, RowsReport, read_rows, validate_record
from dojo.train.worker.packing import IGNORE

OVERFLOW = ("truncate", "drop")
_BATCH = 512  # rows tokenized per fast-tokenizer call (Rust, parallel): speed without much memory
_KEEP_BAD = 20  # bad-row examples kept in the report; all are counted


@dataclass
class DataReport:
    """What happened to every row; printed by rank 0 and stored in dojo_summary.json."""

    rows: int = 0
    """Rows read (valid + bad)."""
    used: int = 0
    """Examples produced."""
    bad: int = 0
    """Rows skipped as unusable (format, roles, empty, template refused, nothing to train)."""
    truncated: int = 0
    """Examples cut to seq_len (still used)."""
    dropped: int = 0
    """Over-long rows skipped (overflow=drop, or nothing trained left after truncation)."""
    tokens: int = 0
    """Tokens in the examples produced."""
    trained_tokens: int = 0
    """Of those, tokens with a label (assistant content + end-of-turn)."""
    bad_rows: list[tuple[str, str]] = field(default_factory=list)
    """The first few (source, reason) pairs."""

    def skip(self, source: str, reason: str) -> None:
        self.bad += 1
        if len(self.bad_rows) < _KEEP_BAD:
            self.bad_rows.append((source, reason))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["bad_rows"] = [f"{s}: {r}" for s, r in self.bad_rows]
        return d


def load_rows(
    paths: list[str], columns: dict[str, str] | None = None, objective: str = "sft"
) -> RowsReport:
    """Local JSON files via dojo.train.rows, then Parquet/CSV files and Hub datasets via
    `datasets`; ``columns`` {source: target} renames columns first; ``objective``: which rows
    are valid (conversations for sft, preference rows otherwise)."""
    cols = columns or {}
    report = read_rows(list(paths), columns=cols, objective=objective)
    for ref in report.passthrough:
        for source, record in _dataset_records(ref):
            try:
                fmt, messages = validate_record(sources.rename(record, cols), objective)
            except DojoError as e:
                report.bad.append((source, e.message))
                continue
            report.format_counts[fmt] = report.format_counts.get(fmt, 0) + 1
            report.rows.append((source, messages))
    return report


def _dataset_records(ref: str) -> Any:
    import datasets

    src = sources.parse(ref)
    try:
        if src.kind == "hub":
            ds = datasets.load_dataset(src.name, src.subset, split=src.split)
        else:
            builder = "csv" if ref.lower().endswith(".csv") else "parquet"
            ds = datasets.load_dataset(builder, data_files=ref, split="train")
    except Exception as e:  # datasets raises many types (FileNotFound, ConnectionError, ...)
        raise DataError(f"--data {ref}: cannot load with datasets: {e}") from e
    for i, record in enumerate(ds):
        yield f"{ref}[{i}]", record  # parquet/Hub rows have an index, not a line


def build_examples(
    rows: RowsReport | list[tuple[str, Example]],
    tokenizer: Any,
    template: Any,
    *,
    seq_len: int,
    overflow: str = "truncate",
) -> tuple[list[dict[str, list[int]]], DataReport]:
    """Render, tokenize and mask every row (see module docstring)."""
    from dojo.chat.template import assistant_spans

    if overflow not in OVERFLOW:
        raise DataError(f"--overflow {overflow!r} is not one of {', '.join(OVERFLOW)}")
    if seq_len < 2:
        raise DataError(f"--seq-len {seq_len} is too short", hint="use at least 2 tokens")
    if not getattr(tokenizer, "is_fast", False):
        raise DataError(
            f"tokenizer {type(tokenizer).__name__} is not a fast tokenizer",
            hint="dojo needs offset mappings (a tokenizer.json); most Hub models ship one",
        )
    report = DataReport()
    pairs = rows.rows if isinstance(rows, RowsReport) else rows
    if isinstance(rows, RowsReport):
        for source, reason in rows.bad:
            report.skip(source, reason)
    report.rows = len(pairs) + report.bad
    rendered: list[tuple[str, str, list[tuple[int, int]], bool]] = []
    for source, messages in pairs:
        if isinstance(messages, PlainText):
            # No template: the text as it is, the tokenizer's own BOS, the completion trained.
            text = messages.prompt + messages.completion
            rendered.append((source, text, [(len(messages.prompt), len(text))], True))
            continue
        try:
            text, spans = assistant_spans(template, messages)
        except DojoError as e:
            report.skip(source, e.message)
            continue
        if not spans:
            report.skip(source, "no assistant text found in the rendered conversation")
            continue
        rendered.append((source, text, spans, False))
    examples: list[dict[str, list[int]]] = []
    eos = getattr(tokenizer, "eos_token_id", None)
    for start in range(0, len(rendered), _BATCH):
        chunk = rendered[start : start + _BATCH]
        encoded: dict[int, tuple[list[int], list[int]]] = {}
        for plain in (False, True):
            idx = [i for i, r in enumerate(chunk) if r[3] is plain]
            if not idx:
                continue
            # Templates write their own BOS; plain text gets the tokenizer's (as TRL does).
            enc = tokenizer(
                [chunk[i][1] for i in idx], add_special_tokens=plain, return_offsets_mapping=True
            )
            for i, ids, offsets in zip(idx, enc["input_ids"], enc["offset_mapping"], strict=True):
                ids, labels = list(ids), mask_labels(ids, offsets, chunk[i][2])
                if plain and eos is not None and (not ids or ids[-1] != eos):
                    ids, labels = ids + [eos], labels + [eos]  # trained: the model learns to stop
                encoded[i] = (ids, labels)
        for i in range(len(chunk)):
            ex = _example(*encoded[i], seq_len, overflow, report)
            if ex is not None:
                examples.append(ex)
    return examples, report


def mask_labels(
    ids: list[int], offsets: list[tuple[int, int]], spans: list[tuple[int, int]]
) -> list[int]:
    """labels[i] = ids[i] when token i's characters overlap an assistant span, else -100."""
    labels = [IGNORE] * len(ids)
    k = 0
    for i, (start, end) in enumerate(offsets):
        while k < len(spans) and spans[k][1] <= start:
            k += 1  # spans and offsets both increase: one pass
        if k < len(spans) and start < spans[k][1] and end > spans[k][0] and end > start:
            labels[i] = ids[i]
    return labels


def _example(
    ids: list[int], labels: list[int], seq_len: int, overflow: str, report: DataReport
) -> dict[str, list[int]] | None:
    if len(ids) > seq_len:
        if overflow == "drop":
            report.dropped += 1
            return None
        ids, labels = ids[:seq_len], labels[:seq_len]
        if all(lab == IGNORE for lab in labels):
            report.dropped += 1  # the reply starts after seq_len: only prompt left
            return None
        report.truncated += 1
    report.used += 1
    report.tokens += len(ids)
    report.trained_tokens += sum(lab != IGNORE for lab in labels)
    return {"input_ids": ids, "labels": labels}
