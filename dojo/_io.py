"""Atomic file writes that never clobber an existing file without --force.

Only a regular file is ever replaced: a symlink (even a dangling one), a FIFO, a device or a
socket at the target is refused with or without --force, because os.replace would swap out the
link itself or writing would block on the pipe. New files get 0o666 & ~umask like any shell
redirect (mkstemp's 0600 is for the temporary name only); a replaced file keeps its mode.
"""

import errno
import os
import stat
import tempfile
from pathlib import Path

from dojo.errors import DojoError
from dojo.safe_load import shorten


def _shown(flag: str, path: str | Path) -> str:
    return f"{flag} {shorten(str(path), 300)}"  # paths are bounded by PATH_MAX anyway


_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def file_kind(mode: int) -> str | None:
    """What a file that is not regular is, in words ("a FIFO (named pipe)", "a character
    device", ...); None for a regular file. One wording for every command's messages."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def check_writable(path: str | Path, *, force: bool, flag: str = "-o") -> Path:
    """Refuse before any work is done: existing file without force, missing folder, a folder,
    anything that is not a regular file."""
    p = Path(path)
    shown = _shown(flag, path)
    try:
        st: os.stat_result | None = os.lstat(p)  # lstat: a link is judged, not its target
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise DojoError(
            f"{shown}: cannot use it ({e.strerror})", hint="choose another path"
        ) from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise DojoError(f"{shown} is a folder", hint=f"give a file path to {flag}")
        kind = file_kind(st.st_mode)
        if kind == "a symbolic link":
            target = os.readlink(p)
            raise DojoError(
                f"{shown} is a symbolic link (to {shorten(target, 200)}); dojo does not replace links",
                hint="write to the link's target directly, or remove the link first",
            )
        if kind is not None:
            raise DojoError(
                f"{shown} is {kind}, not a regular file; --force only replaces files",
                hint="choose a regular file path",
            )
        if not force:
            raise DojoError(
                f"{shown} already exists", hint="pass --force to replace it, or choose another path"
            )
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise DojoError(
            f"{shown}: folder {shorten(str(parent), 300)} does not exist",
            hint=f"create it first: mkdir -p {parent}",
        )
    if not os.access(parent, os.W_OK):
        raise DojoError(
            f"{shown}: folder {shorten(str(parent), 300)} is not writable",
            hint="write it into a folder you can write to, or fix that folder's permissions",
        )
    return p


def _umask() -> int:
    try:  # Linux >= 4.7 reports it without changing it (os.umask() would, racily)
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text_atomic(path: str | Path, text: str, *, force: bool, flag: str = "-o") -> Path:
    """Write to a temporary file beside ``path``, then rename: readers never see half a file.
    The temporary file is removed on any failure, Ctrl-C included."""
    p = check_writable(path, force=force, flag=flag)
    try:
        mode = stat.S_IMODE(os.stat(p).st_mode)  # replacing (force): keep the file's mode
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    shown = _shown(flag, path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent or ".")
    except OSError as e:
        raise _cannot(shown, e) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        _publish(tmp, p, force=force, shown=shown)
    except OSError as e:  # ENOSPC, EIO, EDQUOT...
        Path(tmp).unlink(missing_ok=True)
        raise _cannot(shown, e) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p


def _cannot(shown: str, e: OSError) -> DojoError:
    return DojoError(
        f"{shown}: cannot write it ({e.strerror or e})", hint="check free space and permissions"
    )


def _publish(tmp: str, p: Path, *, force: bool, shown: str) -> None:
    if force:
        os.replace(tmp, p)
        return
    # Without --force a file that appeared since the check must survive: link() fails if the
    # name exists, where replace() would clobber it.
    try:
        os.link(tmp, p)
    except FileExistsError:
        raise DojoError(
            f"{shown} already exists (it appeared while writing)",
            hint="pass --force to replace it, or choose another path",
        ) from None
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
            raise
        os.replace(tmp, p)  # a filesystem without hard links: best effort
        return
    os.unlink(tmp)
