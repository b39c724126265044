"""What every benchmark trains: random-weight models of real shapes and synthetic chats.

Models: the architecture's config.json (bench/rows.py SHAPES) with random bf16 weights, made once
per shape on the GPU and saved, plus dojo's bundled tiny tokenizer and its ChatML template (the
data's words are the tokenizer's own, so a word is a few tokens; the model's vocabulary is the
architecture's, so logits have the real width). ``write_config`` writes the config alone (no torch):
what ``dojo estimate`` reads for a dry run.

Data, in the chat format dojo reads (``{"messages": [user, assistant]}`` per line), made on the
fly from a fixed seed, so every run of every system sees the same file:
- ``pack``: 2,000 chats of 120-360 words, for memory rows that pack (every row exactly seq-len);
- ``fixed``: every sample longer than seq-len (truncated): no padding anywhere, one per row;
- ``mix``: the realistic SFT mix, 3,000 chats with log-normal lengths (median 350 words, clipped to
  20-3,000; short turns with a long tail, ShareGPT-like); the speed benchmark's first dataset;
- ``longtail``: mostly short chats with one in 40 of 8k-16k tokens;
- ``preference_fixed``: preference pairs (TRL's conversational ``{"prompt", "chosen",
  "rejected"}``) whose answers run past seq-len, for the memory rows of a preference objective:
  dojo cuts each answer to seq-len less the prompt (``--overflow truncate``, its default), so
  every sequence of a micro-batch, chosen and rejected alike, is exactly seq-len tokens: what
  ``dojo estimate --seq-len`` counts for a pair (two sequences of seq-len a row) or a KTO row;
- ``kto-mix``: the same pairs as KTO's unpaired rows (each pair's chosen row, then its rejected);
- ``pref-mix``: the realistic preference mix for speed, 2,000 pairs with log-normal prompt and
  answer lengths (UltraFeedback-like: prompts median 30 words, answers median 80), prompt +
  longer answer capped at the row's seq-len, so almost no pair is truncated.
The bundled tokenizer makes about TOKENS_PER_WORD tokens of a word (tests check the long-tail
lengths with it).
"""

import json
import math
import os
import random
from pathlib import Path
from typing import Any

from rows import EXTRA_ARCHS, SHAPES

WORDS = [
    "alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "kappa", "lambda", "sigma",
    "omega", "river", "stone", "cloud",
]  # fmt: skip
"""Words the bundled tiny tokenizer splits into a few tokens each (it was trained on the demo
chats)."""
TOKENS_PER_WORD = 4.4
"""Tokens per word of these chats under the bundled tokenizer, ChatML framing included (4.40 at
1,000 and 5,000 words)."""


def arch_config(shape: str) -> dict[str, Any]:
    """The shape's HF config fields (model_type included), from dojo's table or EXTRA_ARCHS."""
    from dojo.architectures import ARCHITECTURES

    return dict({**ARCHITECTURES, **EXTRA_ARCHS}[SHAPES[shape]])


def write_config(shape: str, root: Path) -> Path:
    """root/model-SHAPE/config.json alone (no torch, no weights): what `dojo estimate` reads."""
    folder = root / f"model-{shape}"
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "config.json").exists():
        cfg = {**arch_config(shape), "max_position_embeddings": 32768}
        (folder / "config.json").write_text(json.dumps(cfg, indent=1))
    return folder


def prepare_model(shape: str, root: Path) -> Path:
    """root/model-SHAPE: config.json, random bf16 weights (made on the GPU, once) and the
    bundled tiny tokenizer."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from dojo.train.tiny import build_tiny_tokenizer

    folder = root / f"model-{shape}"
    if (folder / "config.json").exists() and any(folder.glob("*.safetensors")):
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    cfg = arch_config(shape)
    kind = cfg.pop("model_type")
    config = AutoConfig.for_model(kind, **cfg, max_position_embeddings=32768)
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(folder, safe_serialization=True)
    del model
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    build_tiny_tokenizer(folder)
    return folder


def synthetic_chat(rng: random.Random, n_words: int, q: int | None = None) -> dict[str, Any]:
    """One user/assistant exchange of n_words words; the prompt is q words (default a quarter)."""
    q = q or max(4, n_words // 4)
    user = " ".join(rng.choice(WORDS) for _ in range(q))
    answer = " ".join(rng.choice(WORDS) for _ in range(max(4, n_words - q)))
    return {
        "messages": [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
    }


def _write(path: Path, chats: list[dict[str, Any]]) -> Path:
    """Write atomically: memory rows run side by side and each writes the same data file, so a
    row starting while another rewrites it must never read a truncated file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(c) + "\n" for c in chats)
    if path.is_file() and path.read_text() == text:
        return path
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def pack_data(work: Path) -> Path:
    """2,000 chats of 120-360 words: packing fills every row of a memory run to seq-len."""
    rng = random.Random(0)
    chats = []
    for _ in range(2000):
        q, a = rng.randint(40, 120), rng.randint(80, 240)
        chats.append(synthetic_chat(rng, q + a, q=q))
    return _write(work / "pack.jsonl", chats)


