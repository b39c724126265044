"""What trains: the model, how it is adapted, and its chat template."""

from dataclasses import dataclass
from typing import Literal

from dojo.run.field import ALL, opt

Method = Literal["full", "lora", "qlora"]


@dataclass(frozen=True)
class ModelOptions:
    model: str | None = opt(
        None,
        "Local model folder, config.json, Hub id (org/name); for estimate and config also a "
        "size alias (1b, 7b, 8b, 70b, ...: dojo estimate --help lists them) or architecture "
        "name (llama-3.1-8b), shapes without weights [default for train: a bundled tiny model]",
        example="./Llama-3.2-1B",
        commands=ALL,
    )
    revision: str | None = opt(
        None,
        "Branch, tag or commit of a Hub --model [default: main]",
        "pin it to train and estimate the same weights every time",
        example="main",
        commands=ALL,
    )
    method: Method = opt(
        "full",
        "full | lora | qlora",
        "HF Trainer's own default: every parameter trains",
        commands=ALL,
    )
    init: Literal["pretrained", "random"] = opt(
        "pretrained",
        "pretrained = load the model's weights (a folder without weights is refused); random = "
        "seeded random weights from its config",
        "never train random weights by accident",
    )
    template: str | None = opt(
        None,
        "Bundled chat template name or .jinja file [default: the model's own]",
        example="chatml",
    )
    trust_remote_code: bool = opt(
        False, "Run Python code shipped with the model", "only for models you trust"
    )

    @property
    def adapters(self) -> bool:
        """LoRA or QLoRA: a frozen base with trainable adapters."""
        return self.method != "full"
