"""Session 14 memory rows (issue 12): a NEW held-out set for `dojo estimate`, not yet measured.

Committed in session 12, before any of these rows ran, against the estimator of the same commit
(session 12 added one term: Qwen3's q_norm and k_norm keep their inputs for backward, 6 / 4 / 2 B
per q and k value for HF's norm with a training weight / a frozen one / Liger's or a compiled
norm). Every row is "held". Each row's allocated peak is its activations (adapters, or a small
model without checkpointing), where that term shows; one of each norm kind.

    MEM_ARGS="--rows s14 --parallel 4" LIMIT_S=170 bash bench/gpu.sh memory
    python bench/memory_heldout.py bench/results/mem_s14.json
"""

from matrix_rows_s12 import EXP, Row

D, P, H = "dojo", "plain", "held"

_V = {"alloc": EXP, "attn": "sdpa_varlen"}  # --attn auto for packed Llama/Qwen without compile
ROWS: list[Row] = [
    Row(H, P, "q3", 2, "lora", micro_batch=2, seq_len=2048),  # HF norm, frozen: 4 B
    Row(H, D, "q06", 2, "lora", micro_batch=4, seq_len=2048, **_V),  # Liger's norm: 2 B
    Row(H, D, "q06", 1, micro_batch=2, seq_len=2048, liger=False, **_V),  # HF norm, full: 6 B
    Row(H, P, "q06", 3, "lora", micro_batch=2, seq_len=2048),  # HF norm, frozen, ZeRO-3
]
