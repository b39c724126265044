"""dojo.gpus.visible_gpus: CUDA_VISIBLE_DEVICES read as nvidia-smi's indices, as DeepSpeed's runner
reads it (deepspeed/launcher/runner.py turns it into --include when given none); UUIDs looked up
through nvidia-smi; anything that names no whole GPU here refused in one line."""

import pytest

import dojo.gpus
from dojo.errors import LaunchError
from dojo.gpus import list_gpu_uuids, visible_gpus

UUIDS = {
    0: "GPU-8d3c0a1e-1111-2222-3333-444455556666",
    1: "GPU-8d3c77aa-1111-2222-3333-444455556666",
}


def _uuids() -> dict[int, str]:
    return dict(UUIDS)


@pytest.mark.parametrize(
    ("value", "ids"),
    [
        ("1", (1,)),
        ("1,0", (1, 0)),  # CUDA's order: its device 0 is GPU 1
        (" 0 , 1 ", (0, 1)),
        ("GPU-8d3c77aa-1111-2222-3333-444455556666", (1,)),
        ("gpu-8d3c0a", (0,)),  # a unique prefix, as CUDA takes it
        ("GPU-8d3c77,0", (1, 0)),
    ],
)
def test_indices_and_uuids(value: str, ids: tuple[int, ...]) -> None:
    assert visible_gpus(value, [0, 1], _uuids) == ids


@pytest.mark.parametrize(
    ("value", "message", "hint"),
    [
        ("", "CUDA_VISIBLE_DEVICES='' hides every GPU", "--nproc N"),
        ("-1", "CUDA_VISIBLE_DEVICES=-1 hides every GPU", "unset CUDA_VISIBLE_DEVICES"),
        ("3", "CUDA_VISIBLE_DEVICES=3: GPU 3 does not exist", "GPUs present: 0,1"),
        ("0,0", "CUDA_VISIBLE_DEVICES=0,0: GPU 0 is listed twice", "--gpus"),
        ("x", "CUDA_VISIBLE_DEVICES=x: 'x' is not a GPU index or UUID", "--gpus"),
        ("GPU-8d3c", "CUDA_VISIBLE_DEVICES=GPU-8d3c: GPU-8d3c matches several GPUs", "nvidia-smi -L"),
        ("GPU-ffff", "CUDA_VISIBLE_DEVICES=GPU-ffff: GPU-ffff is no GPU's UUID here", "nvidia-smi -L"),
        ("MIG-5c1c3a8e-aaaa", "CUDA_VISIBLE_DEVICES=MIG-5c1c3a8e-aaaa: MIG-5c1c3a8e-aaaa is a MIG "
         "instance; DeepSpeed's launcher gives each rank a whole GPU by its index", "--gpus"),
    ],
)  # fmt: skip
def test_refused_in_one_line(value: str, message: str, hint: str) -> None:
    with pytest.raises(LaunchError) as e:
        visible_gpus(value, [0, 1], _uuids)
    assert e.value.message == message
    assert hint in (e.value.hint or "")


def test_uuids_without_nvidia_smi_answer() -> None:
    with pytest.raises(LaunchError, match="nvidia-smi lists no GPU UUIDs") as e:
        visible_gpus("GPU-8d3c0a", [0, 1], dict)
    assert "set CUDA_VISIBLE_DEVICES to GPU indices" in (e.value.hint or "")


def test_uuid_table(monkeypatch: pytest.MonkeyPatch) -> None:
    table = "0, GPU-aaaa\n1, GPU-bbbb\nno, GPU-cccc\n2, [N/A]\n"
    monkeypatch.setattr(dojo.gpus, "_nvidia_smi", lambda query: table)
    assert list_gpu_uuids() == {0: "GPU-aaaa", 1: "GPU-bbbb"}
    monkeypatch.setattr(dojo.gpus, "_nvidia_smi", lambda query: None)
    assert list_gpu_uuids() == {}
