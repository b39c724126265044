"""DeepSpeed ZeRO JSON for the HF Trainer: ``build_ds_config`` from the run's ZeRO options.

Pure: stdlib only, output is a JSON-serialisable dict. Example: ``dojo config --stage 3 --offload cpu``.

Sources: DeepSpeed 0.19.8 ``runtime/zero/config.py`` + ``offload_config.py`` (keys and defaults),
transformers 5.24 ``integrations/deepspeed.py`` (which ``"auto"`` values the Trainer fills, and how).
"""

from typing import Any

from dojo.errors import ConfigError
from dojo.run.groups.zero import (
    DS_BUCKET,
    ZeroOptions,
    hf_auto_prefetch,
    hf_auto_reduce_bucket,
    sub_group_for,
    zero_problems,
)

PRECISIONS = ("bf16", "fp16", "fp32", "auto")

# DeepSpeed's own defaults (runtime/zero/config.py), written out so the file documents itself.
MAX_LIVE_PARAMETERS = 1_000_000_000
"""ZeRO-3: gathered params kept alive (elements); ~2 GB of bf16, shared with max_reuse_distance."""
MAX_REUSE_DISTANCE = 1_000_000_000
"""ZeRO-3: a param reused within this many elements of the trace is not released."""
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


def build_ds_config(
    cfg: ZeroOptions,
    *,
    precision: str = "auto",
    hidden_size: int | None = None,
    largest_param: int | None = None,
) -> dict[str, Any]:
    """The DeepSpeed JSON (as a dict) for the ZeRO options ``cfg``; HF Trainer "auto" wherever
    the Trainer fills it. ``precision`` "auto" lets TrainingArguments' --bf16/--fp16 decide;
    ``hidden_size`` (from --model) resolves the "auto" buckets with the HF formulas;
    ``largest_param`` (elements: vocab x hidden) sizes the NVMe parameter swap buffer, which
    DeepSpeed asserts every swapped parameter fits."""
    from dojo.run.schema import invalid

    if not cfg.deepspeed:
        raise ConfigError(
            "--zero none: a run without DeepSpeed has no DeepSpeed config",
            hint="use --zero 0, 1, 2 or 3 for a DeepSpeed JSON",
        )
    found = invalid(cfg) or zero_problems(cfg)
    if precision not in PRECISIONS:
        found.append((f"--precision {precision!r} is not valid", "choose bf16, fp16, fp32 or auto"))
    if found:
        raise ConfigError.of(found)
    ds: dict[str, Any] = {
        # Filled by trainer_config_process from TrainingArguments (per_device_train_batch_size,
        # gradient_accumulation_steps, world size, max_grad_norm).
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto",
    }
    ds.update(_precision(precision, cfg.overflow_check))
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
    ds["zero_optimization"] = _zero_section(cfg, hidden_size, largest_param)
    if "nvme" in (cfg.offload, cfg.param_device):
        ds["aio"] = dict(_AIO)
    if cfg.optimizer == "hf" and cfg.offload != "none":
        # DeepSpeed engine._configure_optimizer raises ZeRORuntimeException for a client
        # (torch) optimizer with offload_optimizer unless this is false.
        ds["zero_force_ds_cpu_optimizer"] = False
    return ds


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


def _auto_or(value: int | str | None) -> int | str:
    return "auto" if value is None else value


def _zero_section(cfg: ZeroOptions, h: int | None, largest: int | None) -> dict[str, Any]:
    if cfg.level == 0:
        return {"stage": 0}
    reduce = (
        cfg.bucket_size if cfg.bucket_size != "auto" else (hf_auto_reduce_bucket(h) if h else None)
    )
    optim = _offload_block(cfg.offload, cfg.nvme_path, param=False)
    if cfg.stage in (1, 2):
        return {
            "stage": cfg.stage,
            "offload_optimizer": optim,
            "allgather_partitions": True,
            # HF "auto" does not cover allgather_bucket_size; it allocates nothing in current code.
            "allgather_bucket_size": cfg.bucket_size if cfg.bucket_size != "auto" else DS_BUCKET,
            "overlap_comm": cfg.overlap,
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
            cfg.param_device, cfg.nvme_path, param=True, largest=largest
        ),
        "overlap_comm": cfg.overlap,
        "contiguous_gradients": True,
        "sub_group_size": cfg.sub_group_size
        if cfg.sub_group_size != "auto"
        else sub_group_for(cfg.offload),
        # transformers trainer_config_finalize: reduce_bucket_size = h*h, prefetch = int(0.9*h*h),
        # persistence = 10*h. Only these three bucket keys are filled from the model; everything
        # else "auto" comes from TrainingArguments.
        "reduce_bucket_size": _auto_or(reduce),
        "stage3_prefetch_bucket_size": _auto_or(
            cfg.prefetch_bucket_size
            if cfg.prefetch_bucket_size != "auto"
            else (hf_auto_prefetch(h) if h else None)
        ),
        "stage3_param_persistence_threshold": _auto_or(10 * h if h else None),
        "stage3_max_live_parameters": MAX_LIVE_PARAMETERS,
        "stage3_max_reuse_distance": MAX_REUSE_DISTANCE,
        # Consolidate the 16-bit weights on save so Trainer.save_model writes a loadable model.
        "stage3_gather_16bit_weights_on_model_save": True,
        **_leaf(cfg.leaf_classes),
    }


def _leaf(classes: tuple[str, ...]) -> dict[str, Any]:
    if not classes:
        return {}
    return {"leaf_module": {"classes": [*classes, *DS_LEAF_DEFAULTS]}}


# Named presets shipped as templates/zero/<name>.json; tests regenerate each and compare.
# The offload presets use DeepSpeed's AdamW: with offload it becomes DeepSpeedCPUAdam, while a
# torch optimizer would need zero_force_ds_cpu_optimizer=false and step slowly on CPU.
PRESETS: dict[str, ZeroOptions] = {
    "zero0": ZeroOptions(stage=0),
    "zero1": ZeroOptions(stage=1),
    "zero2": ZeroOptions(stage=2),
    "zero3": ZeroOptions(stage=3),
    "zero2-offload": ZeroOptions(stage=2, offload="cpu", optimizer="ds"),
    "zero3-offload": ZeroOptions(stage=3, offload="cpu", optimizer="ds"),
    "zero3-offload-optimizer": ZeroOptions(
        stage=3, offload="cpu", offload_param="none", optimizer="ds"
    ),
}
