"""Model shapes and exact parameter counts, from a name, a size alias, a config.json or a Hub id.

Pure stdlib: a config.json is read with ``json`` (never transformers); a Hub id fetches only its
config.json with urllib. Example: ``resolve_model("7b").params == 6_738_415_616``.
"""

import difflib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dojo.architectures import ARCHITECTURES, SIZE_ALIASES
from dojo.errors import EstimateError

# model_type -> tie_word_embeddings when config.json omits it (each transformers config class's
# default; PretrainedConfig's own default is True).
_TIE_DEFAULT = {"llama": False, "mistral": False, "qwen2": False, "qwen3": False, "phi3": False}
# Decoder-layer RMSNorms: Gemma-2/3 add pre/post-feedforward norms around the usual two.
_NORMS_PER_LAYER = {"gemma2": 4, "gemma3": 4, "gemma3_text": 4}
# Per-head RMSNorm on q and k (weight of head_dim each).
_QK_NORM = {"qwen3", "gemma3", "gemma3_text", "olmo2"}
_HUB_TIMEOUT_S = 10.0  # a config.json is a few KB; a dead network should fail fast


@dataclass(frozen=True)
class ModelSpec:
    """A dense decoder-only transformer (Llama family layout: gated MLP, RMSNorm, RoPE)."""

    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
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

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    def linears(self) -> tuple[tuple[str, int, int, bool], ...]:
        """Linear layers of one decoder layer: (name, in_features, out_features, has_bias)."""
        h, i = self.hidden_size, self.intermediate_size
        return (
            ("q_proj", h, self.q_dim, self.qkv_bias),
            ("k_proj", h, self.kv_dim, self.qkv_bias),
            ("v_proj", h, self.kv_dim, self.qkv_bias),
            ("o_proj", self.q_dim, h, self.o_bias),
            ("gate_proj", h, i, self.mlp_bias),
            ("up_proj", h, i, self.mlp_bias),
            ("down_proj", i, h, self.mlp_bias),
        )

    @property
    def layer_linear_params(self) -> int:
        """Weights and biases of one layer's linears (what QLoRA quantizes: weights only)."""
        return sum(a * b + (b if bias else 0) for _, a, b, bias in self.linears())

    @property
    def layer_linear_weight_params(self) -> int:
        return sum(a * b for _, a, b, _ in self.linears())

    @property
    def layer_params(self) -> int:
        norms = self.norms_per_layer * self.hidden_size
        qk = 2 * self.head_dim if self.qk_norm else 0
        return self.layer_linear_params + norms + qk

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def head_params(self) -> int:
        """lm_head weights that are not shared with the embedding."""
        return 0 if self.tied_embeddings else self.vocab_size * self.hidden_size

    @property
    def params(self) -> int:
        """Exact parameter count as PyTorch counts it (a tied head counted once)."""
        final_norm = self.hidden_size
        return (
            self.embedding_params
            + self.head_params
            + self.num_layers * self.layer_params
            + final_norm
        )

    @property
    def quantizable_params(self) -> int:
        """Weights bitsandbytes turns into 4-bit: every decoder-layer nn.Linear weight."""
        return self.num_layers * self.layer_linear_weight_params

    @property
    def largest_layer_params(self) -> int:
        """Largest single module's own params (DeepSpeed's ZeRO-3 ``largest_layer_params``)."""
        biggest_linear = max(a * b + (b if bias else 0) for _, a, b, bias in self.linears())
        return max(self.embedding_params, biggest_linear)

    def lora_params(self, rank: int, targets: tuple[str, ...] | None = None) -> int:
        """Trainable LoRA params: r * (in + out) per adapted linear (A: r x in, B: out x r)."""
        names = {n for n, *_ in self.linears()} if targets is None else set(targets)
        per_layer = sum(rank * (a + b) for n, a, b, _ in self.linears() if n in names)
        return self.num_layers * per_layer


def from_hf_config(config: dict[str, Any], name: str) -> ModelSpec:
    """Build a ModelSpec from a Hugging Face config.json dict (text_config nesting handled)."""
    cfg = config
    if "hidden_size" not in cfg and isinstance(cfg.get("text_config"), dict):
        # Multimodal wrappers (Gemma-3, Llava, Mllama) keep the language model in text_config.
        cfg = {**{k: v for k, v in config.items() if k != "text_config"}, **cfg["text_config"]}
    if int(cfg.get("num_local_experts") or cfg.get("num_experts") or 1) > 1:
        raise EstimateError(
            f"--model {name}: mixture-of-experts models are not supported by the estimator",
            hint="use a dense model, e.g. --model llama-3.1-8b",
        )
    model_type = str(cfg.get("model_type") or "llama")
    try:
        h = int(_first(cfg, "hidden_size", "n_embd", "d_model"))
        layers = int(_first(cfg, "num_hidden_layers", "n_layer", "num_layers"))
        heads = int(_first(cfg, "num_attention_heads", "n_head"))
        vocab = int(_first(cfg, "vocab_size"))
    except KeyError as e:
        raise EstimateError(
            f"--model {name}: config.json has no {e.args[0]!r}",
            hint="point --model at a decoder-only model's config.json (Llama, Qwen, Mistral, Gemma)",
        ) from None
    kv = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or h // heads)
    inter = int(cfg.get("intermediate_size") or cfg.get("n_inner") or 4 * h)
    tied = bool(cfg.get("tie_word_embeddings", _TIE_DEFAULT.get(model_type, True)))
    attn_bias = bool(cfg.get("attention_bias", False))
    spec = ModelSpec(
        name=name,
        hidden_size=h,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=head_dim,
        intermediate_size=inter,
        vocab_size=vocab,
        tied_embeddings=tied,
        model_type=model_type,
        qkv_bias=model_type == "qwen2" or attn_bias,
        o_bias=attn_bias,
        mlp_bias=bool(cfg.get("mlp_bias", False)),
        norms_per_layer=_NORMS_PER_LAYER.get(model_type, 2),
        qk_norm=model_type in _QK_NORM,
    )
    if min(h, layers, heads, kv, head_dim, inter, vocab) <= 0 or heads % kv:
        raise EstimateError(
            f"--model {name}: config.json has impossible sizes (hidden {h}, layers {layers}, "
            f"heads {heads}, kv heads {kv})",
            hint="check the config.json values",
        )
    return spec


