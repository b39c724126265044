"""--modules-to-save and --dora in the estimate: what PEFT trains and keeps beside the adapters."""

import pytest

from dojo.estimate.activations import activation_phases
from dojo.estimate.model import Setup, estimate
from dojo.modelspec import resolve_model

L8 = resolve_model("8b")  # untied head, vocab 128,256
L1 = resolve_model("llama-3.2-1b")  # tied head
LORA = {"method": "lora", "stage": 2, "micro_batch": 2, "seq_len": 2048, "grad_ckpt": False}


def test_modules_to_save_trains_a_copy_of_each_matched_module() -> None:
    base = estimate(L8, Setup.of(**LORA))
    both = estimate(L8, Setup.of(**LORA, modules_to_save=("embed_tokens,lm_head",)))
    vh = L8.vocab_size * L8.hidden_size
    assert both.trainable_params - base.trainable_params == 2 * vh
    # The trainable copies are stored beside the frozen originals (bf16 under DeepSpeed), with
    # an fp32 master and Adam's two states each.
    assert both.params - base.params == 2 * 2 * vh
    assert both.optimizer_states - base.optimizer_states == 12 * 2 * vh
    assert any(f"{2 * vh:,} params trained in full" in n for n in both.notes)


@pytest.mark.parametrize("names", [("lm_head",), ("embed_tokens",), ("embed_tokens,lm_head",)])
def test_a_tied_head_and_embedding_train_one_copy(names: tuple[str, ...]) -> None:
    """dojo keeps a tied pair tied (PEFT ensure_weight_tying): either name, or both, trains one
    V x h copy, and the head's gradient comes through the loss either way."""
    base = Setup.of(**LORA, liger="on")
    both = Setup.of(**LORA, liger="on", modules_to_save=names)
    gained = estimate(L1, both).trainable_params - estimate(L1, base).trainable_params
    assert gained == L1.vocab_size * L1.hidden_size
    head = activation_phases(L1, both)[3] - activation_phases(L1, base)[3]
    assert head == 2 * L1.vocab_size * L1.hidden_size


def test_names_matching_one_module_count_it_once() -> None:
    one = estimate(L8, Setup.of(**LORA, modules_to_save=("input_layernorm",)))
    twice = estimate(L8, Setup.of(**LORA, modules_to_save=("input_layernorm,layernorm",)))
    both = estimate(L8, Setup.of(**LORA, modules_to_save=("layernorm",)))
    assert twice.trainable_params == both.trainable_params
    assert both.trainable_params - one.trainable_params == L8.num_layers * L8.hidden_size


def test_modules_to_save_matches_by_suffix_as_peft_does() -> None:
    layers, h = L8.num_layers, L8.hidden_size
    base = estimate(L8, Setup.of(**LORA)).trainable_params
    norms = estimate(L8, Setup.of(**LORA, modules_to_save=("norm",))).trainable_params
    assert norms - base == h * (1 + 2 * layers)  # model.norm and both norms of every layer
    unknown = estimate(L8, Setup.of(**LORA, modules_to_save=("score",)))
    assert unknown.trainable_params == base
    assert any("--modules-to-save score: matches no module" in n for n in unknown.notes)


def test_a_trained_head_gets_its_gradient_in_the_fused_loss() -> None:
    liger = {**LORA, "liger": "on"}
    _, _, _, plain = activation_phases(L8, Setup.of(**liger))
    _, _, _, head = activation_phases(L8, Setup.of(**liger, modules_to_save=("lm_head",)))
    assert head - plain == 2 * L8.vocab_size * L8.hidden_size  # Liger's bf16 grad_weight


@pytest.mark.parametrize("method", ["lora", "qlora"])
def test_dora_weight_norm_transient(method: str) -> None:
    """The largest target's ||W + s B A||: down_proj (in = intermediate, out = hidden) on 8B,
    x_eye (in x in) and three bf16 weight-sized blocks, plus the dequantized weight in QLoRA."""
    run = {**LORA, "method": method}
    base, dora = estimate(L8, Setup.of(**run)), estimate(L8, Setup.of(**run, dora=True))
    i, h = L8.intermediate_size, L8.hidden_size
    norm = 2 * i * i + 6 * i * h + (2 * i * h if method == "qlora" else 0)
    dequantized = 2 * i * h if method == "qlora" else 0
    assert dora.params_work - base.params_work == norm - dequantized


def test_dora_saves_two_outputs_per_target_and_trains_magnitudes() -> None:
    base, dora = Setup.of(**LORA), Setup.of(**LORA, dora=True)
    outs = sum(b for _, _, b, _ in L8.linears())  # all-linear: every projection's out features
    tokens = 2 * 2048
    kept = activation_phases(L8, dora)[0] - activation_phases(L8, base)[0]
    assert kept == L8.num_layers * tokens * (2 + 2) * outs  # bf16 base and LoRA outputs
    gained = estimate(L8, dora).trainable_params - estimate(L8, base).trainable_params
    assert gained == L8.num_layers * outs
    # Named targets: only their outputs.
    qv = {"lora_targets": "q_proj,v_proj"}
    kept_qv = (activation_phases(L8, Setup.of(**LORA, **qv, dora=True))[0]
               - activation_phases(L8, Setup.of(**LORA, **qv))[0])  # fmt: skip
    assert kept_qv == L8.num_layers * tokens * 4 * (L8.q_dim + L8.kv_dim)


@pytest.mark.parametrize("stage", [1, 2])
def test_a_trained_head_makes_the_gradient_norm_the_step_peak(stage: int) -> None:
    """ZeRO-1/2 take the gradient norm on an fp64 copy of each piece of the partition: a head
    copy beside small adapters is most of the partition, so its 8 B copy outgrows the flat bf16
    gradient and fp32 upcast (6 B x partition) that follow it."""
    setup = {**LORA, "stage": stage}
    adapters = estimate(L8, Setup.of(**setup))
    head = estimate(L8, Setup.of(**setup, modules_to_save=("lm_head",)))
    assert adapters.step == 6 * adapters.trainable_params  # no piece near the partition's size
    assert head.step == 8 * L8.vocab_size * L8.hidden_size
    assert head.step > 6 * head.trainable_params
    assert any("gradient norm's fp64 copy" in n for n in head.notes)
    assert not any("gradient norm" in n for n in adapters.notes)
