"""Pure tests for dojo.zero: key sets, "auto" values, HF bucket formulas, validation, presets."""

import json
from pathlib import Path

import pytest

from dojo.errors import ConfigError
from dojo.run.groups.zero import ZeroOptions
from dojo.zero import PRESETS, build_ds_config

TEMPLATES = Path(__file__).resolve().parent.parent / "templates" / "zero"

# The key lists (stage 2 and stage 3), plus "stage".
STAGE2_KEYS = {
    "stage",
    "offload_optimizer",
    "allgather_partitions",
    "allgather_bucket_size",
    "overlap_comm",
    "reduce_scatter",
    "reduce_bucket_size",
    "contiguous_gradients",
    "round_robin_gradients",
}
STAGE3_KEYS = {
    "stage",
    "offload_optimizer",
    "offload_param",
    "overlap_comm",
    "contiguous_gradients",
    "sub_group_size",
    "reduce_bucket_size",
    "stage3_prefetch_bucket_size",
    "stage3_param_persistence_threshold",
    "stage3_max_live_parameters",
    "stage3_max_reuse_distance",
    "stage3_gather_16bit_weights_on_model_save",
}


def test_stage2_keys_and_auto_values() -> None:
    ds = build_ds_config(ZeroOptions(stage=2))
    assert set(ds["zero_optimization"]) == STAGE2_KEYS
    for key in (
        "train_batch_size",
        "train_micro_batch_size_per_gpu",
        "gradient_accumulation_steps",
        "gradient_clipping",
    ):
        assert ds[key] == "auto"
    assert ds["bf16"]["enabled"] == "auto" and ds["fp16"]["enabled"] == "auto"
    assert ds["zero_optimization"]["reduce_bucket_size"] == "auto"
    assert ds["zero_optimization"]["offload_optimizer"] == {"device": "none", "pin_memory": True}
    assert "optimizer" not in ds and "scheduler" not in ds
    json.dumps(ds)  # JSON-serialisable


def test_stage3_keys_and_offload_follows() -> None:
    ds = build_ds_config(ZeroOptions(stage=3, offload="cpu"))
    zero = ds["zero_optimization"]
    assert set(zero) == STAGE3_KEYS
    assert zero["offload_optimizer"]["device"] == "cpu"
    assert zero["offload_param"]["device"] == "cpu"  # --offload at stage 3 also offloads params
    for key in (
        "reduce_bucket_size",
        "stage3_prefetch_bucket_size",
        "stage3_param_persistence_threshold",
    ):
        assert zero[key] == "auto"
    assert ds["zero_force_ds_cpu_optimizer"] is False  # hf optimizer + offload


def test_offload_param_override() -> None:
    zero = build_ds_config(ZeroOptions(stage=3, offload="cpu", offload_param="none"))[
        "zero_optimization"
    ]
    assert zero["offload_param"]["device"] == "none"
    assert zero["offload_optimizer"]["device"] == "cpu"
    zero = build_ds_config(ZeroOptions(stage=3, offload_param="cpu"))["zero_optimization"]
    assert (zero["offload_param"]["device"], zero["offload_optimizer"]["device"]) == ("cpu", "none")


def test_stage0_and_stage1() -> None:
    assert build_ds_config(ZeroOptions(stage=0))["zero_optimization"] == {"stage": 0}
    assert set(build_ds_config(ZeroOptions(stage=1))["zero_optimization"]) == STAGE2_KEYS


@pytest.mark.parametrize("h", [64, 896, 4096, 8192])
def test_model_resolves_hf_bucket_formulas(h: int) -> None:
    # transformers trainer_config_finalize: h*h, int(0.9*h*h), 10*h
    zero = build_ds_config(ZeroOptions(stage=3), hidden_size=h)["zero_optimization"]
    assert zero["reduce_bucket_size"] == h * h
    assert zero["stage3_prefetch_bucket_size"] == int(0.9 * h * h)
    assert zero["stage3_param_persistence_threshold"] == 10 * h
    assert (
        build_ds_config(ZeroOptions(stage=2), hidden_size=h)["zero_optimization"][
            "reduce_bucket_size"
        ]
        == h * h
    )


