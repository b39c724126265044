"""What one estimate describes: the training setup (``Setup``), the few measured constants
(``Calibration``) and ``validate``. Pure data; ``dojo.estimate.model`` turns a Setup into a
MemoryEstimate."""

import math
from dataclasses import dataclass, field
from typing import Literal

from dojo.errors import EstimateError
from dojo.modelspec import ModelSpec
from dojo.zero.build import hf_auto_prefetch, hf_auto_reduce_bucket

Method = Literal["full", "lora", "qlora"]
Offload = Literal["none", "cpu", "nvme"]
OverlapRule = Literal["current", "docs"]
Attention = Literal["sdpa", "flash_attention_2", "eager"]
Optim = Literal["adamw", "adamw_8bit", "paged_adamw_8bit", "paged_adamw_32bit"]
AdapterDtype = Literal["auto", "bf16", "fp32"]

OPTIMS = ("adamw", "adamw_8bit", "paged_adamw_8bit", "paged_adamw_32bit")
# 1 M tokens: beyond every released context window (= dojo train's --seq-len cap); a larger
# value is a typo'd extra digit, and its activation terms overflow any useful table.
MAX_SEQ_LEN = 1 << 20


@dataclass(frozen=True)
class Calibration:
    """Constants no mechanism in the source gives; each names the rows it was measured on."""

    cuda_context_gib: float = 1.7
    """Everything nvidia-smi shows beyond PyTorch's reserved memory for one process: CUDA context,
    kernels (Triton/Liger too), cuBLAS workspaces, NCCL's world-size-1 setup. Measured on the
    H200 as nvidia-smi peak - max reserved: 1.67-1.71 GiB on the 1B rows, 1.9-2.3 on 7B
    (docs/benchmarks.md); an empty process is 0.62 GiB."""
    nccl_gib: float = 0.3
    """NCCL channel buffers per rank when world size > 1, outside PyTorch's allocator; not
    measured (docs/estimate.md, "CUDA context and NCCL")."""
    offload_reserve: float = 1.0
    """Optimizer offload: reserved-but-free memory, in units of (2 B x trainable params / N +
    4 B x largest trainable tensor): the loaded model's per-tensor blocks DeepSpeed frees when
    it flattens the 16-bit params (stage_1_and_2.py __init__) and the per-parameter fp32 grad
    copy it streams to the host (async_inplace_copy_grad_to_fp32_buffer_from_gpu). That these
    stay reserved whole is calibrated on the two 1B offload rows (8 and 15: 3.1 and 3.9 GiB)."""
    kappa: float = 0.0
    """Transient flatten copy of a gradient bucket during reduction, in buckets (0-1 by the
    source; docs/estimate.md, "Communication buckets"). Measured 0 on the H200: overlap on/off
    = +0.93 GiB = exactly one 5e8 bucket; 5e8 -> 2e8: -1.10 GiB = 2 x 3e8 x 2 B."""
    liger_full_saved_per_token_h: float = 14.0
    """Bytes per token x hidden that Liger's kernels save per layer in full fine-tuning, beyond
    the 2i of SwiGLU: 8 by counting saved tensors, 14 measured (H200, rows 1-5)."""
    recompute_factor: float = 2.0
    """Backward of a checkpointed layer holds this many A_layer (1.9 measured on the CPU;
    docs/estimate.md, "Gradient checkpointing")."""
    recompute_factor_frozen: float = 1.4
    """The same for a frozen base (LoRA/QLoRA), whose backward makes no weight grads: 1.3-1.4
    fits five H200 rows with LoRA/QLoRA and checkpointing (2.0 put them 7-31% over); 1.4, the
    safe side of that range."""
    zero3_kept_per_token_h: float = 9.0
    """ZeRO-3 without checkpointing keeps this many more bytes per token x hidden per layer than
    ZeRO-0/2 with the same settings, for full fine-tuning with Liger's layer kernels; no
    mechanism found. Measured (allocated, H200): dojo_l1b_Z3_full and dojo_l1b_Z3_lora, 4 x 2048
    (+2.37 / +2.40 GiB = 8.9 / 9.0 B). LoRA's share has a mechanism (DeepSpeed's ZeRO-3 linear
    keeps frozen inputs: ``activations._zero3_frozen_inputs``), and full fine-tuning with
    transformers' layers shows none of it (four rows, over by 9-14 B with it); QLoRA's 4-bit
    matmul keeps no frozen input either. With checkpointing
    (dojo_g2b_Z3_lora: +0.2 GiB) it is absent, so it is applied only without."""
    loss_bytes_per_logit: float = 12.0
    """fp32 upcast + log-softmax + its grad at the start of backward, bytes per logit (12.05
    measured on the CPU; docs/estimate.md, "Logits and loss")."""
    loss_tail_bytes_per_th: float = 26.0
    """Final norm and lm_head input alive at the loss peak, bytes per token x hidden (measured
    on the CPU; docs/estimate.md, "Gradient checkpointing")."""
    expandable_logits_reserve: float = 0.6
    """Expandable segments without Liger: reserved-but-free memory at the peak, in fp32 logits
    blocks (4 B x tokens x vocab). Segments grow in place, so the step's flat transients reuse
    the backward's pages and nothing is held twice, but the freed loss blocks still leave holes
    that the next forward's smaller tensors split. Fitted on eight H200 rows under expandable
    segments without Liger (0.54-0.73, one Gemma-2 row 1.03; median 0.6)."""
    cpu_process_gib: float = 2.5
    """Host RAM of one training process before any model state (python, torch, CUDA libs,
    data): 2.8-3.1 GiB measured in total on the H200 rows without offload."""


