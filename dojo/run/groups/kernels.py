"""Numerics and kernels: precision, attention kernel, Liger, torch.compile, the CUDA allocator,
activation checkpointing.

``resolve_kernels`` decides every "auto" from the machine (CUDA, liger-kernel installed,
PYTORCH_CUDA_ALLOC_CONF) and the model; docs/train.md#kernels-attention-and-compile-the-auto-rules says why each rule is what it is.
"""

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from dojo.modelspec import LORA_FUSED_EXPERT_TYPES, SOFTCAP_MODEL_TYPES
from dojo.run.field import ALL, PLAN, OnOff, opt
from dojo.run.machine import Machine, conf_expandable

Attention = Literal["auto", "sdpa", "eager", "flex_attention", "flash_attention_2", "sdpa_varlen"]
VARLEN_AUTO_MODELS = ("llama", "qwen2", "qwen3")
"""--attn auto picks sdpa_varlen for these (measured on Llama and Qwen2.5; Qwen3 is Qwen2's
attention with q/k norms before it). Not Mistral (its sliding window is not passed to the kernel)
nor models dojo does not know."""
LIGER_MODEL_TYPES = frozenset((
    "deepseek_v2", "deepseek_v3", "exaone4", "falcon_h1", "gemma", "gemma2", "gemma3",
    "gemma3_text", "glm4", "gpt_oss", "granite", "hunyuan_v1_dense", "hunyuan_v1_moe", "llama",
    "llama4", "llama4_text", "ministral", "mistral", "mixtral", "nemotron", "olmo2", "olmo3",
    "phi3", "qwen2", "qwen3", "qwen3_moe", "qwen3_next", "smollm3",
))  # fmt: skip
"""Text model types liger-kernel 0.8 has kernels for (MODEL_TYPE_TO_APPLY_LIGER_FN). The HF
Trainer applies Liger by that table; for any other type it warns and applies nothing, not even
the fused loss (e.g. Qwen2-MoE), so dojo resolves Liger off there and estimates the unfused
loss."""
LIGER_SPARE_EXPERTS = {"swiglu": False}
"""Liger's kernel config when LoRA adapts a model's fused experts. liger-kernel 0.8 rebinds the
forward of the module at ``mlp.experts`` to its fused MoE kernel (LigerExperts), but the HF
Trainer applies Liger after PEFT has put its ParamWrapper there, whose forward then fails
(``'ParamWrapper' object has no attribute 'hidden_dim'``) and would skip the adapters if it ran.
SwiGLU off leaves the experts (and every MLP) to transformers; norms, RoPE and the fused loss
stay Liger's."""
NO_SOFTCAP = {
    "sdpa": "SDPA (transformers refuses it for soft-capped models)",
    "sdpa_varlen": "PyTorch's FlashAttention kernel",
}
"""--attn kernels that cannot soft-cap, and why."""


