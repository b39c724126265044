"""The training-loop options: catalogue, YAML, resolve rules, errors."""

import dataclasses
import json
import typing
from pathlib import Path
from typing import Any

import pytest

from dojo.errors import ConfigError
from dojo.run import inputs, resolve
from dojo.run.groups import output
from dojo.run.groups.loop import Scheduler
from dojo.run.run import Run
from dojo.run.schema import OPTIONS, command_options
from tests.helpers.runs import CPU, CUDA, run_of

NEW = ("eval_data", "eval_split", "eval_steps", "early_stopping", "keep_best", "warmup_ratio",
       "lr_scheduler", "weight_decay", "max_grad_norm", "neftune_alpha", "rslora", "report_to",
       "logging_steps")  # fmt: skip
MEMORY = ("dora", "modules_to_save")
"""LoRA options that change memory: dojo estimate takes them too."""


def test_new_options_are_train_options_only() -> None:
    for name in NEW:
        assert name in command_options("train"), name
        assert name not in command_options("config") and name not in command_options("estimate")
    for name in MEMORY:
        assert name in command_options("estimate") and name not in command_options("config")
    assert OPTIONS["lr_scheduler"].flags == ("--lr-scheduler", "--scheduler-type")
    assert set(typing.get_args(Scheduler)) >= {"linear", "cosine", "cosine_with_restarts",
                                               "constant_with_warmup"}  # fmt: skip


@pytest.mark.parametrize(
    ("name", "raw", "typed"),
    [
        ("eval_split", "0.05", 0.05),
        ("eval_steps", "1e2", 100),
        ("early_stopping", "3", 3),
        ("keep_best", "ON", "on"),
        ("warmup_ratio", "0.03", 0.03),
        ("lr_scheduler", "Cosine", "cosine"),
        ("weight_decay", "0.1", 0.1),
        ("max_grad_norm", "0", 0.0),
        ("neftune_alpha", "5", 5.0),
        ("dora", "yes", True),
        ("report_to", "wandb", "wandb"),
        ("logging_steps", "auto", "auto"),
        ("logging_steps", "10", 10),
        ("eval_data", ["a.jsonl", "b.jsonl"], ("a.jsonl", "b.jsonl")),
    ],
)
def test_values_parse(name: str, raw: Any, typed: Any) -> None:
    assert OPTIONS[name].parse(raw) == typed


