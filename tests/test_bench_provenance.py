"""bench/provenance.py: a GPU call records the code it ran, not an older copy of .git's HEAD."""

import importlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture
def provenance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    sys.path.insert(0, str(BENCH))
    try:
        mod = importlib.import_module("provenance")
        repo = tmp_path / "repo"
        repo.mkdir()
        git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
        subprocess.run([*git, "init", "-q"], check=True)
        (repo / "a.py").write_text("x = 1\n")
        subprocess.run([*git, "add", "a.py"], check=True)
        subprocess.run([*git, "commit", "-qm", "one"], check=True)
        monkeypatch.setattr(mod, "REPO", repo)
        monkeypatch.delenv("BENCH_COMMIT", raising=False)
        yield mod
    finally:
        sys.path.remove(str(BENCH))


def test_a_tree_that_differs_from_head_is_marked(provenance: object) -> None:
    head = provenance.git_commit()  # type: ignore[attr-defined]
    assert head and "+" not in head
    (provenance.REPO / "a.py").write_text("x = 2\n")  # type: ignore[attr-defined]
    assert provenance.git_commit() == f"{head}+changes"  # type: ignore[attr-defined]
    (provenance.REPO / "new.py").write_text("")  # type: ignore[attr-defined]
    assert provenance.git_commit() == f"{head}+changes"  # type: ignore[attr-defined]


def test_the_commit_the_command_names_wins(
    provenance: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BENCH_COMMIT", "f3ecb7e")
    (provenance.REPO / "a.py").write_text("x = 2\n")  # type: ignore[attr-defined]
    assert provenance.git_commit() == "f3ecb7e"  # type: ignore[attr-defined]
