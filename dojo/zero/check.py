"""`dojo config --check FILE`: lint an existing DeepSpeed JSON before a run finds the problem.

Pure: stdlib only. Example: ``dojo config --check ds_config.json``.

Key sets are copied from DeepSpeed 0.19.8's pydantic models (runtime/zero/config.py,
offload_config.py, precision_config.py) and runtime/config.py; tests/test_zero_deepspeed.py
compares them with the installed DeepSpeed so drift shows up as a failing test. The type of
each known key's value is dojo.zero.shapes' (checked against DeepSpeed by tests/test_zero_shapes.py).
"""

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dojo.errors import ConfigError
from dojo.safe_load import clip, shorten
from dojo.zero.blocks import TORCH_SCHEDULERS
from dojo.zero.explain import precedence_warnings
from dojo.zero.shapes import problems


def _keys(words: str) -> frozenset[str]:
    return frozenset(words.split())


# runtime/config.py reads these top-level keys (and ignores anything else silently, hence the lint).
TOP_KEYS = _keys(
    "train_batch_size train_micro_batch_size_per_gpu gradient_accumulation_steps gradient_clipping "
    "steps_per_print wall_clock_breakdown dump_state memory_breakdown prescale_gradients "
    "gradient_predivide_factor sparse_gradients disable_allgather dataloader_drop_last "
    "communication_data_type seq_parallel_communication_data_type data_types gradient_allreduce_op "
    "fp16 bf16 amp torch_autocast optimizer scheduler zero_optimization zero_allow_untested_optimizer "
    "zero_force_ds_cpu_optimizer aio activation_checkpointing flops_profiler tensorboard wandb "
    "csv_monitor comet comms_logger checkpoint elasticity autotuning compression_training "
    "data_efficiency curriculum_learning sparse_attention pipeline progressive_layer_drop eigenvalue "
    "quantize_training mics_shard_size mics_hierarchical_params_gather graph_harvesting compile "
    "hybrid_engine nebula weight_quantization tensor_parallel sequence_parallel_size timers "
    "disable_python_gc expert_parallel "
    "log_level vocabulary_size"
)
# DeepSpeedZeroConfig fields; stage3_* aliases are accepted under both names (populate_by_name).
ZERO_KEYS = _keys(
    "stage contiguous_gradients reduce_scatter reduce_bucket_size use_multi_rank_bucket_allreduce "
    "allgather_partitions allgather_bucket_size overlap_comm compute_grad_norm load_from_fp32_weights "
    "elastic_checkpoint offload_param offload_optimizer zenflow sub_group_size cpu_offload_param "
    "cpu_offload_use_pin_memory cpu_offload stage3_prefetch_bucket_size prefetch_bucket_size "
    "stage3_param_persistence_threshold param_persistence_threshold "
    "stage3_model_persistence_threshold model_persistence_threshold stage3_max_live_parameters "
    "max_live_parameters stage3_max_reuse_distance max_reuse_distance "
    "stage3_gather_16bit_weights_on_model_save gather_16bit_weights_on_model_save "
    "stage3_module_granularity_threshold module_granularity_threshold "
    "stage3_use_all_reduce_for_fetch_params use_all_reduce_for_fetch_params "
    "stage3_allgather_sequential allgather_sequential stage3_gather_fp16_weights_on_model_save "
    "ignore_unused_parameters legacy_stage1 round_robin_gradients parameter_alignment "
    "zero_hpz_partition_size zero_quantized_weights zero_quantized_nontrainable_weights "
    "zero_quantized_gradients memory_efficient_linear pipeline_loading_checkpoint "
    "override_module_apply log_trace_cache_warnings enable_sanity_checks "
    "save_muon_momentum_buffer_in_memory leaf_module"
)
OFFLOAD_PARAM_KEYS = _keys("device nvme_path buffer_count buffer_size max_in_cpu pin_memory")
OFFLOAD_OPTIMIZER_KEYS = _keys(
    "device nvme_path buffer_count pin_memory pipeline_read pipeline_write fast_init ratio "
    "super_offload cpuadam_cores_perc"
)
BF16_KEYS = _keys(
    "enabled immediate_grad_update check_grad_overflow bf16_master_weights_and_grads "
    "bf16_optimizer_states"
)
FP16_KEYS = _keys(
    "enabled auto_cast loss_scale initial_scale_power loss_scale_window hysteresis "
    "consecutive_hysteresis min_loss_scale fp16_master_weights_and_grads"
)
AIO_KEYS = _keys("block_size queue_depth intra_op_parallelism single_submit overlap_events use_gds")
BLOCK_KEYS = frozenset({"type", "params"})
SCHEDULERS = ("WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle", "LRRangeTest")
# DEEPSPEED_OPTIMIZERS (compared lower-case); other names fall back to torch.optim.
OPTIMIZERS = ("Adam", "AdamW", "Lamb", "Lion", "MuAdam", "MuAdamW", "MuSGD", "Muon")

