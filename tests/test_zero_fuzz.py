"""dojo.zero's config generator under hypothesis: any flags give a config that dojo's own linter
(and, slow, DeepSpeed itself) accepts, or one ConfigError."""

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dojo.errors import ConfigError
from dojo.run.groups.zero import ZeroOptions
from dojo.zero import build_ds_config
from dojo.zero.check import check_config
from tests.helpers.fuzz import DEVICES, FAST

zero_configs = st.tuples(
    st.builds(
        ZeroOptions,
        stage=st.integers(-1, 4),
        offload=st.one_of(DEVICES, st.sampled_from(["gpu", "", "CPU"])),
        offload_param=st.one_of(st.just("auto"), DEVICES),
        nvme_path=st.one_of(st.none(), st.just("/local_nvme")),
        overlap_comm=st.one_of(st.none(), st.booleans()),
        bucket_size=st.one_of(st.just("auto"), st.integers(-10, 4_000_000_000)),
        optimizer=st.sampled_from(["hf", "ds", "adam"]),
        scheduler=st.sampled_from(["hf", "ds"]),
    ),
    st.sampled_from(["auto", "bf16", "fp16", "fp8"]),
    st.one_of(st.none(), st.integers(1, 16384)),
    st.one_of(st.none(), st.integers(1, 2_000_000_000)),
)
Zero = tuple[ZeroOptions, str, int | None, int | None]


def _generate(cfg: Zero) -> dict[str, Any] | None:
    """The generated config, or None when the flags are refused (with a ConfigError only)."""
    zero, precision, hidden, largest = cfg
    try:
        return build_ds_config(zero, precision=precision, hidden_size=hidden, largest_param=largest)
    except ConfigError as e:
        assert e.message and "\n" not in e.message
        return None


@FAST
@given(zero_configs)
def test_config_generator_output_is_valid_or_refused(cfg: Zero) -> None:
    ds = _generate(cfg)
    if ds is None:
        return
    assert json.loads(json.dumps(ds)) == ds  # plain JSON
    assert ds["zero_optimization"]["stage"] == cfg[0].stage
    assert [f for f in check_config(ds) if f.level == "error"] == []  # dojo's own linter


@pytest.mark.slow
@settings(max_examples=60, derandomize=True, deadline=None)
@given(zero_configs)
def test_config_generator_validates_in_deepspeed(cfg: Zero) -> None:
    """Through TrainingArguments (fills "auto"), then DeepSpeed's parser and pydantic models."""
    import copy
    import tempfile
    import types

    from deepspeed.runtime.config import DeepSpeedConfig
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from transformers import LlamaConfig, TrainingArguments

    ds = _generate(cfg)
    if ds is None:
        return
    kw = {"fp16": True} if cfg[1] == "fp16" else {"bf16": True}
    zero_opts = cfg[0]
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out, deepspeed=copy.deepcopy(ds), use_cpu=True, report_to=[], **kw
        )
        hf = args.hf_deepspeed_config
        hf.trainer_config_finalize(
            args, types.SimpleNamespace(config=LlamaConfig(hidden_size=64)), 100
        )
        filled = hf.config
    parsed = DeepSpeedConfig(filled)
    zero = DeepSpeedZeroConfig(**filled["zero_optimization"])
    assert parsed.zero_optimization_stage == zero.stage == zero_opts.stage
    if zero_opts.stage > 0 and zero_opts.offload != "none":
        assert zero.offload_optimizer is not None
        assert zero.offload_optimizer.device == zero_opts.offload
