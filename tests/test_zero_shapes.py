"""`dojo config --check` on values of the wrong shape, and dojo.zero.shapes against
DeepSpeed's own config model.

The CLI cases are the issue's: sections that are a list, a string or null, an optimizer type or
lr of the wrong type, params that are not objects. The oracle gives DeepSpeed (DeepSpeedConfig,
then the optimizer and scheduler built as ``deepspeed.initialize`` builds them) and the lint the
same config, one probe value in one known key, and requires the same verdict. Where the lint is
stricter on purpose, exempt() says why. The oracle needs DeepSpeed (importorskip inside the
tests: a core install runs the rest); dojo.zero.check itself never imports it.
"""

import copy
import inspect
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from dojo.zero import blocks, shapes
from dojo.zero import check as zc
from dojo.zero.check import check_config

# --------------------------------------------------------------------- the issue, through the CLI

ISSUE = [
    ({"zero_optimization": [1, 2]}, "zero_optimization", "[1, 2] is list, not an object"),
    ({"zero_optimization": "stage3"}, "zero_optimization", "'stage3' is str, not an object"),
    ({"zero_optimization": None}, "zero_optimization", "zero_optimization is null"),
    ({"zero_optimization": {"stage": 3, "offload_param": ["cpu"]}},
     "zero_optimization.offload_param", "offload_param ['cpu'] is list, not an object"),
    ({"bf16": [True]}, "bf16", "bf16 [True] is list, not an object"),
    ({"optimizer": {"type": 5, "params": {}}}, "optimizer.type", "type 5 is not a name"),
    ({"optimizer": {"type": ["AdamW"], "params": {}}}, "optimizer.type", "type ['AdamW'] is not a name"),
    ({"optimizer": {"type": "AdamW", "params": {"lr": "fast"}}}, "optimizer.params.lr", "lr 'fast' is not a number"),
    ({"optimizer": {"type": "AdamW", "params": {"lr": [0.1]}}}, "optimizer.params.lr", "lr [0.1] is not a number"),
    ({"optimizer": {"type": "AdamW", "params": "lr=1e-4"}}, "optimizer.params", "params 'lr=1e-4' is str, not an object"),
    ({"optimizer": {"type": "AdamW", "params": [1e-4]}}, "optimizer.params", "params [0.0001] is list"),
    ({"scheduler": {"type": "WarmupLR", "params": "warmup"}}, "scheduler.params", "params 'warmup' is not an object"),
    ({"scheduler": {"type": "WarmupLR", "params": [10]}}, "scheduler.params", "params [10] is not an object"),
    ({"scheduler": {"type": "WarmupLR"}}, "scheduler.params", "params is missing"),
    ({"zero_optimization": {"stage": 2, "reduce_bucket_size": None}},
     "zero_optimization.reduce_bucket_size", "reduce_bucket_size is null"),
    ({"zero_optimization": {"stage": 2, "overlap_comm": "sometimes"}},
     "zero_optimization.overlap_comm", "overlap_comm 'sometimes' is not true or false"),
    ({"fp16": {"enabled": True, "loss_scale": "x"}}, "fp16.loss_scale", "loss_scale 'x' is not a finite number"),
    ({"scheduler": {"type": "WarmupLR", "params": {"total_num_steps": 10}}},
     "scheduler.params.total_num_steps", "WarmupLR takes no argument 'total_num_steps'"),
    ({"amp": {"enabled": True}}, "amp", "refuses the config with this key"),
]  # fmt: skip


