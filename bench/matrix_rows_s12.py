"""Session 12 memory rows (issue 12): a NEW held-out set for `dojo estimate`, not yet measured.

Committed in session 10, before any of these rows ran, against the estimator of the same commit
(session 10 added one term: ZeRO-1/2's first-step fp64 gradient-norm copy, kept reserved under
expandable segments). Every row is "held". Under dojo train's defaults of session 10:
expandable segments; compile's `auto` on for packed LoRA and QLoRA at ZeRO 0-2, now with Liger's
fused loss (`--liger loss`); `--attn auto` = sdpa_varlen for packed bf16 Llama/Qwen runs without
compile. Each row names its attention and Liger mode, so what ran is what the row says.

    MEM_ARGS="--rows s12 --parallel 7" LIMIT_S=480 bash bench/gpu.sh memory

What they probe:
- compile with Liger's fused loss alone (the adapters' new default) on four shapes, ZeRO 0-2;
- sdpa_varlen for full fine-tuning (the new auto), ZeRO 1-2, with and without checkpointing;
- the fp64 norm-copy term at ZeRO-1 and -2 where it is large (Gemma-2-2B, Qwen2.5-3B), and
  Qwen3-1.7B without checkpointing at a new length (session 11's one miss, -10.7% with the term);
- the plain script on two more settings.
"""

from dataclasses import dataclass

from matrix_rows_s11 import Row as _Row

D, P, H = "dojo", "plain", "held"
EXP = "expandable_segments:True"


@dataclass(frozen=True)
class Row(_Row):
    liger_loss: bool = False  # dojo only: --liger loss (the fused loss without the layer kernels)

    def label(self) -> str:
        base = super().label()
        return f"{base}_ligerloss" if self.liger_loss else base


# compile's auto for adapters at ZeRO 0-2: the fused loss alone, the masked SDPA kernel
_C = {"liger_loss": True, "alloc": EXP, "compile": "on", "attn": "sdpa"}
_V = {"alloc": EXP, "attn": "sdpa_varlen"}  # --attn auto for packed full Llama/Qwen runs
ROWS: list[Row] = [
    # first: the largest and slowest to start
    Row(H, D, "m7b", 0, "qlora", micro_batch=1, seq_len=4096, grad_ckpt=True, **_C),
    Row(H, D, "q15", 2, "qlora", micro_batch=4, seq_len=2048, grad_ckpt=True, **_C),
    Row(H, D, "l3b", 2, "lora", micro_batch=2, seq_len=4096, **_C),
    Row(H, D, "q06", 1, "lora", micro_batch=4, seq_len=2048, grad_ckpt=True, **_C),
    # sdpa_varlen, full fine-tuning, Liger on
    Row(H, D, "q3b", 2, micro_batch=1, seq_len=4096, grad_ckpt=True, **_V),
    Row(H, D, "tl1b", 1, micro_batch=4, seq_len=2048, **_V),
    Row(H, D, "l1b", 2, micro_batch=2, seq_len=4096, grad_ckpt=True, **_V),
    Row(H, D, "q3", 2, micro_batch=4, seq_len=1024, **_V),
    # the norm copy at ZeRO-1 with a 256k vocabulary (Gemma-2: soft-capping, so sdpa)
    Row(H, D, "g2b", 1, micro_batch=1, seq_len=4096, grad_ckpt=True, alloc=EXP, attn="sdpa"),
    # the plain script
    Row(H, P, "q3b", 2, "lora", micro_batch=2, seq_len=2048),
    Row(H, P, "tl1b", 3, micro_batch=2, seq_len=2048, grad_ckpt=True),
]
