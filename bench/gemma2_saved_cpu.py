"""What a Gemma-2 layer saves for backward beyond a Llama layer of the same sizes, on the CPU:
four norms a layer, Gemma's norm keeping an fp32 output, and eager
attention's soft-cap (tanh keeps its output). One bf16 forward of each tiny model, unique
storages seen by torch.autograd.graph.saved_tensors_hooks, against dojo's estimate of the same
difference (kept activations + loss phase). transformers' layers only (Liger's are CUDA kernels).

    python bench/gemma2_saved_cpu.py
"""

import sys
from pathlib import Path
from typing import Any

import torch
from transformers import Gemma2Config, Gemma2ForCausalLM, LlamaConfig, LlamaForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from saved_tensors import counting, with_lora  # noqa: E402

from dojo.estimate import Setup  # noqa: E402
from dojo.estimate.activations import activation_phases  # noqa: E402
from dojo.modelspec import from_hf_config  # noqa: E402

SEQ = 512
SIZES: dict[str, Any] = {"hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 4,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 1000,
         "max_position_embeddings": 1024, "tie_word_embeddings": True, "attention_bias": False}  # fmt: skip
GEMMA: dict[str, Any] = {"hidden_activation": "gelu_pytorch_tanh", "sliding_window": 4096,
         "query_pre_attn_scalar": 64}  # fmt: skip


def measured(config: Any, method: str) -> int:
    torch.manual_seed(0)
    gemma = isinstance(config, Gemma2Config)
    cls: Any = Gemma2ForCausalLM if gemma else LlamaForCausalLM
    model = cls(config).to(torch.bfloat16)
    model.config._attn_implementation = "eager" if gemma else "sdpa"
    if method == "lora":
        model = with_lora(model)
    ids = torch.randint(0, SIZES["vocab_size"], (1, SEQ))
    with counting() as saved:
        model(input_ids=ids, labels=ids)
    return saved()


def estimated(config: Any, method: Any, attention: Any) -> int:
    spec = from_hf_config(config.to_dict(), "tiny")
    setup = Setup.of(stage="none", method=method, micro_batch=1, seq_len=SEQ,
                     adapter_dtype="bf16", lora_dropout=0.0, attn=attention)  # fmt: skip
    kept, loss_phase, _, _ = activation_phases(spec, setup)
    return kept + loss_phase


def main() -> None:
    g, ll = Gemma2Config(**SIZES, **GEMMA), LlamaConfig(**SIZES)
    print("| method | measured Gemma-2 - Llama, bytes | estimated | estimate / measured |")
    print("|---|---|---|---|")
    for method in ("full", "lora"):
        m = measured(g, method) - measured(ll, method)
        e = estimated(g, method, "eager") - estimated(ll, method, "sdpa")
        print(f"| {method} | {m:,} | {e:,} | {e / m:.3f} |")


if __name__ == "__main__":
    main()