# Keys whose "auto" the HF Trainer fills (integrations/deepspeed.py trainer_config_process/finalize).
HF_AUTO = frozenset(
    {
        "train_batch_size",
        "train_micro_batch_size_per_gpu",
        "gradient_accumulation_steps",
        "gradient_clipping",
        "fp16.enabled",
        "bf16.enabled",
        "optimizer.params.lr",
        "optimizer.params.betas",
        "optimizer.params.eps",
        "optimizer.params.weight_decay",
        "scheduler.params.warmup_min_lr",
        "scheduler.params.warmup_max_lr",
        "scheduler.params.warmup_num_steps",
        "scheduler.params.total_num_steps",
        "zero_optimization.reduce_bucket_size",
        "zero_optimization.stage3_prefetch_bucket_size",
        "zero_optimization.stage3_param_persistence_threshold",
    }
)
_SCHEMA = {
    "": TOP_KEYS,
    "zero_optimization": ZERO_KEYS,
    "zero_optimization.offload_param": OFFLOAD_PARAM_KEYS,
    "zero_optimization.offload_optimizer": OFFLOAD_OPTIMIZER_KEYS,
    "bf16": BF16_KEYS,
    "fp16": FP16_KEYS,
    "aio": AIO_KEYS,
    "optimizer": BLOCK_KEYS,
    "scheduler": BLOCK_KEYS,
}
# Element counts DeepSpeed allocates buffers of: positive, and bounded. 1e12 elements is 2 TB in
# bf16, more than any GPU or host holds, so a larger value is a typo (1e30), never a setting.
_BUCKETS = (
    "reduce_bucket_size",
    "allgather_bucket_size",
    "sub_group_size",
    "stage3_prefetch_bucket_size",
    "prefetch_bucket_size",
    "stage3_max_live_parameters",
    "max_live_parameters",
)
MAX_BUCKET = 10**12
# Element-count thresholds: 0 is meaningful; DeepSpeed's own default for the model one is
# sys.maxsize, so only the sign and the type are checked.
_THRESHOLDS = (
    "stage3_param_persistence_threshold",
    "param_persistence_threshold",
    "stage3_model_persistence_threshold",
    "model_persistence_threshold",
    "stage3_max_reuse_distance",
    "max_reuse_distance",
)
# Top-level counts the HF Trainer checks against its own arguments ("auto" fills them).
_TOP_COUNTS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
_MAX_FILE_BYTES = 16 << 20  # a DeepSpeed config is a few KB


@dataclass(frozen=True)
class Finding:
    """One lint result: level is "error" (exit 1) or "warning"."""

    level: str
    where: str
    """Dotted key path, or "line:col" for JSON syntax errors."""
    message: str

    def format(self, path: str) -> str:
        return f"{path}:{self.where}: {self.level}: {self.message}"


def check_file(path: str | Path) -> list[Finding]:
    """Read and lint one DeepSpeed JSON file; raises ConfigError when it cannot be read or
    parsed safely (not a regular file, not UTF-8, duplicate keys, NaN, absurd nesting)."""
    from dojo.safe_load import LoadError, read_text

    what = f"--check {shorten(str(path), 300)}"  # paths are bounded by PATH_MAX anyway
    try:
        text = read_text(Path(path), what=what, max_bytes=_MAX_FILE_BYTES)
    except LoadError as e:
        raise ConfigError(e.message, hint="give the path of a DeepSpeed JSON file") from None
    return check_text(text, what=what)


