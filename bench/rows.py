"""Every benchmark row of bench/ as data: the memory row sets and the speed sets, by name.

    python bench/memory.py --set NAME --dry-run      # a memory set, resolved and estimated (CPU)
    python bench/speed.py --set NAME --dry-run       # a speed set's plan and its cost

Memory sets (``MEMORY_SETS``): each row is one ``dojo train`` run (system "dojo") or one run of the
plain HF Trainer + DeepSpeed script (system "plain", bench/baseline_trainer.py) on a random-weight
model of a real shape, 3 optimizer steps, measured against ``dojo estimate`` for the same settings
(bench/memory.py). Every row is tagged before it ran: "fit" rows may be used to fit the
estimator's constants, "held" rows only judge it. A held-out claim is only as good as the record
that the rows were committed before they ran, so each set says the commit where its rows were
first committed (``committed``) and the file they were committed in (``was``); a set's rows and
their split never change after it ran (git log -p bench/rows.py shows it). A new held-out set is
a new entry here, committed before its GPU call.

Speed sets (``SPEED_SETS``): cases run by bench/speed.py with several systems each, alternating,
always as a ratio to the row's first system (the plain script; TRL's DPO script for the
preference set; TRL's ORPO or CPO trainer for orpo-simpo) in the same GPU call. Systems: "plain"
(bench/baseline_trainer.py), "trl" and "trl-ds" (bench/trl_sft.py without and with DeepSpeed),
"trl-dpo" and "trl-kto" (TRL's own trl/scripts/dpo.py, kto.py), "trl-pref" (bench/trl_pref.py: TRL's ORPO and CPO
trainers as TRL's example scripts run them),
"dojo" (dojo train's defaults) and "dojo FLAGS" (dojo train with extra flags, e.g.
"dojo --compile off").

Shapes: the architectures rows train, by key (``SHAPES``): names in dojo.architectures, and
``EXTRA_ARCHS`` for those not in dojo's table.
"""

from dataclasses import dataclass
from typing import Any

SHAPES = {
    "l1b": "llama-3.2-1b",  # tied, GQA 32/8, 128k vocabulary
    "l3b": "llama-3.2-3b",  # tied, GQA 24/8, 128k vocabulary
    "l7b": "llama-2-7b",  # untied, MHA, 32k vocabulary
    "l8b": "llama-3.1-8b",  # untied, GQA 32/8, 128k vocabulary
    "tl1b": "tinyllama-1.1b",  # untied, GQA 32/4, 32k vocabulary
    "m7b": "mistral-7b-v0.3",  # untied, 32k vocabulary
    "q05": "qwen2.5-0.5b",  # tied, GQA 14/2, 152k vocabulary
    "q15": "qwen2.5-1.5b",  # tied, GQA 12/2, 152k vocabulary
    "q3b": "qwen2.5-3b",  # tied, GQA 16/2, 152k vocabulary, qkv bias
    "q06": "qwen3-0.6b",  # tied, qk-norm, head_dim 128 > hidden/heads
    "q3": "qwen3-1.7b",  # qk-norm, 152k vocabulary (EXTRA_ARCHS)
    "g2b": "gemma-2-2b",  # 256k vocabulary, head_dim 256, soft-capping
    # The held-out shapes of heldout-moe-offload-long (EXTRA_ARCHS): real per-layer layouts, fewer
    # layers where the whole model would not fit the GPU machine's disk or a call's time.
    "g3": "gemma-3-1b",  # 262k vocabulary, head_dim 256, qk-norm, 4 norms a layer
    "q3moe": "qwen3-30b-a3b-l8",  # Qwen3-MoE: 128 experts, top-8, 8 of its 48 layers
    "q2moe": "qwen1.5-moe-a2.7b-l6",  # Qwen2-MoE: 60 experts, top-4, shared expert, 6 of 24
    "mix": "mixtral-8x7b-l4",  # Mixtral: 8 experts of 14336, top-2, 4 of its 32 layers
    "l8b8": "llama-3.1-8b-l8",  # untied 128k head larger than a 5e8 bucket, 8 of 32 layers
    "m7b8": "mistral-7b-v0.3-l8",  # untied 32k head, 8 of 32 layers
}
EXTRA_ARCHS = {
    # Qwen/Qwen3-1.7B config.json (not in dojo's table): GQA 16/8, head_dim 128, tied, 152k vocab.
    "qwen3-1.7b": {
        "model_type": "qwen3",
        "hidden_size": 2048,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 6144,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
    },
    # google/gemma-3-1b-pt config.json (text-only Gemma-3): 262k vocabulary, GQA 4/1.
    "gemma-3-1b": {
        "model_type": "gemma3_text",
        "hidden_size": 1152,
        "num_hidden_layers": 26,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 256,
        "intermediate_size": 6912,
        "vocab_size": 262144,
        "tie_word_embeddings": True,
        "sliding_window": 512,
        "query_pre_attn_scalar": 256,
    },
    # Qwen/Qwen3-30B-A3B config.json with num_hidden_layers 8 of 48 (the whole model is 61 GB of
    # bf16 weights; 8 layers are 11 GB): every layer is MoE, 128 experts of 768, top-8.
    "qwen3-30b-a3b-l8": {
        "model_type": "qwen3_moe",
        "hidden_size": 2048,
        "num_hidden_layers": 8,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "intermediate_size": 6144,
        "moe_intermediate_size": 768,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "norm_topk_prob": True,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "vocab_size": 151936,
        "tie_word_embeddings": False,
    },
    # Qwen/Qwen1.5-MoE-A2.7B config.json with num_hidden_layers 6 of 24 (8 GB of 29): 60 experts
    # of 1408, top-4, a gated shared expert of 5632, q/k/v bias.
    "qwen1.5-moe-a2.7b-l6": {
        "model_type": "qwen2_moe",
        "hidden_size": 2048,
        "num_hidden_layers": 6,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "intermediate_size": 5632,
        "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 5632,
        "num_experts": 60,
        "num_experts_per_tok": 4,
        "norm_topk_prob": False,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "qkv_bias": True,
        "vocab_size": 151936,
        "tie_word_embeddings": False,
    },
    # meta-llama/Llama-3.1-8B config.json with num_hidden_layers 8 of 32 (2.8B params, so full
    # fine-tuning with optimizer offload fits the GPU machine's host RAM): its untied head,
    # 525M values, is larger than dojo's 5e8 reduce bucket.
    "llama-3.1-8b-l8": {
        "model_type": "llama",
        "hidden_size": 4096,
        "num_hidden_layers": 8,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "vocab_size": 128256,
        "rope_theta": 500000.0,
        "tie_word_embeddings": False,
    },
    # mistralai/Mistral-7B-v0.3 config.json with num_hidden_layers 8 of 32 (2.0B params): its
    # untied head, 134M values, fits the bucket.
    "mistral-7b-v0.3-l8": {
        "model_type": "mistral",
        "hidden_size": 4096,
        "num_hidden_layers": 8,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "vocab_size": 32768,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": False,
    },
    # mistralai/Mixtral-8x7B-v0.1 config.json with num_hidden_layers 4 of 32 (12 GB of 93): 8
    # experts of 14336, top-2, GQA 32/8.
    "mixtral-8x7b-l4": {
        "model_type": "mixtral",
        "hidden_size": 4096,
        "num_hidden_layers": 4,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "vocab_size": 32000,
        "tie_word_embeddings": False,
    },
}


@dataclass(frozen=True)
class Row:
    """One memory row. Fields a system does not have are ignored for it (plain: liger, packing,
    compile, optim, attn, liger_loss, extra)."""

    split: str  # "fit" | "held"
    system: str  # "dojo" | "plain"
    shape: str  # a SHAPES key
    stage: int  # ZeRO stage; -1 = the plain Trainer without DeepSpeed (dojo: --zero none)
    method: str = "full"
    micro_batch: int = 4
    seq_len: int = 2048
    grad_ckpt: bool = False
    liger: bool = True  # dojo: --liger on|off
    packing: bool = True  # dojo: --packing (the plain script pads; its data is fixed-length)
    offload: str = "none"  # optimizer offload (dojo adds --optimizer ds, as DeepSpeed needs)
    compile: str = "off"  # dojo: --compile
    expect_oom: bool = False  # runs alone on the GPU; OOM is the expected result
    optim: str = "auto"  # dojo: --optim (auto = adamw_torch_fused)
    expandable: bool = False  # PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True for the run
    alloc: str = ""  # the run's whole PYTORCH_CUDA_ALLOC_CONF ("" = as expandable says)
    attn: str = "auto"  # dojo: --attn
    liger_loss: bool = False  # dojo: --liger loss (Liger's fused loss without its layer kernels)
    extra: tuple[str, ...] = ()  # dojo: more dojo train flags, as given
    gpus: int = 1  # GPUs the row trains on (0..gpus-1); a row on more than one runs alone
    steps: int = 3  # optimizer steps; more where a peak may come late in a run

    @property
    def objective(self) -> str:
        """dojo's --objective of the row (sft where its flags give none)."""
        return objective_of(self.extra)

    def label(self) -> str:
        """The row's name: unique in its set, stable (the result files and --only use it)."""
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
        if self.optim != "auto":
            bits.append(self.optim)
        if self.expandable:
            bits.append("expseg")
        if self.alloc:
            exp = "expandable" in self.alloc
            bits.append("expseg" if exp else self.alloc.replace(":", "").replace("_", ""))
        if self.attn != "auto":
            bits.append(self.attn.replace("_", ""))
        if self.liger_loss:
            bits.append("ligerloss")
        bits += [t.lstrip("-").replace("-", "") for t in self.extra]
        if self.gpus > 1:
            bits.append(f"gpus{self.gpus}")
        if self.steps != 3:
            bits.append(f"steps{self.steps}")
        return "_".join(bits)


@dataclass(frozen=True)
class MemorySet:
    rows: tuple[Row, ...]
    about: str  # what the rows probe
    committed: str  # commit(s) where the rows were first committed, before they ran
    was: str  # the file they were committed in (git show COMMIT:FILE)


def crashed(result: dict[str, Any]) -> bool:
    """A memory row's result that measured nothing: the run failed, not out of memory and not
    stopped for the host's RAM (either of which is the measurement). A set's next call
    (bench/memory.py --skip-done) runs it again."""
    return bool(result.get("rc")) and not result.get("oom") and not result.get("host_killed")


D, P = "dojo", "plain"
F, H = "fit", "held"
EXP = "expandable_segments:True"  # dojo train's default allocator on CUDA (--expandable-segments auto)
SPLIT = "max_split_size_mb:256"
_CAL = ("--lora-dropout", "0", "--bucket-size", "5e8")  # the calibration runs' own flags
_OFF, _ON = ("--no-overlap-comm",), ("--overlap-comm",)
_DPO = ("--objective", "dpo")
_SMALL_Z3 = ("--prefetch-bucket-size", "1e7", "--z3-leaf", "off")  # ZeRO-3 gathers one module

