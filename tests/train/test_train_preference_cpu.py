"""Preference tuning through the real launcher on 2 CPU processes (gloo), slow.

A tiny synthetic set whose chosen answer is learnable ("... is good." over "... is bad."), a few
bad rows among it; a few optimizer steps of each objective on the bundled tiny model. Asserts
exit 0, the reward accuracy (DPO, ORPO, SimPO) or margin (KTO: TRL logs no accuracy) rising,
the bad rows counted with their reasons, weights that `dojo chat` and `dojo export` read, and
--resume refusing another objective.
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
STEPS = 6
WORDS = ("apple", "river", "stone", "cloud", "music", "table", "light", "ocean", "paper", "tiger")


def pairs() -> list[dict[str, Any]]:
    """40 learnable pairs (the chosen answer is always "good"), then 3 bad rows."""
    rows: list[dict[str, Any]] = []
    for i in range(40):
        w = WORDS[i % len(WORDS)]
        rows.append({
            "prompt": [{"role": "user", "content": f"Tell me about the {w}."}],
            "chosen": [{"role": "assistant", "content": f"The {w} is good."}],
            "rejected": [{"role": "assistant", "content": f"The {w} is bad."}],
        })  # fmt: skip
    rows.append({"prompt": "Tell me.", "chosen": "It is good."})  # no rejected answer
    rows.append({"prompt": "Tell me.", "chosen": "It is good.", "rejected": " "})  # empty side
    rows.append({"prompt": "word " * 80, "chosen": "good", "rejected": "bad"})  # over --seq-len
    return rows


def unpaired() -> list[dict[str, Any]]:
    """KTO's own rows, desirable and not, alternating (TRL's KL term pairs neighbours)."""
    rows = []
    for i in range(40):
        w, good = WORDS[i % len(WORDS)], i % 2 == 0
        rows.append({"prompt": f"Tell me about the {w}.",
                     "completion": f" The {w} is {'good' if good else 'bad'}.", "label": good})  # fmt: skip
    return rows


def write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def dojo(*args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DS_ACCELERATOR", "LOCAL_SIZE")}
    return subprocess.run([sys.executable, "-m", "dojo", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


def train(out: Path, data: Path, *args: str) -> dict[str, Any]:
    r = dojo("train", "--nproc", "2", "--output-dir", str(out), "--data", str(data),
             "--seq-len", "64", "--micro-batch", "4", "--max-steps", str(STEPS), "--seed", "7",
             "--save-steps", str(STEPS), *args)  # fmt: skip
    assert r.returncode == 0, r.stderr[-4000:]
    summary: dict[str, Any] = json.loads((out / "dojo_summary.json").read_text())
    assert summary["steps"] == STEPS and summary["world_size"] == 2
    assert summary["loss_last"] < summary["loss_first"], summary
    return summary | {"stderr": r.stderr}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write(tmp_path_factory.mktemp("pref") / "pairs.jsonl", pairs())


@pytest.fixture(scope="module")
def dpo_run(tmp_path_factory: pytest.TempPathFactory, data: Path) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("dpo") / "run"
    return out, train(out, data, "--objective", "dpo", "--method", "lora", "--lr", "5e-3")


def test_dpo_lora_learns_the_chosen_answer(dpo_run: tuple[Path, dict[str, Any]]) -> None:
    out, s = dpo_run
    assert s["objective"] == "dpo" and s["method"] == "lora" and s["zero"] == 2
    # step 1: the policy is the reference, every reward 0 (not chosen > rejected)
    assert s["reward_accuracy_first"] <= 0.5 < s["reward_accuracy_last"]
    assert s["reward_margin_last"] > s["reward_margin_first"]
    assert "dojo train: DPO lora, ZeRO-2, 2 CPU processes" in s["stderr"]
    assert "reward accuracy" in s["stderr"].splitlines()[-1]
    assert {"adapter_model.safetensors", "adapter_config.json"} <= {p.name for p in out.iterdir()}


def test_bad_rows_are_counted_and_named(dpo_run: tuple[Path, dict[str, Any]]) -> None:
    out, s = dpo_run
    d = s["data"]
    assert (d["rows"], d["used"], d["bad"], d["dropped"]) == (43, 40, 2, 1)
    reasons = "\n".join(d["bad_rows"])
    assert "no 'rejected' answer" in reasons and "the rejected is empty" in reasons
    assert "the prompt alone is" in reasons and "over --seq-len 64" in reasons


def test_chat_and_export_read_a_preference_run(
    dpo_run: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    out, _ = dpo_run
    r = dojo("chat", str(out), "--prompt", "Tell me about the river.", "--max-new-tokens", "8",
             "--temperature", "0", "--device", "cpu")  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout  # the tiny model's answer (after 6 steps, often blank lines)
    r = dojo("export", str(out), "-o", str(tmp_path / "export"))
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "export" / "model.safetensors").is_file()


def test_resume_refuses_another_objective(dpo_run: tuple[Path, dict[str, Any]], data: Path) -> None:
    out, _ = dpo_run
    r = dojo("train", "--nproc", "2", "--output-dir", str(out), "--data", str(data),
             "--seq-len", "64", "--micro-batch", "4", "--method", "lora", "--objective", "kto",
             "--resume")  # fmt: skip
    assert r.returncode == 1
    assert "trained with --objective dpo, this run asks --objective kto" in r.stderr


UNPADDED = "preference batches without padding"


def test_kto_lora_unpaired_rows(tmp_path: Path) -> None:
    """Also KTO without padding (--attn sdpa_varlen): its completions and KL completions run
    unpadded by offsets made from each batch's mask."""
    data = write(tmp_path / "kto.jsonl", unpaired())
    s = train(tmp_path / "run", data, "--objective", "kto", "--method", "lora", "--lr", "5e-3",
              "--zero", "3", "--attn", "sdpa_varlen")  # fmt: skip
    assert s["objective"] == "kto" and s["zero"] == 3
    assert UNPADDED in s["stderr"]
    # TRL's KTOTrainer logs the reward margin (mean desirable - mean undesirable reward), no
    # accuracy: the desirable answers' reward rises above the undesirable ones'.
    assert s["reward_accuracy_last"] is None
    assert s["reward_margin_first"] == 0.0 < s["reward_margin_last"]


