"""What the run optimises: supervised fine-tuning, or a preference objective through TRL.

    dojo train --objective dpo --method lora --data pairs.jsonl

SFT is dojo's own loop (HF Trainer). DPO and KTO are TRL's ``DPOTrainer`` / ``KTOTrainer``;
ORPO is TRL's ``ORPOTrainer`` and SimPO TRL's ``CPOTrainer`` with ``loss_type="simpo"``,
``cpo_alpha=0`` (both in ``trl.experimental`` since TRL 1.0). Defaults are TRL's own; the
reference model is the frozen base (docs/train.md#preference-tuning).
"""

import dataclasses
from dataclasses import dataclass
from typing import Literal

from dojo.run.field import PLAN, opt

Objective = Literal["sft", "dpo", "orpo", "kto", "simpo"]
PAIRED = ("dpo", "orpo", "simpo")
"""Objectives that score a chosen and a rejected answer in one forward (2 sequences a row)."""
WITH_REFERENCE = ("dpo", "kto")
"""Objectives whose loss compares the policy with a frozen reference model."""
DPO_LOSSES = (
    "sigmoid", "ipo", "hinge", "nca_pair", "bco_pair", "sppo_hard", "aot", "aot_unpaired",
    "apo_zero", "apo_down", "discopop", "sigmoid_norm",
)  # fmt: skip
"""TRL 1.16 DPOConfig.loss_type values that need no option dojo does not pass (exo_pair and
robust read label_smoothing, which dojo leaves at 0)."""
KTO_LOSSES = ("kto", "apo_zero_unpaired")
"""TRL 1.16 KTOConfig.loss_type values."""
LossType = Literal[
    "auto", "sigmoid", "ipo", "hinge", "nca_pair", "bco_pair", "sppo_hard", "aot",
    "aot_unpaired", "apo_zero", "apo_down", "discopop", "sigmoid_norm", "kto",
    "apo_zero_unpaired",
]  # fmt: skip
BETA = 0.1
"""TRL's default beta for every one of these trainers (DPO, KTO, ORPO's lambda, CPO/SimPO)."""
SIMPO_GAMMA = 0.5
"""TRL's CPOConfig.simpo_gamma (the SimPO paper's target reward margin, as a beta ratio)."""
LR_PREFERENCE = {"full": 1e-6, "adapters": 5e-6}
"""--lr by default for a preference objective: TRL's DPOConfig/KTOConfig/ORPOConfig default
(full weights), and LLaMA-Factory's LoRA DPO/KTO examples (qwen3_lora_dpo.yaml: 5e-6)."""


@dataclass(frozen=True)
class ObjectiveOptions:
    objective: Objective = opt(
        "sft",
        "sft | dpo | orpo | kto | simpo: supervised, or preference tuning on chosen/rejected "
        "answers through TRL's trainers",
        "sft: what a chat dataset trains; the preference objectives need preference rows",
        commands=PLAN,
    )
    beta: float | None = opt(
        None,
        "Preference strength: DPO/KTO's beta (deviation from the reference), ORPO's lambda, "
        "SimPO's reward scale [default: 0.1, TRL's]",
        lo=1e-6, hi=1e4, example="0.1",
    )  # fmt: skip
    loss_type: LossType = opt(
        "auto",
        "DPO loss: sigmoid | ipo | hinge | nca_pair | bco_pair | sppo_hard | aot | aot_unpaired "
        "| apo_zero | apo_down | discopop | sigmoid_norm; KTO loss: kto | apo_zero_unpaired",
        "auto = sigmoid (the DPO paper's) for dpo, kto for kto",
        metavar="CHOICE",
    )
    simpo_gamma: float | None = opt(
        None, "SimPO's target reward margin (--objective simpo) [default: 0.5, TRL's]",
        lo=0.0, hi=1e4, example="0.5",
    )  # fmt: skip
    rpo_alpha: float | None = opt(
        None,
        "RPO: add the chosen answers' NLL loss with this weight to DPO (TRL loss_type "
        "[sigmoid, sft]; the RPO paper uses 1.0) [default: off]",
        lo=1e-6, hi=1e4, example="1.0",
    )  # fmt: skip
    precompute_ref_log_probs: bool = opt(
        False,
        "DPO/KTO: score every row with the reference model once before training, then train "
        "without it in memory (TRL precompute_ref_log_probs)",
        "off: TRL's default; on saves the reference copy of full fine-tuning (and its forward "
        "each step) for one pass over the data first",
        commands=PLAN,
    )

    @property
    def preference(self) -> bool:
        return self.objective != "sft"

    @property
    def paired(self) -> bool:
        """Each row is a chosen and a rejected answer, scored in one forward."""
        return self.objective in PAIRED