# fmt: off
MEMORY_SETS: dict[str, MemorySet] = {
    "calibration": MemorySet(
        about="Llama-3.2-1B and Llama-2-7B under dojo train, ZeRO 0-3, overlap_comm on and off, "
        "5e8 and 2e8 buckets, CPU offload, full/LoRA/QLoRA, packed chats, Liger on, compile off. "
        "fit: the rows the estimator's constants were first calibrated on (their results and "
        "constants in 7650319); held: run after 7650319 against those constants (results in "
        "bfa88bd).",
        committed="4a2be87 (14 rows; the 1B QLoRA row and the two 7B ZeRO-3 rows ran only after "
        "7650319's calibration); bfa88bd (6 held rows, committed with their results)",
        was="bench/memory_matrix.py (MATRIX)",
        rows=(
            Row(F, D, "l1b", 0, extra=_OFF + _CAL),
            Row(F, D, "l1b", 1, extra=_OFF + _CAL),
            Row(F, D, "l1b", 2, extra=_OFF + _CAL),
            Row(F, D, "l1b", 2, extra=_ON + _CAL),
            Row(F, D, "l1b", 2, extra=_ON + ("--lora-dropout", "0", "--bucket-size", "2e8")),
            Row(F, D, "l1b", 2, micro_batch=8, grad_ckpt=True, extra=_ON + _CAL),
            Row(F, D, "l1b", 3, extra=_ON + _CAL),
            Row(F, D, "l1b", 2, grad_ckpt=True, offload="cpu", extra=_OFF + _CAL),
            Row(F, D, "l1b", 2, "lora", extra=_OFF + _CAL),
            Row(H, D, "l1b", 2, "qlora", grad_ckpt=True, extra=_OFF + _CAL),
            Row(H, D, "l1b", 3, micro_batch=2, grad_ckpt=True, extra=_OFF + _CAL),
            Row(H, D, "l1b", 1, micro_batch=8, grad_ckpt=True, extra=_OFF + _CAL),
            Row(H, D, "l1b", 2, "lora", micro_batch=8, grad_ckpt=True, extra=_OFF + _CAL),
            Row(H, D, "l1b", 0, micro_batch=2, seq_len=4096, extra=_OFF + _CAL),
            Row(H, D, "l1b", 2, micro_batch=8, grad_ckpt=True, offload="cpu", extra=_OFF + _CAL),
            Row(F, D, "l7b", 2, "lora", grad_ckpt=True, extra=_OFF + _CAL),
            Row(H, D, "l7b", 3, micro_batch=1, grad_ckpt=True, extra=_ON + _CAL),
            Row(F, D, "l7b", 2, micro_batch=1, grad_ckpt=True, expect_oom=True, extra=_OFF + _CAL),
            Row(H, D, "l7b", 3, "qlora", micro_batch=2, grad_ckpt=True, extra=_OFF + _CAL),
            # host RAM: pinned fp32 master + grad + bf16 buffer and Adam m, v: about 132 GiB
            Row(H, D, "l7b", 2, micro_batch=1, grad_ckpt=True, offload="cpu", extra=_OFF + _CAL),
        ),
    ),
    "five-archs": MemorySet(
        about="Five architectures (Llama-3.2-1B, Qwen2.5-1.5B, Gemma-2-2B, Qwen3-1.7B, "
        "Llama-3.1-8B), 512-16k tokens, Liger and packing on and off, full/LoRA/QLoRA, ZeRO 0-3, "
        "checkpointing on and off, one CPU-offload row, dojo and the plain script; fit and held "
        "rows mixed, the split fixed before the first run.",
        committed="22bfb4c",
        was="bench/matrix_rows.py",
        rows=(
            Row(F, D, "l1b", 2),
            Row(H, D, "l1b", 3),
            Row(H, D, "l1b", 0, micro_batch=1, seq_len=16384, grad_ckpt=True),
            Row(F, D, "l1b", 2, micro_batch=1, seq_len=8192, liger=False),
            Row(F, D, "l1b", 2, "lora", seq_len=4096),
            Row(H, D, "l1b", 3, "lora"),
            Row(F, D, "l1b", 2, "qlora", grad_ckpt=True),
            Row(H, D, "l1b", 1, liger=False, packing=False),
            Row(F, D, "l1b", 2, micro_batch=8, seq_len=512, compile="auto"),
            Row(F, P, "l1b", 2),
            Row(H, P, "l1b", 3),
            Row(H, P, "l1b", 2, grad_ckpt=True, offload="cpu"),
            Row(F, P, "l1b", 2, "lora"),
            Row(H, P, "l1b", -1, "qlora", grad_ckpt=True),
            Row(F, P, "l1b", 0, micro_batch=2, seq_len=4096),
            Row(F, D, "q15", 2, seq_len=4096, grad_ckpt=True),
            Row(H, D, "q15", 3, micro_batch=2, seq_len=4096),
            Row(H, D, "q15", 2, "lora", liger=False, packing=False),
            Row(F, D, "q15", 3, "qlora", grad_ckpt=True),
            Row(F, D, "q15", 0, "lora", micro_batch=2, seq_len=8192, grad_ckpt=True),
            Row(H, P, "q15", 2, micro_batch=2, seq_len=4096, grad_ckpt=True),
            Row(F, P, "q15", 3, "lora"),
            Row(F, D, "g2b", 2, micro_batch=1),
            Row(H, D, "g2b", 2, micro_batch=1, liger=False),
            Row(H, D, "g2b", 3, "lora", grad_ckpt=True),
            Row(F, D, "g2b", 2, "qlora", seq_len=4096, grad_ckpt=True),
            Row(F, P, "g2b", 2, "lora", grad_ckpt=True),
            Row(H, P, "g2b", 3, micro_batch=2, grad_ckpt=True),
            Row(H, D, "q3", 2),
            Row(F, D, "q3", 1, micro_batch=2, seq_len=4096, grad_ckpt=True, liger=False),
            Row(H, D, "q3", 2, "lora", micro_batch=1, seq_len=16384, grad_ckpt=True),
            Row(F, D, "q3", 3, micro_batch=1, seq_len=16384, grad_ckpt=True),
            Row(F, P, "q3", 2, grad_ckpt=True),
            Row(F, D, "l8b", 2, "lora", micro_batch=2, seq_len=4096, grad_ckpt=True),
            Row(H, D, "l8b", 3, "qlora", micro_batch=2, grad_ckpt=True),
            Row(H, P, "l8b", 2, "lora", micro_batch=2, grad_ckpt=True),
            Row(F, D, "l8b", 1, micro_batch=1, grad_ckpt=True, expect_oom=True),
        ),
    ),
    "heldout-new-shapes": MemorySet(
        about="Four shapes never measured before (Qwen2.5-0.5B, Qwen3-0.6B, Llama-3.2-3B, "
        "Mistral-7B-v0.3) and Gemma-2-2B at new settings; ZeRO 0-3 and no DeepSpeed, full/LoRA/"
        "QLoRA under dojo's decoder-layer ZeRO-3 leaves, 512-16k tokens, one CPU-offload row, "
        "one paged 8-bit optimizer row. Committed before any row ran and before the refit that "
        "used the five-archs rows.",
        committed="6c6b8b4 (3b26c0a added the expandable field, default off: no row changed)",
        was="bench/matrix_rows_s4.py",
        rows=(
            Row(H, D, "q05", 0, seq_len=4096),
            Row(H, D, "q05", 1, micro_batch=16, seq_len=512, optim="paged_adamw_8bit"),
            Row(H, D, "q05", 3),
            Row(H, D, "q05", 2, micro_batch=1, seq_len=4096, liger=False, packing=False),
            Row(H, P, "q05", 2, micro_batch=2),
            Row(H, P, "q05", -1, "lora", micro_batch=2),
            Row(H, D, "q06", 2, micro_batch=1, seq_len=8192, grad_ckpt=True, liger=False),
            Row(H, D, "q06", 3, "lora", seq_len=4096, grad_ckpt=True),
            Row(H, D, "q06", 2, "qlora", micro_batch=1, seq_len=16384, grad_ckpt=True),
            Row(H, P, "q06", 3, micro_batch=2),
            Row(H, D, "q06", 2, grad_ckpt=True, offload="cpu"),
            Row(H, D, "l3b", 3, micro_batch=2, seq_len=4096, grad_ckpt=True),
            Row(H, D, "l3b", 2, "lora", micro_batch=2, packing=False),
            Row(H, D, "l3b", 3, "qlora", seq_len=4096, grad_ckpt=True),
            Row(H, D, "l3b", 0, "lora", micro_batch=1, seq_len=16384, grad_ckpt=True),
            Row(H, P, "l3b", 2, "lora", micro_batch=2, grad_ckpt=True),
            Row(H, P, "l3b", 3, "lora", grad_ckpt=True),
            Row(H, D, "g2b", 3, micro_batch=1, seq_len=4096, grad_ckpt=True),
            Row(H, D, "g2b", 3, "lora", micro_batch=2),
            Row(H, D, "g2b", 1, "lora", micro_batch=1, seq_len=4096, grad_ckpt=True, liger=False),
            Row(H, P, "g2b", -1, "lora", micro_batch=2, grad_ckpt=True),
            Row(H, D, "m7b", 3, "lora", micro_batch=2, seq_len=4096, grad_ckpt=True),
            Row(H, D, "m7b", 3, "qlora", grad_ckpt=True, packing=False),
            Row(H, P, "m7b", 2, "qlora", micro_batch=2, seq_len=4096, grad_ckpt=True),
        ),
    ),
    "heldout-qwen3b-tinyllama": MemorySet(
        about="Two new shapes (Qwen2.5-3B with qkv bias, TinyLlama-1.1B) and earlier shapes at "
        "settings not run before; dojo's adapter buckets without overlap_comm at ZeRO-1/2 and "
        "ZeRO-3 decoder-layer leaves.",
        committed="d56277a",
        was="bench/matrix_rows_s5.py",
        rows=(
            Row(H, D, "q3b", 2, micro_batch=1, seq_len=4096),
            Row(H, D, "q3b", 3, "lora", micro_batch=2),
            Row(H, D, "q3b", 2, "lora", packing=False),
            Row(H, D, "q3b", 0, "qlora", micro_batch=2, seq_len=8192, grad_ckpt=True),
            Row(H, P, "q3b", 2, "lora", micro_batch=2),
            Row(H, D, "tl1b", 1, micro_batch=8, seq_len=1024),
            Row(H, D, "tl1b", 2, grad_ckpt=True, liger=False, packing=False),
            Row(H, D, "tl1b", 3),
            Row(H, P, "tl1b", 3, grad_ckpt=True),
            Row(H, P, "tl1b", 2),
            Row(H, D, "q15", 2, "lora", seq_len=1024, liger=False),
            Row(H, D, "q15", 2, grad_ckpt=True, offload="cpu"),
            Row(H, P, "q15", 0, micro_batch=2),
            Row(H, D, "q3", 3, micro_batch=2, seq_len=4096, grad_ckpt=True, liger=False),
            Row(H, P, "q3", -1, "qlora", grad_ckpt=True),
            Row(H, D, "g2b", 2, "lora", micro_batch=2, seq_len=4096, grad_ckpt=True),
            Row(H, P, "g2b", 3, "lora", micro_batch=2, grad_ckpt=True),
            Row(H, D, "q06", 0, "lora", seq_len=4096),
            Row(H, D, "q05", 3, "qlora", micro_batch=8, grad_ckpt=True),
            Row(H, D, "l3b", 1, "lora", micro_batch=2, seq_len=4096, grad_ckpt=True, liger=False),
            Row(H, D, "m7b", 2, "lora", micro_batch=1, seq_len=8192, grad_ckpt=True),
            Row(H, P, "m7b", -1, "lora", micro_batch=2, grad_ckpt=True),
        ),
    ),
    "heldout-expandable": MemorySet(
        about="PyTorch's expandable segments, never measured before (the estimate's reserve is 0 "
        "there by design), including three earlier misses without Liger re-run under it; dojo's "
        "ZeRO-3 sub_group_size 1e8 with the optimizer on the GPU; fresh default-allocator rows "
        "of both systems.",
        committed="fa51edf",
        was="bench/matrix_rows_s6.py",
        rows=(
            Row(H, D, "l1b", 2, liger=False, expandable=True),
            Row(H, D, "q15", 2, "lora", seq_len=1024, liger=False, expandable=True),
            Row(H, D, "l3b", 1, "lora", micro_batch=2, seq_len=4096, grad_ckpt=True, liger=False, expandable=True),
            Row(H, D, "q3", 3, micro_batch=2, seq_len=4096, grad_ckpt=True, liger=False, expandable=True),
            Row(H, D, "q3b", 2, micro_batch=1, seq_len=4096, expandable=True),
            Row(H, D, "tl1b", 3, expandable=True),
            Row(H, D, "g2b", 2, "lora", micro_batch=2, liger=False, expandable=True),
            Row(H, D, "q05", 0, "qlora", seq_len=4096, grad_ckpt=True, expandable=True),
            Row(H, D, "m7b", 3, "lora", micro_batch=2, grad_ckpt=True, expandable=True),
            Row(H, D, "l3b", 3, micro_batch=1, seq_len=4096, grad_ckpt=True, expandable=True),
            Row(H, D, "q06", 2, micro_batch=2, seq_len=8192, grad_ckpt=True, packing=False, expandable=True),
            Row(H, D, "q15", 2, "lora", micro_batch=2, liger=False),
            Row(H, D, "tl1b", 1, liger=False),
            Row(H, D, "q3b", 3, "lora", micro_batch=2, grad_ckpt=True),
            Row(H, D, "g2b", 3, micro_batch=1, grad_ckpt=True),
            Row(H, D, "l1b", 0, "lora", micro_batch=8, seq_len=1024, liger=False),
            Row(H, P, "l1b", 2),
            Row(H, P, "q3b", 3, micro_batch=1, grad_ckpt=True),
            Row(H, P, "tl1b", 2, "lora"),
            Row(H, P, "q06", -1, "qlora", micro_batch=2, seq_len=4096, grad_ckpt=True),
            Row(H, P, "m7b", 2, "lora", micro_batch=1, seq_len=4096, grad_ckpt=True),
            Row(H, P, "q15", 3, "lora"),
        ),
    ),
    "heldout-zero3-tile": MemorySet(
        about="ZeRO-3 full fine-tuning under dojo's 1e8 sub-group tile on shapes whose embedding "
        "is larger than the tile and on Mistral-7B's small one; dojo without Liger at micro-batch "
        "1-8; the plain script at nearby settings; Liger rows as controls. Default allocator.",
        committed="e84bf03",
        was="bench/matrix_rows_s7.py",
        rows=(
            Row(H, D, "l1b", 3, micro_batch=2),
            Row(H, D, "l3b", 3, micro_batch=2, grad_ckpt=True),
            Row(H, D, "q15", 3, seq_len=1024, liger=False),
            Row(H, D, "g2b", 3, micro_batch=2, grad_ckpt=True),
            Row(H, D, "q3b", 3, micro_batch=1, seq_len=4096, grad_ckpt=True, liger=False),
            Row(H, D, "tl1b", 3, micro_batch=8, seq_len=1024),
            Row(H, P, "l3b", 3, micro_batch=2, grad_ckpt=True),
            Row(H, P, "g2b", 3, micro_batch=1, grad_ckpt=True),
            Row(H, D, "l1b", 2, "lora", micro_batch=1, seq_len=8192, liger=False),
            Row(H, D, "l1b", 2, "lora", micro_batch=2, seq_len=4096, liger=False),
            Row(H, D, "l1b", 2, "lora", micro_batch=8, seq_len=1024, liger=False),
            Row(H, D, "q05", 1, micro_batch=2, seq_len=4096, liger=False),
            Row(H, D, "q06", 0, "qlora", grad_ckpt=True, liger=False),
            Row(H, D, "m7b", 2, "lora", grad_ckpt=True, liger=False),
            Row(H, D, "q3", 2, grad_ckpt=True, liger=False),
            Row(H, P, "l1b", 2, "lora", micro_batch=2, seq_len=4096),
            Row(H, P, "q05", 1, micro_batch=2, seq_len=4096),
            Row(H, P, "m7b", 2, "lora", grad_ckpt=True),
            Row(H, P, "q3", -1, "lora"),
            Row(H, D, "l1b", 2, "lora", micro_batch=2, seq_len=4096),
            Row(H, D, "q3", 2, grad_ckpt=True),
            Row(H, D, "q15", 0, "qlora", micro_batch=8, grad_ckpt=True),
        ),
    ),
    "heldout-compile-allocators": MemorySet(
        about="compile's auto (packed LoRA at ZeRO 0-2 without checkpointing, Liger off) on six "
        "shapes; three repeats of measured rows (fit: whether the reserve repeats run to run); the "
        "same three under expandable segments and under max_split_size_mb:256.",
        committed="aa043f2",
        was="bench/matrix_rows_s8.py",
        rows=(
            Row(H, D, "l1b", 2, "lora", liger=False, compile="on"),
            Row(H, D, "q15", 2, "lora", micro_batch=2, seq_len=4096, liger=False, compile="on"),
            Row(H, D, "g2b", 0, "lora", micro_batch=2, liger=False, compile="on"),
            Row(H, D, "m7b", 2, "lora", micro_batch=2, seq_len=4096, liger=False, compile="on"),
            Row(H, D, "l3b", 1, "lora", micro_batch=8, seq_len=1024, liger=False, compile="on"),
            Row(H, D, "q06", 2, "lora", micro_batch=1, seq_len=8192, liger=False, compile="on"),
            Row(F, D, "l1b", 2, "lora", micro_batch=1, seq_len=8192, liger=False),
            Row(F, D, "l1b", 2, "lora", micro_batch=2, seq_len=4096, liger=False),
            Row(F, D, "q15", 2, "lora", micro_batch=2, liger=False),
            Row(H, D, "l1b", 2, "lora", micro_batch=1, seq_len=8192, liger=False, alloc=EXP),
            Row(H, D, "l1b", 2, "lora", micro_batch=2, seq_len=4096, liger=False, alloc=EXP),
            Row(H, D, "q15", 2, "lora", micro_batch=2, liger=False, alloc=EXP),
            Row(H, D, "l1b", 2, "lora", micro_batch=1, seq_len=8192, liger=False, alloc=SPLIT),
            Row(H, D, "l1b", 2, "lora", micro_batch=2, seq_len=4096, liger=False, alloc=SPLIT),
            Row(H, D, "q15", 2, "lora", micro_batch=2, liger=False, alloc=SPLIT),
            Row(H, D, "l1b", 2, liger=False, alloc=SPLIT),
        ),
    ),
    "heldout-expandable-default": MemorySet(
        about="dojo train's allocator default (expandable segments) with the estimate's 0.6-block "
        "reserve without Liger: compile LoRA rows, ZeRO-3 LoRA and QLoRA with Liger, an unpacked "
        "Liger full row, a micro-batch-1 full row without Liger, the plain script.",
        committed="e3b6858",
        was="bench/matrix_rows_s9.py",
        rows=(
            Row(H, D, "l1b", 2, "lora", liger=False, compile="on", alloc=EXP),
            Row(H, D, "q15", 1, "lora", micro_batch=2, liger=False, compile="on", alloc=EXP),
            Row(H, D, "q15", 2, micro_batch=2, seq_len=4096, grad_ckpt=True, packing=False, alloc=EXP),
            Row(H, D, "l1b", 3, "lora", micro_batch=2, seq_len=4096, grad_ckpt=True, alloc=EXP),
            Row(H, D, "g2b", 1, "qlora", grad_ckpt=True, alloc=EXP),
            Row(H, D, "q06", 2, micro_batch=1, seq_len=8192, grad_ckpt=True, liger=False, alloc=EXP),
            Row(H, P, "q15", 2, "lora", micro_batch=2),
        ),
    ),
    "heldout-liger-expandable": MemorySet(
        about="Full fine-tuning with Liger under expandable segments (the estimate's reserve 0 "
        "there); earlier default-allocator misses under dojo's default; compile LoRA on three "
        "more shapes; two rows an earlier call's limit cut; the plain script.",
        committed="342496c",
        was="bench/matrix_rows_s10.py",
        rows=(
            Row(H, D, "m7b", 2, "lora", micro_batch=2, seq_len=4096, liger=False, compile="on", alloc=EXP),
            Row(H, D, "q15", 1, "lora", micro_batch=2, liger=False, compile="on", alloc=EXP),
            Row(H, P, "q15", 2, "lora", micro_batch=2),
            Row(H, D, "l1b", 2, alloc=EXP),
            Row(H, D, "q06", 2, micro_batch=2, seq_len=4096, grad_ckpt=True, alloc=EXP),
            Row(H, D, "l3b", 3, micro_batch=2, grad_ckpt=True, alloc=EXP),
            Row(H, D, "g2b", 2, micro_batch=1, grad_ckpt=True, alloc=EXP),
            Row(H, D, "q3", 2, grad_ckpt=True, alloc=EXP),
            Row(H, D, "q05", 1, micro_batch=2, seq_len=4096, liger=False, alloc=EXP),
            Row(H, D, "q06", 0, "qlora", grad_ckpt=True, liger=False, alloc=EXP),
            Row(H, D, "l3b", 1, "lora", micro_batch=8, seq_len=1024, liger=False, compile="on", alloc=EXP),
            Row(H, D, "g2b", 0, "lora", micro_batch=2, liger=False, compile="on", alloc=EXP),
            Row(H, P, "l1b", 2),
            Row(H, P, "m7b", 2, "lora", grad_ckpt=True),
        ),
    ),
    "heldout-compile-qlora-varlen": MemorySet(
        about="QLoRA and checkpointed LoRA with compile (then the adapters' default); --attn "
        "sdpa_varlen full and LoRA (estimated like FlashAttention-2); full fine-tuning with Liger "
        "under expandable segments on two more shapes; the plain script.",
        committed="2987c7c",
        was="bench/matrix_rows_s11.py",
        rows=(
            Row(H, D, "m7b", 2, "qlora", micro_batch=2, seq_len=4096, grad_ckpt=True, liger=False, compile="on", alloc=EXP),
            Row(H, D, "l1b", 2, "qlora", grad_ckpt=True, liger=False, compile="on", alloc=EXP),
            Row(H, D, "q15", 0, "qlora", grad_ckpt=True, liger=False, compile="on", alloc=EXP),
            Row(H, D, "l3b", 2, "lora", seq_len=4096, grad_ckpt=True, liger=False, compile="on", alloc=EXP),
            Row(H, D, "l1b", 2, alloc=EXP, attn="sdpa_varlen"),
            Row(H, D, "q15", 2, "lora", micro_batch=2, seq_len=4096, liger=False, compile="on", alloc=EXP, attn="sdpa_varlen"),
            Row(H, D, "q06", 3, grad_ckpt=True, alloc=EXP),
            Row(H, D, "q3", 2, micro_batch=2, alloc=EXP),
            Row(H, P, "q06", 2, micro_batch=2, seq_len=4096),
            Row(H, P, "l3b", 2, "lora"),
        ),
    ),
    "heldout-fused-loss": MemorySet(
        about="compile with Liger's fused loss alone (the adapters' default) on four shapes at "
        "ZeRO 0-2; sdpa_varlen full fine-tuning at ZeRO 1-2; ZeRO-1/2's first-step fp64 "
        "gradient-norm copy where it is large (Gemma-2-2B, Qwen2.5-3B); the plain script. Each "
        "row names its attention and Liger mode.",
        committed="23d0431",
        was="bench/matrix_rows_s12.py",
        rows=(
            Row(H, D, "m7b", 0, "qlora", micro_batch=1, seq_len=4096, grad_ckpt=True, compile="on", alloc=EXP, attn="sdpa", liger_loss=True),
            Row(H, D, "q15", 2, "qlora", grad_ckpt=True, compile="on", alloc=EXP, attn="sdpa", liger_loss=True),
            Row(H, D, "l3b", 2, "lora", micro_batch=2, seq_len=4096, compile="on", alloc=EXP, attn="sdpa", liger_loss=True),
            Row(H, D, "q06", 1, "lora", grad_ckpt=True, compile="on", alloc=EXP, attn="sdpa", liger_loss=True),
            Row(H, D, "q3b", 2, micro_batch=1, seq_len=4096, grad_ckpt=True, alloc=EXP, attn="sdpa_varlen"),
            Row(H, D, "tl1b", 1, alloc=EXP, attn="sdpa_varlen"),
            Row(H, D, "l1b", 2, micro_batch=2, seq_len=4096, grad_ckpt=True, alloc=EXP, attn="sdpa_varlen"),
            Row(H, D, "q3", 2, seq_len=1024, alloc=EXP, attn="sdpa_varlen"),
            Row(H, D, "g2b", 1, micro_batch=1, seq_len=4096, grad_ckpt=True, alloc=EXP, attn="sdpa"),
            Row(H, P, "q3b", 2, "lora", micro_batch=2),
            Row(H, P, "tl1b", 3, micro_batch=2, grad_ckpt=True),
        ),
    ),
    "heldout-step-pages": MemorySet(
        about="ZeRO-1/2's step under expandable segments keeping the backward's freed pages "
        "(full fine-tuning without checkpointing, kept activations against the fp32 upcast); the "
        "plain script where older sets missed over; adapters at ZeRO-3; Gemma-2 LoRA with the "
        "fused loss.",
        committed="daed1c6",
        was="bench/matrix_rows_s13.py",
        rows=(
            Row(H, D, "m7b", 3, "qlora", micro_batch=2, grad_ckpt=True, alloc=EXP),
            Row(H, D, "l3b", 3, "lora", micro_batch=2, seq_len=4096, grad_ckpt=True, alloc=EXP),
            Row(H, D, "q3", 2, micro_batch=1, seq_len=4096, alloc=EXP, attn="sdpa_varlen"),
            Row(H, D, "q15", 1, micro_batch=1, alloc=EXP, attn="sdpa_varlen"),
            Row(H, D, "l3b", 2, micro_batch=1, alloc=EXP, attn="sdpa_varlen"),
            Row(H, D, "q06", 2, micro_batch=8, alloc=EXP, attn="sdpa_varlen"),
            Row(H, D, "g2b", 2, "lora", micro_batch=2, seq_len=4096, compile="on", alloc=EXP, attn="sdpa", liger_loss=True),
            Row(H, P, "l1b", 3, micro_batch=2),
            Row(H, P, "q15", 2, micro_batch=1, seq_len=4096, grad_ckpt=True),
            Row(H, P, "q06", 2),
            Row(H, P, "q3", 3, "lora", grad_ckpt=True),
        ),
    ),
    "heldout-qk-norms": MemorySet(
        about="Qwen3's q_norm and k_norm keeping their inputs (6 / 4 / 2 B per value for HF's "
        "norm with a training weight / a frozen one / Liger's or a compiled norm), one row of each "
        "kind, peak in the activations.",
        committed="71b9212",
        was="bench/matrix_rows_s14.py",
        rows=(
            Row(H, P, "q3", 2, "lora", micro_batch=2),
            Row(H, D, "q06", 2, "lora", alloc=EXP, attn="sdpa_varlen"),
            Row(H, D, "q06", 1, micro_batch=2, liger=False, alloc=EXP, attn="sdpa_varlen"),
            Row(H, P, "q06", 3, "lora", micro_batch=2),
        ),
    ),
    "heldout-zero3-nockpt": MemorySet(
        about="ZeRO-3 without checkpointing: full with and without Liger's layer kernels, LoRA "
        "(DeepSpeed's linear keeps the frozen inputs) for dojo and the plain script, QLoRA (no "
        "frozen input kept); Liger's q/k norms with adapters; the step pages far from their "
        "threshold; Llama-3.1-8B LoRA with compile and the fused loss; Gemma-2-2B under eager "
        "attention; the plain-script row the qk-norms set's call cut. Judge against dc36bc7.",
        committed="6b40e45 (9 rows); bdfe86f (+2 LoRA ZeRO-3 rows); e7c0113 (+1 QLoRA ZeRO-3 "
        "row); dc36bc7 (+2 Gemma-2 rows): each before the set ran",
        was="bench/matrix_rows_s15.py",
        rows=(
            Row(H, D, "l8b", 2, "lora", micro_batch=2, grad_ckpt=True, compile="on", alloc=EXP, attn="sdpa", liger_loss=True),
            Row(H, P, "q06", 3, "lora", micro_batch=2),
            Row(H, D, "q06", 0, "lora", micro_batch=2, seq_len=4096, alloc=EXP, attn="sdpa_varlen"),
            Row(H, D, "q3", 2, "lora", micro_batch=2, alloc=EXP, attn="sdpa_varlen"),
            Row(H, D, "q3", 2, "qlora", alloc=EXP, attn="sdpa_varlen"),
            Row(H, D, "tl1b", 3, micro_batch=2, alloc=EXP, attn="sdpa_varlen"),
            Row(H, D, "tl1b", 3, micro_batch=2, liger=False, alloc=EXP, attn="sdpa_varlen"),
            Row(H, D, "q15", 3, "lora", micro_batch=2, alloc=EXP, attn="sdpa_varlen"),
            Row(H, P, "l1b", 3, "lora", micro_batch=2),
            Row(H, D, "l3b", 3, "qlora", alloc=EXP, attn="sdpa_varlen"),
            Row(H, D, "l1b", 2, micro_batch=1, seq_len=1024, alloc=EXP, attn="sdpa_varlen"),
            Row(H, D, "q06", 2, seq_len=4096, alloc=EXP, attn="sdpa_varlen"),
            Row(H, D, "g2b", 2, "lora", micro_batch=1, alloc=EXP, attn="eager"),
            Row(H, D, "g2b", 2, micro_batch=1, liger=False, alloc=EXP, attn="eager"),
        ),
    ),
    "heldout-plain-full": MemorySet(
        about="The classes weakest in-sample: the plain script's full fine-tuning under PyTorch's "
        "default allocator at ZeRO-1/2/3 with and without checkpointing, dojo's full fine-tuning "
        "at ZeRO-1/2 without checkpointing (the step's pages), and three settings not measured "
        "before (Gemma-2 full ZeRO-3 under eager attention, Mistral-7B LoRA without checkpointing, "
        "Qwen3 LoRA at 16k tokens). Estimator unchanged since dc36bc7.",
        committed="3038582",
        was="bench/matrix_rows_s16.py",
        rows=(
            Row(H, D, "m7b", 2, "lora", micro_batch=1, alloc=EXP, attn="sdpa"),
            Row(H, D, "l3b", 1, micro_batch=1, seq_len=1024, alloc=EXP, attn="sdpa_varlen"),
            Row(H, P, "tl1b", 2, micro_batch=2, grad_ckpt=True),
            Row(H, P, "l1b", 1, micro_batch=2),
            Row(H, P, "q15", 3, micro_batch=2, grad_ckpt=True),
            Row(H, P, "q06", 3),
            Row(H, D, "q3", 1, micro_batch=2, seq_len=1024, alloc=EXP, attn="sdpa_varlen"),
            Row(H, D, "tl1b", 2, seq_len=1024, alloc=EXP, attn="sdpa_varlen"),
            Row(H, D, "g2b", 3, micro_batch=1, alloc=EXP, attn="eager"),
            Row(H, D, "q3", 2, "lora", micro_batch=1, seq_len=16384, grad_ckpt=True, alloc=EXP, attn="sdpa_varlen"),
        ),
    ),
    "heldout-moe-offload-long": MemorySet(
        about="Where users go next (#31): mixture-of-experts LoRA (Qwen3-MoE, Qwen2-MoE with its "
        "shared expert, Mixtral; ZeRO-2 and ZeRO-3, QLoRA, no DeepSpeed) on the real per-layer "
        "layout with fewer layers; full fine-tuning with --offload cpu at ZeRO-1/2/3 (the device "
        "side); LoRA at 8k-32k tokens with checkpointing, 262k vocabulary among them; runs "
        "without DeepSpeed (full pure bf16, LoRA, QLoRA with k-bit prep, the plain script). "
        "Small dense shapes first, so rows run while the MoE weights are made.",
        committed="68f43c8",
        was="bench/rows.py",
        rows=(
            # the first row runs alone (bench/memory.py checks the per-process query on it);
            # meanwhile the MoE weights are made, the largest first, and their rows go next
            Row(F, D, "l1b", -1, micro_batch=2, alloc=EXP),
            # mixture of experts (fewer layers than the published models: rows.EXTRA_ARCHS)
            Row(F, D, "q3moe", 2, "lora", micro_batch=2, grad_ckpt=True, alloc=EXP),
            Row(F, D, "q3moe", 2, "lora", micro_batch=4, grad_ckpt=True, alloc=EXP),
            Row(H, D, "q3moe", 3, "lora", micro_batch=2, grad_ckpt=True, alloc=EXP),
            Row(H, D, "q3moe", -1, "lora", micro_batch=2, grad_ckpt=True, alloc=EXP),
            Row(F, D, "q2moe", 2, "lora", micro_batch=4, grad_ckpt=True, alloc=EXP),
            Row(H, D, "q2moe", 2, "lora", micro_batch=2, seq_len=4096, alloc=EXP),
            Row(F, D, "q2moe", 3, "lora", micro_batch=2, grad_ckpt=True, alloc=EXP),
            Row(H, D, "q2moe", 2, "qlora", micro_batch=4, grad_ckpt=True, alloc=EXP),
            Row(F, D, "mix", 2, "lora", micro_batch=2, grad_ckpt=True, alloc=EXP),
            Row(H, D, "mix", 2, "lora", micro_batch=2, alloc=EXP),
            # full fine-tuning with the optimizer (and at ZeRO-3 the parameters) on the CPU
            Row(F, D, "l1b", 2, grad_ckpt=True, offload="cpu", alloc=EXP),
            Row(H, D, "q15", 2, grad_ckpt=True, offload="cpu", alloc=EXP),
            Row(F, D, "q06", 3, grad_ckpt=True, offload="cpu", alloc=EXP),
            Row(H, D, "l1b", 3, micro_batch=2, offload="cpu", alloc=EXP),
            Row(H, D, "tl1b", 2, micro_batch=2, offload="cpu", alloc=EXP),
            # LoRA at long context with checkpointing; Gemma-3's 262k vocabulary
            Row(F, D, "g3", 2, "lora", micro_batch=1, seq_len=8192, grad_ckpt=True, alloc=EXP),
            Row(H, D, "g3", 2, "lora", micro_batch=1, seq_len=16384, grad_ckpt=True, alloc=EXP),
            Row(H, D, "g3", 2, "lora", micro_batch=1, seq_len=8192, grad_ckpt=True, liger=False, alloc=EXP),
            Row(F, D, "l1b", 2, "lora", micro_batch=1, seq_len=16384, grad_ckpt=True, alloc=EXP),
            Row(H, D, "q06", 2, "lora", micro_batch=1, seq_len=32768, grad_ckpt=True, alloc=EXP),
            # the rest without DeepSpeed (--zero none)
            Row(H, D, "q15", -1, micro_batch=2, grad_ckpt=True, alloc=EXP),
            Row(F, D, "l1b", -1, "lora", grad_ckpt=True, alloc=EXP),
            Row(H, D, "q06", -1, "lora", alloc=EXP),
            Row(F, D, "q15", -1, "qlora", grad_ckpt=True, alloc=EXP),
            Row(H, D, "tl1b", -1, "qlora", micro_batch=2, grad_ckpt=True, alloc=EXP),
            Row(H, P, "l1b", -1, "lora", grad_ckpt=True),
        ),
    ),
    "heldout-preference": MemorySet(
        about="The preference objectives through TRL's trainers on Llama-3.2-1B: DPO with LoRA "
        "at ZeRO-2 (the reference is the base with the adapter off), full at ZeRO-3 (a frozen "
        "sharded copy as the reference) and full at ZeRO-2 with the reference's log-probs "
        "precomputed (no copy), QLoRA with checkpointing; ORPO, KTO and SimPO with LoRA at "
        "ZeRO-2. Pairs truncated to exactly seq-len a sequence (bench/workload.py). The "
        "preference terms were derived on the CPU; every row only judges them.",
        committed="f858068",
        was="bench/rows.py",
        rows=(
            Row(H, D, "l1b", 2, "lora", liger=False, packing=False, alloc=EXP, extra=_DPO),
            Row(H, D, "l1b", 3, micro_batch=2, liger=False, packing=False, alloc=EXP, extra=_DPO),
            Row(H, D, "l1b", 2, micro_batch=2, liger=False, packing=False, alloc=EXP, extra=(*_DPO, "--precompute-ref-log-probs")),
            Row(H, D, "l1b", 2, "qlora", grad_ckpt=True, liger=False, packing=False, alloc=EXP, extra=_DPO),
            Row(H, D, "l1b", 2, "lora", liger=False, packing=False, alloc=EXP, extra=("--objective", "orpo")),
            Row(H, D, "l1b", 2, "lora", liger=False, packing=False, alloc=EXP, extra=("--objective", "kto")),
            Row(H, D, "l1b", 2, "lora", liger=False, packing=False, alloc=EXP, extra=("--objective", "simpo")),
        ),
    ),
    "heldout-moe-families": MemorySet(
        about="The Qwen3-MoE and Mixtral rows of heldout-moe-offload-long again, every one held: "
        "there they crashed before a step (PEFT refused LoRA dropout on fused experts; dojo now "
        "resolves it to 0), so they judged nothing and nothing was fitted on them. Beside them, "
        "four fit rows run again for the allocator's history at their peak "
        "(DOJO_BENCH_MEMSNAP): ORPO and SimPO (over by 22-25% in heldout-preference, where they "
        "were held; from here they are fit rows), and QLoRA and full fine-tuning without "
        "DeepSpeed (fit rows of heldout-moe-offload-long, -15% and +11%).",
        committed="77ebf42",
        was="bench/rows.py",
        rows=(
            Row(F, D, "l1b", -1, micro_batch=2, alloc=EXP),
            Row(H, D, "q3moe", 2, "lora", micro_batch=2, grad_ckpt=True, alloc=EXP),
            Row(H, D, "q3moe", 2, "lora", micro_batch=4, grad_ckpt=True, alloc=EXP),
            Row(H, D, "q3moe", 3, "lora", micro_batch=2, grad_ckpt=True, alloc=EXP),
            Row(H, D, "q3moe", -1, "lora", micro_batch=2, grad_ckpt=True, alloc=EXP),
            Row(H, D, "mix", 2, "lora", micro_batch=2, grad_ckpt=True, alloc=EXP),
            Row(H, D, "mix", 2, "lora", micro_batch=2, alloc=EXP),
            Row(F, D, "l1b", 2, "lora", liger=False, packing=False, alloc=EXP, extra=("--objective", "orpo")),
            Row(F, D, "l1b", 2, "lora", liger=False, packing=False, alloc=EXP, extra=("--objective", "simpo")),
            Row(F, D, "q15", -1, "qlora", grad_ckpt=True, alloc=EXP),
        ),
    ),
    "heldout-pref-loss-kbit": MemorySet(
        about="Held rows for the two terms read from fit rows' allocator history in "
        "heldout-moe-families: ORPO's and SimPO's loss (5 and 4 B a logit, the reserve in bf16 "
        "logits blocks) on shapes and settings not measured with them (Qwen2.5-1.5B's 152k "
        "vocabulary with checkpointing, full fine-tuning at ZeRO-3, QLoRA), QLoRA without "
        "DeepSpeed's fp32 MLP on Llama-3.2-1B and Qwen3-1.7B, and full fine-tuning in one "
        "process without DeepSpeed or checkpointing, whose backward peaks before most grads "
        "exist (Llama-3.2-3B; Qwen3-0.6B without Liger), and gradient accumulation without "
        "DeepSpeed and at ZeRO-2 (every grad beside the next micro-batch's loss, or not). "
        "Since they were committed, dojo scores ORPO and SimPO through TRL's fused LM head "
        "(dojo.train.worker.fused_head): their four rows now judge that head's term, the one "
        "DPO's and KTO's rows judge, on these shapes, and ORPO's NLL over the prompts.",
        committed="e441494 (6 rows); 286554f (+2 rows); 8b4c166 (+2 rows), each before the set ran",
        was="bench/rows.py",
        rows=(
            Row(H, D, "q15", 2, "lora", micro_batch=2, grad_ckpt=True, liger=False, packing=False, alloc=EXP, extra=("--objective", "orpo")),
            Row(H, D, "q15", 2, "lora", micro_batch=2, grad_ckpt=True, liger=False, packing=False, alloc=EXP, extra=("--objective", "simpo")),
            Row(H, D, "l1b", 3, micro_batch=1, liger=False, packing=False, alloc=EXP, extra=("--objective", "orpo")),
            Row(H, D, "l3b", 2, "qlora", micro_batch=2, grad_ckpt=True, liger=False, packing=False, alloc=EXP, extra=("--objective", "simpo")),
            Row(H, D, "l1b", -1, "qlora", micro_batch=4, grad_ckpt=True, alloc=EXP),
            Row(H, D, "q3", -1, "qlora", micro_batch=2, grad_ckpt=True, alloc=EXP),
            Row(H, D, "l3b", -1, micro_batch=2, alloc=EXP),
            Row(H, D, "q06", -1, micro_batch=4, liger=False, alloc=EXP),
            Row(H, D, "q06", -1, micro_batch=2, liger=False, alloc=EXP, extra=("--grad-accum", "2")),
            Row(H, D, "l1b", 2, micro_batch=2, liger=False, alloc=EXP, extra=("--grad-accum", "4")),
        ),
    ),
    "heldout-kbit-load": MemorySet(
        about="QLoRA's load, where it is the peak. One GPU: Qwen2-MoE's experts (bf16: "
        "bitsandbytes does not quantize 3-D experts) after dojo's load, which no longer upcasts "
        "what is not 4-bit under DeepSpeed, against the same run under TRL's ORPO trainer, "
        "which does (PEFT's prepare_model_for_kbit_training). Two GPUs (a two-GPU lease): "
        "ZeRO-3, where transformers loads a quantized model without zero.Init, so each GPU holds "
        "the whole 4-bit model and its bf16 rest until the engine partitions it, and "
        "bitsandbytes' quantization statistics stay whole on both GPUs after "
        "(bench/kbit_z3_cpu.py); short rows with a small prefetch bucket, where that load is "
        "the peak, and one longer row, where training is. Every row held: the load terms come "
        "from the source and the CPU probe, nothing was fitted.",
        committed="9bdd967, before the set ran",
        was="bench/rows.py",
        rows=(
            Row(H, D, "q2moe", 2, "qlora", micro_batch=1, seq_len=512, grad_ckpt=True, alloc=EXP),
            Row(H, D, "q2moe", 2, "qlora", micro_batch=1, seq_len=512, grad_ckpt=True, liger=False, packing=False, alloc=EXP, extra=("--objective", "orpo")),
            Row(H, D, "l8b", 3, "qlora", micro_batch=1, seq_len=512, grad_ckpt=True, alloc=EXP, extra=_SMALL_Z3, gpus=2),
            Row(H, D, "m7b", 3, "qlora", micro_batch=1, seq_len=512, grad_ckpt=True, alloc=EXP, extra=_SMALL_Z3, gpus=2),
            Row(H, D, "q2moe", 3, "qlora", micro_batch=1, seq_len=512, grad_ckpt=True, alloc=EXP, extra=_SMALL_Z3, gpus=2),
            Row(H, D, "l8b", 3, "qlora", micro_batch=2, seq_len=4096, grad_ckpt=True, alloc=EXP, gpus=2),
        ),
    ),
    "heldout-nods-backward-peak": MemorySet(
        about="Full fine-tuning in one process without DeepSpeed or checkpointing, where the "
        "backward peaks before most grads exist, and where heldout-pref-loss-kbit's "
        "Llama-3.2-3B row came out 6.5% under (1.7 GiB allocated more than estimated; its "
        "Qwen3-0.6B sibling +2.0%). That row again as a fit row, to be run with "
        "DOJO_BENCH_MEMSNAP for the allocator's history at its peak; held beside it, the same "
        "class on shapes the estimate was not judged on there: Qwen3-1.7B (tied head, 152k "
        "vocabulary) and TinyLlama-1.1B (untied, 32k) with Liger, and Llama-3.2-1B without "
        "Liger. Committed before the set runs: what the fit row shows is judged on the others.",
        committed="82c54d6, before the set ran",
        was="bench/rows.py",
        rows=(
            Row(F, D, "l3b", -1, micro_batch=2, alloc=EXP),
            Row(H, D, "q3", -1, micro_batch=2, alloc=EXP),
            Row(H, D, "tl1b", -1, micro_batch=4, alloc=EXP),
            Row(H, D, "l1b", -1, micro_batch=2, liger=False, alloc=EXP),
        ),
    ),
    "heldout-ds-backward-peak": MemorySet(
        about="Full fine-tuning with Liger and no checkpointing under DeepSpeed ZeRO-1/2, where "
        "the estimate counts every gradient from the first layer's backward and a measured 14h "
        "per token and layer of saved tensors, against the 8h Liger keeps by count (the "
        "allocator history of heldout-nods-backward-peak's fit row). ZeRO-1/2 make their "
        "gradient partition at the first bucket's reduction, and torch makes each param.grad "
        "as its layer's backward reaches it: the 14h may stand in for gradients counted too "
        "early. Two Llama-3.2-3B fit rows, to be run with DOJO_BENCH_MEMSNAP for the history "
        "at their peaks; held beside them, the same class on Qwen3-1.7B (ZeRO-2) and "
        "TinyLlama-1.1B (ZeRO-1). Committed before the set runs.",
        committed="707a88f, before the set ran",
        was="bench/rows.py",
        rows=(
            Row(F, D, "l3b", 1, micro_batch=2, alloc=EXP),
            Row(F, D, "l3b", 2, micro_batch=2, alloc=EXP),
            Row(H, D, "q3", 2, micro_batch=2, alloc=EXP),
            Row(H, D, "tl1b", 1, micro_batch=4, alloc=EXP),
        ),
    ),
    "heldout-second-upcast": MemorySet(
        about="Held rows for the second fp32 upcast read from heldout-ds-backward-peak's "
        "Llama-3.2-3B allocator histories (ZeRO-1/2 full fine-tuning without checkpointing under "
        "expandable segments: the next backward's bf16 gradient partition can take the last "
        "upcast's freed pages, and the step maps its upcast anew; the estimate charges 2 B x "
        "partition more): shapes and batches that rule was not read from (TinyLlama-1.1B's 32k "
        "vocabulary, Qwen2.5-3B, Gemma-2-2B without Liger, Llama-3.2-1B at 1 x 4096, "
        "Qwen2.5-0.5B at 4 x 2048), and two checkpointed rows, where the estimate charges no "
        "second upcast (Qwen2.5-3B and Llama-3.2-1B). Committed before the set runs.",
        committed="5aa0cbe, before the set ran",
        was="bench/rows.py",
        rows=(
            Row(H, D, "tl1b", 2, micro_batch=2, alloc=EXP),
            Row(H, D, "q3b", 2, micro_batch=2, alloc=EXP),
            Row(H, D, "g2b", 2, micro_batch=1, liger=False, alloc=EXP),
            Row(H, D, "l1b", 1, micro_batch=1, seq_len=4096, alloc=EXP),
            Row(H, D, "q05", 2, micro_batch=4, alloc=EXP),
            Row(H, D, "q3b", 2, micro_batch=4, grad_ckpt=True, alloc=EXP),
            Row(H, D, "l1b", 2, micro_batch=8, grad_ckpt=True, alloc=EXP),
        ),
    ),
    "heldout-logits-reserve": MemorySet(
        about="What the allocator keeps of the loss's fp32 logits blocks without Liger under "
        "expandable segments, on large vocabularies with LoRA and checkpointing: the estimate "
        "charges 0.6 of one block (0.54-0.73 on eight H200 runs), where Gemma-3 at 8k tokens "
        "(heldout-moe-offload-long, -7.1% on nvidia-smi, allocated +1.6%) held about 0.97 and a "
        "Gemma-2 run 1.03. Fit rows, to be run with DOJO_BENCH_MEMSNAP for the allocator's "
        "history: Gemma-3 (262k) at 4k and 16k tokens and Qwen3-1.7B (152k) at 8k. Held beside "
        "them: Gemma-2-2B (256k, eager attention) at 8k, Llama-3.2-1B (128k) at 16k and "
        "Qwen2.5-1.5B (152k) at 2 x 8k. Committed before the set runs.",
        committed="a7e36c4, before the set ran",
        was="bench/rows.py",
        rows=(
            Row(F, D, "g3", 2, "lora", micro_batch=1, seq_len=4096, grad_ckpt=True, liger=False, alloc=EXP),
            Row(F, D, "g3", 2, "lora", micro_batch=1, seq_len=16384, grad_ckpt=True, liger=False, alloc=EXP),
            Row(F, D, "q3", 2, "lora", micro_batch=1, seq_len=8192, grad_ckpt=True, liger=False, alloc=EXP),
            Row(H, D, "g2b", 2, "lora", micro_batch=1, seq_len=8192, grad_ckpt=True, liger=False, alloc=EXP),
            Row(H, D, "l1b", 2, "lora", micro_batch=1, seq_len=16384, grad_ckpt=True, liger=False, alloc=EXP),
            Row(H, D, "q15", 2, "lora", micro_batch=2, seq_len=8192, grad_ckpt=True, liger=False, alloc=EXP),
        ),
    ),
    "heldout-dora-modules": MemorySet(
        about="LoRA's --dora and --modules-to-save, counted from PEFT's source and measured on "
        "the CPU only (bench/adapter_extras_cpu.py): DoRA's saved base and branch outputs without "
        "and with checkpointing and its weight-norm transient (QLoRA: with the dequantized "
        "weight), and a trainable copy of the embedding and the head (tied on Llama-3.2-1B, "
        "untied on Llama-3.1-8B) with the head's gradient in Liger's fused loss and in HF's loss. "
        "Every row held: no constant was fitted on a GPU. Committed before the set runs.",
        committed="ee777c4, before the set ran",
        was="bench/rows.py",
        rows=(
            Row(H, D, "l1b", 2, "lora", micro_batch=4, extra=("--dora",), alloc=EXP),
            Row(H, D, "l3b", 2, "lora", micro_batch=2, seq_len=4096, grad_ckpt=True, extra=("--dora",), alloc=EXP),
            Row(H, D, "q15", 2, "qlora", micro_batch=4, grad_ckpt=True, extra=("--dora",), alloc=EXP),
            Row(H, D, "l1b", 2, "lora", micro_batch=4, extra=("--modules-to-save", "embed_tokens", "--modules-to-save", "lm_head"), alloc=EXP),
            Row(H, D, "l8b", 2, "lora", micro_batch=2, grad_ckpt=True, extra=("--modules-to-save", "lm_head"), alloc=EXP),
            Row(H, D, "q3", 2, "lora", micro_batch=2, seq_len=4096, grad_ckpt=True, liger=False, extra=("--modules-to-save", "embed_tokens", "--modules-to-save", "lm_head"), alloc=EXP),
        ),
    ),
    "heldout-norm-copy": MemorySet(
        about="ZeRO-1/2's gradient norm on fp64 copies: get_grad_norm_direct copies each gradient "
        "piece of the partition to fp64, one at a time, before the step's flat bf16 gradient and "
        "fp32 upcast (6 B x partition); where one piece is over 3/4 of the partition (a trained "
        "head or embedding copy beside LoRA adapters) its 8 B copy is the step's peak. Read from "
        "DeepSpeed's source after heldout-dora-modules' Llama-3.1-8B lm_head row ran (allocated "
        "-3.2%, -0.5% with the rule; that row's device total stays 2.3 GiB under, in the "
        "allocator's reserve). Fit row, to be run with DOJO_BENCH_MEMSNAP for the allocator's "
        "history: that 8B row again. Held: a tied embedding copy (Llama-3.2-3B, 4k, "
        "checkpointing), an untied head at the rule's edge (Mistral-7B, 32k vocabulary: the "
        "head is 0.76 of the partition), and Qwen2.5-1.5B's tied head at ZeRO-1 without "
        "checkpointing. Committed before the set runs.",
        committed="9d7e4ef, before the set ran",
        was="bench/rows.py",
        rows=(
            Row(F, D, "l8b", 2, "lora", micro_batch=2, grad_ckpt=True, extra=("--modules-to-save", "lm_head"), alloc=EXP),
            Row(H, D, "l3b", 2, "lora", micro_batch=2, seq_len=4096, grad_ckpt=True, extra=("--modules-to-save", "embed_tokens"), alloc=EXP),
            Row(H, D, "m7b", 2, "lora", micro_batch=2, grad_ckpt=True, extra=("--modules-to-save", "lm_head"), alloc=EXP),
            Row(H, D, "q15", 1, "lora", micro_batch=4, extra=("--modules-to-save", "lm_head"), alloc=EXP),
        ),
    ),
    "heldout-step-upcast": MemorySet(
        about="The step's pages with checkpointing under expandable segments (ZeRO-1/2): "
        "heldout-second-upcast's Qwen2.5-3B full 4 x 2048 held one fp32 upcast (4 B x "
        "partition) beyond the estimate's reserve (-12.5%, allocated -0.1%), as two "
        "Qwen2.5-0.5B runs had, while six other checkpointed runs did not; the estimate then "
        "gave that case as reserve_may_add_gib, in the verdict, not in the total (since "
        "heldout-step-remap's commit: in the total, as step_remap_gib). "
        "heldout-norm-copy's embedding and head copies beside LoRA adapters (Llama-3.2-3B, "
        "Mistral-7B) held 1.3-2.4 GiB of reserve the estimate does not charge. Fit rows, to be "
        "run with DOJO_BENCH_MEMSNAP (and bench/gpu.sh pack): those two runs again. Held: "
        "checkpointed full fine-tuning of other models and batches at ZeRO-2 and ZeRO-1, and a "
        "head copy at another batch; each is judged on the total (within -5% to +10%) and on "
        "whether nvidia-smi's peak stays within the total plus reserve_may_add_gib. Committed "
        "before the set runs.",
        committed="9cea0c3, before the set ran",
        was="bench/rows.py",
        rows=(
            Row(F, D, "q3b", 2, "full", micro_batch=4, grad_ckpt=True, alloc=EXP),
            Row(F, D, "l3b", 2, "lora", micro_batch=2, seq_len=4096, grad_ckpt=True, extra=("--modules-to-save", "embed_tokens"), alloc=EXP),
            Row(H, D, "q15", 2, "full", micro_batch=4, grad_ckpt=True, alloc=EXP),
            Row(H, D, "l3b", 2, "full", micro_batch=4, grad_ckpt=True, alloc=EXP),
            Row(H, D, "g2b", 2, "full", micro_batch=2, grad_ckpt=True, alloc=EXP),
            Row(H, D, "q06", 2, "full", micro_batch=4, seq_len=4096, grad_ckpt=True, alloc=EXP),
            Row(H, D, "q3b", 1, "full", micro_batch=2, seq_len=4096, grad_ckpt=True, alloc=EXP),
            Row(H, D, "m7b", 2, "lora", micro_batch=4, seq_len=4096, grad_ckpt=True, extra=("--modules-to-save", "lm_head"), alloc=EXP),
        ),
    ),
    "heldout-step-remap": MemorySet(
        about="ZeRO-1/2's step remap over a training run, not 3 steps. heldout-step-upcast's "
        "allocator histories showed the step's largest transient (the fp32 gradient partition, "
        "or the fp64 norm copy of a trained embedding) mapped anew at step 2 or 3, when the next "
        "backward's bf16 gradient partition had landed in the pages the step freed; 7 of 15 "
        "checkpointed full fine-tuning runs of 3 steps held it, 8 did not. The estimate now "
        "charges it in the total (step_remap_gib), on the reading that which step takes it "
        "turns on how each packed batch splits, so a training run takes it at some step. Held, "
        "30 steps each: eight settings whose 3-step runs did not take it (now 10-20% over), a "
        "ZeRO-1 full run and a tied-embedding copy beside LoRA adapters never measured. Each is "
        "judged on the total (within -5% to +10%); with DOJO_BENCH_MEMSNAP the history says at "
        "which step the reserve grew. Committed before the set runs. (After its eight H100 rows "
        "ran, none of which took the remap in 30 steps, the total no longer charges it: "
        "step_remap_gib is what the verdict adds, as reserve_may_add_gib was before.)",
        committed="6a512f7, before the set ran",
        was="bench/rows.py",
        rows=(
            Row(H, D, "q15", 2, "full", micro_batch=2, seq_len=4096, grad_ckpt=True, packing=False, alloc=EXP, steps=30),
            Row(H, D, "q06", 2, "full", micro_batch=2, seq_len=4096, grad_ckpt=True, alloc=EXP, steps=30),
            Row(H, D, "q3", 2, "full", micro_batch=4, grad_ckpt=True, alloc=EXP, steps=30),
            Row(H, D, "q3b", 2, "full", micro_batch=1, seq_len=4096, grad_ckpt=True, attn="sdpa_varlen", alloc=EXP, steps=30),
            Row(H, D, "l1b", 2, "full", micro_batch=2, seq_len=4096, grad_ckpt=True, attn="sdpa_varlen", alloc=EXP, steps=30),
            Row(H, D, "g2b", 2, "full", micro_batch=2, grad_ckpt=True, alloc=EXP, steps=30),
            Row(H, D, "q06", 2, "full", micro_batch=4, seq_len=4096, grad_ckpt=True, alloc=EXP, steps=30),
            Row(H, D, "q3moe", 2, "lora", micro_batch=2, grad_ckpt=True, alloc=EXP, steps=30),
            Row(H, D, "l3b", 1, "full", micro_batch=2, grad_ckpt=True, alloc=EXP, steps=30),
            Row(H, D, "q15", 2, "lora", micro_batch=2, seq_len=4096, grad_ckpt=True, extra=("--modules-to-save", "embed_tokens"), alloc=EXP, steps=30),
        ),
    ),
    "heldout-users-next": MemorySet(
        about="A confirmation of the estimate where users go next, as it stands: every row held, "
        "none run before under these settings, none run while the estimate was changed. Six "
        "rows of each class: mixture-of-experts LoRA and QLoRA (Qwen3-MoE, Qwen2-MoE, Mixtral; "
        "ZeRO-2, ZeRO-3, no DeepSpeed; other batches and lengths than before); full fine-tuning "
        "with --offload cpu (ZeRO-1/2/3, Qwen3, Llama-3.2-3B, Gemma-3, TinyLlama, with and "
        "without checkpointing); LoRA and QLoRA at 8k-32k tokens with checkpointing (262k and "
        "256k vocabularies, an 8B QLoRA at 16k); runs without DeepSpeed (LoRA, QLoRA with "
        "k-bit prep, pure-bf16 full, and the plain PEFT script). dojo's default allocator "
        "(expandable segments). Each is judged on the total (within -5% to +10%) and on its "
        "verdict. Committed before the set runs.",
        committed="eaa8788, before the set ran",
        was="bench/rows.py",
        rows=(
            # mixture of experts (rows.EXTRA_ARCHS: the real layers, fewer of them)
            Row(H, D, "q3moe", 2, "lora", micro_batch=1, seq_len=4096, grad_ckpt=True, alloc=EXP),
            Row(H, D, "q3moe", 2, "qlora", micro_batch=2, grad_ckpt=True, alloc=EXP),
            Row(H, D, "q2moe", 3, "lora", micro_batch=4, grad_ckpt=True, alloc=EXP),
            Row(H, D, "q2moe", -1, "lora", micro_batch=2, grad_ckpt=True, alloc=EXP),
            Row(H, D, "mix", 2, "qlora", micro_batch=2, grad_ckpt=True, alloc=EXP),
            Row(H, D, "mix", 3, "lora", micro_batch=1, seq_len=4096, grad_ckpt=True, alloc=EXP),
            # full fine-tuning with the optimizer (at ZeRO-3 the parameters too) on the CPU
            Row(H, D, "q3", 2, micro_batch=2, grad_ckpt=True, offload="cpu", alloc=EXP),
            Row(H, D, "l3b", 2, micro_batch=2, seq_len=4096, grad_ckpt=True, offload="cpu", alloc=EXP),
            Row(H, D, "q15", 3, micro_batch=4, grad_ckpt=True, offload="cpu", alloc=EXP),
            Row(H, D, "q3b", 1, micro_batch=2, grad_ckpt=True, offload="cpu", alloc=EXP),
            Row(H, D, "g3", 2, micro_batch=2, grad_ckpt=True, offload="cpu", alloc=EXP),
            Row(H, D, "tl1b", 3, micro_batch=4, offload="cpu", alloc=EXP),
            # long context with checkpointing; 262k (Gemma-3) and 256k (Gemma-2) vocabularies
            Row(H, D, "g3", 2, "lora", micro_batch=1, seq_len=32768, grad_ckpt=True, alloc=EXP),
            Row(H, D, "q15", 2, "lora", micro_batch=1, seq_len=16384, grad_ckpt=True, alloc=EXP),
            Row(H, D, "l3b", 2, "lora", micro_batch=1, seq_len=16384, grad_ckpt=True, alloc=EXP),
            Row(H, D, "g2b", 2, "qlora", micro_batch=1, seq_len=8192, grad_ckpt=True, alloc=EXP),
            Row(H, D, "q3", 2, "lora", micro_batch=1, seq_len=32768, grad_ckpt=True, alloc=EXP),
            Row(H, D, "l8b", 2, "qlora", micro_batch=1, seq_len=16384, grad_ckpt=True, alloc=EXP),
            # without DeepSpeed (--zero none; the plain script: PEFT's k-bit prep, no DeepSpeed)
            Row(H, D, "l3b", -1, "lora", micro_batch=2, seq_len=4096, grad_ckpt=True, alloc=EXP),
            Row(H, D, "q3b", -1, "qlora", micro_batch=4, grad_ckpt=True, alloc=EXP),
            Row(H, D, "q06", -1, micro_batch=2, seq_len=4096, grad_ckpt=True, alloc=EXP),
            Row(H, D, "g3", -1, "lora", micro_batch=2, seq_len=8192, grad_ckpt=True, alloc=EXP),
            Row(H, D, "m7b", -1, "qlora", micro_batch=2, seq_len=4096, grad_ckpt=True, alloc=EXP),
            Row(H, P, "l3b", -1, "qlora", micro_batch=2, grad_ckpt=True),
        ),
    ),
    "heldout-eager-checkpointed": MemorySet(
        about="Eager attention under checkpointing, where a recomputed layer's backward peaks at "
        "softmax's backward (12 B a score element, 14 with Gemma-2's soft-cap: "
        "bench/eager_backward_cpu.py); the estimate changed for it after heldout-users-next's "
        "Gemma-2-2B QLoRA row at 8k came out -26.9%, so that row is no longer a held result "
        "and these are. Gemma-2-2B LoRA and QLoRA at 4k-12k (ZeRO-2, ZeRO-3, no DeepSpeed, the "
        "plain PEFT script) and Llama-3.2-1B with --attn eager (no soft-cap). Every row held, "
        "committed before the set runs. (Since f3ecb7e the estimate charges what two of these runs' "
        "allocator histories showed on CUDA, 16 B a score element at softmax's backward, 18 with "
        "the soft-cap, and one bf16 score block of reserve beside it, fitted on this set's dojo "
        "runs: for those terms they are fit rows, and heldout-eager-cuda holds the check.)",
        committed="1412464, before the set ran",
        was="bench/rows.py",
        rows=(
            Row(H, D, "g2b", 2, "lora", micro_batch=1, seq_len=8192, grad_ckpt=True, alloc=EXP),
            Row(H, D, "g2b", 2, "qlora", micro_batch=1, seq_len=12288, grad_ckpt=True, alloc=EXP),
            Row(H, D, "g2b", 3, "lora", micro_batch=2, seq_len=4096, grad_ckpt=True, alloc=EXP),
            Row(H, D, "g2b", -1, "qlora", micro_batch=1, seq_len=8192, grad_ckpt=True, alloc=EXP),
            Row(H, P, "g2b", -1, "qlora", micro_batch=1, seq_len=8192, grad_ckpt=True),
            Row(H, D, "l1b", 2, "lora", micro_batch=1, seq_len=8192, grad_ckpt=True, attn="eager", alloc=EXP),
        ),
    ),
    "heldout-offload-norm": MemorySet(
        about="Full fine-tuning at ZeRO-1/2 with optimizer offload, where DeepSpeed takes each "
        "gradient's norm on the GPU in the backward's hooks as an fp64 copy (stage_1_and_2.py "
        "set_norm_for_param_grad_in_gpu): 8 B x the embedding, beside the reduce bucket. The "
        "estimate changed for it after heldout-users-next's ZeRO-2 offload rows came out -7% to "
        "-13% with their allocated peaks 1.1-1.4 GiB over the estimate's, so those rows are no "
        "longer held results and these are: a tied embedding larger than the bucket (Gemma-2-2B), "
        "untied heads larger than it and within it (Llama-3.1-8B and Mistral-7B, 8 layers each), "
        "Llama-3.2-3B at a shorter row, ZeRO-1, and PyTorch's default allocator. Every row held, "
        "committed before the set runs.",
        committed="ec8184f, before the set ran",
        was="bench/rows.py",
        rows=(
            Row(H, D, "g2b", 2, micro_batch=2, grad_ckpt=True, offload="cpu", alloc=EXP),
            Row(H, D, "l8b8", 2, micro_batch=2, grad_ckpt=True, offload="cpu", alloc=EXP),
            Row(H, D, "m7b8", 2, micro_batch=2, grad_ckpt=True, offload="cpu", alloc=EXP),
            Row(H, D, "l3b", 2, micro_batch=2, grad_ckpt=True, offload="cpu", alloc=EXP),
            Row(H, D, "q3", 1, micro_batch=4, grad_ckpt=True, offload="cpu", alloc=EXP),
            Row(H, D, "q15", 2, micro_batch=2, seq_len=4096, grad_ckpt=True, offload="cpu"),
        ),
    ),
    "heldout-offload-init": MemorySet(
        about="Full fine-tuning at ZeRO-1/2 with optimizer offload on one GPU, where DeepSpeed's "
        "set-up leaves three bf16 copies of the weights reserved (the loaded tensors, the flat "
        "buffer, the partition's clone on its way to the host: stage_1_and_2.py __init__). The "
        "estimate changed for it after heldout-offload-norm's allocator histories showed it, so "
        "the 12 ZeRO-1/2 offload runs measured until then are no longer held results for that "
        "term and these are: shapes and settings none of them had (Qwen2.5-0.5B and Qwen3-0.6B, "
        "whose embeddings are a large share; Gemma-2-2B and Llama-3.1-8B at ZeRO-1; Qwen2.5-3B at "
        "ZeRO-2; TinyLlama at ZeRO-1; Llama-3.2-1B without checkpointing at 4k, where training "
        "outgrows the set-up's pages; Mistral-7B at 8 layers under PyTorch's default allocator). "
        "Every row held, committed before the set runs.",
        committed="d4eadf0, before the set ran",
        was="bench/rows.py",
        rows=(
            Row(H, D, "q05", 2, micro_batch=4, grad_ckpt=True, offload="cpu", alloc=EXP),
            Row(H, D, "q06", 1, micro_batch=2, seq_len=4096, grad_ckpt=True, offload="cpu", alloc=EXP),
            Row(H, D, "g2b", 1, micro_batch=2, grad_ckpt=True, offload="cpu", alloc=EXP),
            Row(H, D, "l8b8", 1, micro_batch=4, grad_ckpt=True, offload="cpu", alloc=EXP),
            Row(H, D, "q3b", 2, micro_batch=2, grad_ckpt=True, offload="cpu", alloc=EXP),
            Row(H, D, "tl1b", 1, micro_batch=4, grad_ckpt=True, offload="cpu", alloc=EXP),
            Row(H, D, "l1b", 2, micro_batch=2, seq_len=4096, offload="cpu", alloc=EXP),
            Row(H, D, "m7b8", 2, micro_batch=4, seq_len=4096, grad_ckpt=True, offload="cpu"),
        ),
    ),
    "heldout-eager-cuda": MemorySet(
        about="Eager attention under checkpointing on CUDA, where a recomputed layer's backward "
        "holds 16 B a score element (18 with Gemma-2's soft-cap: three fp32 blocks beside the kept "
        "softmax output, one more than the CPU's kernels make) and the allocator keeps about one "
        "bf16 score block reserved beside them. The estimate changed for both after "
        "heldout-eager-checkpointed's allocator histories showed them, so its five dojo runs and "
        "heldout-users-next's Gemma-2-2B 8k row are no longer held results for these terms and "
        "these are: models and settings none of them had (Qwen2.5-1.5B LoRA at ZeRO-2 and "
        "Llama-3.2-3B QLoRA without DeepSpeed, both with --attn eager at 8k; TinyLlama LoRA at "
        "ZeRO-3, 2 x 4096; Gemma-2-2B QLoRA at ZeRO-1 and 16k). Every row held, committed before "
        "the set runs.",
        committed="f3ecb7e, before the set ran",
        was="bench/rows.py",
        rows=(
            Row(H, D, "q15", 2, "lora", micro_batch=1, seq_len=8192, grad_ckpt=True, attn="eager", alloc=EXP),
            Row(H, D, "l3b", -1, "qlora", micro_batch=1, seq_len=8192, grad_ckpt=True, attn="eager", alloc=EXP),
            Row(H, D, "tl1b", 3, "lora", micro_batch=2, seq_len=4096, grad_ckpt=True, attn="eager", alloc=EXP),
            Row(H, D, "g2b", 1, "qlora", micro_batch=1, seq_len=16384, grad_ckpt=True, alloc=EXP),
        ),
    ),
}
# fmt: on