def test_dpo_full_zero3_with_a_sharded_reference(tmp_path: Path, data: Path) -> None:
    """Without padding (--attn sdpa_varlen, CUDA's default for Llama/Qwen): the policy and the
    sharded reference copy both run the collator's offsets, in training and evaluation."""
    s = train(tmp_path / "run", data, "--objective", "dpo", "--method", "full", "--zero", "3",
              "--lr", "1e-3", "--eval-split", "0.1", "--attn", "sdpa_varlen")  # fmt: skip
    assert "reference model: a frozen copy of the starting weights" in s["stderr"]
    assert UNPADDED in s["stderr"]
    assert not (tmp_path / "run" / "README.md").exists()  # TRL's model card stays out of the run
    assert s["reward_accuracy_first"] <= 0.5 < s["reward_accuracy_last"]
    assert s["eval_loss_last"] is not None


@pytest.mark.parametrize("objective", ["orpo", "simpo"])
def test_orpo_and_simpo_train(tmp_path: Path, data: Path, objective: str) -> None:
    """Both through TRL's fused head (dojo.train.worker.fused_head); SimPO also without padding."""
    attn = "sdpa_varlen" if objective == "simpo" else "sdpa"
    s = train(tmp_path / "run", data, "--objective", objective, "--method", "lora",
              "--lr", "5e-3", "--attn", attn)  # fmt: skip
    assert s["objective"] == objective
    assert (UNPADDED in s["stderr"]) == (objective == "simpo")
    assert s["reward_margin_last"] > s["reward_margin_first"]
    assert s["reward_accuracy_last"] > 0.5


def test_dpo_unpadded_trains_as_padded(tmp_path: Path, data: Path) -> None:
    """The same DPO run with padded rows (--attn sdpa) and without (sdpa_varlen: the layers on
    the real tokens, TRL's head on the padded layout): the same losses and rewards, step for
    step, up to float rounding."""
    runs = {}
    for attn in ("sdpa", "sdpa_varlen"):
        runs[attn] = train(tmp_path / attn, data, "--objective", "dpo", "--method", "lora",
                           "--lr", "5e-3", "--attn", attn, "--logging-steps", "1")  # fmt: skip
    a, b = runs["sdpa"], runs["sdpa_varlen"]
    for key in ("loss_first", "loss_last", "reward_margin_first", "reward_margin_last"):
        assert b[key] == pytest.approx(a[key], rel=1e-3, abs=1e-4), key
