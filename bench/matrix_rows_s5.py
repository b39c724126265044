"""Session 5 memory rows (issue 12): a NEW held-out set for `dojo estimate`.

Committed before any of these rows was measured, against the estimator of the same commit (no
estimator change after it counts for these rows); every row is split="held": nothing may be
fitted on them, they only judge the estimator (bench/memory_heldout.py).

    source bench/gpu_setup.sh && python3 bench/memory_parallel.py --rows s5 --out $OUT/mem_s5.json

Shapes: two never measured before, q3b = Qwen2.5-3B (tied, GQA 16/2, 152k vocab, qkv bias) and
tl1b = TinyLlama-1.1B (untied, GQA 32/4, 32k vocab, Llama-2 style), plus earlier shapes at
settings not run before: q15 = Qwen2.5-1.5B, q3 = Qwen3-1.7B, q05, q06, l3b, g2b, m7b.
Coverage: dojo and plain rows; ZeRO 0-3 and no DeepSpeed; full/LoRA/QLoRA; 1k-8k tokens per
row; checkpointing, Liger and packing on and off; dojo's session-5 defaults (adapters at
ZeRO-1/2 in one reduce bucket without overlap_comm, ZeRO-3 decoder-layer leaves); one CPU
offload row.
"""

from matrix_rows_s4 import Row

D, P, H = "dojo", "plain", "held"
ROWS: list[Row] = [
    # Qwen2.5-3B (new shape)
    Row(H, D, "q3b", 2, micro_batch=1, seq_len=4096),
    Row(H, D, "q3b", 3, "lora", micro_batch=2, seq_len=2048),
    Row(H, D, "q3b", 2, "lora", micro_batch=4, seq_len=2048, packing=False),
    Row(H, D, "q3b", 0, "qlora", micro_batch=2, seq_len=8192, grad_ckpt=True),
    Row(H, P, "q3b", 2, "lora", micro_batch=2, seq_len=2048),
    # TinyLlama-1.1B (new shape)
    Row(H, D, "tl1b", 1, micro_batch=8, seq_len=1024),
    Row(H, D, "tl1b", 2, micro_batch=4, seq_len=2048, grad_ckpt=True, liger=False, packing=False),
    Row(H, D, "tl1b", 3, micro_batch=4, seq_len=2048),
    Row(H, P, "tl1b", 3, micro_batch=4, seq_len=2048, grad_ckpt=True),
    Row(H, P, "tl1b", 2, micro_batch=4, seq_len=2048),
    # earlier shapes, new settings
    Row(H, D, "q15", 2, "lora", micro_batch=4, seq_len=1024, liger=False),
    Row(H, D, "q15", 2, micro_batch=4, seq_len=2048, grad_ckpt=True, offload="cpu"),
    Row(H, P, "q15", 0, micro_batch=2, seq_len=2048),
    Row(H, D, "q3", 3, micro_batch=2, seq_len=4096, grad_ckpt=True, liger=False),
    Row(H, P, "q3", -1, "qlora", micro_batch=4, seq_len=2048, grad_ckpt=True),
    Row(H, D, "g2b", 2, "lora", micro_batch=2, seq_len=4096, grad_ckpt=True),
    Row(H, P, "g2b", 3, "lora", micro_batch=2, seq_len=2048, grad_ckpt=True),
    Row(H, D, "q06", 0, "lora", micro_batch=4, seq_len=4096),
    Row(H, D, "q05", 3, "qlora", micro_batch=8, seq_len=2048, grad_ckpt=True),
    Row(H, D, "l3b", 1, "lora", micro_batch=2, seq_len=4096, grad_ckpt=True, liger=False),
    Row(H, D, "m7b", 2, "lora", micro_batch=1, seq_len=8192, grad_ckpt=True),
    Row(H, P, "m7b", -1, "lora", micro_batch=2, seq_len=2048, grad_ckpt=True),
]