def test_bucket_size_wins_over_model() -> None:
    zero = build_ds_config(ZeroOptions(stage=2, bucket_size=200_000_000), hidden_size=4096)[
        "zero_optimization"
    ]
    assert zero["reduce_bucket_size"] == zero["allgather_bucket_size"] == 200_000_000


def test_optimizer_scheduler_blocks() -> None:
    ds = build_ds_config(ZeroOptions(stage=2, optimizer="ds", scheduler="ds"))
    assert ds["optimizer"] == {
        "type": "AdamW",
        "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"},
    }
    assert ds["scheduler"]["type"] == "WarmupDecayLR"
    assert set(ds["scheduler"]["params"].values()) == {"auto"}
    # DeepSpeed optimizer + offload: no need for zero_force_ds_cpu_optimizer
    assert "zero_force_ds_cpu_optimizer" not in build_ds_config(
        ZeroOptions(stage=2, offload="cpu", optimizer="ds")
    )


def test_precision_blocks() -> None:
    bf16 = build_ds_config(ZeroOptions(), precision="bf16")
    off = {"enabled": True, "check_grad_overflow": False}
    assert bf16["bf16"] == off and bf16["fp16"] == {"enabled": False}
    checked = build_ds_config(ZeroOptions(overflow_check=True), precision="bf16")
    assert checked["bf16"] == {"enabled": True, "check_grad_overflow": True}
    auto = build_ds_config(ZeroOptions())  # TrainingArguments decide bf16; the key rides along
    assert auto["bf16"] == {"enabled": "auto", "check_grad_overflow": False}
    fp16 = build_ds_config(ZeroOptions(), precision="fp16")
    assert fp16["fp16"]["enabled"] is True and fp16["fp16"]["loss_scale"] == 0
    assert fp16["bf16"] == {"enabled": False}


def test_sub_group_follows_the_optimizer_placement() -> None:
    """ZeRO-3 step transient is 6 B x min(P/N, sub_group_size): 1e8 on the GPU, DeepSpeed's 1e9
    with offload (where the tile sizes pinned host buffers), a given value as given."""
    tile = {
        (off, given): build_ds_config(ZeroOptions(stage=3, offload=off, sub_group_size=given))[
            "zero_optimization"
        ]["sub_group_size"]
        for off in ("none", "cpu")
        for given in ("auto", 300_000_000)
    }
    assert tile == {
        ("none", "auto"): 100_000_000,
        ("cpu", "auto"): 1_000_000_000,
        ("none", 300_000_000): 300_000_000,
        ("cpu", 300_000_000): 300_000_000,
    }
    assert "sub_group_size" not in build_ds_config(ZeroOptions(stage=2))["zero_optimization"]


def test_nvme_blocks() -> None:
    ds = build_ds_config(
        ZeroOptions(stage=3, offload="nvme", nvme_path="/nvme"), largest_param=128_256 * 4096
    )
    zero = ds["zero_optimization"]
    assert zero["offload_optimizer"]["nvme_path"] == zero["offload_param"]["nvme_path"] == "/nvme"
    assert zero["offload_param"]["buffer_size"] == 128_256 * 4096  # raised to fit the embedding
    assert "aio" in ds
    small = build_ds_config(ZeroOptions(stage=3, offload="nvme", nvme_path="/n"), largest_param=10)
    assert small["zero_optimization"]["offload_param"]["buffer_size"] == 100_000_000
    assert "aio" not in build_ds_config(ZeroOptions(stage=3, offload="cpu"))


