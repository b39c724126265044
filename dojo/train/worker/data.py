"""The worker's dataset: rows -> chat template -> tokens with masked labels -> (packed) batches.

A thin adapter over the data modules (dojo.train.rows, .data, .packing); imported only inside
the launched ranks. Returns (dataset, collator, report) for the HF Trainer.
"""

import sys
from pathlib import Path
from typing import Any

from dojo.train.worker.callbacks import print0


def pick_template(job: Any, tokenizer: Any) -> Any:
    """--template (bundled name or file), else the model's own chat template."""
    run = job.run
    from dojo.chat.template import ChatTemplate, load_template
    from dojo.errors import TemplateError

    if run.template:
        return load_template(run.template, flag="--template")
    folder = Path(job.tokenizer_path)
    if folder.is_dir():
        return load_template(folder, flag="--model")
    if not getattr(tokenizer, "chat_template", None):
        raise TemplateError(
            f"--model {run.model}: the tokenizer has no chat template",
            hint="pass --template NAME (see 'dojo chat-template list')",
        )
    return ChatTemplate.from_source(
        tokenizer.chat_template,
        name=f"{run.model} (own)",
        bos_token=tokenizer.bos_token,
        eos_token=tokenizer.eos_token,
    )


def build(job: Any, tokenizer: Any, model: Any) -> tuple[Any, Any, dict[str, Any]]:
    """(train dataset, collator, data report) for the Trainer."""
    from dojo.train.worker import examples as data_mod
    from dojo.train.worker import packing

    run = job.run
    template = pick_template(job, tokenizer)
    rows = data_mod.load_rows(list(job.data))
    examples, report = data_mod.build_examples(
        rows, tokenizer, template, seq_len=run.seq_len, overflow=run.overflow
    )
    info: dict[str, Any] = report.to_dict()
    print0(
        f"data: {info['used']} examples from {info['rows']} rows ({info['bad']} bad, "
        f"{info['truncated']} truncated, {info['dropped']} dropped), "
        f"{info['trained_tokens']:,} of {info['tokens']:,} tokens trained"
    )
    for line in info["bad_rows"][:5]:
        print0(f"  skipped {line}")
    if not examples:
        sys.stderr.write(
            "error: no trainable example left after tokenization (see the report above)\n"
        )
        raise SystemExit(1)
    pad_id = (
        tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    )
    if run.packing:
        ok, why = packing.packing_supported(model)
        info["packing"] = ok
        if ok:
            print0(f"packing: on ({why})")
            # FlashAttention-2 finds packed samples only in a batch of one row, so flatten the
            # micro-batch there; SDPA/flex/eager read per-row position_ids, and keeping
            # [micro_batch, seq_len] rows lets a row that holds one sample use the unmasked
            # causal (flash) SDPA kernel instead of a masked one over the whole flat batch.
            flatten = getattr(model.config, "_attn_implementation", "") == "flash_attention_2"
            collator = packing.PackedCollator(pad_id, flatten=flatten)
            return packing.pack(examples, run.seq_len), collator, info
        print0(f"warning: packing off, padding instead: {why}")
    return examples, packing.PadCollator(pad_id), info
