"""Model shapes and exact parameter counts, from a name, a size alias, a config.json or a Hub id.

A config.json is read with ``dojo.safe_load`` (never transformers) and every field is checked
(dojo.hf_config); a Hub id gets only its config.json, through huggingface_hub (``dojo.hub``: token,
cache, offline mode, revision). Example: ``resolve_model("7b").params == 6_738_415_616``.
"""

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dojo.architectures import ARCHITECTURES, SIZE_ALIASES
from dojo.errors import EstimateError
from dojo.safe_load import clip, shorten

_MAX_CONFIG_BYTES = 16 << 20  # the largest real ones (big id2label tables) are ~1 MB


Linear = tuple[str, int, int, bool]
"""(name, in_features, out_features, has_bias) of one nn.Linear."""


SOFTCAP_MODEL_TYPES = ("gemma2",)
"""Models whose attention soft-caps its logits (config attn_logit_softcapping): eager attention
for them (transformers' default; SDPA and FlashAttention by offsets cannot), and eager's tanh
output in the estimate."""

LORA_FUSED_EXPERT_TYPES = ("mixtral", "qwen3_moe", "deepseek_v2", "deepseek_v3")
"""MoE model types whose fused experts and router PEFT 0.21's "all-linear" adapts under
transformers 5 (each 3-D expert parameter and the router weight through a ParamWrapper); it
leaves Qwen2-MoE's alone. For these, the MLP names (gate_proj, up_proj, down_proj) go to the
fused experts, so the dense MLPs and the shared experts of DeepSeek get no adapter. Checked on
the CPU on tiny models of each family (bench/moe_saved_cpu.py prints what Qwen3-MoE, Qwen2-MoE
and Mixtral adapt)."""

_MLP_NAMES = ("gate_proj", "up_proj", "down_proj")

