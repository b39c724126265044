"""QLoRA's 4-bit base: bitsandbytes' NF4 bytes a weight, the load peak of k-bit preparation, and
checkpoints quantized before training (docs/estimate.md, "LoRA and QLoRA")."""

from dojo.errors import EstimateError
from dojo.estimate.setup import Setup
from dojo.modelspec import ModelSpec

BF16 = 2
FP32 = 4
# bitsandbytes 0.50 NF4 with double quant, measured: 0.5 B packed + 8-bit absmax per 64 values +
# fp32 second-level constants per 256 blocks (docs/estimate.md, "LoRA and QLoRA"; QLoRA paper sec 3).
NF4_DQ_BYTES = 0.5159
NF4_BYTES = 0.5625  # without double quant: 0.5 B + an fp32 absmax per 64 values
BNB_4BIT = "bitsandbytes 4-bit"  # ModelSpec.quantization of a checkpoint bitsandbytes quantized


def nf4_bytes(spec: ModelSpec) -> float:
    """Bytes a quantized weight takes: without double quant only for a checkpoint saved so."""
    return NF4_BYTES if spec.quantization == BNB_4BIT and not spec.quant_double else NF4_DQ_BYTES


def kbit_load_peak(spec: ModelSpec, s: Setup) -> float:
    """Device bytes at the load of a QLoRA run under DeepSpeed ZeRO 0-2, before training.

    dojo's worker (like PEFT's guide) calls prepare_model_for_kbit_training on the 4-bit model
    on the GPU, which casts every parameter that is not 4-bit to fp32 one at a time
    (peft/utils/other.py: embeddings, head, norms, and an MoE model's fused experts and routers,
    which bitsandbytes does not quantize); the DeepSpeed engine casts them back to bf16 later,
    and ZeRO-1/2's __init__ empties the cache. So the device holds the NF4 weights + 4 B x the
    rest (+ the bf16 copy of the largest rest tensor while it is cast) once, at load. For a
    dense model that is below the training peak; for an MoE model, whose experts are most of
    it, it can be the peak nvidia-smi sees. Without DeepSpeed the fp32 weights stay and the
    training terms count them already; ZeRO-3 loads quantized models without zero.Init and is
    not counted here."""
    if s.run.model.method != "qlora" or not s.deepspeed or s.zero.stage == 3:
        return 0.0
    nf4 = nf4_bytes(spec)
    rest = spec.params - spec.quantizable_params
    largest_rest = max(spec.embedding_params, spec.num_experts * spec.expert_params * 2 // 3)
    return nf4 * spec.quantizable_params + FP32 * rest + BF16 * largest_rest


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
                f"{spec.name}: a checkpoint already bitsandbytes 4-bit is not estimated "
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
        f"{spec.name}: config.json has a {q} quantization_config; the estimate models "
        f"bf16 weights (NF4 for --method qlora), not {q} ones",
        hint=hint,
    )
