"""`dojo estimate` through the real entry point: table, --json schema, every bad-input message."""

import json
from pathlib import Path
from typing import Any

import pytest

from dojo.cli import estimate as cli_estimate


@pytest.fixture(autouse=True)
def no_local_gpu(monkeypatch):
    # The default --gpu-memory asks nvidia-smi; keep tests independent of the machine.
    monkeypatch.setattr("dojo.gpus.list_gpus", lambda: [])


@pytest.mark.parametrize(
    ("flags", "shown"),
    [
        (["--attn", "sdpa"], ", sdpa, "),
        (["--attn", "sdpa_varlen", "--packing"], ", sdpa_varlen (memory as flash_attention_2), "),
        (["--attn", "flash_attention_2", "--packing"], ", flash_attention_2, "),
    ],
)
def test_the_header_names_the_runs_attention_kernel(cli, flags: list[str], shown: str) -> None:
    """The kernel the run uses, and the one whose memory model the estimate applies to it
    where they differ (a user who asked for sdpa_varlen never sees only another kernel's name)."""
    r = cli("estimate", "--model", "1b", *flags, "--gpu-memory", "80")
    assert r.exit_code == 0, r.stderr
    assert shown in r.stdout.splitlines()[0]


def test_plain_table_all_stages(cli) -> None:
    r = cli("estimate", "--model", "7b", "--zero", "all", "--gpu-memory", "80")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("llama-2-7b: 6,738,415,616 params")
    header = lines[1].split()
    assert header[:2] == ["stage", "offload"] and header[-1] == "verdict"
    for col in ["params", "grads", "optim", "activ", "logits", "comm", "reserve", "overhead"]:
        assert col in header
    stages = [ln[:12].strip() for ln in lines[2:11]]
    assert stages == ["no DeepSpeed", "0", "1", "1", "2", "2", "3", "3", "3"]
    assert "comm(docs)" in header  # stage 3 has overlap_comm on by default
    # Full fine-tuning of 7B: 8 B a parameter without DeepSpeed (bf16 AdamW states, and the
    # backward peaks before most grads exist), 16 at ZeRO-0.
    assert lines[2].split()[-1] == "fits" and lines[3].split()[-1] == "NO"
    # Where host RAM goes, per row: offloaded states, pinned rounding, the load, the ranks.
    assert lines[11] == "host RAM per node (GiB):"
    assert lines[12].split()[2:] == [
        "offloaded",
        "pinned",
        "pad",
        "model",
        "load",
        "processes",
        "CPU",
        "total",
    ]
    assert len(lines) == 13 + 9


def test_json_schema(cli) -> None:
    r = cli(
        "estimate",
        "--model",
        "qwen2.5-0.5b",
        "--zero",
        "3",
        "--method",
        "lora",
        "--json",
        "--gpu-memory",
        "24",
    )
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["model"] == {
        "name": "qwen2.5-0.5b",
        "params": 494_032_768,
        "trainable_params": d["model"]["trainable_params"],
    }
    assert 0 < d["model"]["trainable_params"] < 10_000_000
    (row,) = d["rows"]
    assert row["stage"] == 3 and row["offload"] == "none" and row["fits"] is True
    assert row["verdict"] == "fits"
    assert set(row["gpu_gib"]) == {
        "total",
        "params",
        "gradients",
        "optimizer_states",
        "activations",
        "logits",
        "comm_buffers",
        "allocator_reserve",
        "overhead",
    }
    assert row["cpu_gib"]["total"] > 0


def test_no_gpu_no_verdict(cli) -> None:
    r = cli("estimate", "--model", "1b", "--zero", "2")
    assert r.exit_code == 0
    assert r.stdout.splitlines()[2].split()[-1] == "?"
    assert "no fits verdict" in r.stderr


def test_default_gpu_memory_from_nvidia_smi(cli, monkeypatch) -> None:
    from dojo.gpus import Gpu

    monkeypatch.setattr("dojo.gpus.list_gpus", lambda: [Gpu(0, "H200", 139.8)])
    d = json.loads(cli("estimate", "--model", "7b", "--zero", "2", "--json").stdout)
    assert d["rows"][0]["fits"] is False  # 7B full FT at ZeRO-2 on one H200


def test_offload_stage3_offloads_params_too(cli) -> None:
    d = json.loads(
        cli("estimate", "--model", "7b", "--zero", "3", "--offload", "cpu", "--json").stdout
    )
    assert [(r["offload"], r["offload_param"]) for r in d["rows"]] == [("cpu", "cpu")]
    d = json.loads(
        cli(
            "estimate",
            "--model",
            "7b",
            "--zero",
            "3",
            "--offload",
            "cpu",
            "--offload-param",
            "none",
            "--json",
        ).stdout
    )
    assert d["rows"][0]["offload_param"] == "none"


