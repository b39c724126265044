"""Session 10 memory rows (issue 12): a NEW held-out set for `dojo estimate`, not yet measured.

Committed in session 8, before any of these rows ran, against the estimator of the same commit
(expandable segments as dojo train's default, their 0.6-block reserve without Liger, compile's
silu(gate) recompute, the MoE-aware ZeRO-3 sub-group walk). Every row is "held".

    MEM_ARGS="--rows s10 --parallel 7" LIMIT_S=540 bash bench/gpu.sh memory

What they probe:
- the two session-9 rows the call's limit cut (compile LoRA at ZeRO-1, the plain script);
- full fine-tuning with Liger under expandable segments, where the estimate's reserve is 0 and
  three measured rows held 1.0-4.3 GiB (sessions 6 and 9: Qwen3-0.6B 2 x 8192 -23.5%, Qwen2.5-1.5B
  -6.9%): the weak spot of the new default;
- rows that missed under the default allocator in session 7 (Qwen2.5-0.5B full ZeRO-1 without
  Liger +12.8%, Qwen3-0.6B QLoRA without Liger +59.3%), now under dojo's default allocator;
- compile LoRA on three more shapes (Mistral-7B was cut in session 8);
- the plain script (PyTorch's default allocator) on two settings.
"""

from matrix_rows_s8 import Row

D, P, H = "dojo", "plain", "held"
EXP = "expandable_segments:True"  # dojo train's default on CUDA from session 8
_NL = {"liger": False, "alloc": EXP}
ROWS: list[Row] = [
    # first: the largest and slowest to start (cut by the limit in session 8)
    Row(H, D, "m7b", 2, "lora", micro_batch=2, seq_len=4096, compile="on", **_NL),
    # cut in session 9
    Row(H, D, "q15", 1, "lora", micro_batch=2, seq_len=2048, compile="on", **_NL),
    Row(H, P, "q15", 2, "lora", micro_batch=2, seq_len=2048),
    # full fine-tuning with Liger under expandable segments
    Row(H, D, "l1b", 2, micro_batch=4, seq_len=2048, alloc=EXP),
    Row(H, D, "q06", 2, micro_batch=2, seq_len=4096, grad_ckpt=True, alloc=EXP),
    Row(H, D, "l3b", 3, micro_batch=2, seq_len=2048, grad_ckpt=True, alloc=EXP),
    Row(H, D, "g2b", 2, micro_batch=1, seq_len=2048, grad_ckpt=True, alloc=EXP),
    Row(H, D, "q3", 2, micro_batch=4, seq_len=2048, grad_ckpt=True, alloc=EXP),
    # session-7 misses, now under dojo's default allocator
    Row(H, D, "q05", 1, micro_batch=2, seq_len=4096, **_NL),
    Row(H, D, "q06", 0, "qlora", micro_batch=4, seq_len=2048, grad_ckpt=True, **_NL),
    # compile LoRA (compile's auto: packed, ZeRO 0-2, no checkpointing)
    Row(H, D, "l3b", 1, "lora", micro_batch=8, seq_len=1024, compile="on", **_NL),
    Row(H, D, "g2b", 0, "lora", micro_batch=2, seq_len=2048, compile="on", **_NL),
    # the plain script
    Row(H, P, "l1b", 2, micro_batch=4, seq_len=2048),
    Row(H, P, "m7b", 2, "lora", micro_batch=4, seq_len=2048, grad_ckpt=True),
]
