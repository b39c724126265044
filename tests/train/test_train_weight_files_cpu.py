"""A model folder whose weights are pytorch_model.bin (no safetensors) trains; slow (real launcher)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def test_pytorch_model_bin_folder_trains(tmp_path: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from dojo.train.tiny import TINY_CONFIG, materialize_tiny_model

    folder = tmp_path / "bin-model"
    materialize_tiny_model(folder)  # config + tokenizer + chat template
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(TINY_CONFIG.parent))
    # transformers 5 saves safetensors only; older exports (and many Hub repos) ship this instead.
    torch.save(model.state_dict(), folder / "pytorch_model.bin")
    assert (folder / "pytorch_model.bin").is_file() and not list(folder.glob("*.safetensors"))
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "dojo", "train", "--nproc", "1", "--model", str(folder),
           "--method", "full", "--max-steps", "2", "--seq-len", "128", "--no-save-model",
           "-o", str(out)]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("DS_ACCELERATOR", "LOCAL_SIZE")}
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads((out / "dojo_summary.json").read_text())["steps"] == 2
