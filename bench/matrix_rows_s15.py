"""Session 15 memory rows (issue 12): a NEW held-out set for `dojo estimate`, not yet measured.

Committed in session 12, before any of these rows ran: 9 rows at 6b40e45, then two LoRA ZeRO-3
rows, one QLoRA ZeRO-3 row and two Gemma-2 rows with the estimator changes they probe (ZeRO-3's
frozen linear inputs counted for LoRA; the calibrated ZeRO-3 term kept for full fine-tuning with
Liger's layer kernels only; norms and the soft-cap counted). Judge the set against the commit
that added the Gemma-2 rows. Every row is "held".
Rows name their attention and Liger mode, so what ran is what the row says.

    MEM_ARGS="--rows s15 --parallel 7" LIMIT_S=480 bash bench/gpu.sh memory
    python bench/memory_heldout.py bench/results/mem_s15.json

What they probe:
- the row of the session-14 set the device budget cut (the plain script, Qwen3-0.6B ZeRO-3 LoRA);
- Liger's q/k norms with adapters, where session 14 found the row 8% over with them counted, at
  three shapes (Qwen3-0.6B and Qwen3-1.7B LoRA, one QLoRA), peak in the activations;
- ZeRO-3 full fine-tuning without checkpointing with and without Liger's layer kernels on one
  shape (the calibrated ZeRO-3 term, kept with Liger's kernels only since session 12), and LoRA
  at ZeRO-3 without checkpointing, dojo and plain (frozen linears keep their inputs under
  DeepSpeed's ZeRO-3 linear, also session 12: the rows were added before the set ran), and QLoRA
  at ZeRO-3 without checkpointing (bitsandbytes' 4-bit matmul keeps no frozen input);
- two rows away from the step-pages threshold (kept activations far below and far above the fp32
  upcast), and Llama-3.1-8B LoRA ZeRO-2 with compile and the fused loss;
- Gemma-2-2B under eager attention, dojo's auto for it since session 12 (LoRA with Liger, full
  without): its four norms a layer and the soft-cap's tanh output, counted in the same commit as
  these two rows (34b25c3 and the one that adds them).
"""

from matrix_rows_s12 import EXP, Row

D, P, H = "dojo", "plain", "held"

_V = {"alloc": EXP, "attn": "sdpa_varlen"}  # --attn auto for packed Llama/Qwen without compile
_C = {"liger_loss": True, "alloc": EXP, "compile": "on", "attn": "sdpa"}  # adapters, ZeRO 0-2
ROWS: list[Row] = [
    # first: the largest and slowest to start
    Row(H, D, "l8b", 2, "lora", micro_batch=2, seq_len=2048, grad_ckpt=True, **_C),
    Row(H, P, "q06", 3, "lora", micro_batch=2, seq_len=2048),  # session 14's cut row
    # Liger's q/k norms with adapters, no checkpointing: the activations are the peak
    Row(H, D, "q06", 0, "lora", micro_batch=2, seq_len=4096, **_V),
    Row(H, D, "q3", 2, "lora", micro_batch=2, seq_len=2048, **_V),
    Row(H, D, "q3", 2, "qlora", micro_batch=4, seq_len=2048, **_V),
    # ZeRO-3 full fine-tuning without checkpointing: Liger's layer kernels on and off
    Row(H, D, "tl1b", 3, micro_batch=2, seq_len=2048, **_V),
    Row(H, D, "tl1b", 3, micro_batch=2, seq_len=2048, liger=False, **_V),
    # LoRA at ZeRO-3 without checkpointing: DeepSpeed's linear keeps the frozen inputs
    Row(H, D, "q15", 3, "lora", micro_batch=2, seq_len=2048, **_V),
    Row(H, P, "l1b", 3, "lora", micro_batch=2, seq_len=2048),
    Row(H, D, "l3b", 3, "qlora", micro_batch=4, seq_len=2048, **_V),  # 4-bit: no frozen inputs
    # full ZeRO-2 without checkpointing away from the step-pages threshold
    Row(H, D, "l1b", 2, micro_batch=1, seq_len=1024, **_V),  # kept far below the upcast
    Row(H, D, "q06", 2, micro_batch=4, seq_len=4096, **_V),  # kept far above it
    # Gemma-2 under eager attention (auto since session 12): four norms, the soft-cap's tanh
    Row(H, D, "g2b", 2, "lora", micro_batch=1, seq_len=2048, alloc=EXP, attn="eager"),
    Row(H, D, "g2b", 2, micro_batch=1, seq_len=2048, liger=False, alloc=EXP, attn="eager"),
]
