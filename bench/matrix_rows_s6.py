"""Session 6 memory rows (issue 12): a NEW held-out set for `dojo estimate`.

Committed before any of these rows was measured, against the estimator of the same commit; every
row is split="held": nothing may be fitted on them, they only judge the estimator
(bench/memory_heldout.py).

    source bench/gpu_setup.sh && python3 bench/memory_parallel.py --rows s6 --out $OUT/mem_s6.json

What is new here: PyTorch's expandable segments (``expandable=True``: the run's
PYTORCH_CUDA_ALLOC_CONF, and the estimate's reserve term is 0 by design; never measured before),
including the three session-5 misses (dojo without Liger) re-run under it; dojo's session-6
ZeRO defaults (bf16.check_grad_overflow false, ZeRO-3 sub_group_size 1e8 with the optimizer on
the GPU: the step transient is 6 B x 1e8); fresh rows of the caching allocator without expandable
segments for both systems. Shapes as in bench/memory_matrix.py SHAPES (eight architectures:
Llama-3.2-1B/3B, TinyLlama, Qwen2.5-0.5B/1.5B/3B, Qwen3-0.6B/1.7B, Gemma-2-2B, Mistral-7B).
"""

from matrix_rows_s4 import Row

D, P, H = "dojo", "plain", "held"
ROWS: list[Row] = [
    # dojo under expandable segments
    Row(H, D, "l1b", 2, micro_batch=4, seq_len=2048, liger=False, expandable=True),
    Row(H, D, "q15", 2, "lora", micro_batch=4, seq_len=1024, liger=False, expandable=True),
    Row(
        H,
        D,
        "l3b",
        1,
        "lora",
        micro_batch=2,
        seq_len=4096,
        grad_ckpt=True,
        liger=False,
        expandable=True,
    ),  # fmt: skip
    Row(H, D, "q3", 3, micro_batch=2, seq_len=4096, grad_ckpt=True, liger=False, expandable=True),
    Row(H, D, "q3b", 2, micro_batch=1, seq_len=4096, expandable=True),
    Row(H, D, "tl1b", 3, micro_batch=4, seq_len=2048, expandable=True),
    Row(H, D, "g2b", 2, "lora", micro_batch=2, seq_len=2048, liger=False, expandable=True),
    Row(H, D, "q05", 0, "qlora", micro_batch=4, seq_len=4096, grad_ckpt=True, expandable=True),
    Row(H, D, "m7b", 3, "lora", micro_batch=2, seq_len=2048, grad_ckpt=True, expandable=True),
    Row(H, D, "l3b", 3, micro_batch=1, seq_len=4096, grad_ckpt=True, expandable=True),
    Row(
        H, D, "q06", 2, micro_batch=2, seq_len=8192, grad_ckpt=True, packing=False, expandable=True
    ),  # fmt: skip
    # dojo, PyTorch's default allocator
    Row(H, D, "q15", 2, "lora", micro_batch=2, seq_len=2048, liger=False),
    Row(H, D, "tl1b", 1, micro_batch=4, seq_len=2048, liger=False),
    Row(H, D, "q3b", 3, "lora", micro_batch=2, seq_len=2048, grad_ckpt=True),
    Row(H, D, "g2b", 3, micro_batch=1, seq_len=2048, grad_ckpt=True),
    Row(H, D, "l1b", 0, "lora", micro_batch=8, seq_len=1024, liger=False),
    # the plain HF Trainer + DeepSpeed script
    Row(H, P, "l1b", 2, micro_batch=4, seq_len=2048),
    Row(H, P, "q3b", 3, micro_batch=1, seq_len=2048, grad_ckpt=True),
    Row(H, P, "tl1b", 2, "lora", micro_batch=4, seq_len=2048),
    Row(H, P, "q06", -1, "qlora", micro_batch=2, seq_len=4096, grad_ckpt=True),
    Row(H, P, "m7b", 2, "lora", micro_batch=1, seq_len=4096, grad_ckpt=True),
    Row(H, P, "q15", 3, "lora", micro_batch=4, seq_len=2048),
]
