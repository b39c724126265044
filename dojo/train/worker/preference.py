"""Preference rows -> token ids in TRL's columns, the prompt apart from each answer. Imported
only inside the worker.

    build(rows, tokenizer, template, *, seq_len, overflow, objective) -> (examples, report)
        dpo / orpo / simpo: {"prompt_ids", "chosen_ids", "rejected_ids"} (DPOTrainer's columns)
        kto: {"prompt_ids", "completion_ids", "label"} (KTOTrainer's); a pair becomes two rows,
        the chosen answer desirable and the rejected one not (TRL's unpair_preference_dataset)

Rendering: a conversation is rendered ONCE with the prompt and the answer through the run's chat
template (dojo.chat.template.assistant_spans); the answer is the tokens over its spans, from the
first to the end-of-turn token of the last; everything before it (the generation prompt
included) is the prompt, as in SFT's masking. Plain-text rows (strings) use no template: the
tokenizer's BOS, the answer + eos, as dojo's prompt/completion rows and TRL do.

The prompt is the tokens both answers start with (TRL's common_prefix_length): a template that
renders the prompt differently before the two answers is a bad row. A row whose prompt + answer
exceeds --seq-len is dropped (--overflow drop) or its answers cut to fit (truncate, TRL's
keep_start); a prompt that fills --seq-len alone is dropped either way. Every row dropped is
counted and named in the report.
"""

from typing import Any

from dojo.errors import DataError, DojoError
from dojo.train.preference import Pair, Side, Unpaired
from dojo.train.worker.examples import _KEEP_BAD, DataReport

COLUMNS = {
    "pair": ("prompt_ids", "chosen_ids", "rejected_ids"),
    "kto": ("prompt_ids", "completion_ids", "label"),
}


def columns(objective: str) -> tuple[str, ...]:
    return COLUMNS["kto" if objective == "kto" else "pair"]


def build(
    rows: Any, tokenizer: Any, template: Any, *, seq_len: int, overflow: str, objective: str
) -> tuple[list[dict[str, Any]], DataReport]:
    """Render, tokenize and split every row (module docstring). ``rows``: (source, Pair or
    Unpaired) pairs, or a RowsReport whose bad rows are counted."""
    report = DataReport()
    pairs = rows.rows if hasattr(rows, "rows") else rows
    for source, reason in getattr(rows, "bad", []):
        report.skip(source, reason)
    report.rows = len(pairs) + report.bad
    out: list[dict[str, Any]] = []
    for source, row in pairs:
        try:
            if isinstance(row, Pair):
                made = _pair(row, tokenizer, template, objective)
            else:
                made = [_unpaired(row, tokenizer, template)]
        except DojoError as e:
            report.skip(source, e.message)
            continue
        kept = [_fit(ex, source, seq_len, overflow, report) for ex in made]
        if any(k is None for k in kept):
            continue  # a pair unpaired for KTO goes whole or not at all
        report.used += 1
        for ex in kept:
            assert ex is not None
            out.append(ex)
            answers = [v for k, v in ex.items() if k.endswith("_ids") and k != "prompt_ids"]
            report.tokens += sum(len(ex["prompt_ids"]) + len(a) for a in answers)
            report.trained_tokens += sum(len(a) for a in answers)
    return out, report


def _pair(row: Pair, tokenizer: Any, template: Any, objective: str) -> list[dict[str, Any]]:
    chosen = _encode(row.prompt, row.chosen, tokenizer, template, "chosen")
    rejected = _encode(row.prompt, row.rejected, tokenizer, template, "rejected")
    p = _prompt_len(chosen, rejected)
    prompt = chosen[0][:p]
    c, r = chosen[0][p : chosen[2]], rejected[0][p : rejected[2]]
    if objective == "kto":
        return [
            {"prompt_ids": prompt, "completion_ids": c, "label": True},
            {"prompt_ids": prompt, "completion_ids": r, "label": False},
        ]
    return [{"prompt_ids": prompt, "chosen_ids": c, "rejected_ids": r}]


