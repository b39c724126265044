"""Every generated config passes transformers' DeepSpeed integration and DeepSpeed's own validation.

Slow: imports transformers + deepspeed. For each stage x offload x optimizer x scheduler: real
TrainingArguments(deepspeed=dict) runs trainer_config_process, trainer_config_finalize fills the
model-dependent "auto" keys, then DeepSpeedConfig (which builds the pydantic DeepSpeedZeroConfig)
must accept the result. Also checks --check's key tables against DeepSpeed's models, and the
--explain precedence claims against transformers' deepspeed_optim_sched.
"""

import copy
import itertools
import json
import types
from pathlib import Path
from typing import Any

import pytest

from dojo.run.groups.zero import ZeroOptions
from dojo.zero import PRESETS, build_ds_config

pytestmark = pytest.mark.slow

TEMPLATES = Path(__file__).resolve().parent.parent / "templates" / "zero"
HIDDEN = 64  # the stub model's hidden size; finalize derives the bucket sizes from it
STEPS = 100


def _combos() -> list[ZeroOptions]:
    out = []
    for stage in (0, 1, 2, 3):
        if stage == 0:
            offloads = [("none", None)]
        elif stage < 3:
            offloads = [("none", None), ("cpu", None), ("nvme", None)]
        else:
            offloads = list(itertools.product(("none", "cpu", "nvme"), ("none", "cpu", "nvme")))
        for (opt_dev, par_dev), optim, sched in itertools.product(
            offloads, ("hf", "ds"), ("hf", "ds")
        ):
            out.append(
                ZeroOptions(
                    stage=stage,
                    offload=opt_dev,
                    offload_param=par_dev or "auto",
                    nvme_path="/local_nvme" if "nvme" in (opt_dev, par_dev) else None,
                    optimizer=optim,
                    scheduler=sched,
                )
            )
    return out


COMBOS = _combos()


def _id(c: ZeroOptions) -> str:
    return f"z{c.stage}-opt_{c.offload}-par_{c.param_device}-{c.optimizer}optim-{c.scheduler}sched"


def _autos(node: Any, path: str = "") -> list[str]:
    if isinstance(node, dict):
        return [a for k, v in node.items() for a in _autos(v, f"{path}.{k}" if path else k)]
    return [path] if node == "auto" else []


def _through_trainer(
    ds: dict[str, Any], tmp_path: Path, **args_kw: Any
) -> tuple[Any, dict[str, Any]]:
    """TrainingArguments(deepspeed=...) + trainer_config_finalize, as Trainer.train does."""
    from transformers import LlamaConfig, TrainingArguments

    kw = args_kw or {"bf16": True}
    args = TrainingArguments(
        output_dir=str(tmp_path),
        deepspeed=copy.deepcopy(ds),
        use_cpu=True,
        report_to=[],
        warmup_steps=10,
        **kw,
    )
    hf = args.hf_deepspeed_config
    model = types.SimpleNamespace(config=LlamaConfig(hidden_size=HIDDEN))
    hf.trainer_config_finalize(args, model, STEPS)
    return args, hf.config


