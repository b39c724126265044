"""Atomic file writes that never clobber an existing file without --force."""

import os
import tempfile
from pathlib import Path

from dojo.errors import DojoError


def check_writable(path: str | Path, *, force: bool, flag: str = "-o") -> Path:
    """Refuse before any work is done: existing file without force, missing folder, a folder."""
    p = Path(path)
    if p.is_dir():
        raise DojoError(f"{flag} {str(path)!r} is a folder", hint=f"give a file path to {flag}")
    if p.exists() and not force:
        raise DojoError(
            f"{flag} {str(path)!r} already exists",
            hint="pass --force to replace it, or choose another path",
        )
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise DojoError(
            f"{flag} {str(path)!r}: folder {str(parent)!r} does not exist",
            hint=f"create it first: mkdir -p {parent}",
        )
    if not os.access(parent, os.W_OK):
        raise DojoError(f"{flag} {str(path)!r}: folder {str(parent)!r} is not writable")
    return p


def write_text_atomic(path: str | Path, text: str, *, force: bool, flag: str = "-o") -> Path:
    """Write to a temporary file beside ``path``, then rename: readers never see half a file."""
    p = check_writable(path, force=force, flag=flag)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p
