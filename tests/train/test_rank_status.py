"""Naming the rank that died, from the per-rank state files (pure, no launcher)."""

from dojo.train import rank_status


def test_killed_rank_is_the_one_still_running(tmp_path) -> None:
    rank_status.write(tmp_path, 0, "running")
    rank_status.write(tmp_path, 1, "stopped", signal=15)
    lines = rank_status.describe_failure(tmp_path)
    assert len(lines) == 1 and lines[0].startswith("rank 0 (pid ")
    assert "died without exiting" in lines[0]


def test_failed_rank_reports_its_error_and_clean_ranks_are_silent(tmp_path) -> None:
    rank_status.write(tmp_path, 0, "done")
    rank_status.write(tmp_path, 1, "failed: RuntimeError: boom")
    assert rank_status.describe_failure(tmp_path)[0].endswith("failed: RuntimeError: boom")
    rank_status.clear(tmp_path)
    assert rank_status.read(tmp_path) == []
