"""The embedded default through the real DeepSpeed launcher on 2 CPU processes (gloo), slow.

Each run: the bundled tiny model and demo chats, a few optimizer steps, ZeRO-2 or ZeRO-3, LoRA or
full. Asserts exit 0, falling loss, the summary, and saved weights that load back.
"""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
STEPS = 12


def dojo_train(out: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "dojo", "train", "--nproc", "2", "--output-dir", str(out)]
    cmd += ["--seq-len", "256", "--micro-batch", "4", "--seed", "7", *args]
    env = {k: v for k, v in os.environ.items() if k not in ("DS_ACCELERATOR", "LOCAL_SIZE")}
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def summary(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "dojo_summary.json").read_text())
    return data


def check_run(r: subprocess.CompletedProcess[str], out: Path, zero: int, method: str) -> dict[str, Any]:
    assert r.returncode == 0, r.stderr[-4000:]
    assert f"run config: {out.resolve() / 'train.json'}" in r.stderr
    assert json.loads((out / "ds_config.json").read_text())["zero_optimization"]["stage"] == zero
    s = summary(out)
    assert set(s) >= {
        "steps", "loss_first", "loss_last", "tokens_per_s", "peak_gpu_gib",
        "estimated_gpu_gib", "world_size", "zero_stage", "method",
    }  # fmt: skip
    assert (s["world_size"], s["zero_stage"], s["method"]) == (2, zero, method)
    assert s["peak_gpu_gib"] is None and s["tokens_per_s"] > 0
    assert s["loss_last"] < s["loss_first"], s
    assert (out / "tensorboard").is_dir()
    return s


def load_base(out: Path) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(out / "init-weights")


@pytest.mark.parametrize("zero", [2, 3])
def test_lora(tmp_path: Path, zero: int) -> None:
    out = tmp_path / "run"
    r = dojo_train(out, "--zero", str(zero), "--lr", "2e-3", "--max-steps", str(STEPS), "--merge")
    s = check_run(r, out, zero, "lora")
    assert s["steps"] == STEPS
    assert {"adapter_model.safetensors", "adapter_config.json"} <= {p.name for p in out.iterdir()}
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = PeftModel.from_pretrained(load_base(out), out)
    merged = AutoModelForCausalLM.from_pretrained(out / "merged")
    ids = torch.tensor([[1, 5, 9, 14, 3]])
    with torch.no_grad():
        a = model(input_ids=ids).logits
        b = merged(input_ids=ids).logits
    assert torch.allclose(a, b, atol=1e-4)  # merged = base + adapter


@pytest.mark.parametrize("zero", [2, 3])
def test_full(tmp_path: Path, zero: int) -> None:
    out = tmp_path / "run"
    r = dojo_train(out, "--method", "full", "--zero", str(zero), "--lr", "1e-3", "--max-steps", str(STEPS))
    check_run(r, out, zero, "full")
    assert (out / "model.safetensors").is_file()
    import torch
    from transformers import AutoModelForCausalLM

    trained = AutoModelForCausalLM.from_pretrained(out)
    base = load_base(out)
    diff = [
        not torch.equal(p, q)
        for p, q in zip(trained.state_dict().values(), base.state_dict().values(), strict=True)
    ]
    assert any(diff)  # the saved model is the trained one, gathered (ZeRO-3) in full


def test_resume_continues_step_count(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = dojo_train(out, "--max-steps", "6", "--save-steps", "3")
    assert r.returncode == 0, r.stderr[-4000:]
    assert (out / "checkpoint-6" / "dojo_checkpoint.json").is_file()
    marker = json.loads((out / "checkpoint-6" / "dojo_checkpoint.json").read_text())
    assert marker["world_size"] == 2 and marker["step"] == 6
    r = dojo_train(out, "--max-steps", "9", "--save-steps", "3", "--resume")
    assert r.returncode == 0, r.stderr[-4000:]
    assert "resuming from" in r.stderr and "checkpoint-6" in r.stderr
    s = summary(out)
    assert s["steps"] == 9 and s["resumed_from"].endswith("checkpoint-6")
    # A different world size is refused before launch.
    cmd = [sys.executable, "-m", "dojo", "train", "--nproc", "1", "-o", str(out), "--resume"]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "was written by 2 processes, this run has 1" in r.stderr
