"""The model a training process trains (worker side: imports torch and transformers): its
weights loaded in the run's dtype (QLoRA: NF4 with double quantization, PEFT's k-bit
preparation), and the LoRA/DoRA adapters on it."""

import os
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM

from dojo.run.run import Run
from dojo.train.worker import serving
from dojo.train.worker.callbacks import print0

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def safetensors(weights: str) -> bool | None:
    """True for a folder with safetensors (never unpickle then); None lets transformers take a
    pytorch_model*.bin folder (preflight refused a folder with neither) or a Hub id as it is."""
    folder = Path(weights)
    return True if folder.is_dir() and any(folder.glob("*.safetensors")) else None


def hub_revision(run: Run, source: str) -> dict[str, Any]:
    """from_pretrained's ``revision`` for a Hub id (--revision); nothing for a local folder."""
    return (
        {"revision": run.model.revision} if run.model.revision and not Path(source).is_dir() else {}
    )


def load_model(run: Run, weights: str) -> Any:
    """Full / LoRA: weights in the compute dtype. QLoRA: NF4 + double quant (bitsandbytes)."""
    dtype = DTYPES[run.kernels.precision]
    attn = run.kernels.attn
    if attn == "sdpa_varlen":  # dojo's own attention function: registered before the load
        from dojo.train.worker import varlen

        varlen.register()
    kw: dict[str, Any] = {
        "dtype": dtype,
        "trust_remote_code": run.model.trust_remote_code,
        "attn_implementation": attn,
        **hub_revision(run, weights),
    }
    if run.model.method == "qlora":
        from transformers import BitsAndBytesConfig

        zero3 = run.zero.stage == 3
        kw["quantization_config"] = BitsAndBytesConfig(  # type: ignore[no-untyped-call]
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=dtype,
            # PEFT "DeepSpeed" guide: under ZeRO-3 the packed 4-bit weights must be stored in the
            # compute dtype so ZeRO can shard them like any other parameter.
            bnb_4bit_quant_storage=dtype if zero3 else torch.uint8,
        )
        if not zero3:
            kw["device_map"] = {"": int(os.environ.get("LOCAL_RANK", "0"))}
    model = AutoModelForCausalLM.from_pretrained(
        weights, use_safetensors=safetensors(weights), **kw
    )
    model.config.use_cache = False  # the KV cache is useless in training and costs memory
    if run.model.method == "qlora":
        model = prepare_kbit(model, run)
    return model


def prepare_kbit(model: Any, run: Run) -> Any:
    """PEFT's k-bit preparation (``prepare_model_for_kbit_training``): the base frozen and, with
    checkpointing, the embeddings' output made to require grad (reentrant checkpointing needs a
    grad-requiring input) and checkpointing on. PEFT also upcasts every weight that is not 4-bit
    to fp32 (embeddings, head, norms; an MoE model's experts). Without DeepSpeed that stays, as
    in a plain PEFT script. Under DeepSpeed the engine casts every weight back to bf16 when it
    starts (``_cast_module_mixed_precision``), so the upcast would only raise the load's peak
    (the whole model is on every GPU then, at ZeRO-3 too: transformers skips zero.Init for
    quantized models), and dojo leaves it out."""
    ckpt = {"use_reentrant": True}  # as the Trainer's (args.py)
    if not run.zero.deepspeed:
        from peft import prepare_model_for_kbit_training

        return prepare_model_for_kbit_training(  # type: ignore[no-untyped-call]
            model,
            use_gradient_checkpointing=run.kernels.grad_ckpt,
            gradient_checkpointing_kwargs=ckpt,
        )
    model.requires_grad_(False)
    if run.kernels.grad_ckpt:
        model.enable_input_require_grads()
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=ckpt)
    return model


def apply_lora(model: Any, run: Run) -> Any:
    """PEFT LoRA on every linear layer but the head (PEFT's "all-linear"), or the named ones."""
    if run.model.method == "full":
        return model
    from peft import get_peft_model

    check_modules_to_save(model, run.lora.modules_to_save)
    model = get_peft_model(model, lora_config(model, run))
    prepare_adapters(model, run)
    return model


def check_modules_to_save(model: Any, names: tuple[str, ...]) -> None:
    """Every --modules-to-save name matches a module: PEFT matches the ends of dotted names and
    passes over a name that matches none, so a typo would train nothing beside the adapters."""
    from dojo.errors import DojoError

    modules = list(model.named_modules())
    unmatched = [n for n in names if not any(k.endswith(n) for k, _ in modules)]
    if unmatched:
        # The names of modules that hold weights, once each: embed_tokens, q_proj, ..., lm_head.
        leaves = dict.fromkeys(
            k.rsplit(".", 1)[-1]
            for k, m in modules
            if k and next(m.parameters(False), None) is not None
        )
        raise DojoError(
            f"--modules-to-save {','.join(unmatched)}: matches no module of this model",
            hint=f"name modules by the end of their names: {', '.join(leaves)}",
        )


def lora_config(model: Any, run: Run) -> Any:
    """The run's PEFT LoraConfig for ``model`` (not yet wrapped)."""
    from peft import LoraConfig

    names = run.lora.target_names
    target_modules: str | list[str] = "all-linear" if names is None else list(names)
    extra: dict[str, Any] = {}
    if run.lora.modules_to_save:
        extra["modules_to_save"] = list(run.lora.modules_to_save)
        # Tied input/output embeddings stay one matrix when both are trained in full.
        extra["ensure_weight_tying"] = serving.is_tied(model)
    return LoraConfig(
        r=run.lora.lora_r,
        lora_alpha=run.lora.lora_alpha,
        lora_dropout=run.lora.lora_dropout,
        target_modules=target_modules,
        task_type="CAUSAL_LM",
        use_dora=run.lora.dora,
        use_rslora=run.lora.rslora,
        **extra,
    )


def prepare_adapters(model: Any, run: Run) -> None:
    """After PEFT wrapped ``model``: inputs that require grad where needed; say what trains."""
    if run.kernels.grad_ckpt or run.zero.leaf_classes:
        # Checkpointing needs a grad-requiring input to recompute. So do ZeRO-3 leaf layers: with
        # a frozen embedding, layer 0's inputs need no grad, and then torch fires its full backward
        # hook (DeepSpeed's leaf release) before the layer's own backward has used the weights.
        model.enable_input_require_grads()
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    kind = "DoRA" if run.lora.dora else "LoRA"
    scale = " (rsLoRA scale)" if run.lora.rslora else ""
    print0(
        f"{kind} r={run.lora.lora_r} alpha={run.lora.lora_alpha}{scale}: {trainable:,} trainable parameters"
    )