def objective_of(extra: tuple[str, ...]) -> str:
    """The --objective a row's flags give (sft when none)."""
    flags = list(extra)
    return flags[flags.index("--objective") + 1] if "--objective" in flags else "sft"


@dataclass(frozen=True)
class Case:
    """One speed row: a setting every system of the row trains, on one dataset."""

    shape: str  # a SHAPES key
    method: str  # full | lora | qlora
    zero: int  # ZeRO stage of the plain script, dojo and trl-ds
    micro_batch: int  # rows per step: packed rows (dojo, trl), padded samples (plain)
    seq_len: int  # max tokens per sample, and per packed row
    grad_ckpt: bool
    data: str  # "mix" | "longtail" | "fixed" (bench/workload.py)
    systems: tuple[
        str, ...
    ]  # the reference first ("plain", "trl-dpo", "trl-kto", "trl-pref"): every ratio is to it
    objective: str = "sft"  # dojo's --objective; dpo: TRL's DPO script is the reference


VARIANTS: tuple[str, ...] = (
    "--compile off",
    "--compile on",
    "--liger off",
    "--liger loss",
    "--attn sdpa",
    "--zero 0",  # one GPU: no DeepSpeed sharding to pay for
    "--zero none",  # one GPU: the plain Trainer, no DeepSpeed engine at all
)
"""dojo's variants, each tried against dojo's defaults on every row of the peer set: a variant
that resolves to the same run as the defaults (--compile off, dojo's default) is skipped by
bench/speed.py, since it is the same run."""

