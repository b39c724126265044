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

from tests.helpers.train import REPO, dojo_train, summary

pytestmark = pytest.mark.slow
STEPS = 12


def check_run(
    r: subprocess.CompletedProcess[str], out: Path, zero: int, method: str
) -> dict[str, Any]:
    assert r.returncode == 0, r.stderr[-4000:]
    assert f"run config: {out.resolve() / 'train.json'}" in r.stderr
    assert json.loads((out / "ds_config.json").read_text())["zero_optimization"]["stage"] == zero
    s = summary(out)
    assert set(s) >= {
        "steps", "loss_first", "loss_last", "tokens_per_s", "memory", "world_size", "zero", "method",
    }  # fmt: skip
    assert (s["world_size"], s["zero"], s["method"]) == (2, zero, method)
    # No GPU: nothing measured on a device, but the estimate stands beside the empty measure.
    assert s["memory"]["device_gib"]["measured"] is None and s["tokens_per_s"] > 0
    assert s["memory"]["device_gib"]["estimated"] > 0
    assert "loss " in r.stderr and "model in" in r.stderr  # the last line
    # DeepSpeed's CPU allreduce buffers (66 MB of /dev/shm per rank) do not outlive the run.
    port = r.stderr.split("--master_port ", 1)[1].split()[0]
    assert not list(Path("/dev/shm").glob(f"deepspeed_allreduce_buffer_{os.getuid()}_*_{port}_*"))
    assert s["loss_last"] < s["loss_first"], s
    assert (out / "tensorboard").is_dir()
    return s


def load_base(out: Path) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(out / "init-weights")


@pytest.mark.parametrize("zero", [2, 3])
def test_lora(tmp_path: Path, zero: int) -> None:
    out = tmp_path / "run"
    r = dojo_train(
        out, "--method", "lora", "--zero", str(zero), "--lr", "2e-3", "--max-steps", str(STEPS),
        "--merge",
    )  # fmt: skip
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
    r = dojo_train(
        out, "--method", "full", "--zero", str(zero), "--lr", "1e-3", "--max-steps", str(STEPS)
    )
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


