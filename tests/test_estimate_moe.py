"""The estimate's mixture-of-experts terms: LoRA all-linear's adapters on fused experts, the
merged expert weights they make every forward, the dispatch's tensors per token, and QLoRA's
load of the experts (dojo/estimate/moe.py, quant.py kbit_load_peak)."""

import json
from pathlib import Path

import pytest

from dojo.estimate import Setup, estimate
from dojo.estimate.activations import activation_phases
from dojo.estimate.moe import merged_expert_bytes, moe_saved_per_token
from dojo.modelspec import resolve_model

DATA = Path(__file__).parent / "data" / "moe"
Q3 = resolve_model(str(DATA / "qwen3-30b-a3b.config.json"))
Q15 = resolve_model(str(DATA / "qwen1.5-moe-a2.7b.config.json"))
MIX = resolve_model(str(DATA / "mixtral-8x7b.config.json"))
LORA = Setup.of(stage=2, method="lora", micro_batch=2, seq_len=2048, grad_ckpt=True)
NAMED = LORA.changed(lora_targets="q_proj,k_proj,v_proj,o_proj")


def test_all_linear_adapts_qwen3_and_mixtral_experts_not_qwen2s() -> None:
    assert Q3.lora_adapts_experts and MIX.lora_adapts_experts and not Q15.lora_adapts_experts
    # Qwen3-30B-A3B, r 16: rE(3h + 5i) + r(h + E) per layer, 48 layers = 0.98B
    per_layer = 16 * 128 * (3 * 2048 + 5 * 768) + 16 * (2048 + 128)
    attn = Q3.lora_params(16, ("q_proj", "k_proj", "v_proj", "o_proj"))
    assert Q3.lora_params(16) == attn + 48 * per_layer
    assert Q15.lora_params(16) == Q15.lora_params(16, tuple(n for n, *_ in Q15.linears()))


def test_adapted_experts_are_made_anew_each_forward() -> None:
    merged = merged_expert_bytes(Q3, LORA)
    assert merged == 2 * 128 * 3 * 2048 * 768  # bf16, the layer's experts
    assert merged_expert_bytes(Q3, NAMED) == 0 and merged_expert_bytes(Q15, LORA) == 0
    assert merged_expert_bytes(Q3, LORA.changed(method="full")) == 0
    # checkpointed: the recomputed layer holds the merged weights and their grad
    _, _, layer, _ = activation_phases(Q3, LORA)
    _, _, layer_named, _ = activation_phases(Q3, NAMED)
    assert layer - layer_named >= 2 * merged
    # not checkpointed: every MoE layer keeps one
    kept, *_ = activation_phases(Q3, LORA.changed(grad_ckpt=False))
    kept_named, *_ = activation_phases(Q3, NAMED.changed(grad_ckpt=False))
    assert kept - kept_named >= 48 * merged


def test_dispatch_keeps_expert_outputs_and_inputs_per_token() -> None:
    k, h, e = 8, 2048, 128
    index = 3 * 8 * k
    assert moe_saved_per_token(Q3, LORA) == 4 * k * h + 4 * e + index  # adapted experts
    assert moe_saved_per_token(Q3, NAMED) == 2 * k * h + 4 * e + index  # frozen experts
    assert moe_saved_per_token(resolve_model("llama-3.2-1b"), LORA) == 0


def test_qlora_load_is_charged_where_it_peaks() -> None:
    """Under DeepSpeed dojo loads QLoRA without PEFT's fp32 upcast, so at ZeRO-2 the load (the
    whole NF4 model and its bf16 experts) stays below training; TRL's ORPO trainer upcasts the
    experts itself, which can be the peak; at ZeRO-3 on several GPUs the whole model sits on
    every GPU until the engine partitions it."""
    q = LORA.changed(method="qlora")
    e = estimate(Q15, q)
    assert not any("the load peaks" in n for n in e.notes)
    orpo = estimate(Q15, q.changed(objective="orpo"))
    assert any("TRL's ORPO/CPO trainers upcast" in n for n in orpo.notes)
    rest = Q15.params - Q15.quantizable_params
    assert orpo.allocated + orpo.fragmentation >= 4 * rest  # the fp32 experts at load
    z3 = estimate(Q15, q.changed(stage=3, gpus_per_node=8))
    assert any("every GPU holds the whole 4-bit model" in n for n in z3.notes)
    assert z3.allocated + z3.fragmentation >= 0.5 * Q15.quantizable_params + 2 * rest
    assert not any(  # without DeepSpeed the load's weights are the training terms' own
        "the load peaks" in n for n in estimate(Q15, q.changed(stage="none")).notes
    )


def test_zero3_keeps_the_quantization_statistics_whole() -> None:
    """ZeRO-3 partitions the packed 4-bit data, not bitsandbytes' quant_state: on 8 GPUs the
    params column holds all the statistics and an eighth of the rest."""
    llama = resolve_model("llama-3.1-70b")
    one, eight = (
        estimate(llama, Setup.of(stage=3, method="qlora", gpus_per_node=n)) for n in (1, 8)
    )
    stats = (0.5159 - 0.5) * llama.quantizable_params
    assert eight.params == pytest.approx((one.params - stats) / 8 + stats, rel=1e-6)


