"""DeepSpeed ZeRO JSON for the HF Trainer: the ``ZeroConfig`` dataclass and ``build_ds_config``.

Pure: stdlib only, output is a JSON-serialisable dict. Example: ``dojo config --stage 3 --offload cpu``.

Sources: DeepSpeed 0.19.8 ``runtime/zero/config.py`` + ``offload_config.py`` (keys and defaults),
transformers 5.24 ``integrations/deepspeed.py`` (which ``"auto"`` values the Trainer fills, and how).
"""

from dataclasses import dataclass
from typing import Any

from dojo.errors import ConfigError
from dojo.zero.rules import offload_problems, param_device

STAGES = (0, 1, 2, 3)
DEVICES = ("none", "cpu", "nvme")
SIDES = ("hf", "ds")
PRECISIONS = ("bf16", "fp16", "fp32", "auto")

# DeepSpeed's own defaults (runtime/zero/config.py), written out so the file documents itself.
DS_BUCKET_DEFAULT = 500_000_000
"""allgather_bucket_size when not given (elements). Allocates nothing in current DeepSpeed."""
SUB_GROUP_SIZE = 1_000_000_000
"""ZeRO-3 optimizer-step tile (elements), DeepSpeed's default: the step's grad transient is
6 B x min(P/N, this) (stage3 _prepare_fp32_grad_for_sub_group: a bf16 flatten, then fp32)."""
SUB_GROUP_GPU = 100_000_000
"""dojo's tile when the optimizer steps on the GPU: a 0.6 GB transient instead of 6 GB, for ten
times as many (GPU-fast) optimizer calls. With offload DeepSpeed's 1e9 stays: the tile sizes the
pinned host buffers and the CPU Adam's work per call."""
MAX_LIVE_PARAMETERS = 1_000_000_000
"""ZeRO-3: gathered params kept alive (elements); ~2 GB of bf16, shared with max_reuse_distance."""
MAX_REUSE_DISTANCE = 1_000_000_000
"""ZeRO-3: a param reused within this many elements of the trace is not released."""
Z3_MAX_LEAF = 1_000_000_000
"""Largest module dojo makes a ZeRO-3 leaf (elements): DeepSpeed's own cap for leaves chosen by
stage3_module_granularity_threshold (parameter_offload.py Z3_MAX_LEAF_SIZE)."""
DS_LEAF_DEFAULTS = (
    "transformers.models.mixtral.modeling_mixtral.MixtralSparseMoeBlock",
    "transformers.models.qwen2_moe.modeling_qwen2_moe.Qwen2MoeSparseMoeBlock",
    "transformers.models.qwen3_moe.modeling_qwen3_moe.Qwen3MoeSparseMoeBlock",
)
"""DeepSpeed 0.19's leaf_module.classes default (leaf_module_config.py): a list given in the JSON
replaces it, so dojo's list repeats it."""
NVME_PARAM_BUFFER = 100_000_000
"""offload_param.buffer_size default (elements); raised to the largest param when known."""

# fp16 dynamic loss scaling as in the HF and DeepSpeed examples (loss_scale 0 = dynamic).
_FP16_SCALING = {
    "loss_scale": 0,
    "loss_scale_window": 1000,
    "initial_scale_power": 16,
    "hysteresis": 2,
    "min_loss_scale": 1,
}

# DeepSpeed async-IO defaults (runtime/swap_tensor/constants.py) for NVMe offload.
_AIO = {
    "block_size": 1_048_576,
    "queue_depth": 8,
    "intra_op_parallelism": 1,
    "single_submit": False,
    "overlap_events": True,
}


