"""dojo.train.driver: a CPU run's first lines talk about CPU processes, never GPUs."""

from pathlib import Path
from unittest.mock import patch

import pytest

from dojo.gpus import Gpu

H200 = [Gpu(0, "NVIDIA H200", 139.8), Gpu(1, "NVIDIA H200", 139.8)]


def _header(stderr: str) -> str:
    return next(line for line in stderr.splitlines() if line.startswith("dojo train: "))


@pytest.mark.parametrize("nproc, where", [("1", "1 CPU process,"), ("2", "2 CPU processes,")])
def test_cpu_header_names_no_gpu(cli, tmp_path: Path, nproc: str, where: str) -> None:
    with patch("dojo.gpus.list_gpus", return_value=[]):
        r = cli("train", "--nproc", nproc, "--method", "lora", "--zero", "3",
                "-o", str(tmp_path / "o"), "--dry-run")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    head = _header(r.stderr)
    assert where in head and "GPU" not in head, head
    # ZeRO-3 on one process: the advice speaks of that process, not of a GPU.
    before_launch = r.stderr.split("run files:")[0]
    assert "GPU" not in before_launch.replace("pip install -e '.[gpu]' in dojo's clone", ""), (
        before_launch
    )
    if nproc == "1":
        assert "ZeRO-3 on one CPU process shards nothing" in before_launch


def test_gpu_header_keeps_the_per_gpu_estimate(cli, tmp_path: Path) -> None:
    with patch("dojo.gpus.list_gpus", return_value=H200):
        r = cli("train", "--gpus", "0,1", "-o", str(tmp_path / "o"), "--dry-run")
    assert r.exit_code == 0, r.stderr
    head = _header(r.stderr)
    assert "GPUs 0,1" in head and "GiB per GPU" in head, head


def test_failure_hint_offers_resume_only_with_a_complete_checkpoint(tmp_path: Path) -> None:
    from dojo.train.checkpoints import MARKER
    from dojo.train.driver import failure_hint

    assert failure_hint(tmp_path) == "see the rank output above"
    (tmp_path / "checkpoint-1").mkdir()  # half-written: no marker
    assert "--resume" not in failure_hint(tmp_path)
    (tmp_path / "checkpoint-1" / MARKER).write_text("{}")
    assert failure_hint(tmp_path) == (
        f"see the rank output above; complete checkpoints in {tmp_path} can be continued with "
        "--resume"
    )
