"""Measured beside estimated, like for like: what ``dojo_summary.json`` and the last line show.

Device memory = what nvidia-smi counts for the process (PyTorch's reserved peak + the CUDA
context, kernels and NCCL buffers outside the allocator); allocated = PyTorch's tensors. The
estimate has both (``MemoryEstimate.gpu_total`` and ``.allocated``). Pure: the worker fills in
the measured numbers, the parent prints them.
"""

from pathlib import Path
from typing import Any


def compare(measured: float | None, estimated: float | None) -> dict[str, Any]:
    """{"measured", "estimated", "error_pct"}: error = (estimated - measured) / measured."""
    err = None
    if measured and estimated is not None:
        err = round(100.0 * (estimated - measured) / measured, 1)
    return {"measured": measured, "estimated": estimated, "error_pct": err}


def memory_block(peaks: dict[str, Any], estimate: dict[str, Any] | None) -> dict[str, Any]:
    """``peaks``: peak_reserved_gib, peak_allocated_gib, context_gib (None on the CPU)."""
    est = estimate or {}
    reserved, allocated = peaks.get("peak_reserved_gib"), peaks.get("peak_allocated_gib")
    context = peaks.get("context_gib")
    device = round(reserved + context, 3) if reserved is not None and context is not None else None
    return {
        "device_gib": compare(device, est.get("device_gib")),
        "allocated_gib": compare(allocated, est.get("allocated_gib")),
    }


def _pair(name: str, block: dict[str, Any]) -> str | None:
    m, e, err = block.get("measured"), block.get("estimated"), block.get("error_pct")
    if m is None:
        return None
    tail = f" (estimate {e:.1f}, {err:+.1f}%)" if e is not None and err is not None else ""
    return f"{name} {m:.1f} GiB{tail}"


def describe(summary: dict[str, Any], run_dir: Path, wall_s: float) -> str:
    """The last line of a run."""
    parts = [f"done in {wall_s:.0f} s"]
    if summary.get("loss_last") is not None:
        parts.append(f"loss {summary.get('loss_first', 0):.3f} -> {summary['loss_last']:.3f}")
    if summary.get("reward_accuracy_last") is not None:
        parts.append(f"reward accuracy {summary.get('reward_accuracy_first') or 0:.2f} -> "
                     f"{summary['reward_accuracy_last']:.2f}")  # fmt: skip
    elif summary.get("reward_margin_last") is not None:
        parts.append(f"reward margin {summary.get('reward_margin_first') or 0:.3f} -> "
                     f"{summary['reward_margin_last']:.3f}")  # fmt: skip
    if summary.get("eval_loss_best") is not None:
        kept = " (kept)" if summary.get("kept_best") else ""
        stop = ", stopped early" if summary.get("stopped_early") else ""
        parts.append(
            f"eval loss {summary['eval_loss_first']:.3f} -> {summary['eval_loss_last']:.3f}, "
            f"best {summary['eval_loss_best']:.3f} at step {summary['eval_best_step']}{kept}{stop}"
        )
    mem = summary.get("memory") or {}
    for name, key in (("device memory", "device_gib"), ("allocated", "allocated_gib")):
        text = _pair(name, mem.get(key) or {})
        if text:
            parts.append(text)
    parts.append(f"model in {summary.get('model_dir') or run_dir}")
    return "; ".join(parts)