@dataclass(frozen=True)
class KernelOptions:
    precision: Literal["auto", "bf16", "fp16", "fp32"] = opt(
        "auto", "auto | bf16 | fp16 | fp32", "auto = bf16 on GPU, fp32 on CPU", commands=ALL
    )
    attn: Attention = opt(
        "auto",
        "Attention kernel: auto | sdpa | eager | flex_attention | flash_attention_2 | sdpa_varlen "
        "(packed samples through PyTorch's FlashAttention kernel by their offsets, no mask)",
        "auto = sdpa_varlen for packed or preference bf16 Llama/Qwen runs on CUDA without "
        "compile (faster than the masked kernel or padding, same losses); eager for models that "
        "soft-cap attention logits (Gemma-2), as transformers does; sdpa elsewhere",
        flags=("--attn", "--attention"),
        metavar="CHOICE",
        commands=PLAN,
    )
    liger: Literal["auto", "on", "off", "loss"] = opt(
        "auto",
        "Liger kernels incl. the fused linear cross-entropy: auto | on | off | loss (the fused "
        "loss alone: the fp32 logits never made whole)",
        "auto = on with CUDA and liger-kernel installed (dojo's gpu extra); loss under --compile on, "
        "whose compiled layers gave NaN losses with Liger's layer kernels",
        commands=PLAN,
    )
    compile: OnOff = opt(
        "auto",
        "torch.compile each decoder layer: auto | on | off",
        "auto = on for packed LoRA and QLoRA runs of Llama, Qwen2 and Qwen3 models on CUDA "
        "without checkpointing or offload (ZeRO 0-2 or none): 1B runs made 1.4-1.6x the "
        "uncompiled tokens/s after the first step, which compiles the layers (about 20 s, 3-9 s from "
        "Inductor's cache); packed rows are then padded to one width so the layers compile "
        "once (docs/train.md#kernels-attention-and-compile-the-auto-rules)",
        commands=PLAN,
    )
    expandable_segments: OnOff = opt(
        "auto",
        "PyTorch's expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) in the "
        "training processes: auto | on | off",
        "auto = on with CUDA unless PYTORCH_CUDA_ALLOC_CONF says otherwise: freed blocks are "
        "reused in place instead of held reserved (docs/estimate.md#allocator-reserve)",
        commands=PLAN,
    )
    grad_ckpt: bool = opt(
        False,
        "Gradient (activation) checkpointing: less memory, ~30% more compute",
        "HF TrainingArguments' default",
        commands=PLAN,
    )

    @property
    def fused_loss(self) -> bool:
        """Liger's fused linear cross-entropy runs (--liger on or loss)."""
        return self.liger in ("on", "loss")

    @property
    def compiled(self) -> bool:
        return self.compile == "on"

    @property
    def expandable(self) -> bool:
        """PyTorch's expandable segments in the training processes (resolved)."""
        return self.expandable_segments == "on"

    @property
    def liger_kernels(self) -> bool:
        """Liger's RMSNorm / SwiGLU / RoPE kernels too (--liger on)."""
        return self.liger == "on"


def liger_spares_experts(
    liger_kernels: bool, adapters: bool, target_names: tuple[str, ...] | None, model_type: Any
) -> bool:
    """Liger's layer kernels run without their SwiGLU (``LIGER_SPARE_EXPERTS``): LoRA's
    all-linear adapts this model type's fused experts."""
    return (
        liger_kernels and adapters and target_names is None
        and model_type in LORA_FUSED_EXPERT_TYPES
    )  # fmt: skip


def spare_experts_line(model_type: Any) -> str:
    """What a run says when Liger runs without its SwiGLU (``LIGER_SPARE_EXPERTS``)."""
    return (f"liger on without its SwiGLU kernel: LoRA adapts {model_type}'s fused experts, "
            "which Liger's MoE kernel would run without the adapters")  # fmt: skip


def kernel_problems(
    k: KernelOptions, packing: bool, machine: Machine, preference: bool = False
) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if k.liger == "on" and k.compile == "on":
        out.append(("--compile on with --liger on: Liger's layer kernels inside compiled layers "
                    "trained to NaN losses", "use --compile on --liger loss (Liger's fused loss "
                    "alone), or one of the two"))  # fmt: skip
    for flag, value, why in (
        ("--liger", k.liger, "Triton kernels"),
        ("--compile", k.compile, "Triton kernels"),
        ("--expandable-segments", k.expandable_segments, "a CUDA allocator setting"),
    ):
        if value in ("on", "loss") and not machine.cuda:
            fix = f"use {flag} off here" if flag == "--compile" else f"use {flag} auto or off here"
            out.append((f"{flag} {value} needs CUDA GPUs ({why})", fix))
    if k.attn == "sdpa_varlen" and not packing and not preference:
        out.append(("--attn sdpa_varlen keeps samples apart by their offsets in a packed row; "
                    "without --packing rows are padded", "add --packing, or use --attn sdpa"))  # fmt: skip
    elif k.attn in ("flex_attention", "flash_attention_2") and not machine.cuda:
        why = ("FlexAttention has no backward on the CPU" if k.attn == "flex_attention"
               else "FlashAttention-2 is a CUDA kernel")  # fmt: skip
        out.append((f"--attn {k.attn} needs CUDA GPUs: {why}", "use --attn sdpa (auto) here"))
    elif k.attn == "flash_attention_2" and not machine.assumed and not machine.flash_attn:
        out.append(("--attn flash_attention_2 needs the flash-attn package, not installed here",
                    "pip install flash-attn (built for this torch and CUDA), or use --attn sdpa"))  # fmt: skip
    env_says = conf_expandable(machine.alloc_conf)
    if (
        k.expandable_segments != "auto"
        and env_says is not None
        and env_says != (k.expandable_segments == "on")
    ):
        out.append((f"--expandable-segments {k.expandable_segments} but PYTORCH_CUDA_ALLOC_CONF="
                    f"{machine.alloc_conf} says expandable_segments:{env_says}",
                    "drop one of the two: the flag or that setting"))  # fmt: skip
    if k.precision == "fp16" and not machine.cuda:
        out.append(("--precision fp16 needs a GPU", "use --precision fp32 or bf16 on the CPU"))
    return out