def _first(cfg: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    raise KeyError(keys[0])


def known_names() -> list[str]:
    """Every name --model accepts without a file: size aliases, then architectures."""
    return list(SIZE_ALIASES) + list(ARCHITECTURES)


def resolve_model(ref: str) -> ModelSpec:
    """A size alias, a named architecture, a config.json / model folder, or a Hub id -> ModelSpec."""
    key = ref.strip().lower()
    if key in SIZE_ALIASES:
        return from_hf_config(ARCHITECTURES[SIZE_ALIASES[key]], SIZE_ALIASES[key])
    if key in ARCHITECTURES:
        return from_hf_config(ARCHITECTURES[key], key)
    path = Path(ref).expanduser()
    if path.exists():
        return _from_path(path, ref)
    if _looks_like_path(ref):
        raise EstimateError(
            f"--model {ref}: no such file or folder",
            hint="give a config.json, a model folder that contains one, or a name like 7b",
        )
    if _HUB_ID.fullmatch(ref.strip()):
        return from_hf_config(_fetch_hub_config(ref.strip()), ref.strip())
    close = difflib.get_close_matches(key, known_names(), n=3, cutoff=0.5)
    did = f"did you mean {', '.join(close)}? " if close else ""
    raise EstimateError(
        f"--model {ref!r}: unknown model",
        hint=f"{did}known: {', '.join(known_names())}; or a config.json path or Hub id (org/name)",
    )


_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def _looks_like_path(ref: str) -> bool:
    return ref.startswith((".", "/", "~")) or ref.endswith((".json", "/")) or ref.count("/") > 1


def _from_path(path: Path, ref: str) -> ModelSpec:
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise EstimateError(
            f"--model {ref}: folder has no config.json",
            hint="point --model at the model folder that holds config.json, or at the file",
        )
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise EstimateError(
            f"--model {ref}: cannot read {file}: {e}", hint="check the path"
        ) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise EstimateError(
            f"--model {ref}: {file} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}",
            hint="fix the JSON (a config.json from the model repo is plain JSON)",
        ) from None
    if not isinstance(data, dict):
        raise EstimateError(f"--model {ref}: {file} is not a JSON object", hint="check the file")
    name = path.name if path.is_dir() else (path.parent.name or path.stem)
    return from_hf_config(data, name)


def _fetch_hub_config(repo_id: str) -> dict[str, Any]:
    """GET <HF_ENDPOINT>/<id>/resolve/main/config.json (HF_TOKEN honoured); nothing else."""
    import urllib.error  # here, not at the top: urllib.request pulls in ssl/http (~30 ms)
    import urllib.request

    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    url = f"{endpoint}/{repo_id}/resolve/main/config.json"
    req = urllib.request.Request(url, headers={"User-Agent": "dojo-estimate"})
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    local = f"download {repo_id}'s config.json and pass its path, e.g. --model ./config.json"
    try:
        with urllib.request.urlopen(req, timeout=_HUB_TIMEOUT_S) as resp:  # noqa: S310 - https URL
            body = resp.read()
    except urllib.error.HTTPError as e:
        if e.code in (401, 403):
            raise EstimateError(
                f"--model {repo_id}: the Hub refused config.json (HTTP {e.code}; gated or private)",
                hint=f"set HF_TOKEN to a token with access, or {local}",
            ) from None
        raise EstimateError(
            f"--model {repo_id}: not found on the Hub (HTTP {e.code} for {url})",
            hint=f"check the id, or use a known name such as 7b; or {local}",
        ) from None
    except (urllib.error.URLError, TimeoutError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise EstimateError(
            f"--model {repo_id}: cannot reach {endpoint} to fetch config.json ({reason})",
            hint=f"offline? {local}",
        ) from None
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise EstimateError(f"--model {repo_id}: {url} did not return JSON", hint=local) from None
    if not isinstance(data, dict):
        raise EstimateError(f"--model {repo_id}: {url} is not a JSON object", hint=local)
    return data
