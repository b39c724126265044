"""What a forward keeps for backward, on the CPU: the shared harness of bench/*_saved_cpu.py.
Bytes of the unique storages autograd saves, seen by saved_tensors_hooks."""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

LINEARS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def with_lora(model: Any, bf16: bool = True) -> Any:
    """PEFT LoRA on every projection, no dropout; adapters cast to bf16 (DeepSpeed's ZeRO 0-2
    engine does) unless ``bf16`` is False."""
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(model, LoraConfig(r=8, target_modules=LINEARS, lora_dropout=0.0))
    if bf16:
        for p in model.parameters():
            if p.requires_grad:
                p.data = p.data.to(torch.bfloat16)
    return model


@contextmanager
def counting() -> Iterator[Callable[[], int]]:
    """Within the block, every tensor autograd saves is noted once per storage; the yielded
    function gives their bytes so far."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.numel():
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield lambda: sum(seen.values())
