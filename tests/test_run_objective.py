"""The objective group (dojo.run.groups.objective): parsing, TRL's defaults, the rules that tie
the preference options together, and what `dojo estimate --objective` adds (pure, fast)."""

from typing import Any

import pytest

from dojo.errors import ConfigError
from dojo.estimate.model import estimate
from dojo.estimate.setup import Setup
from dojo.modelspec import resolve_model
from dojo.run import render
from dojo.run.machine import Machine
from dojo.run.schema import OPTIONS, command_options
from tests.helpers.runs import CPU, CUDA, run_of

CUDA_LIGER = Machine(cuda=True, gpu_ids=(0,), gpu_memory_gib=139.8, liger=True)
GIB = 2**30


def test_objective_options_and_commands() -> None:
    assert OPTIONS["objective"].choices == ("sft", "dpo", "orpo", "kto", "simpo")
    assert OPTIONS["objective"].group == "objective"
    for name in ("objective", "precompute_ref_log_probs"):  # they change memory
        assert name in command_options("estimate") and name in command_options("train")
    for name in ("beta", "loss_type", "simpo_gamma", "rpo_alpha"):
        assert name in command_options("train") and name not in command_options("estimate")
    assert "objective" not in command_options("config")


@pytest.mark.parametrize(
    ("given", "expect"),
    [
        ({"objective": "dpo"}, {"beta": 0.1, "loss_type": "sigmoid", "simpo_gamma": None}),
        ({"objective": "kto"}, {"beta": 0.1, "loss_type": "kto"}),
        ({"objective": "simpo"}, {"beta": 0.1, "simpo_gamma": 0.5, "loss_type": "auto"}),
        ({"objective": "orpo", "beta": 0.25}, {"beta": 0.25, "loss_type": "auto"}),
        ({"objective": "dpo", "loss_type": "ipo", "rpo_alpha": 1.0}, {"loss_type": "ipo", "rpo_alpha": 1.0}),
        ({}, {"objective": "sft", "beta": None}),
    ],
)  # fmt: skip
def test_trl_defaults_resolved(given: dict[str, Any], expect: dict[str, Any]) -> None:
    o = run_of(micro_batch=2, **given).objective
    assert {k: getattr(o, k) for k in expect} == expect


@pytest.mark.parametrize(
    ("method", "objective", "lr"),
    [("lora", "dpo", 5e-6), ("full", "kto", 1e-6), ("lora", "sft", 2e-4), ("full", "sft", 2e-5)],
)
def test_learning_rate_default_by_objective(method: str, objective: str, lr: float) -> None:
    assert run_of(method=method, objective=objective, micro_batch=2).loop.lr == lr
    assert run_of(method=method, objective=objective, micro_batch=2, lr=1e-3).loop.lr == 1e-3


def test_liger_auto_is_off_for_preference() -> None:
    run = run_of(CUDA_LIGER, objective="dpo")
    assert run.kernels.liger == "off" and not run.kernels.fused_loss
    assert any("TRL's preference trainers" in a for a in run.assumed)
    assert run_of(CUDA_LIGER).kernels.liger == "on"  # SFT as before


@pytest.mark.parametrize(
    ("given", "needle", "hint"),
    [
        ({"objective": "dpo", "simpo_gamma": 1.0}, "--simpo-gamma applies to --objective simpo", "drop --simpo-gamma"),
        ({"objective": "kto", "rpo_alpha": 1.0, "micro_batch": 2}, "--rpo-alpha adds an NLL term to DPO", "--objective dpo"),
        ({"objective": "orpo", "precompute_ref_log_probs": True}, "--objective orpo has no reference model", "dpo and kto"),
        ({"objective": "kto", "loss_type": "hinge", "micro_batch": 2}, "--loss-type hinge is not a loss of --objective kto", "kto, apo_zero_unpaired"),
        ({"objective": "simpo", "loss_type": "ipo"}, "--loss-type ipo is not a loss of --objective simpo", "drop --loss-type: --objective simpo has one loss"),
        ({"beta": 0.5}, "--beta applies to a preference objective", "--objective dpo"),
        ({"objective": "kto", "micro_batch": 1}, "--objective kto needs --micro-batch 2", "apo_zero_unpaired"),
        ({"objective": "dpo", "packing": True}, "--packing with --objective dpo", "drop --packing"),
        ({"objective": "dpo", "liger": "loss"}, "--liger loss with --objective dpo", "--liger off"),
    ],
)  # fmt: skip
def test_rules_refuse_with_the_fix(given: dict[str, Any], needle: str, hint: str) -> None:
    machine = CUDA if given.get("liger") else CPU
    with pytest.raises(ConfigError) as e:
        run_of(machine, **given)
    assert needle in e.value.message and hint in (e.value.hint or "")


