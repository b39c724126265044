"""The estimate's ZeRO-3 terms: z3 leaf decoder layers, the prefetch bucket, gathers that
alias their partition at world size 1, and the persistent ZeRO-3 bucket in the step phase."""

from dojo.estimate import Setup, estimate
from dojo.modelspec import resolve_model

L1B = resolve_model("llama-3.2-1b")
M7B = resolve_model("mistral-7b-v0.3")
BASE = Setup.of(stage=3, gpus_per_node=8, micro_batch=1, seq_len=2048, grad_ckpt=True)


def test_llama_1b_decoder_layer_is_60_8m_params() -> None:
    assert L1B.layer_params == 60_821_504
    assert L1B.embedding_params == 262_668_288  # tied: larger than a layer


def test_leaf_layer_keeps_the_whole_layer_grads_beside_the_tied_embedding_grad() -> None:
    off, on = estimate(L1B, BASE), estimate(L1B, BASE.changed(z3_leaf="LlamaDecoderLayer"))
    biggest_linear = 8192 * 2048  # gate/up/down
    assert on.grads_work - off.grads_work == 2 * (L1B.layer_params - biggest_linear)
    # gathered unit: max(layer, embedding) = the embedding for Llama-3.2-1B: unchanged
    assert on.params_work == off.params_work


def test_leaf_layer_gathers_the_whole_layer_when_it_outgrows_the_embedding() -> None:
    # Mistral-7B-v0.3: 32k x 4096 embedding (134M) < one decoder layer (218M)
    assert M7B.layer_params > M7B.embedding_params
    off, on = estimate(M7B, BASE), estimate(M7B, BASE.changed(z3_leaf="LlamaDecoderLayer"))
    assert on.params_work - off.params_work == 2 * (M7B.layer_params - M7B.embedding_params)


def test_prefetch_bucket_adds_the_prefetched_params_at_world_size_above_one() -> None:
    auto = estimate(M7B, BASE)
    big = estimate(M7B, BASE.changed(prefetch_bucket_size=500_000_000))
    assert big.params_work - auto.params_work == 2 * (500_000_000 - int(0.9 * 4096**2))
    # bounded by stage3_max_live_parameters (1e9) less the unit being used
    capped = estimate(M7B, BASE.changed(prefetch_bucket_size=5_000_000_000))
    unit = M7B.embedding_params
    assert capped.params_work - auto.params_work == 2 * (1_000_000_000 - unit - int(0.9 * 4096**2))
    # a small model's gathered set is capped at the whole model (Llama-3.2-1B: 1.24e9 < unit
    # + reuse window 1e9 + prefetch): the bucket changes nothing there
    l1b = estimate(L1B, BASE.changed(prefetch_bucket_size=500_000_000)).params_work
    assert l1b == estimate(L1B, BASE).params_work == 2 * L1B.params


def test_world_size_one_gathers_alias_the_partition() -> None:
    one = BASE.changed(gpus_per_node=1)
    e = estimate(L1B, one)
    assert e.params_work == 0
    assert estimate(L1B, one.changed(prefetch_bucket_size=500_000_000)).params_work == 0
    assert estimate(L1B, one.changed(z3_leaf="LlamaDecoderLayer")).grads_work > e.grads_work


def test_session4_defaults_raise_the_zero3_estimate_by_prefetch_bucket_and_layer() -> None:
    old = estimate(M7B, BASE)
    new = estimate(
        M7B,
        BASE.changed(
            z3_leaf="LlamaDecoderLayer", prefetch_bucket_size=500_000_000, bucket_size=500_000_000
        ),
    )
    layer_over_head = M7B.layer_params - M7B.embedding_params  # gathered and grads: 2 x this
    want = 2 * (500_000_000 - int(0.9 * 4096**2))  # prefetch
    want += 2 * (500_000_000 - 4096**2)  # reduce bucket 5e8 instead of hidden^2
    want += 2 * 2 * layer_over_head
    assert new.backward_extra - old.backward_extra == want
    assert 2.0 < want / 2**30 < 2.3
    # the bucket is also kept through the optimizer step (the peak phase here)
    assert new.step_extra - old.step_extra == 2 * (500_000_000 - 4096**2)


def test_zero3_bucket_stays_through_the_step() -> None:
    e = estimate(L1B, BASE.changed(num_gpus=1, bucket_size=500_000_000))
    assert e.step_extra == e.step + e.comm
    z2 = estimate(L1B, BASE.changed(stage=2, num_gpus=1, bucket_size=500_000_000))
    assert z2.step_extra == z2.step