def _unpaired(row: Unpaired, tokenizer: Any, template: Any) -> dict[str, Any]:
    ids, start, end = _encode(row.prompt, row.completion, tokenizer, template, "completion")
    return {"prompt_ids": ids[:start], "completion_ids": ids[start:end], "label": row.label}


def _prompt_len(a: tuple[list[int], int, int], b: tuple[list[int], int, int]) -> int:
    """Tokens both answers start with (before either answer begins)."""
    p = min(a[1], b[1])
    if a[0][:p] != b[0][:p]:
        raise DataError("the chat template renders the prompt differently before the chosen and "
                   "the rejected answer")  # fmt: skip
    return p


def _encode(
    prompt: Side, answer: Side, tokenizer: Any, template: Any, name: str
) -> tuple[list[int], int, int]:
    """(token ids of prompt + answer, index of the answer's first token, end of its last)."""
    if isinstance(prompt, str) and isinstance(answer, str):
        text = prompt + answer
        start, end = len(prompt), len(text)
        enc = tokenizer(text, add_special_tokens=True, return_offsets_mapping=True)
        ids = list(enc["input_ids"])
        eos = getattr(tokenizer, "eos_token_id", None)
        if eos is not None and (not ids or ids[-1] != eos):
            ids.append(eos)  # the model learns to stop after the answer (as TRL's add_eos)
        first = _first_token(enc["offset_mapping"], start)
        return ids, first, len(ids)
    from dojo.chat.template import span_report

    assert isinstance(prompt, list) and isinstance(answer, list)
    messages = prompt + answer
    report = span_report(template, messages)
    located = [i for i, m in enumerate(messages)
               if m["role"] == "assistant" and i not in report.missing]  # fmt: skip
    answer_spans = [span for i, span in zip(located, report.spans, strict=True) if i >= len(prompt)]
    dropped = [i for i in report.missing if i >= len(prompt) and _has_text(messages[i])]
    if not answer_spans or dropped:
        raise DataError(f"the chat template dropped the {name} answer")
    start, end = answer_spans[0][0], answer_spans[-1][1]
    enc = tokenizer(report.text, add_special_tokens=False, return_offsets_mapping=True)
    offsets = enc["offset_mapping"]
    first = _first_token(offsets, start)
    last = first
    for i in range(first, len(offsets)):
        if offsets[i][0] < end and offsets[i][1] > offsets[i][0]:
            last = i + 1
    return list(enc["input_ids"]), first, last


def _has_text(m: Any) -> bool:
    content = m.get("content")
    if isinstance(content, list):
        return any(isinstance(b, dict) and str(b.get("text", "")).strip() for b in content)
    return isinstance(content, str) and bool(content.strip())


def _first_token(offsets: list[tuple[int, int]], start: int) -> int:
    """Index of the first token whose characters reach past ``start`` (the answer's first)."""
    for i, (a, b) in enumerate(offsets):
        if b > start and b > a:
            return i
    return len(offsets)


def _fit(
    ex: dict[str, Any], source: str, seq_len: int, overflow: str, report: DataReport
) -> dict[str, Any] | None:
    """``ex`` within --seq-len (module docstring), or None: dropped, counted and named."""
    prompt = len(ex["prompt_ids"])
    keys = [k for k in ex if k.endswith("_ids") and k != "prompt_ids"]
    longest = max(len(ex[k]) for k in keys)
    if prompt + longest <= seq_len:
        return ex
    if overflow == "drop" or prompt >= seq_len:
        why = "the prompt alone" if prompt >= seq_len else "prompt + answer"
        _drop(report, source, f"{why} is {prompt + (0 if prompt >= seq_len else longest)} "
                              f"tokens, over --seq-len {seq_len}")  # fmt: skip
        return None
    report.truncated += 1
    return {**ex, **{k: ex[k][: seq_len - prompt] for k in keys}}


def _drop(report: DataReport, source: str, reason: str) -> None:
    report.dropped += 1
    if len(report.bad_rows) < _KEEP_BAD:
        report.bad_rows.append((source, reason))
