"""dojo.train.toolchain: a CPU run without a C++ compiler is refused in one line, before launch."""

import sys
from pathlib import Path

import pytest

from dojo.errors import LaunchError
from dojo.train.toolchain import OP, cpu_compiler_error


def _exe(folder: Path, name: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / name
    p.write_text("#!/bin/sh\n")
    p.chmod(0o755)


def _so(folder: Path) -> None:
    (folder / OP).mkdir(parents=True)
    (folder / OP / f"{OP}.so").write_bytes(b"\x7fELF")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def test_compiler_on_path_is_enough(tmp_path: Path, home: Path) -> None:
    _exe(tmp_path / "bin", "c++")
    assert cpu_compiler_error({"PATH": str(tmp_path / "bin")}, home) is None


def test_cxx_names_the_compiler(tmp_path: Path, home: Path) -> None:
    _exe(tmp_path / "bin", "g++-12")
    env = {"PATH": str(tmp_path / "bin"), "CXX": "g++-12"}
    assert cpu_compiler_error(env, home) is None
    err = cpu_compiler_error({**env, "CXX": "clang++"}, home)
    assert isinstance(err, LaunchError) and "'clang++' is not on PATH" in err.message


def test_no_compiler_no_cache_is_one_clear_error(tmp_path: Path, home: Path) -> None:
    err = cpu_compiler_error({"PATH": str(tmp_path / "empty")}, home)
    assert isinstance(err, LaunchError)
    assert err.message == (
        "training on CPU processes needs a C++ compiler: 'c++' is not on PATH (DeepSpeed "
        f"compiles its {OP} op with it on first use)"
    )
    assert err.hint is not None and "g++" in err.hint and "python3-dev" in err.hint


def test_a_built_op_needs_no_compiler(tmp_path: Path, home: Path) -> None:
    env = {"PATH": str(tmp_path / "empty"), "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    assert cpu_compiler_error(env, home) is not None
    _so(tmp_path / "ext")
    assert cpu_compiler_error(env, home) is None
    # The default cache: ~/.cache/torch_extensions/py<XY>_<accelerator>/ (or $XDG_CACHE_HOME).
    py = f"py{sys.version_info.major}{sys.version_info.minor}{getattr(sys, 'abiflags', '')}"
    bare = {"PATH": str(tmp_path / "empty")}
    assert cpu_compiler_error(bare, home) is not None
    _so(home / ".cache" / "torch_extensions" / f"{py}_cpu")
    assert cpu_compiler_error(bare, home) is None
    xdg = {**bare, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    assert cpu_compiler_error(xdg, home) is not None
    _so(tmp_path / "xdg" / "torch_extensions" / f"{py}_cu130")
    assert cpu_compiler_error(xdg, home) is None


def test_stale_build_lock_is_cleared(tmp_path: Path) -> None:
    """A run killed while torch held the op's build lock must not hang every later CPU run."""
    from dojo.train import toolchain

    op = tmp_path / "ext" / toolchain.OP
    op.mkdir(parents=True)
    env = {"TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    lock = op / "lock"
    lock.write_text("")
    old = lock.stat().st_mtime
    assert toolchain.clear_stale_build_lock(env, now=old + 300) == []  # no .so yet: a real build
    (op / f"{toolchain.OP}.so").write_bytes(b"")
    assert toolchain.clear_stale_build_lock(env, now=old + 5) == []  # fresh: someone holds it
    assert toolchain.clear_stale_build_lock(env, now=old + 1e6) == [lock]
    assert not lock.exists()


def test_lock_of_an_interrupted_first_build_is_cleared(tmp_path: Path) -> None:
    """Stopped mid-build (no .so), of any op: cleared once no build could still be running."""
    from dojo.train import toolchain

    op = tmp_path / "ext" / "cpu_adam"  # an offload run's op, not only the CPU runs' shm op
    op.mkdir(parents=True)
    env = {"TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    lock = op / "lock"
    lock.write_text("")
    old = lock.stat().st_mtime
    assert toolchain.clear_stale_build_lock(env, now=old + 600) == []  # may still be compiling
    assert toolchain.clear_stale_build_lock(env, now=old + 1e6) == [lock]
    assert not lock.exists()


def test_shm_buffers_of_the_run_are_removed(tmp_path: Path) -> None:
    """DeepSpeed never unlinks its CPU allreduce segments; the supervisor removes this run's."""
    import os

    from dojo.train import toolchain

    uid = os.getuid()
    ours = [tmp_path / f"deepspeed_allreduce_buffer_{uid}_127.0.0.1_29511_{r}" for r in (0, 1)]
    other = tmp_path / f"deepspeed_allreduce_buffer_{uid}_127.0.0.1_29512_0"
    for p in [*ours, other]:
        p.write_bytes(b"x")
    assert sorted(toolchain.remove_shm_buffers(29511, root=tmp_path)) == sorted(ours)
    assert other.exists() and not any(p.exists() for p in ours)
    cmd = ["python", "-m", "deepspeed.launcher.runner", "--master_port", "29511", "--module", "m"]
    assert toolchain.master_port(cmd) == "29511" and toolchain.master_port(["x"]) is None
