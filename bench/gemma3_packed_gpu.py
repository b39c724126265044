"""Where a packed Gemma-3 micro-batch of two rows spends GPU memory under SDPA (an open question).

heldout-users-next's Gemma-3-1B LoRA row without DeepSpeed, 2 x 8192 packed, peaked 0.61 GiB of
allocated memory above the estimate; the Gemma-3 rows of one packed row (1 x 8k-32k, ZeRO-2) are
within -3%..+3%. On the CPU (a live-tensor tracker, tiny Gemma-3 with the real attention shape)
every square-size tensor is what the estimate charges and b=2 costs exactly twice b=1, so what
is left is on CUDA's side: which SDPA kernel takes a masked call (cuDNN's attention, whose
workspace the allocator counts, or the memory-efficient one) and what its backward allocates.
This measures it on the GPU, in two parts:

    source bench/gpu_setup.sh && python3 bench/gemma3_packed_gpu.py sdpa
        one masked SDPA call (4 heads, 1 kv head repeated, head_dim 256, three packed samples a
        row), forward + backward, under the default, memory-efficient and cuDNN backends, at
        1 x 8192, 2 x 8192 and 1 x 16384: GiB kept for the backward and the backward's peak
    source bench/gpu_setup.sh && python3 bench/gemma3_packed_gpu.py model
        Gemma-3-1B's real shape (26 layers, random bf16 weights), LoRA r 16 on all linear layers,
        reentrant checkpointing, a loss on the last hidden state (no head, so no Liger): the same
        shapes and 2 x 4096, 1 x 4096; run it again with TORCH_CUDNN_SDPA_DEPRIORITIZED=1 to see
        the memory-efficient kernel's share

About a minute each on an H100. Compare b=2 x 8192 against 1 x 16384 (same tokens): a difference
beyond the 0.25 GiB of bool masks the estimate already counts is the CUDA-side term.
"""

import sys
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

GIB = 2**30
DEV = "cuda"
SHAPES = [(1, 8192), (2, 8192), (1, 16384), (2, 4096), (1, 4096)]


def positions(b: int, s: int) -> torch.Tensor:
    """Three packed samples a row (1/2, 1/4, 1/4 of it): position_ids restart per sample."""
    lengths = [s // 2, s // 4, s - s // 2 - s // 4]
    row = torch.cat([torch.arange(n) for n in lengths])
    return row[None].expand(b, -1).contiguous().to(DEV)


def packed_mask(b: int, s: int) -> torch.Tensor:
    """The bool [b, 1, s, s] mask transformers builds for packed rows: causal within a sample."""
    p = positions(b, s)
    sample = (torch.diff(p, prepend=p[:, :1] - 1) != 1).cumsum(-1)
    i = torch.arange(s, device=DEV)
    causal = i[None, :, None] >= i[None, None, :]
    return (causal & (sample[:, :, None] == sample[:, None, :]))[:, None]


def one_call() -> None:
    for backend in ("default", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION"):
        for b, s in SHAPES[:3]:
            try:
                q = torch.randn(b, 4, s, 256, device=DEV, dtype=torch.bfloat16, requires_grad=True)
                kv = torch.randn(b, 1, s, 256, device=DEV, dtype=torch.bfloat16, requires_grad=True)
                k, v = (kv.expand(b, 4, s, 256).contiguous() for _ in range(2))  # repeat_kv
                mask = packed_mask(b, s)
                choice = torch._fused_sdp_choice(q, k, v, mask)
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                before = torch.cuda.memory_allocated()
                ctx = (
                    sdpa_kernel([getattr(SDPBackend, backend)])
                    if backend != "default"
                    else nullcontext()
                )
                with ctx:
                    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
                    kept = torch.cuda.memory_allocated() - before
                    torch.cuda.reset_peak_memory_stats()
                    out.backward(torch.ones_like(out))
                peak = torch.cuda.max_memory_allocated() - before
                print(f"sdpa {backend} (choice {choice}) {b} x {s}: kept {kept / GIB:.3f} GiB, "
                      f"backward peak {peak / GIB:.3f} GiB", flush=True)  # fmt: skip
            except RuntimeError as e:
                print(f"sdpa {backend} {b} x {s}: {str(e)[:200]}", flush=True)


def whole_model() -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import Gemma3TextConfig, Gemma3TextModel

    layer_types = (["sliding_attention"] * 5 + ["full_attention"]) * 5
    cfg = Gemma3TextConfig(
        hidden_size=1152, intermediate_size=6912, num_hidden_layers=26, num_attention_heads=4,
        num_key_value_heads=1, head_dim=256, vocab_size=262144, sliding_window=512,
        query_pre_attn_scalar=256, max_position_embeddings=32768, layer_types=layer_types[:26],
        tie_word_embeddings=True,
    )  # fmt: skip
    cfg._attn_implementation = "sdpa"
    torch.set_default_dtype(torch.bfloat16)
    with torch.device(DEV):
        model = Gemma3TextModel(cfg)
    torch.set_default_dtype(torch.float32)
    model.requires_grad_(False)
    model.enable_input_require_grads()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear"))
    model.train()
    print("SDPA priority", torch._C._get_sdp_priority_order(), flush=True)
    for b, s in SHAPES:
        ids = torch.randint(0, 1000, (b, s), device=DEV)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        with torch.autocast(DEV, dtype=torch.bfloat16):
            hidden = model(input_ids=ids, position_ids=positions(b, s)).last_hidden_state
        loss = hidden.float().pow(2).mean()
        kept = torch.cuda.memory_allocated() - before
        torch.cuda.reset_peak_memory_stats()
        loss.backward()
        peak = torch.cuda.max_memory_allocated() - before
        del hidden, loss
        print(f"model {b} x {s}: kept {kept / GIB:.3f} GiB, backward peak {peak / GIB:.3f} GiB",
              flush=True)  # fmt: skip


if __name__ == "__main__":
    print(torch.__version__, "cuDNN", torch.backends.cudnn.version(), torch.cuda.get_device_name())
    {"sdpa": one_call, "model": whole_model}[sys.argv[1] if len(sys.argv) > 1 else "sdpa"]()
