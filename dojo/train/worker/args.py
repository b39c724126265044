"""``TrainingArguments`` and Trainer callbacks from the Run (worker side: imports torch).

Every value here was decided by ``dojo.run.resolve``; this module only spells it in the
Trainer's words.
"""

import os
from pathlib import Path
from typing import Any

from transformers import TrainingArguments

from dojo.run.groups.kernels import (
    LIGER_SPARE_EXPERTS,
    liger_spares_experts,
    spare_experts_line,
)
from dojo.train.worker.callbacks import print0

LOGGING_RATIO = 0.01
"""--logging-steps auto without --max-steps: transformers reads a float < 1 as a fraction of the
total steps and rounds up, so runs under 100 steps log every step, longer ones ~100 times."""

LIGER_LOSS_ONLY = {
    "fused_linear_cross_entropy": True,
    **dict.fromkeys(
        ("cross_entropy", "rope", "rms_norm", "swiglu", "geglu", "layer_norm", "relu_squared"),
        False,
    ),
}
"""--liger loss: liger-kernel's per-model apply functions take the kwargs their signature names
(``_apply_liger_kernel_to_instance`` filters the rest), so every layer kernel any of them offers
is named off here; left unnamed, a kernel keeps its default (on)."""


def build_training_args(job: Any) -> TrainingArguments:
    """Before the model: with ZeRO-3 this arms zero.Init so weights load already sharded. A
    preference objective gets TRL's config class (a TrainingArguments) from the same values."""
    kwargs = training_kwargs(job)
    if job.run.objective.preference:
        from dojo.train.worker.objectives import build_config

        config: TrainingArguments = build_config(job.run, kwargs)
        return config
    return TrainingArguments(**kwargs)


def spare_fused_experts(
    args: TrainingArguments, run: Any, model_type: str, wrapped: Any = None
) -> None:
    """Before the Trainer applies Liger: Liger without its SwiGLU when LoRA adapts fused experts
    (dojo.run.groups.kernels.LIGER_SPARE_EXPERTS), known from the model type, or, once PEFT has
    wrapped the model (``wrapped``), from the wrappers PEFT put on 3-D expert parameters
    (``ParamWrapper``), for a model type dojo's table does not list."""
    if not run.kernels.liger_kernels or (args.liger_kernel_config or {}).get("swiglu") is False:
        return
    by_type = liger_spares_experts(True, run.model.adapters, run.lora.target_names, model_type)
    by_wrapper = (
        not by_type
        and wrapped is not None
        and any(type(m).__name__ == "ParamWrapper" for m in wrapped.modules())
    )
    if by_type or by_wrapper:
        args.liger_kernel_config = {**(args.liger_kernel_config or {}), **LIGER_SPARE_EXPERTS}
    if by_wrapper:  # resolve said it already for the types in the table
        print0(spare_experts_line(model_type))


