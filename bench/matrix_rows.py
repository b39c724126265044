"""Session 3 memory rows (issue 12): five architectures, 512-16k tokens, Liger and packing on/off,
full/LoRA/QLoRA, ZeRO 0-3, checkpointing on/off, one CPU-offload row, dojo's own runs and the
plain stack (bench/baseline_trainer.py).

Every row is tagged BEFORE it was measured: "fit" rows may be used to fit the estimator's
constants, "held" rows only to judge it. The split was committed before the first GPU call of
session 3 and must not change afterwards (git log bench/matrix_rows.py shows it).

Shapes (bench/memory_matrix.py SHAPES): l1b = Llama-3.2-1B (tied, GQA, 128k vocab),
l8b = Llama-3.1-8B, q15 = Qwen2.5-1.5B (tied, GQA 12/2, 152k vocab), g2b = Gemma-2-2B (256k
vocab, head_dim 256, softcapping), q3 = Qwen3-1.7B (qk-norm, 152k vocab).
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    split: str  # "fit" | "held"
    system: str  # "dojo" | "plain"
    shape: str
    stage: int  # -1 = plain Trainer without DeepSpeed (plain rows only)
    method: str = "full"
    micro_batch: int = 4
    seq_len: int = 2048
    grad_ckpt: bool = False
    liger: bool = True  # dojo only; the plain stack never has Liger
    packing: bool = True  # dojo only; the plain stack pads (fixed-length data: no padding)
    offload: str = "none"
    compile: str = "off"  # dojo: auto would compile full Z0-2 rows (slow to start)
    expect_oom: bool = False

    def label(self) -> str:
        z = "noDS" if self.stage < 0 else f"Z{self.stage}"
        bits = [self.system, self.shape, z, self.method, f"b{self.micro_batch}x{self.seq_len}"]
        bits.append("ckpt" if self.grad_ckpt else "nockpt")
        if self.system == "dojo":
            bits.append("liger" if self.liger else "noliger")
            bits.append("pack" if self.packing else "nopack")
            if self.compile != "off":
                bits.append(f"compile-{self.compile}")
        if self.offload != "none":
            bits.append(f"off-{self.offload}")
        return "_".join(bits)


D, P = "dojo", "plain"
ROWS: list[Row] = [
    # Llama-3.2-1B
    Row("fit", D, "l1b", 2),
    Row("held", D, "l1b", 3),
    Row("held", D, "l1b", 0, micro_batch=1, seq_len=16384, grad_ckpt=True),
    Row("fit", D, "l1b", 2, micro_batch=1, seq_len=8192, liger=False),
    Row("fit", D, "l1b", 2, "lora", seq_len=4096),
    Row("held", D, "l1b", 3, "lora"),
    Row("fit", D, "l1b", 2, "qlora", grad_ckpt=True),
    Row("held", D, "l1b", 1, liger=False, packing=False),
    Row("fit", D, "l1b", 2, micro_batch=8, seq_len=512, compile="auto"),
    Row("fit", P, "l1b", 2),
    Row("held", P, "l1b", 3),
    Row("held", P, "l1b", 2, grad_ckpt=True, offload="cpu"),
    Row("fit", P, "l1b", 2, "lora"),
    Row("held", P, "l1b", -1, "qlora", grad_ckpt=True),
    Row("fit", P, "l1b", 0, micro_batch=2, seq_len=4096),
    # Qwen2.5-1.5B
    Row("fit", D, "q15", 2, seq_len=4096, grad_ckpt=True),
    Row("held", D, "q15", 3, micro_batch=2, seq_len=4096),
    Row("held", D, "q15", 2, "lora", micro_batch=4, liger=False, packing=False),
    Row("fit", D, "q15", 3, "qlora", grad_ckpt=True),
    Row("fit", D, "q15", 0, "lora", micro_batch=2, seq_len=8192, grad_ckpt=True),
    Row("held", P, "q15", 2, micro_batch=2, seq_len=4096, grad_ckpt=True),
    Row("fit", P, "q15", 3, "lora"),
    # Gemma-2-2B
    Row("fit", D, "g2b", 2, micro_batch=1),
    Row("held", D, "g2b", 2, micro_batch=1, liger=False),
    Row("held", D, "g2b", 3, "lora", grad_ckpt=True),
    Row("fit", D, "g2b", 2, "qlora", seq_len=4096, grad_ckpt=True),
    Row("fit", P, "g2b", 2, "lora", grad_ckpt=True),
    Row("held", P, "g2b", 3, micro_batch=2, grad_ckpt=True),
    # Qwen3-1.7B
    Row("held", D, "q3", 2),
    Row("fit", D, "q3", 1, micro_batch=2, seq_len=4096, grad_ckpt=True, liger=False),
    Row("held", D, "q3", 2, "lora", micro_batch=1, seq_len=16384, grad_ckpt=True),
    Row("fit", D, "q3", 3, micro_batch=1, seq_len=16384, grad_ckpt=True),
    Row("fit", P, "q3", 2, grad_ckpt=True),
    # Llama-3.1-8B
    Row("fit", D, "l8b", 2, "lora", micro_batch=2, seq_len=4096, grad_ckpt=True),
    Row("held", D, "l8b", 3, "qlora", micro_batch=2, grad_ckpt=True),
    Row("held", P, "l8b", 2, "lora", micro_batch=2, grad_ckpt=True),
    Row("fit", D, "l8b", 1, micro_batch=1, grad_ckpt=True, expect_oom=True),
]
