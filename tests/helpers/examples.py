"""Token-id samples and a tiny random Llama for the packing, varlen and trainer tests (torch is
imported inside, so a core install can import this module)."""

import json
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
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    from dojo.train.tiny import TINY_CONFIG

    cfg = LlamaConfig(**json.loads(TINY_CONFIG.read_text()))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attn, dtype=torch.float32)
    return model.eval()