@dataclass(frozen=True)
class Setup:
    """One training configuration to estimate. Defaults: single GPU, ZeRO-2, full fine-tune."""

    stage: int = 2
    method: Method = "full"
    num_gpus: int = 1
    """GPUs per node (DeepSpeed's num_gpus_per_node); world size = num_gpus * num_nodes."""
    num_nodes: int = 1
    offload_optimizer: Offload = "none"
    offload_param: Offload = "none"
    """ZeRO-3 only."""
    micro_batch: int = 1
    seq_len: int = 2048
    grad_ckpt: bool = False
    """HF TrainingArguments' default is off."""
    overlap_comm: bool | None = None
    """None = DeepSpeed's default: on at stage 3, off below (zero/config.py overlap_comm_valid)."""
    bucket_size: int | None = None
    """reduce (and allgather) bucket, elements; None = HF "auto" = hidden_size**2."""
    overlap_rule: OverlapRule = "current"
    lora_rank: int = 16
    lora_targets: tuple[str, ...] | None = None
    """None = all linear layers of the decoder (PEFT target_modules="all-linear")."""
    lora_dropout: float = 0.0
    """PEFT's default; > 0 keeps a dropout output and mask per adapted module (docs/estimate.md,
    "Activations")."""
    attention: Attention = "sdpa"
    liger: bool = False
    """Liger's fused linear cross-entropy (logits made and freed chunk by chunk, never whole),
    and with ``liger_kernels`` its RMSNorm that keeps its bf16 input instead of an fp32 copy and
    SwiGLU that keeps 3 tensors of the MLP width instead of 4."""
    liger_kernels: bool = True
    """With ``liger``: its layer kernels too; False = the fused loss alone (--liger loss)."""
    packing: bool = False
    """Several samples per row told apart by position_ids: transformers then builds a 4-D
    block-diagonal mask for SDPA/eager (masking_utils); FlashAttention-2 uses cu_seqlens."""
    optim: Optim = "adamw"
    """adamw: torch AdamW, fp32 m and v (8 B/param). adamw_8bit / paged_adamw_8bit:
    bitsandbytes blockwise 8-bit m and v (2 B/param + one fp32 absmax per 2048 values each).
    paged_adamw_32bit: fp32 m and v. Paged states live in CUDA unified memory
    (cudaMallocManaged, outside PyTorch's allocator) and move to host RAM under pressure."""
    adapter_dtype: AdapterDtype = "auto"
    """Dtype of the trainable LoRA weights. auto = what PEFT and DeepSpeed leave: PEFT makes
    them fp32 (get_peft_model's autocast_adapter_dtype=True); DeepSpeed 0.19's engine casts
    every float parameter to bf16 (engine._cast_module_mixed_precision) except on a zero.Init
    model, and ZeRO-3 converts the late adapters without a cast
    (partition_parameters._convert_to_zero_parameters): so bf16 at ZeRO 0-2 and for QLoRA
    (quantized models skip zero.Init), fp32 for LoRA at ZeRO-3 and without DeepSpeed. bf16 /
    fp32 = what a script forces (the QLoRA paper casts its adapters to bf16). fp32 under
    DeepSpeed below ZeRO-3 is refused: the engine casts it."""
    deepspeed: bool = True
    """False: no DeepSpeed at all (stage 0 only): plain Trainer/PEFT or torchtune. The optimizer
    then steps the parameters in their own dtype: no fp32 master copy, no flatten buffers."""
    expandable_segments: bool = False
    """PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: segments grow in place, so a large
    transient reuses the pages the backward freed instead of a new segment (dojo train's
    default on CUDA)."""
    compile: bool = False
    """torch.compile of each decoder layer (dojo's --compile): Inductor's partitioner recomputes
    silu(gate) in the backward instead of saving it, as Liger's SwiGLU does."""
    gpu_memory_gib: float | None = None
    cpu_memory_gib: float | None = None
    """Host RAM per node; None = no host verdict."""
    sub_group_size: int = 1_000_000_000  # DeepSpeed default (zero/config.py)
    stage3_max_live_parameters: int = 1_000_000_000  # DeepSpeed and HF example default
    stage3_max_reuse_distance: int = 1_000_000_000
    z3_leaf_layer: bool = False
    """ZeRO-3: every decoder layer is a z3 leaf module (zero_optimization.leaf_module.classes,
    deepspeed/utils/z3_leaf_module.py): its params are gathered together when the layer starts
    and its grads reduced together when its backward ends (stage3.py reduce_leaf_module_grads),
    instead of module by module. dojo writes it at ZeRO-3 for dense models (--z3-leaf auto)."""
    prefetch_bucket: int | None = None
    """stage3_prefetch_bucket_size in elements; None = HF "auto" = 0.9 x hidden_size**2.
    Prefetched params live beside the current ones, bounded by stage3_max_live_parameters."""
    calibration: Calibration = field(default_factory=Calibration)

    @property
    def world_size(self) -> int:
        return self.num_gpus * self.num_nodes

    @property
    def overlap(self) -> bool:
        return self.stage == 3 if self.overlap_comm is None else self.overlap_comm

    @property
    def fp32_adapters(self) -> bool:
        """The trainable adapters really are fp32 (see adapter_dtype)."""
        if self.method == "full":
            return False
        if self.adapter_dtype != "auto":
            return self.adapter_dtype == "fp32"
        return not self.deepspeed or (self.stage == 3 and self.method == "lora")

    @property
    def autocast(self) -> bool:
        """HF Trainer runs the forward under torch.autocast(bf16) only without DeepSpeed
        (accelerate leaves mixed precision to the DeepSpeed engine)."""
        return not self.deepspeed

    @property
    def fp32_rest(self) -> bool:
        """QLoRA with PEFT's defaults and no DeepSpeed: prepare_model_for_kbit_training
        (peft/utils/other.py) casts every parameter that is not 4-bit to fp32 (embeddings,
        head, norms) and nothing casts them back (DeepSpeed's engine would)."""
        return self.method == "qlora" and not self.deepspeed and self.fp32_adapters

    def reduce_bucket(self, spec: ModelSpec) -> int:
        """As written, or HF's "auto" (dojo.zero.build.hf_auto_reduce_bucket)."""
        if self.bucket_size is not None:
            return self.bucket_size
        return hf_auto_reduce_bucket(spec.hidden_size)

    def prefetch_size(self, spec: ModelSpec) -> int:
        """As written, or HF's "auto" (dojo.zero.build.hf_auto_prefetch)."""
        if self.prefetch_bucket is not None:
            return self.prefetch_bucket
        return hf_auto_prefetch(spec.hidden_size)


