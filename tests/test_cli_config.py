"""`dojo config` through the real entry point: stdout JSON, -o files, --explain, --check, bad input."""

import json
from pathlib import Path

import pytest

from dojo.run.groups.zero import ZeroOptions
from dojo.zero import build_ds_config


def test_prints_json_to_stdout(cli) -> None:
    r = cli("config", "--stage", "2")
    assert r.exit_code == 0, r.stderr
    # Full fine-tuning at ZeRO-2: 5e8 reduce buckets (dojo train's measured default, same resolver).
    assert json.loads(r.stdout) == build_ds_config(ZeroOptions(stage=2, bucket_size=500_000_000))
    assert r.stderr == ""


def test_all_flags(cli) -> None:
    r = cli(
        "config", "--stage", "3", "--offload", "nvme", "--offload-param", "cpu", "--nvme-path", "/nvme",
        "--no-overlap-comm", "--bucket-size", "2e8", "--optimizer", "ds", "--scheduler", "ds",
        "--precision", "bf16",
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    ds = json.loads(r.stdout)
    zero = ds["zero_optimization"]
    assert (
        zero["offload_optimizer"]["device"] == "nvme" and zero["offload_param"]["device"] == "cpu"
    )
    assert zero["overlap_comm"] is False and zero["reduce_bucket_size"] == 200_000_000
    assert ds["bf16"] == {"enabled": True, "check_grad_overflow": False}
    assert ds["optimizer"]["type"] == "AdamW"
    assert zero["sub_group_size"] == 1_000_000_000  # offloaded optimizer: DeepSpeed's tile


def test_overflow_check_and_sub_group_flags(cli) -> None:
    r = cli("config", "--stage", "3", "--overflow-check", "--sub-group-size", "2e8")
    assert r.exit_code == 0, r.stderr
    ds = json.loads(r.stdout)
    assert ds["bf16"]["check_grad_overflow"] is True
    assert ds["zero_optimization"]["sub_group_size"] == 200_000_000
    plain = json.loads(cli("config", "--stage", "3").stdout)
    assert plain["bf16"]["check_grad_overflow"] is False
    assert plain["zero_optimization"]["sub_group_size"] == 100_000_000
    bad = cli("config", "--stage", "3", "--sub-group-size", "0")
    assert bad.exit_code != 0 and "--sub-group-size" in bad.stderr


def test_model_resolves_auto_buckets(cli) -> None:
    r = cli("config", "--stage", "3", "--model", "llama-2-7b")
    assert r.exit_code == 0, r.stderr
    zero = json.loads(r.stdout)["zero_optimization"]
    # Full ZeRO-3: 5e8 reduce and prefetch buckets (HF's hidden^2 / 0.9 hidden^2 are smaller
    # than one MLP weight), persistence HF's 10 x hidden, each decoder layer a leaf.
    assert zero["reduce_bucket_size"] == 500_000_000
    assert zero["stage3_prefetch_bucket_size"] == 500_000_000
    assert zero["stage3_param_persistence_threshold"] == 40960
    assert zero["leaf_module"]["classes"][0] == "LlamaDecoderLayer"
    r = cli("config", "--stage", "3", "--model", "llama-2-7b", "--method", "lora")
    zero = json.loads(r.stdout)["zero_optimization"]
    assert zero["reduce_bucket_size"] == 4096 * 4096  # adapters' grads are small: HF's auto
    r = cli("config", "--stage", "3", "--model", "7b", "--z3-leaf", "off",
            "--prefetch-bucket-size", "2e8")  # fmt: skip
    zero = json.loads(r.stdout)["zero_optimization"]
    assert "leaf_module" not in zero and zero["stage3_prefetch_bucket_size"] == 200_000_000


def test_moe_and_huge_layers_keep_per_module_hooks(cli) -> None:
    moe = Path(__file__).parent / "data" / "moe" / "mixtral-8x7b.config.json"
    r = cli("config", "--stage", "3", "--model", str(moe))
    assert r.exit_code == 0, r.stderr
    assert "leaf_module" not in json.loads(r.stdout)["zero_optimization"]  # DeepSpeed's MoE leaves
    r = cli("config", "--stage", "3", "--model", "llama-2-70b")  # 856M-param layers: still a leaf
    assert (
        json.loads(r.stdout)["zero_optimization"]["leaf_module"]["classes"][0]
        == "LlamaDecoderLayer"
    )


def test_writes_file_and_refuses_overwrite(cli, tmp_path: Path) -> None:
    out = tmp_path / "ds.json"
    r = cli("config", "--stage", "2", "-o", str(out))
    assert r.exit_code == 0 and r.stdout == ""
    assert json.loads(out.read_text()) == build_ds_config(
        ZeroOptions(stage=2, bucket_size=500_000_000)
    )
    before = out.read_text()
    r = cli("config", "--stage", "3", "-o", str(out))
    assert r.exit_code == 1
    assert r.stderr.splitlines()[0] == f"error: -o {str(out)!r} already exists"
    assert out.read_text() == before
    r = cli("config", "--stage", "3", "-o", str(out), "--force")
    assert r.exit_code == 0
    assert json.loads(out.read_text())["zero_optimization"]["stage"] == 3


def test_no_deepspeed_needs_no_json(cli, tmp_path: Path) -> None:
    note = "note: --zero none trains with the HF Trainer alone (no DeepSpeed): it needs no "
    r = cli("config", "--zero", "none")
    assert (r.exit_code, r.stdout, r.stderr) == (0, "", note + "DeepSpeed config\n")
    out = tmp_path / "ds.json"
    r = cli("config", "--zero", "none", "-o", str(out), "--model", "1b")
    assert r.exit_code == 0 and r.stderr == f"{note}DeepSpeed config; nothing written to {out}\n"
    assert not out.exists()  # no file, not an empty one
    out.write_text("{}")  # an existing file is left as it is, --force or not
    assert cli("config", "--zero", "none", "-o", str(out), "--force").exit_code == 0
    assert out.read_text() == "{}"
    r = cli("config", "--zero", "none", "--offload", "cpu")
    assert r.exit_code == 1 and r.stderr.startswith("error: --offload cpu needs DeepSpeed")


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--stage", "4"], "error: --stage '4': choose one of none, 0, 1, 2, 3"),
        (
            ["--stage", "2", "--offload", "gpu"],
            "error: --offload 'gpu': choose one of none, cpu, nvme",
        ),
        (
            ["--stage", "2", "--offload-param", "cpu"],
            "error: --offload-param cpu needs --zero 3 (got --zero 2): only ZeRO-3 partitions parameters",
        ),
        (["--stage", "3", "--offload", "nvme"], "error: --offload nvme needs --nvme-path"),
        (
            ["--stage", "2", "--bucket-size", "0"],
            "error: --bucket-size '0': out of range: from 1 to 1,000,000,000,000",
        ),
        (
            ["--stage", "2", "--bucket-size", "-5"],
            "error: --bucket-size '-5': out of range: from 1 to 1,000,000,000,000",
        ),
        (
            ["--stage", "2", "--bucket-size", "lots"],
            "error: --bucket-size 'lots': must be a whole number from 1 to 1,000,000,000,000",
        ),
        (["--stage", "2", "--model", "7x"], "error: --model '7x': unknown model"),
        (
            ["--stage", "2", "--bucket-size", "inf"],
            "error: --bucket-size 'inf': must be a whole number from 1 to 1,000,000,000,000",
        ),
    ],
)
def test_bad_input_one_clear_message(cli, tmp_path: Path, args: list[str], error: str) -> None:
    out = tmp_path / "ds.json"
    r = cli("config", *args, "-o", str(out))
    assert r.exit_code == 1
    lines = r.stderr.splitlines()
    assert lines[0] == error
    assert len(lines) == 2 and lines[1].startswith("hint: ")
    assert "Traceback" not in r.stderr and r.stdout == ""
    assert not out.exists()  # nothing written


