"""The type DeepSpeed gives each config key that `dojo config --check` knows, and the check.

Pure: stdlib only (the command stays torch- and pydantic-free). Copied from DeepSpeed 0.19.8:
the pydantic models of runtime/zero/config.py, zero/offload_config.py and precision_config.py,
which validate in pydantic's lax mode (``"yes"`` is true, ``"5"`` and ``5.0`` are 5, ``5.5`` is
no whole number), and the readers of runtime/config.py for the top-level keys (a section that
must be an object, and the removed features DeepSpeed now refuses outright). The optimizer and
scheduler blocks, which DeepSpeed only uses at ``deepspeed.initialize``, are dojo.zero.blocks'.

tests/test_zero_shapes.py gives DeepSpeed itself and this module the same wrong shapes, key by
key, and requires the same verdict (the few places the lint is stricter are listed there).
"""

import math
import re
from dataclasses import dataclass
from typing import Any

from dojo.safe_load import shorten
from dojo.zero import blocks


@dataclass(frozen=True)
class Kind:
    """One key's type as DeepSpeed validates it."""

    type: str
    """bool | int | float | path | object | loss_scale | scale_int | strict_int | number | choice |
    zero (an object, or the deprecated true/false) | skip (checked elsewhere in dojo.zero.check)."""
    optional: bool = False
    """null is accepted (pydantic Optional[...], or a reader that treats null as absent)."""
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    fields: str | None = None
    """For an object: the name of its key table in TABLES (None: keys not checked here)."""
    choices: tuple[str, ...] = ()
    """For a choice: the accepted strings, compared lower-case."""
    empty_ok: bool = False
    """An object whose reader does ``if not value: defaults``: "", 0 and false pass too."""
    elsewhere: bool = False
    """dojo.zero.check judges the value, more strictly (element counts: a JSON number, below
    1e12); only null is refused here."""


BOOL = Kind("bool")
OPT_BOOL = Kind("bool", optional=True)
INT = Kind("int")
COUNT = Kind("int", ge=0)
OBJECT = Kind("object")
OPT_OBJECT = Kind("object", optional=True)
SKIP = Kind("skip")


def _same(kind: Kind, *names: str) -> dict[str, Kind]:
    return dict.fromkeys(names, kind)