def fixed_data(work: Path, seq_len: int, n: int = 32) -> Path:
    """n samples longer than seq_len (truncated): every row exactly seq_len, no padding."""
    rng = random.Random(seq_len)
    chats = [synthetic_chat(rng, seq_len * 2, q=40) for _ in range(n)]
    return _write(work / f"fixed-{seq_len}.jsonl", chats)


def preference_pair(
    rng: random.Random, prompt_words: int, chosen: int, rejected: int
) -> dict[str, Any]:
    """One preference pair in TRL's conversational format (dojo reads it as is): a user prompt of
    prompt_words words, two assistant answers of the given word counts."""

    def text(n: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(max(1, n)))

    def turn(role: str, n: int) -> list[dict[str, str]]:
        return [{"role": role, "content": text(n)}]

    return {"prompt": turn("user", prompt_words), "chosen": turn("assistant", chosen),
            "rejected": turn("assistant", rejected)}  # fmt: skip


def preference_fixed_data(work: Path, seq_len: int, n: int = 32) -> Path:
    """n pairs of a 40-word prompt and two answers of seq_len / 2 words (about 2.2 x seq_len
    tokens): truncated to exactly seq_len tokens a sequence (module docstring)."""
    rng = random.Random(seq_len + 1)
    pairs = [preference_pair(rng, 40, seq_len // 2, seq_len // 2) for _ in range(n)]
    return _write(work / f"pref-fixed-{seq_len}.jsonl", pairs)


def preference_mix_data(work: Path, seq_len: int = 2048, n: int = 2000) -> Path:
    """The realistic preference mix (module docstring): log-normal prompt (median 30 words) and
    answer lengths (median 80 words each, drawn apart: the chosen answer is not always the
    longer), the pair's prompt + longer answer capped at seq_len tokens."""
    rng = random.Random(2)
    # words; 32 tokens of ChatML framing, 5 tokens a word (above the mean: a capped pair's words
    # vary, and a pair over seq_len is cut, the same way by dojo and TRL)
    cap = int((seq_len - 32) / 5)
    pairs = []
    for _ in range(n):
        p = int(min(cap // 2, max(4, rng.lognormvariate(math.log(30), 1.0))))
        a = [int(min(cap - p, max(4, rng.lognormvariate(math.log(80), 0.9)))) for _ in range(2)]
        pairs.append(preference_pair(rng, p, a[0], a[1]))
    return _write(work / f"speed-pref-mix-{seq_len}.jsonl", pairs)


def unpaired(pairs: Path, out: Path) -> Path:
    """KTO's rows from a pair file: each pair's chosen answer (desirable), then its rejected one
    (not), in TRL's unpaired format, which dojo and TRL's KTO script both read as is, in order."""
    rows = []
    for line in pairs.read_text().splitlines():
        pair = json.loads(line)
        for side, good in (("chosen", True), ("rejected", False)):
            rows.append({"prompt": pair["prompt"], "completion": pair[side], "label": good})
    return _write(out, rows)


def speed_data(work: Path) -> dict[str, Path]:
    """The speed benchmark's datasets, by name. fixed and mix come from one generator in this
    order (seed 0), as every speed result since the first was measured on them."""
    rng = random.Random(0)
    fixed = [synthetic_chat(rng, 2048 * 2, q=40) for _ in range(200)]
    lens = [int(min(3000, max(20, rng.lognormvariate(math.log(350), 1.0)))) for _ in range(3000)]
    mix = [synthetic_chat(rng, n) for n in lens]
    pairs = preference_mix_data(work)
    return {
        "fixed": _write(work / "speed-fixed.jsonl", fixed),
        "mix": _write(work / "speed-mix.jsonl", mix),
        "longtail": longtail_data(work),
        "pref-mix": pairs,
        "kto-mix": unpaired(pairs, work / "speed-kto-mix-2048.jsonl"),
    }


def longtail_data(work: Path, n: int = 1200) -> Path:
    """Short chats (log-normal, median 60 words, 10-400) with every 40th one 8k-16k tokens long."""
    rng = random.Random(1)
    chats = []
    for i in range(n):
        if i % 40 == 39:
            words = int(rng.uniform(8192, 16000) / TOKENS_PER_WORD)
        else:
            words = int(min(400, max(10, rng.lognormvariate(math.log(60), 0.8))))
        chats.append(synthetic_chat(rng, words))
    return _write(work / "speed-longtail.jsonl", chats)


if __name__ == "__main__":  # python bench/workload.py --work DIR SHAPE ...: make the weights
    import argparse
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    ap = argparse.ArgumentParser(description="make random-weight models of the given shapes")
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("shapes", nargs="+", choices=sorted(SHAPES))
    a = ap.parse_args()
    for s in a.shapes:
        print(f"weights {s}: {prepare_model(s, a.work)}", flush=True)
