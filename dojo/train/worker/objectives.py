"""Preference objectives through TRL's trainers (worker side: imports torch and trl).

    dpo   trl.DPOTrainer / DPOConfig
    kto   trl.KTOTrainer / KTOConfig
    orpo  trl.experimental.orpo.ORPOTrainer / ORPOConfig
    simpo trl.experimental.cpo.CPOTrainer / CPOConfig(loss_type="simpo", cpo_alpha=0)

The losses, the reference model's handling and the metrics (rewards/accuracies, margins) are
TRL's. What dojo changes, by subclassing:

- the data arrives tokenized with dojo's chat template (dojo.train.worker.preference, cached
  like SFT's), so DPO's and KTO's ``_prepare_dataset`` and ORPO's / CPO's ``tokenize_row`` only
  put the ids in the columns those trainers read (KTO's KL completions as TRL builds them);
- ORPO and SimPO score through TRL's fused LM head, as TRL's DPO and KTO do, instead of the
  model's whole logits (dojo.train.worker.fused_head);
- dojo's Trainer (``DojoTrainer``: token counts on the host, no device waits for the gradient
  norm) sits before TRL's in the class order;
- no model card (README.md) in the run folder, and no usage telemetry (TRL's ``_BaseTrainer``
  sends one ping to the Hub per run).

The reference model: LoRA/QLoRA pass their adapter config to TRL (``peft_config``), which then
scores the reference with the adapter disabled, no copy; full fine-tuning hands TRL a second
copy of the starting weights, loaded like the policy (under ZeRO-3 already sharded), which TRL
prepares as a DeepSpeed inference engine (ZeRO-3: sharded; below: whole on each GPU);
--precompute-ref-log-probs scores the data before training instead and keeps no copy.
"""

import os
from typing import Any

from dojo.run.groups.objective import loss_type, reference
from dojo.train.worker import fused_head, unpadded
from dojo.train.worker.callbacks import print0
from dojo.train.worker.packing import TOKENS
from dojo.train.worker.trainer import DojoTrainer

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # ORPO and CPO live in trl.experimental


def config_class(objective: str) -> Any:
    if objective == "dpo":
        from trl.trainer.dpo_config import DPOConfig

        return DPOConfig
    if objective == "kto":
        from trl.trainer.kto_config import KTOConfig

        return KTOConfig
    if objective == "orpo":
        from trl.experimental.orpo import ORPOConfig

        return ORPOConfig
    from trl.experimental.cpo import CPOConfig

    return CPOConfig


def objective_kwargs(run: Any) -> dict[str, Any]:
    """The objective's own fields of TRL's config (beta, loss, lengths)."""
    o = run.objective
    kw: dict[str, Any] = {"beta": o.beta, "max_length": run.data.seq_len}
    if o.objective in ("dpo", "kto"):
        kw["precompute_ref_log_probs"] = o.precompute_ref_log_probs
    if o.objective == "dpo":
        kw["loss_type"] = [loss_type(o)]
        if o.rpo_alpha is not None:  # RPO: TRL 1.16 spells it as a second, weighted loss
            kw["loss_type"] = [loss_type(o), "sft"]
            kw["loss_weights"] = [1.0, o.rpo_alpha]
    elif o.objective == "kto":
        kw["loss_type"] = loss_type(o)
    elif o.objective == "simpo":
        kw.update(loss_type="simpo", cpo_alpha=0.0, simpo_gamma=o.simpo_gamma)
    return kw


def build_config(run: Any, training_kwargs: dict[str, Any]) -> Any:
    """TRL's config for the objective from the same TrainingArguments values SFT uses
    (dojo.train.worker.args.training_kwargs) plus the objective's own."""
    return config_class(run.objective.objective)(**training_kwargs, **objective_kwargs(run))


def peft_config(model: Any, run: Any) -> Any:
    """The run's LoraConfig (TRL wraps the model and scores the reference with it disabled)."""
    from dojo.train.worker.model import lora_config

    return lora_config(model, run) if run.model.adapters else None


