"""The one resolver: options + model + machine -> ``ResolvedRun``. "auto" is decided here only.

Every rule that ties options together (offload needs ZeRO >= 1, parameter offload needs ZeRO-3,
nvme needs a path, ...) is checked here, all at once: one ConfigError lists every problem.
"""

from typing import Any

from dojo.errors import ConfigError
from dojo.modelspec import SOFTCAP_MODEL_TYPES
from dojo.run import resolve_loop
from dojo.run.catalog import BNB_OPTIMS, OPTIONS
from dojo.run.machine import Machine, conf_expandable
from dojo.run.resolved import ResolvedRun, target_names
from dojo.zero.build import DS_BUCKET_DEFAULT as DS_BUCKET
from dojo.zero.build import Z3_MAX_LEAF, hf_auto_reduce_bucket, sub_group_size
from dojo.zero.rules import offload_problems


def _problems(v: dict[str, Any], machine: Machine, given: set[str]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    out += offload_problems(v["zero"], v["offload"], v["offload_param"], v.get("nvme_path"))
    optim = v.get("optim", "auto")
    if v.get("optimizer") == "ds" and "optim" in given and optim != "auto":
        out.append((f"--optim {optim} applies to --optimizer hf; with --optimizer ds DeepSpeed's "
                    "AdamW steps", f"drop --optim, or use --optimizer hf --optim {optim}"))  # fmt: skip
    if optim in BNB_OPTIMS and v["offload"] != "none":
        out.append((f"--optim {optim} steps on the GPU (bitsandbytes); offloaded states live on the CPU",
                    "use --offload none, or --optimizer ds (DeepSpeedCPUAdam) with offload"))  # fmt: skip
    if v.get("revision") is not None and v.get("model") is None:
        out.append((f"--revision {v['revision']} applies to a Hub --model (org/name)",
                    "add --model org/name, or drop --revision"))  # fmt: skip
    if v.get("merge") and v["method"] == "full":
        out.append(("--merge applies to --method lora or qlora only",
                    "full fine-tuning already saves the whole model: drop --merge"))  # fmt: skip
    if v.get("liger") == "on" and v.get("compile") == "on":
        out.append(("--compile on with --liger on gave NaN losses by step 10 on the H200 "
                    "(docs/benchmarks.md, session 6)", "use --compile on --liger loss (Liger's "
                    "fused loss alone), or one of the two"))  # fmt: skip
    for flag, name, why in (
        ("--liger", "liger", "Triton kernels"),
        ("--compile", "compile", "Triton kernels"),
        ("--expandable-segments", "expandable_segments", "a CUDA allocator setting"),
    ):
        if v.get(name) in ("on", "loss") and not machine.cuda:
            out.append(
                (f"{flag} {v[name]} needs CUDA GPUs ({why})", f"use {flag} auto or off here")
            )
    out += _attention_problems(v.get("attn", "auto"), bool(v.get("packing")), machine)
    out += _expandable_problems(v.get("expandable_segments", "auto"), machine)
    if v.get("precision") == "fp16" and not machine.cuda:
        out.append(("--precision fp16 needs a GPU", "use --precision fp32 or bf16 on the CPU"))
    if optim in BNB_OPTIMS and not machine.cuda:
        out.append((f"--optim {optim} needs CUDA (bitsandbytes)", "use --optim adamw_torch here"))
    return out + resolve_loop.problems(v, machine, given)


def check(v: dict[str, Any], machine: Machine, given: set[str]) -> None:
    found = _problems(v, machine, given)
    if found:
        more = (
            f" (and {len(found) - 1} more: {'; '.join(m for m, _ in found[1:])})"
            if len(found) > 1
            else ""
        )
        raise ConfigError(found[0][0] + more, hint=found[0][1])


def resolve(
    values: dict[str, Any],
    *,
    machine: Machine,
    spec: Any = None,
    gpus: tuple[int, ...] = (),
    gpus_per_node: int = 1,
    given: set[str] | None = None,
    world_known: bool = True,
) -> ResolvedRun:
    """``values``: every option, typed (``dojo.run.inputs.merge``); ``spec``: the ModelSpec when
    known (buckets are then numbers, not "auto"); ``gpus``: ids or CPU slots chosen;
    ``world_known``: False when nobody said how many GPUs (``dojo config``)."""
    v = {name: values.get(name, opt.default) for name, opt in OPTIONS.items()}
    check(v, machine, given or set())
    if v["attn"] in NO_SOFTCAP and getattr(spec, "model_type", None) in SOFTCAP_MODEL_TYPES:
        raise ConfigError(
            f"--attn {v['attn']}: {spec.model_type} caps its attention logits (soft-capping), "
            f"which {NO_SOFTCAP[v['attn']]} does not do",
            hint="use --attn eager (auto: transformers' choice for Gemma-2) or flex_attention",
        )
    said: list[str] = []
    cuda = machine.cuda
    method, zero, off = v["method"], v["zero"], v["offload"]
    offload_param = (
        (off if zero == 3 else "none") if v["offload_param"] == "auto" else v["offload_param"]
    )
    precision = v["precision"] if v["precision"] != "auto" else ("bf16" if cuda else "fp32")
    # torch.compile with Liger's layer kernels gave NaN losses by step 10 on the H200 (1B full
    # ZeRO-2, torch 2.11 + liger-kernel 0.8.5; session 6), and DeepSpeed's overflow check had been
    # skipping those steps, which is where the speed compile seemed to add came from. Either alone
    # trains (the same run's losses match the plain script's), and so does compile with Liger's
    # fused loss alone, which runs after the compiled layers (session 10, T5 and T1: the same
    # losses as compile alone). So --compile on turns Liger's "auto" to "loss" (--liger on with it
    # is refused in _problems). Compile's own "auto" is on only where it was measured to pay
    # (compile_auto_pays). Until session 10 compile ran without Liger's fused loss, and
    # dojo.run.autofit turned it off where the fp32 logits would not fit; with the fused loss kept,
    # the compiled run needs no more than Liger's (T5: 3.1 GiB allocated), so that rule is gone.
    auto_compile = v["compile"] == "auto" and compile_auto_pays(v, cuda)
    compile_ = v["compile"] == "on" or auto_compile
    has_liger = cuda and machine.liger
    liger = v["liger"] in ("on", "loss") or (v["liger"] == "auto" and has_liger)
    liger_kernels = liger and (v["liger"] == "on" or (v["liger"] == "auto" and not compile_))
    if v["liger"] == "auto":
        if liger and liger_kernels:
            said.append("liger on: CUDA with liger-kernel")
        elif liger:
            said.append("liger loss: compile on, so Liger's fused loss alone (its layer kernels "
                        "inside compiled layers gave NaN losses, docs/benchmarks.md session 6)")  # fmt: skip
        else:
            said.append("liger off: needs CUDA and liger-kernel (pip install 'dojo[gpu]')")
    if auto_compile:
        said.append(f"compile on: {COMPILE_AUTO_WHY}; --compile off for Liger's layer kernels")
    elif v["compile"] == "auto":
        said.append("compile off: it pays for packed LoRA and QLoRA at ZeRO 0-2 on CUDA "
                    "(docs/benchmarks.md); --compile on to use it")  # fmt: skip
    attn = v["attn"] if v["attn"] != "auto" else _auto_attention(v, spec, cuda, precision, compile_)
    if v["attn"] == "auto" and attn == "sdpa_varlen":
        said.append(f"attn {attn}: {VARLEN_AUTO_WHY}; --attn sdpa for the masked kernel")
    elif v["attn"] == "auto" and attn == "eager":
        said.append(f"attn eager: {spec.model_type} soft-caps its attention logits, which SDPA "
                    "does not do (transformers' own choice for it); --attn flex_attention on CUDA")  # fmt: skip
    expandable = _expandable(v["expandable_segments"], machine, said)
    adapter = _adapter_params(v, spec)
    bucket, prefetch, leaf = _zero_sizes(v, spec, adapter, said)
    world = max(1, gpus_per_node) * v["num_nodes"] if world_known else None
    overlap = _overlap_comm(v, adapter, bucket, world, given or set(), said)
    optim = v["optim"]
    if v["optimizer"] == "ds":
        optim = "deepspeed_adamw"
    elif optim == "auto":
        # Fused AdamW is transformers' default on CUDA; the plain loop is the safe CPU one.
        optim = "adamw_torch_fused" if cuda else "adamw_torch"
    lr = v["lr"] if v["lr"] is not None else (2e-5 if method == "full" else 2e-4)
    loop = resolve_loop.fields(v)
    if machine.assumed:
        said.insert(0, f"machine: {machine.describe()}")
    return ResolvedRun(
        method=method, model=v["model"], revision=v["revision"], init=v["init"],
        zero=zero, offload_optimizer=off if zero else "none", offload_param=offload_param,
        nvme_path=v["nvme_path"], overlap_comm=overlap, bucket_size=bucket,
        prefetch_bucket_size=prefetch, z3_leaf=leaf, sub_group_size=_sub_group(v, zero, off),
        overflow_check=v["overflow_check"], expandable_segments=expandable,
        optimizer_from=v["optimizer"], scheduler_from=v["scheduler"], optim=optim,
        precision=precision, attn=attn, liger=liger, liger_kernels=liger_kernels,
        compile=compile_, packing=v["packing"],
        grad_ckpt=v["grad_ckpt"], micro_batch=v["micro_batch"], seq_len=v["seq_len"],
        grad_accum=v["grad_accum"], lora_r=v["lora_r"], lora_alpha=v["lora_alpha"],
        lora_dropout=v["lora_dropout"], lora_targets=v["lora_targets"], merge=v["merge"],
        device="cuda" if cuda else "cpu", gpus=tuple(gpus), gpus_per_node=max(1, gpus_per_node),
        num_nodes=v["num_nodes"], hostfile=v["hostfile"], master_addr=v["master_addr"],
        master_port=v["master_port"], machine=machine.describe(), machine_assumed=machine.assumed,
        lr=lr, warmup_steps=v["warmup_steps"], epochs=v["epochs"], max_steps=v["max_steps"],
        seed=v["seed"], data=tuple(v["data"] or ()), template=v["template"],
        overflow=v["overflow"], trust_remote_code=v["trust_remote_code"],
        output_dir=v["output_dir"], resume=v["resume"], save_steps=v["save_steps"],
        save_total_limit=v["save_total_limit"], save_model=v["save_model"],
        assumed=tuple(said), **loop,
    )  # fmt: skip


COMPILE_AUTO_WHY = (
    "LoRA and QLoRA at ZeRO 0-2 with packed rows are host-bound (many small kernels per layer); "
    "regional compile with Liger's fused loss ran 1.53x the plain script (LoRA) and 1.35x "
    "(QLoRA with checkpointing, at 3.1 GiB against 13.5) on 1B, 4 x 2048, H200; Liger without "
    "compile 1.29x and 1.24x (docs/benchmarks.md, sessions 7-12)"
)


def compile_auto_pays(v: dict[str, Any], cuda: bool) -> bool:
    """--compile auto: on for the kind of run where it was measured to pay: adapters (LoRA,
    QLoRA) at ZeRO 0-2, optimizer on the GPU, packed rows (one shape: no recompiles), on CUDA,
    --liger on not asked for (Liger's layer kernels with compile gave NaN losses; its fused loss
    alone, --liger loss, goes with compile: session 10, T5 40,044 tokens/s and 3.1 GiB allocated,
    the same losses as compile alone). Measured: LoRA without checkpointing
    (session 7-8, T3) and QLoRA with reentrant checkpointing (session 9, T5: 40,389-41,079 tokens/s
    against 26,407-28,088 with Liger, losses within the plain script's run-to-run spread); the
    checkpoint wraps the compiled layer, so the first pass runs an inference graph and the
    recompute the training graph. Not ZeRO-3 or offload: not measured. Not full fine-tuning: it
    bought nothing there (T1: 48,920 and 50,030 against 49,710 tokens/s without it; T7 7B ZeRO-3:
    6,332 against 6,888)."""
    return (
        cuda
        and v["method"] in ("lora", "qlora")
        and v["zero"] is not None
        and v["zero"] <= 2
        and v["offload"] == "none"
        and bool(v["packing"])
        and v["liger"] != "on"
    )


VARLEN_AUTO_MODELS = ("llama", "qwen2", "qwen3")
"""--attn auto picks sdpa_varlen for these (measured: Llama full and Qwen2.5 LoRA rows, session 10;
Qwen3 is Qwen2's attention with q/k norms before it). Not Mistral (sliding windows went through the
kernel on the CPU path only) nor models dojo does not know."""

VARLEN_AUTO_WHY = (
    "packed samples by their offsets through PyTorch's FlashAttention kernel, no mask: 44,596 "
    "tokens/s against 40,042 with the masked SDPA kernel, the same losses (1B full ZeRO-2, "
    "realistic mix, H200, medians of 2 in one call; docs/benchmarks.md session 10)"
)


def _auto_attention(
    v: dict[str, Any], spec: Any, cuda: bool, precision: str, compile_: bool
) -> str:
    """--attn auto: sdpa_varlen where it was measured (packed rows, bf16 on CUDA; a GPU older
    than Ampere, which has no such kernel, takes varlen's exact per-sample path), eager for models
    that soft-cap their attention logits (Gemma-2), else sdpa. Not under compile: the varlen call
    is left out of the compiled graph (one split per layer), and compiled runs with it were not
    timed."""
    if getattr(spec, "model_type", None) in SOFTCAP_MODEL_TYPES:
        return "eager"
    known = getattr(spec, "model_type", None) in VARLEN_AUTO_MODELS
    if cuda and v["packing"] and precision == "bf16" and not compile_ and known:
        return "sdpa_varlen"
    return "sdpa"


NO_SOFTCAP = {
    "sdpa": "SDPA (transformers 5.24 refuses it; earlier versions dropped the cap)",
    "sdpa_varlen": "PyTorch's FlashAttention kernel",
}
"""--attn kernels that cannot soft-cap, and why."""


def _attention_problems(attn: str, packing: bool, machine: Machine) -> list[tuple[str, str]]:
    """Kernels the workers would only fail on after loading the model (found on the CPU: a
    FlexAttention run died at its first backward, 90 s in, with a traceback)."""
    if attn == "sdpa_varlen" and not packing:
        return [("--attn sdpa_varlen keeps samples apart by their offsets in a packed row; "
                 "without --packing rows are padded", "add --packing, or use --attn sdpa")]  # fmt: skip
    if attn in ("flex_attention", "flash_attention_2") and not machine.cuda:
        why = ("FlexAttention has no backward on the CPU (torch.nn.attention.flex_attention)"
               if attn == "flex_attention" else "FlashAttention-2 is a CUDA kernel")  # fmt: skip
        return [(f"--attn {attn} needs CUDA GPUs: {why}", "use --attn sdpa (auto) here")]
    if attn == "flash_attention_2" and not machine.assumed and not machine.flash_attn:
        return [("--attn flash_attention_2 needs the flash-attn package, not installed here",
                 "pip install flash-attn (built for this torch and CUDA), or use --attn sdpa")]  # fmt: skip
    return []


EXPANDABLE_WHY = (
    "without Liger the default allocator held up to 3.7 fp32 logits blocks reserved but free on "
    "the H200, expandable segments about 0.6 (docs/estimate.md, session 8)"
)


def _expandable_problems(choice: str, machine: Machine) -> list[tuple[str, str]]:
    env_says = conf_expandable(machine.alloc_conf)
    if choice != "auto" and env_says is not None and env_says != (choice == "on"):
        return [(f"--expandable-segments {choice} but PYTORCH_CUDA_ALLOC_CONF="
                 f"{machine.alloc_conf} says expandable_segments:{env_says}",
                 "drop one of the two: the flag or that setting")]  # fmt: skip
    return []


def _expandable(choice: str, machine: Machine, said: list[str]) -> bool:
    """PyTorch's expandable segments for the training processes: as asked, else as
    PYTORCH_CUDA_ALLOC_CONF says, else on with CUDA (``launch.launch_env`` adds it to that
    variable)."""
    if choice != "auto":
        return choice == "on"
    conf = conf_expandable(machine.alloc_conf)
    if conf is not None:
        said.append(f"expandable segments {'on' if conf else 'off'}: PYTORCH_CUDA_ALLOC_CONF "
                    "says so")  # fmt: skip
        return conf
    if machine.cuda:
        said.append(f"expandable segments on: {EXPANDABLE_WHY}; --expandable-segments off for "
                    "PyTorch's default")  # fmt: skip
    return machine.cuda


def _zero_sizes(
    v: dict[str, Any], spec: Any, adapter: int | None, said: list[str]
) -> tuple[int | None, int | None, tuple[str, ...]]:
    """reduce bucket, ZeRO-3 prefetch bucket and ZeRO-3 leaf classes; None/() = HF's "auto" and
    DeepSpeed's per-module hooks, used when the model is unknown (``dojo config`` alone).
    ``adapter``: the LoRA/QLoRA trainable params (``_adapter_params``)."""
    method, zero = v["method"], v["zero"]
    params = getattr(spec, "params", None)
    hidden = getattr(spec, "hidden_size", None)
    # DeepSpeed allocates whole buckets however small the model: cap them at its size.
    big = min(DS_BUCKET, params) if params else DS_BUCKET
    bucket = v["bucket_size"]
    if bucket == "auto":
        full = method == "full" and zero in (1, 2, 3)
        bucket = big if full else (hf_auto_reduce_bucket(hidden) if hidden else None)  # else "auto"
        if adapter and zero in (1, 2):
            # Every adapter grad in one bucket: one reduce per step instead of one per h^2
            # elements, each of which (with overlap_comm) synchronises the whole device.
            bucket = min(DS_BUCKET, adapter)
    prefetch = None
    leaf: tuple[str, ...] = ()
    if zero != 3:
        return bucket, prefetch, leaf
    prefetch = v.get("prefetch_bucket_size", "auto")
    if prefetch == "auto":
        prefetch = big
    if v.get("z3_leaf", "auto") == "auto" and spec is not None:
        if spec.is_moe:
            said.append("z3 leaf off: an MoE layer holds every expert; DeepSpeed's own MoE-block "
                        "leaves apply")  # fmt: skip
        elif spec.layer_params > Z3_MAX_LEAF:
            said.append(f"z3 leaf off: a decoder layer has {spec.layer_params:,} params "
                        f"(> {Z3_MAX_LEAF:,.0f}), too many to gather at once")  # fmt: skip
        else:
            leaf = (spec.decoder_layer_class,)
            said.append(f"z3 leaf: each {leaf[0]} is gathered whole, one fetch and one set of "
                        "DeepSpeed hooks per layer instead of per linear")  # fmt: skip
    return bucket, prefetch, leaf


def _sub_group(v: dict[str, Any], zero: int, offload: str) -> int | None:
    """ZeRO-3's optimizer-step tile: as given, else dojo's rule (zero/build.sub_group_size)."""
    if zero != 3:
        return None
    given = v.get("sub_group_size", "auto")
    return sub_group_size(offload) if given == "auto" else int(given)


def _adapter_params(v: dict[str, Any], spec: Any) -> int | None:
    """LoRA/QLoRA trainable params when the model is known and nothing is trained in full."""
    if v["method"] == "full" or spec is None or v.get("modules_to_save") or v.get("dora"):
        return None
    return int(spec.lora_params(v["lora_r"], target_names(v["lora_targets"]))) or None


def _overlap_comm(
    v: dict[str, Any], adapter: int | None, bucket: int | None, world: int | None,
    given: set[str], said: list[str],
) -> bool:  # fmt: skip
    """overlap_comm as asked; unasked, off at ZeRO-1/2 where there is nothing to overlap: on
    one GPU (no communication at all), and when one bucket holds every trainable grad
    (adapters: the reduce runs once, after backward). DeepSpeed's overlap path still
    synchronises the whole device before each bucket's reduce (stage_1_and_2.py); on the H200
    turning it off made 1B full ZeRO-2 11% faster (docs/benchmarks.md, session 5)."""
    if "overlap_comm" in given or v["zero"] not in (1, 2):
        return bool(v["overlap_comm"])
    if world == 1:
        said.append("overlap_comm off: one process, no gradient communication to overlap")
        return False
    if adapter and bucket is not None and bucket >= adapter:
        said.append(f"overlap_comm off: the {adapter:,} adapter params reduce in one bucket "
                    "after backward, nothing to overlap")  # fmt: skip
        return False
    return bool(v["overlap_comm"])