def test_explain_goes_to_stderr(cli) -> None:
    r = cli("config", "--stage", "2", "--optimizer", "ds", "--bucket-size", "5e8", "--explain")
    assert r.exit_code == 0
    json.loads(r.stdout)  # stdout stays pure JSON
    assert "optimizer: DeepSpeed AdamW" in r.stderr
    assert "optim=adamw_torch_fused (default) is silently ignored" in r.stderr
    assert "scheduler: TrainingArguments lr_scheduler_type=linear (default)" in r.stderr
    # current code: 2 B x 5e8, doubled by overlap_comm; docs: 4.5 x (5e8 + 5e8) x 2 B = 9 GB
    assert "1.86 GiB (2.00 GB) with overlap_comm" in r.stderr
    assert "overlap_comm costs 953.7 MiB" in r.stderr
    assert "8.38 GiB (9.00 GB) with overlap_comm" in r.stderr


def test_check_ok_warning_and_error(cli, tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps(build_ds_config(ZeroOptions(stage=2))))
    r = cli("config", "--check", str(good))
    assert (r.exit_code, r.stdout) == (0, "")
    assert r.stderr == f"{good}: ok\n"

    warn = tmp_path / "warn.json"
    warn.write_text(json.dumps(build_ds_config(ZeroOptions(stage=2, optimizer="ds"))))
    r = cli("config", "--check", str(warn))
    assert (r.exit_code, r.stdout) == (0, "")
    assert r.stderr.startswith(f'{warn}:optimizer: warning: the DeepSpeed "optimizer" block wins')

    bad = tmp_path / "bad.json"
    bad.write_text('{\n  "zero_optimization": {"stage": 2,\n}\n')
    r = cli("config", "--check", str(bad))
    assert (r.exit_code, r.stdout) == (1, "")  # errors go where every dojo error goes
    assert r.stderr.startswith(f"{bad}:3:1: error: invalid JSON")
    assert r.stderr.endswith(f"{bad}: 1 error(s), 0 warning(s)\n")

    typo = tmp_path / "typo.json"
    typo.write_text(json.dumps({"zero_optimization": {"stage": 2, "overlap_com": True}}))
    r = cli("config", "--check", str(typo))
    assert (r.exit_code, r.stdout) == (1, "")
    assert r.stderr == (
        f"{typo}:zero_optimization.overlap_com: error: unknown key 'overlap_com'; did you mean 'overlap_comm'?\n"
        f"{typo}: 1 error(s), 0 warning(s)\n"
    )


