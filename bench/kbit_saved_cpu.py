"""What PEFT's k-bit preparation changes in a QLoRA layer's saved tensors, on the CPU.

``prepare_model_for_kbit_training`` casts every parameter that is not 4-bit to fp32 (norms,
embeddings), so without DeepSpeed's engine to cast them back the residual stream is fp32, and
bitsandbytes' ``Linear4bit`` returns its input's dtype: the MLP's gate and up projections come out
in fp32 under bf16 autocast, and what keeps them for the backward (silu, the product) keeps 4 B a
value instead of 2. A tiny Qwen2 (4-bit NF4 through bitsandbytes' CPU path, LoRA all-linear,
bf16 autocast) with and without the preparation; bytes autograd saves per token, by module of
layer 0, and their difference (docs/estimate.md, "Runs without DeepSpeed").

    .venv/bin/python bench/kbit_saved_cpu.py
"""

import tempfile

import torch
from saved_tensors import counting
from transformers import AutoModelForCausalLM, BitsAndBytesConfig, Qwen2Config

HIDDEN, INTER, LAYERS, T = 256, 1024, 2, 512


def build(folder: str, prep: bool) -> torch.nn.Module:
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                           bnb_4bit_compute_dtype=torch.bfloat16, bnb_4bit_use_double_quant=True)  # fmt: skip
    m = AutoModelForCausalLM.from_pretrained(folder, quantization_config=q, dtype=torch.bfloat16,
                                             attn_implementation="sdpa")  # fmt: skip
    if prep:
        m = prepare_model_for_kbit_training(m, use_gradient_checkpointing=False)
    lora = LoraConfig(r=8, target_modules="all-linear", lora_dropout=0.0, task_type="CAUSAL_LM")
    return get_peft_model(m, lora)


def saved_by_module(model: torch.nn.Module) -> dict[str, float]:
    """Bytes per token saved during each leaf module of layer 0, and in the layer as a whole."""
    out: dict[str, float] = {}
    ids = torch.randint(0, 1000, (1, T))
    with torch.autocast("cpu", dtype=torch.bfloat16), counting() as c:
        for name, mod in model.named_modules():
            inner = len(list(mod.children())) == 0 and ".layers.0." in name
            if inner or name.endswith(".layers.0"):
                short = name.split(".layers.0")[1].lstrip(".") or "layer 0"
                mod.register_forward_pre_hook(lambda m, a: setattr(m, "_c0", c()))
                mod.register_forward_hook(
                    lambda m, a, o, short=short: out.__setitem__(short, (c() - m._c0) / T)
                )
        model(ids)
    return out


def main() -> None:
    cfg = Qwen2Config(hidden_size=HIDDEN, intermediate_size=INTER, num_hidden_layers=LAYERS,
                      num_attention_heads=4, num_key_value_heads=2, vocab_size=1000)  # fmt: skip
    folder = tempfile.mkdtemp()
    AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16).save_pretrained(folder)
    plain, prepped = saved_by_module(build(folder, False)), saved_by_module(build(folder, True))
    for name in prepped:
        if plain.get(name) != prepped[name]:
            print(f"{name:45s} {plain.get(name, 0):8.0f} -> {prepped[name]:8.0f} B per token")
    diff = prepped["layer 0"] - plain["layer 0"]
    print(f"layer 0: +{diff:.0f} B per token = {diff / INTER:.2f} x intermediate_size")


if __name__ == "__main__":
    main()
