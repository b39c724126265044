"""Issue 7, fuzzing: hypothesis properties of the config generator, the estimator and the renderer.

Deterministic (derandomize=True) and bounded (max_examples) so CI runs the same examples every
time in seconds; the DeepSpeed validation of generated configs imports deepspeed and is slow.
"""

import dataclasses
import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dojo import estimate as est
from dojo.chat.template import ChatTemplate, bundled_names, load_template, render
from dojo.errors import ConfigError, DataError, DojoError, EstimateError, TemplateError
from dojo.modelspec import ModelSpec, known_names, resolve_model
from dojo.zero import ZeroConfig, build_ds_config
from dojo.zero.check import check_config

FAST = settings(
    max_examples=100,
    derandomize=True,
    deadline=None,  # a shared 2-core CI box: wall time per example is not the property
    suppress_health_check=[HealthCheck.too_slow],
)

# ---- the config generator -------------------------------------------------------------------

DEVICES = st.sampled_from(["none", "cpu", "nvme"])
zero_configs = st.builds(
    ZeroConfig,
    stage=st.integers(-1, 4),
    offload=st.one_of(DEVICES, st.sampled_from(["gpu", "", "CPU"])),
    offload_param=st.one_of(st.none(), DEVICES),
    nvme_path=st.one_of(st.none(), st.just("/local_nvme")),
    overlap_comm=st.booleans(),
    bucket_size=st.one_of(st.none(), st.integers(-10, 4_000_000_000)),
    optimizer=st.sampled_from(["hf", "ds", "adam"]),
    scheduler=st.sampled_from(["hf", "ds"]),
    precision=st.sampled_from(["auto", "bf16", "fp16", "fp8"]),
    hidden_size=st.one_of(st.none(), st.integers(-4, 16384)),
    largest_param=st.one_of(st.none(), st.integers(1, 2_000_000_000)),
)


def _generate(cfg: ZeroConfig) -> dict[str, Any] | None:
    """The generated config, or None when the flags are refused (with a ConfigError only)."""
    try:
        return build_ds_config(cfg)
    except ConfigError as e:
        assert cfg.validate(), "refused a config that validate() accepts"
        assert e.message and "\n" not in e.message
        return None


@FAST
@given(zero_configs)
def test_config_generator_output_is_valid_or_refused(cfg: ZeroConfig) -> None:
    ds = _generate(cfg)
    if ds is None:
        return
    assert json.loads(json.dumps(ds)) == ds  # plain JSON
    assert ds["zero_optimization"]["stage"] == cfg.stage
    assert [f for f in check_config(ds) if f.level == "error"] == []  # dojo's own linter


@pytest.mark.slow
@settings(max_examples=60, derandomize=True, deadline=None)
@given(zero_configs)
def test_config_generator_validates_in_deepspeed(cfg: ZeroConfig) -> None:
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
    kw = {"fp16": True} if cfg.precision == "fp16" else {"bf16": True}
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
    assert parsed.zero_optimization_stage == zero.stage == cfg.stage
    if cfg.stage > 0 and cfg.offload != "none":
        assert zero.offload_optimizer is not None
        assert zero.offload_optimizer.device == cfg.offload


# ---- the estimator --------------------------------------------------------------------------

SPECS = [resolve_model(n) for n in known_names()]
specs = st.sampled_from(SPECS)


