"""dojo.train.launch: the training launch is an argument list, never a shell line. Hostile paths
stay single argv items from `dojo train` to Popen, and no dojo module runs a shell or unpickles."""

import dataclasses
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from dojo.train import launch
from dojo.train.launch import Devices
from tests.helpers.runs import run_of

MSGS = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]

EVIL = "/tmp/dojo sec/$(touch PWNED); rm -rf ~ `id` && echo 'x'"


def test_build_command_keeps_hostile_strings_as_single_items() -> None:
    cfg = run_of(hostfile=EVIL + "/hosts", num_nodes=2, master_addr="10.0.0.1")
    # The resolver refuses such an address; the launcher must keep it one item all the same.
    cfg = dataclasses.replace(
        cfg, devices=dataclasses.replace(cfg.devices, master_addr="10.0.0.1; reboot")
    )
    argv = launch.build_command(cfg, EVIL, Devices("cuda", ()), 29500, python="/usr/bin/python3")
    assert isinstance(argv, list) and all(isinstance(a, str) for a in argv)
    assert EVIL + "/hosts" in argv and "10.0.0.1; reboot" in argv
    assert argv[argv.index("--config") + 1] == EVIL + "/train.json"
    assert shlex.split(launch.format_command(argv)) == argv  # display round-trips exactly


def test_run_never_uses_a_shell(tmp_path: Path) -> None:
    """launch.run executes the list as is: $(...), ; and spaces reach the child verbatim."""
    target = tmp_path / "a b; touch PWNED $(touch PWNED2)"
    script = "import sys, pathlib; pathlib.Path(sys.argv[1]).write_text(sys.argv[1])"
    rc = launch.run([sys.executable, "-c", script, str(target)], cwd=str(tmp_path))
    assert rc == 0
    assert target.read_text() == str(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]  # nothing else ran


def test_cli_train_argv_with_hostile_paths(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through `dojo train`: the output folder and data path with $(...), ; and spaces stay
    single argv items and single JSON strings, and no shell ever runs them."""
    import dojo.train.driver

    monkeypatch.chdir(tmp_path)
    data = tmp_path / "chats $(touch PWNED); x.jsonl"
    data.write_text(json.dumps({"messages": MSGS}) + "\n")
    out = tmp_path / "run dir; $(touch PWNED) `touch PWNED2`"
    seen: list[list[str]] = []

    def fake_run(cmd: list[str], env: dict[str, str] | None = None, cwd: str | None = None) -> int:
        seen.append(cmd)
        return 0

    monkeypatch.setattr(dojo.train.driver.launch, "run", fake_run)
    monkeypatch.setattr(dojo.train.driver, "_prepare_model", lambda p, d: ("tiny", "tiny"))
    r = cli("train", "--nproc", "2", "--data", str(data), "--output-dir", str(out))
    assert r.exit_code == 0, r.stderr
    (argv,) = seen
    assert argv[argv.index("--config") + 1] == str(out / "train.json")
    record = json.loads((out / "train.json").read_text())
    assert record["paths"]["data"] == [str(data)] and record["paths"]["run_dir"] == str(out)
    assert not list(tmp_path.glob("PWNED*")) and not list(Path.cwd().glob("PWNED*"))
    launched = r.stderr.split("launch: ", 1)[1].splitlines()[0]
    assert shlex.split(launched)[-len(argv) :] == argv  # the printed line is the exact argv


def test_no_shell_true_and_no_pickle_in_dojo() -> None:
    """Guards for reviewers: subprocesses take lists, and nothing unpickles user files."""
    root = Path(__file__).resolve().parents[2] / "dojo"
    for path in root.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for banned in ("shell=True", "os.system(", "os.popen(", "pickle.load", "torch.load("):
            assert banned not in text, f"{path.name} uses {banned}"


def test_subprocess_list_form_is_what_popen_gets(monkeypatch: pytest.MonkeyPatch) -> None:
    captured: dict[str, object] = {}

    class FakePopen:
        def __init__(self, cmd: object, **kw: object) -> None:
            captured["cmd"], captured["kw"] = cmd, kw
            self.pid = 999_999_999  # no such process group: the reaper finds nothing

        def wait(self, timeout: float | None = None) -> int:
            return 0

    monkeypatch.setattr(subprocess, "Popen", FakePopen)
    assert launch.run(["python", EVIL]) == 0
    cmd = captured["cmd"]
    assert isinstance(cmd, list) and cmd[1:3] == ["-m", launch.SUPERVISOR]
    assert cmd[cmd.index("--") + 1 :] == ["python", EVIL]  # the supervisor Popen()s exactly this
    assert not captured["kw"].get("shell")  # type: ignore[attr-defined]
