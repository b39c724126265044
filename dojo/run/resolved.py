"""``ResolvedRun``: one training run with every "auto" decided. Frozen, typed, torch-free.

``dojo config`` writes its JSON from it, ``dojo estimate`` estimates it, ``dojo train`` writes it
to ``RUN_DIR/run.json`` and the worker reads it back as the same type (``from_dict``).
"""

import dataclasses
from dataclasses import dataclass
from typing import Any

_TUPLES = (
    "gpus", "data", "assumed", "eval_data", "modules_to_save", "report_to", "data_columns",
    "data_ratios", "z3_leaf",
)  # fmt: skip
FORMAT = 1
"""run.json format; bumped when a field changes meaning."""


@dataclass(frozen=True)
class ResolvedRun:
    # What trains
    method: str
    """full | lora | qlora."""
    model: str | None
    """As given (folder, Hub id, alias); None = the bundled tiny model."""
    init: str
    """pretrained | random (seeded random weights from the model's config)."""
    # DeepSpeed ZeRO
    zero: int
    offload_optimizer: str
    """none | cpu | nvme."""
    offload_param: str
    """none | cpu | nvme (ZeRO-3 only)."""
    nvme_path: str | None
    overlap_comm: bool
    bucket_size: int | None
    """reduce_bucket_size, elements; None = HF "auto" (hidden_size^2, filled by the Trainer)."""
    optimizer_from: str
    """hf = TrainingArguments builds it; ds = a DeepSpeed block in the JSON (which then wins)."""
    scheduler_from: str
    optim: str
    """The optimizer that steps: an HF optim name, or deepspeed_adamw."""
    # Numerics and kernels
    precision: str
    """bf16 | fp16 | fp32."""
    attn: str
    """sdpa | eager | flex_attention | flash_attention_2 | sdpa_varlen (dojo.train.worker.varlen)."""
    liger: bool
    """Liger's fused linear cross-entropy (and, with ``liger_kernels``, its layer kernels)."""
    compile: bool
    packing: bool
    grad_ckpt: bool
    # Batch
    micro_batch: int
    seq_len: int
    grad_accum: int
    # LoRA
    lora_r: int
    lora_alpha: int
    lora_dropout: float
    lora_targets: str
    merge: bool
    # Where
    device: str
    """cuda | cpu."""
    gpus: tuple[int, ...]
    """GPU ids (cuda) or process slots (cpu) per node; empty = the hostfile's slots."""
    gpus_per_node: int
    num_nodes: int
    hostfile: str | None
    master_addr: str | None
    master_port: int | None
    machine: str
    """Which machine this was resolved for, in words."""
    machine_assumed: bool
    # The training loop
    lr: float
    warmup_steps: int
    epochs: float
    max_steps: int | None
    seed: int
    data: tuple[str, ...]
    template: str | None
    overflow: str
    trust_remote_code: bool
    output_dir: str
    resume: bool
    save_steps: int
    save_total_limit: int
    save_model: bool
    logging_steps: int | None
    """Log every N steps; None = 1% of the total steps, at least 1 (known only at train time)."""
    assumed: tuple[str, ...] = ()
    """How each "auto" was decided, in words (printed by estimate and train)."""
    # Evaluation (defaults = no eval, so a run.json written before these fields reads back)
    eval_data: tuple[str, ...] = ()
    """Held-out data files / Hub ids; empty with eval_split None = no eval."""
    eval_split: float | None = None
    """Fraction of the training rows held out for eval (seeded by ``seed``)."""
    eval_steps: int | None = None
    """Eval loss every N steps (and at the last step); None exactly when there is no eval."""
    early_stopping: int | None = None
    """Patience in evals without a lower eval loss (transformers' EarlyStoppingCallback)."""
    keep_best: bool = False
    """load_best_model_at_end on eval_loss: the checkpoint with the lowest eval loss is saved."""
    # Schedule and regularisation
    lr_scheduler: str = "linear"
    """transformers lr_scheduler_type (ignored by DeepSpeed's own block: resolve refuses that)."""
    warmup_ratio: float | None = None
    """Warmup as a fraction of the total steps; None = ``warmup_steps`` counts."""
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    """Gradient clipping norm; 0 = none."""
    neftune_alpha: float | None = None
    """NEFTune noise alpha (TrainingArguments neftune_noise_alpha); None = off."""
    # LoRA variants
    dora: bool = False
    rslora: bool = False
    modules_to_save: tuple[str, ...] = ()
    """Modules trained in full and saved with the adapter (PEFT modules_to_save)."""
    report_to: tuple[str, ...] = ()
    """Trainer integrations (tensorboard, wandb, mlflow); empty = none."""
    revision: str | None = None
    """Branch, tag or commit of a Hub model (from_pretrained's revision); None = main."""
    # Data sources (dojo.train.sources)
    data_columns: tuple[str, ...] = ()
    """TARGET=SOURCE column renames applied to every data source."""
    data_ratios: tuple[float, ...] = ()
    """Mixing ratios, one per --data (empty = inline =WEIGHT or no mixing)."""
    # ZeRO-3 fetching (defaults = DeepSpeed's per-module hooks and HF's "auto" prefetch, which is
    # what a run.json written before these fields ran with)
    prefetch_bucket_size: int | None = None
    """stage3_prefetch_bucket_size, elements; None = HF "auto" (0.9 x hidden^2)."""
    z3_leaf: tuple[str, ...] = ()
    """ZeRO-3 leaf module classes (zero_optimization.leaf_module): each such module's parameters
    are gathered at once and only it gets DeepSpeed's hooks; empty = per-module hooks."""

    # DeepSpeed details (defaults = what a run.json written before these fields ran with)
    overflow_check: bool = True
    """bf16.check_grad_overflow: skip a step whose gradients hold inf/NaN (DeepSpeed's default)."""
    sub_group_size: int | None = None
    """ZeRO-3 optimizer-step tile, elements; None = DeepSpeed's 1e9."""
    expandable_segments: bool = False
    """The worker runs PyTorch's CUDA allocator with expandable_segments:True (a run.json
    written before this field ran with the default allocator, unless its environment said)."""
    liger_kernels: bool = True
    """With ``liger``: also Liger's RMSNorm / SwiGLU / RoPE kernels; False = its fused linear
    cross-entropy alone (--liger loss, what --compile picks: the kernels inside compiled layers
    gave NaN losses, session 6). A run.json written before this field ran with all of them."""

    @property
    def evaluates(self) -> bool:
        return self.eval_steps is not None

    @property
    def world_size(self) -> int:
        return self.gpus_per_node * self.num_nodes

    @property
    def adapters(self) -> bool:
        return self.method != "full"

    @property
    def lora_target_names(self) -> tuple[str, ...] | None:
        """--lora-targets as module names; None = all-linear (every linear layer but the head)."""
        return target_names(self.lora_targets)

    @property
    def hf_optim(self) -> str:
        """TrainingArguments' optim. With --optimizer ds the JSON's optimizer block wins and this
        one is never built; adamw_torch keeps TrainingArguments valid (and the explanation true)."""
        return self.optim if self.optimizer_from == "hf" else "adamw_torch"

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        for name in _TUPLES:
            d[name] = list(d[name])
        return {"format": FORMAT, **d}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ResolvedRun":
        if d.get("format") != FORMAT:
            raise ValueError(f"run.json format {d.get('format')!r}, this dojo reads {FORMAT}")
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in d.items() if k in fields}
        for name in _TUPLES:
            values[name] = tuple(values.get(name, ()))
        return cls(**values)


def target_names(lora_targets: str) -> tuple[str, ...] | None:
    """--lora-targets text as module names; None = all-linear (every linear layer but the head).
    The one parse, for the resolver (before a ResolvedRun exists) and ``lora_target_names``."""
    if lora_targets == "all-linear":
        return None
    return tuple(t.strip() for t in lora_targets.split(",") if t.strip())