@st.composite
def setups(draw: st.DrawFn) -> est.Setup:
    stage = draw(st.integers(0, 3))
    method = draw(st.sampled_from(["full", "lora", "qlora"]))
    opt = "none" if stage == 0 else draw(DEVICES)
    par = draw(DEVICES) if stage == 3 else "none"
    return est.Setup(
        stage=stage,
        method=method,
        num_gpus=draw(st.integers(1, 16)),
        num_nodes=draw(st.integers(1, 4)),
        offload_optimizer=opt,
        offload_param=par,
        micro_batch=draw(st.integers(1, 64)),
        seq_len=draw(st.integers(1, 65536)),
        grad_ckpt=draw(st.booleans()),
        overlap_comm=draw(st.one_of(st.none(), st.booleans())),
        bucket_size=draw(st.one_of(st.none(), st.integers(1, 2_000_000_000))),
        overlap_rule=draw(st.sampled_from(["current", "docs"])),
        lora_rank=draw(st.integers(1, 512)),
        lora_dropout=draw(st.sampled_from([0.0, 0.05])),
        attention=draw(st.sampled_from(["sdpa", "flash_attention_2", "eager"])),
        liger=draw(st.booleans()),
        gpu_memory_gib=draw(st.one_of(st.none(), st.floats(1, 200))),
    )


def _fields(e: Any) -> dict[str, int]:
    return {f.name: getattr(e, f.name) for f in dataclasses.fields(e) if f.type in (int, "int")}


@FAST
@given(specs, setups())
def test_estimate_never_negative(spec: ModelSpec, s: est.Setup) -> None:
    e = est.estimate(spec, s)
    terms = _fields(e)
    assert terms, "no int terms found"
    assert all(v >= 0 for v in terms.values()), terms
    assert e.gpu_total > 0 and e.allocated >= e.static >= 0
    assert math.isfinite(e.gpu_total_gib)


@FAST
@given(specs, setups(), st.integers(1, 64))
def test_estimate_monotonic_in_micro_batch(spec: ModelSpec, s: est.Setup, more: int) -> None:
    small = est.estimate(spec, s)
    big = est.estimate(spec, dataclasses.replace(s, micro_batch=s.micro_batch + more))
    # The peak is split into a logits column (the loss phase) and the rest: the sum grows, while
    # a column alone may shift when Liger's loss chunk rounds up to the next power of two.
    assert big.activations + big.logits >= small.activations + small.logits
    assert big.gpu_total >= small.gpu_total


@FAST
@given(specs, setups(), st.integers(1, 65536))
def test_estimate_monotonic_in_seq_len(spec: ModelSpec, s: est.Setup, more: int) -> None:
    small = est.estimate(spec, s)
    big = est.estimate(spec, dataclasses.replace(s, seq_len=s.seq_len + more))
    assert big.activations + big.logits >= small.activations + small.logits
    assert big.gpu_total >= small.gpu_total


@FAST
@given(
    specs,
    setups(),
    st.sampled_from(["num_layers", "intermediate_size", "vocab_size"]),
    st.integers(1, 4096),
)
def test_estimate_monotonic_in_model_size(
    spec: ModelSpec, s: est.Setup, dim: str, more: int
) -> None:
    bigger = dataclasses.replace(spec, **{dim: getattr(spec, dim) + more})
    assert bigger.params > spec.params
    small, big = est.estimate(spec, s), est.estimate(bigger, s)
    assert big.static >= small.static
    assert big.gpu_total >= small.gpu_total
    assert big.cpu_total >= small.cpu_total


@FAST
@given(specs, setups())
def test_sharded_model_states_never_above_stage0(spec: ModelSpec, s: est.Setup) -> None:
    """params + grads + optimizer states per GPU at stages 1-3 <= stage 0, any offload."""
    base = dataclasses.replace(s, stage=0, offload_optimizer="none", offload_param="none")
    zero0 = est.estimate(spec, base).static
    sharded = est.estimate(spec, s).static
    assert sharded <= zero0


def _any_int() -> st.SearchStrategy[int]:
    return st.one_of(st.integers(-5, 5), st.integers(-(2**40), 2**40))


