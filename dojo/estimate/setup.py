"""What one estimate describes: the training setup (``Setup``) and the measured constants
(``Calibration``). Pure data; ``dojo.estimate.model`` turns a Setup into a MemoryEstimate."""

from dataclasses import dataclass, field
from typing import Literal

from dojo.modelspec import ModelSpec

Method = Literal["full", "lora", "qlora"]
Offload = Literal["none", "cpu", "nvme"]
OverlapRule = Literal["current", "docs"]
Attention = Literal["sdpa", "flash_attention_2", "eager"]


@dataclass(frozen=True)
class Calibration:
    """Constants the GPU measurements (issue 5) recalibrate; defaults from memory-model.md."""

    cuda_context_gib: float = 1.7
    """Everything nvidia-smi shows beyond PyTorch's reserved memory for one process: CUDA context,
    kernels (Triton/Liger too), cuBLAS workspaces, NCCL's world-size-1 setup. Measured on the
    H200 as nvidia-smi peak - max reserved: 1.67-1.71 GiB on the 1B rows, 2.3 on 7B LoRA
    (docs/benchmarks.md); the doc's 0.6 is an empty process (0.62 GiB measured there)."""
    nccl_gib: float = 0.3
    """NCCL channel buffers per rank when world size > 1, outside PyTorch's allocator (sec 6)."""
    allocator_slack: float = 0.5
    """Caching-allocator reserve (reserved - allocated) as a fraction of the working set
    (allocated minus model states), full fine-tuning. Fitted on the H200's 11 full rows
    (0.23-0.94 measured; worst device error 6% with 0.5). Session 1 used 0.20 of everything
    allocated: 7B ZeRO-3 (100 GiB of states) came out 13% over, held out."""
    allocator_slack_adapter: float = 0.05
    """The same for LoRA / QLoRA (frozen base, small grads): 0.01-0.2 measured, 5 rows."""
    allocator_slack_offload: float = 1.2
    """The same with optimizer offload (pinned staging, per-parameter temporaries): 1.0 and
    1.2 measured on the two offload rows; the least certain constant."""

    def slack(self, method: str, offload: str) -> float:
        if offload != "none":
            return self.allocator_slack_offload
        return self.allocator_slack if method == "full" else self.allocator_slack_adapter

    kappa: float = 0.0
    """Transient flatten copy of a gradient bucket during reduction, in buckets (sec 2.4: 0-1).
    Measured 0 on the H200: ZeRO-0 vs ZeRO-2 and the overlap/bucket deltas leave no room for it
    (overlap on/off: +0.93 GiB = exactly one 5e8 bucket; 5e8 -> 2e8: -1.10 GiB = 2 x 3e8 x 2 B)."""
    liger_full_saved_per_token_h: float = 14.0
    """Bytes per token x hidden that Liger's kernels save per layer in full fine-tuning, beyond
    the 2i of SwiGLU: 8 by counting saved tensors, 14 measured (H200, rows 1-5)."""
    recompute_factor: float = 2.0
    """Backward of a checkpointed layer holds this many A_layer (sec 3.4, measured 1.9 on CPU)."""
    loss_bytes_per_logit: float = 12.0
    """fp32 upcast + log-softmax + its grad at the start of backward, bytes per logit (sec 3.3)."""
    loss_tail_bytes_per_th: float = 26.0
    """Final norm and lm_head input alive at the loss peak, bytes per token x hidden (sec 3.4)."""
    cpu_process_gib: float = 2.5
    """Host RAM of one training process before any model state (python, torch, CUDA libs,
    data): 2.8-3.1 GiB measured in total on the H200 rows without offload (one layer of load
    included)."""


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
    """PEFT's default; > 0 keeps a dropout output and mask per adapted module (sec 3.2)."""
    attention: Attention = "sdpa"
    liger: bool = False
    """Liger kernels: fused linear cross-entropy (logits made and freed chunk by chunk, never
    whole), RMSNorm that keeps its bf16 input instead of an fp32 copy, SwiGLU that keeps 3
    tensors of the MLP width instead of 4."""
    gpu_memory_gib: float | None = None
    cpu_memory_gib: float | None = None
    """Host RAM per node; None = no host verdict."""
    sub_group_size: int = 1_000_000_000  # DeepSpeed default (zero/config.py)
    stage3_max_live_parameters: int = 1_000_000_000  # DeepSpeed and HF example default
    stage3_max_reuse_distance: int = 1_000_000_000
    calibration: Calibration = field(default_factory=Calibration)

    @property
    def world_size(self) -> int:
        return self.num_gpus * self.num_nodes

    @property
    def overlap(self) -> bool:
        return self.stage == 3 if self.overlap_comm is None else self.overlap_comm

    def reduce_bucket(self, spec: ModelSpec) -> int:
        # HF trainer_config_finalize: "auto" reduce_bucket_size = hidden_size * hidden_size.
        return self.bucket_size if self.bucket_size is not None else spec.hidden_size**2
