"""`dojo train` with the loop options through the real CLI: dry run and preflight, no launch."""

import json
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest

from tests.helpers.train import NO_TENSORS

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "templates" / "data" / "demo_chat.jsonl"


@pytest.fixture
def no_gpus() -> Any:
    with patch("dojo.gpus.list_gpus", return_value=[]):
        yield


def _base(out: Path, args: tuple[str, ...] = ()) -> list[str]:
    data = [] if "--data" in args else ["--data", str(DEMO)]
    return ["train", "--nproc", "1", *data, "-o", str(out), "--dry-run", *args]


def test_dry_run_records_the_loop_options(cli, tmp_path: Path, no_gpus) -> None:
    held = tmp_path / "held.jsonl"
    held.write_text(DEMO.read_text().splitlines()[0] + "\n")
    out = tmp_path / "o"
    r = cli(*_base(out), "--eval-data", str(held), "--eval-steps", "10", "--save-steps", "20",
            "--early-stopping", "2", "--scheduler-type", "cosine", "--warmup-ratio", "0.05",
            "--report-to", "none", "--logging-steps", "auto", "--max-steps", "500")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    assert "lr_scheduler_type=cosine" in r.stderr  # the schedule that runs is the one said
    assert "eval: 1 valid rows" in r.stderr
    run = json.loads((out / "train.json").read_text())["run"]
    loop = run["loop"]
    assert (run["data"]["eval_data"], loop["eval_steps"], loop["early_stopping"]) == (
        [str(held)], 10, 2,
    )  # fmt: skip
    assert (loop["keep_best"], loop["lr_scheduler"], loop["warmup_ratio"]) == ("on", "cosine", 0.05)
    assert (run["output"]["report_to"], run["output"]["logging_steps"]) == ("none", 5)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--eval-split", "0.5", "--data", "ONE"], "--eval-split 0.5: 1 valid row(s), none would be left"),
        (["--eval-data", "EMPTY"], "--eval-data"),
        (["--eval-data", "MISSING"], "--eval-data"),
        (["--early-stopping", "3"], "--early-stopping 3 needs eval data"),
        (["--eval-split", "0.1", "--keep-best", "on", "--save-steps", "30", "--eval-steps", "20"],
         "--save-steps 30 is not a multiple of --eval-steps 20"),
        (["--lr-scheduler", "cosine", "--scheduler", "ds"], "--lr-scheduler cosine is the Trainer's"),
        (["--warmup-ratio", "0.1", "--warmup-steps", "5"], "--warmup-ratio and --warmup-steps exclude"),
        (["--dora"], "--dora applies to --method lora or qlora only"),
        (["--lr-scheduler", "cosine_annealing"], "--lr-scheduler 'cosine_annealing': choose one of"),
    ],
)  # fmt: skip
def test_bad_input_one_line_nothing_written(
    cli, tmp_path: Path, no_gpus, args: list[str], needle: str
) -> None:
    one = tmp_path / "one.jsonl"
    one.write_text(DEMO.read_text().splitlines()[0] + "\n")
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"nothing": 1}\n')
    subst = {"ONE": str(one), "EMPTY": str(empty), "MISSING": str(tmp_path / "nope.jsonl")}
    out = tmp_path / "o"
    r = cli(*_base(out, tuple(subst.get(a, a) for a in args)))
    assert r.exit_code == 1
    assert needle in r.stderr and "Traceback" not in r.stderr
    assert r.stderr.count("error:") == 1 and "hint:" in r.stderr
    assert not out.exists()


def test_template_tokens_checked_before_launch(cli, tmp_path: Path, no_gpus) -> None:
    """A local model whose tokenizer lacks --template's tokens: LoRA is refused before anything
    launches or is written; full fine-tuning is told the tokens will be added."""
    pytest.importorskip("tokenizers")
    from dojo.train.tiny import materialize_tiny_model

    model = materialize_tiny_model(tmp_path / "m")
    (model / "model.safetensors").write_bytes(NO_TENSORS)  # a dry run never loads it
    base = ["--model", str(model), "--template", "llama-3-instruct"]
    r = cli(*_base(tmp_path / "a", (*base, "--method", "lora")))
    assert r.exit_code == 1 and "<|eot_id|>" in r.stderr and "--modules-to-save" in r.stderr
    assert not (tmp_path / "a").exists()
    half = ("--method", "lora", "--modules-to-save", "embed_tokens")  # the head's rows untrained
    assert cli(*_base(tmp_path / "b", (*base, *half))).exit_code == 1
    ok = ("--method", "lora", "--modules-to-save", "embed_tokens,lm_head")
    assert cli(*_base(tmp_path / "b", (*base, *ok))).exit_code == 0
    r = cli(*_base(tmp_path / "c", base))
    assert r.exit_code == 0 and "note: the template's tokens <|begin_of_text|>" in r.stderr
    assert cli(*_base(tmp_path / "d", ("--model", str(model), "--method", "lora"))).exit_code == 0
