"""Pure tests for the `dojo config --check` linter (dojo.zero.check)."""

import copy
import json
from typing import Any

import pytest

from dojo.run.groups.zero import ZeroOptions
from dojo.zero import PRESETS, build_ds_config
from dojo.zero.check import Finding, check_config, check_text


def _levels(findings: list[Finding]) -> dict[str, str]:
    return {f.where: f.level for f in findings}


def _msgs(findings: list[Finding]) -> str:
    return "\n".join(f"{f.where}: {f.level}: {f.message}" for f in findings)


def test_invalid_json_has_line_and_col() -> None:
    text = '{\n  "train_batch_size": 8,\n  "bf16": {"enabled": true,}\n}\n'
    (f,) = check_text(text)
    assert (f.level, f.where) == ("error", "3:28")  # the "}" after the trailing comma
    assert f.message.startswith("invalid JSON: ")
    assert f.format("ds.json") == f"ds.json:3:28: error: {f.message}"


def test_not_an_object() -> None:
    (f,) = check_text("[1, 2]")
    assert f.level == "error" and "expected a JSON object" in f.message


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_generated_presets_have_no_errors(name: str) -> None:
    findings = check_config(build_ds_config(PRESETS[name]))
    assert [f for f in findings if f.level == "error"] == []


def test_clean_config_has_no_findings() -> None:
    assert check_config(build_ds_config(ZeroOptions(stage=2))) == []
    assert check_config(build_ds_config(ZeroOptions(stage=3), hidden_size=4096)) == []


@pytest.mark.parametrize(
    ("path", "bad", "good"),
    [
        ((), "gradient_cliping", "gradient_clipping"),
        (("zero_optimization",), "overlap_com", "overlap_comm"),
        (("zero_optimization",), "stage3_prefetch_bucket_sise", "stage3_prefetch_bucket_size"),
        (("zero_optimization", "offload_optimizer"), "pin_memmory", "pin_memory"),
        (("zero_optimization", "offload_param"), "devise", "device"),
        (("bf16",), "enable", "enabled"),
        (("fp16",), "initial_scale_pow", "initial_scale_power"),
    ],
)
def test_misspelled_keys_get_did_you_mean(path: tuple[str, ...], bad: str, good: str) -> None:
    ds = build_ds_config(ZeroOptions(stage=3))
    node: dict[str, Any] = ds
    for key in path:
        node = node[key]
    node[bad] = node.pop(good) if good in node else True
    findings = check_config(ds)
    where = ".".join((*path, bad))
    hit = [f for f in findings if f.where == where]
    assert len(hit) == 1, _msgs(findings)
    assert hit[0].level == "error"
    assert hit[0].message == f"unknown key {bad!r}; did you mean {good!r}?"


def test_unknown_keys_without_close_match() -> None:
    ds = build_ds_config(ZeroOptions(stage=2))
    ds["my_custom_thing"] = 1
    ds["zero_optimization"]["xyzzy"] = 1
    levels = _levels(check_config(ds))
    assert levels["my_custom_thing"] == "warning"  # DeepSpeed ignores unknown top-level keys
    assert levels["zero_optimization.xyzzy"] == "error"  # pydantic extra="forbid"


def test_impossible_combinations() -> None:
    ds = build_ds_config(ZeroOptions(stage=2))
    ds["zero_optimization"]["offload_param"] = {"device": "cpu"}
    ds["zero_optimization"]["offload_optimizer"] = {"device": "nvme"}
    ds["bf16"] = {"enabled": True}
    ds["fp16"] = {"enabled": True}
    findings = check_config(ds)
    errors = {f.where: f.message for f in findings if f.level == "error"}
    assert (
        errors["zero_optimization.offload_param"]
        == "parameter offload (cpu) needs stage 3; stage 2 ignores it"
    )
    assert "nvme_path" in errors["zero_optimization.offload_optimizer.nvme_path"]
    assert errors["fp16.enabled"].startswith("fp16 and bf16 are both enabled")


def test_auto_both_precisions_is_fine() -> None:
    ds = build_ds_config(ZeroOptions(), precision="auto")
    assert not [f for f in check_config(ds) if f.where.startswith(("fp16", "bf16"))]


def test_stage_and_bucket_values() -> None:
    ds = build_ds_config(ZeroOptions(stage=2))
    ds["zero_optimization"]["reduce_bucket_size"] = 0
    assert _levels(check_config(ds))["zero_optimization.reduce_bucket_size"] == "error"
    ds["zero_optimization"]["stage"] = 5
    assert _levels(check_config(ds))["zero_optimization.stage"] == "error"


def test_unfillable_auto_is_an_error() -> None:
    ds = build_ds_config(ZeroOptions(stage=2))
    ds["zero_optimization"]["allgather_bucket_size"] = "auto"
    (f,) = check_config(ds)
    assert (f.where, f.level) == ("zero_optimization.allgather_bucket_size", "error")


def test_precedence_warnings() -> None:
    ds = build_ds_config(ZeroOptions(stage=2, optimizer="ds", scheduler="ds"))
    findings = check_config(ds)
    assert _levels(findings) == {"optimizer": "warning", "scheduler": "warning"}
    text = _msgs(findings)
    assert "TrainingArguments optim (--optim) is silently ignored" in text
    assert "TrainingArguments lr_scheduler_type is silently ignored" in text


def test_scheduler_and_optimizer_types() -> None:
    ds = build_ds_config(ZeroOptions(optimizer="ds", scheduler="ds"))
    bad = copy.deepcopy(ds)
    bad["scheduler"]["type"] = "WarmupDecay"
    bad["optimizer"]["type"] = "AdamWW"
    errors = {f.where: f.message for f in check_config(bad) if f.level == "error"}
    assert (
        errors["scheduler.type"]
        == "unknown scheduler type 'WarmupDecay'; did you mean 'WarmupDecayLR'?"
    )
    assert errors["optimizer.type"] == "unknown optimizer type 'AdamWW'; did you mean 'AdamW'?"
    ok = copy.deepcopy(ds)
    ok["optimizer"]["type"] = "adamw"  # DeepSpeed compares lower-case
    assert "optimizer.type" not in _levels(check_config(ok))


def test_offload_with_torch_optimizer_needs_force_flag() -> None:
    ds = build_ds_config(ZeroOptions(stage=2, offload="cpu"))
    assert check_config(ds) == []  # the generated file sets zero_force_ds_cpu_optimizer false
    del ds["zero_force_ds_cpu_optimizer"]
    assert _levels(check_config(ds)) == {"zero_force_ds_cpu_optimizer": "warning"}


def test_stage3_keys_below_stage3_warn() -> None:
    ds = build_ds_config(ZeroOptions(stage=2))
    ds["zero_optimization"]["stage3_max_live_parameters"] = 1
    assert _levels(check_config(ds)) == {"zero_optimization.stage3_max_live_parameters": "warning"}


def test_roundtrip_through_text() -> None:
    text = json.dumps(build_ds_config(ZeroOptions(stage=3, offload="cpu", optimizer="ds")))
    assert _levels(check_text(text)) == {"optimizer": "warning"}