def _ranks(train_json: Path) -> dict[int, int]:
    """local rank -> pid of the worker processes of one run (from /proc)."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        text = [a.decode(errors="replace") for a in args]
        if "dojo.train.worker" in text and str(train_json) in text:
            rank = next((a.split("=")[1] for a in text if a.startswith("--local_rank=")), None)
            if rank is not None:
                found[int(rank)] = int(proc.name)
    return found


def _start(out: Path, *args: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "dojo", "train", "--nproc", "2", "--output-dir", str(out)]
    cmd += ["--seq-len", "256", "--micro-batch", "4", "--seed", "7", *args]
    return subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _wait_for(pred: Any, timeout: float = 120) -> None:
    import time

    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.2)


def test_killed_rank_stops_run_and_keeps_last_checkpoint(tmp_path: Path) -> None:
    import signal

    from dojo.train import checkpoints

    out = tmp_path / "run"
    proc = _start(out, "--max-steps", "400", "--save-steps", "5", "--save-total-limit", "3")
    try:
        _wait_for(lambda: checkpoints.latest_complete(out) is not None)
        ranks = _ranks(out.resolve() / "train.json")
        assert set(ranks) == {0, 1}
        os.kill(ranks[1], signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode not in (0, None)
    assert "training failed (launcher exit code" in err
    _wait_for(lambda: not _ranks(out.resolve() / "train.json"), timeout=15)  # no orphan rank
    latest = checkpoints.resume_point(out, 2)
    step = int(latest.name.split("-")[1])
    r = dojo_train(out, "--max-steps", str(step + 3), "--save-steps", "5", "--resume")
    assert r.returncode == 0, r.stderr[-4000:]
    assert summary(out)["steps"] == step + 3


def test_ctrl_c_exit_130_no_orphans(tmp_path: Path) -> None:
    import signal

    out = tmp_path / "run"
    proc = _start(out, "--max-steps", "400")
    train_json = out.resolve() / "train.json"
    try:
        _wait_for(lambda: len(_ranks(train_json)) == 2)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted: every process of the run was stopped" in err
    assert _ranks(train_json) == {}


def test_resume_is_deterministic(tmp_path: Path) -> None:
    """Steps 6-10 replayed from checkpoint-5 give the loss of the uninterrupted run (seed fixed)."""
    import shutil

    out = tmp_path / "run"
    r = dojo_train(out, "--max-steps", "10", "--save-steps", "5", "--save-total-limit", "3")
    assert r.returncode == 0, r.stderr[-4000:]
    whole = summary(out)
    shutil.rmtree(out / "checkpoint-10")  # as if the run had died after step 5's checkpoint
    r = dojo_train(out, "--max-steps", "10", "--save-steps", "5", "--resume")
    assert r.returncode == 0, r.stderr[-4000:]
    again = summary(out)
    assert again["resumed_from"].endswith("checkpoint-5")
    assert again["steps"] == whole["steps"] == 10
    assert again["loss_last"] == pytest.approx(whole["loss_last"], rel=1e-5, abs=1e-6)


@pytest.mark.parametrize(
    "method,extra", [("full", ()), ("lora", ()), ("lora", ("--grad-ckpt",))]
)  # LoRA without checkpointing: a frozen embedding, layer 0's input needs no grad (see apply_lora)
def test_zero3_leaf_layers_train_the_same(
    tmp_path: Path, method: str, extra: tuple[str, ...]
) -> None:
    """--z3-leaf auto gathers each decoder layer whole (DeepSpeed leaf modules): the losses are
    those of DeepSpeed's per-module hooks (--z3-leaf off), step for step."""
    losses = {}
    for leaf in ("auto", "off"):
        out = tmp_path / leaf
        r = dojo_train(
            out, "--method", method, "--zero", "3", "--lr", "2e-3", "--max-steps", "3",
            "--logging-steps", "1", "--no-save-model", "--z3-leaf", leaf, *extra,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr[-3000:]
        said = "ZeRO-3 leaf modules (each gathered whole): 2 LlamaDecoderLayer" in r.stderr
        assert said == (leaf == "auto")  # the flag DeepSpeed itself set, counted after init
        zero = json.loads((out / "ds_config.json").read_text())["zero_optimization"]
        assert ("leaf_module" in zero) == (leaf == "auto")
        losses[leaf] = [ln.split("loss ")[1].split()[0] for ln in r.stderr.splitlines()
                        if ln.startswith("step ") and "loss " in ln]  # fmt: skip
    assert len(losses["auto"]) == 3 and losses["auto"] == losses["off"]


def test_gemma2_trains_with_auto_attention(tmp_path: Path) -> None:
    """Gemma-2 soft-caps its attention logits: transformers 5.24 refuses SDPA for it, so --attn
    auto must pick eager (when it picked sdpa, every Gemma-2 run failed at load)."""
    from dojo.train.tiny import materialize_tiny_model

    model = materialize_tiny_model(tmp_path / "gemma2")
    vocab = json.loads((model / "config.json").read_text())["vocab_size"]
    config = {
        "model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"], "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
        "num_key_value_heads": 1, "head_dim": 32, "vocab_size": vocab,
        "max_position_embeddings": 1024, "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0, "query_pre_attn_scalar": 32, "sliding_window": 64,
        "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True,
    }  # fmt: skip
    (model / "config.json").write_text(json.dumps(config))
    out = tmp_path / "run"
    r = dojo_train(out, "--model", str(model), "--init", "random", "--max-steps", "3", nproc=1)
    assert r.returncode == 0, r.stderr[-4000:]
    assert "assumed: attn eager: gemma2 soft-caps" in r.stderr
    assert json.loads((out / "train.json").read_text())["run"]["kernels"]["attn"] == "eager"
