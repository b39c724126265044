"""What PEFT's DoRA and modules_to_save add to LoRA, on the CPU (dojo/estimate/adapter_extras.py):

1. saved for backward: the token-sized tensors one forward of a tiny Llama keeps with DoRA and
   not with LoRA (saved-tensor hooks holding every saved tensor, so none is freed and its
   address reused), per output feature of the adapted projections;
2. the weight-norm transient: the process's peak RSS above its start during one DoRA layer's
   forward (glibc serves these blocks by mmap and returns them on free, so RSS follows them),
   in bytes per in x in (x_eye) and per weight value;
3. modules_to_save: the trainable parameters embed_tokens and lm_head add, tied and untied, with
   the LoraConfig dojo's worker writes (ensure_weight_tying where the model ties them), in V x h.

    python bench/adapter_extras_cpu.py
"""

import os
import subprocess
import sys

import torch
from torch import nn

LINEARS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
H, INTER, HEADS, KV, HEAD_DIM, BATCH, SEQ = 256, 688, 8, 4, 32, 2, 256


def _peft(model: nn.Module, targets: list[str], dora: bool, fp32: bool) -> nn.Module:
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(
        model, LoraConfig(r=8, target_modules=targets, lora_dropout=0.0, use_dora=dora)
    )
    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.to(torch.float32 if fp32 else torch.bfloat16)
    return model


def token_tensors(dora: bool, fp32: bool) -> int:
    """Bytes of the saved tensors shaped [batch, seq, *] after one forward."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=H, intermediate_size=INTER, num_hidden_layers=1,
                      num_attention_heads=HEADS, num_key_value_heads=KV, head_dim=HEAD_DIM,
                      vocab_size=1000, max_position_embeddings=512)  # fmt: skip
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.config._attn_implementation = "sdpa"
    model = _peft(model, LINEARS, dora, fp32)
    kept: dict[int, torch.Tensor] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        kept[id(t)] = t
        return t

    ids = torch.randint(0, 1000, (BATCH, SEQ))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=ids, labels=ids)
    storages = {
        t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
        for t in kept.values()
        if t.dim() == 3 and tuple(t.shape[:2]) == (BATCH, SEQ)
    }
    return sum(storages.values())


def _rss(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    raise RuntimeError(field)


def transient(fan_in: int, fan_out: int, fp32: bool) -> int:
    """Peak RSS above the start during one DoRA linear's forward (run in a fresh process)."""

    class One(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.down_proj = nn.Linear(fan_in, fan_out, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.down_proj(x)

    torch.manual_seed(0)
    model = _peft(One().to(torch.bfloat16), ["down_proj"], True, fp32)
    x = torch.randn(1, 16, fan_in, dtype=torch.bfloat16, requires_grad=True)
    model(x)  # warm: one-time allocations out of the way
    start = _rss("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS
    model(x)
    return _rss("VmHWM") - start


def saved_copies(tied: bool, names: list[str]) -> float:
    """Trainable parameters ``names`` add to LoRA's, in V x h, as dojo's worker configures PEFT."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    vocab = 1000

    def trainable(extra: dict[str, object]) -> int:
        torch.manual_seed(0)
        cfg = LlamaConfig(hidden_size=H, intermediate_size=INTER, num_hidden_layers=1,
                          num_attention_heads=HEADS, num_key_value_heads=KV, head_dim=HEAD_DIM,
                          vocab_size=vocab, tie_word_embeddings=tied)  # fmt: skip
        model = get_peft_model(
            LlamaForCausalLM(cfg), LoraConfig(r=8, target_modules="all-linear", **extra)
        )
        return sum(
            {p.data_ptr(): p.numel() for p in model.parameters() if p.requires_grad}.values()
        )

    extra = {"modules_to_save": list(names), "ensure_weight_tying": tied}
    return (trainable(extra) - trainable({})) / (vocab * H)


def main() -> None:
    if len(sys.argv) == 4:  # the child: one transient
        print(transient(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "fp32"))
        return
    outs = HEADS * HEAD_DIM + 2 * KV * HEAD_DIM + H + 2 * INTER + H
    print("| adapters | DoRA - LoRA saved, B per token per layer | per output feature |")
    print("|---|---|---|")
    for fp32 in (False, True):
        extra = (token_tensors(True, fp32) - token_tensors(False, fp32)) / (BATCH * SEQ)
        print(f"| {'fp32' if fp32 else 'bf16'} | {extra:,.0f} | {extra / outs:.2f} |")
    print()
    print("| adapters | in x out | peak above start, MB | B per weight value beside x_eye |")
    print("|---|---|---|---|")
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    for fp32 in (False, True):
        for fan_in, fan_out in ((8192, 2048), (2048, 8192)):
            args = [sys.executable, __file__, str(fan_in), str(fan_out), "fp32" if fp32 else "bf16"]
            peak = int(subprocess.run(args, env=env, capture_output=True, text=True,
                                      check=True).stdout.split()[-1])  # fmt: skip
            eye = (4 if fp32 else 2) * fan_in * fan_in
            per = (peak - eye) / (fan_in * fan_out)
            kind = "fp32" if fp32 else "bf16"
            print(f"| {kind} | {fan_in} x {fan_out} | {peak / 1e6:,.1f} | {per:.1f} |")
    print()
    print("| head | --modules-to-save | trainable added, V x h |")
    print("|---|---|---|")
    for tied in (True, False):
        for names in (["embed_tokens"], ["lm_head"], ["embed_tokens", "lm_head"]):
            added = saved_copies(tied, names)
            print(f"| {'tied' if tied else 'untied'} | {','.join(names)} | {added:.2f} |")


if __name__ == "__main__":
    main()