@pytest.mark.parametrize(
    ("cfg", "precision", "message", "hint"),
    [
        (ZeroOptions(stage=4), "auto", "--zero 4: choose one of none, 0, 1, 2, 3", "e.g. --zero 3"),  # type: ignore[arg-type]
        (
            ZeroOptions(offload="gpu"),
            "auto",
            "--offload 'gpu': choose one of none, cpu, nvme",
            None,
        ),  # type: ignore[arg-type]
        (
            ZeroOptions(stage=2, offload_param="cpu"),
            "auto",
            "--offload-param cpu needs --zero 3 (got --zero 2): only ZeRO-3 partitions parameters",
            "use --zero 3, or --offload cpu for the optimizer only",
        ),
        (
            ZeroOptions(stage=3, offload="nvme"),
            "auto",
            "--offload nvme needs --nvme-path",
            "pass --nvme-path DIR (a folder on a fast local NVMe disk), or use cpu offload",
        ),
        (
            ZeroOptions(stage=3, offload_param="nvme"),
            "auto",
            "--offload-param nvme needs --nvme-path",
            None,
        ),
        (ZeroOptions(bucket_size=0), "auto", "--bucket-size 0: out of range", None),
        (ZeroOptions(bucket_size=-5), "auto", "--bucket-size -5: out of range", None),
        (
            ZeroOptions(stage=0, offload="cpu"),
            "auto",
            "--offload cpu needs ZeRO stage 1, 2 or 3",
            None,
        ),
        (ZeroOptions(optimizer="torch"), "auto", "--optimizer 'torch': choose one of hf, ds", None),  # type: ignore[arg-type]
        (ZeroOptions(), "fp8", "--precision 'fp8' is not valid", None),
    ],
)
def test_bad_config_messages(
    cfg: ZeroOptions, precision: str, message: str, hint: str | None
) -> None:
    with pytest.raises(ConfigError) as exc:
        build_ds_config(cfg, precision=precision)
    assert exc.value.message.startswith(message)
    if hint is not None:
        assert exc.value.hint == hint


def test_all_problems_are_collected() -> None:
    with pytest.raises(ConfigError) as exc:
        build_ds_config(ZeroOptions(stage=2, offload_param="nvme"))
    assert len(exc.value.lines()) == 2  # param offload below stage 3, nvme without path


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_template_is_regenerated_equal(name: str) -> None:
    path = TEMPLATES / f"{name}.json"
    assert json.loads(path.read_text()) == build_ds_config(PRESETS[name])


def test_every_zero_template_is_a_preset() -> None:
    assert sorted(p.stem for p in TEMPLATES.glob("*.json")) == sorted(PRESETS)


def test_no_deepspeed_has_no_json_and_refuses_what_only_deepspeed_does() -> None:
    with pytest.raises(ConfigError, match="--zero none: a run without DeepSpeed has no DeepSpeed"):
        build_ds_config(ZeroOptions(stage="none"))
    from dojo.run.groups.zero import resolve_zero, zero_problems

    none = ZeroOptions(stage="none")
    assert (none.deepspeed, none.level, ZeroOptions(stage=0).deepspeed) == (False, 0, True)
    assert zero_problems(none) == []
    asked = ZeroOptions(stage="none", offload="cpu", offload_param="cpu", optimizer="ds",
                        scheduler="ds", overflow_check=True)  # fmt: skip
    assert zero_problems(asked) == [
        ("--offload cpu needs DeepSpeed (got --zero none): the plain Trainer keeps the optimizer "
         "states on the GPU", "use --zero 2 --offload cpu, or drop --offload"),
        ("--optimizer ds needs DeepSpeed (got --zero none)",
         "drop --optimizer ds: the Trainer builds --optim"),
        ("--scheduler ds needs DeepSpeed (got --zero none)",
         "drop --scheduler ds: the Trainer builds --lr-scheduler"),
        ("--overflow-check is DeepSpeed's bf16 overflow test (got --zero none)",
         "drop --overflow-check, or use --zero 0-3"),
        ("--offload-param cpu needs --zero 3 (got --zero none): only ZeRO-3 partitions parameters",
         "use --zero 3, or --offload cpu for the optimizer only"),
    ]  # fmt: skip
    # The buckets, tiles and leaf modules are DeepSpeed's: resolved to "nothing" (none exist).
    resolved = resolve_zero(
        ZeroOptions(stage="none", bucket_size=10**8, z3_leaf="auto"),
        full=True, spec=None, adapter_params=None, world=2, given=set(), said=[],
    )  # fmt: skip
    assert (resolved.bucket_size, resolved.overlap, resolved.z3_leaf) == ("auto", False, "off")
    assert (resolved.offload, resolved.offload_param) == ("none", "none")
