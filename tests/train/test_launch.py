"""The launcher's argument list, its environment, and process-group handling (Ctrl-C, no orphans)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dojo.errors import ConfigError, LaunchError, MissingExtraError
from dojo.gpus import Gpu
from dojo.modelspec import resolve_model
from dojo.run.run import Run
from dojo.train import checkpoints, launch, preflight
from dojo.train.launch import Devices
from tests.helpers.procs import FAKE_LAUNCHER as _FAKE
from tests.helpers.procs import WRAP as _WRAP
from tests.helpers.procs import alive as _alive
from tests.helpers.runs import CUDA, run_of, values

PY = "/usr/bin/python3"
H200 = [Gpu(i, "NVIDIA H200", 139.8) for i in range(4)]


def cmd(cfg: Run, devices: Devices, port: int = 29555) -> list[str]:
    return launch.build_command(cfg, "/runs/a b", devices, port, python=PY)


def test_gpus_become_include() -> None:
    assert cmd(run_of(), Devices("cuda", (1, 3))) == [
        PY, "-m", "deepspeed.launcher.runner",
        "--include", "localhost:1,3",
        "--master_port", "29555",
        "--module", "dojo.train.worker",
        "--config", "/runs/a b/train.json",
    ]  # fmt: skip


def test_cpu_processes_use_include_and_cpu_accelerator() -> None:
    devices = Devices("cpu", (0, 1))
    argv = cmd(run_of(nproc=2), devices)
    assert argv[3:5] == ["--include", "localhost:0,1"]
    env = launch.launch_env(devices, base={"PATH": "/bin"})
    assert env["DS_ACCELERATOR"] == "cpu" and env["LOCAL_SIZE"] == "2"
    assert env["OMP_NUM_THREADS"] == str(max(1, (os.cpu_count() or 1) // 2))
    assert "DS_ACCELERATOR" not in launch.launch_env(Devices("cuda", (0,)), base={})


def test_cpu_ranks_see_no_gpu() -> None:
    # DeepSpeed's CPU accelerator hands each rank CUDA_VISIBLE_DEVICES=<slot>: on a GPU machine
    # an --nproc rank saw a GPU, set up NCCL and failed to broadcast its CPU weights.
    from dojo.train.worker import hide_gpus_on_cpu_runs

    rank_env = {"DS_ACCELERATOR": "cpu", "CUDA_VISIBLE_DEVICES": "0"}
    hide_gpus_on_cpu_runs(rank_env)
    assert rank_env["CUDA_VISIBLE_DEVICES"] == ""
    gpu_rank = {"CUDA_VISIBLE_DEVICES": "1"}
    hide_gpus_on_cpu_runs(gpu_rank)
    assert gpu_rank == {"CUDA_VISIBLE_DEVICES": "1"}


def test_ranks_find_the_tools_next_to_this_interpreter() -> None:
    # ninja (DeepSpeed's op builds) comes with the train extra into the interpreter's bin folder.
    bindir = os.path.dirname(sys.executable)
    for kind in ("cpu", "cuda"):
        env = launch.launch_env(Devices(kind, (0,)), base={"PATH": "/usr/bin:/bin"})
        assert env["PATH"] == f"{bindir}:/usr/bin:/bin"
    assert launch.launch_env(Devices("cpu", (0,)), base={})["PATH"] == bindir
    already = f"/bin:{bindir}"
    assert launch.launch_env(Devices("cpu", (0,)), base={"PATH": already})["PATH"] == already


def test_hostfile_multinode() -> None:
    cfg = run_of(hostfile="/etc/hosts file", num_nodes=2, master_addr="10.0.0.1")
    argv = cmd(cfg, Devices("cuda", ()))
    assert argv[3:] == [
        "--hostfile", "/etc/hosts file", "--num_nodes", "2", "--master_addr", "10.0.0.1",
        "--master_port", "29555", "--module", "dojo.train.worker", "--config", "/runs/a b/train.json",
    ]  # fmt: skip
    assert "--include" not in argv


def test_hostile_strings_stay_single_items() -> None:
    evil = "/tmp/$(touch pwned); rm -rf ~"
    argv = launch.build_command(run_of(), evil, Devices("cuda", (0,)), 1234, python=PY)
    assert argv[-1] == evil + "/train.json"
    shown = launch.format_command(argv)
    assert "'/tmp/$(touch pwned); rm -rf ~/train.json'" in shown


def test_free_port_is_bindable() -> None:
    import socket

    port = launch.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("0,7", "--gpus '0,7': GPU 7 does not exist"),
        ("0,0", "GPU 0 is listed twice"),
        ("0, 1", "no spaces allowed"),
        ("-1", "'-1' is not a GPU index"),
        ("x", "'x' is not a GPU index"),
    ],
)
def test_bad_gpus_refused(spec: str, needle: str) -> None:
    with pytest.raises(LaunchError) as e:
        preflight.place(values(gpus=spec).devices, H200, dry_run=False)[1]
    assert needle in e.value.message
    if "spaces" not in needle:
        assert "GPUs present: 0,1,2,3" in (e.value.hint or "")


def test_devices_resolution() -> None:
    assert preflight.place(values(gpus="all").devices, H200, dry_run=False)[1] == Devices(
        "cuda", (0, 1, 2, 3)
    )
    assert preflight.place(values(gpus="2,0").devices, H200, dry_run=False)[1].ids == (0, 2)
    assert preflight.place(values().devices, [], dry_run=False)[1] == Devices("cpu", (0,))
    assert preflight.place(values(nproc=2).devices, [], dry_run=False)[1] == Devices("cpu", (0, 1))
    with pytest.raises(LaunchError, match="--gpus all: no NVIDIA GPU found"):
        preflight.place(values(gpus="all").devices, [], dry_run=False)[1]
    with pytest.raises(LaunchError, match="with --hostfile"):
        preflight.place(values(gpus="0", hostfile="h").devices, H200, dry_run=False)[1]


def _installed(monkeypatch: pytest.MonkeyPatch, *missing: str) -> None:
    """find_spec as preflight sees it: every module present except `missing`."""
    monkeypatch.setattr(
        preflight.importlib.util, "find_spec", lambda n, *a: None if n in missing else object()
    )


@pytest.mark.parametrize(
    ("method", "missing", "named"),
    [
        ("full", ("deepspeed",), "deepspeed"),
        ("lora", ("torch", "peft"), "torch, peft"),
        ("qlora", ("bitsandbytes",), "bitsandbytes"),
        ("full", ("peft", "bitsandbytes"), None),  # full fine-tuning needs neither
    ],
)
def test_missing_extra_is_named(
    monkeypatch: pytest.MonkeyPatch, method: str, missing: tuple[str, ...], named: str | None
) -> None:
    _installed(monkeypatch, *missing)
    cpu = Devices("cpu", (0,))
    if named is None:
        preflight.check_extras(method, cpu)
        return
    with pytest.raises(MissingExtraError) as e:
        preflight.check_extras(method, cpu)
    assert e.value.message == f"dojo train --method {method} needs {named}, not installed"
    assert e.value.hint == "pip install -e '.[train]' in dojo's clone"


def test_a_preference_objective_needs_trl(monkeypatch: pytest.MonkeyPatch) -> None:
    _installed(monkeypatch, "trl")
    preflight.check_extras("lora", Devices("cpu", (0,)))  # SFT does not
    with pytest.raises(MissingExtraError) as e:
        preflight.check_extras("lora", Devices("cpu", (0,)), objective="dpo")
    assert e.value.message == "dojo train --method lora --objective dpo needs trl, not installed"


def test_qlora_needs_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    _installed(monkeypatch)  # the CUDA check, whatever this machine has installed
    with pytest.raises(LaunchError) as e:
        preflight.check_extras("qlora", Devices("cpu", (0,)))
    assert e.value.message == (
        "--method qlora needs an NVIDIA GPU: bitsandbytes 4-bit kernels do not run on the CPU"
    )


def test_precision_resolution() -> None:
    assert run_of(CUDA).kernels.precision == "bf16"
    assert run_of().kernels.precision == "fp32"
    with pytest.raises(ConfigError, match="fp16 needs a GPU"):
        run_of(precision="fp16")


def _ckpt(root: Path, step: int, world: int | None) -> Path:
    p = root / f"checkpoint-{step}"
    p.mkdir(parents=True)
    if world is not None:
        (p / checkpoints.MARKER).write_text(json.dumps({"world_size": world, "step": step}))
    return p


def test_resume_takes_latest_complete_checkpoint(tmp_path: Path) -> None:
    _ckpt(tmp_path, 5, 2)
    ten = _ckpt(tmp_path, 10, 2)
    _ckpt(tmp_path, 15, None)  # half-written: no marker
    assert checkpoints.resume_point(tmp_path, 2) == ten
    cfg = run_of(output_dir=str(tmp_path), resume=True, gpus_per_node=2)
    assert preflight.check_resume(cfg) == str(ten)


def test_resume_refuses_other_world_size(tmp_path: Path) -> None:
    _ckpt(tmp_path, 10, 4)
    with pytest.raises(LaunchError) as e:
        checkpoints.resume_point(tmp_path, 2)
    assert e.value.message == "--resume: checkpoint-10 was written by 4 processes, this run has 2"


def test_resume_without_checkpoint(tmp_path: Path) -> None:
    _ckpt(tmp_path, 3, None)
    with pytest.raises(LaunchError) as e:
        checkpoints.resume_point(tmp_path, 1)
    assert e.value.message == (
        f"--resume: no complete checkpoint in --output-dir {str(tmp_path)!r} (checkpoint-3 incomplete)"
    )


def test_output_dir_checks(tmp_path: Path) -> None:
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "train.json").write_text("{}")
    cfg = run_of(output_dir=str(tmp_path / "old"))
    with pytest.raises(LaunchError, match="already holds files"):
        preflight.check_output(cfg, None, force=False)
    preflight.check_output(cfg, None, force=True)
    preflight.check_output(cfg.replace(resume=True), None, force=False)
    (tmp_path / "file").write_text("x")
    with pytest.raises(LaunchError, match="is a file"):
        preflight.check_output(run_of(output_dir=str(tmp_path / "file")), None, force=False)


def test_output_dir_needs_free_disk(tmp_path: Path) -> None:
    from dojo.modelspec import resolve_model

    spec = resolve_model("70b")  # full fine-tune checkpoints of 70B: ~2 TB, more than any tmp
    cfg = run_of(output_dir=str(tmp_path / "run"), method="full")
    with pytest.raises(LaunchError, match="GiB free, this run writes about"):
        preflight.check_output(cfg, spec, force=False)


def test_no_save_model_needs_no_room_for_final_weights(tmp_path: Path, monkeypatch) -> None:
    """--save-steps 0 --no-save-model writes no weights: a nearly full disk is no reason to
    refuse (the H200 memory bench lost two rows to this with 5.9 GiB free)."""
    from dojo.modelspec import resolve_model

    spec = resolve_model("70b")
    usage = shutil.disk_usage(tmp_path)._replace(free=1 << 30)
    monkeypatch.setattr(preflight.shutil, "disk_usage", lambda p: usage)
    cfg = run_of(output_dir=str(tmp_path / "run"), method="full", save_steps=0)
    with pytest.raises(LaunchError, match=r"\(0 checkpoints \+ final weights\)"):
        preflight.check_output(cfg, spec, force=False)
    preflight.check_output(cfg.replace(save_model=False), spec, force=False)


def test_output_dir_where_nothing_can_be_created(tmp_path: Path) -> None:
    """/proc passes root's permission check, then refuses any new folder: that is the problem
    to name, not the free disk it reports (0)."""
    if not Path("/proc").is_dir():
        pytest.skip("needs Linux /proc")
    spec = resolve_model("1b")
    with pytest.raises(LaunchError) as e:
        preflight.check_output(run_of(output_dir="/proc/dojo-run"), spec, force=False)
    assert e.value.message in (
        "--output-dir /proc/dojo-run: no folder can be created in /proc (No such file or directory)",
        "--output-dir /proc/dojo-run: /proc is not writable",  # not root
    )
    preflight.check_output(run_of(output_dir=str(tmp_path / "a" / "b")), None, force=False)
    assert list(tmp_path.iterdir()) == []  # the check left nothing behind


def test_small_disk_figures_in_mib(tmp_path: Path, monkeypatch) -> None:
    from dojo.train.tiny import TINY_CONFIG

    usage = shutil.disk_usage(tmp_path)._replace(free=0)
    monkeypatch.setattr(preflight.shutil, "disk_usage", lambda p: usage)
    with pytest.raises(LaunchError, match=r": 0 MiB free, this run writes about \d+ MiB \("):
        preflight.check_output(
            run_of(output_dir=str(tmp_path / "run")), resolve_model(str(TINY_CONFIG)), force=False
        )


def test_unwritable_output_dir(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root can write anywhere")
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    with pytest.raises(LaunchError, match="is not writable"):
        preflight.check_output(run_of(output_dir=str(ro / "run")), None, force=False)


def test_ctrl_c_stops_whole_group_exit_130(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    wrap = subprocess.Popen([sys.executable, "-c", _WRAP, _FAKE, str(pids)])
    try:
        deadline = time.monotonic() + 20
        while not (pids.exists() and pids.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)
        child, grandchild = map(int, pids.read_text().split())
        wrap.send_signal(signal.SIGINT)
        assert wrap.wait(timeout=20) == 130
        end = time.monotonic() + 5
        while (_alive(child) or _alive(grandchild)) and time.monotonic() < end:
            time.sleep(0.05)
        assert not _alive(child) and not _alive(grandchild)
    finally:
        if wrap.poll() is None:
            wrap.kill()


def test_exit_code_is_forwarded() -> None:
    assert launch.run([sys.executable, "-c", "import sys; sys.exit(7)"]) == 7
    assert launch.run([sys.executable, "-c", "pass"]) == 0


def test_gpu_ranks_numbered_as_nvidia_smi_numbers_them() -> None:
    """--include holds the GPUs (CUDA_VISIBLE_DEVICES read into it by preflight): the runner
    gets no CUDA_VISIBLE_DEVICES to announce it ignores, and CUDA numbers the GPUs in nvidia-smi's
    (PCI) order, not fastest first, so --include 1 is nvidia-smi's GPU 1 on mixed machines too."""
    env = launch.launch_env(Devices("cuda", (1,)), base={"CUDA_VISIBLE_DEVICES": "1"})
    assert "CUDA_VISIBLE_DEVICES" not in env and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    mine = launch.launch_env(Devices("cuda", (0,)), base={"CUDA_DEVICE_ORDER": "FASTEST_FIRST"})
    assert mine["CUDA_DEVICE_ORDER"] == "FASTEST_FIRST"
    cpu = launch.launch_env(Devices("cpu", (0,)), base={"CUDA_VISIBLE_DEVICES": "1"})
    assert cpu["CUDA_VISIBLE_DEVICES"] == "1" and "CUDA_DEVICE_ORDER" not in cpu


def test_expandable_segments_reach_the_ranks_environment() -> None:
    cuda = Devices("cuda", (0,))
    assert launch.launch_env(cuda, base={}, expandable=True)["PYTORCH_CUDA_ALLOC_CONF"] == (
        "expandable_segments:True"
    )
    mine = {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64"}
    env = launch.launch_env(cuda, base=mine, expandable=True)
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:64,expandable_segments:True"
    assert "PYTORCH_CUDA_ALLOC_CONF" not in launch.launch_env(cuda, base={})
    shown = launch.format_command(["deepspeed", "x"], env)
    assert shown.startswith(
        "CUDA_DEVICE_ORDER=PCI_BUS_ID "
        "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:64,expandable_segments:True "
    )
