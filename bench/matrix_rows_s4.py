"""Session 4 memory rows (issue 12): a NEW held-out set for `dojo estimate`.

Committed before any of these rows was measured and before the session-4 refit of the
estimator; every row is split="held": no constant may be fitted on them, they only judge the
estimator (bench/memory_heldout.py). The session-3 rows (bench/matrix_rows.py) were looked at
and used for the session-4 changes; these were not.

    source bench/gpu_setup.sh && python3 bench/memory_parallel.py --rows s4 --out $OUT/mem_s4.json

Shapes (bench/memory_matrix.py SHAPES), four never measured before plus Gemma-2-2B at new
settings: q05 = Qwen2.5-0.5B (tied, GQA 14/2, 152k vocab, hidden 896), q06 = Qwen3-0.6B (tied,
qk-norm, head_dim 128 > hidden/heads, 152k vocab), l3b = Llama-3.2-3B (tied, GQA 24/8, 128k
vocab), m7b = Mistral-7B-v0.3 (untied, 32k vocab), g2b = Gemma-2-2B (256k vocab).
Coverage: dojo and plain (bench/baseline_trainer.py) rows; ZeRO 0-3 and no DeepSpeed; ZeRO-3
full and LoRA/QLoRA under dojo's session-4 ZeRO-3 defaults (decoder layers as z3 leaf modules,
5e8 buckets capped at the model size); seq 512-16384; checkpointing, Liger and packing on and
off; one CPU-offload row; one bitsandbytes paged 8-bit optimizer row.
"""

from dataclasses import dataclass

from matrix_rows import Row as _Row


@dataclass(frozen=True)
class Row(_Row):
    optim: str = "auto"  # dojo only: --optim (auto = adamw_torch_fused)
    expandable: bool = False  # PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (session 5 on)

    def label(self) -> str:
        base = super().label()
        base = base if self.optim == "auto" else f"{base}_{self.optim}"
        return f"{base}_expseg" if self.expandable else base


D, P, H = "dojo", "plain", "held"
ROWS: list[Row] = [
    # Qwen2.5-0.5B
    Row(H, D, "q05", 0, micro_batch=4, seq_len=4096),
    Row(H, D, "q05", 1, micro_batch=16, seq_len=512, optim="paged_adamw_8bit"),
    Row(H, D, "q05", 3, micro_batch=4, seq_len=2048),
    Row(H, D, "q05", 2, micro_batch=1, seq_len=4096, liger=False, packing=False),
    Row(H, P, "q05", 2, micro_batch=2, seq_len=2048),
    Row(H, P, "q05", -1, "lora", micro_batch=2, seq_len=2048),
    # Qwen3-0.6B
    Row(H, D, "q06", 2, micro_batch=1, seq_len=8192, grad_ckpt=True, liger=False),
    Row(H, D, "q06", 3, "lora", micro_batch=4, seq_len=4096, grad_ckpt=True),
    Row(H, D, "q06", 2, "qlora", micro_batch=1, seq_len=16384, grad_ckpt=True),
    Row(H, P, "q06", 3, micro_batch=2, seq_len=2048),
    Row(H, D, "q06", 2, micro_batch=4, seq_len=2048, grad_ckpt=True, offload="cpu"),
    # Llama-3.2-3B
    Row(H, D, "l3b", 3, micro_batch=2, seq_len=4096, grad_ckpt=True),
    Row(H, D, "l3b", 2, "lora", micro_batch=2, seq_len=2048, packing=False),
    Row(H, D, "l3b", 3, "qlora", micro_batch=4, seq_len=4096, grad_ckpt=True),
    Row(H, D, "l3b", 0, "lora", micro_batch=1, seq_len=16384, grad_ckpt=True),
    Row(H, P, "l3b", 2, "lora", micro_batch=2, seq_len=2048, grad_ckpt=True),
    Row(H, P, "l3b", 3, "lora", micro_batch=4, seq_len=2048, grad_ckpt=True),
    # Gemma-2-2B (new settings)
    Row(H, D, "g2b", 3, micro_batch=1, seq_len=4096, grad_ckpt=True),
    Row(H, D, "g2b", 3, "lora", micro_batch=2, seq_len=2048),
    Row(H, D, "g2b", 1, "lora", micro_batch=1, seq_len=4096, grad_ckpt=True, liger=False),
    Row(H, P, "g2b", -1, "lora", micro_batch=2, seq_len=2048, grad_ckpt=True),
    # Mistral-7B-v0.3
    Row(H, D, "m7b", 3, "lora", micro_batch=2, seq_len=4096, grad_ckpt=True),
    Row(H, D, "m7b", 3, "qlora", micro_batch=4, seq_len=2048, grad_ckpt=True, packing=False),
    Row(H, P, "m7b", 2, "qlora", micro_batch=2, seq_len=4096, grad_ckpt=True),
]
