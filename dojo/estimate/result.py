"""The result of ``dojo.estimate.estimate``: named memory terms and the JSON row of `dojo estimate
--json`."""

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dojo.estimate.reserve import keeps_grad_partition
from dojo.modelspec import ModelSpec

if TYPE_CHECKING:
    from dojo.estimate.setup import Setup

GIB = 2**30
TIGHT_MARGIN = 0.05
"""Within 5% of the card (or of host RAM) the verdict is "tight": a run that close to the card
makes the allocator free its cache and retry (docs/estimate.md, "Verdict")."""


@dataclass(frozen=True)
class MemoryEstimate:
    """Named terms, bytes; GPU terms are per GPU, CPU terms per node (num_gpus ranks)."""

    spec: ModelSpec
    setup: "Setup"
    trainable_params: int
    params: int
    """Weights (and adapters) stored on this GPU: 2P, 2P/N at ZeRO-3, NF4 for QLoRA."""
    params_work: int
    """Backward working set: ZeRO-3 gathered/prefetched/retained params, QLoRA dequantized weight."""
    gradients: int
    grads_work: int
    """ZeRO-3: the full grad of the largest module before it goes into a bucket."""
    optimizer_states: int
    """fp32 master (DeepSpeed) + optimizer states on this GPU (0 when offloaded)."""
    optimizer_paged: int
    """The part of optimizer_states bitsandbytes pages (CUDA unified memory): it can move to
    host RAM when the GPU runs short, so the verdict counts it as "tight", not "does not fit"."""
    step: int
    """Optimizer-step transient: fp32 copy of the gradient partition (docs/estimate.md, "The
    optimizer step")."""
    activations: int
    """Peak activation bytes beside the logits term (docs/estimate.md, "Activations")."""
    logits: int
    comm_current: int
    comm_docs: int
    fragmentation: int
    """Caching-allocator reserve (reserved - allocated at the peak): see reserve.allocator_reserve."""
    context: int
    nccl: int
    cpu_params: int
    cpu_gradients: int
    cpu_optimizer_states: int
    cpu_buffers: int
    cpu_load: int
    cpu_process: int
    cpu_pinned_rounding: int
    """Bytes torch's host allocator adds by rounding each pinned buffer up to a power of two."""
    nvme: int
    """Bytes per node kept on NVMe (ZeRO-3 nvme offload)."""
    notes: tuple[str, ...] = ()
    reference: int = 0
    """A preference objective's frozen reference model on this GPU (DPO/KTO full fine-tuning):
    a bf16 copy of the weights, /N at ZeRO-3. Shown in the params column."""
    load_excess: int = 0
    """How far QLoRA's load peaks above the training phase (quant.kbit_load_peak), already in
    ``fragmentation`` (the reserve column); 0 where training is the peak."""
    step_remap: int = 0
    """What the allocator may hold beyond the total where ZeRO-1/2's step maps its largest
    transient anew (reserve.step_remap: some checkpointed runs do, most do not); not in the
    total. The verdict says "tight" where the total with it would cross the card."""

    @property
    def comm(self) -> int:
        return self.comm_docs if self.setup.overlap_rule == "docs" else self.comm_current

    @property
    def static(self) -> int:
        return self.params + self.reference + self.gradients + self.optimizer_states

    @property
    def backward_extra(self) -> int:
        return self.params_work + self.grads_work + self.activations + self.logits + self.comm

    @property
    def step_extra(self) -> int:
        """The optimizer-step phase beside the static terms: the step transient, and at ZeRO-3
        the gradient bucket too (stage3.py allocates ipg bucket.buffer once in __init__ and
        keeps it; ZeRO-1/2 free theirs before the step, stage_1_and_2.py _release_ipg_buffers)."""
        return self.step + (self.comm if self.setup.zero.stage == 3 else 0)

    @property
    def peak_phase(self) -> str:
        return "step" if self.step_extra > self.backward_extra else "backward"

    @property
    def allocated(self) -> int:
        """Predicted torch.cuda.max_memory_allocated over steps >= 2."""
        return self.static + max(self.backward_extra, self.step_extra)

    @property
    def reserved(self) -> int:
        """Predicted torch.cuda.max_memory_reserved: allocated + the allocator's reserve."""
        return self.allocated + self.fragmentation

    @property
    def overhead(self) -> int:
        """Outside PyTorch's allocator: CUDA context and kernels, NCCL buffers."""
        return self.context + self.nccl

    @property
    def gpu_total(self) -> int:
        """Device memory in use at the peak, as nvidia-smi sees it."""
        return self.reserved + self.overhead

    @property
    def gpu_total_gib(self) -> float:
        return self.gpu_total / GIB

    @property
    def gpu_total_with_remap(self) -> int:
        """The device total in the case ``step_remap`` names (some runs of these settings)."""
        return self.gpu_total + self.step_remap

    @property
    def tight_by_remap(self) -> bool:
        """The verdict is "tight" only because the ``step_remap`` case crosses the card: the
        total itself is below TIGHT_MARGIN of it."""
        gib = self.setup.gpu_memory_gib
        if gib is None:
            return False
        card = gib * GIB
        return self.gpu_total <= (1 - TIGHT_MARGIN) * card < card < self.gpu_total_with_remap

    @property
    def cpu_exact(self) -> int:
        """Offloaded states, bytes as requested (what DeepSpeed's estimators count)."""
        return self.cpu_params + self.cpu_gradients + self.cpu_optimizer_states + self.cpu_buffers

    @property
    def cpu_steady(self) -> int:
        """Offloaded states as allocated: the exact bytes plus the pinned blocks' rounding."""
        return self.cpu_exact + self.cpu_pinned_rounding

    @property
    def cpu_total(self) -> int:
        # The model load is freed before the offloaded states are built (engine init).
        return self.cpu_process + max(self.cpu_load, self.cpu_steady)

    @property
    def cpu_total_gib(self) -> float:
        return self.cpu_total / GIB

    @property
    def verdict(self) -> str | None:
        """ "fits", "tight" or "does not fit" (GPU, and host RAM when its size is given); None
        when no GPU size is known. Tight: within TIGHT_MARGIN of the card (a run at 98% of it
        also runs several times slower: the allocator frees its cache and retries), over it
        only by optimizer states bitsandbytes pages out to the host, or over it in the case some
        runs of these settings take (``step_remap``)."""
        s = self.setup
        if s.gpu_memory_gib is None:
            return None
        card = s.gpu_memory_gib * GIB
        host = None if s.cpu_memory_gib is None else s.cpu_memory_gib * GIB
        if self.gpu_total - self.optimizer_paged > card or (host and self.cpu_total > host):
            return "does not fit"
        near_card = self.gpu_total > (1 - TIGHT_MARGIN) * card or self.gpu_total_with_remap > card
        if near_card or (host and self.cpu_total > (1 - TIGHT_MARGIN) * host):
            return "tight"
        return "fits"

    @property
    def fits(self) -> bool | None:
        """True for "fits" and "tight", False for "does not fit", None without a GPU size."""
        v = self.verdict
        return None if v is None else v != "does not fit"

    def gpu_columns(self) -> dict[str, int]:
        """The GPU breakdown of the table and --json; the columns sum to the total."""
        # step phase above the backward peak (its ZeRO-3 bucket is the comm column already)
        beyond = max(0, self.step_extra - self.backward_extra)
        return {
            "total": self.gpu_total,
            "params": self.params + self.reference + self.params_work,
            "gradients": self.gradients + self.grads_work,
            "optimizer_states": self.optimizer_states + beyond,
            "activations": self.activations,
            "logits": self.logits,
            "comm_buffers": self.comm,
            "allocator_reserve": self.fragmentation,
            "overhead": self.overhead,
        }

    def cpu_columns(self) -> dict[str, int]:
        return {
            "total": self.cpu_total,
            "params": self.cpu_params,
            "gradients": self.cpu_gradients,
            "optimizer_states": self.cpu_optimizer_states,
            "buffers": self.cpu_buffers,
            "model_load": self.cpu_load,
            "pinned_rounding": self.cpu_pinned_rounding,
            "overhead": self.cpu_process,
        }

    def to_dict(self) -> dict[str, Any]:
        """One row of ``dojo estimate --json`` (GiB, 3 decimals)."""
        return {
            "stage": self.setup.zero.stage,
            "offload": self.setup.zero.offload,
            "offload_param": self.setup.zero.offload_param,
            "gpu_gib": {k: round(v / GIB, 3) for k, v in self.gpu_columns().items()},
            "cpu_gib": {k: round(v / GIB, 3) for k, v in self.cpu_columns().items()},
            # already in gpu_gib's allocator_reserve: where QLoRA's load peaks above training
            "load_above_training_gib": round(self.load_excess / GIB, 3),
            # not in gpu_gib's total: what ZeRO-1/2's step may map anew beyond it (some runs)
            "step_remap_gib": round(self.step_remap / GIB, 3),
            # dojo's worker keeps ZeRO-1/2's gradient partition between steps (no step remap)
            "keeps_grad_partition": keeps_grad_partition(self.setup.run),
            "fits": self.fits,
            "verdict": self.verdict,
        }
