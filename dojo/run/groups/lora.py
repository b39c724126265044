"""LoRA and QLoRA adapters (PEFT's LoraConfig)."""

import dataclasses
from dataclasses import dataclass
from typing import Any

from dojo.run.field import PLAN, opt

DEFAULT_DROPOUT = 0.05
"""--lora-dropout's default."""


@dataclass(frozen=True)
class LoraOptions:
    lora_r: int = opt(
        16, "LoRA rank", "PEFT's examples' rank: enough for instruction tuning",
        flags=("--lora-r", "--lora-rank"), lo=1, hi=65536, example="16", commands=PLAN,
    )  # fmt: skip
    lora_alpha: int = opt(
        32, "LoRA alpha", "scale alpha/r = 2, the PEFT examples' ratio", lo=1, hi=10**6,
        example="32",
    )  # fmt: skip
    lora_dropout: float = opt(
        DEFAULT_DROPOUT, "Dropout on the LoRA branch",
        "the LoRA paper's value for 7B-scale models; 0 where all-linear adapts fused MoE experts "
        "(PEFT allows none there)",
        lo=0.0, hi=0.99, example="0.05", commands=PLAN,
    )  # fmt: skip
    lora_targets: str = opt(
        "all-linear",
        "Comma-separated module names, or all-linear (every linear layer but the head)",
        "the QLoRA paper: adapting every linear layer matches full fine-tuning best",
        example="q_proj,v_proj",
        commands=PLAN,
    )
    dora: bool = opt(
        False,
        "DoRA: weight-decomposed LoRA (PEFT use_dora), a magnitude vector per target",
        commands=PLAN,
    )
    rslora: bool = opt(False, "rsLoRA: scale alpha/sqrt(r) instead of alpha/r (PEFT use_rslora)")
    modules_to_save: tuple[str, ...] = opt(
        (),
        "Comma-separated modules trained in full and saved beside the adapter (PEFT "
        "modules_to_save)",
        example="embed_tokens,lm_head",
        metavar="NAME[,NAME]",
        commands=PLAN,
    )
    merge: bool = opt(False, "Also write base + adapter merged weights to OUTPUT/merged")

    @property
    def target_names(self) -> tuple[str, ...] | None:
        """--lora-targets as module names; None = all-linear (every linear layer but the head)."""
        return target_names(self.lora_targets)


def target_names(lora_targets: str) -> tuple[str, ...] | None:
    if lora_targets == "all-linear":
        return None
    return tuple(t.strip() for t in lora_targets.split(",") if t.strip())


def names(items: tuple[str, ...]) -> tuple[str, ...]:
    """--modules-to-save a,b --modules-to-save c -> (a, b, c)."""
    return tuple(t.strip() for item in items for t in item.split(",") if t.strip())


def fused_expert_adapters(lora: LoraOptions, spec: Any) -> bool:
    """all-linear on a model whose fused experts PEFT adapts (ParamWrapper): PEFT refuses any
    dropout there ("lora.ParamWrapper does not work with lora_dropout != 0"), and LoraConfig has
    one dropout for every adapter."""
    return spec is not None and lora.target_names is None and bool(spec.lora_adapts_experts)


def expert_dropout_problem(
    lora: LoraOptions, spec: Any, adapters: bool, given: set[str]
) -> tuple[str, str] | None:
    """A dropout the user chose, on adapters PEFT cannot give one."""
    chosen = "lora_dropout" in given or lora.lora_dropout != DEFAULT_DROPOUT
    if not adapters or not fused_expert_adapters(lora, spec) or not lora.lora_dropout or not chosen:
        return None
    return (f"--lora-dropout {lora.lora_dropout}: all-linear puts adapters on {spec.model_type}'s "
            "fused experts, which PEFT trains without dropout",
            "use --lora-dropout 0, or name the layers to adapt, e.g. --lora-targets "
            "q_proj,k_proj,v_proj,o_proj")  # fmt: skip


def targets_problem(lora: LoraOptions, spec: Any, adapters: bool) -> tuple[str, str] | None:
    """--lora-targets naming no linear layer of the known model: PEFT would find nothing to
    adapt (and the estimate no adapter to count)."""
    names = lora.target_names
    if not adapters or spec is None or not names or spec.lora_params(lora.lora_r, names):
        return None
    linears = dict.fromkeys(n for _, _, lin in spec.layer_kinds() for n, *_ in lin)
    return (f"--lora-targets {lora.lora_targets}: matches no linear layer of this "
            f"{spec.model_type} model",
            f"its linear layers are {','.join(linears)}; name some of them, or use all-linear")  # fmt: skip


def resolve_lora(lora: LoraOptions, spec: Any, adapters: bool, said: list[str]) -> LoraOptions:
    out = dataclasses.replace(lora, modules_to_save=names(lora.modules_to_save))
    if adapters and lora.lora_dropout and fused_expert_adapters(lora, spec):
        said.append(f"lora dropout 0: all-linear adapts {spec.model_type}'s fused experts, "
                    "which PEFT trains without dropout; --lora-targets NAMES adapts named "
                    "linear layers only, with dropout")  # fmt: skip
        out = dataclasses.replace(out, lora_dropout=0.0)
    return out


ADAPTER_SHAPE = ("lora_r", "lora_alpha", "lora_dropout", "lora_targets")
"""The options that shape LoRA adapters: a full fine-tune has none to shape."""


def lora_problems(
    lora: LoraOptions, full: bool, given: set[str] | frozenset[str] = frozenset()
) -> list[tuple[str, str]]:
    """(message, hint) for the LoRA options that contradict the run. With --method full, an
    adapter option the user set (``given``) to another value than its default would be dropped
    unsaid; its default (a preset or a --print-config file lists every option) is no request,
    and neither is --lora-dropout 0 (no dropout: what a full run has; sweeps over full and LoRA
    runs pass it to both)."""
    out: list[tuple[str, str]] = []
    if full:
        for f in dataclasses.fields(LoraOptions):
            value = getattr(lora, f.name)
            idle = (f.default, 0.0) if f.name == "lora_dropout" else (f.default,)
            if f.name in ADAPTER_SHAPE and f.name in given and value not in idle:
                flag = (f.metadata["flags"] or ("--" + f.name.replace("_", "-"),))[0]
                out.append((f"{flag} {value} applies to --method lora or qlora only",
                            f"drop {flag}, or use --method lora"))  # fmt: skip
        for flag, on in (("--dora", lora.dora), ("--rslora", lora.rslora),
                         ("--modules-to-save", bool(lora.modules_to_save)),
                         ("--merge", lora.merge)):  # fmt: skip
            if on:
                why = ("full fine-tuning already saves the whole model: drop --merge"
                       if flag == "--merge" else f"drop {flag}, or use --method lora")  # fmt: skip
                out.append((f"{flag} applies to --method lora or qlora only", why))
    if lora.modules_to_save and not names(lora.modules_to_save):
        out.append((f"--modules-to-save {','.join(lora.modules_to_save)!r}: no module name",
                    "e.g. --modules-to-save embed_tokens,lm_head"))  # fmt: skip
    if target_names(lora.lora_targets) == ():
        out.append((f"--lora-targets {lora.lora_targets!r}: no module name",
                    "e.g. --lora-targets q_proj,v_proj, or all-linear"))  # fmt: skip
    return out
