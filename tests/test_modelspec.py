"""ModelSpec: exact parameter counts, config.json reading, name resolution (the Hub: tests/test_hub.py)."""

import json

import pytest

from dojo.architectures import ARCHITECTURES, SIZE_ALIASES
from dojo.errors import EstimateError
from dojo.modelspec import from_hf_config, resolve_model

# Published totals (model cards / safetensors metadata), independent of the tables' comments.
PUBLISHED = {
    "llama-2-7b": 6_738_415_616,
    "llama-2-13b": 13_015_864_320,
    "llama-2-70b": 68_976_648_192,
    "llama-3.1-8b": 8_030_261_248,
    "llama-3.1-70b": 70_553_706_496,
    "llama-3.2-1b": 1_235_814_400,
    "llama-3.2-3b": 3_212_749_824,
    "mistral-7b": 7_241_732_096,
    "qwen2.5-0.5b": 494_032_768,
    "qwen2.5-1.5b": 1_543_714_304,
    "qwen2.5-7b": 7_615_616_512,
    "qwen2.5-72b": 72_706_203_648,
    "gemma-2-2b": 2_614_341_888,
    "gemma-2-9b": 9_241_705_984,
    "qwen3-0.6b": 596_049_920,
}


@pytest.mark.parametrize("name,count", sorted(PUBLISHED.items()))
def test_param_counts_match_published(name: str, count: int) -> None:
    assert resolve_model(name).params == count


def test_every_alias_maps_to_a_named_architecture() -> None:
    for need in ["0.5b", "1b", "1.5b", "3b", "7b", "8b", "13b", "14b", "32b", "70b", "72b"]:
        assert SIZE_ALIASES[need] in ARCHITECTURES
    assert resolve_model("7b").params == 6_738_415_616
    assert resolve_model("7B").name == "llama-2-7b"


def test_shapes_gqa_bias_tied() -> None:
    q = resolve_model("qwen2.5-0.5b")
    assert (q.num_kv_heads, q.head_dim, q.kv_dim, q.qkv_bias, q.tied_embeddings) == (
        2,
        64,
        128,
        True,
        True,
    )
    assert q.head_params == 0
    g = resolve_model("gemma-2-2b")
    assert (g.head_dim, g.q_dim, g.norms_per_layer) == (256, 2048, 4)
    assert resolve_model("qwen3-0.6b").qk_norm


def test_lora_params_llama2_7b() -> None:
    # memory-model.md sec 4: r * (9h + 2h_kv + 3i) per layer -> 40.0M at r=16 for Llama-2-7B.
    spec = resolve_model("llama-2-7b")
    h, i = 4096, 11008
    assert spec.lora_params(16) == 32 * 16 * (9 * h + 2 * h + 3 * i) == 39_976_960
    assert spec.lora_params(8, ("q_proj", "v_proj")) == 32 * 8 * (2 * h + 2 * h)


def test_largest_layer_is_embedding() -> None:
    assert resolve_model("7b").largest_layer_params == 131_072_000


def test_local_config_json_and_folder(tmp_path) -> None:
    cfg = dict(ARCHITECTURES["llama-3.2-1b"])
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert resolve_model(str(tmp_path)).params == 1_235_814_400
    assert resolve_model(str(tmp_path / "config.json")).params == 1_235_814_400


def test_folder_named_like_a_builtin_is_the_folder(tmp_path, monkeypatch) -> None:
    """from_pretrained("Llama-3.2-1B") loads a folder of that name, so the estimate reads it too;
    a folder of that name without config.json (an output folder) leaves the built-in shape."""
    small = dict(ARCHITECTURES["qwen2.5-0.5b"])
    (tmp_path / "Llama-3.2-1B").mkdir()
    (tmp_path / "7b").mkdir()
    (tmp_path / "Llama-3.2-1B" / "config.json").write_text(json.dumps(small))
    monkeypatch.chdir(tmp_path)
    for ref in ("Llama-3.2-1B", "./Llama-3.2-1B", str(tmp_path / "Llama-3.2-1B")):
        assert resolve_model(ref).params == 494_032_768, ref
    assert resolve_model("llama-3.2-1b").params == 1_235_814_400  # not that folder's name
    assert resolve_model("7b").params == 6_738_415_616


def test_text_config_nesting(tmp_path) -> None:
    inner = dict(ARCHITECTURES["qwen2.5-1.5b"].items())
    outer = {"model_type": "llava", "architectures": ["X"], "text_config": inner}
    assert from_hf_config(outer, "x").params == 1_543_714_304