@pytest.mark.parametrize(
    ("name", "raw", "needle"),
    [
        ("eval_split", "0.9", "--eval-split '0.9': out of range: from 1e-06 to 0.5"),
        ("eval_split", "0", "out of range"),
        ("eval_steps", "0", "--eval-steps '0': out of range"),
        ("early_stopping", "2.5", "must be a whole number"),
        ("warmup_ratio", "1", "--warmup-ratio '1': out of range"),
        ("lr_scheduler", "cosine_annealing", "choose one of linear, cosine"),
        ("weight_decay", "-0.1", "out of range"),
        ("max_grad_norm", "inf", "must be a number"),
        ("neftune_alpha", "0", "out of range"),
        ("report_to", "comet", "choose one of auto, tensorboard, wandb, mlflow, none"),
        ("logging_steps", "0", "--logging-steps '0': out of range"),
        ("logging_steps", "often", "must be a whole number"),
        ("keep_best", "maybe", "choose one of auto, on, off"),
    ],
)
def test_bad_values_name_flag_and_value(name: str, raw: Any, needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        OPTIONS[name].parse(raw)
    assert needle in e.value.message and e.value.hint


def test_yaml_keys_and_flags_override(tmp_path: Path) -> None:
    f = tmp_path / "run.yaml"
    f.write_text(
        "method: lora\neval-split: 0.1\nearly_stopping: 2\nscheduler_type: cosine\n"
        "warmup_ratio: 0.05\ndora: true\nmodules_to_save: embed_tokens,lm_head\n"
        "report_to: none\nlogging_steps: auto\n"
    )
    file_values = inputs.load_file(f)
    v = inputs.merge("train", file_values, {"lr_scheduler": "constant_with_warmup"})
    assert (v.data.eval_split, v.loop.early_stopping, v.loop.warmup_ratio) == (0.1, 2, 0.05)
    assert v.loop.lr_scheduler == "constant_with_warmup" and v.lora.dora is True
    run = resolve.resolve(v, machine=CPU, given=set(file_values) | {"lr_scheduler"})
    assert run.lora.modules_to_save == ("embed_tokens", "lm_head")
    assert run.output.report_to == "none"
    assert run.loop.keep_best == "on" and run.loop.eval_steps == 50  # auto with early stopping
    f.write_text("eval_spilt: 0.1\n")
    with pytest.raises(ConfigError) as e:
        inputs.load_file(f)
    assert (
        "unknown key 'eval_spilt'" in e.value.message
        and e.value.hint == "did you mean 'eval_split'?"
    )


def test_print_config_round_trips_new_options(tmp_path: Path) -> None:
    flags = {
        "eval_data": ["held.jsonl"],
        "lr_scheduler": "cosine",
        "rslora": True,
        "logging_steps": "5",
    }
    v = inputs.merge("train", {}, flags)
    f = tmp_path / "again.yaml"
    f.write_text(inputs.to_yaml(v))
    assert inputs.merge("train", inputs.load_file(f), {}) == v


def test_defaults_mean_no_eval_and_the_old_schedule() -> None:
    run = run_of()
    loop = run.loop
    assert not run.data.evaluates and loop.eval_steps is None and loop.keep_best == "off"
    assert (loop.lr_scheduler, loop.warmup_ratio, loop.weight_decay, loop.max_grad_norm) == (
        "linear", None, 0.0, 1.0,
    )  # fmt: skip
    assert loop.neftune_alpha is None and not run.lora.dora and run.lora.modules_to_save == ()


def test_eval_steps_default_to_each_save() -> None:
    assert run_of(eval_split=0.1).loop.eval_steps == 50
    assert run_of(eval_split=0.1, save_steps=20).loop.eval_steps == 20
    assert run_of(eval_split=0.1, save_steps=0).loop.eval_steps == 50  # no saves: the save default
    assert run_of(eval_data=("h.jsonl",), eval_steps=7).loop.eval_steps == 7


def test_keep_best() -> None:
    assert (
        run_of(eval_split=0.1).loop.keep_best == "off"
    )  # auto without early stopping: the last step
    assert run_of(eval_split=0.1, early_stopping=2).loop.keep_best == "on"
    assert run_of(eval_split=0.1, early_stopping=2, keep_best="off").loop.keep_best == "off"
    assert (
        run_of(eval_split=0.1, keep_best="on", save_steps=10, eval_steps=5).loop.keep_best == "on"
    )


@pytest.mark.parametrize(
    ("given", "needle", "hint"),
    [
        ({"eval_data": ("h.jsonl",), "eval_split": 0.1}, "--eval-data and --eval-split exclude", "--eval-data FILE"),
        ({"eval_steps": 10}, "--eval-steps 10 needs eval data", "--eval-split 0.05"),
        ({"early_stopping": 3}, "--early-stopping 3 needs eval data", "--eval-data FILE"),
        ({"keep_best": "on"}, "--keep-best on needs eval data", "--eval-split"),
        ({"eval_split": 0.1, "early_stopping": 2, "save_steps": 0}, "--save-steps 0 saves none", "--save-steps 50"),
        ({"eval_split": 0.1, "keep_best": "on", "save_steps": 10, "eval_steps": 4},
         "--save-steps 10 is not a multiple of --eval-steps 4", "--save-steps 8"),
        ({"lr_scheduler": "cosine", "scheduler": "ds"}, "--lr-scheduler cosine is the Trainer's", "--scheduler hf"),
        ({"warmup_ratio": 0.1, "warmup_steps": 10}, "--warmup-ratio and --warmup-steps exclude", "keep one"),
        ({"dora": True}, "--dora applies to --method lora or qlora only", "--method lora"),
        ({"rslora": True}, "--rslora applies to --method lora", "drop --rslora"),
        ({"modules_to_save": ("lm_head",)}, "--modules-to-save applies to --method lora", "--method lora"),
        ({"method": "lora", "modules_to_save": (" , ",)}, "no module name", "embed_tokens,lm_head"),
    ],
)  # fmt: skip
def test_rules_refuse_with_the_fix(given: dict[str, Any], needle: str, hint: str) -> None:
    with pytest.raises(ConfigError) as e:
        run_of(**given)
    assert needle in e.value.message and hint in (e.value.hint or "")


def test_all_problems_in_one_error() -> None:
    with pytest.raises(ConfigError) as e:
        run_of(eval_steps=5, dora=True)
    lines = e.value.lines()
    assert [m.split(" ")[0] for m, _ in lines] == ["--dora", "--eval-steps"]
    assert all(hint for _, hint in lines)  # each problem with its own fix


def test_lora_variants_resolve() -> None:
    run = run_of(method="lora", dora=True, rslora=True, modules_to_save=("embed_tokens, lm_head",))
    lora = run.lora
    assert (lora.dora, lora.rslora, lora.modules_to_save) == (
        True,
        True,
        ("embed_tokens", "lm_head"),
    )
    loop = run_of(warmup_ratio=0.03).loop
    assert loop.warmup_ratio == 0.03 and loop.warmup_steps == 0


@pytest.mark.parametrize(
    ("max_steps", "expected"), [(None, "auto"), (12, 1), (99, 1), (100, 1), (250, 2), (10_000, 100)]
)
def test_logging_steps_auto(max_steps: int | None, expected: int | str) -> None:
    assert run_of(max_steps=max_steps).output.logging_steps == expected
    assert run_of(max_steps=max_steps, logging_steps=7).output.logging_steps == 7


def test_report_to(monkeypatch: pytest.MonkeyPatch) -> None:
    present = {"tensorboard"}
    monkeypatch.setattr(output, "installed", lambda m: m in present)
    run = run_of()
    assert run.output.report_to == "tensorboard"
    assert not any("report" in s for s in run.assumed)  # estimate would print it: noise there
    assert run_of(report_to="none").output.report_to == "none"
    with pytest.raises(ConfigError) as e:
        run_of(report_to="wandb")
    assert "--report-to wandb: wandb is not installed here" in e.value.message
    assert e.value.hint == "pip install wandb, or use --report-to none"
    assumed = dataclasses.replace(CUDA, assumed=True)  # a dry run planned for another machine
    assert run_of(assumed, report_to="mlflow").output.report_to == "mlflow"
    present.clear()
    assert run_of().output.report_to == "none"


def test_round_trip() -> None:
    run = run_of(
        CPU,
        method="lora",
        eval_data=("h.jsonl",),
        early_stopping=2,
        modules_to_save=("lm_head,embed_tokens",),
    )
    again = Run.from_dict(json.loads(json.dumps(run.to_dict())))
    assert again == run and again.data.eval_data == ("h.jsonl",)
