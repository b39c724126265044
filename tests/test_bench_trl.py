"""The speed benchmark's systems on the CPU, on a tiny random Llama: TRL's SFTTrainer
(bench/trl_sft.py, with and without DeepSpeed), the plain script and dojo each train 3 steps and
write bench/steps.py's record; every system counts the same real tokens a step on the same data,
and TRL's chat template gives the same tokens as the bundled ChatML dojo and the plain script use.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.examples import save_bench_llama

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"

pytestmark = pytest.mark.slow

MB, SEQ, STEPS = 2, 256, 3
TEARDOWN_ABORT = "terminate called without an active exception"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A 2-layer Llama (hidden 64) with random weights, dojo's tiny tokenizer, the bench data."""
    pytest.importorskip("torch")
    pytest.importorskip("trl")
    root = tmp_path_factory.mktemp("bench-trl")
    save_bench_llama(root / "model")
    sys.path.insert(0, str(BENCH))
    try:
        import workload

        data = workload.speed_data(root / "data")
        fixed = workload.fixed_data(root / "data", SEQ)
    finally:
        sys.path.remove(str(BENCH))
    mix = root / "data" / "mix-300.jsonl"  # the mix's first 300 chats: tokenizing stays short
    mix.write_text("".join(data["mix"].read_text().splitlines(keepends=True)[:300]))
    return {"root": root, "model": root / "model", "mix": mix, "fixed": fixed}


def _run(argv: list[str], steplog: Path, extra_env: dict[str, str] | None = None) -> list[int]:
    env = {**os.environ, "PYTHONPATH": f"{REPO}:{os.environ.get('PYTHONPATH', '')}",
           "BENCH_STEPLOG": str(steplog), **(extra_env or {})}  # fmt: skip
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"  # ninja, for DS's CPU op
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, cwd=REPO)
    out = p.stdout + p.stderr
    # A DeepSpeed CPU rank (gloo) now and then aborted in interpreter teardown after its work was
    # done (exit 250, seen in CI before the bench scripts destroyed their group); dojo's launcher
    # judges such a run by its ranks' "done" (dojo/train/rank_status.py). Here the step log,
    # written at the end of training, is the proof of done; any other failure fails.
    teardown = p.returncode == 250 and TEARDOWN_ABORT in out and steplog.exists()
    assert p.returncode == 0 or teardown, out[-3000:]
    marks = json.loads(steplog.read_text())["marks"]
    assert [m["step"] for m in marks] == [1, STEPS]
    return [m["tokens"] for m in marks]


def _common(tiny: dict[str, Path], data: str, out: str) -> list[str]:
    return ["--model", str(tiny["model"]), "--data", str(tiny[data]), "--out",
            str(tiny["root"] / out), "--seq-len", str(SEQ), "--micro-batch", str(MB),
            "--max-steps", str(STEPS)]  # fmt: skip


def test_trl_and_dojo_count_the_same_tokens_a_step(tiny: dict[str, Path]) -> None:
    """Both pack; on fixed-length samples (each longer than SEQ, truncated) every row is one
    sample of SEQ tokens, so both train MB x SEQ real tokens a step, and count them so. (On the
    mix the rows' fill depends on each packer's choice of samples; the tokens of each sample are
    the same: the template test below.)"""
    root = tiny["root"]
    trl = _run([sys.executable, str(BENCH / "trl_sft.py"), *_common(tiny, "fixed", "trl"),
                "--liger", "off"], root / "trl.json")  # fmt: skip
    dojo = _run(
        [sys.executable, "-m", "dojo", "train", "--nproc", "1", "--model", str(tiny["model"]),
         "--data", str(tiny["fixed"]), "--template", "chatml", "--packing",
         "--seq-len", str(SEQ), "--micro-batch", str(MB), "--max-steps", str(STEPS),
         "--logging-steps", "10", "--save-steps", "0", "--no-save-model", "--report-to", "none",
         "--output-dir", str(root / "dojo"), "--force"],
        root / "dojo.json",
        {"PYTHONPATH": f"{BENCH / 'hook'}:{REPO}:{os.environ.get('PYTHONPATH', '')}"},
    )  # fmt: skip
    assert trl == dojo == [MB * SEQ, STEPS * MB * SEQ]
    summary = json.loads((root / "trl" / "trl_summary.json").read_text())
    assert summary["steps"] == STEPS and summary["tokens"] == STEPS * MB * SEQ