def check_text(text: str, *, what: str = "the config") -> list[Finding]:
    """Lint DeepSpeed JSON text: syntax, unknown keys, impossible combinations, precedence.

    A syntax error is a finding (with its line:column); duplicate keys, NaN/Infinity and
    nesting past 64 levels raise ConfigError: DeepSpeed's json.load would take them silently."""
    from dojo.safe_load import LoadError, load_json

    try:
        data = load_json(text, what=what)
    except LoadError as e:
        if e.reason == "syntax":
            return [Finding("error", f"{e.line}:{e.column}", f"invalid JSON: {e.detail}")]
        raise ConfigError(e.message, hint=e.hint) from None
    if not isinstance(data, dict):
        return [Finding("error", "1:1", f"expected a JSON object, got {type(data).__name__}")]
    return check_config(data)


def check_config(ds: dict[str, Any]) -> list[Finding]:
    """Lint a parsed DeepSpeed config dict."""
    out: list[Finding] = []
    _unknown_keys(ds, "", out)
    unknown = {f.where for f in out}
    _autos(ds, "", out, skip=unknown)
    out.extend(Finding(level, where, msg) for level, where, msg in problems(ds))
    zero = ds.get("zero_optimization")
    zero = zero if isinstance(zero, dict) else {}
    _combos(ds, zero, out)
    out.extend(Finding("warning", where, msg) for where, msg in precedence_warnings(ds))
    return _first_error_per_key(out)


def _first_error_per_key(findings: list[Finding]) -> list[Finding]:
    """One error per key: a value of the wrong type is not also "not a number of elements"."""
    seen: set[str] = set()
    out = []
    for f in findings:
        if f.level == "error":
            if f.where in seen:
                continue
            seen.add(f.where)
        out.append(f)
    return out


def _unknown_keys(node: dict[str, Any], where: str, out: list[Finding]) -> None:
    known = _SCHEMA.get(where)
    if known is None:
        return
    for key, value in node.items():
        path = _join(where, key)
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.75)
            if close:
                out.append(
                    Finding(
                        "error", path, f"unknown key {shorten(key)}; did you mean {close[0]!r}?"
                    )
                )
            elif where:  # DeepSpeed's pydantic models forbid extra keys in these sections
                out.append(
                    Finding("error", path, f"unknown key {shorten(key)}; DeepSpeed rejects it")
                )
            else:  # top level: DeepSpeed ignores unknown keys silently
                out.append(
                    Finding("warning", path, f"unknown key {shorten(key)}; DeepSpeed ignores it")
                )
        elif isinstance(value, dict):
            _unknown_keys(value, path, out)
    for section, names in (("optimizer", OPTIMIZERS), ("scheduler", SCHEDULERS)):
        if where == section and isinstance(node.get("type"), str):
            _check_type(node["type"], section, names, out)


def _join(where: str, key: str) -> str:
    """Dotted path of a key, the key cut to 60 characters: a 1 MB key is not echoed whole."""
    return f"{where}.{clip(key)}" if where else clip(key)


def _check_type(name: str, section: str, names: tuple[str, ...], out: list[Finding]) -> None:
    # DeepSpeed lower-cases an optimizer's name; a scheduler's is an attribute name
    # (hasattr(lr_schedules, type), else torch.optim.lr_scheduler): its case counts.
    if section == "optimizer" and name.lower() in (n.lower() for n in names):
        return
    if section == "scheduler" and name in names + TORCH_SCHEDULERS:
        return
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(names)}"
    # An unknown optimizer name is looked up in torch.optim; an unknown scheduler is an error.
    level = "warning" if section == "optimizer" and not close else "error"
    out.append(Finding(level, f"{section}.type", f"unknown {section} type {shorten(name)}{hint}"))


def _autos(node: dict[str, Any], where: str, out: list[Finding], skip: set[str]) -> None:
    for key, value in node.items():
        path = _join(where, key)
        if path in skip:  # already reported as an unknown key
            continue
        if isinstance(value, dict):
            _autos(value, path, out, skip)
        elif value == "auto" and path not in HF_AUTO:
            out.append(
                Finding(
                    "error",
                    path,
                    '"auto" here is not filled by the HF Trainer, and DeepSpeed rejects it; give a value',
                )
            )