_LAYER_CLASS = {"gemma3_text": "Gemma3DecoderLayer", "gpt_neox": "GPTNeoXLayer"}
"""model_type -> decoder-layer class where the name is not ``{ModelType}DecoderLayer``."""


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer: Llama-family layout (gated MLP, RMSNorm, RoPE), optionally with
    mixture-of-experts MLPs (Mixtral, Qwen2/3-MoE, DeepSeek-V2/V3) and DeepSeek's latent attention.

    MoE experts are counted as transformers 5 builds them: one fused module per layer holding every
    expert's gate/up/down (3 x hidden x expert_intermediate each), plus a router (E x hidden).
    """

    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    """Query/key width per head (DeepSeek MLA: qk_nope_head_dim + qk_rope_head_dim)."""
    intermediate_size: int
    """Width of the dense MLP (the dense layers of an MoE model; unused when every layer is MoE)."""
    vocab_size: int
    tied_embeddings: bool
    model_type: str = "llama"
    qkv_bias: bool = False
    """Bias on q/k/v projections (Qwen2 always; Llama when attention_bias=true)."""
    o_bias: bool = False
    """Bias on o_proj (Llama attention_bias=true)."""
    mlp_bias: bool = False
    norms_per_layer: int = 2
    qk_norm: bool = False
    # --- mixture of experts (0 = a dense model) ---
    num_experts: int = 0
    """Routed experts in each MoE layer."""
    experts_per_token: int = 0
    """Routed experts each token goes through (top-k)."""
    expert_intermediate_size: int = 0
    shared_intermediate_size: int = 0
    """Width of the always-on shared expert MLP (DeepSeek n_shared_experts x moe_intermediate)."""
    shared_expert_gate: bool = False
    """Qwen2-MoE's sigmoid gate on the shared expert (Linear hidden -> 1)."""
    moe_layers: int = 0
    """How many of the num_layers layers have an MoE MLP; the others have the dense MLP."""
    # --- DeepSeek multi-head latent attention (kv_lora_rank 0 = ordinary attention) ---
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # --- a checkpoint quantized before training (config.json quantization_config) ---
    quantization: str = ""
    """Its method and bit width in words ("gptq 4-bit", "bitsandbytes 4-bit", "fp8"); "" for
    unquantized weights."""
    quant_double: bool = False
    """bitsandbytes 4-bit: the absmax constants quantized again (bnb_4bit_use_double_quant)."""
    max_positions: int = 0
    """config.json's max_position_embeddings: the context the model was made for; 0 when it
    does not say (the built-in architectures)."""

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0 and self.moe_layers > 0

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    def attention_linears(self) -> tuple[Linear, ...]:
        h = self.hidden_size
        if self.kv_lora_rank:  # DeepSeek MLA (modeling_deepseek_v3.DeepseekV3Attention)
            nope = self.head_dim - self.qk_rope_head_dim
            q: tuple[Linear, ...] = (
                (
                    ("q_a_proj", h, self.q_lora_rank, self.qkv_bias),
                    ("q_b_proj", self.q_lora_rank, self.q_dim, False),
                )
                if self.q_lora_rank
                else (("q_proj", h, self.q_dim, False),)
            )
            return (
                *q,
                ("kv_a_proj_with_mqa", h, self.kv_lora_rank + self.qk_rope_head_dim, self.qkv_bias),
                ("kv_b_proj", self.kv_lora_rank, self.num_heads * (nope + self.v_head_dim), False),
                ("o_proj", self.num_heads * self.v_head_dim, h, self.o_bias),
            )
        return (
            ("q_proj", h, self.q_dim, self.qkv_bias),
            ("k_proj", h, self.kv_dim, self.qkv_bias),
            ("v_proj", h, self.kv_dim, self.qkv_bias),
            ("o_proj", self.q_dim, h, self.o_bias),
        )

    def _mlp(self, width: int) -> tuple[Linear, ...]:
        h = self.hidden_size
        return (
            ("gate_proj", h, width, self.mlp_bias),
            ("up_proj", h, width, self.mlp_bias),
            ("down_proj", width, h, self.mlp_bias),
        )

    def layer_kinds(self) -> tuple[tuple[int, bool, tuple[Linear, ...]], ...]:
        """(how many layers, is_moe, their nn.Linear modules) per kind of decoder layer.

        In an MoE layer the routed experts are one fused module (not nn.Linear): the linears
        there are attention plus the shared expert, if any."""
        dense = self.num_layers - self.moe_layers
        kinds = []
        if dense:
            kinds.append(
                (dense, False, self.attention_linears() + self._mlp(self.intermediate_size))
            )
        if self.moe_layers:
            shared = (
                self._mlp(self.shared_intermediate_size) if self.shared_intermediate_size else ()
            )
            gate: tuple[Linear, ...] = (
                (("shared_expert_gate", self.hidden_size, 1, False),)
                if self.shared_expert_gate
                else ()
            )
            kinds.append((self.moe_layers, True, self.attention_linears() + shared + gate))
        return tuple(kinds)

    def linears(self) -> tuple[Linear, ...]:
        """nn.Linear layers of the most common decoder layer (the MoE one in an MoE model)."""
        return max(self.layer_kinds(), key=lambda k: k[0])[2]

    @property
    def expert_params(self) -> int:
        """One routed expert: gate, up and down, no bias."""
        return 3 * self.hidden_size * self.expert_intermediate_size

    def _layer_params(self, moe: bool, linears: tuple[Linear, ...]) -> int:
        norms = self.norms_per_layer * self.hidden_size
        norms += 2 * self.head_dim if self.qk_norm else 0
        norms += self.q_lora_rank + self.kv_lora_rank  # MLA's q_a / kv_a RMSNorms
        own = sum(a * b + (b if bias else 0) for _, a, b, bias in linears) + norms
        if moe:  # router (E x hidden) + the fused experts
            own += self.num_experts * (self.hidden_size + self.expert_params)
        return own

    @property
    def layer_params(self) -> int:
        """Params of the most common decoder layer."""
        count, moe, linears = max(self.layer_kinds(), key=lambda k: k[0])
        return self._layer_params(moe, linears)

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def head_params(self) -> int:
        """lm_head weights that are not shared with the embedding."""
        return 0 if self.tied_embeddings else self.vocab_size * self.hidden_size

    @property
    def params(self) -> int:
        """Exact parameter count as PyTorch counts it (a tied head counted once; every expert:
        this is what memory holds)."""
        final_norm = self.hidden_size
        layers = sum(n * self._layer_params(moe, lin) for n, moe, lin in self.layer_kinds())
        return self.embedding_params + self.head_params + layers + final_norm

    @property
    def active_params(self) -> int:
        """Params one token goes through: only experts_per_token of the routed experts (how MoE
        models are quoted: Mixtral-8x7B 12.9B active of 46.7B). Equals params when dense."""
        idle = max(0, self.num_experts - self.experts_per_token)
        return self.params - self.moe_layers * idle * self.expert_params

    @property
    def active_intermediate_size(self) -> int:
        """MLP width one token passes through in its widest layer: top-k experts plus the shared
        expert in MoE layers, intermediate_size in dense ones. Activations scale with this."""
        widths = [
            self.experts_per_token * self.expert_intermediate_size + self.shared_intermediate_size
            if moe
            else self.intermediate_size
            for _, moe, _ in self.layer_kinds()
        ]
        return max(widths, default=self.intermediate_size)  # no layers: no MLP width to pick

    @property
    def quantizable_params(self) -> int:
        """Weights bitsandbytes turns into 4-bit: every decoder-layer nn.Linear weight (fused
        expert tensors and routers are plain parameters, not nn.Linear)."""
        return sum(n * sum(a * b for _, a, b, _ in lin) for n, _, lin in self.layer_kinds())

    @property
    def largest_layer_params(self) -> int:
        """Largest single module's own params (DeepSpeed's ZeRO-3 ``largest_layer_params``):
        the embedding, the biggest linear, or an MoE layer's fused experts."""
        biggest_linear = max(
            a * b + (b if bias else 0) for _, _, lin in self.layer_kinds() for _, a, b, bias in lin
        )
        experts = self.num_experts * self.expert_params if self.is_moe else 0
        return max(self.embedding_params, biggest_linear, experts)

    @property
    def decoder_layer_class(self) -> str:
        """transformers' decoder-layer class name: ``{ModelType}DecoderLayer`` for nearly every
        decoder (LlamaDecoderLayer, Qwen2DecoderLayer, Gemma2DecoderLayer, DeepseekV3DecoderLayer),
        with the few exceptions named. The worker checks it against the loaded model."""
        if self.model_type in _LAYER_CLASS:
            return _LAYER_CLASS[self.model_type]
        return "".join(p[:1].upper() + p[1:] for p in self.model_type.split("_")) + "DecoderLayer"

    def lora_params(self, rank: int, targets: tuple[str, ...] | None = None) -> int:
        """Trainable LoRA params: r * (in + out) per adapted nn.Linear (A: r x in, B: out x r),
        plus, for "all-linear" (targets None), the fused experts' and the router's adapters of
        the model types PEFT adapts them in (``lora_adapts_experts``). Named target modules
        match nn.Linear only, so fused experts get none."""
        total = 0
        for count, _, lin in self.layer_kinds():
            names = self.adapted_names(targets)
            total += count * sum(rank * (a + b) for n, a, b, _ in lin if n in names)
        if targets is None and self.lora_adapts_experts:
            total += self.moe_layers * self.expert_lora_params(rank)
        return total

    def adapted_names(self, targets: tuple[str, ...] | None) -> set[str]:
        """The nn.Linear names LoRA adapts: ``targets`` (--lora-targets), or for None
        ("all-linear") ``all_linear_names``."""
        return self.all_linear_names() if targets is None else set(targets)

    def all_linear_names(self) -> set[str]:
        """The nn.Linear names PEFT's "all-linear" adapts: every one of the decoder layers, less
        the MLP names where they are sent to the fused experts instead."""
        names = {n for _, _, lin in self.layer_kinds() for n, *_ in lin}
        return names - set(_MLP_NAMES) if self.lora_adapts_experts else names

    @property
    def lora_adapts_experts(self) -> bool:
        """PEFT's "all-linear" puts adapters on this model's fused experts (and router)."""
        return self.is_moe and self.model_type in LORA_FUSED_EXPERT_TYPES

    def expert_lora_params(self, rank: int) -> int:
        """One MoE layer's adapters on its fused experts and router (PEFT 0.21 ParamWrapper):
        gate_up_proj [E, 2i, h] gets A [2rE, h] and B [2i, 2rE] (gate and up each keep their
        rank), down_proj [E, h, i] A [rE, i] and B [h, rE], the router [E, h] A [r, h] and
        B [E, r]: rE(3h + 5i) + r(h + E) (bench/moe_saved_cpu.py prints the shapes)."""
        e, h, i = self.num_experts, self.hidden_size, self.expert_intermediate_size
        return rank * e * (3 * h + 5 * i) + rank * (h + e)

    def expert_lora_largest(self, rank: int) -> int:
        """The largest single adapter tensor on the fused experts (gate_up's A or B)."""
        e, h, i = self.num_experts, self.hidden_size, self.expert_intermediate_size
        return 2 * rank * e * max(h, 2 * i)