def test_tie_default_per_model_type() -> None:
    cfg = {k: v for k, v in ARCHITECTURES["llama-2-7b"].items() if k != "tie_word_embeddings"}
    assert from_hf_config(cfg, "x").tied_embeddings is False
    cfg["model_type"] = "gemma"
    assert from_hf_config(cfg, "x").tied_embeddings is True


def test_unknown_name_lists_close_names() -> None:
    with pytest.raises(EstimateError) as e:
        resolve_model("7x")
    assert e.value.message == "--model '7x': unknown model"
    assert "did you mean 7b" in (e.value.hint or "")


def test_missing_path(tmp_path) -> None:
    with pytest.raises(EstimateError, match="no such file or folder"):
        resolve_model(str(tmp_path / "nope" / "config.json"))
    with pytest.raises(EstimateError, match="folder has no config.json"):
        resolve_model(str(tmp_path))


def test_malformed_json_names_line(tmp_path) -> None:
    f = tmp_path / "config.json"
    f.write_text('{\n  "hidden_size": 64,\n  "num_hidden_layers": ,\n}\n')
    with pytest.raises(EstimateError, match=r"is not valid JSON: .* at line 3 column"):
        resolve_model(str(f))


def test_missing_key(tmp_path) -> None:
    f = tmp_path / "config.json"
    f.write_text(json.dumps({"hidden_size": 64}))
    with pytest.raises(EstimateError, match="config.json has no 'num_hidden_layers'"):
        resolve_model(str(f))


def test_moe_of_unknown_layout_rejected() -> None:
    """Experts on a model type whose MoE layout is not known are refused, never counted dense."""
    cfg = dict(ARCHITECTURES["mistral-7b"], num_local_experts=8, num_experts_per_tok=2)
    with pytest.raises(EstimateError, match="mixture-of-experts layout of model_type 'mistral'"):
        from_hf_config(cfg, "mixtral")


ENCODER = "an encoder-only (masked-LM) model"
SEQ2SEQ = "an encoder-decoder (sequence-to-sequence) model"


@pytest.mark.parametrize(
    ("extra", "kind"),
    [
        ({"model_type": "bert"}, ENCODER),
        ({"model_type": "deberta-v2"}, ENCODER),
        ({"model_type": "t5"}, SEQ2SEQ),
        ({"model_type": "bart"}, SEQ2SEQ),
        ({"model_type": "my_seq2seq", "is_encoder_decoder": True}, SEQ2SEQ),
    ],
)
def test_encoder_models_refused_before_their_keys_are_read(
    tmp_path, extra: dict[str, object], kind: str
) -> None:
    f = tmp_path / "config.json"
    f.write_text(json.dumps({"d_model": 512, "vocab_size": 32128, **extra}))  # no decoder keys
    with pytest.raises(EstimateError) as exc:
        resolve_model(str(f))
    assert exc.value.message == (
        f"--model {f}: model_type {extra['model_type']!r} in {f} is {kind}; dojo estimates and "
        "trains decoder-only causal language models"
    )
    # A model type outside dojo's lists keeps today's reading: counted as a Llama-layout decoder.
    f.write_text(json.dumps({**ARCHITECTURES["llama-3.2-1b"], "model_type": "my_decoder"}))
    assert resolve_model(str(f)).params == PUBLISHED["llama-3.2-1b"]


@pytest.mark.parametrize(
    ("quantization", "words", "double"),
    [
        ({"quant_method": "gptq", "bits": 4, "group_size": 128}, "gptq 4-bit", False),
        ({"quant_method": "awq", "w_bit": 4}, "awq 4-bit", False),
        ({"quant_method": "fp8", "fmt": "e4m3"}, "fp8", False),
        ({"quant_method": "bitsandbytes", "load_in_4bit": True,
          "bnb_4bit_use_double_quant": True}, "bitsandbytes 4-bit", True),
        ({"load_in_8bit": True}, "bitsandbytes 8-bit", False),  # older configs: no quant_method
        ({}, "unknown method", False),
    ],
)  # fmt: skip
def test_quantization_config_in_words(
    quantization: dict[str, object], words: str, double: bool
) -> None:
    cfg = {**ARCHITECTURES["llama-3.2-1b"], "quantization_config": quantization}
    spec = from_hf_config(cfg, "q")
    assert (spec.quantization, spec.quant_double) == (words, double)
    assert spec.params == PUBLISHED["llama-3.2-1b"]  # the shapes do not change
    assert from_hf_config(ARCHITECTURES["llama-3.2-1b"], "plain").quantization == ""
    with pytest.raises(EstimateError, match="quantization_config 'gptq' must be an object"):
        from_hf_config({**cfg, "quantization_config": "gptq"}, "q")