def _device(zero: dict[str, Any], key: str) -> tuple[str, Any]:
    block = zero.get(key)
    if not isinstance(block, dict):
        return "none", None
    return str(block.get("device", "none")), block.get("nvme_path")


def _combos(ds: dict[str, Any], zero: dict[str, Any], out: list[Finding]) -> None:
    stage = zero.get("stage", 0)
    if isinstance(stage, bool) or stage not in (0, 1, 2, 3):
        out.append(
            Finding(
                "error", "zero_optimization.stage", f"stage {shorten(stage)} is not 0, 1, 2 or 3"
            )
        )
        return
    opt_dev, opt_path = _device(zero, "offload_optimizer")
    par_dev, par_path = _device(zero, "offload_param")
    for key, dev, nvme in (
        ("offload_optimizer", opt_dev, opt_path),
        ("offload_param", par_dev, par_path),
    ):
        where = f"zero_optimization.{key}"
        if dev not in ("none", "cpu", "nvme"):
            out.append(
                Finding(
                    "error", f"{where}.device", f"device {shorten(dev)} is not none, cpu or nvme"
                )
            )
        if dev == "nvme" and not nvme:
            out.append(
                Finding(
                    "error",
                    f"{where}.nvme_path",
                    "device nvme needs an nvme_path (a local NVMe folder)",
                )
            )
    if par_dev != "none" and stage != 3:
        out.append(
            Finding(
                "error",
                "zero_optimization.offload_param",
                f"parameter offload ({par_dev}) needs stage 3; stage {stage} ignores it",
            )
        )
    if opt_dev != "none" and stage == 0:
        out.append(
            Finding(
                "error",
                "zero_optimization.offload_optimizer",
                "optimizer offload needs stage 1, 2 or 3",
            )
        )
    if _enabled(ds, "fp16") and _enabled(ds, "bf16"):
        out.append(
            Finding(
                "error", "fp16.enabled", 'fp16 and bf16 are both enabled; enable one (or "auto")'
            )
        )
    _counts(ds, zero, out)
    if stage in (1, 2):
        for key in sorted(k for k in zero if k.startswith("stage3_")):
            out.append(
                Finding(
                    "warning",
                    f"zero_optimization.{key}",
                    f"only used at stage 3; stage {stage} ignores it",
                )
            )
    if (
        opt_dev in ("cpu", "nvme")
        and "optimizer" not in ds
        and ds.get("zero_force_ds_cpu_optimizer", True)
    ):
        out.append(
            Finding(
                "warning",
                "zero_force_ds_cpu_optimizer",
                "optimizer offload with the Trainer's (torch) optimizer: DeepSpeed raises ZeRORuntimeException "
                'at init unless "zero_force_ds_cpu_optimizer": false; better add a DeepSpeed "optimizer" block',
            )
        )


def _counts(ds: dict[str, Any], zero: dict[str, Any], out: list[Finding]) -> None:
    """Element counts and batch sizes: whole numbers, positive, and (buckets) believable."""
    checks: list[tuple[str, Any, int, int | None]]
    checks = [(f"zero_optimization.{k}", zero.get(k), 1, MAX_BUCKET) for k in _BUCKETS]
    checks += [(f"zero_optimization.{k}", zero.get(k), 0, None) for k in _THRESHOLDS]
    checks += [(k, ds.get(k), 1, None) for k in _TOP_COUNTS]
    for where, value, low, high in checks:
        if value is None or value == "auto":  # absent, or "auto" (checked by _autos)
            continue
        key = where.rsplit(".", 1)[-1]
        shown = shorten(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            msg = f"{key} {shown} is not a number of elements"
        elif value != int(value):  # NaN/inf never get here: safe_load refuses them
            msg = f"{key} {shown} is not a whole number"
        elif value < low:
            msg = f"{key} {shown} must be {'positive' if low else 'zero or more'}"
        elif high is not None and value > high:
            msg = (
                f"{key} {shown} is more than {high:.0e} elements: no GPU or host holds a "
                "bucket that big (typo for 5e8?)"
            )
        else:
            continue
        out.append(Finding("error", where, msg))


def _enabled(ds: dict[str, Any], key: str) -> bool:
    block = ds.get(key)
    return isinstance(block, dict) and block.get("enabled") is True
