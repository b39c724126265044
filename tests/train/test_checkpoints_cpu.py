"""dojo.train.checkpoints through the real launcher: `dojo train --nproc 2` (DeepSpeed runner,
2 CPU ranks) killed after a checkpoint and resumed, and a finished run's markers.

Slow (a few minutes on 2 cores: small runs of the embedded default). One uninterrupted reference
run, one run whose rank 0 gets SIGKILL right after its first complete checkpoint, and its
--resume. Asserted: every process gone within seconds, the dead rank named, the last complete
checkpoint intact and the one resumed from (a half-written later one is skipped), the resumed run
ending at the same step with the same losses as the reference. A trained run's real markers hold
its settings (a --zero 3 resume is refused), and a shard truncated in the latest checkpoint makes
--resume fall back to the previous one.
"""

import json
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from dojo.errors import LaunchError
from dojo.train import checkpoints
from tests.helpers.procs import run_processes as _run_processes
from tests.helpers.procs import start_train
from tests.helpers.procs import wait_for as _wait_for

pytestmark = pytest.mark.slow
STEPS = 60  # ~8 s of training: a wide window to kill in, yet a small run
SAVE = 5
EXIT_WITHIN_S = 20.0  # "within seconds", with margin for a loaded 2-core CI box
ARGS = ["--nproc", "2", "--method", "lora", "--seq-len", "256", "--micro-batch", "4", "--seed", "7"]
ARGS += ["--max-steps", str(STEPS), "--save-steps", str(SAVE), "--save-total-limit", "3"]


