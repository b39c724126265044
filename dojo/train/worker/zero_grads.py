"""ZeRO-1/2 keep their bf16 gradient partition from one step to the next, where
``dojo.estimate.reserve.keeps_grad_partition`` says: checkpointed full fine-tuning with the fused
loss under expandable segments, the optimizer stepping on the GPU.

DeepSpeed drops the partition (``grads_in_partition``) at the end of every backward and makes it
anew at the next backward's first bucket reduction (deepspeed/runtime/zero/stage_1_and_2.py
``_release_ipg_buffers``, ``copy_grads_in_partition``). In between, the optimizer step has freed
its flat bf16 gradient and its fp32 upcast. Where the first step grew into a free tail at the
segment's end, best fit puts the new partition in those freed pages, and the next step maps its
upcast (or the fp64 norm copy of a trained embedding or head) anew and keeps both: up to
4 B x the partition more on the device from step 2 or 3 on, in about a third of the checkpointed
runs measured, by a margin of MiB no setting predicts. Kept, the partition stays where it is and
the step finds its own pages again (docs/estimate.md, "Allocator reserve": the step's largest
transient mapped anew). What it costs: the partition is held through the forward and the loss
(and an evaluation between steps), where DeepSpeed had not made it yet.

The partition goes back to the optimizer only after the step: until then the step reads the
gradients through views of it, and under reentrant checkpointing one backward may run the
epilogue (and its release) more than once, each time making a new partition that must not
overwrite the last. Between micro-batches of one step nothing is kept: the accumulated
gradients are views of that partition.
"""

from typing import Any

from transformers import TrainerCallback


def keep_partition(optimizer: Any) -> bool:
    """Make one DeepSpeed ZeRO-1/2 optimizer keep its partition; False (nothing changed) where it
    makes none on the GPU (optimizer offload, contiguous_gradients off, another optimizer)."""
    if (
        not hasattr(optimizer, "_release_ipg_buffers")
        or not hasattr(optimizer, "grads_in_partition")
        or not getattr(optimizer, "contiguous_gradients", False)
        or getattr(optimizer, "cpu_offload", True)
    ):
        return False
    release, step = optimizer._release_ipg_buffers, optimizer.step
    held: list[Any] = []  # the last partition released at a step's boundary

    def _release_ipg_buffers() -> None:
        partition = optimizer.grads_in_partition  # None until the backward's first bucket
        release()
        if partition is not None and optimizer.is_gradient_accumulation_boundary():
            held[:] = [partition]

    def kept_step(*args: Any, **kw: Any) -> Any:
        out = step(*args, **kw)
        if held and optimizer.grads_in_partition is None:
            # the next backward's copy_grads_in_partition fills it from offset 0
            optimizer.grads_in_partition, optimizer.grads_in_partition_offset = held.pop(), 0
        return out

    optimizer._release_ipg_buffers = _release_ipg_buffers
    optimizer.step = kept_step
    return True


class KeepGradPartition(TrainerCallback):
    """Applies ``keep_partition`` to the trainer's DeepSpeed optimizer once the Trainer has made
    it (deepspeed_init runs inside ``train()``, before this event)."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.kept = False

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        wrapped = getattr(self.trainer.accelerator, "deepspeed_engine_wrapped", None)
        if wrapped is not None and not self.kept:
            self.kept = keep_partition(wrapped.engine.optimizer)
