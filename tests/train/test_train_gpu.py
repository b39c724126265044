"""On the lent GPU machine: LoRA ZeRO-2, QLoRA, full ZeRO-3 on the bundled random-weight model."""

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


def dojo_train(out: Path, *args: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "dojo", "train", "--gpus", "0", "--output-dir", str(out)]
    cmd += ["--seq-len", "512", "--micro-batch", "8", "--max-steps", "20", "--seed", "7", *args]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    s: dict[str, Any] = json.loads((out / "dojo_summary.json").read_text())
    assert s["steps"] == 20 and s["loss_last"] < s["loss_first"]
    mem = s["memory"]
    for key in ("device_gib", "allocated_gib"):  # measured beside estimated, like for like
        assert mem[key]["measured"] > 0 and mem[key]["estimated"] > 0
        assert mem[key]["error_pct"] is not None
    assert s["peak_allocated_gib_after_step1"] is not None
    return s


@pytest.mark.gpu
def test_lora_zero2(tmp_path: Path) -> None:
    s = dojo_train(tmp_path / "r", "--method", "lora", "--zero", "2", "--lr", "2e-3")
    assert s["method"] == "lora" and s["zero"] == 2
    assert (tmp_path / "r" / "adapter_model.safetensors").is_file()


@pytest.mark.gpu
def test_qlora(tmp_path: Path) -> None:
    s = dojo_train(tmp_path / "r", "--method", "qlora", "--zero", "2", "--lr", "2e-3", "--merge")
    assert s["method"] == "qlora"
    assert (tmp_path / "r" / "merged" / "model.safetensors").is_file()


@pytest.mark.gpu
def test_qlora_zero3(tmp_path: Path) -> None:
    s = dojo_train(tmp_path / "r", "--method", "qlora", "--zero", "3", "--lr", "2e-3")
    assert s["zero"] == 3


@pytest.mark.gpu
def test_full_zero3(tmp_path: Path) -> None:
    s = dojo_train(tmp_path / "r", "--method", "full", "--zero", "3", "--lr", "1e-3")
    assert s["zero"] == 3
    assert (tmp_path / "r" / "model.safetensors").is_file()


@pytest.mark.gpu
def test_checkpointed_full_zero2_keeps_its_gradient_partition(tmp_path: Path) -> None:
    """dojo.train.worker.zero_grads engages where keeps_grad_partition says (one micro-batch a
    step), not with gradient accumulation at ZeRO-2; both train."""
    common = ("--method", "full", "--zero", "2", "--grad-ckpt", "--lr", "1e-3")
    assert dojo_train(tmp_path / "kept", *common)["kept_grad_partition"] is True
    s = dojo_train(tmp_path / "accum", *common, "--grad-accum", "2")
    assert s["kept_grad_partition"] is False


@pytest.mark.gpu
def test_compiled_packed_lora_compiles_once(tmp_path: Path) -> None:
    """--compile on with packing: rows of one width (dojo.train.worker.packing.compiled_width),
    so no batch after step 1 compiles the layers again; the uncompiled run records nothing."""
    common = ("--method", "lora", "--zero", "2", "--lr", "2e-3", "--packing")
    s = dojo_train(tmp_path / "on", *common, "--compile", "on")
    assert s["compiled_graphs_after_step1"] == 0
    off = dojo_train(tmp_path / "off", *common, "--compile", "off")
    assert off["compiled_graphs_after_step1"] is None


@pytest.mark.gpu
def test_qlora_dora_eval_best_cosine(tmp_path: Path) -> None:
    """The GPU paths of the training-loop options: QLoRA + DoRA, eval on a 10% split every 5 steps,
    the best checkpoint kept, cosine after warmup, NEFTune; the summary has the eval losses."""
    s = dojo_train(
        tmp_path / "r", "--method", "qlora", "--dora", "--zero", "2", "--lr", "2e-3",
        "--eval-split", "0.1", "--eval-steps", "5", "--save-steps", "10", "--keep-best", "on",
        "--lr-scheduler", "cosine", "--warmup-ratio", "0.1", "--neftune-alpha", "5",
    )  # fmt: skip
    assert s["evals"] == 4 and s["eval_loss_last"] < s["eval_loss_first"]
    assert s["best_checkpoint"].endswith(f"checkpoint-{s['eval_best_step']}")
    assert (tmp_path / "r" / "generation_config.json").is_file()