def from_hf_config(
    config: dict[str, Any], name: str, source: str = "config.json", *, ref: str | None = None
) -> ModelSpec:
    """Build a ModelSpec from a Hugging Face config.json dict (text_config nesting handled).
    Every field read is checked; errors name ``ref`` (what --model got) and ``source`` (the file)."""
    from dojo.hf_config import spec_fields

    return ModelSpec(name=name, **spec_fields(config, ref or name, source))


def builtin_name(ref: str) -> str | None:
    """The built-in architecture a size alias (7b) or an architecture name (llama-3.1-8b) names,
    else None."""
    key = ref.strip().lower()
    arch = SIZE_ALIASES.get(key, key)
    return arch if arch in ARCHITECTURES else None


def known_names() -> list[str]:
    """Every name --model accepts without a file: size aliases, then architectures."""
    return list(SIZE_ALIASES) + list(ARCHITECTURES)


def resolve_model(
    ref: str, *, revision: str | None = None, fallback: bool = True, for_train: bool = False
) -> ModelSpec:
    """A size alias, a named architecture, a config.json / model folder, or a Hub id -> ModelSpec.

    A Hub id comes from the Hugging Face cache or the Hub at ``revision``; when it is in neither
    (offline) and ``fallback``, a built-in architecture of the same name stands in, with a note on
    stderr naming it. ``for_train``: hints say to download the whole model, not config.json."""
    key = ref.strip().lower()
    if revision is not None and not is_hub_id(ref):
        raise EstimateError(
            f"--revision {clip(revision)} applies to a Hub id (org/name); --model {clip(ref)} is not one",
            hint="drop --revision, or give the model as a Hub id",
        )
    path = Path(ref).expanduser()
    # A model folder (or config.json) on disk wins over a built-in name it shares, as it does in
    # from_pretrained, which is what dojo train loads: ./Llama-3.2-1B is that folder.
    arch = builtin_name(ref)
    if arch and not _is_model_on_disk(path):
        return from_hf_config(ARCHITECTURES[arch], arch)
    if _present(path, ref):
        return _from_path(path, ref)
    if _looks_like_path(ref):
        raise EstimateError(
            f"--model {clip(ref, 300)}: no such file or folder",
            hint="give a config.json, a model folder that contains one, or a name like 7b",
        )
    if is_hub_id(ref):
        return _from_hub(ref.strip(), revision, fallback=fallback, for_train=for_train)
    close = difflib.get_close_matches(key, known_names(), n=3, cutoff=0.5)
    did = f"did you mean {', '.join(close)}? " if close else ""
    raise EstimateError(
        f"--model {shorten(ref)}: unknown model",
        hint=f"{did}known: {', '.join(known_names())}; or a config.json path or Hub id (org/name)",
    )


