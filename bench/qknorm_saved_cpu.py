"""What Qwen3's q_norm and k_norm save for backward, on the CPU: one
forward of a tiny Qwen3 against a tiny Llama of the same sizes (Qwen3 = Llama's layer + RMSNorm on
q and k per head), full fine-tuning and LoRA, bf16, unique storages seen by
torch.autograd.graph.saved_tensors_hooks. transformers' norms only (Liger's are CUDA kernels).

    python bench/qknorm_saved_cpu.py
"""

from typing import Any

import torch
from saved_tensors import counting, with_lora
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, TOKENS = 256, 4, 8, 4, 64, 2 * 256
SIZES = {"hidden_size": HIDDEN, "intermediate_size": 688, "num_hidden_layers": LAYERS,
         "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM,
         "vocab_size": 1000, "max_position_embeddings": 512, "tie_word_embeddings": True,
         "attention_bias": False}  # fmt: skip


def saved_bytes(config: Any, model_cls: Any, method: str) -> int:
    torch.manual_seed(0)
    model = model_cls(config(**SIZES)).to(torch.bfloat16)
    model.config._attn_implementation = "sdpa"
    if method == "lora":
        model = with_lora(model)
    ids = torch.randint(0, 1000, (2, 256))
    with counting() as saved:
        model(input_ids=ids, labels=ids)
    return saved()


def main() -> None:
    qk = (HEADS + KV_HEADS) * HEAD_DIM
    print("| method | Qwen3 - Llama, bytes | per q/k value per token per layer |")
    print("|---|---|---|")
    for method in ("full", "lora"):
        d = saved_bytes(Qwen3Config, Qwen3ForCausalLM, method) - saved_bytes(
            LlamaConfig, LlamaForCausalLM, method
        )
        print(f"| {method} | {d:,} | {d / (TOKENS * LAYERS * qk):.3f} |")


if __name__ == "__main__":
    main()
