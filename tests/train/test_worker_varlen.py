"""--attn sdpa_varlen: packed samples kept apart by their offsets, no mask (CPU path: one causal
SDPA call per sample; the CUDA kernel itself runs only on the GPU machine)."""

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="needs the train extra")

from dojo.train.worker.packing import PackedCollator, pack, sample_offsets  # noqa: E402
from tests.helpers.examples import random_examples, tiny_llama  # noqa: E402


def test_varlen_collator_flattens_and_gives_offsets() -> None:
    rows = [
        {"input_ids": [5, 6, 7, 8], "labels": [-100, 6, 7, -100], "position_ids": [0, 1, 2, 0]},
        {"input_ids": [9, 10], "labels": [-100, 10], "position_ids": [0, 1]},
    ]
    b = PackedCollator(pad_id=0, flatten=False, varlen=True)(rows)  # varlen implies flat
    assert b["input_ids"].tolist() == [[5, 6, 7, 8, 9, 10]]
    assert b["position_ids"].tolist() == [[0, 1, 2, 0, 0, 1]]
    assert b["cu_seq_lens_q"].tolist() == [0, 3, 4, 6] == b["cu_seq_lens_k"].tolist()
    assert str(b["cu_seq_lens_q"].dtype) == "torch.int32"  # FlashAttention's offsets type
    assert b["max_length_q"] == b["max_length_k"] == 3
    assert "cu_seq_lens_q" not in PackedCollator(pad_id=0)(rows)


@pytest.mark.parametrize("offsets_given", [True, False])
def test_varlen_matches_masked_sdpa_logits_and_grads(offsets_given: bool) -> None:
    """The same weights and packed batch under sdpa (block-diagonal mask) and sdpa_varlen
    (offsets): equal loss, logits and gradients; with or without the collator's offsets."""
    import torch

    rows = pack(random_examples((7, 12, 5, 9, 3)), 16)
    assert any(len(sample_offsets(r["position_ids"])[0]) > 2 for r in rows)  # really packed
    batch = PackedCollator(pad_id=0, varlen=True)(rows)
    if not offsets_given:
        batch = {k: batch[k] for k in ("input_ids", "labels", "position_ids")}
    ref_model, var_model = tiny_llama("sdpa"), tiny_llama("sdpa_varlen")
    var_model.load_state_dict(ref_model.state_dict())
    ref_model.train(), var_model.train()
    plain = {k: batch[k] for k in ("input_ids", "labels", "position_ids")}
    ref, var = ref_model(**plain), var_model(**batch)
    ref.loss.backward()
    var.loss.backward()
    torch.testing.assert_close(var.logits, ref.logits, atol=1e-5, rtol=1e-4)
    for (name, p), q in zip(ref_model.named_parameters(), var_model.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, atol=1e-5, rtol=1e-4, msg=name)


def test_varlen_forward_builds_no_mask(monkeypatch: pytest.MonkeyPatch) -> None:
    """No mask function is registered: transformers returns no mask before it would search
    position_ids for packed samples (a device read at every forward start on a GPU)."""
    import torch
    from transformers import masking_utils

    def searched(*a: Any, **k: Any) -> None:
        raise AssertionError("find_packed_sequence_indices ran")

    monkeypatch.setattr(masking_utils, "find_packed_sequence_indices", searched)
    batch = PackedCollator(pad_id=0, varlen=True)(pack(random_examples((7, 12, 5)), 16))
    with torch.no_grad():
        tiny_llama("sdpa_varlen")(**batch)
    with pytest.raises(AssertionError, match="ran"), torch.no_grad():  # control: sdpa searches
        tiny_llama("sdpa")(**{k: batch[k] for k in ("input_ids", "position_ids")})