_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def is_hub_id(ref: str) -> bool:
    """org/name, and not something on disk (the Hub caps names at 96 characters)."""
    return len(ref) <= 200 and bool(_HUB_ID.fullmatch(ref.strip())) and not _looks_like_path(ref)


def _from_hub(repo_id: str, revision: str | None, *, fallback: bool, for_train: bool) -> ModelSpec:
    from dojo import _output, hub

    try:
        file = hub.config_file(repo_id, revision, for_train=for_train)
    except hub.HubUnreachable as e:
        builtin = hub.builtin_for(repo_id) if fallback else None
        if builtin is None:
            raise
        at = f"{repo_id}@{revision}" if revision else repo_id
        _output.info(
            f"note: {at} is not in the local Hugging Face cache and {e.why}: using the built-in "
            f"{builtin} (the same architecture, matched by name); "
            f"`hf download {repo_id} config.json` while online to use the repo's own"
        )
        return from_hf_config(ARCHITECTURES[builtin], builtin)
    at = f"{repo_id}@{revision}" if revision else repo_id
    data = _load_config(file, what=f"--model {at}: {clip(str(file), 300)}")
    return from_hf_config(data, repo_id, str(file), ref=repo_id)


def _present(path: Path, ref: str) -> bool:
    """Something is at ``path``: a dangling or looping link counts (it is reported, not called
    missing); a name too long for the filesystem is an error, not an OSError traceback."""
    try:
        return path.exists() or path.is_symlink()
    except ValueError:  # an embedded NUL byte (from a YAML config): not a path
        return False
    except OSError as e:
        raise EstimateError(
            f"--model {clip(ref)}: not a usable path ({e.strerror})",
            hint="give a config.json, a model folder that contains one, or a name like 7b",
        ) from None


