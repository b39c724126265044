"""Token-id samples and a tiny random Llama for the packing, varlen and trainer tests (torch is
imported inside, so a core install can import this module)."""

import json
from pathlib import Path
from typing import Any


def random_examples(lengths: tuple[int, ...], seed: int = 1) -> list[dict[str, list[int]]]:
    """Samples of random token ids (labels = inputs), one per length, reproducible."""
    import torch

    g = torch.Generator().manual_seed(seed)
    out = []
    for n in lengths:
        ids = torch.randint(5, 1000, (n,), generator=g).tolist()
        out.append({"input_ids": ids, "labels": list(ids)})
    return out


def tiny_llama(attn: str) -> Any:
    """dojo's tiny Llama (GQA: 4 heads, 2 kv heads), seeded random fp32 weights, under ``attn``
    (dojo's ``sdpa_varlen`` registered first when asked for)."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    from dojo.train.tiny import TINY_CONFIG

    if attn == "sdpa_varlen":
        from dojo.train.worker import varlen

        varlen.register()
    cfg = LlamaConfig(**json.loads(TINY_CONFIG.read_text()))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attn, dtype=torch.float32)
    return model.eval()


def save_bench_llama(folder: Path) -> Path:
    """A 2-layer Llama (hidden 64) with random weights and dojo's tiny tokenizer, saved in
    ``folder``: the model the bench's CPU tests train with every system."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from dojo.train.tiny import build_tiny_tokenizer

    cfg = AutoConfig.for_model(
        "llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, vocab_size=1024,
        max_position_embeddings=4096, tie_word_embeddings=True,
        pad_token_id=0, bos_token_id=1, eos_token_id=4,
    )  # fmt: skip
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(folder)
    build_tiny_tokenizer(folder)
    return folder