def _range_checks(s: Setup) -> list[tuple[bool, str, str]]:
    return [
        (s.stage in (0, 1, 2, 3), f"--zero {s.stage}: no such ZeRO stage", "use 0, 1, 2, 3 or all"),
        (s.method in ("full", "lora", "qlora"), f"--method {s.method}: unknown", "use full, lora or qlora"),
        (s.num_gpus >= 1, f"--num-gpus {s.num_gpus}: must be at least 1", "use e.g. --num-gpus 1"),
        (s.num_nodes >= 1, f"--num-nodes {s.num_nodes}: must be at least 1", "use e.g. --num-nodes 1"),
        (s.micro_batch >= 1, f"--micro-batch {s.micro_batch}: must be at least 1", "use e.g. --micro-batch 1"),
        (s.seq_len >= 1, f"--seq-len {s.seq_len}: must be at least 1", "use e.g. --seq-len 2048"),
        (
            s.seq_len <= MAX_SEQ_LEN,
            f"--seq-len {s.seq_len}: longer than {MAX_SEQ_LEN:,} tokens",
            "use a real context length, e.g. --seq-len 8192 (dojo train caps it the same way)",
        ),
        (
            s.bucket_size is None or s.bucket_size > 0,
            f"--bucket-size {s.bucket_size}: must be positive",
            "use e.g. --bucket-size 500000000, or leave it out for HF's auto (hidden^2)",
        ),
        (
            s.prefetch_bucket is None or s.prefetch_bucket >= 0,
            f"prefetch bucket {s.prefetch_bucket}: must be 0 or more elements",
            "use e.g. 500000000, or leave it out for HF's auto (0.9 x hidden^2)",
        ),
        (s.lora_rank >= 1, f"--lora-rank {s.lora_rank}: must be at least 1", "use e.g. --lora-rank 16"),
        (
            s.gpu_memory_gib is None or 0 < s.gpu_memory_gib < math.inf,
            f"--gpu-memory {s.gpu_memory_gib}: must be a positive number of GiB",
            "give the GPU size in GiB, e.g. 80",
        ),
        (
            s.cpu_memory_gib is None or 0 < s.cpu_memory_gib < math.inf,
            f"--cpu-memory {s.cpu_memory_gib}: must be a positive number of GiB",
            "give host RAM in GiB, e.g. 512",
        ),
    ]  # fmt: skip