def training_kwargs(job: Any) -> dict[str, Any]:
    """TrainingArguments' keyword arguments for the run (every value decided by resolve)."""
    run = job.run
    prec = run.kernels.precision
    save = run.output.save_steps > 0
    os.environ.setdefault("TENSORBOARD_LOGGING_DIR", str(Path(job.run_dir) / "tensorboard"))
    compile_ = bool(run.kernels.compiled)
    if compile_:
        # accelerate then compiles each repeated block in place (compile_regions_deepspeed on the
        # engine's module): one Inductor compile shared by all layers, DeepSpeed's hooks kept.
        os.environ["ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION"] = "1"
    # transformers 5 reads warmup_steps < 1 as a fraction of the total steps (warmup_ratio's
    # replacement); resolve keeps the ratio at most 0.5 and the two options exclusive.
    logging = run.output.logging_steps
    warmup: float = (
        run.loop.warmup_ratio if run.loop.warmup_ratio is not None else run.loop.warmup_steps
    )
    return dict(
        output_dir=job.run_dir,
        per_device_train_batch_size=run.loop.micro_batch,
        per_device_eval_batch_size=run.loop.micro_batch,
        gradient_accumulation_steps=run.loop.grad_accum,
        learning_rate=run.loop.lr,
        num_train_epochs=run.loop.epochs,
        max_steps=run.loop.max_steps if run.loop.max_steps is not None else -1,
        warmup_steps=warmup,
        lr_scheduler_type=run.loop.lr_scheduler,
        weight_decay=run.loop.weight_decay,
        max_grad_norm=run.loop.max_grad_norm,
        neftune_noise_alpha=run.loop.neftune_alpha,
        optim=run.loop.hf_optim,  # with --optimizer ds the JSON's block wins; this is never built
        bf16=prec == "bf16",
        fp16=prec == "fp16",
        gradient_checkpointing=run.kernels.grad_ckpt,
        # Reentrant checkpointing (transformers' own default when unset): non-reentrant's
        # saved-tensor hooks cost host time on every saved tensor, and small-model steps are
        # host-bound (H200, 1B QLoRA ZeRO-2: +19% tokens/s, docs/benchmarks.md). Its
        # one need, an input that requires grad, apply_lora / prepare_model_for_kbit_training
        # meet with enable_input_require_grads.
        gradient_checkpointing_kwargs={"use_reentrant": True} if run.kernels.grad_ckpt else None,
        logging_steps=logging if logging != "auto" else LOGGING_RATIO,
        save_strategy="steps" if save else "no",
        save_steps=run.output.save_steps if save else 500,
        save_total_limit=run.output.save_total_limit,
        **eval_args(run),
        seed=run.loop.seed,
        data_seed=run.loop.seed,
        report_to=run.output.report_to,
        disable_tqdm=True,  # dojo's own progress (rich bar / plain lines) on rank 0
        deepspeed=job.ds_config,  # None for --zero none: the Trainer's own loop, DDP across ranks
        # Every trainable parameter takes part in every forward (dojo's runs: the whole model
        # or its adapters), so DDP need not search the graph for unused ones; the Trainer's
        # default for a PEFT model (search) also breaks reentrant checkpointing, whose
        # recompute marks the checkpointed parameters ready a second time. DeepSpeed ignores it.
        ddp_find_unused_parameters=False,
        # Counted on the host by DojoTrainer (dojo.train.worker.trainer): HF's own count reads
        # the device every step.
        include_num_input_tokens_seen="no",
        # transformers' default (True) logs a window of NaN/inf losses as 0.0000: a diverged run
        # looked like a converged one (seen on the H200). Logged as is, StopOnNonFinite ends it.
        logging_nan_inf_filter=False,
        # Liger: fused RMSNorm/SwiGLU/RoPE and the fused linear cross-entropy that never
        # materialises the fp32 logits (the peak with 128k+ vocabularies).
        use_liger_kernel=bool(run.kernels.fused_loss),
        liger_kernel_config=LIGER_LOSS_ONLY
        if run.kernels.fused_loss and not run.kernels.liger_kernels
        else None,
        torch_compile=compile_,
        remove_unused_columns=False,
        # Two loader processes on a GPU (the plain script's setting): collating off the main
        # process, which drives the kernels. CPU runs keep it in-process (no fork, 2-core CI).
        dataloader_num_workers=2 if run.device == "cuda" else 0,
        dataloader_pin_memory=run.device == "cuda",
        # The batch's copy to the GPU from pinned memory without waiting for it: a blocking copy
        # waits for the whole queue, the previous step's optimizer included.
        accelerator_config={"non_blocking": run.device == "cuda"},
    )


def eval_args(run: Any) -> dict[str, Any]:
    """Eval every ``eval_steps`` (transformers adds one at the last step); the best checkpoint by
    eval loss is tracked always and loaded at the end with keep_best."""
    if not run.data.evaluates:
        return {"eval_strategy": "no"}
    return {
        "eval_strategy": "steps",
        "eval_steps": run.loop.eval_steps,
        "metric_for_best_model": "eval_loss",
        "greater_is_better": False,
        "load_best_model_at_end": run.loop.keep_best == "on",
    }


def eval_callbacks(run: Any) -> list[Any]:
    if run.loop.early_stopping is None:
        return []
    from transformers import EarlyStoppingCallback

    return [EarlyStoppingCallback(early_stopping_patience=run.loop.early_stopping)]


def fit_z3_leaf(model: Any, training_args: TrainingArguments, run: Any) -> None:
    """ZeRO-3: the leaf class the resolver named from config.json's model_type must exist in the
    loaded model. If it does not (an unusual class name), transformers' own ``_no_split_modules``
    (the decoder layer) replaces it in the live DeepSpeed config before the engine reads it, so
    each layer is still gathered whole; with neither, per-module hooks stay and that is said."""
    if not run.zero.leaf_classes:
        return
    leaf = run.zero.leaf_classes[0]
    names = {type(m).__name__ for m in model.modules()}
    if leaf in names:
        return
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    own = [n for n in (getattr(base, "_no_split_modules", None) or []) if n in names]
    zero = training_args.hf_deepspeed_config.config["zero_optimization"]
    classes = [c for c in zero.get("leaf_module", {}).get("classes", []) if c != leaf]
    if own:
        zero["leaf_module"] = {"classes": [own[0], *classes]}
        # Said as a warning: ds_config.json and the run record still name the class asked.
        print0(f"warning: ZeRO-3: no {leaf} in this model; its decoder layer {own[0]} is the "
               f"leaf instead (ds_config.json names {leaf})")  # fmt: skip
    else:
        zero.pop("leaf_module", None)
        print0(f"warning: ZeRO-3: no {leaf} in this model: DeepSpeed's per-module "
               "hooks stay (slower; the estimate assumed one gather per layer)")  # fmt: skip
