"""ORPO's and SimPO's log-probabilities through TRL's fused LM head, never the whole logits.

TRL's ORPOTrainer and CPOTrainer (SimPO) call the model's own forward on the concatenated batch
[2 x micro-batch, longest]: it makes the logits of every position, padding and prompt included,
[rows, longest, vocab] in bf16, and then log-softmaxes them and keeps their gradient. For a 1B
Llama at 4 pairs x 2048 tokens that is several GiB for a 128k vocabulary, more than the decoder's
activations, and more again at Qwen's 152k or Gemma's 262k. TRL's DPOTrainer and KTOTrainer
score through ``trl.trainer.utils.add_fused_lm_head`` instead: the head runs in tiles over the
positions that have a label (on CUDA only those; elsewhere every position, still in tiles) and
returns per-token log-probabilities, so the logits are never made whole.

``concatenated_forward`` gives ORPO and SimPO that head. Everything else is TRL's: the batch
(``concatenated_inputs``), the losses (``odds_ratio_loss``, ``cpo_loss``), the reward metrics.
What each forward returns, as TRL's own does:

- the answers' log-probabilities, summed per sequence, divided by the answer's length where TRL
  averages (ORPO; SimPO and IPO under CPO);
- ORPO's NLL term over the chosen sequences' prompt and answer (TRL's ``cross_entropy_loss`` on
  ``input_ids`` where the mask is 1), CPO's over the chosen answers when ``cpo_alpha`` is set;
- for ``logits/chosen`` and ``logits/rejected``, the mean logit over the answers' tokens, as
  TRL's DPOTrainer logs it (the model's own forward averaged every position, padding included);
- the MoE load-balancing loss where the model's config asks for it.
"""

from typing import Any

import torch

from dojo.train.worker.unpadded import PLAN_KEY

OUTPUTS = ("log_probs", "mean_logits")
"""The per-token fields the head computes: the log-probabilities and the metrics' mean logits."""


def install(model: Any) -> None:
    """TRL's fused head on ``model`` (under PEFT: on its base model, as DPOTrainer does)."""
    from trl.trainer.utils import add_fused_lm_head

    add_fused_lm_head(model.get_base_model() if hasattr(model, "get_base_model") else model,
                      outputs=OUTPUTS)  # fmt: skip


def concatenated_forward(
    trainer: Any, model: Any, batch: dict[str, Any], *, nll: str, average: bool, padding_value: Any
) -> tuple[Any, ...]:
    """ORPO's / CPO's ``concatenated_forward`` through the fused head (module docstring).

    ``nll``: "sequence" (ORPO: the chosen prompt and answer), "answer" (CPO with cpo_alpha) or
    "" (none, SimPO); ``average``: divide each sequence's log-probability by its answer length.
    Returns (chosen_logps, rejected_logps, chosen_mean_logit, rejected_mean_logit, nll_loss[,
    aux_loss]), the tuple TRL's ``get_batch_loss_metrics`` unpacks."""
    device = trainer.accelerator.device
    cat = trainer.concatenated_inputs(batch, is_encoder_decoder=False,
                                      padding_value=padding_value, device=device)  # fmt: skip
    n = batch["chosen_labels"].shape[0]
    ids, mask = cat["concatenated_input_ids"], cat["concatenated_attention_mask"]
    answers = cat["concatenated_labels"]
    labels = torch.where(mask == 1, ids, -100) if nll == "sequence" else answers
    kw = {"output_router_logits": True} if trainer.aux_loss_enabled else {}
    if PLAN_KEY in batch:  # the collator's plan for the unpadding hook (dojo.train.worker.unpadded)
        kw[PLAN_KEY] = batch[PLAN_KEY]
    # input_ids by name: the head hands its arguments to the backbone as they came, and the
    # backbone's unpadding hook (dojo.train.worker.unpadded) reads them from the keywords
    out = model(input_ids=ids, attention_mask=mask, use_cache=False, labels=labels,
                fused_lm_head=True, **kw)  # fmt: skip
    # The head scores the positions whose next label is not -100: the answers, and for ORPO the
    # prompts too; the answers' mask picks the log-probabilities the rewards read.
    scored = labels[:, 1:] != -100
    answer = (answers[:, 1:] != -100).to(out.log_probs.dtype)
    logps = (out.log_probs * answer).sum(-1)
    if average:
        logps = logps / answer.sum(-1)
    if nll:
        counted = scored[:n] if nll == "sequence" else answer[:n].bool()
        nll_loss = -(out.log_probs[:n] * counted).sum() / counted.sum()
    else:
        nll_loss = torch.tensor(0.0, device=device)
    means = (out.mean_logits * answer).detach()
    chosen_mean = means[:n].sum() / answer[:n].sum().clamp(min=1)
    rejected_mean = means[n:].sum() / answer[n:].sum().clamp(min=1)
    result = (logps[:n], logps[n:], chosen_mean, rejected_mean, nll_loss)
    return (*result, out.aux_loss) if trainer.aux_loss_enabled else result