@dataclass(frozen=True)
class ZeroConfig:
    """What `dojo config` turns into a DeepSpeed JSON; every field mirrors one flag."""

    stage: int = 2
    """ZeRO stage 0-3 (--stage). 2 shards grads + optimizer states, the usual first choice."""
    offload: str = "none"
    """Optimizer-state offload device none|cpu|nvme (--offload); stages 1-3."""
    offload_param: str | None = None
    """Parameter offload (--offload-param, stage 3 only); None = follow `offload` at stage 3."""
    nvme_path: str | None = None
    """Folder on a fast local NVMe disk (--nvme-path); required when anything goes to nvme."""
    overlap_comm: bool = True
    """Overlap gradient reduction with backward (--overlap-comm). HF examples enable it; the
    cost is one extra reduce bucket at stages 1-2 (see explain), nothing extra at stage 3."""
    bucket_size: int | None = None
    """reduce/allgather bucket size in elements (--bucket-size); None = "auto" (hidden_size^2)."""
    optimizer: str = "hf"
    """Who builds the optimizer (--optimizer): hf = TrainingArguments.optim, ds = DeepSpeed AdamW."""
    scheduler: str = "hf"
    """Who builds the LR schedule (--scheduler): hf = lr_scheduler_type, ds = WarmupDecayLR."""
    precision: str = "auto"
    """bf16|fp16|auto (--precision); auto = TrainingArguments' --bf16/--fp16 decide."""
    hidden_size: int | None = None
    """Model hidden size (from --model) to resolve the "auto" buckets with the HF formulas."""
    largest_param: int | None = None
    """Largest parameter in elements (from --model: vocab x hidden). Sizes the NVMe param swap
    buffer: DeepSpeed asserts every swapped param fits in offload_param.buffer_size."""
    prefetch_bucket: int | None = None
    """ZeRO-3 stage3_prefetch_bucket_size (--prefetch-bucket-size); None = "auto" (0.9 hidden^2)."""
    leaf_modules: tuple[str, ...] = ()
    """ZeRO-3 leaf module classes (--z3-leaf): gathered whole, hooks on them only; () = none."""
    sub_group_size: int | None = None
    """ZeRO-3 optimizer-step tile (--sub-group-size); None = ``sub_group_size(offload)``."""
    overflow_check: bool = False
    """bf16.check_grad_overflow (--overflow-check): skip a step with inf/NaN gradients. Off:
    bf16 has no loss scale to adjust, and the test costs 2 reductions per gradient tensor and
    2 host syncs per step (stage_1_and_2.py has_overflow, is_invalid_grad_norm): on a
    host-bound LoRA step that is hundreds of small kernels."""

    @property
    def offload_param_device(self) -> str:
        """Resolved parameter offload: at stage 3 it follows `offload` unless set explicitly."""
        return param_device(self.stage, self.offload, self.offload_param)

    def problems(self) -> list[tuple[str, str]]:
        """Every problem as (message, hint), all collected so one error can list them."""
        out: list[tuple[str, str]] = []
        if self.stage not in STAGES:
            out.append((f"--stage {self.stage} is not a ZeRO stage", "choose --stage 0, 1, 2 or 3"))
        for flag, value in (("--offload", self.offload), ("--offload-param", self.offload_param)):
            if value is not None and value not in DEVICES:
                out.append(
                    (
                        f"{flag} {value!r} is not an offload device",
                        f"choose {flag} none, cpu or nvme",
                    )
                )
        for flag, value, choices in (
            ("--optimizer", self.optimizer, SIDES),
            ("--scheduler", self.scheduler, SIDES),
            ("--precision", self.precision, PRECISIONS),
        ):
            if value not in choices:
                out.append(
                    (f"{flag} {value!r} is not valid", f"choose {flag} {' or '.join(choices)}")
                )
        if out:  # the checks below assume valid choices
            return out
        out += offload_problems(self.stage, self.offload, self.offload_param, self.nvme_path)
        if self.bucket_size is not None and self.bucket_size <= 0:
            out.append(
                (
                    f"--bucket-size {self.bucket_size} must be a positive number of elements",
                    'e.g. --bucket-size 2e8, or leave it out for "auto" (hidden_size^2 at train time)',
                )
            )
        if self.hidden_size is not None and self.hidden_size <= 0:
            out.append(
                (
                    f"hidden size {self.hidden_size} must be positive",
                    "check the model's config.json",
                )
            )
        return out

    def validate(self) -> list[str]:
        """Problem messages (empty when the config is usable)."""
        return [msg for msg, _ in self.problems()]

    def check(self) -> None:
        """Raise one ConfigError naming every problem."""
        found = self.problems()
        if found:
            raise ConfigError("; ".join(m for m, _ in found), hint="; ".join(h for _, h in found))


