"""What a mixture-of-experts layer keeps for backward, on the CPU, and what LoRA "all-linear"
adapts in it: one forward of a tiny Qwen3-MoE / Qwen2-MoE / Mixtral (transformers' default
grouped_mm experts) against the same model with a dense MLP as wide as a token's active experts
(intermediate = top-k x expert width, + the shared expert), bf16, unique storages seen by
torch.autograd.graph.saved_tensors_hooks (bench/saved_tensors.py).

    python bench/moe_saved_cpu.py
"""

from typing import Any

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
)

H, LAYERS, E, K, EI, ROWS, SEQ = 256, 2, 16, 4, 128, 2, 256
TOKENS = ROWS * SEQ
BASE = {"hidden_size": H, "num_hidden_layers": LAYERS, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 1000,
        "max_position_embeddings": 512, "tie_word_embeddings": True}  # fmt: skip
MOE = {
    "qwen3_moe": ("qwen3", {"num_experts": E, "num_experts_per_tok": K, "moe_intermediate_size": EI,
                            "intermediate_size": K * EI, "norm_topk_prob": True}),
    "qwen2_moe": ("qwen2", {"num_experts": E, "num_experts_per_tok": K, "moe_intermediate_size": EI,
                            "shared_expert_intermediate_size": 2 * EI,
                            "intermediate_size": (K + 2) * EI, "qkv_bias": True}),
    "mixtral": ("mistral", {"num_local_experts": E, "num_experts_per_tok": K,
                            "intermediate_size": EI}),
}  # fmt: skip


def build(kind: str, extra: dict[str, Any]) -> Any:
    torch.manual_seed(0)
    cfg = AutoConfig.for_model(kind, **BASE, **extra)
    model = AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16)
    model.config._attn_implementation = "sdpa"
    return model


def lora(model: Any) -> tuple[Any, list[str]]:
    """PEFT all-linear, r 8, no dropout, bf16 adapters; the adapted module names of layer 0."""
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(model, LoraConfig(r=8, target_modules="all-linear", lora_dropout=0.0))
    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.to(torch.bfloat16)
    names = [n.split("layers.0.", 1)[1].rsplit(".lora_A", 1)[0]
             for n, _ in model.named_modules() if "layers.0." in n and n.endswith("lora_A")]  # fmt: skip
    return model, names


def saved(model: Any, seq: int = SEQ) -> int:
    """Bytes saved for backward, the model's own parameters left out (a saved weight that is a
    parameter costs nothing extra)."""
    params = {
        p.untyped_storage().data_ptr(): p.untyped_storage().nbytes() for p in model.parameters()
    }
    ids = torch.randint(0, 1000, (ROWS, seq))
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.numel() and t.untyped_storage().data_ptr() not in params:
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=ids, labels=ids)
    return sum(seen.values())


def per_layer(moe: Any, dense: Any) -> tuple[float, float]:
    """(bytes per token per layer, bytes per layer whatever the tokens) the MoE layer saves
    beyond the dense one: from two sequence lengths."""
    d1 = saved(moe, SEQ // 2) - saved(dense, SEQ // 2)
    d2 = saved(moe, SEQ) - saved(dense, SEQ)
    slope = (d2 - d1) / (ROWS * SEQ // 2) / LAYERS
    return slope, (d2 / LAYERS - slope * TOKENS)


def main() -> None:
    print(
        "| model | method | per token per layer, B | / hidden | fixed per layer, B "
        "| / expert params (E x 3 x h x i) |"
    )
    print("|---|---|---|---|---|---|")
    for kind, (dense_kind, extra) in MOE.items():
        dense_extra = {"intermediate_size": extra["intermediate_size"] if kind != "mixtral"
                       else K * EI}  # fmt: skip
        for method in ("full", "lora"):
            moe, dense = build(kind, extra), build(dense_kind, dense_extra)
            if kind == "qwen2_moe":
                dense.config.qkv_bias = True
            if method == "lora":
                moe, names = lora(moe)
                dense, _ = lora(dense)
                print(f"<!-- {kind} all-linear adapts: {', '.join(sorted(names))} -->")
            per, fixed = per_layer(moe, dense)
            experts = E * 3 * H * EI
            print(
                f"| {kind} | {method} | {per:,.0f} | {per / H:.2f} | {fixed:,.0f} "
                f"| {fixed / experts:.2f} |"
            )


if __name__ == "__main__":
    main()
