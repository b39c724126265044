"""What one forward of a tiny Llama saves for backward under DeepSpeed ZeRO-2 and ZeRO-3, on the
CPU: unique storages seen by torch.autograd.graph.saved_tensors_hooks.

    python bench/zero3_saved_cpu.py            # one process per case; prints a markdown table

ZeRO-3 runs under deepspeed.zero.Init (as transformers' from_pretrained does under a ZeRO-3
config), which replaces torch.nn.functional.linear with DeepSpeed's LinearFunctionForZeroStage3;
the "F.linear restored" case puts torch's back to show what that replacement keeps.
"""

import json
import os
import subprocess
import sys
from typing import Any

CASES = [(2, "full", 0), (3, "full", 0), (2, "lora", 0), (3, "lora", 0), (3, "lora", 1)]
HIDDEN, INTER, LAYERS, TOKENS = 256, 688, 4, 2 * 256


def one(stage: int, method: str, restore: int) -> dict[str, object]:
    os.environ.update(DS_ACCELERATOR="cpu", MASTER_ADDR="127.0.0.1", MASTER_PORT="29533",
                      RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")  # fmt: skip
    import deepspeed
    import torch
    from saved_tensors import counting, with_lora
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=HIDDEN, intermediate_size=INTER, num_hidden_layers=LAYERS,
                      num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
                      max_position_embeddings=512, tie_word_embeddings=True)  # fmt: skip
    ds = {"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True},
          "zero_optimization": {"stage": stage}, "zero_allow_untested_optimizer": True}  # fmt: skip
    model: Any
    if stage == 3:
        with deepspeed.zero.Init(config_dict_or_path=ds):
            model = LlamaForCausalLM(cfg)
    else:
        model = LlamaForCausalLM(cfg)
    if restore:
        from deepspeed.runtime.zero.partition_parameters import (
            InsertPostInitMethodToModuleSubClasses as Patched,
        )

        torch.nn.functional.linear = Patched.linear_bk
    if method == "lora":
        # adapters as DeepSpeed leaves them: cast to bf16 at ZeRO 0-2, fp32 at ZeRO-3
        model = with_lora(model, bf16=False)
    trainable = [p for p in model.parameters() if p.requires_grad]
    engine, *_ = deepspeed.initialize(
        model=model, optimizer=torch.optim.AdamW(trainable, lr=1e-4), config=ds
    )
    ids = torch.randint(0, 1000, (2, 256))
    for _ in range(2):  # the second step: after DeepSpeed's first-step set-up
        with counting() as saved:
            loss = engine(input_ids=ids, labels=ids).loss
        total = saved()
        engine.backward(loss)
        engine.step()
    adapters = {str(p.dtype) for p in trainable} if method == "lora" else set()
    return {"stage": stage, "method": method, "F.linear restored": bool(restore),
            "adapters": ",".join(sorted(adapters)), "saved_bytes": total}  # fmt: skip


def main() -> None:
    if len(sys.argv) == 4:
        print(json.dumps(one(int(sys.argv[1]), sys.argv[2], int(sys.argv[3]))))
        return
    rows = []
    for stage, method, restore in CASES:
        cmd = [sys.executable, __file__, str(stage), method, str(restore)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
    print("| stage | method | adapters | F.linear restored | saved MB | B per token per layer |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        b = int(str(r["saved_bytes"]))
        print(f"| {r['stage']} | {r['method']} | {r['adapters'] or '-'} | "
              f"{'yes' if r['F.linear restored'] else 'no'} | {b / 1e6:.3f} | "
              f"{b / (TOKENS * LAYERS):,.0f} |")  # fmt: skip


if __name__ == "__main__":
    main()
    from steps import leave_process_group

    leave_process_group()