def test_overlap_rule_docs_shows_both(cli) -> None:
    args = [
        "estimate",
        "--model",
        "7b",
        "--zero",
        "2",
        "--overlap-comm",
        "--bucket-size",
        "500000000",
    ]
    cur = cli(*args, "--json")
    docs = cli(*args, "--overlap-rule", "docs", "--json")
    c = json.loads(cur.stdout)["rows"][0]["gpu_gib"]["comm_buffers"]
    d = json.loads(docs.stdout)["rows"][0]["gpu_gib"]["comm_buffers"]
    assert d == pytest.approx(9e9 / 2**30, abs=0.001) and c < 3
    table = cli(*args).stdout.splitlines()
    assert "comm(docs)" in table[1]
    assert "8.38" in table[2]


def test_qlora_zero3_note(cli) -> None:
    r = cli("estimate", "--model", "7b", "--zero", "3", "--method", "qlora", "--num-gpus", "2")
    assert r.exit_code == 0
    assert "note: ZeRO-3 + QLoRA stores the 4-bit weights as bf16" in r.stderr
    assert "quantization statistics stay whole on every GPU" in r.stderr


def test_local_config(cli, tmp_path) -> None:
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "model_type": "llama",
                "hidden_size": 64,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "intermediate_size": 128,
                "vocab_size": 1000,
            }
        )
    )
    d = json.loads(cli("estimate", "--model", str(tmp_path), "--zero", "0", "--json").stdout)
    assert (
        d["model"]["params"]
        == 1000 * 64 + 2 * (4 * 64 * 64 + 3 * 64 * 128 + 2 * 64) + 64 + 1000 * 64
    )


@pytest.mark.parametrize(
    "args,message",
    [
        (["--model", "7x"], "error: --model '7x': unknown model"),
        (
            ["--model", "/nonexistent/config.json"],
            "error: --model /nonexistent/config.json: no such file or folder",
        ),
        (["--model", "7b", "--micro-batch", "0"], "error: --micro-batch '0': out of range"),
        (["--model", "7b", "--seq-len", "-5"], "error: --seq-len '-5': out of range"),
        (["--model", "7b", "--num-gpus", "0"], "error: --num-gpus '0': out of range"),
        (["--model", "7b", "--bucket-size", "0"], "error: --bucket-size '0': out of range"),
        (["--model", "7b", "--bucket-size", "-3"], "error: --bucket-size '-3': out of range"),
        (
            ["--model", "7b", "--zero", "2", "--offload-param", "cpu"],
            "error: --offload-param cpu needs --zero 3 (got --zero 2)",
        ),
        (
            ["--model", "7b", "--zero", "0", "--offload", "cpu"],
            "error: --offload cpu needs ZeRO stage 1, 2 or 3",
        ),
        (
            ["--model", "7b", "--zero", "2", "--z3-leaf", "Foo"],
            "error: --z3-leaf Foo applies to ZeRO-3 only (got --zero 2)",
        ),
        (
            ["--model", "7b", "--method", "full", "--lora-r", "8"],
            "error: --lora-r 8 applies to --method lora or qlora only",
        ),
    ],
)
def test_bad_input(cli, args: list[str], message: str) -> None:
    r = cli("estimate", *args)
    assert r.exit_code == 1
    assert r.stdout == ""
    first, hint = r.stderr.splitlines()[:2]
    assert first.startswith(message)
    assert hint.startswith("hint: ")


def test_did_you_mean(cli) -> None:
    r = cli("estimate", "--model", "7x")
    assert "did you mean 7b" in r.stderr


def test_malformed_config_names_line(cli, tmp_path) -> None:
    f = tmp_path / "config.json"
    f.write_text('{\n  "hidden_size": 64,\n  oops\n}')
    r = cli("estimate", "--model", str(f))
    assert r.exit_code == 1
    assert "is not valid JSON" in r.stderr and "line 3" in r.stderr


def test_usage_errors(cli) -> None:
    # Values are parsed by the option catalogue (one message style for every command): exit 1.
    assert cli("estimate", "--model", "7b", "--zero", "4").exit_code == 1
    assert cli("estimate", "--model", "7b", "--offload", "gpu").exit_code == 1
    assert cli("estimate").exit_code == 1
    assert cli("estimate", "--model", "7b", "--no-such-flag").exit_code == 2


def test_help_lists_aliases(cli) -> None:
    r = cli("estimate", "--help")
    assert r.exit_code == 0
    for alias in [
        "0.5b",
        "1b",
        "1.5b",
        "3b",
        "7b=llama-2-7b",
        "8b",
        "13b",
        "14b",
        "32b",
        "70b",
        "72b",
    ]:
        assert alias in r.stdout.replace("\n", " ")


