"""Reading the files ``dojo chat-template`` is given, saying the true thing when they are odd.

``Path.is_file()`` answers False for a symlink loop, a FIFO, /dev/null and a permission error
alike, and ``read_text`` blocks forever on a FIFO nobody writes to, reads /dev/zero until memory
runs out, and raises UnicodeDecodeError on a Latin-1 file. Here every case has its own sentence:
"is a symlink loop", "is a FIFO, not a regular file", "is not UTF-8 text (byte 0xe9 at 17)".
"""

import errno
import os
import stat
from pathlib import Path

from dojo._io import file_kind
from dojo.errors import DojoError
from dojo.safe_load import shorten, wide_encoding, wide_hint

MAX_FILE_BYTES = 64 * 2**20
"""Largest messages/tools/template file read (a 1M-token conversation is ~4 MB of JSON)."""


def kind_of(mode: int) -> str:
    """'a FIFO (named pipe)', 'a character device', ... for a file that is not regular."""
    return file_kind(mode) or "a regular file"


def stat_path(path: Path, flag: str, error: type[DojoError]) -> os.stat_result | None:
    """``os.stat`` of ``path``; None when nothing is there; ``error`` for every other failure."""
    try:
        return os.stat(path)
    except OSError as e:
        if e.errno == errno.ENOENT and not os.path.lexists(path):
            return None
        raise error(f"{flag} {shorten(str(path), 200)} {_why(e, path)}", hint=_HINT) from e
    except ValueError as e:  # an embedded NUL byte in the path
        raise error(f"{flag} {shorten(str(path), 200)} is not a valid path: {e}", hint=_HINT) from e


_HINT = "give the path of a readable regular file"


def _why(e: OSError, path: Path) -> str:
    if e.errno == errno.ELOOP:
        return "is a symlink loop (a link that leads back to itself)"
    if e.errno == errno.ENOENT:
        try:
            return (
                f"is a broken symlink (to {shorten(os.readlink(path), 200)}, which does not exist)"
            )
        except OSError:
            return "does not exist"
    if e.errno in (errno.EACCES, errno.EPERM):
        return "cannot be read: permission denied"
    if e.errno == errno.ENOTDIR:
        return "is not a path to a file (a part of it is a file, not a folder)"
    if e.errno == errno.ENAMETOOLONG:
        return "is a name too long for this file system"
    return f"cannot be read: {e.strerror or e}"


def read_text(
    path: Path,
    flag: str,
    error: type[DojoError],
    *,
    regular_only: bool,
    what: str,
    noun: str,
) -> str:
    """The UTF-8 text of ``path``, never blocking on a FIFO without a writer, never past
    MAX_FILE_BYTES. ``regular_only`` refuses FIFOs and devices (templates); messages may come
    from a pipe (``--messages <(jq ... )``). ``what`` names the file to give in hints, ``noun``
    what a binary file is not ("JSON", "a chat template")."""
    st = stat_path(path, flag, error)
    if st is None:
        raise error(
            f"{flag} {shorten(str(path), 200)} cannot be read: no such file", hint=f"give {what}"
        )
    if stat.S_ISDIR(st.st_mode):
        raise error(
            f"{flag} {shorten(str(path), 200)} cannot be read: it is a directory, not a file",
            hint=f"give {what}",
        )
    if regular_only and not stat.S_ISREG(st.st_mode):
        raise error(
            f"{flag} {shorten(str(path), 200)} is {kind_of(st.st_mode)}, not a regular file",
            hint=f"give {what} (save a pipe's output to a file first)",
        )
    data = _read_bytes(path, flag, error)
    wide = wide_encoding(data)
    if wide is not None:  # its NUL bytes would otherwise call it binary
        raise error(
            f"{flag} {shorten(str(path), 200)} is {wide} text, not UTF-8", hint=wide_hint(wide)
        )
    if b"\x00" in data:  # a NUL byte means binary (git's and grep's rule)
        raise error(
            f"{flag} {shorten(str(path), 200)} is a binary file, not {noun}", hint=f"give {what}"
        )
    return decode(data, f"{flag} {shorten(str(path), 200)}", error)


def _read_bytes(path: Path, flag: str, error: type[DojoError]) -> bytes:
    # O_NONBLOCK: opening a FIFO for reading blocks until a writer comes; with it, open returns
    # at once and, blocking again, read() gives EOF when no writer is there (no hang).
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise error(f"{flag} {shorten(str(path), 200)} {_why(e, path)}", hint=_HINT) from e
    try:
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        chunks, size = [], 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            if b"\x00" in chunk:  # /dev/zero, /dev/urandom: say so before reading 64 MiB
                return chunk
            size += len(chunk)
            if size > MAX_FILE_BYTES:
                raise error(
                    f"{flag} {shorten(str(path), 200)} is larger than {MAX_FILE_BYTES >> 20} MiB",
                    hint="one conversation or template is far smaller; is it the right file?",
                )
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as e:
        raise error(f"{flag} {shorten(str(path), 200)} {_why(e, path)}", hint=_HINT) from e
    finally:
        os.close(fd)


def decode(data: bytes, label: str, error: type[DojoError]) -> str:
    """UTF-8 text, or ``error`` naming the first bad byte and how to convert the file."""
    wide = wide_encoding(data)
    if wide is not None:
        raise error(f"{label} is {wide} text, not UTF-8", hint=wide_hint(wide))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        bad = data[e.start : e.start + 1].hex()
        raise error(
            f"{label} is not UTF-8 text (byte 0x{bad} at offset {e.start})",
            hint="save it as UTF-8, e.g. iconv -f latin1 -t utf-8 FILE > FILE.utf8",
        ) from e
