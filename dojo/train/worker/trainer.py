"""The worker's Trainer: the HF Trainer without the device waits it makes at every step.

On a DeepSpeed run the HF Trainer (transformers 5) waits for the GPU at every optimizer step:
its token count (``include_num_input_tokens_seen``: a sum on the device, gathered across ranks,
``.item()``) and its gradient norm (``_get_grad_norm``'s ``.item()``, and accelerate's under
``_clip_grad_norm``). Each wait empties the GPU's queue, and the GPU then idles while the host
runs the step's Python (callbacks, the next batch, the forward's first launches). The other waits
at a step's edge are settings: DeepSpeed's throughput timer (``timers`` in dojo.zero.build), the
batch's copy to the GPU (``accelerator_config.non_blocking`` in dojo.train.worker.args) and, under
``--attn sdpa_varlen``, transformers' search for packed samples (dojo.train.worker.varlen).
Measured on the H200 (docs/benchmarks.md): 1B full ZeRO-2 went from 17.5 counted
waits a step to 11.5 (before accelerate's read and the packed-sample search went too) and ran
level (+1%): the waits inside DeepSpeed's step (its gradient-norm checks) and Liger's loss remain.
Kept for several GPUs, where the token count is a collective at every step, and for the count.

- Tokens: dojo's collators count each batch's real tokens on the host (``packing.TOKENS``); the
  ranks' counts are summed at the steps where something reads them (a log, a save, an eval,
  this launch's first step, the end), not every step. The count is exact: the real tokens, where
  HF's "non_padding" count of a packed row without a mask skipped every token equal to the pad
  id (the eos, where the tokenizer has no pad token).
- The gradient norm stays a device tensor; the Trainer's log converts it at logging steps.
"""

from typing import Any

import torch
import torch.distributed as dist
from transformers import Trainer, TrainerCallback

from dojo.train.worker.packing import TOKENS


class DojoTrainer(Trainer):
    """HF's Trainer; ``state.num_input_tokens_seen`` counted on the host (TrainingArguments'
    ``include_num_input_tokens_seen`` must be "no", or both would count)."""

    def __init__(self, *, callbacks: list[Any] | None = None, **kw: Any) -> None:
        self._tokens_unsummed = 0  # this rank's real tokens since the last sum
        # First after the Trainer's DefaultFlowCallback, which decides should_log/save/evaluate,
        # and before dojo's callbacks, which read the count.
        super().__init__(callbacks=[SumTokens(self), *(callbacks or [])], **kw)

    def training_step(self, model: Any, inputs: dict[str, Any], *args: Any, **kw: Any) -> Any:
        self._tokens_unsummed += _pop_tokens(inputs)
        return super().training_step(model, inputs, *args, **kw)

    def prediction_step(self, model: Any, inputs: dict[str, Any], *args: Any, **kw: Any) -> Any:
        inputs.pop(TOKENS, None)
        return super().prediction_step(model, inputs, *args, **kw)

    def _engine(self) -> Any:
        wrapped = getattr(self.accelerator, "deepspeed_engine_wrapped", None)
        return wrapped.engine if self.is_deepspeed_enabled and wrapped is not None else None

    # The two below override private Trainer methods (transformers 5.17-5.24); extra arguments a
    # later version may add go through to the Trainer's own.
    def _clip_grad_norm(self, model: Any, *args: Any, **kw: Any) -> Any:
        # DeepSpeed clipped inside its step; accelerate's clip_grad_norm_ would read its norm to
        # the host (DeepSpeedEngineWrapper.get_global_grad_norm: .item()).
        engine = self._engine()
        if engine is None or args or kw:
            return super()._clip_grad_norm(model, *args, **kw)  # type: ignore[no-untyped-call]
        return engine.get_global_grad_norm()

    def _get_grad_norm(self, model: Any, grad_norm: Any = None, *args: Any, **kw: Any) -> Any:
        engine = self._engine()
        if engine is None or args or kw:
            return super()._get_grad_norm(model, grad_norm, *args, **kw)  # type: ignore[no-untyped-call]
        # DeepSpeed's norm as it is: a device tensor is read at logging steps only.
        return grad_norm if grad_norm is not None else engine.get_global_grad_norm()

    def sum_tokens(self) -> None:
        """Add every rank's tokens since the last call to ``state.num_input_tokens_seen``. A
        collective: every rank calls it at the same steps."""
        n, self._tokens_unsummed = self._tokens_unsummed, 0
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            total = torch.tensor([n], dtype=torch.int64, device=self.args.device)
            dist.all_reduce(total)
            n = int(total.item())
        self.state.num_input_tokens_seen += n


def _pop_tokens(inputs: dict[str, Any]) -> int:
    """The batch's real tokens: the collator's count, else (a batch from another collator) the
    attention mask's or the whole batch's, as HF counts them (a device read)."""
    n = inputs.pop(TOKENS, None)
    if n is not None:
        return int(n)
    mask = inputs.get("attention_mask")
    return int(mask.sum().item()) if mask is not None else int(inputs["input_ids"].numel())


class SumTokens(TrainerCallback):
    """Sums the ranks' token counts where a reader needs them: a logging, saving or eval step
    (the Trainer's flags for this step are set by then), this launch's first step (dojo's
    Measures) and the end."""

    def __init__(self, trainer: DojoTrainer) -> None:
        self.trainer = trainer
        self.first = True

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        flags = control.should_log or control.should_save or control.should_evaluate
        if flags or self.first or state.global_step >= state.max_steps:
            self.trainer.sum_tokens()
        self.first = False

    def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.trainer.sum_tokens()