def reference(objective: str, full: bool, precompute: bool) -> str:
    """What the loss compares the policy with: none | adapter-off | copy | precomputed."""
    if objective not in WITH_REFERENCE:
        return "none"
    if precompute:
        return "precomputed"
    return "copy" if full else "adapter-off"


def objective_problems(
    o: ObjectiveOptions, *, micro_batch: int, packing: bool, liger: str, given: set[str]
) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    add = out.append
    name = o.objective
    if name == "sft":
        for flag, key in (("--beta", "beta"), ("--loss-type", "loss_type"),
                          ("--simpo-gamma", "simpo_gamma"), ("--rpo-alpha", "rpo_alpha"),
                          ("--precompute-ref-log-probs", "precompute_ref_log_probs")):  # fmt: skip
            if key in given and getattr(o, key) not in (None, False, "auto"):
                add((f"{flag} applies to a preference objective, not --objective sft",
                     f"add --objective dpo (or orpo, kto, simpo), or drop {flag}"))  # fmt: skip
        return out
    if o.simpo_gamma is not None and name != "simpo":
        add((f"--simpo-gamma applies to --objective simpo, not {name}",
             "drop --simpo-gamma, or use --objective simpo"))  # fmt: skip
    if o.rpo_alpha is not None and name != "dpo":
        add((f"--rpo-alpha adds an NLL term to DPO's loss; --objective {name} has none",
             "drop --rpo-alpha, or use --objective dpo"))  # fmt: skip
    if o.precompute_ref_log_probs and name not in WITH_REFERENCE:
        add((f"--precompute-ref-log-probs: --objective {name} has no reference model",
             "drop it; it applies to dpo and kto"))  # fmt: skip
    if o.loss_type != "auto":
        allowed = {"dpo": DPO_LOSSES, "kto": KTO_LOSSES}.get(name, ())
        if o.loss_type not in allowed:
            fix = (f"choices for {name}: {', '.join(allowed)}" if allowed
                   else f"drop --loss-type: --objective {name} has one loss")  # fmt: skip
            add((f"--loss-type {o.loss_type} is not a loss of --objective {name}", fix))
    if name == "kto" and micro_batch < 2 and loss_type(o) == "kto":
        add(("--objective kto needs --micro-batch 2 or more: its KL term pairs each prompt with "
             "another row's answer in the same micro-batch (TRL's KTOTrainer)",
             "use --micro-batch 2 (or --loss-type apo_zero_unpaired, which has no KL term)"))  # fmt: skip
    if packing:
        add((f"--packing with --objective {name}: TRL's preference trainers pad each answer "
             "apart", "drop --packing"))  # fmt: skip
    if liger in ("on", "loss"):
        add((f"--liger {liger} with --objective {name}: TRL's preference trainers compute "
             "their log-probabilities with their own head", "use --liger off (auto is off here)"))  # fmt: skip
    return out


def loss_type(o: ObjectiveOptions) -> str:
    """--loss-type resolved: auto -> the objective's own default (TRL's)."""
    if o.loss_type != "auto":
        return o.loss_type
    return {"dpo": "sigmoid", "kto": "kto", "simpo": "simpo", "orpo": "orpo"}.get(o.objective, "")


def resolve_objective(o: ObjectiveOptions) -> ObjectiveOptions:
    """Every default of a preference objective decided (TRL's values); SFT unchanged."""
    if not o.preference:
        return o
    return dataclasses.replace(
        o,
        beta=o.beta if o.beta is not None else BETA,
        loss_type=loss_type(o) if o.objective in WITH_REFERENCE else "auto",  # type: ignore[arg-type]
        simpo_gamma=(o.simpo_gamma if o.simpo_gamma is not None else SIMPO_GAMMA)
        if o.objective == "simpo"
        else None,
    )
