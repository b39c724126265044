"""Read a Hugging Face config.json into ModelSpec fields, checking every value it uses.

A config.json is user input: ``"hidden_size": "big"``, ``0``, ``-1``, ``true``, ``4096.5`` or
``1e30`` must each stop with one line naming the key and the file, never a ZeroDivisionError or a
silently wrong count. Mixture-of-experts layouts are read for the families whose module layout
this file knows (Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V2/V3); other MoE configs are refused
rather than counted as dense, and so are encoder-only and encoder-decoder models (dojo trains
decoder-only causal language models). A ``quantization_config`` is read into words
(``ModelSpec.quantization``); what it allows is the estimator's and the trainer's to decide.
"""

from typing import Any

from dojo.errors import EstimateError
from dojo.safe_load import clip, shorten

# model_type -> tie_word_embeddings when config.json omits it (each transformers config class's
# default; PretrainedConfig's own default is True).
_TIE_DEFAULT = {
    "llama": False,
    "mistral": False,
    "qwen2": False,
    "qwen3": False,
    "phi3": False,
    "mixtral": False,
    "qwen2_moe": False,
    "qwen3_moe": False,
    "deepseek_v2": False,
    "deepseek_v3": False,
}
# Decoder-layer RMSNorms: Gemma-2/3 add pre/post-feedforward norms around the usual two.
_NORMS_PER_LAYER = {"gemma2": 4, "gemma3": 4, "gemma3_text": 4}
# Per-head RMSNorm on q and k (weight of head_dim each).
_QK_NORM = {"qwen3", "gemma3", "gemma3_text", "olmo2", "qwen3_moe"}
MOE_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3")
ENCODER_TYPES = frozenset({
    "albert", "bert", "big_bird", "camembert", "convbert", "data2vec-text", "deberta",
    "deberta-v2", "distilbert", "electra", "ernie", "esm", "eurobert", "flaubert", "fnet",
    "funnel", "ibert", "layoutlm", "longformer", "luke", "megatron-bert", "mobilebert",
    "modernbert", "mpnet", "mra", "nezha", "nomic_bert", "nystromformer", "rembert", "roberta",
    "roberta-prelayernorm", "roc_bert", "roformer", "squeezebert", "tapas", "xlm", "xlm-roberta",
    "xlm-roberta-xl", "xmod", "yoso",
})  # fmt: skip
"""Encoder-only model types (bidirectional attention, a masked-LM head): transformers 5.24's
MODEL_FOR_MASKED_LM_MAPPING_NAMES. Those that also have a causal-LM class there (BERT's
BertLMHeadModel, ...) are still encoders: the causal variant is a decoder built from their
layers for an encoder-decoder."""
ENCODER_DECODER_TYPES = frozenset({
    "bart", "bigbird_pegasus", "blenderbot", "blenderbot-small", "encoder-decoder", "fsmt", "led",
    "longt5", "m2m_100", "marian", "mbart", "moonshine", "mt5", "mvp", "nllb-moe", "pegasus",
    "pegasus_x", "plbart", "pop2piano", "prophetnet", "seamless_m4t", "seamless_m4t_v2",
    "speech-encoder-decoder", "speech_to_text", "speecht5", "switch_transformers", "t5",
    "t5gemma", "umt5", "vision-encoder-decoder", "whisper",
})  # fmt: skip
"""Sequence-to-sequence model types (transformers 5.24's MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM and
SPEECH_SEQ_2_SEQ mappings, less the audio-LLMs that are decoders with an encoder in front). A
config.json with ``"is_encoder_decoder": true`` is one too, whatever its type."""
# Upper bounds: 10x past the largest published model, far below what overflows the estimator.
_MAX = {
    "dim": 1 << 20,  # hidden / intermediate / head widths (largest real: ~50k)
    "layers": 10_000,
    "heads": 1 << 16,
    "vocab": 1 << 24,
    "experts": 1 << 16,
}


