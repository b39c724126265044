"""``--hostfile``: DeepSpeed's list of machines, read and checked before anything is launched.

DeepSpeed's runner reads one ``HOST slots=N`` line per machine, ``#`` comments and blank lines
ignored (deepspeed/launcher/runner.py, ``fetch_hostfile``/``_parse_hostfile``). It takes a missing
path or a folder as "this machine only" (a warning, then a run other than the one planned) and a
bad line as a ValueError traceback after launch. Here each is one error before launch.

Stricter than DeepSpeed where it would misread: ``slots=`` is ASCII digits 1..1024 (its ``\\d``
also takes "٣"), ``slots=4x`` is not read as 4, and a host is a host name or address (one that
starts with "-" would reach ssh and pdsh as an option).

    worker-1 slots=8
    worker-2 slots=8   # comments are fine
"""

import re
from pathlib import Path

from dojo.errors import LaunchError
from dojo.safe_load import LoadError, clip, read_text, shorten

MAX_BYTES = 1 << 20
"""1 MiB: some 40,000 ``worker-123 slots=8`` lines; real hostfiles list at most a few thousand."""
MAX_HOSTS = 4096
"""The most machines --num-nodes takes (dojo.run.groups.devices)."""
MAX_SLOTS = 1024
"""Slots (GPUs) per machine: as many as a GPU index allows (dojo.gpus.MAX_GPU_INDEX + 1)."""
_LINE = re.compile(r"(?P<host>\S+)\s+slots=(?P<slots>[0-9]+)(?:\s.*)?", re.ASCII | re.DOTALL)
# Host names (RFC 1123 and the underscores clusters use anyway), IPv4, IPv6, user@host.
_HOST = re.compile(r"[A-Za-z0-9_\[][A-Za-z0-9_.:@%\[\]-]*", re.ASCII)
_FORMAT = "one 'HOST slots=N' line per machine, e.g. 'worker-1 slots=8' ('#' starts a comment)"


def read_hostfile(path: str, flag: str = "--hostfile") -> dict[str, int]:
    """{host: slots} in file order; LaunchError naming the file, the line and the fix."""
    shown = f"{flag} {shorten(path, 300)}"  # paths are bounded by PATH_MAX anyway
    try:
        text = read_text(Path(path).expanduser(), what=shown, max_bytes=MAX_BYTES)
    except LoadError as e:
        raise LaunchError(e.message, hint=f"give a DeepSpeed hostfile: {_FORMAT}") from None
    if "\x00" in text:
        raise LaunchError(f"{shown}: is a binary file, not a hostfile", hint=f"give {_FORMAT}")
    hosts: dict[str, int] = {}
    first_line: dict[str, int] = {}
    # DeepSpeed opens it in text mode: \r\n and \r end a line too.
    for n, raw in enumerate(re.split(r"\r\n|\r|\n", text), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{shown} line {n}"
        m = _LINE.fullmatch(line)
        if m is None:
            raise LaunchError(f"{where}: {shorten(line)} is not 'HOST slots=N'", hint=_FORMAT)
        host, digits = m["host"], m["slots"]
        if not _HOST.fullmatch(host):
            raise LaunchError(
                f"{where}: {shorten(host)} is not a host name or address",
                hint="write the machine's name or IP address as ssh knows it, e.g. worker-1 or 10.0.0.2",
            )
        if len(digits) > 4 or not 1 <= int(digits) <= MAX_SLOTS:
            raise LaunchError(
                f"{where}: slots={clip(digits, 20)} is not a GPU count 1..{MAX_SLOTS}",
                hint="slots= is how many GPUs that machine uses, e.g. slots=8",
            )
        if host in hosts:
            raise LaunchError(
                f"{where}: host {shorten(host)} is listed twice (first on line {first_line[host]})",
                hint="list each machine once; DeepSpeed refuses a repeated host",
            )
        if len(hosts) >= MAX_HOSTS:
            raise LaunchError(
                f"{shown}: lists more than {MAX_HOSTS} machines", hint="is it the right file?"
            )
        hosts[host] = int(digits)
        first_line[host] = n
    if not hosts:
        raise LaunchError(f"{shown}: lists no machine", hint=f"write {_FORMAT}")
    return hosts


def check_nodes(hosts: dict[str, int], num_nodes: int, path: str) -> None:
    """--num-nodes may use fewer machines than the hostfile lists, never more: DeepSpeed would
    start on the ones listed and the run's world size would be wrong."""
    if num_nodes > len(hosts):
        raise LaunchError(
            f"--num-nodes {num_nodes}: --hostfile {shorten(path, 300)} lists {len(hosts)} "
            f"machine{'s' if len(hosts) != 1 else ''}",
            hint=f"add the machines to the hostfile, or pass --num-nodes {len(hosts)}",
        )
