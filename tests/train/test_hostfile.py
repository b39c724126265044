"""dojo.train.hostfile: --hostfile read and checked before anything is launched.

A missing, folder or garbage hostfile used to pass --dry-run; without it, DeepSpeed's runner
took a missing one for "this machine only" and a bad line for a traceback after launch.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dojo.errors import LaunchError
from dojo.train import launch, preflight
from dojo.train.hostfile import MAX_HOSTS, read_hostfile
from dojo.train.launch import Devices
from tests.helpers.runs import run_of, values

EXAMPLES = int(os.environ.get("DOJO_FUZZ_EXAMPLES", "300"))


def test_good_hostfile(tmp_path: Path) -> None:
    p = tmp_path / "hosts"
    p.write_text(
        "# cluster\nworker-1 slots=8\r\n\n  10.0.0.2   slots=4   # spare\nuser@[fe80::1] slots=1\n"
    )
    assert read_hostfile(str(p)) == {"worker-1": 8, "10.0.0.2": 4, "user@[fe80::1]": 1}


def _write(tmp_path: Path, name: str, data: bytes) -> str:
    (tmp_path / name).write_bytes(data)
    return str(tmp_path / name)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"", "lists no machine"),
        (b"# only a comment\n\n", "lists no machine"),
        (b"garbage!!\n", "line 1: 'garbage!!' is not 'HOST slots=N'"),
        (b"worker-1\n", "is not 'HOST slots=N'"),
        (b"worker-1 slots=\n", "is not 'HOST slots=N'"),
        (b"worker-1 slots=4x\n", "is not 'HOST slots=N'"),
        ("worker-1 slots=٣\n".encode(), "is not 'HOST slots=N'"),
        (b"worker-1 slots=0\n", "slots=0 is not a GPU count 1..1024"),
        (b"worker-1 slots=99999999999999999999\n", "is not a GPU count"),
        (b"-oProxyCommand=touch_pwned slots=1\n", "is not a host name or address"),
        (
            b"a slots=1\nb slots=1\na slots=2\n",
            "line 3: host 'a' is listed twice (first on line 1)",
        ),
        ("w slots=1\n".encode("utf-16"), "(byte 0xff on line 1; it is UTF-16)"),
        (b"w slots=1\x00\n", "is a binary file"),
        (b"w slots=1 \xe9\n", "is not UTF-8 text"),
        (
            "".join(f"h{i} slots=1\n" for i in range(MAX_HOSTS + 1)).encode(),
            "more than 4096 machines",
        ),
    ],
    ids=lambda x: x[:30] if isinstance(x, str) else None,
)
def test_bad_contents(content: bytes, needle: str, tmp_path: Path) -> None:
    path = _write(tmp_path, "hosts", content)
    with pytest.raises(LaunchError) as e:
        read_hostfile(path)
    assert needle in e.value.message and e.value.message.startswith("--hostfile ")
    assert e.value.hint and len(e.value.message) < 300


def test_not_regular_files(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    os.symlink("/dev/zero", tmp_path / "zero")
    with open(tmp_path / "sparse", "wb") as f:
        f.truncate(2 << 20)
    for name, needle in [
        ("missing", "no such file"),
        (".", "is a folder, not a regular file"),
        ("fifo", "is a FIFO (named pipe), not a regular file"),
        ("zero", "is a character device, not a regular file"),
        ("sparse", "is 2,097,152 bytes; more than 1,048,576"),
    ]:
        start = time.monotonic()
        with pytest.raises(LaunchError, match="^--hostfile ") as e:
            read_hostfile(str(tmp_path / name))
        assert needle in e.value.message and time.monotonic() - start < 5


def test_num_nodes_against_the_hostfile(tmp_path: Path) -> None:
    hosts = _write(tmp_path, "hosts", b"a slots=2\nb slots=2\n")
    with pytest.raises(LaunchError, match="--num-nodes 3: --hostfile .* lists 2 machines"):
        preflight.place(values(hostfile=hosts, num_nodes=3).devices, [], dry_run=True)
    _, devices, notes = preflight.place(values(hostfile=hosts).devices, [], dry_run=True)
    assert devices.kind == "cuda" and notes == [
        "note: --hostfile lists 2 machines; this run uses the first 1 (--num-nodes 1)"
    ]
    assert preflight.place(values(hostfile=hosts, num_nodes=2).devices, [], dry_run=True)[2] == []


def test_cuda_visible_devices_with_a_hostfile_is_said_unused(tmp_path: Path) -> None:
    """The runner sets each machine's CUDA_VISIBLE_DEVICES from the hostfile's slots."""
    hosts = _write(tmp_path, "hosts", b"a slots=2\nb slots=2\n")
    opts = values(hostfile=hosts, num_nodes=2).devices
    notes = preflight.place(opts, [], dry_run=True, visible="1")[2]
    assert notes == [
        "warning: CUDA_VISIBLE_DEVICES=1 is not used: the hostfile's slots= pick the GPUs on each "
        "machine"
    ]


def test_launch_names_the_machine_count() -> None:
    # Without --num_nodes the runner starts on every machine listed, whatever the plan.
    argv = launch.build_command(run_of(hostfile="h"), "/r", Devices("cuda", ()), 29500, python="py")
    assert argv[3:7] == ["--hostfile", "h", "--num_nodes", "1"]


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    import dojo.gpus

    monkeypatch.setattr(dojo.gpus, "list_gpus", lambda: [])
    monkeypatch.setattr(launch, "run", _no_launch)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "garbage").write_text("garbage!!\n")
    (tmp_path / "folder").mkdir()
    return tmp_path


def _no_launch(*_a: object, **_k: object) -> int:
    raise AssertionError("a bad hostfile reached the launch")


@pytest.mark.parametrize("hostfile", ["missing", "folder", "garbage"])
@pytest.mark.parametrize("dry_run", [True, False])
def test_cli_refuses_before_launch(hostfile: str, dry_run: bool, workdir: Path, cli) -> None:
    before = sorted(p.name for p in workdir.iterdir())
    r = cli(
        "train", "--hostfile", hostfile, "--output-dir", "out", *(["--dry-run"] if dry_run else [])
    )
    lines = r.stderr.splitlines()
    assert r.exit_code == 1 and lines[0].startswith(f"error: --hostfile '{hostfile}'"), r.stderr
    assert lines[1].startswith("hint: ") and len(lines) == 2
    assert sorted(p.name for p in workdir.iterdir()) == before


@pytest.mark.slow
def test_real_cli_refuses_a_garbage_hostfile_without_launching(tmp_path: Path) -> None:
    """The issue's case end to end: no --dry-run, the real launcher on PATH, nothing mocked."""
    (tmp_path / "hosts").write_text("garbage!!\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    env.pop("DOJO_DEBUG", None)
    start = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "dojo", "train", "--hostfile", "hosts", "--output-dir", "out"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith(
        "error: --hostfile 'hosts' line 1: 'garbage!!' is not 'HOST slots=N'"
    )
    assert "Traceback" not in r.stderr and "launch:" not in r.stderr
    assert not (tmp_path / "out").exists() and time.monotonic() - start < 60


# ---------------------------------------------------------------- property: what DeepSpeed reads

_LINE = st.one_of(
    st.text(max_size=30),
    st.builds(
        lambda h, sep, n, tail: f"{h}{sep}slots={n}{tail}",
        st.sampled_from(["w1", "w2", "10.0.0.1", "-x", "a;b", "h\u00e9", "#c", ""]),
        st.sampled_from([" ", "\t", "  ", ""]),
        st.sampled_from(["1", "8", "0", "٣", "4x", "", "1024", "1025"]),
        st.sampled_from(["", " # c", " extra", "\r"]),
    ),
)


@pytest.fixture(scope="module")
def deepspeed_parse():
    """DeepSpeed's own hostfile parser; None without DeepSpeed (then only dojo's side is checked)."""
    try:
        from deepspeed.launcher.runner import _parse_hostfile
    except ImportError:
        return None
    return _parse_hostfile


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(lines=st.lists(_LINE, max_size=6))
def test_any_hostfile_is_read_as_deepspeed_reads_it_or_refused(
    lines: list[str], tmp_path: Path, deepspeed_parse
) -> None:
    text = "\n".join(lines)
    path = tmp_path / "hosts"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    try:
        hosts = read_hostfile(str(path))
    except LaunchError as e:
        assert e.message.startswith("--hostfile ") and len(e.message) < 300 and e.hint
        return
    assert hosts and all(1 <= n <= 1024 for n in hosts.values())
    if deepspeed_parse is not None:
        assert dict(deepspeed_parse(text.splitlines(keepends=True))) == hosts