@pytest.mark.parametrize("cfg", COMBOS, ids=_id)
def test_generated_config_accepted(cfg: ZeroOptions, tmp_path: Path) -> None:
    import torch
    from deepspeed.runtime import lr_schedules
    from deepspeed.runtime.config import DeepSpeedConfig
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    ds = build_ds_config(cfg)
    args, filled = _through_trainer(ds, tmp_path)
    assert _autos(filled) == []  # the Trainer filled every "auto" we wrote

    # DeepSpeed's own validation: the full config parser and the pydantic ZeRO model.
    parsed = DeepSpeedConfig(filled)
    zero = DeepSpeedZeroConfig(**filled["zero_optimization"])
    assert parsed.zero_optimization_stage == zero.stage == cfg.stage
    if cfg.stage > 0:
        assert zero.reduce_bucket_size == HIDDEN * HIDDEN
        opt_dev = zero.offload_optimizer.device if zero.offload_optimizer else "none"
        assert opt_dev == cfg.offload
    if cfg.stage == 3:
        assert zero.offload_param.device == cfg.param_device
        assert zero.prefetch_bucket_size == int(0.9 * HIDDEN * HIDDEN)
        assert zero.param_persistence_threshold == 10 * HIDDEN
    assert parsed.bfloat16_config.enabled is True  # bf16 "auto" <- TrainingArguments bf16=True
    assert parsed.train_micro_batch_size_per_gpu == args.per_device_train_batch_size
    assert parsed.gradient_clipping == args.max_grad_norm

    if cfg.optimizer == "ds":
        assert parsed.optimizer_name == "adamw"
        assert parsed.optimizer_params["lr"] == args.learning_rate
        assert parsed.optimizer_params["betas"] == [args.adam_beta1, args.adam_beta2]
    else:
        assert parsed.optimizer_name is None
        # DeepSpeed refuses a torch optimizer with optimizer offload unless this is off.
        assert parsed.zero_force_ds_cpu_optimizer is (cfg.offload == "none")
    if cfg.scheduler == "ds":
        params = filled["scheduler"]["params"]
        assert params["warmup_max_lr"] == args.learning_rate and params["total_num_steps"] == STEPS
        sched_cls = getattr(lr_schedules, filled["scheduler"]["type"])
        opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=args.learning_rate)
        sched_cls(opt, **params)  # DeepSpeed's scheduler accepts the filled params


@pytest.mark.parametrize(
    ("precision", "args_kw", "bf16", "fp16"),
    [
        ("auto", {"bf16": True}, True, False),
        ("auto", {"fp16": True}, False, True),
        ("auto", {}, False, False),
        ("bf16", {"bf16": True}, True, False),
        ("fp16", {"fp16": True}, False, True),
    ],
)
def test_precision_matches_training_arguments(
    precision: str, args_kw: dict[str, bool], bf16: bool, fp16: bool, tmp_path: Path
) -> None:
    from deepspeed.runtime.config import DeepSpeedConfig

    ds = build_ds_config(ZeroOptions(stage=2), precision=precision)
    _, filled = _through_trainer(ds, tmp_path, **(args_kw or {"bf16": False}))
    parsed = DeepSpeedConfig(filled)
    assert (parsed.bfloat16_config.enabled, parsed.float16_config.enabled) == (bf16, fp16)


def test_explicit_precision_mismatch_is_caught_by_the_trainer(tmp_path: Path) -> None:
    ds = build_ds_config(ZeroOptions(stage=2), precision="bf16")
    with pytest.raises(ValueError, match="bf16.enabled"):
        _through_trainer(ds, tmp_path, fp16=True)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_shipped_template_accepted(name: str, tmp_path: Path) -> None:
    from deepspeed.runtime.config import DeepSpeedConfig

    ds = json.loads((TEMPLATES / f"{name}.json").read_text())
    _, filled = _through_trainer(ds, tmp_path)
    DeepSpeedConfig(filled)


def test_model_resolved_config_needs_no_trainer_for_zero_keys() -> None:
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    zero = build_ds_config(ZeroOptions(stage=3, offload="nvme", nvme_path="/n"), hidden_size=4096)[
        "zero_optimization"
    ]
    assert _autos(zero) == []
    assert DeepSpeedZeroConfig(**zero).prefetch_bucket_size == int(0.9 * 4096 * 4096)


def _model_keys(model: Any) -> set[str]:
    return {name for name, f in model.model_fields.items()} | {
        f.alias for f in model.model_fields.values() if f.alias
    }


