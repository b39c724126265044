"""dojo._io (`config -o`): atomic writes under hostile conditions: umask, failures in the middle
of a write, a file appearing during the write, symlinks, FIFOs and sockets at the target."""

import os
import stat
from pathlib import Path

import pytest

from dojo import _io
from dojo.errors import DojoError


def _listing(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


@pytest.mark.parametrize(
    ("mask", "mode"), [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664), (0o077, 0o600)]
)
def test_new_file_honours_umask(tmp_path: Path, mask: int, mode: int) -> None:
    old = os.umask(mask)
    try:
        _io.write_text_atomic(tmp_path / "ds.json", "{}\n", force=False)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "ds.json").stat().st_mode) == mode


def test_replaced_file_keeps_its_mode(tmp_path: Path) -> None:
    p = tmp_path / "ds.json"
    p.write_text("old")
    p.chmod(0o640)
    _io.write_text_atomic(p, "new", force=True)
    assert p.read_text() == "new" and stat.S_IMODE(p.stat().st_mode) == 0o640
    assert _listing(tmp_path) == ["ds.json"]


@pytest.mark.parametrize("fail", [OSError(28, "No space left on device"), KeyboardInterrupt()])
def test_failure_mid_write_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail: BaseException
) -> None:
    def boom(_fd: int) -> None:
        raise fail

    monkeypatch.setattr(_io.os, "fsync", boom)
    expected = DojoError if isinstance(fail, OSError) else KeyboardInterrupt
    with pytest.raises(expected) as e:
        _io.write_text_atomic(tmp_path / "ds.json", "{}\n", force=False)
    if isinstance(e.value, DojoError):
        assert "cannot write it (No space left on device)" in e.value.message
    assert _listing(tmp_path) == []  # no ds.json, no .ds.json.*.tmp


def test_file_appearing_during_write_is_not_clobbered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "ds.json"
    real_fsync = os.fsync

    def racer(fd: int) -> None:
        real_fsync(fd)
        target.write_text("someone else's")

    monkeypatch.setattr(_io.os, "fsync", racer)
    with pytest.raises(DojoError, match="appeared while writing"):
        _io.write_text_atomic(target, "{}\n", force=False)
    assert target.read_text() == "someone else's"
    assert _listing(tmp_path) == ["ds.json"]


def test_symlinks_are_judged_themselves(tmp_path: Path) -> None:
    (tmp_path / "folder").mkdir()
    os.symlink("folder", tmp_path / "to_folder")
    os.symlink(tmp_path / "missing" / "x", tmp_path / "to_missing")
    for name in ("to_folder", "to_missing"):
        for force in (False, True):
            with pytest.raises(DojoError, match="is a symbolic link"):
                _io.check_writable(tmp_path / name, force=force)
    assert os.path.islink(tmp_path / "to_missing")


def test_socket_refused(tmp_path: Path) -> None:
    import socket

    path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        with pytest.raises(DojoError, match="is a socket, not a regular file"):
            _io.check_writable(path, force=True)


def test_unwritable_folder_names_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """os.access is faked: the tests may run as root, for whom every folder is writable."""
    real = os.access
    monkeypatch.setattr(_io.os, "access", lambda p, m: False if Path(p) == tmp_path else real(p, m))
    with pytest.raises(DojoError) as e:
        _io.check_writable(tmp_path / "ds.json", force=False, flag="--output")
    assert e.value.message.endswith("is not writable")
    assert e.value.hint == (
        "write it into a folder you can write to, or fix that folder's permissions"
    )
