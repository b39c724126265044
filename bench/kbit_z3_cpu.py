"""What ZeRO-3 partitions of a 4-bit (QLoRA) model, on two CPU processes (gloo).

A tiny Llama saved in bf16, loaded as transformers loads dojo's QLoRA at ZeRO-3 (NF4, double
quantization, ``bnb_4bit_quant_storage=bfloat16``; transformers skips zero.Init for quantized
models, so each process holds the whole 4-bit model first), LoRA all-linear on it, then
DeepSpeed's ZeRO-3 engine. Per rank, before and after the engine: the packed 4-bit data
(``Params4bit``, partitioned into ``ds_tensor``) and bitsandbytes' quantization statistics (the
weight's ``quant_state``: absmax, the nested constants and code books), which are not
parameters. Measured: the data is split in two, the statistics stay whole on both ranks
(docs/estimate.md, "QLoRA storage"), and a step trains.

    .venv/bin/python bench/kbit_z3_cpu.py
"""

import json
import os
import tempfile
from typing import Any

import torch
import torch.multiprocessing as mp


def state_bytes(st: Any) -> int:
    """Bytes of the tensors of one bitsandbytes QuantState (and its nested one)."""
    if st is None:
        return 0
    out = sum(t.numel() * t.element_size() for t in (st.absmax, st.code) if torch.is_tensor(t))
    return out + (state_bytes(st.state2) if getattr(st, "nested", False) else 0)


def four_bit(model: Any) -> list[Any]:
    return [p for p in model.parameters() if type(p).__name__ == "Params4bit"]


def rank_main(rank: int, world: int, folder: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29561", RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(rank))  # fmt: skip
    import deepspeed
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    deepspeed.init_distributed(dist_backend="gloo")
    q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                           bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.bfloat16,
                           bnb_4bit_quant_storage=torch.bfloat16)  # fmt: skip
    model = AutoModelForCausalLM.from_pretrained(
        folder, quantization_config=q, dtype=torch.bfloat16
    )
    data_before = sum(p.numel() * p.element_size() for p in four_bit(model))
    stats_before = sum(state_bytes(p.quant_state) for p in four_bit(model))
    model = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear"))
    ds = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
          "zero_optimization": {"stage": 3},
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "torch_adam": True}}}  # fmt: skip
    trained = [p for p in model.parameters() if p.requires_grad]
    engine, *_ = deepspeed.initialize(model=model, model_parameters=trained, config=ds)
    params = four_bit(engine.module)
    ids = torch.randint(0, 512, (1, 16))
    loss = engine(input_ids=ids, labels=ids).loss
    engine.backward(loss)
    engine.step()
    print(json.dumps({
        "rank": rank,
        "4-bit data before the engine, B": data_before,
        "4-bit data partition after, B": sum(p.ds_tensor.numel() * 2 for p in params),
        "quant statistics before, B": stats_before,
        "quant statistics after, B": sum(state_bytes(p.quant_state) for p in params),
        "loss": round(float(loss), 4),
    }), flush=True)  # fmt: skip


def main() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = tempfile.mkdtemp()
    cfg = LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, vocab_size=512)  # fmt: skip
    LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(folder)
    os.environ["DS_ACCELERATOR"] = "cpu"
    mp.spawn(rank_main, args=(2, folder), nprocs=2)


if __name__ == "__main__":
    main()
    from steps import leave_process_group

    leave_process_group()