class CountTokens:
    """TRL's collator, plus the batch's real tokens counted on the host (``TOKENS``, which
    DojoTrainer pops) and, with ``unpad`` (the padded pairs of DPO, ORPO and SimPO), where its
    real tokens go in one flat row (``unpadded.plan``). Not KTO's: TRL hands the batch's extra
    keys to its KL call too, whose sequences are others. Set in place of TRL's once the trainer
    is built: the batches TRL's precompute of reference log-probs collates go to the model as
    they are."""

    def __init__(
        self, inner: Any, keys: tuple[str, ...], repeat: dict[str, int], drop: tuple[str, ...],
        unpad: bool = False,
    ) -> None:  # fmt: skip
        self.inner, self.keys, self.repeat, self.drop = inner, keys, repeat, drop
        self.unpad = unpad

    def __call__(self, features: list[dict[str, Any]]) -> Any:
        n = sum(len(f[k]) * self.repeat.get(k, 1) for f in features for k in self.keys)
        if self.drop:  # dojo's columns, already laid out by tokenize_row
            features = [{k: v for k, v in f.items() if k not in self.drop} for f in features]
        batch = self.inner(features)
        batch[TOKENS] = n
        if self.unpad:
            mask = batch.get("attention_mask")  # DPO's; ORPO's and CPO's are one per side
            if mask is None:
                mask = unpadded.pair_mask(batch["chosen_attention_mask"],
                                          batch["rejected_attention_mask"])  # fmt: skip
            flat = unpadded.plan(mask)
            if flat is not None:
                batch[unpadded.PLAN_KEY] = flat
        return batch


def _trainer_classes() -> dict[str, type]:
    """dojo's subclass of each TRL trainer (built on first use: importing trl is slow)."""
    from trl.experimental.cpo import CPOTrainer
    from trl.experimental.orpo import ORPOTrainer
    from trl.trainer.dpo_trainer import DPOTrainer
    from trl.trainer.kto_trainer import KTOTrainer

    class Dojo(DojoTrainer):
        def create_model_card(self, *args: Any, **kw: Any) -> None:
            """TRL writes a README.md model card into the run folder at each checkpoint; a
            dojo run folder holds what an SFT run's does."""

        def _send_telemetry(self) -> None:
            """TRL 1.x pings the Hub from rank 0 when a trainer starts (huggingface_hub's
            send_telemetry); dojo's runs send nothing they were not asked to."""

    class DojoDPOTrainer(Dojo, DPOTrainer):
        def _prepare_dataset(self, dataset: Any, *args: Any, **kw: Any) -> Any:
            return dataset  # already tokenized, over-long rows dropped or cut (dojo's report)

    class DojoKTOTrainer(Dojo, KTOTrainer):
        def _prepare_dataset(self, dataset: Any, processing_class: Any, args: Any,
                             dataset_name: str) -> Any:  # fmt: skip
            if not self.calculate_KL:
                return dataset
            from trl.trainer.utils import global_then_local_main_first

            def add_kl(examples: dict[str, list[Any]]) -> dict[str, list[Any]]:
                # TRL's own (KTOTrainer._prepare_dataset): each prompt with the answer of the row
                # before it in its micro-batch, for the KL estimate.
                done = examples["completion_ids"]
                return {**examples, "KL_completion_ids": [done[-1], *done[:-1]]}

            with global_then_local_main_first():
                return dataset.map(add_kl, batched=True,
                                   batch_size=args.per_device_train_batch_size)  # fmt: skip

    def tokenize_row(self: Any, feature: dict[str, Any], model: Any = None) -> dict[str, Any]:
        """ORPO's / CPO's row layout from dojo's ids (their tokenize_row, without tokenizing)."""
        p = list(feature["prompt_ids"])
        out: dict[str, Any] = {"prompt_input_ids": p, "prompt_attention_mask": [1] * len(p)}
        for side in ("chosen", "rejected"):
            answer = list(feature[f"{side}_ids"])
            out[f"{side}_input_ids"] = p + answer
            out[f"{side}_attention_mask"] = [1] * (len(p) + len(answer))
            out[f"{side}_labels"] = [-100] * len(p) + answer
        return out

    class FusedHead(Dojo):
        """ORPO's and CPO's trainers: TRL's fused LM head on the model once TRL has built
        (and PEFT-wrapped) it, for ``concatenated_forward`` to call (dojo.train.worker.fused_head)."""

        def __init__(self, *args: Any, **kw: Any) -> None:
            super().__init__(*args, **kw)
            fused_head.install(self.model)

    class DojoORPOTrainer(FusedHead, ORPOTrainer):
        def concatenated_forward(self, model: Any, batch: dict[str, Any]) -> tuple[Any, ...]:
            return fused_head.concatenated_forward(
                self, model, batch, nll="sequence", average=True, padding_value=self.padding_value,
            )  # fmt: skip

    class DojoCPOTrainer(FusedHead, CPOTrainer):
        def concatenated_forward(self, model: Any, batch: dict[str, Any]) -> tuple[Any, ...]:
            return fused_head.concatenated_forward(
                self, model, batch, nll="answer" if self.cpo_alpha else "",
                average=self.loss_type in ("ipo", "simpo"), padding_value=self.pad_token_id,
            )  # fmt: skip

    DojoORPOTrainer.tokenize_row = tokenize_row  # type: ignore[method-assign]
    DojoCPOTrainer.tokenize_row = tokenize_row  # type: ignore[method-assign]
    return {"dpo": DojoDPOTrainer, "kto": DojoKTOTrainer, "orpo": DojoORPOTrainer,
            "simpo": DojoCPOTrainer}  # fmt: skip