def test_varlen_equal_samples_take_one_dense_causal_call() -> None:
    """Samples of one length (fixed-length data) go through one batched causal SDPA: the same
    output and gradients as one call per sample, GQA included; unequal ones do not."""
    import torch

    from dojo.train.worker import varlen

    torch.manual_seed(0)
    b, h, hkv, s, d = 1, 4, 2, 12, 8
    query, key, value = (torch.randn(b, n, s, d, requires_grad=True) for n in (h, hkv, hkv))
    calls: list[tuple[int, ...]] = []
    real = varlen.F.scaled_dot_product_attention

    def spy(q: Any, *args: Any, **kw: Any) -> Any:
        calls.append(tuple(q.shape))
        return real(q, *args, **kw)

    varlen.F.scaled_dot_product_attention = spy
    try:
        cu = torch.tensor([0, 4, 8, 12], dtype=torch.int32)
        out, _ = varlen.attention(None, query, key, value, None, cu_seq_lens_q=cu, max_length_q=4)
    finally:
        varlen.F.scaled_dot_product_attention = real
    assert calls == [(3, h, 4, d)]  # one call, the samples as its batch
    flat = [t.transpose(1, 2).reshape(b * s, t.shape[1], d) for t in (query, key, value)]
    ref = varlen._per_sample(*flat, [0, 4, 8, 12], None, 0.0, None).reshape(b, s, h, d)
    torch.testing.assert_close(out, ref)
    grads = torch.autograd.grad(out.square().sum(), (query, key, value))
    ref_grads = torch.autograd.grad(ref.square().sum(), (query, key, value))
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r)
    # 5 + 7 tokens: not equal, so the per-sample path (two calls) on the CPU
    calls.clear()
    varlen.F.scaled_dot_product_attention = spy
    try:
        cu = torch.tensor([0, 5, 12], dtype=torch.int32)
        varlen.attention(None, query, key, value, None, cu_seq_lens_q=cu, max_length_q=7)
    finally:
        varlen.F.scaled_dot_product_attention = real
    assert calls == [(h, 5, d), (h, 7, d)]


def test_varlen_sliding_window_per_sample() -> None:
    """A window shorter than a sample: each token sees itself and the window - 1 before it;
    a sample no longer than the window is plain causal."""
    import torch
    import torch.nn.functional as F

    from dojo.train.worker.varlen import _per_sample

    torch.manual_seed(0)
    q, k, v = (torch.randn(9, 2, 8) for _ in range(3))
    out = _per_sample(q, k, v, [0, 6, 9], None, 0.0, window=3)
    i = torch.arange(6)
    band = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - 3)
    heads = [t.transpose(0, 1) for t in (q, k, v)]  # [h, n, d]
    first = F.scaled_dot_product_attention(*(t[:, :6] for t in heads), attn_mask=band)
    second = F.scaled_dot_product_attention(*(t[:, 6:] for t in heads), is_causal=True)
    torch.testing.assert_close(out[:6], first.transpose(0, 1))
    torch.testing.assert_close(out[6:], second.transpose(0, 1))
    causal = F.scaled_dot_product_attention(*(t[:, :6] for t in heads), is_causal=True)
    assert not torch.allclose(first, causal)  # the window really cut something


def test_varlen_refuses_what_it_cannot_do() -> None:
    import torch

    from dojo.train.worker.varlen import attention

    module = torch.nn.Module()
    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(ValueError, match="soft-capping"):
        attention(module, q, q, q, None, softcap=50.0)
    with pytest.raises(ValueError, match="--packing"):
        attention(module, q, q, q, torch.ones(1, 4))


