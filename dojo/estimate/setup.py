"""What one estimate describes: the training setup (``Setup``), the few measured constants
(``Calibration``) and ``validate``. Pure data; ``dojo.estimate.model`` turns a Setup into a
MemoryEstimate."""

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Literal

from dojo.errors import EstimateError
from dojo.modelspec import ModelSpec
from dojo.run.groups.kernels import KernelOptions
from dojo.run.groups.loop import BNB_OPTIMS
from dojo.run.groups.lora import LoraOptions
from dojo.run.groups.objective import reference
from dojo.run.groups.zero import (
    SUB_GROUP_SIZE,
    ZeroOptions,
    hf_auto_prefetch,
    hf_auto_reduce_bucket,
    sub_group_for,
    zero_problems,
)
from dojo.run.run import Run

OverlapRule = Literal["current", "docs"]
AdapterDtype = Literal["auto", "bf16", "fp32"]


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
    offload_reserve_expandable: float = 0.64
    """The same, in the same units, under expandable segments (dojo's default allocator): each
    gradient is freed while its copy to the host is still in flight on a side stream
    (stage_1_and_2.py async_inplace_copy_grad_to_fp32_buffer_from_gpu, _record_gradient_stream),
    and the allocator keeps a block recorded on another stream until that stream's event has
    passed, so the backward's gradients pile up as free-but-held pages; the segment mode lets
    about two thirds of the default allocator's reserve stay. Fitted (least squares) on the two
    fit rows of bench/rows.py heldout-moe-offload-long only (Qwen3-0.6B ZeRO-3, Llama-3.2-1B
    ZeRO-2: 0.62 and 0.65 alone); its three held offload rows judge it."""
    kappa: float = 0.0
    """Transient flatten copy of a gradient bucket during reduction, in buckets (0-1 by the
    source; docs/estimate.md, "Communication buckets"). Measured 0 on the H200: overlap on/off
    = +0.93 GiB = exactly one 5e8 bucket; 5e8 -> 2e8: -1.10 GiB = 2 x 3e8 x 2 B."""
    liger_full_saved_per_token_h: float = 14.0
    """Bytes per token x hidden that Liger's kernels save per layer in full fine-tuning, beyond
    the 2i of SwiGLU, under DeepSpeed: 8 by counting saved tensors, 14 measured (H200,
    Llama-3.2-1B calibration rows without checkpointing). The estimate puts that backward's
    peak at the first layer with every kept tensor live; the measured peaks are 6 B x token x
    hidden a layer lower, which this constant absorbs (where in the backward they really fall
    is not modelled)."""
    liger_full_saved_per_token_h_bare: float = 8.0
    """The same where the backward peaks at its start (Setup.peak_before_grads: one process
    without DeepSpeed): counted, not fitted. The allocator's history at the peak of the fit row
    of bench/rows.py heldout-nods-backward-peak (Llama-3.2-3B, q = h) holds per layer and
    token exactly what that count keeps: gate, up and their product (6 i), six bf16 tensors of
    hidden size (12 h) and k, v (4 kv), i.e. 16 h + 4 q + 4 kv + 8 i less 8 h + 2 i; its three
    held rows judge it."""
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
    segments without Liger (0.54-0.73, one Gemma-2 row 1.03; median 0.6). ORPO and SimPO make no
    fp32 copy: their largest loss block is the bf16 logits (``reserve.allocator_reserve``)."""
    cpu_process_gib: float = 2.5
    """Host RAM of one training process before any model state (python, torch, CUDA libs,
    data): 2.8-3.1 GiB measured in total on the H200 rows without offload."""


PLAIN = {
    "micro_batch": 1,
    "precision": "bf16",
    "liger": "off",
    "attn": "sdpa",
    "expandable_segments": "off",
    "optim": "adamw_torch",
    "offload_param": "none",
    "lr": 2e-5,
    "lora_dropout": 0.0,
    "keep_best": "off",
    "report_to": "none",
}
"""What ``Setup.of`` assumes where an option is not named: a plain HF Trainer + DeepSpeed script
(no Liger, SDPA, bf16, PyTorch's default allocator, torch AdamW, PEFT's LoRA dropout 0) with
one sample per GPU, every "auto" of the schema replaced by that script's value."""


