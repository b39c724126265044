"""`dojo train --trust-remote-code`: off by default, loud when on, never a preset's default."""

import json
from pathlib import Path

from tests.helpers.runs import run_of


def test_trust_remote_code_is_off_by_default(cli, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert run_of().model.trust_remote_code is False
    r = cli("train", "--nproc", "1", "--dry-run")
    assert r.exit_code == 0, r.stderr
    record = json.loads((tmp_path / "runs/dojo/train.json").read_text())["run"]
    assert record["model"]["trust_remote_code"] is False
    assert "trust-remote-code" not in r.stderr


def test_trust_remote_code_on_says_so(cli, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    r = cli("train", "--nproc", "1", "--dry-run", "--trust-remote-code")
    assert r.exit_code == 0, r.stderr
    record = json.loads((tmp_path / "runs/dojo/train.json").read_text())["run"]
    assert record["model"]["trust_remote_code"] is True
    assert "warning: --trust-remote-code is ON" in r.stderr


def test_trust_remote_code_is_not_a_silent_yaml_default(tmp_path: Path) -> None:
    """The shipped presets never turn it on."""
    from dojo.paths import templates_dir

    for preset in (templates_dir() / "train").glob("*.yaml"):
        assert "trust_remote_code: true" not in preset.read_text().lower(), preset.name
