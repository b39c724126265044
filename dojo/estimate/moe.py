"""What a mixture-of-experts layer adds to the activations (docs/estimate.md, "Mixture of
experts"), bytes. Mechanisms read in transformers 5.24 (integrations/moe.py
grouped_mm_experts_forward, the models' TopKRouter) and PEFT 0.21 (tuners/lora/layer.py
ParamWrapper), counted on the CPU by bench/moe_saved_cpu.py."""

from dojo.estimate.setup import Setup
from dojo.modelspec import ModelSpec

BF16 = 2
FP32 = 4
INT64 = 8
ROUTING_INDEX_TENSORS = 3
"""int64 tensors of k values per token the dispatch keeps: the sort order (perm), the gather
index (perm // k) and the sorted expert ids."""


def experts_train(spec: ModelSpec, s: Setup) -> bool:
    """The fused expert weights get a gradient path: full fine-tuning, or adapters on them
    (PEFT's all-linear on the model types it adapts them in)."""
    if s.run.model.method == "full":
        return True
    return s.lora.target_names is None and spec.lora_adapts_experts


def moe_saved_per_token(spec: ModelSpec, s: Setup) -> int:
    """Bytes per token one MoE layer saves beyond a dense MLP as wide as the token's experts.

    grouped_mm_experts_forward gathers each token's hidden state once per chosen expert
    (S = tokens x k rows) and multiplies every expert's output by its routing weight: the
    product keeps the expert output (2 B x k x h), and the grouped matmul keeps its gathered
    input when the expert weights need a grad (another 2 B x k x h). The router keeps its fp32
    softmax over every expert (4 B x E), the dispatch three int64 index tensors of k values.
    CPU (tiny model, h 256, E 16, k 4): 16.9 h measured against 16.6 h by this count for
    Qwen3-MoE and Mixtral (full, and LoRA with adapted experts); Qwen2-MoE LoRA (experts frozen)
    6.9 h against 6.6 h (its routed experts also lose the dense MLP's shared lora_A input, 2 h).
    """
    if not spec.is_moe:
        return 0
    k, h = spec.experts_per_token, spec.hidden_size
    routed = (2 if experts_train(spec, s) else 1) * BF16 * k * h
    return routed + FP32 * spec.num_experts + ROUTING_INDEX_TENSORS * INT64 * k


def merged_expert_bytes(spec: ModelSpec, s: Setup) -> int:
    """One MoE layer's fused expert weights as the adapters make them, W + scaling x B A.

    PEFT's ParamWrapper parametrizes gate_up_proj and down_proj (_LoraFactorsProxy: one
    baddbmm over the whole [E, out, in] stack), so every forward makes a new bf16 tensor the
    size of the layer's experts, and the grouped matmul keeps it for the input's grad; the
    backward makes its grad (the same size) before the factors' grads. CPU: 2.01 B per expert
    parameter kept per layer (bench/moe_saved_cpu.py). 0 where no adapters sit on the experts
    (full fine-tuning keeps the parameters themselves)."""
    if not spec.is_moe or s.run.model.method == "full" or not experts_train(spec, s):
        return 0
    return BF16 * spec.num_experts * spec.expert_params
