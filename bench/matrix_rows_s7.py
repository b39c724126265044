"""Session 7 memory rows (issue 12): a NEW held-out set for `dojo estimate`, not yet measured.

Committed in session 6, before any of these rows ran, against the estimator of the same commit
(with session 6's ZeRO-3 sub-group model); every row is split="held": nothing may be fitted on
them, they only judge the estimator (bench/memory_heldout.py).

    source bench/gpu_setup.sh && python3 bench/memory_parallel.py --rows s7 --out $OUT/mem_s7.json

What they probe: ZeRO-3 full fine-tuning under dojo's 1e8 sub-group tile on shapes whose
embedding is larger than the tile (Llama-3.2-1B/3B 128k, Qwen2.5 152k, Gemma-2 256k) and on
Mistral-7B's small one; dojo without Liger at micro-batch 1-8 (the reserve that was 0.5-0.9 of a
logits block on some rows and 3-7 on others); the plain script at the same settings; Liger rows as
controls. Default allocator everywhere (no dojo command sets expandable segments).
"""

from matrix_rows_s4 import Row

D, P, H = "dojo", "plain", "held"
ROWS: list[Row] = [
    # ZeRO-3 full, embeddings larger than dojo's 1e8 tile
    Row(H, D, "l1b", 3, micro_batch=2, seq_len=2048),
    Row(H, D, "l3b", 3, micro_batch=2, seq_len=2048, grad_ckpt=True),
    Row(H, D, "q15", 3, micro_batch=4, seq_len=1024, liger=False),
    Row(H, D, "g2b", 3, micro_batch=2, seq_len=2048, grad_ckpt=True),
    Row(H, D, "q3b", 3, micro_batch=1, seq_len=4096, grad_ckpt=True, liger=False),
    Row(H, D, "tl1b", 3, micro_batch=8, seq_len=1024),
    Row(H, P, "l3b", 3, micro_batch=2, seq_len=2048, grad_ckpt=True),
    Row(H, P, "g2b", 3, micro_batch=1, seq_len=2048, grad_ckpt=True),
    # dojo without Liger, micro-batch 1-8 (packed)
    Row(H, D, "l1b", 2, "lora", micro_batch=1, seq_len=8192, liger=False),
    Row(H, D, "l1b", 2, "lora", micro_batch=2, seq_len=4096, liger=False),
    Row(H, D, "l1b", 2, "lora", micro_batch=8, seq_len=1024, liger=False),
    Row(H, D, "q05", 1, micro_batch=2, seq_len=4096, liger=False),
    Row(H, D, "q06", 0, "qlora", micro_batch=4, seq_len=2048, grad_ckpt=True, liger=False),
    Row(H, D, "m7b", 2, "lora", micro_batch=4, seq_len=2048, grad_ckpt=True, liger=False),
    Row(H, D, "q3", 2, micro_batch=4, seq_len=2048, grad_ckpt=True, liger=False),
    # the plain script at nearby settings
    Row(H, P, "l1b", 2, "lora", micro_batch=2, seq_len=4096),
    Row(H, P, "q05", 1, micro_batch=2, seq_len=4096),
    Row(H, P, "m7b", 2, "lora", micro_batch=4, seq_len=2048, grad_ckpt=True),
    Row(H, P, "q3", -1, "lora", micro_batch=4, seq_len=2048),
    # Liger controls
    Row(H, D, "l1b", 2, "lora", micro_batch=2, seq_len=4096),
    Row(H, D, "q3", 2, micro_batch=4, seq_len=2048, grad_ckpt=True),
    Row(H, D, "q15", 0, "qlora", micro_batch=8, seq_len=2048, grad_ckpt=True),
]