_PEER = ("plain", "trl", "dojo")
_PEER_FULL = ("plain", "trl", "trl-ds", "dojo")  # full fine-tuning: TRL users reach for DeepSpeed
_VARIANT = ("plain", "dojo", *(f"dojo {v}" for v in VARIANTS))
# TRL's own DPO script (trl/scripts/dpo.py) against dojo train: its default (the pairs without
# padding through the layers) and padded rows, as TRL runs them (--attn sdpa).
_PREF = ("trl-dpo", "dojo", "dojo --attn sdpa")
# TRL's ORPO and CPO (SimPO) trainers (bench/trl_pref.py) against dojo train: its default (TRL's
# fused LM head, the pairs without padding through the layers) and padded rows (the head alone).
_PREF_TRAINERS = ("trl-pref", "dojo", "dojo --attn sdpa")
# TRL's own KTO script (trl/scripts/kto.py) against dojo train, padded and not.
_KTO = ("trl-kto", "dojo", "dojo --attn sdpa")

SPEED_SETS: dict[str, dict[str, Case]] = {
    # The realistic mix (bench/workload.py: log-normal lengths, median 350 words), one H200, in the
    # order rows are kept when a GPU call's time runs short (the last is dropped first).
    # 1b-full is the old T6 case on the same data.
    "peer": {
        "1b-full": Case("l1b", "full", 2, 4, 2048, False, "mix", _PEER_FULL),
        "1b-lora": Case("l1b", "lora", 2, 4, 2048, False, "mix", _PEER),
        "1b-qlora": Case("l1b", "qlora", 2, 4, 2048, False, "mix", _PEER),
        "8b-lora-ckpt": Case("l8b", "lora", 2, 4, 2048, True, "mix", _PEER),
        # with dojo's run of TRL's one-GPU recipe (bf16 weights and states, no DeepSpeed)
        "7b-full-z3-ckpt": Case(
            "l7b", "full", 3, 2, 2048, True, "mix", (*_PEER_FULL, "dojo --zero none")
        ),
        "8b-qlora-ckpt": Case("l8b", "qlora", 2, 4, 2048, True, "mix", _PEER),
        # a few 8k-16k samples among short ones; the plain script trains one sample a step
        "1b-lora-longtail": Case("l1b", "lora", 2, 1, 16384, True, "longtail", _PEER),
    },
    # The same rows: dojo's defaults against each variant (and the plain script, for the ratio).
    "peer-variants": {},
    # Fixed-length rows (every sample longer than seq_len, truncated: no padding, one sample per
    # row): the secondary table. The old cases T1-T5 and T7, by those names in git history.
    "fixed": {
        "1b-full-z2": Case("l1b", "full", 2, 4, 2048, False, "fixed", _PEER_FULL),  # T1
        "1b-full-z3": Case(
            "l1b", "full", 3, 4, 2048, False, "fixed", ("plain", "trl-ds", "dojo")
        ),  # T2
        "1b-lora-z2": Case("l1b", "lora", 2, 4, 2048, False, "fixed", _PEER),  # T3
        "1b-lora-z3": Case(
            "l1b", "lora", 3, 4, 2048, False, "fixed", ("plain", "trl-ds", "dojo")
        ),  # T4
        "1b-qlora-z2-ckpt": Case("l1b", "qlora", 2, 4, 2048, True, "fixed", _PEER),  # T5
        "7b-full-z3-ckpt": Case("l7b", "full", 3, 2, 2048, True, "fixed", _PEER_FULL),  # T7
    },
    # The same rows: dojo's defaults against each variant (compile pays on fixed shapes).
    "fixed-variants": {},
    # DPO against TRL's own script at the same settings (the same DeepSpeed JSON: the one dojo
    # train writes for the row), on the realistic preference mix (bench/workload.py pref-mix).
    "preference": {
        "1b-dpo-lora-z2": Case("l1b", "lora", 2, 4, 2048, False, "pref-mix", _PREF, "dpo"),
        "1b-dpo-full-z3": Case("l1b", "full", 3, 4, 2048, False, "pref-mix", _PREF, "dpo"),
    },
    # KTO against TRL's own script at the same settings, on the same pairs as unpaired rows.
    "kto": {
        "1b-kto-lora-z2": Case("l1b", "lora", 2, 4, 2048, False, "kto-mix", _KTO, "kto"),
    },
    # ORPO and SimPO against TRL's trainers at the same settings, on the same mix.
    "orpo-simpo": {
        "1b-orpo-lora-z2": Case(
            "l1b", "lora", 2, 4, 2048, False, "pref-mix", _PREF_TRAINERS, "orpo"
        ),
        "1b-simpo-lora-z2": Case(
            "l1b", "lora", 2, 4, 2048, False, "pref-mix", _PREF_TRAINERS, "simpo"
        ),
    },
}
for _rows, _variants in (("peer", "peer-variants"), ("fixed", "fixed-variants")):
    SPEED_SETS[_variants] = {
        name: Case(
            c.shape, c.method, c.zero, c.micro_batch, c.seq_len, c.grad_ckpt, c.data, _VARIANT
        )
        for name, c in SPEED_SETS[_rows].items()
    }