def test_all_linear_on_fused_experts_runs_without_dropout(cli) -> None:
    """PEFT refuses dropout on its fused-expert adapters (ParamWrapper): dojo's default dropout
    becomes 0 with a line that says so; a dropout the user chose is refused with the fix; named
    targets keep it."""
    q3 = str(DATA / "qwen3-30b-a3b.config.json")
    r = cli("estimate", "--model", q3, "--method", "lora", "--json")
    assert r.exit_code == 0, r.stderr
    assert "lora dropout 0: all-linear adapts qwen3_moe's fused experts" in r.stderr
    r = cli("estimate", "--model", q3, "--method", "lora", "--lora-dropout", "0.1")
    assert r.exit_code != 0 and "--lora-dropout 0.1" in r.stderr
    assert "--lora-targets q_proj,k_proj,v_proj,o_proj" in r.stderr and "Traceback" not in r.stderr
    r = cli("estimate", "--model", q3, "--method", "lora", "--lora-dropout", "0.1",
            "--lora-targets", "q_proj,v_proj", "--json")  # fmt: skip
    assert r.exit_code == 0 and "dropout" not in r.stderr
    mix = str(DATA / "mixtral-8x7b.config.json")
    q15 = str(DATA / "qwen1.5-moe-a2.7b.config.json")
    assert "lora dropout 0" in cli("estimate", "--model", mix, "--method", "qlora").stderr
    assert "dropout" not in cli("estimate", "--model", q15, "--method", "lora").stderr


def test_liger_resolves_off_where_liger_kernel_has_no_kernels(cli) -> None:
    """The HF Trainer applies Liger by liger-kernel's model-type table and applies nothing to a
    type it lacks (Qwen2-MoE), the fused loss included: dojo says so and estimates the unfused
    loss, whether Liger was left to auto or asked for."""
    q15 = str(DATA / "qwen1.5-moe-a2.7b.config.json")
    for flags in ((), ("--liger", "on"), ("--liger", "loss")):
        r = cli("estimate", "--model", q15, "--method", "lora", "--json", *flags)
        assert r.exit_code == 0, r.stderr
        assert "liger off: liger-kernel has no kernels for qwen2_moe" in r.stderr
        off = cli("estimate", "--model", q15, "--method", "lora", "--json", "--liger", "off")
        assert json.loads(r.stdout)["rows"] == json.loads(off.stdout)["rows"]
        assert json.loads(r.stdout)["runs"][0]["kernels"]["liger"] == "off"
    mix = cli("estimate", "--model", str(DATA / "mixtral-8x7b.config.json"), "--method", "lora")
    assert "liger on: CUDA with liger-kernel" in mix.stderr


def test_liger_spares_the_experts_lora_adapts(cli, monkeypatch) -> None:
    """Liger's MoE kernel would replace the forward of PEFT's wrapper of the fused experts, so
    dojo runs Liger there without its SwiGLU (the worker's kernel config) and the estimate
    gives the MLPs no SwiGLU saving (2i a token a layer); named targets leave them to Liger."""
    import dojo.estimate.activations as act

    on = LORA.changed(liger="on", grad_ckpt=False)
    kept, *_ = activation_phases(MIX, on)
    monkeypatch.setattr(act, "_experts_spared", lambda spec, s: False)
    with_swiglu, *_ = activation_phases(MIX, on)
    monkeypatch.undo()
    assert kept - with_swiglu == 2 * MIX.active_intermediate_size * 2 * 2048 * MIX.num_layers
    assert act._experts_spared(MIX, on) and not act._experts_spared(MIX, on.changed(liger="off"))
    assert not act._experts_spared(MIX, on.changed(lora_targets="q_proj,v_proj"))
    assert not act._experts_spared(resolve_model("llama-3.2-1b"), on)
    mix = str(DATA / "mixtral-8x7b.config.json")
    said = "liger on without its SwiGLU kernel: LoRA adapts mixtral's fused experts"
    assert said in cli("estimate", "--model", mix, "--method", "lora").stderr
    assert said not in cli("estimate", "--model", mix, "--method", "lora",
                           "--lora-targets", "q_proj,v_proj").stderr  # fmt: skip
    assert "without its SwiGLU" not in cli("estimate", "--model", mix, "--method", "full").stderr


def test_json_names_the_load_above_training() -> None:
    """`dojo estimate --json` says how much of the reserve column is the load."""
    q = LORA.changed(method="qlora", objective="orpo")
    d = estimate(Q15, q).to_dict()
    assert d["load_above_training_gib"] > 0
    assert d["load_above_training_gib"] <= d["gpu_gib"]["allocator_reserve"]
    assert estimate(Q15, LORA).to_dict()["load_above_training_gib"] == 0