# DeepSpeedZeroConfig. stage and the bucket/threshold counts are checked (more strictly) by
# dojo.zero.check; stage3_* aliases are accepted under both names (populate_by_name).
ZERO: dict[str, Kind] = {
    "stage": SKIP,
    "reduce_bucket_size": Kind("int", gt=0, elsewhere=True),
    "overlap_comm": OPT_BOOL,
    "offload_param": Kind("object", optional=True, fields="offload_param"),
    "offload_optimizer": Kind("object", optional=True, fields="offload_optimizer"),
    "zenflow": OPT_OBJECT,
    "leaf_module": OPT_OBJECT,  # its before-validator turns null into {}
    **_same(OPT_BOOL, "cpu_offload_param", "cpu_offload_use_pin_memory", "cpu_offload"),
    "zero_hpz_partition_size": COUNT,
    **_same(
        Kind("int", ge=0, elsewhere=True), "allgather_bucket_size", "sub_group_size",
        "prefetch_bucket_size", "stage3_prefetch_bucket_size",
        "param_persistence_threshold", "stage3_param_persistence_threshold",
        "model_persistence_threshold", "stage3_model_persistence_threshold",
        "max_live_parameters", "stage3_max_live_parameters",
        "max_reuse_distance", "stage3_max_reuse_distance",
    ),
    **_same(INT, "module_granularity_threshold", "stage3_module_granularity_threshold"),
    **_same(
        BOOL, "contiguous_gradients", "reduce_scatter", "use_multi_rank_bucket_allreduce",
        "allgather_partitions", "compute_grad_norm", "load_from_fp32_weights",
        "elastic_checkpoint", "gather_16bit_weights_on_model_save",
        "stage3_gather_16bit_weights_on_model_save", "use_all_reduce_for_fetch_params",
        "stage3_use_all_reduce_for_fetch_params", "allgather_sequential",
        "stage3_allgather_sequential", "stage3_gather_fp16_weights_on_model_save",
        "ignore_unused_parameters", "legacy_stage1", "round_robin_gradients",
        "parameter_alignment", "zero_quantized_weights", "zero_quantized_nontrainable_weights",
        "zero_quantized_gradients", "memory_efficient_linear", "pipeline_loading_checkpoint",
        "override_module_apply", "log_trace_cache_warnings", "enable_sanity_checks",
        "save_muon_momentum_buffer_in_memory",
    ),
}  # fmt: skip
OFFLOAD_PARAM: dict[str, Kind] = {
    "device": SKIP,  # none | cpu | nvme, checked by dojo.zero.check
    "nvme_path": Kind("path", optional=True),
    **_same(COUNT, "buffer_count", "buffer_size", "max_in_cpu"),
    "pin_memory": BOOL,
}
OFFLOAD_OPTIMIZER: dict[str, Kind] = {
    "device": SKIP,
    "nvme_path": Kind("path", optional=True),
    "buffer_count": COUNT,
    **_same(BOOL, "pin_memory", "pipeline_read", "pipeline_write", "fast_init", "super_offload"),
    **_same(Kind("float", ge=0, le=1), "ratio", "cpuadam_cores_perc"),
}
BF16: dict[str, Kind] = _same(
    BOOL, "enabled", "immediate_grad_update", "check_grad_overflow",
    "bf16_master_weights_and_grads", "bf16_optimizer_states",
)  # fmt: skip
FP16: dict[str, Kind] = {
    **_same(
        BOOL, "enabled", "auto_cast", "consecutive_hysteresis", "fp16_master_weights_and_grads"
    ),
    "loss_scale": Kind("loss_scale"),  # its own validator: a finite number >= 0, never a bool
    **_same(INT, "initial_scale_power", "hysteresis"),
    **_same(Kind("scale_int"), "loss_scale_window", "min_loss_scale"),  # whole, never a bool
}
_TOP_OBJECTS = (
    "activation_checkpointing", "autotuning", "checkpoint", "comet", "comms_logger", "compile",
    "csv_monitor", "data_efficiency", "data_types", "flops_profiler", "hybrid_engine", "pipeline",
    "tensor_parallel", "tensorboard", "torch_autocast", "wandb", "weight_quantization", "timers",
)  # fmt: skip
TOP: dict[str, Kind] = {
    **_same(OBJECT, *_TOP_OBJECTS),
    "optimizer": Kind("object", fields="optimizer"),
    "scheduler": Kind("object", fields="scheduler"),
    "zero_optimization": Kind("zero", fields="zero_optimization"),
    "fp16": Kind("object", fields="fp16"),
    "bf16": Kind("object", optional=True, fields="bf16"),  # null: DeepSpeed reads "bfloat16"
    "aio": OPT_OBJECT,  # its keys are read with get_scalar_param: any value passes
    "expert_parallel": Kind("object", optional=True, empty_ok=True),
    "gradient_allreduce_op": Kind("choice", choices=("mean", "sum")),
    **_same(
        Kind("choice", optional=True, choices=("fp32", "fp16", "bf16")),
        "communication_data_type",
        "seq_parallel_communication_data_type",
    ),
    "wall_clock_breakdown": Kind("strict_int"),  # or-ed with a bool: an int or true/false
    "vocabulary_size": Kind("number", optional=True),  # taken % 8
}
REMOVED = frozenset({
    "amp", "compression_training", "curriculum_learning", "eigenvalue", "elasticity",
    "graph_harvesting", "nebula", "progressive_layer_drop", "quantize_training",
    "sparse_attention", "sparse_gradients",
})  # fmt: skip
"""Top-level keys DeepSpeed 0.19.8 refuses whatever their value: the features were removed."""
TABLES: dict[str, dict[str, Kind]] = {
    "zero_optimization": ZERO,
    "offload_param": OFFLOAD_PARAM,
    "offload_optimizer": OFFLOAD_OPTIMIZER,
    "bf16": BF16,
    "fp16": FP16,
}

_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})
_INT_TEXT = re.compile(r"\s*[-+]?[0-9][0-9_]*(\.0*)?\s*", re.ASCII)
_REFUSED = object()


def as_bool(value: Any) -> Any:
    """pydantic's lax bool: true/false, 0/1, and the strings yes/no, on/off, t/f, ... ."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
        return value.lower() in _TRUE
    return _REFUSED


def as_int(value: Any) -> Any:
    """pydantic's lax int: ints (and bools), integral floats, and strings of digits."""
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) < 2**63 else _REFUSED
    if isinstance(value, str) and len(value) < 100 and _INT_TEXT.fullmatch(value):
        return int(value.strip().split(".")[0])
    return _REFUSED


