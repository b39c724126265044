"""Which of a chat template's control tokens a tokenizer must hold as single tokens. Torch-free.

A model trained with ``--template llama-3-instruct`` on a tokenizer that splits ``<|eot_id|>``
into ``<``, ``|``, ``eot``, ... can never stop: its end of turn is not one id that generation can
stop at. The worker adds such tokens as special tokens (and resizes the embeddings) before it
trains; this module decides which.

Required as single tokens (``required_markers``), among what the template writes for a sample
conversation:
- the template's end-of-turn (stop) token, and its bos/eos tokens when it writes them;
- ``<|...|>`` markers (ChatML, Llama-3, Phi-3, ...), DeepSeek's ``<｜...｜>`` and snake-case angle
  markers like Gemma's ``<start_of_turn>``: special tokens in every model that uses them.
Bracket markers (``[INST]``, ``<<SYS>>``) stay text: Llama-2 and Mistral v0.1/v0.2 were trained
with them split into ordinary pieces, and a new row for them would throw that training away.
"""

import re
from typing import Any

from dojo.errors import DojoError, TemplateError

MARKER = re.compile(r"<\|[^<>|\s]{1,64}\|>|<｜[^<>｜]{1,64}｜>|<[a-z]+(?:_[a-z]+)+>")
_SAMPLE = (
    ("system", "You are helpful."),
    ("user", "Hi"),
    ("assistant", "Hello!"),
    ("user", "Bye"),
    ("assistant", "Goodbye!"),
)
INPUT_EMBEDDINGS = ("embed_tokens", "wte", "word_embeddings", "embed_in", "tok_embeddings")
OUTPUT_EMBEDDINGS = ("lm_head", "embed_out", "output")


def sample_text(template: Any) -> str:
    """A short conversation as the template renders it, plus its generation prompt; without the
    system turn when the template refuses one."""
    from dojo.chat.template import render

    chat = [{"role": r, "content": c} for r, c in _SAMPLE]
    for messages in (chat, chat[1:]):
        try:
            return render(template, messages) + render(
                template, messages[:-1], add_generation_prompt=True
            )
        except TemplateError:
            continue
    return ""


def required_markers(template: Any) -> list[str]:
    """Control tokens the template writes that must each be one token, in first-seen order."""
    text = sample_text(template)
    found = [m.group(0) for m in MARKER.finditer(text)]
    for tok in (template.bos_token, template.eos_token):
        if tok and tok in text:
            found.append(tok)
    if template.stop_token:
        found.append(template.stop_token)
    return list(dict.fromkeys(found))


def token_ids(tokenizer: Any, text: str) -> list[int]:
    """Ids of ``text`` without added BOS/EOS, for a transformers or a ``tokenizers`` tokenizer."""
    enc = tokenizer.encode(text, add_special_tokens=False)
    return list(getattr(enc, "ids", enc))


def split_markers(tokenizer: Any, markers: list[str]) -> list[str]:
    """The markers the tokenizer cuts into more than one token."""
    return [m for m in markers if len(token_ids(tokenizer, m)) != 1]


def refuse_for_adapters(missing: list[str], modules_to_save: tuple[str, ...]) -> None:
    """LoRA trains no embedding row: new tokens need the embedding and the head trained in full
    and saved beside the adapter (tied ones stay tied: the worker sets PEFT's
    ensure_weight_tying). Never done silently: it changes memory and the output."""
    names = set(modules_to_save)
    if names & set(INPUT_EMBEDDINGS) and names & set(OUTPUT_EMBEDDINGS):
        return
    shown = ", ".join(missing)
    raise DojoError(
        f"the chat template's tokens {shown} are not single tokens of this tokenizer: they must "
        "be added, and LoRA alone cannot train their new embedding rows",
        hint="pass --modules-to-save embed_tokens,lm_head (trains and saves both in full), or "
        "--method full, or a --template whose tokens the model has (its own: drop --template)",
    )


def check_before_launch(run: Any, model_dir: str | None) -> list[str]:
    """In ``dojo train``, before anything launches: the template's tokens this local model's
    tokenizer splits (they will be added); a LoRA run that cannot train them is refused here.
    Needs only ``tokenizers`` (Rust, no torch); a Hub model or a slow tokenizer is left to the
    worker, which checks again with the real tokenizer."""
    from pathlib import Path

    from dojo.chat.template import load_template

    if model_dir is None or run.model.template is None:
        return []  # the model's own template: its tokens are the tokenizer's
    folder = Path(model_dir).expanduser()
    if not (folder / "tokenizer.json").is_file():
        return []
    import importlib.util

    if importlib.util.find_spec("tokenizers") is None:
        return []  # core install (a dry run): the worker checks with the real tokenizer
    from tokenizers import Tokenizer

    try:
        tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    except Exception:  # unreadable files, and tokenizers raises its own Exception type
        return []
    missing = split_markers(tok, required_markers(load_template(run.model.template)))
    if missing and run.model.adapters:
        refuse_for_adapters(missing, run.lora.modules_to_save)
    return missing
