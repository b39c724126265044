"""ZeRO-3's optimizer-step transient follows the sub-groups DeepSpeed really forms
(stage3 _create_fp16_sub_groups): whole parameters added until a group reaches the tile."""

import json
from pathlib import Path

from dojo.estimate.model import _z3_largest_sub_group, estimate
from dojo.estimate.setup import Setup
from dojo.modelspec import from_hf_config, resolve_model


def _setup(tile: int, gpus: int = 1, method: str = "full") -> Setup:
    return Setup.of(stage=3, method=method, gpus_per_node=gpus, sub_group_size=tile)  # type: ignore[arg-type]


def test_an_embedding_larger_than_the_tile_is_a_group_of_its_own() -> None:
    g2b = resolve_model("gemma-2-2b")  # tied 256k x 2304 embedding: 589,824,000 elements
    assert _z3_largest_sub_group(g2b, _setup(100_000_000), g2b.params) == 256_000 * 2304
    # on 4 ranks every parameter is partitioned first: a quarter of it per rank
    assert _z3_largest_sub_group(g2b, _setup(100_000_000, 4), g2b.params) == 256_000 * 2304 / 4


def test_a_group_overshoots_the_tile_by_less_than_one_parameter() -> None:
    llama = resolve_model("llama-2-7b")
    group = _z3_largest_sub_group(llama, _setup(100_000_000), llama.params)
    mlp = 4096 * 11008
    assert 100_000_000 <= group < 100_000_000 + 32_000 * 4096 + mlp
    # DeepSpeed's 1e9 tile on a 6.7B model: groups of about 1e9, never the whole model
    big = _z3_largest_sub_group(llama, _setup(1_000_000_000), llama.params)
    assert 1_000_000_000 <= big < 1_000_000_000 + 32_000 * 4096


def test_adapters_and_small_models_take_the_smaller_of_model_and_tile() -> None:
    llama = resolve_model("llama-2-7b")
    lora = _setup(100_000_000, method="lora")
    assert _z3_largest_sub_group(llama, lora, 20_000_000) == 20_000_000
    tiny = resolve_model("qwen2.5-0.5b")
    assert _z3_largest_sub_group(tiny, _setup(1_000_000_000), tiny.params) == tiny.params


def test_a_smaller_tile_lowers_the_estimate_by_the_transient() -> None:
    llama = resolve_model("llama-2-7b")
    e8 = estimate(llama, _setup(100_000_000))
    e9 = estimate(llama, _setup(1_000_000_000))
    assert e8.gpu_total_gib < e9.gpu_total_gib - 4  # 6 B x (1e9 - ~1.3e8) = about 4.9 GiB


def test_moe_experts_sit_inside_their_layer_in_the_walk() -> None:
    """Each MoE layer's two fused expert parameters (gate_up, down) follow its attention, so the
    group that reaches them carries that layer's attention: the largest is attention + gate_up."""
    config = json.loads((Path(__file__).parent / "data/moe/qwen3-30b-a3b.config.json").read_text())
    moe = from_hf_config(config, "qwen3-30b-a3b")
    gate_up = moe.num_experts * 2 * moe.hidden_size * moe.expert_intermediate_size
    attn = sum(a * b for _, a, b, _ in moe.attention_linears())
    group = _z3_largest_sub_group(moe, _setup(100_000_000), moe.params)
    assert group == gate_up + attn  # the first layer's attention opens the group gate_up closes
