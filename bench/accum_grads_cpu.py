"""Where a micro-batch's gradients wait for the next one under gradient accumulation, on the CPU.

DeepSpeed's engine on a tiny Llama (one CPU process, gloo), ZeRO-0/1/2, bf16,
gradient_accumulation_steps 2: after the first micro-batch's backward, before the second one's
forward, which tensors still hold gradients (``param.grad``, and every tensor the ZeRO optimizer
keeps, by attribute). The estimate's loss phase (the start of the backward, before any layer's
grad is made) stands beside them when they exist (docs/estimate.md, "Runs without DeepSpeed"
and "The formula"). Measured: ZeRO-0 and ZeRO-1 keep ``param.grad`` (every bf16 grad), ZeRO-2
``all_grad_tensors`` (its partition's, stage_1_and_2.py); ``fp16_groups``/``bit16_*`` are views of
the parameters themselves and ``fp32_groups`` the master copy, there in any case.

    .venv/bin/python bench/accum_grads_cpu.py
"""

import collections
import os
from typing import Any

import torch


def tensors_in(obj: Any, path: str, seen: set[int], depth: int = 0) -> list[tuple[str, int]]:
    """(attribute path, bytes) of the tensors an object holds, three levels down."""
    if id(obj) in seen or depth > 3:
        return []
    seen.add(id(obj))
    if torch.is_tensor(obj):
        return [(path, obj.numel() * obj.element_size())]
    items: list[tuple[str, Any]] = []
    if isinstance(obj, dict):
        items = [(f"{path}[{k!r}]", v) for k, v in obj.items()]
    elif isinstance(obj, list | tuple):
        items = [(f"{path}[{i}]", v) for i, v in enumerate(obj)]
    elif hasattr(obj, "__dict__") and not isinstance(obj, torch.nn.Module):
        items = [(f"{path}.{k}", v) for k, v in vars(obj).items()]
    return [t for p, v in items for t in tensors_in(v, p, seen, depth + 1)]


def waiting(stage: int) -> dict[str, int]:
    import deepspeed
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, vocab_size=256)  # fmt: skip
    model = LlamaForCausalLM(cfg)
    ds = {
        "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2,
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": stage, "contiguous_gradients": True, "overlap_comm": False},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "torch_adam": True}},
    }  # fmt: skip
    engine, opt, _, _ = deepspeed.initialize(
        model=model, model_parameters=model.parameters(), config=ds
    )
    ids = torch.randint(0, 256, (1, 32))
    engine.backward(engine(input_ids=ids, labels=ids).loss)
    engine.step()  # not a boundary: the optimizer does not step
    held: collections.Counter[str] = collections.Counter()
    grads = [p.grad for p in engine.module.parameters() if p.grad is not None]
    held["param.grad"] = sum(g.numel() * g.element_size() for g in grads)
    for path, size in tensors_in(opt, "optimizer", set()):
        held[path.split("[")[0]] += size
    held["(bf16 params)"] = sum(p.numel() * 2 for p in engine.module.parameters())
    return held


def main() -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533", RANK="0", WORLD_SIZE="1",
                      LOCAL_RANK="0")  # fmt: skip
    for stage in (0, 1, 2):
        held = waiting(stage)
        print(f"ZeRO-{stage}, between micro-batches: "
              + ", ".join(f"{k} {v:,} B" for k, v in held.items() if v))  # fmt: skip


if __name__ == "__main__":
    main()
    from steps import leave_process_group

    leave_process_group()
