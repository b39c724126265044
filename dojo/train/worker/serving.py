"""Output that serves: the tokenizer carries the chat template the model was trained with, its
control tokens are single tokens, and ``generation_config.json`` stops at the end of a turn.

Worker side (imports transformers). The order matters: ``prepare_tokenizer`` runs before the
data is tokenized (new tokens are tokenized as one id while training), ``fit_embeddings`` before
LoRA wraps the model (the new rows are part of what trains), ``write_generation_config`` after
the weights are saved.
"""

from pathlib import Path
from typing import Any

from dojo.train import vocab
from dojo.train.worker.callbacks import print0


def prepare_tokenizer(tokenizer: Any, template: Any, run: Any) -> list[str]:
    """Set the run's chat template and its bos/eos on the tokenizer; add the template's control
    tokens it splits. Returns the tokens added (the model then needs ``fit_embeddings``)."""
    missing = vocab.split_markers(tokenizer, vocab.required_markers(template))
    if missing and run.model.adapters:
        vocab.refuse_for_adapters(missing, run.lora.modules_to_save)
    # What apply_chat_template passes as bos_token/eos_token must be what training rendered with.
    tokens: dict[str, Any] = {
        k: getattr(template, k)
        for k in ("bos_token", "eos_token")
        if getattr(template, k) and getattr(template, k) != getattr(tokenizer, k)
    }
    if missing:
        tokens["extra_special_tokens"] = missing
    if tokens:
        tokenizer.add_special_tokens(tokens, replace_extra_special_tokens=False)
    tokenizer.chat_template = template.source
    if missing:
        print0(f"tokens added to the vocabulary (the template writes them): {', '.join(missing)}")
    return missing


def is_tied(model: Any) -> bool:
    out = model.get_output_embeddings()
    return out is None or out.weight is model.get_input_embeddings().weight


def fit_embeddings(model: Any, tokenizer: Any, run: Any, added: list[str]) -> None:
    """Grow the embeddings to the tokenizer when it outgrew them (new rows start at the mean of
    the old ones, the transformers default); point the config's special-token ids at the
    tokenizer's."""
    # The config's vocab_size, not the weight's shape: under ZeRO-3 the weight is a shard. Rows
    # beyond the tokenizer (padding to a multiple) already exist: never shrink to it.
    if len(tokenizer) > model.config.get_text_config().vocab_size:
        model.resize_token_embeddings(len(tokenizer))
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        value = getattr(tokenizer, key)
        if value is not None:
            setattr(model.config, key, value)
            if getattr(model, "generation_config", None) is not None:
                setattr(model.generation_config, key, value)


def stop_ids(tokenizer: Any, template: Any, original_eos: int | None) -> list[int]:
    """End-of-turn token first, then the tokenizer's eos (now and before the run)."""
    ids: list[int] = []
    if template.stop_token:
        found = vocab.token_ids(tokenizer, template.stop_token)
        if len(found) == 1:
            ids.append(found[0])
    ids += [i for i in (tokenizer.eos_token_id, original_eos) if i is not None]
    return list(dict.fromkeys(ids))


def write_generation_config(
    model: Any, tokenizer: Any, template: Any, out: Path, original_eos: int | None
) -> None:
    """generation_config.json: the model's own, with eos = the stops (transformers' generate and
    vLLM both stop at any id of the list)."""
    from transformers import GenerationConfig

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    own = getattr(base, "generation_config", None)
    cfg = GenerationConfig.from_dict(own.to_dict()) if own is not None else GenerationConfig()  # type: ignore[no-untyped-call]
    ids = stop_ids(tokenizer, template, original_eos)
    if ids:
        cfg.eos_token_id = ids if len(ids) > 1 else ids[0]
    if tokenizer.bos_token_id is not None:
        cfg.bos_token_id = tokenizer.bos_token_id
    pad = tokenizer.pad_token_id
    cfg.pad_token_id = pad if pad is not None else (ids[0] if ids else None)
    cfg.use_cache = True  # training turned the KV cache off; generation wants it
    cfg.save_pretrained(str(out))