class _Reader:
    """Typed, bounded access to one config dict; every error names the key and the source."""

    def __init__(self, cfg: dict[str, Any], name: str, source: str) -> None:
        self.cfg, self.name, self.source = cfg, clip(name, 300), clip(source, 300)

    def fail(self, message: str) -> EstimateError:
        return EstimateError(
            f"--model {self.name}: {message} in {self.source}",
            hint="fix that value in config.json (a model repo's own config.json is valid)",
        )

    def has(self, key: str) -> bool:
        return self.cfg.get(key) is not None

    def get_int(self, key: str, kind: str, *, default: int | None = None, minimum: int = 1) -> int:
        if not self.has(key):
            if default is None:
                raise EstimateError(
                    f"--model {self.name}: {self.source} has no {key!r}",
                    hint="point --model at a decoder-only model's config.json "
                    "(Llama, Qwen, Mistral, Gemma, Mixtral, DeepSeek)",
                )
            return default
        value = self.cfg[key]
        top = _MAX[kind]
        bad = f"{key} {shorten(value)} must be a whole number {minimum}..{top:,}"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(bad)
        if isinstance(value, float) and not value.is_integer():  # also NaN and inf
            raise self.fail(bad)
        if not minimum <= value <= top:
            raise self.fail(bad)
        return int(value)

    def first(self, keys: tuple[str, ...], kind: str) -> int:
        for key in keys:
            if self.has(key):
                return self.get_int(key, kind)
        return self.get_int(keys[0], kind)  # raises "has no"

    def get_bool(self, key: str, default: bool) -> bool:
        value = self.cfg.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):  # "false" is truthy: refuse rather than guess
            raise self.fail(f"{key} {shorten(value)} must be true or false")
        return value

    def get_str(self, key: str, default: str) -> str:
        value = self.cfg.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self.fail(f"{key} {shorten(value)} must be a string")
        return value


def spec_fields(config: dict[str, Any], name: str, source: str) -> dict[str, Any]:
    """ModelSpec keyword arguments (all but ``name``) from a config.json dict."""
    cfg = config
    text = config.get("text_config")
    if "hidden_size" not in cfg and text is not None:
        if not isinstance(text, dict):
            raise _Reader(cfg, name, source).fail(f"text_config {shorten(text)} must be an object")
        # Multimodal wrappers (Gemma-3, Llava, Mllama) keep the language model in text_config.
        cfg = {**{k: v for k, v in config.items() if k != "text_config"}, **text}
    r = _Reader(cfg, name, source)
    model_type = r.get_str("model_type", "llama")
    _refuse_non_decoder(r, model_type)
    h = r.first(("hidden_size", "n_embd", "d_model"), "dim")
    layers = r.first(("num_hidden_layers", "n_layer", "num_layers"), "layers")
    heads = r.first(("num_attention_heads", "n_head"), "heads")
    vocab = r.get_int("vocab_size", "vocab")
    kv = r.get_int("num_key_value_heads", "heads", default=heads)
    if heads % kv:
        raise r.fail(f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv}")
    if r.has("head_dim"):
        head_dim = r.get_int("head_dim", "dim")
    elif h % heads:
        raise r.fail(f"hidden_size {h} is not a multiple of num_attention_heads {heads}")
    else:
        head_dim = h // heads
    inter_key = "intermediate_size" if r.has("intermediate_size") else "n_inner"
    inter = r.get_int(inter_key, "dim", default=4 * h)
    attn_bias = r.get_bool("attention_bias", False)
    fields: dict[str, Any] = {
        "hidden_size": h,
        "num_layers": layers,
        "num_heads": heads,
        "num_kv_heads": kv,
        "head_dim": head_dim,
        "intermediate_size": inter,
        "vocab_size": vocab,
        "tied_embeddings": r.get_bool("tie_word_embeddings", _TIE_DEFAULT.get(model_type, True)),
        "model_type": model_type,
        "qkv_bias": (model_type == "qwen2") or attn_bias,
        "o_bias": attn_bias,
        "mlp_bias": r.get_bool("mlp_bias", False),
        "norms_per_layer": _NORMS_PER_LAYER.get(model_type, 2),
        "qk_norm": model_type in _QK_NORM,
        **_quantization(r, config),
        "max_positions": _max_positions(r),
    }
    if r.has("kv_lora_rank"):
        fields.update(_mla(r, heads, attn_bias))
    fields.update(_moe(r, model_type, layers, inter, attn_bias))
    return fields


def _max_positions(r: _Reader) -> int:
    """max_position_embeddings, or 0: it bounds nothing dojo computes (a longer --seq-len is a
    note), so an odd value is read as "not said" rather than refused."""
    value = r.cfg.get("max_position_embeddings")
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 1 << 40:
        return 0
    return value


def _refuse_non_decoder(r: _Reader, model_type: str) -> None:
    """Encoder-only and encoder-decoder models, before any of their keys is read as a decoder's
    (a T5 or BERT config.json has the widths dojo's count reads, and would be counted as one)."""
    if model_type in ENCODER_TYPES:
        kind = "an encoder-only (masked-LM) model"
    elif model_type in ENCODER_DECODER_TYPES or r.cfg.get("is_encoder_decoder") is True:
        kind = "an encoder-decoder (sequence-to-sequence) model"
    else:
        return
    raise EstimateError(
        f"--model {r.name}: model_type {model_type!r} in {r.source} is {kind}; dojo estimates and "
        "trains decoder-only causal language models",
        hint="use a decoder-only model (Llama, Qwen, Mistral, Gemma, Phi, DeepSeek, ...)",
    )


