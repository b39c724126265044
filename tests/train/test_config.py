"""TrainConfig: documented defaults, default < file < flag, and every bad value named."""

import dataclasses
from pathlib import Path

import pytest

from dojo.errors import ConfigError
from dojo.train import config as c

REPO = Path(__file__).resolve().parents[2]


def test_defaults_are_valid_and_documented() -> None:
    cfg = c.TrainConfig()
    assert c.validate(cfg) == []
    assert (cfg.method, cfg.zero_stage, cfg.lora_targets) == ("lora", 2, "all-linear")
    assert cfg.resolved_lr() == 2e-4
    assert dataclasses.replace(cfg, method="full").resolved_lr() == 2e-5
    src = (REPO / "dojo/train/config.py").read_text()
    for f in dataclasses.fields(c.TrainConfig):  # every field has a docstring right below it
        line = next(ln for ln in src.splitlines() if ln.strip().startswith(f"{f.name}:"))
        after = src.split(line, 1)[1].lstrip().splitlines()[0]
        assert after.startswith('"""'), f.name


def test_precedence_default_file_flag(tmp_path: Path) -> None:
    run = tmp_path / "run.yaml"
    run.write_text("method: full\nzero_stage: 3\nlr: 1e-5\nseq_len: 512\ndata: a.jsonl\n")
    file_values = c.load(run)
    cfg = c.merge(file_values, {"zero_stage": 2, "seq_len": None, "micro_batch": None})
    assert cfg.method == "full"  # file beats default
    assert cfg.zero_stage == 2  # flag beats file
    assert cfg.seq_len == 512  # a flag left out (None) never overrides the file
    assert cfg.lr == 1e-5  # YAML 1.1 reads 1e-5 as a string; coerced
    assert cfg.data == ("a.jsonl",)
    assert cfg.micro_batch == c.TrainConfig().micro_batch


def test_dash_keys_accepted(tmp_path: Path) -> None:
    run = tmp_path / "run.yaml"
    run.write_text("seq-len: 256\nmicro-batch: 2\n")
    assert c.merge(c.load(run)).seq_len == 256


def test_unknown_key_did_you_mean(tmp_path: Path) -> None:
    run = tmp_path / "run.yaml"
    run.write_text("method: lora\nlearning_rat: 1e-4\n")
    with pytest.raises(ConfigError) as e:
        c.load(run)
    assert "unknown key 'learning_rat'" in e.value.message
    run.write_text("lora_rnak: 8\n")
    with pytest.raises(ConfigError) as e:
        c.load(run)
    assert e.value.hint == "did you mean 'lora_r'?"


def test_malformed_yaml_has_line(tmp_path: Path) -> None:
    run = tmp_path / "run.yaml"
    run.write_text("method: lora\nzero_stage: [2\nlr: 1\n")
    with pytest.raises(ConfigError) as e:
        c.load(run)
    assert "malformed YAML (line" in e.value.message


@pytest.mark.parametrize(
    ("content", "needle"),
    [("- a\n- b\n", "expected a mapping"), ("", None)],
)
def test_yaml_shapes(tmp_path: Path, content: str, needle: str | None) -> None:
    run = tmp_path / "run.yaml"
    run.write_text(content)
    if needle is None:
        assert c.load(run) == {}
    else:
        with pytest.raises(ConfigError, match=needle):
            c.load(run)


def test_missing_and_folder_config(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        c.load(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="is a folder"):
        c.load(tmp_path)


def test_validate_collects_every_problem() -> None:
    cfg = dataclasses.replace(
        c.TrainConfig(), method="lorra", zero_stage=4, seq_len=0, lr=-1.0, micro_batch=0
    )
    problems = c.validate(cfg)
    assert problems == [
        "--method 'lorra': choose one of full, lora, qlora",
        "--zero 4: must be an integer 0..3",
        "--seq-len 0: must be an integer 8..1048576",
        "--micro-batch 0: must be an integer 1..4096",
        "--lr -1.0: must be a number > 0.0 and <= 1.0",
    ]
    with pytest.raises(ConfigError) as e:
        c.check(cfg)
    assert e.value.message.startswith(
        "--method 'lorra': choose one of full, lora, qlora (and 4 more:"
    )


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"offload_param": "cpu", "zero_stage": 2}, "--offload-param cpu needs --zero 3"),
        ({"offload": "cpu", "zero_stage": 0}, "--offload cpu needs --zero 1, 2 or 3"),
        ({"merge": True, "method": "full"}, "--merge applies to --method lora or qlora"),
        ({"gpus": "0", "nproc": 2}, "--gpus and --nproc exclude each other"),
        ({"num_nodes": 2}, "--num-nodes 2 needs --hostfile"),
        ({"seq_len": 10**9}, "--seq-len 1000000000: must be an integer 8..1048576"),
        ({"grad_ckpt": "yes"}, "grad_ckpt: 'yes' must be true or false"),
        ({"epochs": float("nan")}, "--epochs nan: must be a number > 0.0"),
        ({"offload": "gpu"}, "--offload 'gpu': choose one of none, cpu"),
        ({"max_steps": 0}, "--max-steps 0: must be an integer >= 1"),
        ({"lora_dropout": 1.5}, "--lora-dropout 1.5: must be a number >= 0.0 and <= 0.99"),
    ],
)
def test_bad_values_name_flag_and_value(changes: dict[str, object], needle: str) -> None:
    problems = c.validate(dataclasses.replace(c.TrainConfig(), **changes))
    assert any(needle in p for p in problems), problems


def test_wrong_type_from_yaml(tmp_path: Path) -> None:
    run = tmp_path / "run.yaml"
    run.write_text("micro_batch: four\n")
    problems = c.validate(c.merge(c.load(run)))
    assert problems == ["--micro-batch 'four': must be an integer 1..4096"]
    run.write_text("data: {a: 1}\n")
    with pytest.raises(ConfigError, match="data: expected a path or a list of paths"):
        c.merge(c.load(run))


@pytest.mark.parametrize("name", ["lora", "qlora", "full"])
def test_presets_validate_and_header_is_the_command(name: str) -> None:
    path = REPO / "templates" / "train" / f"{name}.yaml"
    cfg = c.merge(c.load(path))
    assert c.validate(cfg) == []
    assert cfg.method == name
    first = path.read_text().splitlines()[0]
    assert first.startswith(f"# dojo train --config templates/train/{name}.yaml")


def test_to_json_round_trip() -> None:
    import json

    cfg = c.merge({}, {"data": ["x.jsonl", "y.jsonl"], "lr": 1e-4})
    d = json.loads(c.to_json(cfg, world_size=2))
    assert d["data"] == ["x.jsonl", "y.jsonl"] and d["world_size"] == 2 and d["lr"] == 1e-4
