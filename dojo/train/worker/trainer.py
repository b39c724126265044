"""The worker's Trainer: the HF Trainer without the device waits it makes at every step.

On a DeepSpeed run the HF Trainer (transformers 5) waits for the GPU twice per optimizer step:
its token count (``include_num_input_tokens_seen``: a sum on the device, gathered, ``.item()``)
and its gradient norm (``_get_grad_norm``: ``.item()`` under DeepSpeed). Each wait empties the
GPU's queue, and the GPU then idles while the host runs the step's Python (callbacks, the next
batch, the first launches of the forward). Without the waits the host queues the next step's
forward while the GPU still runs this step's backward and optimizer. The other waits at a step's
edge are settings: DeepSpeed's throughput timer (``timers`` in dojo.zero.build) and the batch's
copy to the GPU (``accelerator_config.non_blocking`` in dojo.train.worker.args).

- Tokens: dojo's collators count each batch's real tokens on the host (``packing.TOKENS``); the
  ranks' counts are summed at the steps where something reads them (a log, a save, an eval,
  step 1, the end), not every step. The count is exact: the real tokens, where HF's
  "non_padding" count of a packed row without a mask skipped every token equal to the pad id
  (the eos, where the tokenizer has no pad token).
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

    def _get_grad_norm(self, model: Any, grad_norm: Any = None) -> Any:
        if grad_norm is None or not self.is_deepspeed_enabled:
            return super()._get_grad_norm(model, grad_norm)  # type: ignore[no-untyped-call]
        return grad_norm  # DeepSpeed's norm as it is: a device tensor is read at logging steps

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
