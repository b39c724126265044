"""Session 13 memory rows (issue 12): a NEW held-out set for `dojo estimate`, not yet measured.

Committed in session 11, before any of these rows ran, against the estimator of the same commit
(session 11 added one term: ZeRO-1/2's step under expandable segments keeps the backward's freed
pages reserved when no freed run is as large as the fp32 upcast, `model._step_pages_hole`).
Every row is "held". Rows name their attention and Liger mode, so what ran is what the row says.

    MEM_ARGS="--rows s13 --parallel 7" LIMIT_S=480 bash bench/gpu.sh memory
    python bench/memory_heldout.py bench/results/mem_s13.json

What they probe:
- the new term on three shapes where the kept activations are smaller than the fp32 upcast
  (full ZeRO-1/2 without checkpointing, sdpa_varlen), and one where they are larger;
- the plain script (PyTorch's default allocator) where older sets missed by 12-18% over:
  full ZeRO-3 and ZeRO-2 with checkpointing, and one more full ZeRO-2 row;
- adapters at ZeRO-3 (compile's auto is off there) and Gemma-2 LoRA with the fused loss.
"""

from matrix_rows_s12 import EXP, Row

D, P, H = "dojo", "plain", "held"

_V = {"alloc": EXP, "attn": "sdpa_varlen"}  # --attn auto for packed full Llama/Qwen runs
_C = {"liger_loss": True, "alloc": EXP, "compile": "on", "attn": "sdpa"}  # adapters, ZeRO 0-2
ROWS: list[Row] = [
    # first: the largest and slowest to start
    Row(H, D, "m7b", 3, "qlora", micro_batch=2, seq_len=2048, grad_ckpt=True, alloc=EXP),
    Row(H, D, "l3b", 3, "lora", micro_batch=2, seq_len=4096, grad_ckpt=True, alloc=EXP),
    # full ZeRO-1/2 without checkpointing: kept activations against the fp32 upcast (4 B x P)
    Row(H, D, "q3", 2, micro_batch=1, seq_len=4096, **_V),
    Row(H, D, "q15", 1, micro_batch=1, seq_len=2048, **_V),
    Row(H, D, "l3b", 2, micro_batch=1, seq_len=2048, **_V),
    Row(H, D, "q06", 2, micro_batch=8, seq_len=2048, **_V),  # kept > upcast: norm copy only
    Row(H, D, "g2b", 2, "lora", micro_batch=2, seq_len=4096, **_C),
    # the plain script
    Row(H, P, "l1b", 3, micro_batch=2, seq_len=2048),
    Row(H, P, "q15", 2, micro_batch=1, seq_len=4096, grad_ckpt=True),
    Row(H, P, "q06", 2, micro_batch=4, seq_len=2048),
    Row(H, P, "q3", 3, "lora", micro_batch=4, seq_len=2048, grad_ckpt=True),
]