def build_ds_config(cfg: ZeroConfig) -> dict[str, Any]:
    """The DeepSpeed JSON (as a dict) for `cfg`; HF Trainer "auto" wherever the Trainer fills it."""
    cfg.check()
    ds: dict[str, Any] = {
        # Filled by trainer_config_process from TrainingArguments (per_device_train_batch_size,
        # gradient_accumulation_steps, world size, max_grad_norm).
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto",
    }
    ds.update(_precision(cfg.precision, cfg.overflow_check))
    # DeepSpeed's throughput timer waits for the device at every forward and every step (its
    # default "synchronized": true), which empties the GPU's queue at each step's edge; unsynced
    # it times the host side only, and nothing dojo or the Trainer reports reads it.
    ds["timers"] = {"throughput": {"enabled": True, "synchronized": False}}
    if cfg.optimizer == "ds":
        # trainer_config_process fills lr, betas, eps, weight_decay from TrainingArguments.
        # DeepSpeed swaps in DeepSpeedCPUAdam itself when the optimizer is offloaded.
        params = {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}
        ds["optimizer"] = {"type": "AdamW", "params": params}
    if cfg.scheduler == "ds":
        # WarmupDecayLR = warmup then linear decay to 0, like the Trainer's default "linear".
        # warmup_min_lr is set to 0 and total_num_steps/warmup_num_steps at train time.
        params = {
            "warmup_min_lr": "auto",
            "warmup_max_lr": "auto",
            "warmup_num_steps": "auto",
            "total_num_steps": "auto",
        }
        ds["scheduler"] = {"type": "WarmupDecayLR", "params": params}
    ds["zero_optimization"] = _zero_section(cfg)
    if "nvme" in (cfg.offload, cfg.offload_param_device):
        ds["aio"] = dict(_AIO)
    if cfg.optimizer == "hf" and cfg.offload != "none":
        # DeepSpeed engine._configure_optimizer raises ZeRORuntimeException for a client
        # (torch) optimizer with offload_optimizer unless this is false.
        ds["zero_force_ds_cpu_optimizer"] = False
    return ds


def hf_auto_reduce_bucket(hidden: int) -> int:
    """transformers trainer_config_finalize's "auto" reduce_bucket_size: hidden_size^2."""
    return hidden * hidden


def hf_auto_prefetch(hidden: int) -> int:
    """transformers trainer_config_finalize's "auto" stage3_prefetch_bucket_size: 0.9 x hidden^2
    (at least 1 element)."""
    return max(1, int(0.9 * hidden * hidden))


def sub_group_size(offload: str) -> int:
    """The ZeRO-3 tile dojo writes: SUB_GROUP_GPU, or DeepSpeed's own with optimizer offload."""
    return SUB_GROUP_SIZE if offload != "none" else SUB_GROUP_GPU


def _precision(precision: str, overflow_check: bool) -> dict[str, Any]:
    # The field came with DeepSpeed PR #6976 (default False); PR #8035 (2026) made it True after a
    # bf16 ZeRO-2 run whose inf gradient turned Adam's states to NaN. dojo writes False unless
    # --overflow-check: plain PyTorch/HF bf16 training never skips steps either, and dojo train
    # stops at the first logged loss that is not finite.
    check = {"check_grad_overflow": overflow_check}
    if precision == "bf16":
        return {"bf16": {"enabled": True, **check}, "fp16": {"enabled": False}}
    if precision == "fp16":
        return {"bf16": {"enabled": False}, "fp16": {"enabled": True, **_FP16_SCALING}}
    if precision == "fp32":
        return {"bf16": {"enabled": False}, "fp16": {"enabled": False}}
    # "auto": fill_match sets each from TrainingArguments --bf16 / --fp16.
    return {"bf16": {"enabled": "auto", **check}, "fp16": {"enabled": "auto", **_FP16_SCALING}}


