"""Mixture-of-experts and DeepSeek MLA parameter counts (ModelSpec), against published totals and
against transformers itself (models built on the meta device, so no memory is used); plus a fuzz
of config.json field values: every value either gives a sane spec or one EstimateError."""

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dojo.architectures import ARCHITECTURES
from dojo.errors import EstimateError
from dojo.modelspec import ModelSpec, from_hf_config, resolve_model

DATA = Path(__file__).parent / "data" / "moe"
# Published (model cards / papers), in billions: total, active per token. DeepSeek quotes active
# without the input embedding ("36.6B including 0.9B for the output head"); the others with it.
PUBLISHED = {
    "deepseek-v3": (671.0, 36.6),
    "mixtral-8x7b": (46.7, 12.9),
    "qwen3-30b-a3b": (30.5, 3.3),
    "qwen1.5-moe-a2.7b": (14.3, 2.7),
}
# Exact counts: equal to sum(p.numel()) of the transformers 5 model (test_matches_transformers).
EXACT = {
    "deepseek-v3": (671_026_404_352, 37_552_282_624),
    "mixtral-8x7b": (46_702_792_704, 12_879_925_248),
    "qwen3-30b-a3b": (30_532_122_624, 3_353_032_704),
    "qwen1.5-moe-a2.7b": (14_315_784_192, 2_689_173_504),
}


def _spec(name: str) -> ModelSpec:
    return resolve_model(str(DATA / f"{name}.config.json"))


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_totals_and_active_match_published(name: str) -> None:
    spec = _spec(name)
    total, active = PUBLISHED[name]
    assert spec.is_moe
    assert spec.params / 1e9 == pytest.approx(total, abs=0.05)
    quoted = spec.active_params - (spec.embedding_params if name == "deepseek-v3" else 0)
    # Qwen rounds 3.35B down to "3.3B"; allow one digit of rounding either way.
    assert quoted / 1e9 == pytest.approx(active, abs=0.06)
    assert (spec.params, spec.active_params) == EXACT[name]


def test_deepseek_v3_is_not_a_37b_dense_model() -> None:
    spec = _spec("deepseek-v3")
    assert spec.params > 17 * spec.active_params  # memory holds every expert
    assert (spec.num_layers - spec.moe_layers, spec.moe_layers) == (3, 58)
    assert spec.kv_lora_rank == 512 and spec.q_lora_rank == 1536 and spec.head_dim == 192
    # The fused experts of one layer are ZeRO-3's largest module: 256 x 3 x 7168 x 2048.
    assert spec.largest_layer_params == 256 * 3 * 7168 * 2048
    # Tokens pass through 8 routed + 1 shared expert of width 2048.
    assert spec.active_intermediate_size == 9 * 2048


def test_active_width_and_shared_experts() -> None:
    assert _spec("mixtral-8x7b").active_intermediate_size == 2 * 14336
    assert _spec("qwen3-30b-a3b").active_intermediate_size == 8 * 768
    q2 = _spec("qwen1.5-moe-a2.7b")
    assert q2.active_intermediate_size == 4 * 1408 + 5632
    assert q2.shared_expert_gate and q2.qkv_bias and not q2.o_bias


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_dense_models_unchanged(name: str) -> None:
    spec = resolve_model(name)
    assert not spec.is_moe and spec.active_params == spec.params
    assert spec.active_intermediate_size == spec.intermediate_size


def test_sparse_step_and_mlp_only_layers() -> None:
    cfg = json.loads((DATA / "qwen3-30b-a3b.config.json").read_text())
    every = from_hf_config(cfg, "q")
    half = from_hf_config({**cfg, "decoder_sparse_step": 2}, "q")
    some = from_hf_config({**cfg, "mlp_only_layers": [0, 1, 47]}, "q")
    assert (every.moe_layers, half.moe_layers, some.moe_layers) == (48, 24, 45)
    assert every.params > some.params > half.params  # a dense layer (6144) < 128 experts (768)
    none = from_hf_config({**cfg, "num_experts": 0}, "q")
    assert not none.is_moe and none.params == none.active_params


def test_mla_without_q_lora() -> None:
    """DeepSeek-V2-Lite style: q_lora_rank null means one q_proj of hidden x heads*192."""
    cfg = json.loads((DATA / "deepseek-v3.config.json").read_text())
    spec = from_hf_config({**cfg, "q_lora_rank": None}, "lite")
    names = [n for n, *_ in spec.attention_linears()]
    assert names == ["q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"]


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_matches_transformers(name: str) -> None:
    """sum(numel) of the real transformers module tree, built on the meta device (no memory)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = json.loads((DATA / f"{name}.config.json").read_text())
    cfg.pop("quantization_config", None)  # fp8 loading needs a GPU; the shapes do not change
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**cfg)
        )
    spec = _spec(name)
    assert sum(p.numel() for p in model.parameters()) == spec.params
    own = (sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    assert max(own) == spec.largest_layer_params
    linear = sum(
        m.weight.numel()
        for n, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and ".layers." in f".{n}"
    )
    assert linear == spec.quantizable_params


@pytest.mark.parametrize("name", ["mixtral-8x7b", "qwen1.5-moe-a2.7b"])
def test_lora_params_match_peft(name: str) -> None:
    """Named target_modules adapt nn.Linear only: attention (+ the shared expert), no fused
    experts. (DeepSeek-V3 is left out: PEFT 0.21 also wraps its fused experts; see the report.)
    "all-linear" is the next test."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    cfg = json.loads((DATA / f"{name}.config.json").read_text())
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**cfg)
        )
    spec = _spec(name)
    targets = sorted({n for _, _, lin in spec.layer_kinds() for n, *_ in lin})
    lora = peft.get_peft_model(model, peft.LoraConfig(r=16, target_modules=targets))
    trainable = sum(p.numel() for p in lora.parameters() if p.requires_grad)
    assert trainable == spec.lora_params(16, tuple(targets))