def test_kto_without_kl_takes_one_row_per_micro_batch() -> None:
    run_of(objective="kto", loss_type="apo_zero_unpaired", micro_batch=1)


def test_every_problem_in_one_error() -> None:
    with pytest.raises(ConfigError) as e:
        run_of(objective="orpo", simpo_gamma=1.0, rpo_alpha=1.0, precompute_ref_log_probs=True)
    assert [m.split(" ")[0] for m, _ in e.value.lines()] == [
        "--simpo-gamma", "--rpo-alpha", "--precompute-ref-log-probs:"
    ]  # fmt: skip


def test_run_record_round_trips_the_objective() -> None:
    from dojo.run.run import Run

    run = run_of(objective="dpo", rpo_alpha=0.5, method="lora")
    assert Run.from_dict(run.to_dict()) == run
    old = run.to_dict()
    del old["objective"]  # a record written before the group existed: SFT
    assert Run.from_dict(old).objective.objective == "sft"


# ---- dojo estimate --objective --------------------------------------------------------------


def _est(machine: Machine = CUDA, gpus: int = 1, **given: Any) -> Any:
    spec = resolve_model("1b")
    given.setdefault("micro_batch", 2)
    run = run_of(machine, spec=spec, gpus_per_node=gpus, seq_len=1024, **given)
    return estimate(spec, render.estimate_setup(run, 139.8))


def test_reference_copy_for_full_dpo_and_kto_only() -> None:
    p = resolve_model("1b").params
    assert _est(objective="dpo", method="full").reference == 2 * p
    assert _est(objective="kto", method="full").reference == 2 * p
    assert _est(objective="dpo", method="full", stage=3, gpus=4).reference == 2 * p // 4
    for given in ({"objective": "dpo", "method": "lora"},  # the adapter disabled: no copy
                  {"objective": "dpo", "method": "full", "precompute_ref_log_probs": True},
                  {"objective": "orpo", "method": "full"}, {"objective": "simpo", "method": "full"},
                  {"method": "full"}):  # fmt: skip
        assert _est(**given).reference == 0, given


def test_reference_is_in_the_params_column_and_the_total() -> None:
    dpo, pre = (
        _est(objective="dpo", method="full"),
        _est(objective="dpo", method="full", precompute_ref_log_probs=True),
    )
    assert dpo.gpu_columns()["params"] - pre.gpu_columns()["params"] == dpo.reference
    assert dpo.gpu_total - pre.gpu_total >= dpo.reference
    assert any("reference model" in n for n in dpo.notes)


def test_pairs_double_the_activations() -> None:
    # (TRL turns LoRA's dropout off: compared with SFT without it)
    sft, dpo = _est(method="lora", lora_dropout=0.0), _est(method="lora", objective="dpo")
    kto = _est(method="lora", objective="kto")
    assert dpo.setup.batch_rows == 4 and kto.setup.batch_rows == 2
    # chosen and rejected in one forward: twice the tokens through every layer
    assert dpo.activations == pytest.approx(2 * sft.activations, rel=0.15)
    assert kto.activations == pytest.approx(sft.activations, rel=0.15)


