"""Session 16 memory rows (issue 12): a NEW held-out set for `dojo estimate`, not yet measured.

Committed in session 13, before any of these rows ran, against the estimator unchanged since
dc36bc7 (the one that went 14/14 on the session-15 set). Every row is "held". It leans on the
classes where the estimate is weakest in-sample (docs/benchmarks.md, "Estimator held out,
session 13"):
- the plain script's full fine-tuning under PyTorch's default allocator (three in-sample rows
  over by 10.8-13.2%), at ZeRO-1, 2 and 3, with and without checkpointing;
- dojo's full fine-tuning at ZeRO-1/2 without checkpointing, where the optimizer step's pages
  decide the reserve (four in-sample rows outside ±10%, both sides);
- and three settings not measured before: Gemma-2 full ZeRO-3 under eager attention, Mistral-7B
  LoRA without checkpointing, and Qwen3 LoRA at 16k tokens.

    MEM_ARGS="--rows s16 --parallel 7" LIMIT_S=560 bash bench/gpu.sh memory
    python bench/memory_heldout.py bench/results/mem_s16.json
"""

from matrix_rows_s12 import EXP, Row

D, P, H = "dojo", "plain", "held"

_V = {"alloc": EXP, "attn": "sdpa_varlen"}  # --attn auto for packed Llama/Qwen without compile
ROWS: list[Row] = [
    # first: the largest and slowest to start
    Row(H, D, "m7b", 2, "lora", micro_batch=1, seq_len=2048, alloc=EXP, attn="sdpa"),
    Row(H, D, "l3b", 1, micro_batch=1, seq_len=1024, **_V),
    # the plain script's full fine-tuning (PyTorch's default allocator)
    Row(H, P, "tl1b", 2, micro_batch=2, seq_len=2048, grad_ckpt=True),
    Row(H, P, "l1b", 1, micro_batch=2, seq_len=2048),
    Row(H, P, "q15", 3, micro_batch=2, seq_len=2048, grad_ckpt=True),
    Row(H, P, "q06", 3, micro_batch=4, seq_len=2048),
    # dojo's full fine-tuning at ZeRO-1/2 without checkpointing (the step's pages)
    Row(H, D, "q3", 1, micro_batch=2, seq_len=1024, **_V),
    Row(H, D, "tl1b", 2, micro_batch=4, seq_len=1024, **_V),
    # not measured before
    Row(H, D, "g2b", 3, micro_batch=1, seq_len=2048, alloc=EXP, attn="eager"),
    Row(H, D, "q3", 2, "lora", micro_batch=1, seq_len=16384, grad_ckpt=True, **_V),
]