def _quantization(r: _Reader, config: dict[str, Any]) -> dict[str, Any]:
    """``quantization`` in words from config.json's quantization_config (GPTQ, AWQ, a checkpoint
    bitsandbytes quantized, FP8, ...): its quant_method and bit width."""
    q = config.get("quantization_config")
    if q is None:
        return {}
    if not isinstance(q, dict):
        raise r.fail(f"quantization_config {shorten(q)} must be an object")
    method = q.get("quant_method")
    words = clip(str(method), 40) if isinstance(method, str) and method else "unknown method"
    if words == "bitsandbytes" or (method is None and ("load_in_4bit" in q or "load_in_8bit" in q)):
        words = "bitsandbytes"
        bits = 4 if q.get("load_in_4bit") is True else 8 if q.get("load_in_8bit") is True else 0
        double = q.get("bnb_4bit_use_double_quant") is True
        return {
            "quantization": f"bitsandbytes {bits}-bit" if bits else words,
            "quant_double": double,
        }
    width = q.get("bits", q.get("w_bit"))  # GPTQ's and AWQ's key
    if isinstance(width, int) and not isinstance(width, bool) and 0 < width <= 64:
        words += f" {width}-bit"
    return {"quantization": words}


def _mla(r: _Reader, heads: int, attn_bias: bool) -> dict[str, Any]:
    """DeepSeek multi-head latent attention: low-rank q (optional) and kv projections."""
    nope = r.get_int("qk_nope_head_dim", "dim")
    rope = r.get_int("qk_rope_head_dim", "dim")
    return {
        "num_kv_heads": heads,  # k and v are expanded per head from the latent
        "head_dim": nope + rope,
        "q_lora_rank": r.get_int("q_lora_rank", "dim", default=0, minimum=0),
        "kv_lora_rank": r.get_int("kv_lora_rank", "dim"),
        "qk_rope_head_dim": rope,
        "v_head_dim": r.get_int("v_head_dim", "dim"),
        "qkv_bias": attn_bias,
        "o_bias": attn_bias,
    }


def _moe(r: _Reader, model_type: str, layers: int, inter: int, attn_bias: bool) -> dict[str, Any]:
    key = next(
        (k for k in ("n_routed_experts", "num_local_experts", "num_experts") if r.has(k)), ""
    )
    experts = r.get_int(key, "experts", minimum=0) if key else 0
    if experts == 0:
        return {}
    if model_type not in MOE_TYPES:
        raise EstimateError(
            f"--model {r.name}: {key} {experts} in {r.source}: the mixture-of-experts layout of "
            f"model_type {model_type!r} is not known, and counting it as dense would be wrong",
            hint=f"supported MoE model types: {', '.join(MOE_TYPES)}",
        )
    top_k = r.get_int("num_experts_per_tok", "experts")
    if top_k > experts:
        raise r.fail(f"num_experts_per_tok {top_k} is more than {key} {experts}")
    if model_type == "mixtral":  # every layer MoE, each expert as wide as intermediate_size
        return _moe_fields(experts, top_k, inter, 0, False, layers)
    width = r.get_int("moe_intermediate_size", "dim")
    if model_type.startswith("deepseek"):
        dense = r.get_int("first_k_dense_replace", "layers", minimum=0)
        shared = r.get_int("n_shared_experts", "experts", minimum=0)
        if dense > layers:
            raise r.fail(f"first_k_dense_replace {dense} is more than num_hidden_layers {layers}")
        return _moe_fields(experts, top_k, width, shared * width, False, layers - dense)
    # Qwen2/3-MoE: layer i is MoE unless listed in mlp_only_layers or off the sparse step.
    step = r.get_int("decoder_sparse_step", "layers", default=1)
    only = r.cfg.get("mlp_only_layers") or []
    if not isinstance(only, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in only
    ):
        raise r.fail(f"mlp_only_layers {shorten(only)} must be a list of layer numbers")
    moe_layers = sum(1 for i in range(layers) if i not in only and (i + 1) % step == 0)
    shared = 0
    if model_type == "qwen2_moe":
        shared = r.get_int("shared_expert_intermediate_size", "dim", minimum=0)
    fields = _moe_fields(experts, top_k, width, shared, shared > 0, moe_layers)
    if model_type == "qwen2_moe":
        fields["qkv_bias"] = r.get_bool("qkv_bias", True)  # transformers 5 Qwen2MoeConfig default
        fields["o_bias"] = False
    else:
        fields["qkv_bias"] = fields["o_bias"] = attn_bias
    return fields


def _moe_fields(
    experts: int, top_k: int, width: int, shared: int, shared_gate: bool, moe_layers: int
) -> dict[str, Any]:
    return {
        "num_experts": experts,
        "experts_per_token": top_k,
        "expert_intermediate_size": width,
        "shared_intermediate_size": shared,
        "shared_expert_gate": shared_gate,
        "moe_layers": moe_layers,
    }
