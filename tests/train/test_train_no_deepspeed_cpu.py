"""`dojo train --zero none` through the real launcher on 2 CPU processes, slow.

DeepSpeed's runner only starts the ranks; the HF Trainer trains without DeepSpeed (DDP over gloo).
Each run: the bundled tiny model, a few optimizer steps, full or LoRA. Asserted: exit 0, no
DeepSpeed JSON anywhere, a finite and falling loss, the weights saved, a checkpoint that a
--resume without DeepSpeed continues and a --resume with --zero 2 is refused before launch, and
`dojo export` of the result.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.train import REPO, dojo_train, summary

pytestmark = pytest.mark.slow
STEPS = 12


@pytest.mark.parametrize("method", ["full", "lora"])
def test_train_without_deepspeed(tmp_path: Path, method: str) -> None:
    for mod in ("torch", "transformers", "peft", "deepspeed"):
        pytest.importorskip(mod)
    out = tmp_path / "run"
    lr = "1e-3" if method == "full" else "2e-3"
    flags = ("--method", method, "--zero", "none", "--lr", lr, "--save-steps", "6")
    r = dojo_train(out, *flags, "--max-steps", str(STEPS), "--grad-ckpt")
    assert r.returncode == 0, r.stderr[-4000:]
    assert f"dojo train: {method}, no DeepSpeed, 2 CPU processes, fp32" in r.stderr
    assert "deepspeed config:" not in r.stderr
    assert not (out / "ds_config.json").exists()
    record = json.loads((out / "train.json").read_text())
    assert record["paths"]["ds_config"] is None and record["run"]["zero"]["stage"] == "none"
    s = summary(out)
    assert (s["world_size"], s["zero"], s["method"], s["steps"]) == (2, "none", method, STEPS)
    assert math.isfinite(s["loss_last"]) and s["loss_last"] < s["loss_first"], s
    names = {p.name for p in out.iterdir()}
    weights = "model.safetensors" if method == "full" else "adapter_model.safetensors"
    assert weights in names and "checkpoint-12" in names
    marker = json.loads((out / "checkpoint-12" / "dojo_checkpoint.json").read_text())
    assert marker["zero_stage"] == "none"

    # A checkpoint trained without DeepSpeed does not load into a ZeRO run: refused, nothing run.
    refused = dojo_train(out, *flags[:2], "--zero", "2", "--max-steps", "14", "--resume")
    assert refused.returncode == 1
    assert "checkpoint-12 was trained with --zero none, this run asks --zero 2" in refused.stderr
    assert "launch:" not in refused.stderr

    if method == "lora":  # the Trainer's own checkpoint (optimizer.pt, ...) continues
        more = dojo_train(out, *flags, "--max-steps", "14", "--resume")
        assert more.returncode == 0, more.stderr[-4000:]
        resumed = summary(out)
        assert resumed["steps"] == 14 and resumed["resumed_from"] == str(out / "checkpoint-12")
    exported = dojo_export(out)
    assert {"model.safetensors", "config.json"} <= {p.name for p in exported.iterdir()}


def dojo_export(run: Path) -> Path:
    r = subprocess.run(
        [sys.executable, "-m", "dojo", "export", str(run), "--dtype", "fp32"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    return Path(r.stdout.strip())