def test_plan_rows_all_with_offload() -> None:
    from dojo.modelspec import resolve_model
    from dojo.run import inputs
    from dojo.run.machine import assumed_cuda

    values = inputs.merge("estimate", {}, {"model": "7b", "offload": "cpu"})
    runs = cli_estimate.plan_runs(values, resolve_model("7b"), assumed_cuda(), 1, {"offload"}, True)
    assert [(r.zero.stage, r.zero.offload, r.zero.offload_param) for r in runs] == [
        (1, "cpu", "none"),
        (2, "cpu", "none"),
        (3, "cpu", "cpu"),
    ]


def test_zero_none_row(cli) -> None:
    r = cli("estimate", "--model", "1b", "--method", "qlora", "--zero", "none", "--json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [row["stage"] for row in doc["rows"]] == ["none"]
    assert doc["runs"][0]["zero"]["stage"] == "none"
    r = cli("estimate", "--model", "1b", "--zero", "none", "--liger", "off")
    assert r.exit_code == 0, r.stderr
    title, _, row = r.stdout.splitlines()[:3]
    assert "sdpa, no DeepSpeed;" in title and row.startswith("no DeepSpeed  none ")
    # --zero all: the run without DeepSpeed first; where only DeepSpeed can do what was asked,
    # no such row.
    r = cli("estimate", "--model", "1b", "--zero", "all", "--json")
    assert [row["stage"] for row in json.loads(r.stdout)["rows"]][:2] == ["none", 0]
    r = cli("estimate", "--model", "1b", "--zero", "all", "--optimizer", "ds", "--json")
    assert [row["stage"] for row in json.loads(r.stdout)["rows"]][0] == 0
    r = cli("estimate", "--model", "1b", "--zero", "none", "--offload", "cpu")
    assert r.exit_code == 1 and "error: --offload cpu needs DeepSpeed (got --zero none)" in r.stderr


def test_zero_all_says_which_stages_an_option_leaves_out(cli) -> None:
    def stages_and_assumed(*args: str) -> tuple[list[Any], list[str]]:
        r = cli("estimate", "--model", "1b", "--zero", "all", "--json", *args)
        assert r.exit_code == 0, r.stderr
        doc = json.loads(r.stdout)
        return [row["stage"] for row in doc["rows"]], doc["assumed"]

    stages, assumed = stages_and_assumed("--offload", "cpu")
    assert stages == [1, 2, 3]
    assert "--zero all leaves out --zero none (--offload cpu needs DeepSpeed); --zero 0 " \
        "(--offload cpu needs ZeRO stage 1, 2 or 3)" in assumed  # fmt: skip
    stages, assumed = stages_and_assumed("--offload-param", "cpu")
    assert stages == [3]
    assert "--zero all leaves out --zero none, 0, 1, 2 (--offload-param cpu needs --zero 3)" in (
        assumed
    )
    stages, assumed = stages_and_assumed("--z3-leaf", "off", "--sub-group-size", "2e8")
    assert stages == [3, 3, 3]
    assert assumed[0].startswith("--zero all leaves out --zero none, 0, 1, 2 (--sub-group-size")
    stages, assumed = stages_and_assumed()
    assert stages[0] == "none" and not any("leaves out" in a for a in assumed)
    r = cli("estimate", "--model", "1b", "--zero", "all", "--offload", "cpu")
    assert "assumed: --zero all leaves out --zero none (--offload cpu" in r.stderr


def test_lora_targets_matching_nothing_name_the_models_linear_layers(cli) -> None:
    r = cli("estimate", "--model", "7b", "--method", "lora", "--lora-targets", "nope")
    assert (r.exit_code, r.stdout) == (1, "")
    assert r.stderr == (
        "error: --lora-targets nope: matches no linear layer of this llama model\n"
        "hint: its linear layers are q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj; "
        "name some of them, or use all-linear\n"
    )
    mla = Path(__file__).parent / "data" / "moe" / "deepseek-v3.config.json"
    r = cli("estimate", "--model", str(mla), "--method", "qlora", "--lora-targets", "q_proj")
    assert r.exit_code == 1 and "its linear layers are q_a_proj,q_b_proj,kv_a_proj_with_mqa," in (
        r.stderr
    )


def test_seq_len_past_max_position_embeddings_is_an_assumed_line(cli, tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                               "vocab_size": 256, "max_position_embeddings": 2048}))  # fmt: skip
    r = cli("estimate", "--model", str(cfg), "--seq-len", "4096")
    assert r.exit_code == 0, r.stderr
    assert "assumed: seq len 4096: past the model's max_position_embeddings 2048" in r.stderr
    r = cli("estimate", "--model", str(cfg), "--seq-len", "2048")
    assert "max_position_embeddings" not in r.stderr
