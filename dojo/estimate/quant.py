"""QLoRA's 4-bit base: bitsandbytes' NF4 bytes a weight, the load peak of k-bit preparation, and
checkpoints quantized before training (docs/estimate.md, "LoRA and QLoRA")."""

from dojo.errors import EstimateError
from dojo.estimate.setup import Setup
from dojo.modelspec import ModelSpec

BF16 = 2
FP32 = 4
# bitsandbytes 0.50 NF4 with double quant, measured: 0.5 B packed + 8-bit absmax per 64 values
# + fp32 second-level constants per 256 blocks (docs/estimate.md, "LoRA and QLoRA"; QLoRA paper
# sec 3).
NF4_DQ_BYTES = 0.5159
NF4_BYTES = 0.5625  # without double quant: 0.5 B + an fp32 absmax per 64 values
BNB_4BIT = "bitsandbytes 4-bit"  # ModelSpec.quantization of a checkpoint bitsandbytes quantized


def nf4_bytes(spec: ModelSpec) -> float:
    """Bytes a quantized weight takes: without double quant only for a checkpoint saved so."""
    return NF4_BYTES if spec.quantization == BNB_4BIT and not spec.quant_double else NF4_DQ_BYTES


def qlora_base_bytes(spec: ModelSpec, rest_bytes: int) -> float:
    """QLoRA's frozen base: NF4 decoder linears, ``rest_bytes`` a value for every other weight
    (embeddings, head, norms, biases; an MoE model's experts and routers)."""
    return nf4_bytes(spec) * spec.quantizable_params + rest_bytes * (
        spec.params - spec.quantizable_params
    )


def quant_stats_bytes(spec: ModelSpec, s: Setup) -> float:
    """QLoRA's quantization statistics (the absmax blocks and double quantization's constants)
    beyond the 0.5 B of packed values a weight."""
    return (
        (nf4_bytes(spec) - 0.5) * spec.quantizable_params if s.run.model.method == "qlora" else 0.0
    )


def kbit_load_peak(spec: ModelSpec, s: Setup) -> float:
    """Device bytes at the load of a QLoRA run under DeepSpeed, before training.

    transformers loads a quantized model without zero.Init and puts it on the process's GPU
    (the bitsandbytes quantizer's device_map), so every GPU holds the whole NF4 model and its
    16-bit rest (embeddings, head, norms, an MoE model's fused experts and routers, which
    bitsandbytes does not quantize) until the engine starts; ZeRO-3 partitions it only then.
    dojo leaves out PEFT's fp32 upcast of that rest under DeepSpeed (the engine casts it back to
    bf16), but TRL's ORPO and CPO (SimPO) trainers run PEFT's preparation themselves: the rest is
    fp32 there, with a bf16 copy of its largest tensor while it is cast. At ZeRO 0-2 this is
    below the training peak (the same weights, whole); at ZeRO-3 on several GPUs it can be the
    peak. Without DeepSpeed the training terms count the load's weights already."""
    if s.run.model.method != "qlora" or not s.deepspeed:
        return 0.0
    if not upcast_by_trl(s):
        return qlora_base_bytes(spec, BF16)
    largest_rest = max(spec.embedding_params, spec.num_experts * spec.expert_params * 2 // 3)
    return qlora_base_bytes(spec, FP32) + BF16 * largest_rest


def upcast_by_trl(s: Setup) -> bool:
    """TRL's ORPO and CPO trainers call PEFT's prepare_model_for_kbit_training on a 4-bit model."""
    return s.run.objective.objective in ("orpo", "simpo")


def load_note(s: Setup, excess_gib: float) -> str:
    """What the estimate says when the load peaks above training."""
    why = (
        "TRL's ORPO/CPO trainers upcast every weight that is not 4-bit to fp32 before DeepSpeed "
        "casts them back"
        if upcast_by_trl(s)
        else "every GPU holds the whole 4-bit model until ZeRO-3 partitions it (transformers "
        "loads quantized models without zero.Init)"
    )
    return f"the load peaks {excess_gib:.1f} GiB above training (in the reserve column): {why}"


def quantized_notes(spec: ModelSpec, s: Setup) -> list[str]:
    """A checkpoint quantized before training (config.json quantization_config): refused unless
    the estimate describes it. It models 16-bit weights, and for --method qlora the NF4 weights
    bitsandbytes makes at load; a bitsandbytes 4-bit checkpoint trained with --method qlora is
    that (transformers loads it with its own quantization_config), except at ZeRO-3, whose
    sharding of 4-bit weights needs the storage dojo sets when it quantizes."""
    q = spec.quantization
    if not q:
        return []
    method = s.run.model.method
    if q == BNB_4BIT and method == "qlora":
        if s.zero.stage == 3:
            raise EstimateError(
                f"--model {spec.name}: a checkpoint already bitsandbytes 4-bit is not estimated "
                "at --zero 3: ZeRO-3 shards 4-bit weights stored as bf16, which dojo sets up only "
                "when it quantizes the model itself",
                hint="use --zero 2 (or 0, none), or the unquantized model with --method qlora",
            )
        dq = "with" if spec.quant_double else "without"
        return [f"{spec.name} is already bitsandbytes 4-bit ({dq} double quant): estimated as "
                "QLoRA's 4-bit base"]  # fmt: skip
    hint = (
        "use --method qlora: a bitsandbytes 4-bit checkpoint trains as QLoRA"
        if q == BNB_4BIT
        else "use the unquantized model it was made from (its config.json, or a name "
        "like 8b); --method qlora quantizes that one with bitsandbytes"
    )
    raise EstimateError(
        f"--model {spec.name}: config.json has a {q} quantization_config; the estimate models "
        f"bf16 weights (NF4 for --method qlora), not {q} ones",
        hint=hint,
    )
