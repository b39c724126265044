"""Preference batches without padding (dojo.train.worker.unpadded): the decoder runs on the
real tokens of a padded batch, and TRL's head and the models' own heads see what a padded run
gives them (CPU: sdpa_varlen's exact per-sample path)."""

from typing import Any

import pytest

pytest.importorskip("trl", reason="needs the train extra")

import torch  # noqa: E402

from dojo.train.worker import unpadded  # noqa: E402
from tests.helpers.examples import tiny_llama  # noqa: E402

LENGTHS = (9, 4, 13, 6)


def _padded_batch() -> dict[str, torch.Tensor]:
    """Right-padded rows as TRL's DataCollatorForPreference makes them; labels -100 on the
    prompt (the first 3 tokens) and on padding."""
    g = torch.Generator().manual_seed(1)
    longest = max(LENGTHS)
    ids = torch.zeros(len(LENGTHS), longest, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, n in enumerate(LENGTHS):
        ids[r, :n] = torch.randint(3, 200, (n,), generator=g)
        mask[r, :n] = 1
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :3] = -100
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def test_plan_flattens_right_padded_rows() -> None:
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]])
    p = unpadded.plan(mask)
    assert p is not None
    assert p["index"].tolist() == [0, 1, 2, 4, 5, 8, 9, 10, 11]
    assert p["position_ids"].tolist() == [[0, 1, 2, 0, 1, 0, 1, 2, 3]]
    assert p["cu_seq_lens"].tolist() == [0, 3, 5, 9] and p["cu_seq_lens"].dtype == torch.int32
    assert p["max_length"] == 4


@pytest.mark.parametrize(
    "mask", [[[0, 1, 1], [1, 1, 1]], [[1, 0, 1], [1, 1, 1]], [[0, 0, 0], [1, 1, 1]]]
)
def test_plan_leaves_other_layouts_padded(mask: list[list[int]]) -> None:
    """Left padding, a hole, an empty row: not right-padded, so no plan (the batch stays as it is)."""
    assert unpadded.plan(torch.tensor(mask)) is None


@pytest.mark.parametrize("planned", [True, False, "positional"])
def test_trl_fused_head_log_probs_and_grads_match_the_padded_run(planned: bool | str) -> None:
    """TRL's fused LM head (what every preference objective calls) on the same weights and
    batch: padded under sdpa, and unpadded under sdpa_varlen with the collator's plan or one
    made from the mask, the ids given by name or first (the head hands them on as given)."""
    from trl.trainer.utils import add_fused_lm_head

    batch = _padded_batch()
    padded, flat = tiny_llama("sdpa"), tiny_llama("sdpa_varlen")
    flat.load_state_dict(padded.state_dict())
    for m in (padded, flat):
        add_fused_lm_head(m)
    unpadded.install(flat)
    extra = {unpadded.PLAN_KEY: unpadded.plan(batch["attention_mask"])} if planned is True else {}
    a = padded(**batch, fused_lm_head=True).log_probs
    if planned == "positional":
        ids = batch.pop("input_ids")
        b = flat(ids, **batch, fused_lm_head=True).log_probs
    else:
        b = flat(**batch, **extra, fused_lm_head=True).log_probs
    assert a.shape == b.shape == (len(LENGTHS), max(LENGTHS) - 1)
    assert bool((a != 0).any())
    torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
    a.sum().backward()
    b.sum().backward()
    for (name, pa), pb in zip(padded.named_parameters(), flat.parameters(), strict=True):
        torch.testing.assert_close(pb.grad, pa.grad, rtol=1e-3, atol=1e-5, msg=name)


def test_model_logits_match_at_real_tokens() -> None:
    """ORPO and SimPO call the model's own head on the concatenated batch: its logits at real
    tokens are the padded run's (padding positions are never read: their labels are -100)."""
    batch = _padded_batch()
    padded, flat = tiny_llama("sdpa"), tiny_llama("sdpa_varlen")
    flat.load_state_dict(padded.state_dict())
    unpadded.install(flat)
    kw = {k: batch[k] for k in ("input_ids", "attention_mask")}
    a, b = padded(**kw).logits, flat(**kw).logits
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(b[real], a[real], rtol=1e-4, atol=1e-5)


