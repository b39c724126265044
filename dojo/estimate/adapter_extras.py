"""What --modules-to-save and --dora add to a LoRA/QLoRA run (PEFT 0.21).

--modules-to-save NAME: PEFT's ModulesToSaveWrapper keeps the original module frozen and trains
a deep copy of it, so each matched module adds its params as trainable params (gradients and
optimizer states like the adapters') and stores a second copy. A module matches when its dotted
name ends with NAME (peft/utils/other.py ``_set_trainable``: ``key.endswith(target_key)``), so
``norm`` matches every norm and ``proj`` every projection. dojo's worker keeps a tied head tied
(``ensure_weight_tying``): the embedding and the head then train one shared copy.

--dora: PEFT's DoraLinearLayer (peft/tuners/lora/dora.py) on every adapted nn.Linear, measured on
the CPU (bench/adapter_extras_cpu.py: tiny Llama, saved-tensor hooks and the process's peak RSS;
PEFT 0.21, torch 2.13):
- a trainable magnitude vector, one value per output feature;
- saved for backward per token, beside LoRA's: the base layer's output (bf16) and the LoRA
  branch's output (the adapters' dtype), one value each per output feature;
- while each adapted layer runs forward (and again in its recompute under checkpointing), the
  weight norm ||W + s B A|| made whole: an identity in x in (``get_lora_weight``'s x_eye, in the
  adapters' dtype) and three weight-sized 16-bit blocks (B A, s B A, W + s B A; 16 B a weight
  value for fp32 adapters without autocast), plus the bf16 dequantized weight under QLoRA.
"""

from dojo.estimate.setup import Setup
from dojo.modelspec import ModelSpec
from dojo.run.groups.lora import names as module_names

BF16 = 2
FP32 = 4

# Bytes per weight value of the weight-norm transient (x_eye aside), measured on the CPU.
_NORM_BLOCKS_BF16 = 6
_NORM_BLOCKS_FP32 = 16


def _modules(spec: ModelSpec) -> list[tuple[tuple[str, ...], int, int]]:
    """(dotted names, params, copies) of the modules --modules-to-save can match, one row per
    module kind: the embedding, the head, the final norm and each decoder layer's linears and
    norms (transformers' Llama names, which Qwen, Mistral, Gemma and most decoders share). A
    tied head is one row with the embedding: dojo keeps the pair tied (PEFT's
    ensure_weight_tying), so either name, or both, trains one copy (measured on the CPU)."""
    h, layers, vh = spec.hidden_size, spec.num_layers, spec.vocab_size * spec.hidden_size
    rows: list[tuple[tuple[str, ...], int, int]] = (
        [(("model.embed_tokens", "lm_head"), vh, 1)]
        if spec.tied_embeddings
        else [(("model.embed_tokens",), vh, 1), (("lm_head",), vh, 1)]
    )
    rows += [
        (("model.norm",), h, 1),
        (("model.layers.0.input_layernorm",), h, layers),
        (("model.layers.0.post_attention_layernorm",), h, layers),
    ]
    for count, _, linears in spec.layer_kinds():
        for name, a, b, bias in linears:
            rows.append(((f"model.layers.0.{name}",), a * b + (b if bias else 0), count))
    return rows


def _matched(
    spec: ModelSpec, names: tuple[str, ...]
) -> tuple[list[tuple[tuple[str, ...], int, int]], tuple[str, ...]]:
    """The module rows ``names`` match (each once), and the names that match none."""
    given = module_names(names)
    rows = _modules(spec)
    hit = [r for r in rows if any(m.endswith(n) for n in given for m in r[0])]
    unmatched = tuple(n for n in given if not any(m.endswith(n) for r in rows for m in r[0]))
    return hit, unmatched


def saved_modules(spec: ModelSpec, names: tuple[str, ...]) -> tuple[int, int, tuple[str, ...]]:
    """(trainable params, largest trainable tensor, names matching no module dojo counts) of
    --modules-to-save ``names``."""
    hit, unmatched = _matched(spec, names)
    return sum(p * c for _, p, c in hit), max((p for _, p, _ in hit), default=0), unmatched


def modules_to_save_notes(spec: ModelSpec, s: Setup) -> list[str]:
    """What --modules-to-save adds, and any name that matches no module the count knows."""
    if s.run.model.method == "full" or not s.lora.modules_to_save:
        return []
    saved, _, unmatched = saved_modules(spec, s.lora.modules_to_save)
    given = ",".join(module_names(s.lora.modules_to_save))
    out = []
    if saved:
        out.append(f"--modules-to-save {given}: {saved:,} params trained in full (a trainable "
                   "copy beside the frozen original), counted with the adapters")  # fmt: skip
    if unmatched:
        out.append(f"--modules-to-save {','.join(unmatched)}: matches no module the estimate "
                   "counts (embed_tokens, lm_head, norm, the layers' linears and norms); not "
                   "counted")  # fmt: skip
    return out


def head_trains(spec: ModelSpec, s: Setup) -> bool:
    """The LM head gets a weight gradient: full fine-tuning, or --modules-to-save naming the
    head (or, tied, the embedding)."""
    if s.run.model.method == "full":
        return True
    hit, _ = _matched(spec, s.lora.modules_to_save)
    return any("lm_head" in names for names, _, _ in hit)


def _dora_targets(spec: ModelSpec, s: Setup) -> list[tuple[int, int, int]]:
    """(layers, in, out) of each nn.Linear DoRA decomposes (fused experts get plain LoRA); none
    without --dora or with full fine-tuning."""
    if not s.lora.dora or s.run.model.method == "full":
        return []
    names = spec.adapted_names(s.lora.target_names)
    return [(c, a, b) for c, _, lin in spec.layer_kinds() for n, a, b, _ in lin if n in names]


def dora_params(spec: ModelSpec, s: Setup) -> int:
    """DoRA's magnitude vectors: one trainable value per output feature of each target."""
    return sum(c * b for c, _, b in _dora_targets(spec, s))


def dora_saved_per_token(spec: ModelSpec, s: Setup, a: int) -> int:
    """Bytes per token per layer DoRA saves beside LoRA: the base output (bf16) and the LoRA
    branch's output (``a`` B, its dtype) per output feature of every target in the layer."""
    if not _dora_targets(spec, s):
        return 0
    names = spec.adapted_names(s.lora.target_names)
    return (BF16 + a) * sum(b for n, _, b, _ in spec.linears() if n in names)


def dora_norm_transient(spec: ModelSpec, s: Setup) -> int:
    """The largest target's weight-norm transient (see the module docstring)."""
    eye = FP32 if s.fp32_adapters else BF16
    per_weight = _NORM_BLOCKS_FP32 if s.fp32_adapters and not s.autocast else _NORM_BLOCKS_BF16
    if s.run.model.method == "qlora":
        per_weight += BF16  # dequantize_module_weight: the 4-bit weight as bf16
    return max((eye * a * a + per_weight * a * b for _, a, b in _dora_targets(spec, s)), default=0)
