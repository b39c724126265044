"""The memory estimate (dojo.estimate) under hypothesis: never negative, monotonic in batch,
sequence and model size, sharding never costs more than stage 0, and bad setups raise only
EstimateError."""

import dataclasses
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dojo import estimate as est
from dojo.errors import EstimateError
from dojo.modelspec import ModelSpec, known_names, resolve_model
from tests.helpers.fuzz import DEVICES, FAST

pytestmark = pytest.mark.slow  # hypothesis: about a second a property; `make test` runs them

SPECS = [resolve_model(n) for n in known_names()]
specs = st.sampled_from(SPECS)


@st.composite
def setups(draw: st.DrawFn) -> est.Setup:
    stage = draw(st.sampled_from(["none", 0, 1, 2, 3]))
    method = draw(st.sampled_from(["full", "lora", "qlora"]))
    opt = "none" if stage in ("none", 0) else draw(DEVICES)
    par = draw(DEVICES) if stage == 3 else "none"
    return est.Setup.of(
        stage=stage,
        method=method,
        gpus_per_node=draw(st.integers(1, 16)),
        num_nodes=draw(st.integers(1, 4)),
        offload=opt,
        offload_param=par,
        micro_batch=draw(st.integers(1, 64)),
        seq_len=draw(st.integers(8, 65536)),
        grad_ckpt=draw(st.booleans()),
        overlap_comm=draw(st.booleans()),
        bucket_size=draw(st.one_of(st.just("auto"), st.integers(1, 2_000_000_000))),
        overlap_rule=draw(st.sampled_from(["current", "docs"])),
        lora_r=draw(st.integers(1, 512)),
        lora_dropout=draw(st.sampled_from([0.0, 0.05])),
        attn=draw(st.sampled_from(["sdpa", "flash_attention_2", "eager"])),
        liger=draw(st.sampled_from(["on", "off", "loss"])),
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
    big = est.estimate(spec, s.changed(micro_batch=s.run.loop.micro_batch + more))
    # The peak is split into a logits column (the loss phase) and the rest: the sum grows, while
    # a column alone may shift when Liger's loss chunk rounds up to the next power of two.
    assert big.activations + big.logits >= small.activations + small.logits
    assert big.gpu_total >= small.gpu_total


@FAST
@given(specs, setups(), st.integers(1, 65536))
def test_estimate_monotonic_in_seq_len(spec: ModelSpec, s: est.Setup, more: int) -> None:
    small = est.estimate(spec, s)
    big = est.estimate(spec, s.changed(seq_len=s.run.data.seq_len + more))
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
    # Host terms are whole bytes, each truncated on its own: a few bytes of noise.
    assert big.cpu_total >= small.cpu_total - 8


@FAST
@given(specs, setups())
def test_sharded_model_states_never_above_stage0(spec: ModelSpec, s: est.Setup) -> None:
    """params + grads + optimizer states per GPU at stages 1-3 (and without DeepSpeed, which keeps
    no master copy) <= stage 0, any offload; but LoRA at ZeRO-3, whose adapters stay fp32
    (DeepSpeed converts them without its bf16 cast), and adapters without DeepSpeed (fp32, and
    QLoRA's fp32 embeddings beside them), where the adapters' bytes are compared at one dtype."""
    if s.run.model.method == "lora" and s.zero.stage == 3 or not s.deepspeed:
        s = dataclasses.replace(s, adapter_dtype="bf16")
    base = s.changed(stage=0, offload="none", offload_param="none")
    zero0 = est.estimate(spec, base).static
    sharded = est.estimate(spec, s).static
    assert sharded <= zero0


def _any_int() -> st.SearchStrategy[int]:
    return st.one_of(st.integers(-5, 5), st.integers(-(2**40), 2**40))


@FAST
@given(
    specs,
    st.builds(
        est.Setup.of,
        stage=_any_int(),
        method=st.sampled_from(["full", "lora", "qlora", "sft"]),
        gpus_per_node=_any_int(),
        num_nodes=_any_int(),
        offload=st.sampled_from(["none", "cpu", "nvme", "gpu"]),
        offload_param=st.sampled_from(["none", "cpu", "nvme", "disk"]),
        micro_batch=_any_int(),
        seq_len=_any_int(),
        bucket_size=st.one_of(st.just("auto"), _any_int()),
        lora_r=_any_int(),
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