def _offload_block(
    device: str, nvme_path: str | None, *, param: bool, largest: int | None = None
) -> dict[str, Any]:
    block: dict[str, Any] = {"device": device}
    if device == "nvme":
        block["nvme_path"] = nvme_path
    # Pinned host buffers make the host<->GPU copies async (DeepSpeed default True).
    block["pin_memory"] = True
    if device == "nvme":
        # DeepSpeed offload_config.py defaults: 5 x 1e8-element param swap buffers, 4 optimizer ones.
        if param:
            size = max(NVME_PARAM_BUFFER, largest or 0)
            block.update({"buffer_count": 5, "buffer_size": size, "max_in_cpu": 1_000_000_000})
        else:
            block.update({"buffer_count": 4, "fast_init": False})
    return block


def _auto_or(value: int | None) -> int | str:
    return "auto" if value is None else value


def _zero_section(cfg: ZeroConfig) -> dict[str, Any]:
    if cfg.stage == 0:
        return {"stage": 0}
    h = cfg.hidden_size
    reduce = (
        cfg.bucket_size
        if cfg.bucket_size is not None
        else (hf_auto_reduce_bucket(h) if h else None)
    )
    optim = _offload_block(cfg.offload, cfg.nvme_path, param=False)
    if cfg.stage in (1, 2):
        return {
            "stage": cfg.stage,
            "offload_optimizer": optim,
            "allgather_partitions": True,
            # HF "auto" does not cover allgather_bucket_size; it allocates nothing in current code.
            "allgather_bucket_size": cfg.bucket_size or DS_BUCKET_DEFAULT,
            "overlap_comm": cfg.overlap_comm,
            "reduce_scatter": True,
            "reduce_bucket_size": _auto_or(reduce),
            "contiguous_gradients": True,
            # Parallel grad copy to CPU across ranks; only helps with optimizer offload.
            "round_robin_gradients": cfg.offload != "none",
        }
    return {
        "stage": 3,
        "offload_optimizer": optim,
        "offload_param": _offload_block(
            cfg.offload_param_device, cfg.nvme_path, param=True, largest=cfg.largest_param
        ),
        "overlap_comm": cfg.overlap_comm,
        "contiguous_gradients": True,
        "sub_group_size": cfg.sub_group_size or sub_group_size(cfg.offload),
        # transformers trainer_config_finalize: reduce_bucket_size = h*h, prefetch = int(0.9*h*h),
        # persistence = 10*h. Only these three bucket keys are filled from the model; everything
        # else "auto" comes from TrainingArguments.
        "reduce_bucket_size": _auto_or(reduce),
        "stage3_prefetch_bucket_size": _auto_or(
            cfg.prefetch_bucket or (hf_auto_prefetch(h) if h else None)
        ),
        "stage3_param_persistence_threshold": _auto_or(10 * h if h else None),
        "stage3_max_live_parameters": MAX_LIVE_PARAMETERS,
        "stage3_max_reuse_distance": MAX_REUSE_DISTANCE,
        # Consolidate the 16-bit weights on save so Trainer.save_model writes a loadable model.
        "stage3_gather_16bit_weights_on_model_save": True,
        **_leaf(cfg.leaf_modules),
    }


def _leaf(classes: tuple[str, ...]) -> dict[str, Any]:
    if not classes:
        return {}
    return {"leaf_module": {"classes": [*classes, *DS_LEAF_DEFAULTS]}}


# Named presets shipped as templates/zero/<name>.json; tests regenerate each and compare.
# The offload presets use DeepSpeed's AdamW: with offload it becomes DeepSpeedCPUAdam, while a
# torch optimizer would need zero_force_ds_cpu_optimizer=false and step slowly on CPU.
PRESETS: dict[str, ZeroConfig] = {
    "zero0": ZeroConfig(stage=0),
    "zero1": ZeroConfig(stage=1),
    "zero2": ZeroConfig(stage=2),
    "zero3": ZeroConfig(stage=3),
    "zero2-offload": ZeroConfig(stage=2, offload="cpu", optimizer="ds"),
    "zero3-offload": ZeroConfig(stage=3, offload="cpu", optimizer="ds"),
    "zero3-offload-optimizer": ZeroConfig(
        stage=3, offload="cpu", offload_param="none", optimizer="ds"
    ),
}
