"""The result of ``dojo.estimate.estimate``: named memory terms and the issue's JSON row."""

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dojo.modelspec import ModelSpec

if TYPE_CHECKING:
    from dojo.estimate.setup import Setup

GIB = 2**30


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
    """fp32 master + Adam m, v on this GPU (0 when offloaded)."""
    step: int
    """Optimizer-step transient: fp32 copy of the gradient partition (sec 2.3, 2.5)."""
    activations: int
    """Peak activation bytes beside the logits term (sec 3.5)."""
    logits: int
    comm_current: int
    comm_docs: int
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

    @property
    def comm(self) -> int:
        return self.comm_docs if self.setup.overlap_rule == "docs" else self.comm_current

    @property
    def static(self) -> int:
        return self.params + self.gradients + self.optimizer_states

    @property
    def backward_extra(self) -> int:
        return self.params_work + self.grads_work + self.activations + self.logits + self.comm

    @property
    def peak_phase(self) -> str:
        return "step" if self.step > self.backward_extra else "backward"

    @property
    def allocated(self) -> int:
        """Predicted torch.cuda.max_memory_allocated over steps >= 2."""
        return self.static + max(self.backward_extra, self.step)

    @property
    def overhead(self) -> int:
        cal, st = self.setup.calibration, self.setup
        # Model states are a few large blocks allocated once; the caching allocator's reserve
        # comes from the working set (activations, buckets, step buffers) churned every step.
        slack = cal.slack(st.method, st.offload_optimizer) * (self.allocated - self.static)
        return int(self.context + self.nccl + slack)

    @property
    def gpu_total(self) -> int:
        """Device memory in use at the peak, as nvidia-smi sees it."""
        return self.allocated + self.overhead

    @property
    def gpu_total_gib(self) -> float:
        return self.gpu_total / GIB

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
        # The per-rank model load is freed before the offloaded states are built (engine init).
        return self.cpu_process + max(self.cpu_load, self.cpu_steady)

    @property
    def cpu_total_gib(self) -> float:
        return self.cpu_total / GIB

    @property
    def fits(self) -> bool | None:
        """GPU (and host, when its size is given) verdict; None when no GPU size is known."""
        s = self.setup
        if s.gpu_memory_gib is None:
            return None
        ok = self.gpu_total_gib <= s.gpu_memory_gib
        if s.cpu_memory_gib is not None:
            ok = ok and self.cpu_total_gib <= s.cpu_memory_gib
        return ok

    def gpu_columns(self) -> dict[str, int]:
        """The issue's GPU breakdown; the columns sum to the total."""
        beyond = max(0, self.step - self.backward_extra)  # step transient above the backward peak
        return {
            "total": self.gpu_total,
            "params": self.params + self.params_work,
            "gradients": self.gradients + self.grads_work,
            "optimizer_states": self.optimizer_states + beyond,
            "activations": self.activations,
            "logits": self.logits,
            "comm_buffers": self.comm,
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
            "stage": self.setup.stage,
            "offload_optimizer": self.setup.offload_optimizer,
            "offload_param": self.setup.offload_param,
            "gpu_gib": {k: round(v / GIB, 3) for k, v in self.gpu_columns().items()},
            "cpu_gib": {k: round(v / GIB, 3) for k, v in self.cpu_columns().items()},
            "fits": self.fits,
        }
