"""Session 11 memory rows (issue 12): a NEW held-out set for `dojo estimate`, not yet measured.

Committed in session 9, before any of these rows ran, against the estimator of the same commit
(unchanged since session 8's e3b6858 terms). Every row is "held". Under dojo train's defaults of
session 9: expandable segments, and compile's `auto` on for LoRA and QLoRA at ZeRO 0-2, with
checkpointing too (Liger then off).

    MEM_ARGS="--rows s11 --parallel 7" LIMIT_S=480 bash bench/gpu.sh memory

What they probe:
- QLoRA and checkpointed LoRA with compile, the new default (the T5 speed run's preflight was
  -9.1%: expandable segments held about one fp32 logits block there, the estimate 0.6);
- `--attn sdpa_varlen` (estimated like FlashAttention-2: no mask), full and LoRA; these rows also
  show whether PyTorch's flash kernel takes GQA (a failure there is a failed row, not a pass);
- full fine-tuning with Liger under expandable segments on two more shapes (s10's one miss);
- the plain script on two more settings.
"""

from dataclasses import dataclass

from matrix_rows_s8 import Row as _Row

D, P, H = "dojo", "plain", "held"
EXP = "expandable_segments:True"


@dataclass(frozen=True)
class Row(_Row):
    attn: str = "auto"  # dojo only: --attn

    def label(self) -> str:
        base = super().label()
        return base if self.attn == "auto" else f"{base}_{self.attn.replace('_', '')}"


_C = {"liger": False, "alloc": EXP, "compile": "on"}  # compile's auto for adapters at ZeRO 0-2
ROWS: list[Row] = [
    # first: the largest and slowest to start
    Row(H, D, "m7b", 2, "qlora", micro_batch=2, seq_len=4096, grad_ckpt=True, **_C),
    Row(H, D, "l1b", 2, "qlora", micro_batch=4, seq_len=2048, grad_ckpt=True, **_C),
    Row(H, D, "q15", 0, "qlora", micro_batch=4, seq_len=2048, grad_ckpt=True, **_C),
    Row(H, D, "l3b", 2, "lora", micro_batch=4, seq_len=4096, grad_ckpt=True, **_C),
    # sdpa_varlen: packed samples by their offsets, no mask
    Row(H, D, "l1b", 2, micro_batch=4, seq_len=2048, alloc=EXP, attn="sdpa_varlen"),
    Row(H, D, "q15", 2, "lora", micro_batch=2, seq_len=4096, attn="sdpa_varlen", **_C),
    # full fine-tuning with Liger under expandable segments
    Row(H, D, "q06", 3, micro_batch=4, seq_len=2048, grad_ckpt=True, alloc=EXP),
    Row(H, D, "q3", 2, micro_batch=2, seq_len=2048, alloc=EXP),
    # the plain script
    Row(H, P, "q06", 2, micro_batch=2, seq_len=4096),
    Row(H, P, "l3b", 2, "lora", micro_batch=4, seq_len=2048),
]