def test_check_key_tables_match_deepspeed() -> None:
    from deepspeed.runtime.precision_config import DeepSpeedBF16Config, DeepSpeedFP16Config
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from deepspeed.runtime.zero.offload_config import (
        DeepSpeedZeroOffloadOptimizerConfig,
        DeepSpeedZeroOffloadParamConfig,
    )

    from dojo.zero import check as zc

    assert _model_keys(DeepSpeedZeroConfig) == zc.ZERO_KEYS
    assert _model_keys(DeepSpeedZeroOffloadParamConfig) == zc.OFFLOAD_PARAM_KEYS
    assert _model_keys(DeepSpeedZeroOffloadOptimizerConfig) == zc.OFFLOAD_OPTIMIZER_KEYS
    assert _model_keys(DeepSpeedBF16Config) == zc.BF16_KEYS
    assert _model_keys(DeepSpeedFP16Config) == zc.FP16_KEYS


def test_check_type_tables_match_deepspeed() -> None:
    from deepspeed.runtime.config import DEEPSPEED_OPTIMIZERS
    from deepspeed.runtime.lr_schedules import VALID_LR_SCHEDULES

    from dojo.zero import check as zc

    assert set(zc.SCHEDULERS) == set(VALID_LR_SCHEDULES)
    assert {o.lower() for o in zc.OPTIMIZERS} == set(DEEPSPEED_OPTIMIZERS) - {"adagrad"} | {"lion"}


def test_top_level_keys_exist_in_deepspeed_source() -> None:
    import deepspeed

    from dojo.zero import check as zc

    root = Path(deepspeed.__file__).parent
    text = "\n".join(p.read_text(errors="ignore") for p in root.rglob("*.py"))
    missing = sorted(k for k in zc.TOP_KEYS if f'"{k}"' not in text and f"'{k}'" not in text)
    assert missing == []


class _FakeTrainer:
    """Just the two Trainer methods deepspeed_optim_sched calls."""

    def __init__(self) -> None:
        self.optimizer_made = object()
        self.lr_scheduler = None

    def create_optimizer(self) -> object:
        return self.optimizer_made

    def create_scheduler(self, num_training_steps: int, optimizer: object) -> str:
        return "hf-scheduler"


@pytest.mark.parametrize(("optim", "sched"), list(itertools.product(("hf", "ds"), ("hf", "ds"))))
def test_explain_matches_transformers_precedence(optim: str, sched: str, tmp_path: Path) -> None:
    """What --explain says is what transformers' deepspeed_optim_sched does."""
    from accelerate.utils import DummyOptim, DummyScheduler
    from transformers.integrations.deepspeed import deepspeed_optim_sched

    from dojo.zero.explain import explain_optim_sched

    ds = build_ds_config(ZeroOptions(stage=2, optimizer=optim, scheduler=sched))
    args, _ = _through_trainer(ds, tmp_path)
    trainer = _FakeTrainer()
    hf = args.hf_deepspeed_config
    optimizer, scheduler = deepspeed_optim_sched(trainer, hf, args, STEPS, [])
    text = "\n".join(explain_optim_sched(ds, args.optim, args.lr_scheduler_type))
    if optim == "ds":
        assert isinstance(optimizer, DummyOptim)  # TrainingArguments.optim never consulted
        assert f"optim={args.optim} is silently ignored" in text
    else:
        assert optimizer is trainer.optimizer_made
        assert hf.config["zero_allow_untested_optimizer"] is True
        assert f"optimizer: TrainingArguments optim={args.optim}" in text
    if sched == "ds":
        assert isinstance(scheduler, DummyScheduler) and scheduler.lr_scheduler_callable is None
        assert f"lr_scheduler_type={args.lr_scheduler_type} is silently ignored" in text
    elif optim == "ds":
        assert isinstance(scheduler, DummyScheduler)
        assert scheduler.lr_scheduler_callable(optimizer) == "hf-scheduler"
        assert "built by Trainer.create_scheduler on the DeepSpeed optimizer" in text
    else:
        assert scheduler is None  # the Trainer builds its own scheduler later
        assert (
            f"scheduler: TrainingArguments lr_scheduler_type={args.lr_scheduler_type}, built by the Trainer"
            in text
        )
