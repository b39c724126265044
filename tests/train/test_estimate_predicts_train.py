"""`dojo estimate` describes the run `dojo train` launches: same options -> same resolved run and
the same estimate, on a machine with GPUs and on one without (the assumed CUDA machine)."""

import json
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest

from dojo.gpus import Gpu
from tests.helpers.train import NO_TENSORS

TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 688,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "vocab_size": 4096,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
}
REPO = Path(__file__).resolve().parents[2]
H200 = [Gpu(0, "NVIDIA H200", 139.8), Gpu(1, "NVIDIA H200", 139.8)]
# Fields of the Run that change memory: both commands must resolve them the same way.
MEMORY_FIELDS = (
    "model", "objective", "data", "zero", "kernels", "lora", "loop", "gpus_per_node", "device",
)  # fmt: skip
"""Everything the estimate reads: every group it uses, whole."""
GRID: list[list[str]] = [
    [],
    ["--method", "lora"],
    ["--method", "lora", "--zero", "3", "--lora-rank", "64", "--lora-dropout", "0"],
    ["--zero", "3", "--offload", "cpu"],
    ["--stage", "3", "--offload", "cpu", "--offload-param", "none"],
    ["--zero", "2", "--offload", "cpu", "--optimizer", "ds"],
    ["--zero", "1", "--bucket-size", "2e8", "--no-overlap-comm"],
    ["--zero", "0", "--grad-ckpt", "--micro-batch", "8", "--seq-len", "4096"],
    ["--attention", "eager", "--seq-len", "512"],
    ["--liger", "off", "--compile", "off", "--no-packing"],
    ["--packing", "--seq-len", "1024"],
    ["--method", "lora", "--lora-targets", "q_proj,v_proj", "--grad-ckpt"],
    ["--zero", "3", "--bucket-size", "auto", "--micro-batch", "1"],
    ["--objective", "dpo", "--zero", "3"],
    ["--objective", "kto", "--method", "lora", "--precompute-ref-log-probs"],
    ["--objective", "orpo", "--method", "lora", "--micro-batch", "2"],
    ["--zero", "none"],
    ["--zero", "none", "--method", "lora", "--optim", "adamw_torch", "--grad-ckpt"],
    ["--method", "lora", "--dora", "--modules-to-save", "embed_tokens,lm_head"],
]


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(TINY_LLAMA))
    (d / "chat_template.jinja").write_text((REPO / "templates/chat/chatml.jinja").read_text())
    (d / "model.safetensors").write_bytes(NO_TENSORS)  # the dry run never loads it
    return d


def _both(
    cli: Any, model_dir: Path, out: Path, args: list[str], gpus: list[Gpu]
) -> tuple[Any, Any]:
    with patch("dojo.gpus.list_gpus", return_value=gpus):
        e = cli("estimate", "--model", str(model_dir), "--gpus", "0,1", "--json", *args)
        t = cli(
            "train", "--model", str(model_dir), "--data", "org/chats", "--gpus", "0,1",
            "-o", str(out), "--dry-run", *args,
        )  # fmt: skip
    assert e.exit_code == 0, e.stderr
    assert t.exit_code == 0, t.stderr
    return json.loads(e.stdout), json.loads((out / "train.json").read_text())


@pytest.mark.parametrize("gpus", [H200, []], ids=["gpus-here", "assumed-cuda"])
@pytest.mark.parametrize("args", GRID, ids=lambda a: " ".join(a) or "defaults")
def test_estimate_equals_train_dry_run(
    cli: Any, model_dir: Path, tmp_path: Path, args: list[str], gpus: list[Gpu]
) -> None:
    est, rec = _both(cli, model_dir, tmp_path / "run", args, gpus)
    estimated, trained = est["runs"][0], rec["run"]
    same = {"model": ("method",), "data": ("seq_len", "packing")}  # the rest differs by command
    for k in MEMORY_FIELDS:
        if k in same:
            assert [estimated[k][f] for f in same[k]] == [trained[k][f] for f in same[k]]
        elif k == "loop":
            assert (estimated[k]["micro_batch"], estimated[k]["optim"]) == (
                trained[k]["micro_batch"], trained[k]["optim"]
            )  # fmt: skip
        else:
            assert estimated[k] == trained[k], k
    assert estimated["devices"]["num_nodes"] == trained["devices"]["num_nodes"]
    row = est["rows"][0]
    assert row["gpu_gib"]["total"] == rec["estimate"]["device_gib"]
    assert row["cpu_gib"]["total"] == rec["estimate"]["host_gib"]
    assert trained["machine_assumed"] is (not gpus)


def test_plain_stack_is_described_by_turning_dojo_extras_off(
    cli: Any, model_dir: Path, tmp_path: Path
) -> None:
    with patch("dojo.gpus.list_gpus", return_value=[]):
        dojo = json.loads(cli("estimate", "--model", str(model_dir), "--json").stdout)
        plain = json.loads(
            cli(
                "estimate",
                "--model",
                str(model_dir),
                "--json",
                "--liger",
                "off",
                "--no-packing",
            ).stdout  # fmt: skip
        )
    assert dojo["runs"][0]["kernels"]["liger"] == "on"
    assert plain["runs"][0]["kernels"]["liger"] == "off"
    assert any("liger on" in line for line in dojo["assumed"])
    # Liger's fused loss never materialises the fp32 logits: the plain stack needs more.
    assert plain["rows"][0]["gpu_gib"]["logits"] > dojo["rows"][0]["gpu_gib"]["logits"]
