"""The worker's dataset: rows -> chat template -> tokens with masked labels -> (packed) batches.

A thin adapter over the data modules (dojo.train.rows, .data, .packing); imported only inside
the launched ranks. Returns (train dataset, eval dataset or None, collator, report) for the HF
Trainer. Eval rows go through the same template, masking and packing as training rows, so the
eval loss is the training loss on held-out rows.
"""

import random
import sys
from pathlib import Path
from typing import Any, NoReturn

from dojo.train.worker.callbacks import print0


def pick_template(job: Any, tokenizer: Any) -> Any:
    """--template (bundled name or file), else the model's own chat template."""
    run = job.run
    from dojo.chat.template import ChatTemplate, load_template
    from dojo.errors import TemplateError

    if run.model.template:
        tpl = load_template(run.model.template, flag="--template")
        if tpl.bos_token is None and tpl.eos_token is None and Path(run.model.template).is_file():
            # A bare .jinja file names no tokens: render with the tokenizer's, as
            # apply_chat_template would, so the reply's eos is trained (the stop token).
            return ChatTemplate.from_source(
                tpl.source, name=tpl.name, bos_token=tokenizer.bos_token,
                eos_token=tokenizer.eos_token,
            )  # fmt: skip
        return tpl
    folder = Path(job.tokenizer_path)
    if folder.is_dir():
        return load_template(folder, flag="--model")
    if not getattr(tokenizer, "chat_template", None):
        raise TemplateError(
            f"--model {run.model.model}: the tokenizer has no chat template",
            hint="pass --template NAME (see 'dojo chat-template list')",
        )
    return ChatTemplate.from_source(
        tokenizer.chat_template,
        name=f"{run.model.model} (own)",
        bos_token=tokenizer.bos_token,
        eos_token=tokenizer.eos_token,
    )


def split_rows(rows: Any, fraction: float, seed: int) -> tuple[Any, list[Any]]:
    """(training RowsReport, held-out rows): a seeded ``fraction`` of the valid rows, at least
    one, never all of them."""
    from dojo.errors import DataError
    from dojo.train.rows import RowsReport

    n = len(rows.rows)
    n_eval = max(1, round(n * fraction))
    if n - n_eval < 1:
        raise DataError(
            f"--eval-split {fraction}: {n} valid row(s), none left to train on",
            hint="add rows, or give held-out rows with --eval-data FILE",
        )
    held = set(random.Random(seed).sample(range(n), n_eval))
    train = [r for i, r in enumerate(rows.rows) if i not in held]
    evals = [r for i, r in enumerate(rows.rows) if i in held]
    kept = RowsReport(train, rows.bad, rows.format_counts, rows.passthrough)
    return kept, evals


def build(
    job: Any, tokenizer: Any, model: Any, template: Any = None
) -> tuple[Any, Any, Any, dict[str, Any]]:
    """(train dataset, eval dataset or None, collator, data report) for the Trainer. The rows
    are tokenized once, by local rank 0, and cached (dojo.train.worker.tokenized)."""
    from dojo.train.worker import packing, tokenized

    run = job.run
    template = template or pick_template(job, tokenizer)
    packed, why = packing.packing_supported(model) if run.data.packing else (False, "")
    train, evals, info = tokenized.load_or_build(job, tokenizer, template, packed)
    print0(
        f"data: {info['used']} examples from {info['rows']} rows ({info['bad']} bad, "
        f"{info['truncated']} truncated, {info['dropped']} dropped), "
        f"{info['trained_tokens']:,} of {info['tokens']:,} tokens trained"
    )
    for line in info["bad_rows"][:5]:
        print0(f"  skipped {line}")
    if not info["used"]:
        _stop("no trainable example left after tokenization (see the report above)")
    if evals is not None:
        e = info["eval"]
        print0(f"eval data: {e['used']} examples from {e['rows']} rows ({e['bad']} bad)")
        if not e["used"]:
            _stop("no eval example left after tokenization (see the eval data report above)")
    if run.objective.preference:
        return train, evals, None, info  # TRL's trainer brings its own collator
    pad_id = (
        tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    )
    if run.data.packing:
        info["packing"] = packed
        if packed:
            print0(f"packing: on ({why})")
            collate = packing.packed_collator(
                pad_id, getattr(model.config, "_attn_implementation", ""),
                compiled=run.kernels.compiled, seq_len=run.data.seq_len,
                micro_batch=run.loop.micro_batch,
                one_per_row=len(train) == info["used"],  # no two samples shared a row
            )  # fmt: skip
            if collate.width is not None:
                print0(f"packing: rows padded to {collate.width} tokens under compile (one shape, "
                       "a padding sample in each row: the layers compile once)")  # fmt: skip
            return train, evals, collate, info
        print0(f"warning: packing off, padding instead: {why}")
    return train, evals, packing.PadCollator(pad_id), info


def _stop(message: str) -> NoReturn:
    sys.stderr.write(f"error: {message}\n")
    raise SystemExit(1)