@dataclass(frozen=True)
class Setup:
    """One training configuration to estimate: a resolved run (``dojo.run.Run``, the groups
    ``dojo train`` reads) and what the estimator alone needs to describe runs dojo does not
    launch (forced adapter dtypes, the docs' overlap rule)."""

    run: Run = field(default_factory=lambda: Setup.of().run)
    overlap_rule: OverlapRule = "current"
    adapter_dtype: AdapterDtype = "auto"
    """Dtype of the trainable LoRA weights. auto = what PEFT and DeepSpeed leave: PEFT makes
    them fp32 (get_peft_model's autocast_adapter_dtype=True); DeepSpeed 0.19's engine casts
    every float parameter to bf16 (engine._cast_module_mixed_precision) except on a zero.Init
    model, and ZeRO-3 converts the late adapters without a cast
    (partition_parameters._convert_to_zero_parameters): so bf16 at ZeRO 0-2 and for QLoRA
    (quantized models skip zero.Init), fp32 for LoRA at ZeRO-3 and without DeepSpeed. bf16 /
    fp32 = what a script forces (the QLoRA paper casts its adapters to bf16). fp32 under
    DeepSpeed below ZeRO-3 is refused: the engine casts it."""
    gpu_memory_gib: float | None = None
    """The GPU the verdict is judged against; None = no verdict."""
    cpu_memory_gib: float | None = None
    """Host RAM per node; None = no host verdict."""
    stage3_max_live_parameters: int = 1_000_000_000  # DeepSpeed and HF example default
    stage3_max_reuse_distance: int = 1_000_000_000
    calibration: Calibration = field(default_factory=Calibration)

    @classmethod
    def of(cls, **options: Any) -> "Setup":
        """A Setup from option names (``stage=3, method="lora", lora_r=8``), each landing in its
        group, plus Setup's own fields; unnamed options as a plain script runs them (``PLAIN``).
        For runs dojo does not launch (the plain script, published setups) and tests; dojo's
        own runs come from ``dojo.run.resolve``. ``overlap_comm`` unnamed is DeepSpeed's own
        default (on at ZeRO-3, off below); ``gpus_per_node`` is the GPU count."""
        from dojo.run.schema import OPTIONS, RunOptions

        extra, placement, options = _split(options)
        unknown = [k for k in options if k not in OPTIONS]
        if unknown:
            raise TypeError(f"Setup.of: no option {', '.join(unknown)}")
        values = {**PLAIN, **options}
        stage = values.get("stage", 2)
        values.setdefault("overlap_comm", stage == 3)
        if values.get("sub_group_size", "auto") == "auto" and stage != "none":
            values["sub_group_size"] = SUB_GROUP_SIZE  # DeepSpeed's own (zero/config.py)
        if values["offload_param"] == "auto":
            values["offload_param"] = values.get("offload", "none") if stage == 3 else "none"
        opts = RunOptions.from_values(values)
        run = Run(**{f.name: getattr(opts, f.name) for f in dataclasses.fields(opts)},
                  device="cuda", **placement)  # fmt: skip
        return cls(run=run, **extra)

    def changed(self, **changes: Any) -> "Setup":
        """A copy with options (by name, into their groups) and Setup's own fields changed."""
        mine, placement, changes = _split(changes)
        run = dataclasses.replace(self.run.replace(**changes), **placement)
        assert isinstance(run, Run)
        return dataclasses.replace(self, run=run, **mine)

    # The run's groups, as the terms read them.
    @property
    def zero(self) -> ZeroOptions:
        return self.run.zero

    @property
    def kernels(self) -> KernelOptions:
        return self.run.kernels

    @property
    def lora(self) -> LoraOptions:
        return self.run.lora

    @property
    def world_size(self) -> int:
        return self.run.world_size

    @property
    def deepspeed(self) -> bool:
        """False for --zero none: the HF Trainer's own loop (plain Trainer/PEFT, torchtune). The
        optimizer then steps the parameters in their own dtype: no fp32 master copy, no flatten
        buffers, and DDP's buckets across ranks."""
        return self.run.zero.deepspeed

    @property
    def attention(self) -> str:
        """The attention kernel's memory model (``ESTIMATED_AS``): sdpa, flash_attention_2 or
        eager."""
        return ESTIMATED_AS.get(self.run.kernels.attn, "sdpa")

    @property
    def batch_rows(self) -> int:
        """Sequences in one forward of a micro-batch: DPO, ORPO and SimPO put a row's chosen and
        rejected answers through together (TRL's concatenated forward), twice the micro-batch."""
        return self.run.loop.micro_batch * (2 if self.run.objective.paired else 1)

    @property
    def reference(self) -> str:
        """What a preference loss compares with: none | adapter-off | copy | precomputed."""
        o = self.run.objective
        return reference(o.objective, self.run.model.method == "full", o.precompute_ref_log_probs)

    @property
    def lora_dropout(self) -> float:
        """LoRA's dropout as it runs: TRL's preference trainers turn every dropout of the model
        off (disable_dropout, their default), and a dropout of p = 0 returns its input."""
        return 0.0 if self.run.objective.preference else self.run.lora.lora_dropout

    @property
    def full_logits(self) -> bool:
        """The loss makes the whole bf16 logits block: HF's loss, not Liger's fused loss nor
        TRL's chunked head (every preference objective: dojo.train.worker.fused_head)."""
        return not self.kernels.fused_loss and not self.run.objective.preference

    @property
    def overlap(self) -> bool:
        return self.run.zero.overlap

    @property
    def z3_leaf_layer(self) -> bool:
        """ZeRO-3: every decoder layer is a z3 leaf module (zero_optimization.leaf_module.classes,
        deepspeed/utils/z3_leaf_module.py): its params are gathered together when the layer
        starts and its grads reduced together when its backward ends (stage3.py
        reduce_leaf_module_grads), instead of module by module."""
        return bool(self.run.zero.leaf_classes)

    @property
    def sub_group_size(self) -> int:
        tile = self.run.zero.sub_group_size
        return sub_group_for(self.run.zero.offload) if tile == "auto" else tile

    @property
    def fp32_adapters(self) -> bool:
        """The trainable adapters really are fp32 (see adapter_dtype)."""
        method = self.run.model.method
        if method == "full":
            return False
        if self.adapter_dtype != "auto":
            return self.adapter_dtype == "fp32"
        # TRL's preference trainers wrap the model with autocast_adapter_dtype=False at ZeRO-3
        # (bf16 adapters, TRL issue #6089); dojo's SFT path keeps PEFT's default.
        z3_fp32 = self.zero.stage == 3 and method == "lora" and not self.run.objective.preference
        return not self.deepspeed or z3_fp32

    @property
    def autocast(self) -> bool:
        """HF Trainer runs the forward under torch.autocast(bf16) only without DeepSpeed
        (accelerate leaves mixed precision to the DeepSpeed engine)."""
        return not self.deepspeed

    @property
    def peak_before_grads(self) -> bool:
        """Full fine-tuning in one process without DeepSpeed, checkpointing or gradient
        accumulation: torch makes each gradient as the backward reaches its parameter (the
        Trainer's zero_grad leaves them None; one process has no DDP buckets), so the backward
        can peak at its start, with every tensor the layers kept and almost no gradient
        (dojo.estimate.model._grads_after_layer_peak)."""
        return (
            not self.deepspeed
            and self.world_size == 1
            and self.run.loop.grad_accum == 1
            and not self.kernels.grad_ckpt
            and self.run.model.method == "full"
        )

    @property
    def fp32_rest(self) -> bool:
        """QLoRA with PEFT's defaults and no DeepSpeed: prepare_model_for_kbit_training
        (peft/utils/other.py) casts every parameter that is not 4-bit to fp32 (embeddings,
        head, norms) and nothing casts them back (DeepSpeed's engine would)."""
        return self.run.model.method == "qlora" and not self.deepspeed and self.fp32_adapters

    def reduce_bucket(self, spec: ModelSpec) -> int:
        """As written, or HF's "auto" (hidden_size^2)."""
        size = self.run.zero.bucket_size
        return hf_auto_reduce_bucket(spec.hidden_size) if size == "auto" else size

    def prefetch_size(self, spec: ModelSpec) -> int:
        """As written, or HF's "auto" (0.9 x hidden_size^2). Prefetched params live beside the
        current ones, bounded by stage3_max_live_parameters."""
        size = self.run.zero.prefetch_bucket_size
        return hf_auto_prefetch(spec.hidden_size) if size == "auto" else size