def _is_model_on_disk(path: Path) -> bool:
    """A config.json file, or a folder holding one (not any folder that shares a built-in name)."""
    try:
        return path.is_file() or (path / "config.json").is_file()
    except (OSError, ValueError):
        return False


def _looks_like_path(ref: str) -> bool:
    return ref.startswith((".", "/", "~")) or ref.endswith((".json", "/")) or ref.count("/") > 1


def _from_path(path: Path, ref: str) -> ModelSpec:
    file = path / "config.json" if path.is_dir() else path
    if path.is_dir() and not (file.exists() or file.is_symlink()):
        raise EstimateError(
            f"--model {clip(ref, 300)}: folder has no config.json",
            hint="point --model at the model folder that holds config.json, or at the file",
        )
    data = _load_config(file, what=f"--model {clip(ref, 300)}: {clip(str(file), 300)}")
    name = path.name if path.is_dir() else (path.parent.name or path.stem)
    return from_hf_config(data, name, str(file), ref=ref)


def _load_config(source: Path | bytes, *, what: str, hint: str | None = None) -> dict[str, Any]:
    """A config.json through dojo.safe_load (no NaN, no duplicate keys, no 5,000-deep nesting)."""
    from dojo.safe_load import LoadError, load_json

    try:
        data = load_json(source, what=what, max_bytes=_MAX_CONFIG_BYTES)
    except LoadError as e:
        raise EstimateError(e.message, hint=hint or e.hint) from None
    if not isinstance(data, dict):
        raise EstimateError(
            f"{what} is not a JSON object (got {type(data).__name__})",
            hint=hint or "point --model at a model's config.json",
        )
    return data
