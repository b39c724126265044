"""Session 8 memory rows (issue 12): a NEW held-out set for `dojo estimate`, not yet measured.

Committed in session 7, before any of these rows ran, against the estimator of the same commit.
Rows marked "held" judge the estimator (bench/memory_heldout.py); rows marked "fit" are repeats of
rows already measured, there to show whether the allocator's reserve is the same run to run.

    MEM_ARGS="--rows s8 --parallel 7" LIMIT_S=540 bash bench/gpu.sh memory

What they probe:
- compile's new "auto" (session 7): packed LoRA at ZeRO 0-2 without checkpointing now runs with
  regional compile and without Liger; the estimator has no compile term (on the one measured run,
  1B LoRA 4 x 2048: 32.6 GiB on nvidia-smi, 45.3 estimated).
- the reserve without Liger, which was 0.56 of one fp32 logits block on most micro-batch 2-8 LoRA
  rows and 3.5 on the micro-batch 1 ones and on Qwen2.5-1.5B LoRA 2 x 2048: the same three
  settings again (repeats), under expandable segments, and under max_split_size_mb:256 (blocks of
  256 MiB and more are never split, so a small block cannot land in a freed logits-sized segment
  and leave it too small for the next step's same-size request).
"""

from dataclasses import dataclass

from matrix_rows_s4 import Row as _Row


@dataclass(frozen=True)
class Row(_Row):
    alloc: str = ""  # PYTORCH_CUDA_ALLOC_CONF for the run ("" = PyTorch's default allocator)

    def label(self) -> str:
        base = super().label()
        if not self.alloc:
            return base
        tag = (
            "expseg" if "expandable" in self.alloc else self.alloc.replace(":", "").replace("_", "")
        )
        return f"{base}_{tag}"


D, H, F = "dojo", "held", "fit"
EXP, SPLIT = "expandable_segments:True", "max_split_size_mb:256"
_LORA = {"method": "lora", "liger": False}
ROWS: list[Row] = [
    # compile's auto: packed LoRA at ZeRO 0-2, no checkpointing, Liger off
    Row(H, D, "l1b", 2, micro_batch=4, seq_len=2048, compile="on", **_LORA),
    Row(H, D, "q15", 2, micro_batch=2, seq_len=4096, compile="on", **_LORA),
    Row(H, D, "g2b", 0, micro_batch=2, seq_len=2048, compile="on", **_LORA),
    Row(H, D, "m7b", 2, micro_batch=2, seq_len=4096, compile="on", **_LORA),
    Row(H, D, "l3b", 1, micro_batch=8, seq_len=1024, compile="on", **_LORA),
    Row(H, D, "q06", 2, micro_batch=1, seq_len=8192, compile="on", **_LORA),
    # repeats of measured rows (s7: 3.46 and 0.56 blocks; s6: 3.67)
    Row(F, D, "l1b", 2, micro_batch=1, seq_len=8192, **_LORA),
    Row(F, D, "l1b", 2, micro_batch=2, seq_len=4096, **_LORA),
    Row(F, D, "q15", 2, micro_batch=2, seq_len=2048, **_LORA),
    # the same three under expandable segments
    Row(H, D, "l1b", 2, micro_batch=1, seq_len=8192, alloc=EXP, **_LORA),
    Row(H, D, "l1b", 2, micro_batch=2, seq_len=4096, alloc=EXP, **_LORA),
    Row(H, D, "q15", 2, micro_batch=2, seq_len=2048, alloc=EXP, **_LORA),
    # and with large blocks never split
    Row(H, D, "l1b", 2, micro_batch=1, seq_len=8192, alloc=SPLIT, **_LORA),
    Row(H, D, "l1b", 2, micro_batch=2, seq_len=4096, alloc=SPLIT, **_LORA),
    Row(H, D, "q15", 2, micro_batch=2, seq_len=2048, alloc=SPLIT, **_LORA),
    Row(H, D, "l1b", 2, micro_batch=4, seq_len=2048, alloc=SPLIT, **{**_LORA, "method": "full"}),
]
