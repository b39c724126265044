"""The bundled tiny default: a Llama config + a small tokenizer, so `dojo train` needs no download.

API (the launcher calls ``materialize_tiny_model`` in the parent process; the worker then loads the
folder with ``AutoConfig``/``AutoTokenizer.from_pretrained`` and seeded random weights):

    TINY_CONFIG: Path                          templates/models/tiny/config.json
    build_tiny_tokenizer(out_dir) -> Path      tokenizer.json + tokenizer_config.json +
                                               special_tokens_map.json + chat_template.jinja
    materialize_tiny_model(out_dir) -> Path    config.json + the tokenizer, written atomically

The model: Llama, hidden 128, 2 layers, 4 heads (2 KV heads), vocab 1024, tied embeddings
(~0.5 M parameters): 2 CPU ranks at ZeRO-2/3 run ~50 steps in seconds. The tokenizer is a
byte-level BPE trained with the `tokenizers` library (Rust; transformers is not imported here) on
the bundled demo conversations; BPE training is deterministic (merges are chosen by count, ties
by pair order), a test checks two builds are byte-identical. Any text stays encodable (the 256
bytes are the initial alphabet). Chat template: the bundled ChatML, whose end-of-turn token
``<|im_end|>`` is the tokenizer's eos (so generation stops at the end of the reply).
"""

import json
import os
import shutil
import tempfile
from pathlib import Path

from dojo.paths import templates_dir
from dojo.train.rows import jsonl_lines

TINY_CONFIG = templates_dir() / "models" / "tiny" / "config.json"
TEMPLATE = "chatml"
"""The bundled chat template the tiny tokenizer ships (templates/chat/chatml.jinja)."""
SPECIAL_TOKENS = ("<|pad|>", "<s>", "</s>", "<|im_start|>", "<|im_end|>")
"""Ids 0..4 in this order; config.json's pad/bos/eos ids (0, 1, 4) point at them."""
PAD, BOS, EOS = "<|pad|>", "<s>", "<|im_end|>"
VOCAB_SIZE = 1024
"""= config.json's vocab_size (a test checks): an upper bound, BPE stops earlier when the
bundled text has no more pairs seen twice (~760 tokens today)."""
MODEL_MAX_LENGTH = 2048
"""= max_position_embeddings in config.json."""


def _training_text() -> list[str]:
    """The bundled text: demo conversations' contents and the role names the template writes."""
    path = templates_dir() / "data" / "demo_chat.jsonl"
    texts = ["system\n", "user\n", "assistant\n"]
    for _, line in jsonl_lines(path.read_text(encoding="utf-8")):
        if not line.strip():
            continue
        for m in json.loads(line)["messages"]:
            texts.append(f"{m['role']}\n{m['content']}\n")
    return texts


def build_tiny_tokenizer(out_dir: str | Path) -> Path:
    """Train the tiny BPE tokenizer and save it as a transformers tokenizer folder."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_training_text(), trainer=trainer)
    tok.save(str(out / "tokenizer.json"))
    chat_template = (templates_dir() / "chat" / f"{TEMPLATE}.jinja").read_text(encoding="utf-8")
    (out / "chat_template.jinja").write_text(chat_template, encoding="utf-8")
    tokens = {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **tokens,
        # ChatML writes no BOS; dojo tokenizes rendered chats with add_special_tokens=False anyway.
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": MODEL_MAX_LENGTH,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", "utf-8")
    (out / "special_tokens_map.json").write_text(json.dumps(tokens, indent=2) + "\n", "utf-8")
    return out


def materialize_tiny_model(out_dir: str | Path) -> Path:
    """config.json + tokenizer in ``out_dir`` (built beside it, then renamed: never half-written).

    No weights: the worker creates seeded random ones (``from_config``) on first load.
    """
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        shutil.copyfile(TINY_CONFIG, tmp / "config.json")
        build_tiny_tokenizer(tmp)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out