# ---------------------------------------------------------------- fuzz of field values

_FIELDS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "tie_word_embeddings",
    "model_type",
    "num_local_experts",
    "num_experts_per_tok",
)
_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**30), 10**30),
    st.integers(0, 70_000),
    st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128, 256, 4096]),
    st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128, 256, 4096]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=3),
    st.sampled_from(["mixtral", "qwen3_moe", "deepseek_v3", "llama", "gemma2"]),
)
_FUZZED = {"specs": 0, "refused": 0}


@pytest.mark.slow  # hypothesis: seconds; `make test` runs it
@settings(
    max_examples=int(os.environ.get("DOJO_FUZZ_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    st.sampled_from(["mistral-7b", "gemma-2-2b", "qwen2.5-0.5b"]),
    st.dictionaries(st.sampled_from(_FIELDS), _VALUES, min_size=1, max_size=4),
)
def test_fuzz_config_values(base: str, changes: dict[str, Any]) -> None:
    cfg = {**ARCHITECTURES[base], **changes}
    try:
        spec = from_hf_config(cfg, "fuzz", "fuzz/config.json")
    except EstimateError as e:
        _FUZZED["refused"] += 1
        assert e.message.startswith("--model fuzz: ") and len(e.message) < 300
        return
    _FUZZED["specs"] += 1
    assert 0 < spec.active_params <= spec.params < 10**16
    assert math.isfinite(float(spec.params)) and spec.largest_layer_params <= spec.params
    assert spec.lora_params(8) >= 0 and spec.quantizable_params < spec.params


def test_fuzz_counts() -> None:
    if not any(_FUZZED.values()):
        pytest.skip("run with the whole file to count")
    print("config.json fuzz:", _FUZZED)
    assert _FUZZED["specs"] > 0 and _FUZZED["refused"] > 0


def test_moe_activations_follow_the_experts_a_token_uses() -> None:
    """Mixtral routes each token through 2 experts of width 14336: its MLP activations are twice a
    dense layer of that width (the estimator used to count one expert)."""
    import dataclasses

    from dojo.estimate import Setup
    from dojo.estimate.activations import activation_bytes
    from dojo.modelspec import resolve_model

    spec = resolve_model(str(DATA / "mixtral-8x7b.config.json"))
    assert spec.active_intermediate_size == 2 * spec.intermediate_size == 28672
    as_dense = dataclasses.replace(spec, num_experts=0, experts_per_token=0, moe_layers=0)
    s = Setup.of(seq_len=512, method="full")
    assert activation_bytes(spec, s)[0] > activation_bytes(as_dense, s)[0]


@pytest.mark.parametrize("name", ["mixtral-8x7b", "qwen1.5-moe-a2.7b", "qwen3-30b-a3b"])
def test_all_linear_lora_params_match_peft(name: str) -> None:
    """PEFT's "all-linear" also adapts the fused experts and the router of Mixtral and
    Qwen3-MoE under transformers 5 (not Qwen2-MoE's): lora_params(r) with no targets counts them."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    cfg = json.loads((DATA / f"{name}.config.json").read_text())
    cfg["num_hidden_layers"] = 2  # the count is per layer; two keep the meta model small
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**cfg)
        )
    spec = _spec(name)
    per_layer = spec.lora_params(16) // spec.num_layers
    config = peft.LoraConfig(r=16, target_modules="all-linear", task_type="CAUSAL_LM")
    lora = peft.get_peft_model(model, config)
    trainable = sum(p.numel() for p in lora.parameters() if p.requires_grad)
    assert trainable == 2 * per_layer


def test_all_linear_lora_params_match_peft_deepseek() -> None:
    """DeepSeek-V3 under "all-linear": attention, the routed experts and the router get
    adapters; the MLP names go to the fused experts, so the dense layers' MLP and the shared
    experts get none. Four layers: three dense (first_k_dense_replace) and one MoE."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    cfg = json.loads((DATA / "deepseek-v3.config.json").read_text())
    cfg.pop("quantization_config", None)
    cfg["num_hidden_layers"] = 4
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**cfg)
        )
    spec = from_hf_config(cfg, "deepseek-v3-l4")
    config = peft.LoraConfig(r=16, target_modules="all-linear", task_type="CAUSAL_LM")
    lora = peft.get_peft_model(model, config)
    trainable = sum(p.numel() for p in lora.parameters() if p.requires_grad)
    assert trainable == spec.lora_params(16)