def softcap_problem(k: KernelOptions, spec: Any) -> tuple[str, str] | None:
    """A kernel that cannot soft-cap, asked for a model that soft-caps (known once the model is)."""
    model_type = getattr(spec, "model_type", None)
    if k.attn in NO_SOFTCAP and model_type in SOFTCAP_MODEL_TYPES:
        return (f"--attn {k.attn}: {model_type} caps its attention logits (soft-capping), which "
                f"{NO_SOFTCAP[k.attn]} does not do",
                "use --attn eager (auto: transformers' choice for Gemma-2) or flex_attention")  # fmt: skip
    return None


def resolve_kernels(
    k: KernelOptions,
    *,
    machine: Machine,
    spec: Any,
    packing: bool,
    said: list[str],
    adapters: bool,
    stage: Any,
    offload: str,
    preference: bool = False,
) -> KernelOptions:
    """Every "auto" of the group decided for ``machine`` and the model ``spec`` (None: unknown);
    ``adapters``, ``stage`` and ``offload`` (the run's method and ZeRO) for compile's."""
    cuda = machine.cuda
    precision = k.precision if k.precision != "auto" else ("bf16" if cuda else "fp32")
    compiled = k.compile == "on"
    if k.compile == "auto":
        compiled = compile_pays(k, cuda=cuda, precision=precision, spec=spec, packing=packing,
                                adapters=adapters, stage=stage, offload=offload)  # fmt: skip
        if compiled:
            said.append(COMPILE_ON_LINE)
    liger = k.liger
    model_type = getattr(spec, "model_type", None)
    if liger != "off" and model_type is not None and model_type not in LIGER_MODEL_TYPES:
        if cuda and machine.liger:
            said.append(f"liger off: liger-kernel has no kernels for {model_type} (the HF "
                        "Trainer would apply none, the fused loss included)")  # fmt: skip
        liger = "off"
    if liger == "auto":
        if preference:
            liger = "off"
            if cuda and machine.liger:
                said.append("liger off: TRL's preference trainers compute log-probabilities "
                            "with their own chunked head")  # fmt: skip
        elif not (cuda and machine.liger):
            liger = "off"
            said.append(
                "liger off: needs CUDA and liger-kernel (pip install -e '.[gpu]' in dojo's clone)"
            )
        elif compiled:
            liger = "loss"
            said.append("liger loss: compile on, so Liger's fused loss alone (its layer kernels "
                        "inside compiled layers trained to NaN losses)")  # fmt: skip
        else:
            liger = "on"
            said.append("liger on: CUDA with liger-kernel")
    # A preference batch is padded, but the worker takes the padding out before the decoder
    # layers where the kernel takes sample offsets (dojo.train.worker.unpadded): as if packed.
    flat = packing or preference
    attn = k.attn if k.attn != "auto" else auto_attention(spec, cuda, precision, flat, compiled)
    if k.attn == "auto" and attn == "sdpa_varlen" and preference:
        said.append("attn sdpa_varlen: the preference batch's sequences go through the layers "
                    "without their padding, by their offsets, in PyTorch's FlashAttention kernel "
                    "(the same losses); --attn sdpa for padded rows")  # fmt: skip
    elif k.attn == "auto" and attn == "sdpa_varlen":
        said.append("attn sdpa_varlen: packed samples by their offsets through PyTorch's "
                    "FlashAttention kernel, no mask (faster than the masked kernel, the same "
                    "losses); --attn sdpa for the masked kernel")  # fmt: skip
    elif k.attn == "auto" and attn == "eager":
        said.append(f"attn eager: {spec.model_type} soft-caps its attention logits, which SDPA "
                    "does not do (transformers' own choice for it); --attn flex_attention on CUDA")  # fmt: skip
    return dataclasses.replace(
        k,
        precision=precision,
        compile="on" if compiled else "off",
        liger=liger,
        attn=attn,
        expandable_segments="on" if _expandable(k, machine, said) else "off",
    )


