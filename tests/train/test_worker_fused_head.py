"""ORPO's and SimPO's forward through TRL's fused LM head (dojo.train.worker.fused_head) against
TRL's own ``concatenated_forward`` on the model's whole logits: the same log-probabilities, NLL
term and gradients, on a padded batch of mixed lengths, padded and unpadded (CPU)."""

from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("trl", reason="needs the train extra")

import torch  # noqa: E402

from dojo.train.worker import fused_head, unpadded  # noqa: E402
from tests.helpers.examples import tiny_llama  # noqa: E402

PAIRS = ((3, 6, 2), (5, 2, 9), (2, 4, 4))
"""(prompt, chosen answer, rejected answer) lengths: each side padded to its own longest, then
both to the batch's longest by TRL's concatenated_inputs."""


def _batch() -> dict[str, torch.Tensor]:
    """ORPO's / CPO's collated batch (dojo's tokenize_row layout), right-padded with id 0."""
    g = torch.Generator().manual_seed(3)
    out: dict[str, torch.Tensor] = {}
    for side, k in (("chosen", 1), ("rejected", 2)):
        rows = []
        for pair in PAIRS:
            prompt = torch.randint(3, 200, (pair[0],), generator=g).tolist()
            answer = torch.randint(3, 200, (pair[k],), generator=g).tolist()
            rows.append((prompt + answer, [-100] * len(prompt) + answer))
        longest = max(len(ids) for ids, _ in rows)
        ids = torch.zeros(len(rows), longest, dtype=torch.long)
        labels = torch.full_like(ids, -100)
        mask = torch.zeros_like(ids)
        for r, (seq, lab) in enumerate(rows):
            ids[r, : len(seq)], labels[r, : len(seq)], mask[r, : len(seq)] = (
                torch.tensor(seq), torch.tensor(lab), 1)  # fmt: skip
        out |= {f"{side}_input_ids": ids, f"{side}_attention_mask": mask, f"{side}_labels": labels}
    return out


def _trainer(cls: Any, **kw: Any) -> SimpleNamespace:
    """What TRL's concatenated_forward reads of its trainer."""
    return SimpleNamespace(
        concatenated_inputs=cls.concatenated_inputs, get_batch_logps=cls.get_batch_logps,
        is_encoder_decoder=False, padding_value=0, pad_token_id=0, aux_loss_enabled=False,
        accelerator=SimpleNamespace(device=torch.device("cpu")), **kw,
    )  # fmt: skip


def _grads(model: Any, outputs: tuple[Any, ...]) -> dict[str, torch.Tensor]:
    """Gradients of a loss that reads the log-probabilities and the NLL term, as TRL's do."""
    model.zero_grad()
    chosen, rejected, _, _, nll = outputs[:5]
    (nll + 0.7 * chosen.sum() - 0.3 * rejected.sum()).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}


def _compare(trl_out: tuple[Any, ...], ours: tuple[Any, ...], model: Any, trl_model: Any) -> None:
    for a, b in zip(trl_out[:2], ours[:2], strict=True):
        assert a.shape == b.shape == (len(PAIRS),)
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(ours[4], trl_out[4], rtol=1e-4, atol=1e-5)
    theirs, mine = _grads(trl_model, trl_out), _grads(model, ours)
    for name, g in theirs.items():
        torch.testing.assert_close(mine[name], g, rtol=1e-3, atol=1e-5, msg=name)


@pytest.mark.parametrize("attn", ["sdpa", "sdpa_varlen"])
def test_orpo_forward_matches_trls_on_whole_logits(attn: str) -> None:
    from trl.experimental.orpo import ORPOTrainer

    batch, trainer = _batch(), _trainer(ORPOTrainer)
    reference, model = tiny_llama("sdpa"), tiny_llama(attn)
    model.load_state_dict(reference.state_dict())
    fused_head.install(model)
    if attn == "sdpa_varlen":
        unpadded.install(model, attn)
    trl_out = ORPOTrainer.concatenated_forward(trainer, reference, batch)
    ours = fused_head.concatenated_forward(trainer, model, batch, nll="sequence", average=True,
                                           padding_value=0)  # fmt: skip
    assert float(trl_out[4]) > 0  # ORPO's NLL over the chosen prompts and answers
    _compare(trl_out, ours, model, reference)