def test_check_missing_file_and_extra_flags(cli, tmp_path: Path) -> None:
    r = cli("config", "--check", str(tmp_path / "nope.json"))
    assert r.exit_code == 1
    assert (
        r.stderr.splitlines()[0] == f"error: --check {str(tmp_path / 'nope.json')!r}: no such file"
    )
    r = cli("config", "--check", "x.json", "--stage", "2")
    assert r.exit_code == 1
    assert r.stderr.startswith("error: --check FILE lints a file and takes no other option")


def test_help_lists_flags(cli) -> None:
    r = cli("config", "--help")
    assert r.exit_code == 0
    for flag in (
        "--stage",
        "--offload-param",
        "--nvme-path",
        "--no-overlap-comm",
        "--bucket-size",
        "--check",
        "--explain",
    ):
        assert flag in r.stdout


def test_unused_nvme_path_warns(cli) -> None:
    r = cli("config", "--stage", "2", "--offload", "cpu", "--nvme-path", "/nvme")
    assert r.exit_code == 0
    assert r.stderr == "warning: --nvme-path /nvme is unused: nothing is offloaded to nvme\n"


def test_explain_offload_with_torch_optimizer(cli) -> None:
    r = cli("config", "--stage", "3", "--offload", "cpu", "--explain", "--model", "7b")
    assert r.exit_code == 0
    assert '"zero_force_ds_cpu_optimizer": false lets it run' in r.stderr
    assert "prefer --optimizer ds" in r.stderr
    assert "953.7 MiB either way" in r.stderr  # stage 3: one 2 B x 5e8 bucket


def test_dash_output_is_stdout(cli, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    r = cli("config", "--stage", "2", "-o", "-")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["zero_optimization"]["stage"] == 2
    assert not (tmp_path / "-").exists()


def test_zero3_options_below_zero3_and_unknown_leaf_classes_are_refused(cli) -> None:
    r = cli("config", "--zero", "2", "--z3-leaf", "Foo", "--prefetch-bucket-size", "5e8",
            "--sub-group-size", "1e8")  # fmt: skip
    assert (r.exit_code, r.stdout) == (1, "")
    assert r.stderr.splitlines() == [
        "error: --prefetch-bucket-size 500000000 applies to ZeRO-3 only (got --zero 2)",
        "hint: use --zero 3, or drop --prefetch-bucket-size",
        "error: --sub-group-size 100000000 applies to ZeRO-3 only (got --zero 2)",
        "hint: use --zero 3, or drop --sub-group-size",
        "error: --z3-leaf Foo applies to ZeRO-3 only (got --zero 2)",
        "hint: use --zero 3, or drop --z3-leaf",
    ]
    r = cli("config", "--model", "8b", "--zero", "3", "--z3-leaf", "Foo")
    assert (r.exit_code, r.stdout) == (1, "")
    assert r.stderr == (
        "error: --z3-leaf Foo: a llama model has no class Foo\n"
        "hint: use auto, off, or one of its classes: LlamaDecoderLayer\n"
    )
    # Without --model the class is written as given (dojo train checks it against the model).
    r = cli("config", "--zero", "3", "--z3-leaf", "Foo")
    assert json.loads(r.stdout)["zero_optimization"]["leaf_module"]["classes"][0] == "Foo"