def _train(out: Path, *extra: str) -> str:
    proc, log = _start(out, *extra)
    try:
        rc = proc.wait(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text(errors="replace")
    assert rc == 0, text[-4000:]
    return text


def _ranks(out: Path) -> dict[int, int]:
    """local rank -> pid of the worker processes."""
    ranks = {}
    for pid, argv in _run_processes(out).items():
        if "dojo.train.worker" in argv:
            rank = next((a.split("=", 1)[1] for a in argv if a.startswith("--local_rank=")), None)
            if rank is not None:
                ranks[int(rank)] = pid
    return ranks


def _losses(ckpt: Path) -> dict[int, float]:
    state = json.loads((ckpt / "trainer_state.json").read_text())
    return {h["step"]: h["loss"] for h in state["log_history"] if "loss" in h}


@dataclass
class Killed:
    out: Path
    log: str
    rc: int
    killed_rank: int
    seconds_to_all_gone: float
    last_complete: Path


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("killed") / "reference"
    _train(out)
    return out


@pytest.fixture(scope="module")
def killed(tmp_path_factory: pytest.TempPathFactory) -> Killed:
    """SIGKILL rank 0 (the rank that writes checkpoint markers) right after checkpoint-5."""
    out = tmp_path_factory.mktemp("killed") / "run"
    proc, log = _start(out)
    try:
        _wait_for(lambda: checkpoints.latest_complete(out) is not None, 300, "a checkpoint")
        ranks = _ranks(out)
        assert set(ranks) == {0, 1}, ranks
        os.kill(ranks[0], signal.SIGKILL)
        t0 = time.monotonic()
        rc = proc.wait(timeout=120)
        _wait_for(lambda: not _run_processes(out), 60, "every process of the run to end")
        gone = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    latest = checkpoints.latest_complete(out)
    assert latest is not None
    print(f"\ncheckpoints: SIGKILL rank 0 -> every process gone in {gone:.1f} s, exit {rc}")  # -s
    return Killed(out, log.read_text(errors="replace"), rc, 0, gone, latest)


def test_kill_stops_every_process_within_seconds(killed: Killed) -> None:
    assert killed.rc not in (0, 130), killed.log[-3000:]
    assert killed.seconds_to_all_gone < EXIT_WITHIN_S, killed.seconds_to_all_gone
    assert "error: training failed (launcher exit code" in killed.log
    assert "can be continued with --resume" in killed.log
    assert "Traceback" not in killed.log.split("error: training failed")[1]


def test_kill_names_the_rank_that_died(killed: Killed) -> None:
    def named(rank: int) -> list[str]:
        pat = re.compile(rf"(?<![\w-])(local_)?rank[ =:]*{rank}\b", re.IGNORECASE)
        death = re.compile(r"died|killed|SIGKILL|signal 9|-9\b|exit", re.IGNORECASE)
        # DeepSpeed's own launch.py line names the last rank it spawned whichever rank died
        # (upstream), and torch prefixes a surviving rank's own output with "[rankN]:";
        # dojo's report is what must be right.
        lines = [
            ln
            for ln in killed.log.splitlines()
            if "launch.py" not in ln and not ln.startswith("[rank")
        ]
        return [ln for ln in lines if pat.search(ln) and death.search(ln)]

    print("\n".join(ln for ln in killed.log.splitlines() if "return code" in ln)[-600:])
    assert named(killed.killed_rank), "no line says which rank died"
    assert not named(1 - killed.killed_rank), "the surviving rank is reported as the dead one"


def test_last_complete_checkpoint_is_intact(killed: Killed) -> None:
    from safetensors.torch import load_file

    ckpt = killed.last_complete
    step = int(ckpt.name.split("-")[1])
    assert step % SAVE == 0 and 0 < step < STEPS
    marker = checkpoints.read_marker(ckpt)
    assert marker["step"] == step and marker["world_size"] == 2
    assert json.loads((ckpt / "trainer_state.json").read_text())["global_step"] == step
    shards = {p.name for p in (ckpt / f"global_step{step}").iterdir()}
    assert {f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt" for r in (0, 1)} <= shards
    assert {"rng_state_0.pth", "rng_state_1.pth"} <= {p.name for p in ckpt.iterdir()}
    tensors = load_file(ckpt / "adapter_model.safetensors")
    assert tensors and all(t.isfinite().all() for t in tensors.values())


@pytest.fixture(scope="module")
def resumed(killed: Killed) -> tuple[Killed, str, Path]:
    """Leave a half-written next checkpoint (as a kill during a save would), then --resume."""
    out = killed.out
    step = int(killed.last_complete.name.split("-")[1])
    partial = out / f"checkpoint-{step + SAVE}"
    if not partial.exists():
        partial.mkdir()
        data = (killed.last_complete / "adapter_model.safetensors").read_bytes()
        (partial / "adapter_model.safetensors").write_bytes(data[: len(data) // 2])
    log = _train(out, "--resume")
    return killed, log, partial


def test_resume_skips_the_half_written_checkpoint(resumed: tuple[Killed, str, Path]) -> None:
    killed, log, partial = resumed
    assert f"resuming from {killed.last_complete}" in log
    # The resumed run rewrote that step in full: every checkpoint left is complete.
    assert all(done for _, _, done in checkpoints.list_checkpoints(killed.out))
    assert (partial / checkpoints.MARKER).is_file() or not partial.exists()


def test_resume_matches_the_uninterrupted_run(
    resumed: tuple[Killed, str, Path], reference: Path
) -> None:
    killed, _, _ = resumed
    ref = json.loads((reference / "dojo_summary.json").read_text())
    got = json.loads((killed.out / "dojo_summary.json").read_text())
    assert got["resumed_from"] == str(killed.last_complete)
    assert got["steps"] == ref["steps"] == STEPS
    assert got["loss_last"] == pytest.approx(ref["loss_last"], rel=1e-5, abs=1e-6)
    # Every logged loss after the resume point, not just the last one.
    step = int(killed.last_complete.name.split("-")[1])
    ref_losses = _losses(reference / f"checkpoint-{STEPS}")
    got_losses = _losses(killed.out / f"checkpoint-{STEPS}")
    after = [s for s in ref_losses if s > step]
    assert after and [got_losses[s] for s in after] == pytest.approx(
        [ref_losses[s] for s in after], rel=1e-5, abs=1e-6
    )


# ---- a finished run's real markers ----------------------------------------------------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("markers") / "run"
    proc, log = _start(out, "--max-steps", "10", "--save-steps", "5", "--save-total-limit", "3")
    assert proc.wait(timeout=400) == 0, log.read_text(errors="replace")[-4000:]
    return out


def test_real_marker_holds_settings_and_verifies(trained: Path) -> None:
    marker = checkpoints.read_marker(trained / "checkpoint-10")
    assert {k: marker[k] for k in ("method", "zero_stage", "world_size", "precision_resolved")} == {
        "method": "lora",
        "zero_stage": 2,
        "world_size": 2,
        "precision_resolved": "fp32",
    }
    assert any("optim_states" in f for f in marker["files"])
    assert checkpoints.verify(trained / "checkpoint-10") == []
    new = {**marker, "zero_stage": 3}
    with pytest.raises(LaunchError, match="trained with --zero 2, this run asks --zero 3"):
        checkpoints.resume_point(trained, 2, new)


def test_truncated_shard_resumes_from_the_previous_checkpoint(trained: Path) -> None:
    shard = next((trained / "checkpoint-10").rglob("*optim_states.pt"))
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    proc, log = _start(trained, "--max-steps", "10", "--save-steps", "5", "--resume")
    rc = proc.wait(timeout=400)
    text = log.read_text(errors="replace")
    assert rc == 0, text[-4000:]
    assert "warning: --resume: checkpoint-10 is damaged (global_step10/" in text
    assert f"resuming from {trained.resolve() / 'checkpoint-5'}" in text
    summary = json.loads((trained / "dojo_summary.json").read_text())
    assert summary["resumed_from"] == str(trained.resolve() / "checkpoint-5")
    assert summary["steps"] == 10
    assert checkpoints.verify(trained / "checkpoint-10") == []  # rewritten whole, new marker


def _start(out: Path, *extra: str) -> tuple[subprocess.Popen[bytes], Path]:
    return start_train(out, *ARGS, *extra)