def test_every_objective_scores_through_trls_chunked_head() -> None:
    """DPO and KTO (TRL's own trainers) and ORPO and SimPO (dojo.train.worker.fused_head) score
    the answers through TRL's fused head: the same loss term for the same tokens, never the
    (tokens x vocab) logits, and so no logits block in the reserve either, where SFT's loss
    leaves a share of its fp32 copy."""
    from dojo.estimate.activations import activation_phases

    spec = resolve_model("1b")
    tokens = 2 * 2 * 1024  # micro-batch 2, chosen + rejected, seq 1024
    setups = {o: _est(method="lora", objective=o).setup for o in ("orpo", "simpo", "dpo")}
    loss = {o: activation_phases(spec, s)[3] for o, s in setups.items()}
    assert loss["orpo"] == loss["simpo"] == loss["dpo"] < tokens * spec.vocab_size
    assert not any(s.full_logits for s in setups.values())
    sft = _est(method="lora", micro_batch=4, liger="off", packing=False)  # the same 4 x 1024
    orpo, simpo = _est(method="lora", objective="orpo"), _est(method="lora", objective="simpo")
    assert sft.setup.kernels.expandable and orpo.setup.kernels.expandable
    share = sft.setup.calibration.expandable_logits_reserve
    logits_share = share * 2 * 2 * 4 * 1024 * spec.vocab_size
    # beside it, ZeRO-2's step without checkpointing: the adapters' bf16 partition and norm copy
    step_holes = 2 * sft.trainable_params + 8 * 16 * spec.intermediate_size  # r 16 x MLP width
    assert sft.fragmentation == pytest.approx(logits_share + step_holes, rel=1e-6)
    assert orpo.fragmentation == simpo.fragmentation < 0.02 * sft.fragmentation


def test_zero3_lora_adapters_are_bf16_under_trl() -> None:
    sft = _est(method="lora", stage=3)
    dpo = _est(method="lora", stage=3, objective="dpo")
    assert sft.setup.fp32_adapters and not dpo.setup.fp32_adapters


def test_setup_of_takes_the_objective() -> None:
    s = Setup.of(objective="dpo", method="full", stage=3, gpus_per_node=8)
    assert s.reference == "copy" and s.batch_rows == 2
    est = estimate(resolve_model("7b"), s)
    assert est.reference == 2 * resolve_model("7b").params // 8


def test_estimate_cli_says_the_objective(cli: Any) -> None:
    r = cli("estimate", "--model", "1b", "--objective", "dpo", "--method", "full", "--zero", "3",
            "--num-gpus", "2", "--json")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    assert "reference model: a frozen bf16 copy" in r.stderr
    plain = cli("estimate", "--model", "1b", "--objective", "kto", "--method", "lora")
    assert "KTO lora r=16, reference adapter-off" in plain.stdout
    assert GIB  # the table is per GPU, in GiB


def test_trl_turns_lora_dropout_off() -> None:
    sft = _est(method="lora", lora_dropout=0.1)
    dpo = _est(method="lora", lora_dropout=0.1, objective="dpo")
    assert sft.setup.lora_dropout == 0.1 and dpo.setup.lora_dropout == 0.0


def test_preference_runs_unpadded_where_sft_would_pack() -> None:
    """A preference batch is padded, but the worker takes the padding out before the layers
    under sdpa_varlen: auto picks it on the terms it picks it for packed SFT, and says why."""
    llama, gemma2 = resolve_model("llama-3.2-1b"), resolve_model("gemma-2-2b")
    run = run_of(CUDA, llama, objective="dpo", method="lora")
    assert run.kernels.attn == "sdpa_varlen"
    assert any(
        a.startswith("attn sdpa_varlen: the preference batch's sequences") for a in run.assumed
    )
    assert run_of(CUDA, llama, objective="kto", micro_batch=2).kernels.attn == "sdpa_varlen"
    assert run_of(CUDA, llama).kernels.attn == "sdpa"  # padded SFT: nothing to take out
    assert run_of(CPU, llama, objective="dpo").kernels.attn == "sdpa"
    assert run_of(CUDA, gemma2, objective="dpo").kernels.attn == "eager"  # soft-capping
    # asked for: no --packing needed (it is refused with a preference objective)
    assert run_of(CPU, objective="orpo", attn="sdpa_varlen").kernels.attn == "sdpa_varlen"
    assert run_of(CUDA, llama, objective="dpo", attn="sdpa").kernels.attn == "sdpa"
