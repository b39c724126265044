"""bench/hook's BENCH_KEEP_GRAD_PARTITION experiment (ZeRO-1/2's step remap, dojo's
reserve.step_remap): DeepSpeed's optimizer keeps its bf16 gradient partition between steps
instead of making it anew in each backward. On the CPU, in one DeepSpeed process, a tiny random
Llama trains the same with and without it, with gradient accumulation (where the hook must let
the partition go between micro-batches), and the hook engages once a step."""

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

STEPS, SEQ = 3, 256


def _train(root: Path, name: str, data: Path, extra_env: dict[str, str]) -> dict[str, object]:
    out = root / name
    env = {**os.environ, "PYTHONPATH": f"{BENCH / 'hook'}:{REPO}:{os.environ.get('PYTHONPATH', '')}",
           **extra_env}  # fmt: skip
    argv = [sys.executable, "-m", "dojo", "train", "--nproc", "1", "--zero", "2",
            "--model", str(root / "model"), "--data", str(data), "--template", "chatml",
            "--packing", "--seq-len", str(SEQ), "--micro-batch", "2", "--grad-accum", "2",
            "--max-steps", str(STEPS), "--logging-steps", "1", "--save-steps", "0",
            "--no-save-model", "--report-to", "none", "--output-dir", str(out), "--force"]  # fmt: skip
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, cwd=REPO)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    summary: dict[str, object] = json.loads((out / "dojo_summary.json").read_text())
    return summary


def test_keeping_the_gradient_partition_trains_the_same(tmp_path: Path) -> None:
    pytest.importorskip("deepspeed")
    save_bench_llama(tmp_path / "model")
    sys.path.insert(0, str(BENCH))
    try:
        import workload

        data = workload.fixed_data(tmp_path / "data", SEQ)
    finally:
        sys.path.remove(str(BENCH))
    log = tmp_path / "kept.txt"
    plain = _train(tmp_path, "plain", data, {})
    kept = _train(tmp_path, "kept", data, {"BENCH_KEEP_GRAD_PARTITION": str(log)})
    assert plain["steps"] == kept["steps"] == STEPS
    assert plain["loss_last"] == kept["loss_last"] and plain["loss_first"] == kept["loss_first"]
    assert len(log.read_text().split()) == STEPS  # kept at each step's last micro-batch only