_COUNTED: dict[str, tuple[tuple[str, ...], dict[str, int]]] = {
    "dpo": (("prompt_ids", "chosen_ids", "rejected_ids"), {"prompt_ids": 2}),
    "kto": (("prompt_ids", "completion_ids"), {}),
    "orpo": (("chosen_input_ids", "rejected_input_ids"), {}),
    "simpo": (("chosen_input_ids", "rejected_input_ids"), {}),
}
"""Per objective: the columns whose lengths are the batch's real tokens (a DPO prompt is read
twice, once before each answer)."""


def build_trainer(
    run: Any, *, model: Any, ref_model: Any, args: Any, train_dataset: Any, eval_dataset: Any,
    tokenizer: Any, callbacks: list[Any],
) -> Any:  # fmt: skip
    """The objective's TRL trainer (dojo's subclass), counting tokens once it is built."""
    objective = run.objective.objective
    cls = _trainer_classes()[objective]
    unpad = run.kernels.attn in unpadded.UNPADDED_ATTN
    if unpad:  # before TRL's trainer: its precompute pass runs in the constructor
        for m in (model, ref_model):
            if m is not None:
                unpadded.install(m, run.kernels.attn)
        print0(f"preference batches without padding: the decoder layers run on the real tokens "
               f"(--attn {run.kernels.attn}); --attn sdpa for padded rows")  # fmt: skip
    kw: dict[str, Any] = {
        "model": model, "args": args, "train_dataset": train_dataset,
        "eval_dataset": eval_dataset, "processing_class": tokenizer, "callbacks": callbacks,
        "peft_config": peft_config(model, run),
    }  # fmt: skip
    if objective in ("dpo", "kto"):
        kw["ref_model"] = ref_model
    trainer = cls(**kw)
    keys, repeat = _COUNTED[objective]
    drop = ("prompt_ids", "chosen_ids", "rejected_ids") if objective in ("orpo", "simpo") else ()
    trainer.data_collator = CountTokens(trainer.data_collator, keys, repeat, drop,
                                        unpad=unpad and objective != "kto")  # fmt: skip
    return trainer


def reference_model(run: Any, weights: str, tokenizer: Any, added: list[str]) -> Any:
    """Full fine-tuning's frozen reference for DPO/KTO: the starting weights loaded again, as
    the policy was (already sharded under ZeRO-3); None where TRL needs no copy (adapters: the
    base with them disabled; precomputed log-probs; ORPO/SimPO)."""
    o = run.objective
    if reference(o.objective, not run.model.adapters, o.precompute_ref_log_probs) != "copy":
        return None
    from dojo.train.worker import serving
    from dojo.train.worker.model import load_model

    ref = load_model(run, weights)
    serving.fit_embeddings(ref, tokenizer, run, added)
    ref.requires_grad_(False)
    print0("reference model: a frozen copy of the starting weights")
    return ref


REWARDS = {"reward_accuracy": "rewards/accuracies", "reward_margin": "rewards/margins"}
"""dojo_summary.json key -> TRL's logged metric (KTO logs margins, no accuracy)."""


def reward_summary(state: Any, run: Any) -> dict[str, Any]:
    """A preference run's reward accuracy and margin, first and last logged (TRL's metrics:
    chosen reward = beta x log-ratio to the reference, or the policy's own for ORPO/SimPO)."""
    if not run.objective.preference:
        return {}
    out: dict[str, Any] = {}
    for name, key in REWARDS.items():
        seen = [e[key] for e in state.log_history if key in e]
        out[f"{name}_first"] = seen[0] if seen else None
        out[f"{name}_last"] = seen[-1] if seen else None
    return out