def test_plain_and_trl_with_deepspeed_count_the_same_tokens(tiny: dict[str, Path]) -> None:
    """The same fixed-length samples: no padding for the plain script either; TRL with the plain
    script's ZeRO-2 JSON in one DeepSpeed CPU process."""
    pytest.importorskip("deepspeed")
    root = tiny["root"]
    plain = _run([sys.executable, str(BENCH / "baseline_trainer.py"),
                  *_common(tiny, "fixed", "plain"), "--zero", "none"], root / "plain.json")  # fmt: skip
    sys.path.insert(0, str(BENCH))
    try:
        from baseline_trainer import ds_config
    finally:
        sys.path.remove(str(BENCH))
    ds = root / "ds-zero2.json"
    ds.write_text(json.dumps(ds_config(2, "none", {})))
    trl_ds = _run(
        [sys.executable, "-m", "deepspeed.launcher.runner", "--include", "localhost:0",
         "--master_port", "29687", str(BENCH / "trl_sft.py"), *_common(tiny, "fixed", "trl-ds"),
         "--liger", "off", "--deepspeed", str(ds)],
        root / "trl-ds.json",
        {"DS_ACCELERATOR": "cpu", "LOCAL_SIZE": "1", "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert plain == trl_ds == [MB * SEQ, STEPS * MB * SEQ]


def test_trl_template_tokenizes_as_the_bundled_chatml(tiny: dict[str, Path]) -> None:
    """TRL's training template adds only {% generation %} markers: the same text, the same
    tokens per sample as the plain script's rendering of the bundled ChatML, and the assistant
    mask covers the answer and its <|im_end|> (the tokens dojo trains on)."""
    from transformers import AutoTokenizer

    sys.path.insert(0, str(BENCH))
    try:
        from baseline_trainer import tokenize
        from trl_sft import CHATML_TRAINING
    finally:
        sys.path.remove(str(BENCH))
    plain = AutoTokenizer.from_pretrained(tiny["model"])
    trl = AutoTokenizer.from_pretrained(tiny["model"])
    trl.chat_template = CHATML_TRAINING
    for line in tiny["mix"].read_text().splitlines()[:50]:
        msgs = json.loads(line)["messages"]
        ours = tokenize(plain, msgs, 10**6)["input_ids"]
        theirs = trl.apply_chat_template(msgs, tokenize=True, return_dict=True,
                                         return_assistant_tokens_mask=True)  # fmt: skip
        assert theirs["input_ids"] == ours
        mask = theirs["assistant_masks"]
        trained = [t for t, k in zip(theirs["input_ids"], mask, strict=True) if k]
        assert plain.decode(trained) == msgs[1]["content"] + "<|im_end|>"


def test_step_detail_has_one_entry_a_step(tiny: dict[str, Path]) -> None:
    """BENCH_STEPDETAIL=1 adds one record per step (the host clock, the garbage collector's
    pauses) without changing the marks the rates come from."""
    root = tiny["root"]
    log = root / "detail.json"
    _run([sys.executable, str(BENCH / "trl_sft.py"), *_common(tiny, "fixed", "trl-detail"),
          "--liger", "off"], log, {"BENCH_STEPDETAIL": "1"})  # fmt: skip
    detail = json.loads(log.read_text())["detail"]
    assert [d["step"] for d in detail] == list(range(1, STEPS + 1))
    assert all(d["gc_ms"] >= 0 for d in detail)
    assert all(a["t"] < b["t"] for a, b in zip(detail, detail[1:], strict=False))
