"""``ResolvedRun``: one training run with every "auto" decided. Frozen, typed, torch-free.

``dojo config`` writes its JSON from it, ``dojo estimate`` estimates it, ``dojo train`` writes it
to ``RUN_DIR/run.json`` and the worker reads it back as the same type (``from_dict``).
"""

import dataclasses
from dataclasses import dataclass
from typing import Any

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
    """sdpa | eager | flex_attention | flash_attention_2."""
    liger: bool
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
    logging_steps: int
    assumed: tuple[str, ...] = ()
    """How each "auto" was decided, in words (printed by estimate and train)."""

    @property
    def world_size(self) -> int:
        return self.gpus_per_node * self.num_nodes

    @property
    def adapters(self) -> bool:
        return self.method != "full"

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["gpus"], d["data"], d["assumed"] = list(self.gpus), list(self.data), list(self.assumed)
        return {"format": FORMAT, **d}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ResolvedRun":
        if d.get("format") != FORMAT:
            raise ValueError(f"run.json format {d.get('format')!r}, this dojo reads {FORMAT}")
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in d.items() if k in fields}
        for name in ("gpus", "data", "assumed"):
            values[name] = tuple(values.get(name, ()))
        return cls(**values)