@pytest.mark.parametrize(("loss_type", "alpha"), [("simpo", 0.0), ("sigmoid", 1.0)])
def test_cpo_forward_matches_trls_on_whole_logits(loss_type: str, alpha: float) -> None:
    """SimPO (dojo's: averaged log-probabilities, no NLL) and CPO's own sigmoid loss with its
    NLL over the chosen answers (summed log-probabilities)."""
    from trl.experimental.cpo import CPOTrainer

    batch = _batch()
    trainer = _trainer(CPOTrainer, loss_type=loss_type, cpo_alpha=alpha)
    reference, model = tiny_llama("sdpa"), tiny_llama("sdpa")
    model.load_state_dict(reference.state_dict())
    fused_head.install(model)
    trl_out = CPOTrainer.concatenated_forward(trainer, reference, batch)
    ours = fused_head.concatenated_forward(
        trainer, model, batch, nll="answer" if alpha else "", average=loss_type == "simpo",
        padding_value=0,
    )  # fmt: skip
    assert (float(trl_out[4]) > 0) == bool(alpha)
    _compare(trl_out, ours, model, reference)


def test_mean_logits_are_the_answers() -> None:
    """logits/chosen and logits/rejected: the mean logit over each side's answer tokens (TRL's
    DPOTrainer's definition), from the whole logits of the same model."""
    from trl.experimental.orpo import ORPOTrainer

    batch, trainer = _batch(), _trainer(ORPOTrainer)
    model = tiny_llama("sdpa")
    fused_head.install(model)
    ours = fused_head.concatenated_forward(trainer, model, batch, nll="sequence", average=True,
                                           padding_value=0)  # fmt: skip
    cat = ORPOTrainer.concatenated_inputs(batch, padding_value=0)
    with torch.no_grad():
        logits = model(cat["concatenated_input_ids"],
                       attention_mask=cat["concatenated_attention_mask"]).logits  # fmt: skip
    per_token = logits[:, :-1].mean(-1)
    answer = cat["concatenated_labels"][:, 1:] != -100
    n = len(PAIRS)
    for got, rows in ((ours[2], slice(0, n)), (ours[3], slice(n, None))):
        want = per_token[rows][answer[rows]].mean()
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_the_whole_logits_are_never_kept() -> None:
    """The point of the head: nothing the backward keeps is the size of the batch's logits
    (TRL's chunked function keeps the hidden states and recomputes each tile), where TRL's own
    forward keeps at least one such tensor."""
    from trl.experimental.orpo import ORPOTrainer

    batch, trainer = _batch(), _trainer(ORPOTrainer)
    reference, model = tiny_llama("sdpa"), tiny_llama("sdpa")
    fused_head.install(model)
    rows, longest = ORPOTrainer.concatenated_inputs(batch)["concatenated_input_ids"].shape
    logits = rows * (longest - 1) * model.config.vocab_size

    weights = {p.data_ptr() for m in (reference, model) for p in m.parameters()}

    def largest_kept(forward: Any) -> int:
        sizes: list[int] = []

        def note(t: torch.Tensor) -> torch.Tensor:
            if t.data_ptr() not in weights:  # the tiny model's head weight outsizes its logits
                sizes.append(t.numel())
            return t

        with torch.autograd.graph.saved_tensors_hooks(note, lambda t: t):
            forward()
        return max(sizes)

    assert (
        largest_kept(lambda: ORPOTrainer.concatenated_forward(trainer, reference, batch)) >= logits
    )
    assert largest_kept(lambda: fused_head.concatenated_forward(
        trainer, model, batch, nll="sequence", average=True, padding_value=0)) < logits  # fmt: skip