def _split(kw: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Keyword arguments by where they go: Setup's own fields, the run's placement
    (gpus_per_node), and the run's options."""
    own = {f.name for f in dataclasses.fields(Setup)} - {"run"}
    mine = {k: v for k, v in kw.items() if k in own}
    placement = {k: v for k, v in kw.items() if k == "gpus_per_node"}
    rest = {k: v for k, v in kw.items() if k not in own and k != "gpus_per_node"}
    return mine, placement, rest


ESTIMATED_AS = {
    "eager": "eager",
    "flash_attention_2": "flash_attention_2",
    "flex_attention": "flash_attention_2",
    "sdpa_varlen": "flash_attention_2",  # the same kernel family: no mask, log-sum-exp kept
}
"""--attn as the estimate's attention memory model; anything else is estimated as SDPA.
FlexAttention takes a BlockMask (a few ints per 128 x 128 block), materialises no bias and saves
the log-sum-exp, as FlashAttention-2 does: read from the source (torch.nn.attention.flex_attention,
transformers masking_utils), not measured."""


def _checks(s: Setup) -> list[tuple[bool, str, str]]:
    """Rules beyond each option's own range (``dojo.run.schema.invalid``): the placement and
    the estimator's own fields."""
    r = s.run
    return [
        (r.gpus_per_node >= 1, f"--num-gpus {r.gpus_per_node}: must be at least 1", "use e.g. --num-gpus 1"),
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
        (
            not (r.loop.optim in BNB_OPTIMS and r.zero.offload != "none"),
            f"--optim {r.loop.optim} with --offload {r.zero.offload}: bitsandbytes optimizers "
            "step on the GPU, DeepSpeed's offload steps its own CPU Adam",
            "use --optim adamw_torch with --offload, or drop --offload",
        ),
        (
            s.adapter_dtype != "fp32" or not s.deepspeed or r.zero.stage == 3,
            f"--adapter-dtype fp32 under DeepSpeed ZeRO-{r.zero.stage}: its engine casts every "
            "float parameter to bf16",
            "use --adapter-dtype auto (what DeepSpeed runs), or --zero none (no DeepSpeed)",
        ),
    ]  # fmt: skip


def validate(setup: Setup) -> None:
    """Reject impossible settings with the flag, the value and the fix."""
    from dojo.run.schema import GROUPS, invalid

    found = [p for g in GROUPS for p in invalid(getattr(setup.run, g))]
    if found:  # the checks below assume valid choices
        raise EstimateError.of(found)
    found = [(m, h) for ok, m, h in _checks(setup) if not ok]
    found += zero_problems(setup.zero, need_path=False)
    if found:
        raise EstimateError.of(found)