@pytest.mark.parametrize(("ds", "where", "needle"), ISSUE, ids=lambda x: str(x)[:40])
def test_wrong_shapes_are_errors_through_the_cli(
    ds: dict[str, Any], where: str, needle: str, tmp_path: Path, cli, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("ds.json").write_text(json.dumps(ds))
    before = sorted(p.name for p in tmp_path.iterdir())
    r = cli("config", "--check", "ds.json")
    assert r.exit_code == 1, r.stdout + r.stderr
    assert r.stdout == ""
    errors = [line for line in r.stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1, r.stderr
    assert errors[0].startswith(f"ds.json:{where}: error: ") and needle in errors[0], errors[0]
    assert "Traceback" not in r.stdout + r.stderr and " ok" not in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_long_value_is_shortened() -> None:
    (f,) = [f for f in check_config({"zero_optimization": ["x" * 100_000]}) if f.level == "error"]
    assert len(f.message) < 200 and "..." in f.message


def test_one_error_per_key() -> None:
    # reduce_bucket_size null: "is null", not also "not a number of elements"
    findings = check_config({"zero_optimization": {"stage": 2, "reduce_bucket_size": None}})
    assert [f.where for f in findings if f.level == "error"] == [
        "zero_optimization.reduce_bucket_size"
    ]


def test_strings_deepspeed_converts_are_warnings() -> None:
    findings = check_config({"zero_optimization": {"stage": 2, "overlap_comm": "yes"}})
    assert [(f.level, f.where) for f in findings] == [("warning", "zero_optimization.overlap_comm")]


def test_lax_conversions_follow_pydantic() -> None:
    refused = shapes._REFUSED
    assert [shapes.as_bool(v) for v in (True, 0, 1.0, "Yes", "off", "t")] == [
        True, False, True, True, False, True,
    ]  # fmt: skip
    assert all(shapes.as_bool(v) is refused for v in (2, " yes", "1.0", None, [], "x"))
    assert [shapes.as_int(v) for v in (True, 5, 2.0, "5", " +5 ", "2.0", "1_000")] == [
        1, 5, 2, 5, 5, 2, 1000,
    ]  # fmt: skip
    assert all(shapes.as_int(v) is refused for v in (2.5, 1e19, "1e3", "x", "٣", None, [1]))
    assert shapes.as_float("1e3") == 1000.0 and shapes.as_float(True) == 1.0
    assert all(shapes.as_float(v) is refused for v in ("x", "٣", None, {}, 10**400))


def test_tables_cover_the_keys_the_lint_knows() -> None:
    assert set(shapes.ZERO) == zc.ZERO_KEYS
    assert set(shapes.OFFLOAD_PARAM) == zc.OFFLOAD_PARAM_KEYS
    assert set(shapes.OFFLOAD_OPTIMIZER) == zc.OFFLOAD_OPTIMIZER_KEYS
    assert set(shapes.BF16) == zc.BF16_KEYS and set(shapes.FP16) == zc.FP16_KEYS
    assert set(shapes.TOP) | shapes.REMOVED <= zc.TOP_KEYS


# --------------------------------------------------------------------- the oracle: DeepSpeed

PROBES: dict[str, Any] = {
    "list": [1], "pair": [0.9, 0.999], "str": "x", "empty": "", "null": None, "true": True,
    "false": False, "int": 3, "zero": 0, "neg": -1, "frac": 0.5, "big": 10**13, "dict": {},
    "strint": "5", "strfrac": "0.5", "yes": "yes", "sum": "sum", "cpu": "cpu", "fp16": "fp16",
}  # fmt: skip
BASE = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1}
_BATCH = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
_COUNTS = {k.removeprefix("stage3_") for k in (*zc._BUCKETS, *zc._THRESHOLDS)}


def exempt(path: str, probe: str) -> str | None:
    """Why the lint may differ from DeepSpeed here, or None (then the two must agree). All but
    one are the lint being stricter on purpose."""
    key = path.rsplit(".", 1)[-1]
    if key in _BATCH and probe in ("true", "frac"):
        return "batch sizes are whole positive numbers; DeepSpeed takes true as 1 and 0.5 silently"
    if key in _BATCH and probe == "null":  # DeepSpeed refuses it when neither size is given
        return "whether a batch size is given at all is not a shape (the Trainer fills 'auto')"
    if key == "stage" and probe in ("true", "false"):
        return "a stage is 0-3: DeepSpeed reads true/false as 1/0"
    if key.removeprefix("stage3_") in _COUNTS and probe in (
        "true",
        "false",
        "strint",
        "zero",
        "big",
    ):
        return "element counts are JSON numbers (not strings or booleans), buckets > 0, < 1e12"
    if key == "timers" and probe in (
        "list",
        "pair",
        "str",
        "empty",
        "strint",
        "strfrac",
        "yes",
        "sum",
        "cpu",
        "fp16",
    ):
        return "DeepSpeed ignores a timers value that is not an object"
    return None


def _cases() -> list[tuple[str, str, dict[str, Any]]]:
    cases = []
    for key in sorted(zc.TOP_KEYS):
        base = {k: v for k, v in BASE.items() if k != key} if key != "train_batch_size" else {}
        cases += [(key, n, {**base, key: v}) for n, v in PROBES.items()]
    for stage in (2, 3):
        for key in sorted(zc.ZERO_KEYS):
            cases += [(f"zero_optimization.{key}@{stage}", n,
                       {**BASE, "zero_optimization": {"stage": stage, key: v}}) for n, v in PROBES.items()]  # fmt: skip
    for block, keys in (
        ("offload_param", zc.OFFLOAD_PARAM_KEYS),
        ("offload_optimizer", zc.OFFLOAD_OPTIMIZER_KEYS),
    ):
        for key in sorted(keys):
            cases += [(f"zero_optimization.{block}.{key}", n,
                       {**BASE, "zero_optimization": {"stage": 3, block: {"device": "cpu", key: v}}})
                      for n, v in PROBES.items()]  # fmt: skip
    for section, keys in (("bf16", zc.BF16_KEYS), ("fp16", zc.FP16_KEYS)):
        for stage in (None, 2):
            zero = {} if stage is None else {"zero_optimization": {"stage": stage}}
            for key in sorted(keys):
                cases += [(f"{section}.{key}@{stage}", n, {**BASE, **zero, section: {key: v}})
                          for n, v in PROBES.items()]  # fmt: skip
    adamw = {"type": "AdamW", "params": {"lr": 0.001}}
    for key in ("type", "params"):
        cases += [
            (f"optimizer.{key}", n, {**BASE, "optimizer": {**adamw, key: v}})
            for n, v in PROBES.items()
        ]
    for key in ("lr", "betas", "eps", "weight_decay"):
        cases += [(f"optimizer.params.{key}", n, {**BASE, "optimizer": {"type": "AdamW", "params": {"lr": 0.001, key: v}}})
                  for n, v in PROBES.items()]  # fmt: skip
    decay = {"type": "WarmupDecayLR", "params": {"total_num_steps": 100}}
    for key in ("type", "params"):
        cases += [(f"scheduler.{key}", n, {**BASE, "optimizer": adamw, "scheduler": {**decay, key: v}})
                  for n, v in PROBES.items()]  # fmt: skip
    for key in ("warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "total_num_steps"):
        cases += [(f"scheduler.params.{key}", n,
                   {**BASE, "optimizer": adamw, "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 100, key: v}}})
                  for n, v in PROBES.items()]  # fmt: skip
    return cases


@pytest.fixture(scope="module")
def deepspeed_verdict():
    """config -> None (DeepSpeed accepts) or why it refuses."""
    pytest.importorskip("deepspeed")
    torch = pytest.importorskip("torch")
    from deepspeed.runtime import lr_schedules
    from deepspeed.runtime.config import DeepSpeedConfig
    from deepspeed.utils import logger

    logger.setLevel(logging.ERROR)

    def verdict(cfg: dict[str, Any]) -> str | None:
        try:
            parsed = DeepSpeedConfig(copy.deepcopy(cfg))
            p = torch.nn.Parameter(torch.zeros(2))
            opt: Any = torch.optim.SGD([p], lr=0.1)
            name = parsed.optimizer_name
            if name is not None and name.lower() in blocks.ADAM_TYPES:
                # engine._configure_basic_optimizer: torch's AdamW checks these (FusedAdam the same)
                args = ("lr", "betas", "eps", "weight_decay")
                params = {k: v for k, v in (parsed.optimizer_params or {}).items() if k in args}
                opt = torch.optim.AdamW([p], **params)
            sched = parsed.scheduler_name
            if sched is not None:  # engine._scheduler_from_config
                if hasattr(lr_schedules, sched):
                    cls = getattr(lr_schedules, sched)
                else:
                    assert hasattr(torch.optim.lr_scheduler, sched), sched
                    cls = getattr(torch.optim.lr_scheduler, sched)
                cls(opt, **parsed.scheduler_params)
        except Exception as e:  # noqa: BLE001 - whatever DeepSpeed raises is a refusal
            return f"{type(e).__name__}: {str(e)[:100]}"
        return None

    return verdict


def test_bases_are_clean(deepspeed_verdict) -> None:
    adamw = {"type": "AdamW", "params": {"lr": 0.001}}
    for cfg in (
        BASE,
        {
            **BASE,
            "optimizer": adamw,
            "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 100}},
        },
    ):
        assert deepspeed_verdict(cfg) is None
        assert not [f for f in check_config(copy.deepcopy(cfg)) if f.level == "error"]


_GROUPS = ("top", "zero_optimization", "offload", "bf16", "fp16", "optimizer", "scheduler")


def _group(path: str) -> str:
    if path.startswith("zero_optimization.offload"):
        return "offload"
    head = path.split(".", 1)[0]
    return head if head in _GROUPS else "top"


@pytest.mark.parametrize("group", _GROUPS)
def test_lint_agrees_with_deepspeed(group: str, deepspeed_verdict) -> None:
    disagree, checked = [], 0
    for path, probe, cfg in _cases():
        if _group(path) != group:
            continue
        checked += 1
        refused = deepspeed_verdict(cfg)
        errors = [
            f"{f.where}: {f.message}"
            for f in check_config(copy.deepcopy(cfg))
            if f.level == "error"
        ]
        if exempt(path.split("@")[0], probe) is not None:
            continue
        if refused is not None and not errors:
            disagree.append(f"DeepSpeed refuses, lint says ok: {path}={probe}: {refused}")
        elif refused is None and errors:
            disagree.append(f"lint refuses, DeepSpeed takes: {path}={probe}: {errors[0]}")
    assert checked > 50
    assert disagree == [], "\n".join(disagree)


def _kind_from_pydantic(field: Any) -> tuple[str, bool, Any, Any, Any]:
    import types
    import typing

    ann = field.annotation
    args = typing.get_args(ann)
    optional = type(None) in args
    if optional:
        ann = next(a for a in args if a is not type(None))
    bounds = {type(m).__name__: m for m in field.metadata}
    ge = getattr(bounds.get("Ge"), "ge", None)
    gt = getattr(bounds.get("Gt"), "gt", None)
    le = getattr(bounds.get("Le"), "le", None)
    name = {bool: "bool", int: "int", float: "float"}.get(ann)
    if name is None:
        name = "path" if getattr(ann, "__name__", "") == "Path" else "object"
    assert not isinstance(ann, types.UnionType)
    return name, optional, ge, gt, le


def test_tables_match_deepspeeds_models() -> None:
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.precision_config import DeepSpeedBF16Config, DeepSpeedFP16Config
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from deepspeed.runtime.zero.offload_config import (
        DeepSpeedZeroOffloadOptimizerConfig,
        DeepSpeedZeroOffloadParamConfig,
    )

    # Kinds with their own validators in DeepSpeed, or enums checked by dojo.zero.check.
    special = {"loss_scale", "scale_int", "skip"}
    for model, table in (
        (DeepSpeedZeroConfig, shapes.ZERO),
        (DeepSpeedZeroOffloadParamConfig, shapes.OFFLOAD_PARAM),
        (DeepSpeedZeroOffloadOptimizerConfig, shapes.OFFLOAD_OPTIMIZER),
        (DeepSpeedBF16Config, shapes.BF16),
        (DeepSpeedFP16Config, shapes.FP16),
    ):
        for name, field in model.model_fields.items():
            for key in {name, field.alias} - {None}:
                kind = table[key]
                if kind.type in special:
                    continue
                expect = _kind_from_pydantic(field)
                got = (kind.type, kind.optional, kind.ge, kind.gt, kind.le)
                if name == "leaf_module":  # a before-validator turns null into {}
                    expect = ("object", True, None, None, None)
                assert got == expect, (model.__name__, key)


def test_scheduler_arguments_match_deepspeed() -> None:
    pytest.importorskip("deepspeed")
    torch = pytest.importorskip("torch")
    from deepspeed.runtime import lr_schedules

    assert set(blocks.SCHEDULER_ARGS) == set(lr_schedules.VALID_LR_SCHEDULES)
    for name, (required, optional) in blocks.SCHEDULER_ARGS.items():
        params = list(inspect.signature(getattr(lr_schedules, name)).parameters.values())[1:]
        assert tuple(p.name for p in params if p.default is inspect.Parameter.empty) == required
        assert {p.name for p in params if p.default is not inspect.Parameter.empty} == set(optional)
    assert all(hasattr(torch.optim.lr_scheduler, n) for n in blocks.TORCH_SCHEDULERS)