def test_the_collators_plan_unpads_without_reading_the_mask(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under sdpa_varlen the collator plans ORPO's and SimPO's concatenated layout on the host
    (unpadded.pair_mask, as CountTokens does), and the forward uses it: no plan is made from
    the device's mask, and the result is the padded run's."""
    from trl.experimental.orpo import ORPOTrainer

    batch, trainer = _batch(), _trainer(ORPOTrainer)
    reference, model = tiny_llama("sdpa"), tiny_llama("sdpa_varlen")
    model.load_state_dict(reference.state_dict())
    fused_head.install(model)
    unpadded.install(model, "sdpa_varlen")
    mask = unpadded.pair_mask(batch["chosen_attention_mask"], batch["rejected_attention_mask"])
    # TRL's own layout of the concatenated batch, which the plan's shape guard checks
    cat = ORPOTrainer.concatenated_inputs(batch)["concatenated_attention_mask"]
    assert torch.equal(mask, cat) and mask.shape == (2 * len(PAIRS), 14)
    batch[unpadded.PLAN_KEY] = unpadded.plan(mask)
    trl_out = ORPOTrainer.concatenated_forward(trainer, reference, batch)

    def no_plan(_: torch.Tensor) -> None:
        raise AssertionError("a plan was made from the mask in the forward")

    monkeypatch.setattr(unpadded, "plan", no_plan)
    ours = fused_head.concatenated_forward(trainer, model, batch, nll="sequence", average=True,
                                           padding_value=0)  # fmt: skip
    _compare(trl_out, ours, model, reference)


def test_count_tokens_plans_orpo_and_simpo_batches() -> None:
    """The collator wrapper dojo puts in TRL's place counts each pair's real tokens and, under
    an unpadded kernel, plans the concatenated layout from the two sides' masks."""
    from dojo.train.worker.objectives import CountTokens
    from dojo.train.worker.packing import TOKENS

    batch = _batch()
    features = [{"chosen_input_ids": [0] * int(c.sum()), "rejected_input_ids": [0] * int(r.sum())}
                for c, r in zip(batch["chosen_attention_mask"], batch["rejected_attention_mask"],
                                strict=True)]  # fmt: skip
    keys = ("chosen_input_ids", "rejected_input_ids")
    planned = CountTokens(lambda f: dict(batch), keys, {}, (), unpad=True)(features)
    plain = CountTokens(lambda f: dict(batch), keys, {}, (), unpad=False)(features)
    real = sum(2 * p + c + r for p, c, r in PAIRS)  # each side with its prompt
    assert planned[TOKENS] == plain[TOKENS] == real
    assert unpadded.PLAN_KEY not in plain
    flat = planned[unpadded.PLAN_KEY]
    assert flat["shape"] == (2 * len(PAIRS), 14) and int(flat["cu_seq_lens"][-1]) == real


@pytest.mark.gpu
@pytest.mark.parametrize("objective", ["orpo", "simpo"])
def test_cuda_scores_only_the_labelled_positions_and_matches_trl(objective: str) -> None:
    """On CUDA TRL's head scores only the positions with a label (its Triton path), a code path
    the CPU never takes: the log-probabilities and the NLL term still match TRL's trainers on
    the whole logits (fp32 weights, so the comparison is not bf16's rounding)."""
    from trl.experimental.cpo import CPOTrainer
    from trl.experimental.orpo import ORPOTrainer

    cls = ORPOTrainer if objective == "orpo" else CPOTrainer
    batch = {k: v.cuda() for k, v in _batch().items()}
    trainer = _trainer(cls, loss_type="simpo", cpo_alpha=0.0)
    trainer.accelerator.device = torch.device("cuda")
    reference, model = tiny_llama("sdpa").cuda(), tiny_llama("sdpa").cuda()
    model.load_state_dict(reference.state_dict())
    fused_head.install(model)
    trl_out = cls.concatenated_forward(trainer, reference, batch)
    nll = "sequence" if objective == "orpo" else ""
    ours = fused_head.concatenated_forward(trainer, model, batch, nll=nll, average=True,
                                           padding_value=0)  # fmt: skip
    _compare(trl_out, ours, model, reference)