@pytest.mark.slow
def test_varlen_trains_through_the_launcher_like_sdpa(tmp_path: Path) -> None:
    """2 CPU processes, ZeRO-2, packed text: the same losses as --attn sdpa (the same samples,
    kept apart by offsets instead of a mask), and the saved model loads without dojo."""
    from transformers import AutoConfig

    from tests.helpers.train import dojo_train, summary

    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"text": f"Doc {i}: " + "fox " * (i % 23 + 2)}) + "\n"
                            for i in range(120)))  # fmt: skip
    losses = {}
    for attn in ("sdpa", "sdpa_varlen"):
        out = tmp_path / attn
        r = dojo_train(out, "--max-steps", "3", "--data", str(docs), "--packing", "--zero", "2",
                       "--attn", attn, "--logging-steps", "1")  # fmt: skip
        assert r.returncode == 0, r.stderr[-4000:]
        assert f"packing: on (attention '{attn}'" in r.stderr
        losses[attn] = (summary(out)["loss_first"], summary(out)["loss_last"])
        cfg = AutoConfig.from_pretrained(out)  # a plain load: no trace of dojo's attention name
        assert "sdpa_varlen" not in (out / "config.json").read_text(), cfg
    assert losses["sdpa_varlen"] == pytest.approx(losses["sdpa"], rel=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "lengths", [(70, 120, 50, 90, 30, 200, 17), (256, 256, 256)], ids=["packed", "equal"]
)
def test_varlen_cuda_kernel_matches_masked_sdpa(lengths: tuple[int, ...]) -> None:
    """On CUDA in bf16 the offsets go to PyTorch's FlashAttention kernel (GQA: 4 heads, 2 kv
    heads), or samples of one length to one dense causal SDPA call; logits and gradients must
    match masked SDPA to bf16 precision."""
    import torch

    rows = pack(random_examples(lengths), 256)
    batch = {k: v.cuda() if hasattr(v, "cuda") else v
             for k, v in PackedCollator(pad_id=0, varlen=True)(rows).items()}  # fmt: skip
    ref_model, var_model = (
        tiny_llama(a).to("cuda", torch.bfloat16) for a in ("sdpa", "sdpa_varlen")
    )
    var_model.load_state_dict(ref_model.state_dict())
    plain = {k: batch[k] for k in ("input_ids", "labels", "position_ids")}
    ref, var = ref_model(**plain), var_model(**batch)
    ref.loss.backward()
    var.loss.backward()
    torch.testing.assert_close(var.logits, ref.logits, atol=3e-2, rtol=3e-2)
    for p, q in zip(ref_model.parameters(), var_model.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, atol=3e-2, rtol=5e-2)


def test_fp32_query_under_autocast_takes_the_autocast_dtype() -> None:
    """QLoRA without DeepSpeed hands attention fp32 q/k/v under bf16 autocast (k-bit prep's fp32
    residual stream): sdpa_varlen runs them in bf16, as SDPA would, so a GPU takes the
    FlashAttention kernel rather than the per-sample loop; outside autocast fp32 stays fp32."""
    import torch

    from dojo.train.worker.varlen import compute_dtype

    q = torch.zeros(2, 3)
    assert compute_dtype(q) == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert compute_dtype(q) == torch.bfloat16
        assert compute_dtype(q.to(torch.float16)) == torch.float16  # already 16-bit: kept


@pytest.mark.gpu
def test_varlen_cuda_fp32_under_autocast_takes_flash(monkeypatch: pytest.MonkeyPatch) -> None:
    """fp32 q/k/v under bf16 autocast (QLoRA without DeepSpeed: bitsandbytes' 4-bit linears
    return the fp32 residual stream's dtype) reach the FlashAttention kernel in bf16, never the
    per-sample loop, and match the per-sample SDPA over the same bf16 inputs."""
    import torch

    from dojo.train.worker import varlen

    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(1, h, 256, 64, device="cuda", generator=g) for h in (4, 2, 2))
    cu = [0, 70, 190, 256]
    flat = [t.transpose(1, 2).reshape(256, t.shape[1], 64).bfloat16() for t in (q, k, v)]
    expected = varlen._per_sample(*flat, cu, None, 0.0, None)

    def no_loop(*a: Any, **kw: Any) -> None:
        raise AssertionError("the per-sample loop ran on CUDA")

    monkeypatch.setattr(varlen, "_per_sample", no_loop)
    offsets = torch.tensor(cu, dtype=torch.int32)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out, _ = varlen.attention(None, q, k, v, None, cu_seq_lens_q=offsets, max_length_q=120)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.reshape(256, 4, 64), expected, atol=2e-2, rtol=2e-2)
