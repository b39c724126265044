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


def test_all_done_needs_every_rank_of_the_world(tmp_path) -> None:
    """A non-zero launcher exit after every rank wrote "done" is a teardown crash, not a failure."""
    rank_status.write(tmp_path, 0, "done")
    assert not rank_status.all_done(tmp_path, 2)  # rank 1 never said (another node, or died)
    rank_status.write(tmp_path, 1, "running")
    assert not rank_status.all_done(tmp_path, 2)
    rank_status.write(tmp_path, 1, "done")
    assert rank_status.all_done(tmp_path, 2)
    assert not rank_status.all_done(tmp_path, 4)


def test_a_teardown_crash_after_every_rank_is_done_is_a_finished_run(
    cli, tmp_path, monkeypatch
) -> None:
    """The launcher's exit code after all ranks said "done" is a warning; before that, a failure."""
    import dojo.train.driver

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    done = [0, 1]

    def fake_run(cmd, env=None, cwd=None) -> int:
        for r in done:
            rank_status.write(out, r, "done")
        return 250  # "terminate called without an active exception" at exit (seen in CI)

    monkeypatch.setattr(dojo.train.driver.launch, "run", fake_run)
    monkeypatch.setattr(dojo.train.driver, "_prepare_model", lambda p, d: ("tiny", "tiny"))
    r = cli("train", "--nproc", "2", "--output-dir", str(out))
    assert r.exit_code == 0, r.stderr
    assert "warning: every rank finished" in r.stderr and "exited with code 250" in r.stderr
    assert "error:" not in r.stderr
    done[:] = [0]  # rank 1 never finished: a real failure
    r = cli("train", "--nproc", "2", "--output-dir", str(out), "--force")
    assert r.exit_code != 0 and "training failed (launcher exit code 250)" in r.stderr
