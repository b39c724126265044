"""Session 9 memory rows (issue 12): a NEW held-out set for `dojo estimate`, not yet measured.

Committed in session 8, before any of these rows ran, against the estimator of the same commit:
dojo train now runs under PyTorch's expandable segments by default (``--expandable-segments
auto``), the estimate's reserve there is 0.6 fp32 logits block without Liger (fitted on the
sessions 6 and 8 expandable rows) and compile keeps silu(gate) out of the saved activations.
Every row is "held".

    MEM_ARGS="--rows s9 --parallel 7" LIMIT_S=... bash bench/gpu.sh memory

What they probe: compile's auto LoRA rows under the new allocator default (the upper-mode
reserve of sessions 6-8 without Liger), ZeRO-3 LoRA and QLoRA with Liger, an unpacked Liger full
row (session 6's Qwen3-0.6B unpacked row held 4.25 GiB reserve under expandable segments, -23.5%),
a micro-batch-1 full row without Liger, and the plain script (default allocator).
"""

from matrix_rows_s8 import Row

D, P, H = "dojo", "plain", "held"
EXP = "expandable_segments:True"  # what dojo train sets from session 8 on
ROWS: list[Row] = [
    Row(H, D, "l1b", 2, "lora", micro_batch=4, seq_len=2048, liger=False, compile="on", alloc=EXP),
    Row(H, D, "q15", 1, "lora", micro_batch=2, seq_len=2048, liger=False, compile="on", alloc=EXP),
    Row(H, D, "q15", 2, micro_batch=2, seq_len=4096, grad_ckpt=True, packing=False, alloc=EXP),
    Row(H, D, "l1b", 3, "lora", micro_batch=2, seq_len=4096, grad_ckpt=True, alloc=EXP),
    Row(H, D, "g2b", 1, "qlora", micro_batch=4, seq_len=2048, grad_ckpt=True, alloc=EXP),
    Row(H, D, "q06", 2, micro_batch=1, seq_len=8192, grad_ckpt=True, liger=False, alloc=EXP),
    Row(H, P, "q15", 2, "lora", micro_batch=2, seq_len=2048),
]