def test_lora_wrapped_model_still_runs_unpadded() -> None:
    """PEFT calls the base model's forward directly, not as a module: the hooks sit on the
    backbone, which PEFT's wrapper calls as a module, so they still run (the reference's
    adapter-off pass is the same path)."""
    from peft import LoraConfig, get_peft_model

    batch = _padded_batch()
    model = tiny_llama("sdpa_varlen")
    hooks = unpadded.install(model)
    seen: list[tuple[int, ...]] = []
    unpadded.backbone(model).register_forward_pre_hook(
        lambda mod, args, kw: seen.append(tuple(kw["input_ids"].shape)), with_kwargs=True
    )
    peft = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    with peft.disable_adapter():
        peft(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    assert seen == [(1, sum(LENGTHS))]  # flattened before the layers
    assert hooks._open == []


def test_moe_aux_loss_is_refused_with_the_fix() -> None:
    batch = _padded_batch()
    model = tiny_llama("sdpa_varlen")
    unpadded.install(model)
    with pytest.raises(ValueError, match="--attn sdpa"):
        unpadded.backbone(model)(input_ids=batch["input_ids"],
                                 attention_mask=batch["attention_mask"], output_router_logits=True)  # fmt: skip


@pytest.mark.gpu
def test_cuda_unpadded_takes_flash_and_matches_the_padded_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On CUDA in bf16 the unpadded batch reaches the FlashAttention kernel (never the
    per-sample loop), and TRL's log-probabilities match the padded SDPA run's."""
    from trl.trainer.utils import add_fused_lm_head

    from dojo.train.worker import varlen

    def no_loop(*a: Any, **kw: Any) -> None:
        raise AssertionError("the per-sample loop ran on CUDA")

    monkeypatch.setattr(varlen, "_per_sample", no_loop)
    batch = {k: v.cuda() for k, v in _padded_batch().items()}
    padded, flat = (tiny_llama(a).to("cuda", torch.bfloat16) for a in ("sdpa", "sdpa_varlen"))
    flat.load_state_dict(padded.state_dict())
    for m in (padded, flat):
        add_fused_lm_head(m)
    unpadded.install(flat)
    plan = unpadded.plan(batch["attention_mask"])
    a = padded(**batch, fused_lm_head=True).log_probs
    b = flat(**batch, **{unpadded.PLAN_KEY: plan}, fused_lm_head=True).log_probs
    torch.testing.assert_close(b.float(), a.float(), atol=5e-2, rtol=2e-2)


def test_a_plan_for_another_shape_is_not_used() -> None:
    """TRL hands a batch's extra keys to every model call it makes from that batch (KTO's KL
    call: other sequences): a plan whose shape is not the call's is dropped for the mask's."""
    batch = _padded_batch()
    model = tiny_llama("sdpa_varlen")
    unpadded.install(model)
    seen: list[int] = []
    unpadded.backbone(model).register_forward_pre_hook(
        lambda mod, args, kw: seen.append(kw["input_ids"].shape[1]), with_kwargs=True
    )
    other = unpadded.plan(torch.ones(2, 5, dtype=torch.long))
    kw = {k: batch[k] for k in ("input_ids", "attention_mask")}
    model(**kw, **{unpadded.PLAN_KEY: other})
    assert seen == [sum(LENGTHS)]


def test_a_batch_it_cannot_unpad_names_the_fix() -> None:
    """A left-padded batch cannot be unpadded, and transformers gives sdpa_varlen no mask to
    fall back on: one error that says what to use instead (not a wrong attention)."""
    model = tiny_llama("sdpa_varlen")
    unpadded.install(model)
    ids = torch.tensor([[0, 0, 5, 6], [7, 8, 9, 10]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    with pytest.raises(
        ValueError, match="not at the end of each row, or an empty row; use --attn sdpa"
    ):
        model(input_ids=ids, attention_mask=mask)
