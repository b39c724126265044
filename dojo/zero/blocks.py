"""The optimizer and scheduler blocks of a DeepSpeed config, as ``deepspeed.initialize`` builds
them: the part of `dojo config --check` that DeepSpeedConfig does not validate. Pure: stdlib only.

DeepSpeedConfig only reads ``type`` (a string, or null for none) and ``params``; the engine then
calls torch's AdamW (or DeepSpeed's fused/CPU Adam, which check the same) with the optimizer's
params, and ``lr_schedules.<type>(optimizer, **params)`` (runtime/engine.py,
``_configure_basic_optimizer`` and ``_scheduler_from_config``, DeepSpeed 0.19.8).
tests/test_zero_shapes.py builds both from the same probes and compares.
"""

import math
from typing import Any

from dojo.safe_load import clip, shorten

ADAM_TYPES = frozenset({"adam", "adamw"})
"""Built from torch.optim.Adam(W)'s checks (lr, betas, eps, weight_decay) at initialize."""


def problems(ds: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(level, dotted key, message) for the optimizer and scheduler blocks."""
    out: list[tuple[str, str, str]] = []
    if isinstance(ds.get("optimizer"), dict):
        _optimizer(ds["optimizer"], out)
    if isinstance(ds.get("scheduler"), dict):
        groups = 1 if isinstance(ds.get("optimizer"), dict) else None
        _scheduler(ds["scheduler"], out, groups)
    return out


def _optimizer(block: dict[str, Any], out: list[tuple[str, str, str]]) -> None:
    kind = block.get("type")
    if kind is not None and not isinstance(kind, str):
        out.append(("error", "optimizer.type", f"type {shorten(kind)} is not a name (a string "
                    "such as \"AdamW\")"))  # fmt: skip
        return
    if kind is None:  # DeepSpeed then builds no optimizer and ignores params
        return
    params = block.get("params")
    if params is not None and not isinstance(params, dict):
        out.append(("error", "optimizer.params", f"params {shorten(params)} is "
                    f"{type(params).__name__}, not an object of the optimizer's arguments"))  # fmt: skip
        return
    params = params or {}
    lr = params.get("lr")
    if "lr" in params and lr != "auto" and not _number(lr, minimum=0):
        out.append(("error", "optimizer.params.lr", f"lr {shorten(lr)} is not a number 0 or more"))
    if kind.lower() not in ADAM_TYPES:
        return
    for key in ("eps", "weight_decay"):
        value = params.get(key)
        if key in params and value != "auto" and not _number(value, minimum=0):
            out.append(("error", f"optimizer.params.{key}",
                        f"{key} {shorten(value)} is not a number 0 or more"))  # fmt: skip
    betas = params.get("betas")
    if "betas" in params and betas != "auto" and not _betas(betas):
        out.append(("error", "optimizer.params.betas", f"betas {shorten(betas)} is not two "
                    "numbers in [0, 1), e.g. [0.9, 0.999]"))  # fmt: skip


def _number(value: Any, minimum: float) -> bool:
    # torch's optimizers compare with 0.0: a string fails, true is 1 (taken, as torch takes it).
    return isinstance(value, (int, float)) and value >= minimum


def _betas(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(b, (int, float)) and 0 <= b < 1 for b in value)
    )


# lr_schedules.<type>.__init__ arguments after the optimizer: (required, optional). DeepSpeed
# calls scheduler(optimizer, **params), so any other name is a TypeError at initialize.
_STEPS = ("warmup_num_steps", "warmup_type", "last_batch_iteration")
SCHEDULER_ARGS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "WarmupLR": ((), ("warmup_min_lr", "warmup_max_lr", *_STEPS)),
    "WarmupDecayLR": (("total_num_steps",), ("warmup_min_lr", "warmup_max_lr", *_STEPS)),
    "WarmupCosineLR": (
        ("total_num_steps",), ("warmup_min_ratio", "cos_min_ratio", *_STEPS),
    ),
    "OneCycle": (
        ("cycle_min_lr", "cycle_max_lr"),
        ("decay_lr_rate", "cycle_first_step_size", "cycle_second_step_size",
         "cycle_first_stair_count", "cycle_second_stair_count", "decay_step_size",
         "cycle_momentum", "cycle_min_mom", "cycle_max_mom", "decay_mom_rate",
         "last_batch_iteration"),
    ),
    "LRRangeTest": (
        (),
        ("lr_range_test_min_lr", "lr_range_test_step_size", "lr_range_test_step_rate",
         "lr_range_test_staircase", "last_batch_iteration"),
    ),
}  # fmt: skip
# torch.optim.lr_scheduler classes: DeepSpeed's fallback for a type of its own (case counts).
TORCH_SCHEDULERS = (
    "LambdaLR", "MultiplicativeLR", "StepLR", "MultiStepLR", "ConstantLR", "LinearLR",
    "ExponentialLR", "SequentialLR", "CosineAnnealingLR", "ChainedScheduler", "ReduceLROnPlateau",
    "CyclicLR", "CosineAnnealingWarmRestarts", "OneCycleLR", "PolynomialLR",
)  # fmt: skip
_LR_LISTS = ("warmup_min_lr", "warmup_max_lr")  # a number, or one per parameter group


def _scheduler(
    block: dict[str, Any], out: list[tuple[str, str, str]], optimizer_groups: int | None
) -> None:
    """``optimizer_groups``: 1 with a DeepSpeed optimizer block (the Trainer hands DeepSpeed
    one list of parameters), None when the Trainer builds the optimizer (its groups vary)."""
    kind = block.get("type")
    if kind is None:  # no scheduler
        return
    if not isinstance(kind, str):
        out.append(("error", "scheduler.type", f"type {shorten(kind)} is not a name (a string "
                    "such as \"WarmupLR\")"))  # fmt: skip
        return
    if kind not in SCHEDULER_ARGS and kind not in TORCH_SCHEDULERS:
        return  # an unknown name: dojo.zero.check says so, the params do not matter yet
    params = block.get("params")
    if not isinstance(params, dict):
        got = "is missing" if "params" not in block else f"{shorten(params)} is not an object"
        out.append(("error", "scheduler.params", f"params {got}: DeepSpeed calls the scheduler "
                    'with **params; give an object, e.g. "params": {}'))  # fmt: skip
        return
    if kind in SCHEDULER_ARGS:
        required, optional = SCHEDULER_ARGS[kind]
        for key in params:
            if key not in required + optional:
                out.append(("error", f"scheduler.params.{clip(key)}", f"{kind} takes no "
                            f"argument {shorten(key)}; it takes {', '.join(required + optional)}"))  # fmt: skip
        for key in required:
            if key not in params:
                out.append(("error", "scheduler.params", f"{kind} needs {key} in params"))
    else:  # a torch.optim.lr_scheduler class (its own arguments), or a name check.py refuses
        return
    for key in _LR_LISTS:
        if key in params:
            _lr_value(key, params[key], optimizer_groups, out)
    steps = params.get("warmup_num_steps", 1000)  # the Warmup* schedulers check it themselves
    if steps != "auto" and not (isinstance(steps, int) and steps > 0):
        out.append(("error", "scheduler.params.warmup_num_steps", f"warmup_num_steps "
                    f"{shorten(steps)} is not a whole number more than 0"))  # fmt: skip
    total = params.get("total_num_steps", 0)
    if total != "auto" and not _number(total, -math.inf):
        out.append(("error", "scheduler.params.total_num_steps", f"total_num_steps "
                    f"{shorten(total)} is not a number"))  # fmt: skip


def _lr_value(key: str, value: Any, groups: int | None, out: list[tuple[str, str, str]]) -> None:
    where = f"scheduler.params.{key}"
    if value == "auto" or (value is None and key == "warmup_max_lr"):  # None: the optimizer's lr
        return
    if not isinstance(value, list):
        if not _number(value, -math.inf):
            out.append(("error", where, f"{key} {shorten(value)} is not a number"))
        return
    if not all(_number(v, -math.inf) for v in value):
        out.append(("error", where, f"{key} {shorten(value)} is not a list of numbers"))
    elif groups is not None and len(value) != groups:
        out.append(("error", where, f"{key} lists {len(value)} values; the DeepSpeed optimizer "
                    f"has {groups} parameter group: give one number"))  # fmt: skip
    elif groups is None:
        out.append(("warning", where, f"{key} lists one value per parameter group of the "
                    "Trainer's optimizer; DeepSpeed refuses another count: one number is safer"))  # fmt: skip