COMPILE_ON_LINE = (
    "compile on: packed 1B LoRA and QLoRA runs on CUDA made 1.4-1.6x the tokens/s of uncompiled "
    "ones after the first step, which compiles each decoder layer (about 20 s in a machine's "
    "first run, 3-9 s from Inductor's cache; docs/benchmarks.md); --compile off for a short run"
)


def compile_pays(
    k: KernelOptions,
    *,
    cuda: bool,
    precision: str,
    spec: Any,
    packing: bool,
    adapters: bool,
    stage: Any,
    offload: str,
) -> bool:
    """--compile auto: on for the runs where compiled layers were measured to pay, packed LoRA
    and QLoRA of Llama-type models in bf16 on CUDA, without checkpointing or offload, at ZeRO
    0-2 or without DeepSpeed (no parameter gathers: the layers see whole weights). There the
    uncompiled step is host-bound, many small kernels a layer; compiled and padded to one width
    (one graph for the whole run) 1B LoRA and QLoRA made 1.39x and 1.56x the tokens/s of
    dojo's uncompiled default after step 1, in the same GPU call. Not measured, so off:
    full fine-tuning, checkpointing, ZeRO-3, offload, preference runs, other model types, an
    attention kernel other than SDPA, or ``--liger on`` (refused with compile)."""
    model_type = getattr(spec, "model_type", None)
    return (
        cuda
        and precision == "bf16"
        and adapters
        and packing  # preference runs are never packed
        and not k.grad_ckpt
        and stage in (0, 1, 2, "none")
        and offload == "none"
        and k.liger != "on"
        and k.attn in ("auto", "sdpa")
        and model_type in VARLEN_AUTO_MODELS
    )


def auto_attention(
    spec: Any, cuda: bool, precision: str, packing: bool, compiled: bool
) -> Attention:
    """--attn auto: eager for models that soft-cap their attention logits (Gemma-2); sdpa_varlen
    for packed bf16 rows on CUDA (a GPU older than Ampere, without that kernel, takes varlen's
    exact per-sample path); else sdpa. Not under compile: the varlen call would split every
    compiled layer's graph."""
    model_type = getattr(spec, "model_type", None)
    if model_type in SOFTCAP_MODEL_TYPES:
        return "eager"
    if (
        cuda
        and packing
        and precision == "bf16"
        and not compiled
        and model_type in VARLEN_AUTO_MODELS
    ):
        return "sdpa_varlen"
    return "sdpa"


def _expandable(k: KernelOptions, machine: Machine, said: list[str]) -> bool:
    """As asked, else as PYTORCH_CUDA_ALLOC_CONF says, else on with CUDA (``launch.launch_env``
    adds it to that variable)."""
    if k.expandable_segments != "auto":
        return k.expandable_segments == "on"
    conf = conf_expandable(machine.alloc_conf)
    if conf is not None:
        said.append(f"expandable segments {'on' if conf else 'off'}: PYTORCH_CUDA_ALLOC_CONF "
                    "says so")  # fmt: skip
        return conf
    if machine.cuda:
        said.append("expandable segments on: freed blocks are reused in place instead of held "
                    "reserved (docs/estimate.md#allocator-reserve); --expandable-segments off for "
                    "PyTorch's default")  # fmt: skip
    return machine.cuda