def as_float(value: Any) -> Any:
    """pydantic's lax float: numbers (and bools) and strings Python reads as a float."""
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:  # an int past 1.8e308
            return _REFUSED
    if isinstance(value, str) and value.isascii() and len(value) < 100:
        try:
            return float(value)
        except ValueError:
            return _REFUSED
    return _REFUSED


def problems(ds: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(level, dotted key, message) for every value of the wrong type or range, where DeepSpeed
    itself would refuse it (level "error"), or read it other than written ("warning")."""
    out: list[tuple[str, str, str]] = []
    for key, value in ds.items():
        if key in REMOVED:
            out.append(("error", key, f"{key}: DeepSpeed 0.19.8 refuses the config with this "
                        "key whatever its value (the feature was removed); drop it"))  # fmt: skip
        elif key in TOP:
            _value(TOP[key], key, key, value, out)
    zero = ds.get("zero_optimization")
    if isinstance(zero, dict):
        _zero_rules(zero, out)
    _config_asserts(ds, out)
    fp16 = ds.get("fp16")
    if isinstance(fp16, dict):
        _fp16_rules(fp16, out)
    out.extend(blocks.problems(ds))
    return out


def _value(kind: Kind, key: str, where: str, value: Any, out: list[tuple[str, str, str]]) -> None:
    """One key's value against its Kind; recurses into objects with a table."""
    if kind.type == "skip" or value == "auto":  # "auto": dojo.zero.check says who fills it
        return
    shown = shorten(value)
    if value is None:
        if not kind.optional:
            out.append(("error", where, f"{key} is null; DeepSpeed needs a value here (or "
                        "leave the key out for its default)"))  # fmt: skip
        return
    if kind.type in ("object", "zero"):
        if kind.empty_ok and not value:
            return
        if isinstance(value, dict):
            table = TABLES.get(kind.fields or "")
            for k, v in value.items():
                if table is not None and k in table:
                    _value(table[k], k, f"{where}.{k}", v, out)
        elif kind.type == "zero" and isinstance(value, bool):
            out.append(("warning", where, f"{key} {value}: the true/false form is deprecated; "
                        'DeepSpeed reads it as stage 1/0: write {"stage": 1}'))  # fmt: skip
        else:
            out.append(("error", where, f"{key} {shown} is {type(value).__name__}, not an "
                        "object ({...}); DeepSpeed refuses it"))  # fmt: skip
        return
    if kind.elsewhere:
        return
    msg = _scalar(kind, key, value, shown)
    if msg is not None:
        out.append(("error", where, msg))
    elif isinstance(value, str) and kind.type in ("bool", "int", "float"):
        out.append(("warning", where, f"{key} {shown} is a string; DeepSpeed converts it: "
                    "write the value without quotes"))  # fmt: skip


def _scalar(kind: Kind, key: str, value: Any, shown: str) -> str | None:
    """Why ``value`` is refused for a scalar Kind, or None."""
    t = kind.type
    if t == "bool":
        return f"{key} {shown} is not true or false" if as_bool(value) is _REFUSED else None
    if t == "path":
        return None if isinstance(value, str) else f"{key} {shown} is not a path (a string)"
    if t == "choice":
        if isinstance(value, str) and value.lower() in kind.choices:
            return None
        return f"{key} {shown} is not one of {', '.join(kind.choices)}"
    if t == "strict_int":
        return (
            None
            if isinstance(value, int)
            else f"{key} {shown} is not true, false or a whole number"
        )
    if t == "number":  # read as `value and value % 8`: an empty value passes too
        ok = isinstance(value, (int, float)) or not value
        return None if ok else f"{key} {shown} is not a number"
    if t == "loss_scale":
        scale = None if isinstance(value, bool) else _plain_float(value)
        if scale is None or not math.isfinite(scale):
            return f"{key} {shown} is not a finite number"
        return f"{key} {shown} must be 0 (dynamic) or more" if scale < 0 else None
    if t == "scale_int":  # its validator: no bool, no inf/nan, int(value) must work
        if isinstance(value, bool) or _int_call(value) is _REFUSED:
            return f"{key} {shown} is not a whole number"
        number = as_int(value)
    elif t == "int":
        number = as_int(value)
    else:
        number = as_float(value)
    if number is _REFUSED:
        what = "a whole number" if t in ("int", "scale_int") else "a number"
        return f"{key} {shown} is not {what}"
    return _bounds(kind, key, shown, number)


def _int_call(value: Any) -> Any:
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return _REFUSED


def _plain_float(value: Any) -> float | None:
    # float(v), as fp16's validators call it: numbers and numeric strings; None if it fails.
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return None


def _bounds(kind: Kind, key: str, shown: str, number: float) -> str | None:
    if kind.gt is not None and not number > kind.gt:
        return f"{key} {shown} must be more than {kind.gt:g}"
    if kind.ge is not None and not number >= kind.ge:
        return f"{key} {shown} must be {kind.ge:g} or more"
    if kind.le is not None and not number <= kind.le:
        return f"{key} {shown} must be {kind.ge or 0:g}..{kind.le:g}"
    return None


def _zero_rules(zero: dict[str, Any], out: list[tuple[str, str, str]]) -> None:
    """DeepSpeedZeroConfig's model validators."""
    stage = as_int(zero.get("stage", 0))
    grad_norm = zero.get("compute_grad_norm", True)
    if as_bool(grad_norm) is False and stage not in (1, 2):
        out.append(("error", "zero_optimization.compute_grad_norm", "compute_grad_norm false "
                    f"works only at stage 1 or 2 (stage {shorten(zero.get('stage', 0))})"))  # fmt: skip
    opt = zero.get("offload_optimizer")
    ratio = as_float(opt.get("ratio", 1.0)) if isinstance(opt, dict) else 1.0
    if ratio is not _REFUSED and ratio < 1.0 and stage != 3:
        out.append(("error", "zero_optimization.offload_optimizer.ratio", f"ratio {ratio:g}: "
                    "partial optimizer offload works only at stage 3"))  # fmt: skip
    for old, new in (
        ("cpu_offload_param", "offload_param"),
        ("cpu_offload", "offload_optimizer"),
        ("stage3_gather_fp16_weights_on_model_save", "gather_16bit_weights_on_model_save"),
    ):
        both = [k for k in (new, f"stage3_{new}") if k in zero]
        if old in zero and both:
            out.append(("error", f"zero_optimization.{old}", f"{old} is the deprecated name of "
                        f"{both[0]}; DeepSpeed refuses both together: keep {both[0]}"))  # fmt: skip


def _config_asserts(ds: dict[str, Any], out: list[tuple[str, str, str]]) -> None:
    """DeepSpeedConfig._do_error_check: master weights need ZeRO 1-3; sum all-reduce not at 3."""
    zero = ds.get("zero_optimization")
    stage = as_int(zero.get("stage", 0)) if isinstance(zero, dict) else as_int(bool(zero))
    op = ds.get("gradient_allreduce_op")
    if isinstance(op, str) and op.lower() == "sum":
        if stage == 3:
            out.append(("error", "gradient_allreduce_op", "gradient_allreduce_op 'sum' does "
                        "not work with ZeRO stage 3; use mean"))  # fmt: skip
        elif isinstance(zero, dict) and zero.get("zenflow") is not None:
            out.append(("error", "gradient_allreduce_op", "gradient_allreduce_op 'sum' does "
                        "not work with zenflow; use mean"))  # fmt: skip

    def on(section: str, key: str) -> bool:
        block = ds.get(section)
        return isinstance(block, dict) and as_bool(block.get(key, False)) is True

    for section, key in (
        ("fp16", "fp16_master_weights_and_grads"),
        ("bf16", "bf16_master_weights_and_grads"),
        ("bf16", "bf16_optimizer_states"),
    ):
        if on(section, key) and stage not in (1, 2, 3):
            shown = shorten(zero.get("stage", 0) if isinstance(zero, dict) else zero)
            out.append(("error", f"{section}.{key}", f"{key} needs ZeRO stage 1, 2 or 3 "
                        f"(zero_optimization.stage is {shown})"))  # fmt: skip
    if on("bf16", "bf16_optimizer_states") and not on("bf16", "bf16_master_weights_and_grads"):
        out.append(("error", "bf16.bf16_optimizer_states", "bf16_optimizer_states needs "
                    "bf16_master_weights_and_grads true"))  # fmt: skip


def _fp16_rules(fp16: dict[str, Any], out: list[tuple[str, str, str]]) -> None:
    """DeepSpeedFP16Config's model validator: dynamic loss scaling needs positive settings."""
    enabled = as_bool(fp16.get("enabled", False))
    scale = _plain_float(fp16.get("loss_scale", 0))
    if enabled is not True or scale != 0:
        return
    for key, default in (("loss_scale_window", 1000), ("min_loss_scale", 1)):
        value = as_int(fp16.get(key, default))
        if value is not _REFUSED and value <= 0:
            out.append(("error", f"fp16.{key}", f"{key} {value} must be more than 0 with "
                        "dynamic loss scaling (enabled, loss_scale 0)"))  # fmt: skip