@FAST
@given(
    specs,
    st.builds(
        est.Setup,
        stage=_any_int(),
        method=st.sampled_from(["full", "lora", "qlora", "sft"]),
        num_gpus=_any_int(),
        num_nodes=_any_int(),
        offload_optimizer=st.sampled_from(["none", "cpu", "nvme", "gpu"]),
        offload_param=st.sampled_from(["none", "cpu", "nvme", "disk"]),
        micro_batch=_any_int(),
        seq_len=_any_int(),
        bucket_size=st.one_of(st.none(), _any_int()),
        lora_rank=_any_int(),
        gpu_memory_gib=st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
    ),
)
def test_estimate_bad_setups_raise_only_estimate_errors(spec: ModelSpec, s: est.Setup) -> None:
    try:
        est.validate(s)
    except EstimateError as e:
        assert e.message.startswith("--") and "\n" not in e.message
        return
    e = est.estimate(spec, s)
    assert all(v >= 0 for v in _fields(e).values())


# ---- the renderer ---------------------------------------------------------------------------

json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=30),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
ROLE = st.one_of(st.sampled_from(["system", "user", "assistant", "tool"]), st.text(max_size=8))
message = st.one_of(
    st.fixed_dictionaries(
        {"role": ROLE, "content": st.one_of(st.text(max_size=60), json_values)},
        optional={
            "reasoning_content": st.one_of(st.text(max_size=20), json_values),
            "tool_calls": json_values,
            "name": json_values,
        },
    ),
    json_values,
)
conversations = st.one_of(st.lists(message, max_size=6), json_values)
TEMPLATES = {name: load_template(name) for name in bundled_names()}


@FAST
@given(
    st.sampled_from(sorted(TEMPLATES)),
    conversations,
    st.booleans(),
    st.one_of(st.none(), st.lists(json_values, max_size=2)),
)
def test_bundled_templates_never_crash(
    name: str, msgs: Any, add_generation_prompt: bool, tools: Any
) -> None:
    """Any JSON as messages/tools: a rendered string or a DojoError, nothing else."""
    try:
        out = render(
            TEMPLATES[name], msgs, add_generation_prompt=add_generation_prompt, tools=tools
        )
    except DojoError as e:
        assert e.message and "Traceback" not in e.message
        return
    assert isinstance(out, str)


JINJA_BITS = st.sampled_from(
    [
        "{{ ", " }}", "{% ", " %}", "{# ", " #}", "for m in messages", "endfor", "if ", "endif",
        "else", "m.content", "m['role']", "messages[0]", "|length", "|tojson", "|trim", "|upper",
        "raise_exception('no')", "loop.index", "namespace(x=1)", "set ", " = ", "(", ")", "[", "]",
        "'", '"', "~", " + ", " * ", "range(", "10", "-1", "1.5", "none", "true", "macro f()",
        "endmacro", "f()", "recursive", "loop(messages)", "__class__", ".", ",", "\n",
        "add_generation_prompt", "bos_token", "tools", "strftime_now('%Y')", "dict(a=1)",
        "| selectattr('role', 'equalto', 'user') | list", "|first", "|last", "|join(',')",
    ]
)  # fmt: skip
sources = st.one_of(
    st.lists(JINJA_BITS, max_size=25).map("".join),
    st.text(max_size=80),
)


@FAST
@given(sources, st.lists(message, min_size=1, max_size=3))
def test_any_template_source_fails_only_with_dojo_errors(source: str, msgs: Any) -> None:
    """Random template text (mostly broken Jinja): compile + render give str or a DojoError."""
    try:
        out = render(
            ChatTemplate.from_source(source, name="fuzz"), msgs, add_generation_prompt=True
        )
    except TemplateError as e:
        assert "'fuzz'" in e.message  # names the template
        return
    except DataError:  # a message that is not an object
        return
    assert isinstance(out, str)


@FAST
@given(json_values)
def test_conversation_formats_fail_only_with_data_errors(record: Any) -> None:
    from dojo.chat.conversation import to_messages

    try:
        fmt, msgs = to_messages(record)
    except DataError:
        return
    assert fmt in ("messages", "sharegpt", "alpaca") and isinstance(msgs, list) and msgs