def _choice_checks(s: Setup) -> list[tuple[bool, str, str]]:
    bnb = s.optim != "adamw"
    return [
        (
            s.offload_optimizer in ("none", "cpu", "nvme"),
            f"--offload {s.offload_optimizer}: unknown device",
            "use none, cpu or nvme",
        ),
        (
            s.offload_param in ("none", "cpu", "nvme"),
            f"--offload-param {s.offload_param}: unknown device",
            "use none, cpu or nvme",
        ),
        (
            s.offload_optimizer == "none" or s.stage >= 1,
            f"--offload {s.offload_optimizer} needs ZeRO stage 1-3, got --zero 0",
            "use --zero 2 or 3",
        ),
        (
            s.offload_param == "none" or s.stage == 3,
            f"--offload-param {s.offload_param} exists only at ZeRO stage 3, got --zero {s.stage}",
            "use --zero 3, or drop --offload-param",
        ),
        (
            s.attention in ("sdpa", "flash_attention_2", "eager"),
            f"--attention {s.attention}: unknown",
            "use sdpa, flash_attention_2 or eager",
        ),
        (s.optim in OPTIMS, f"--optim {s.optim}: unknown", "use " + ", ".join(OPTIMS)),
        (
            not (bnb and s.offload_optimizer != "none"),
            f"--optim {s.optim} with --offload {s.offload_optimizer}: bitsandbytes optimizers "
            "step on the GPU, DeepSpeed's offload steps its own CPU Adam",
            "use --optim adamw with --offload, or drop --offload",
        ),
        (
            s.adapter_dtype in ("auto", "bf16", "fp32"),
            f"--adapter-dtype {s.adapter_dtype}: unknown",
            "use auto, bf16 or fp32",
        ),
        (
            s.deepspeed or s.stage == 0,
            f"--zero {s.stage} needs DeepSpeed; without it only stage 0 exists",
            "use --zero 0 to describe a run without DeepSpeed",
        ),
        (
            s.adapter_dtype != "fp32" or not s.deepspeed or s.stage == 3,
            f"--adapter-dtype fp32 under DeepSpeed ZeRO-{s.stage}: its engine casts every float "
            "parameter to bf16",
            "use --adapter-dtype auto (what DeepSpeed runs), or describe a run without DeepSpeed",
        ),
    ]


def validate(setup: Setup) -> None:
    """Reject impossible settings with the flag, the value and the fix."""
    for ok, message, hint in _range_checks(setup) + _choice_checks(setup):
        if not ok:
            raise EstimateError(message, hint=hint)
