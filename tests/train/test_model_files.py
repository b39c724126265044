"""dojo.train.model_files: damaged weight and JSON files named without loading them (torch-free).

The layouts are checked against what the real loaders accept: a file this module passes,
safetensors loads, and each damage below is one the loader refuses. Which weight files are
checked follows from_pretrained: the ones it would load, not a stale file beside them.
"""

import json
from pathlib import Path
from typing import Any

import pytest

from dojo.train import model_files
from dojo.train.model_files import damaged, json_problem, safetensors_problem


def safetensors_bytes(tensors: dict[str, int], extra: bytes = b"") -> bytes:
    """A safetensors file of U8 tensors of the given byte lengths, laid out back to back."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    at = 0
    for name, n in tensors.items():
        header[name] = {"dtype": "U8", "shape": [n], "data_offsets": [at, at + n]}
        at += n
    raw = json.dumps(header).encode()
    return len(raw).to_bytes(8, "little") + raw + bytes(at) + extra


GOOD = safetensors_bytes({"a": 4, "b": 3})
HEAD = len(GOOD) - 7  # where the tensors' bytes begin


@pytest.mark.parametrize(
    "data, needle",
    [
        (b"", "is empty"),
        (b"abc", "too short"),
        (b"garbage\n", "not a safetensors file, or is cut short"),  # the audit's corrupt file
        (GOOD[:40], "not a safetensors file, or is cut short"),  # cut inside the header
        (GOOD[:-2], "is cut short"),  # cut inside the tensors
        (GOOD + b"xx", "2 bytes past the last tensor"),
        ((10**12).to_bytes(8, "little"), "header of 1,000,000,000,000 bytes, the file has 8"),
        ((4).to_bytes(8, "little") + b"[1] ", "not a JSON object"),
        ((4).to_bytes(8, "little") + b"\xff\xfe{}", "header is not JSON"),
        ((3).to_bytes(8, "little") + b"{x}", "header is not JSON"),
    ],
)
def test_damaged_safetensors(tmp_path: Path, data: bytes, needle: str) -> None:
    p = tmp_path / "model.safetensors"
    p.write_bytes(data)
    why = safetensors_problem(p)
    assert why is not None and needle in why, why


def test_header_entries_must_tile_the_data(tmp_path: Path) -> None:
    p = tmp_path / "model.safetensors"
    for entry, needle in (
        ({"dtype": "U8", "shape": [2], "data_offsets": [0]}, "no valid data_offsets"),
        ({"dtype": "U8", "shape": [2], "data_offsets": [1, 3]}, "gaps or overlap"),
        ({"dtype": "U8", "shape": [2], "data_offsets": [2, 1]}, "no valid data_offsets"),
        ({"dtype": "U8", "shape": [2]}, "entry 'w' has no valid data_offsets"),
        ("not an entry", "entry 'w' has no valid data_offsets"),
    ):
        raw = json.dumps({"w": entry}).encode()
        p.write_bytes(len(raw).to_bytes(8, "little") + raw + bytes(3))
        why = safetensors_problem(p)
        assert why is not None and needle in why, why


def test_well_formed_files_pass_and_the_loader_agrees(tmp_path: Path) -> None:
    p = tmp_path / "model.safetensors"
    p.write_bytes(GOOD)
    assert safetensors_problem(p) is None
    safetensors = pytest.importorskip("safetensors")
    with safetensors.safe_open(str(p), "np") as f:
        assert sorted(f.keys()) == ["a", "b"]
    for bad in (GOOD[:-2], GOOD + b"xx", b"garbage\n"):  # what is refused here, the loader refuses
        p.write_bytes(bad)
        with pytest.raises(safetensors.SafetensorError):
            safetensors.safe_open(str(p), "np")


@pytest.mark.parametrize(
    "text, needle",
    [
        ("", "is empty"),
        ("not json", "is not valid JSON (Expecting value at line 1 column 1)"),
        ('{"a": 1,}', "is not valid JSON"),
        ("[]", "holds a JSON list where an object"),
        ('"x"', "holds a JSON string"),
        ("[" * 100_000 + "]" * 100_000, "is not usable JSON"),
    ],
)
def test_damaged_json(tmp_path: Path, text: str, needle: str) -> None:
    p = tmp_path / "config.json"
    p.write_text(text)
    why = json_problem(p)
    assert why is not None and needle in why, why


def test_header_over_the_library_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """safetensors refuses a header over 100 MB even when the file is that long."""
    p = tmp_path / "model.safetensors"
    p.write_bytes(GOOD)
    monkeypatch.setattr(model_files, "MAX_HEADER_BYTES", 10)
    why = safetensors_problem(p)
    assert why is not None and why.endswith("bytes, over the 10 safetensors reads"), why


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A whole model folder: weights, config and tokenizer."""
    (tmp_path / "model.safetensors").write_bytes(GOOD)
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    (tmp_path / "tokenizer.json").write_text('{"model": {}}')
    (tmp_path / "tokenizer_config.json").write_text("{}")
    return tmp_path


def test_folder_names_the_first_damaged_file(folder: Path) -> None:
    (folder / "notes.json").write_text("not read by any loader")
    assert damaged(folder) is None
    (folder / "tokenizer.json").write_text("xx")
    assert damaged(folder) == (
        "tokenizer.json",
        "is not valid JSON (Expecting value at line 1 column 1)",
    )
    (folder / "tokenizer.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(GOOD[:HEAD])
    name, why = damaged(folder) or ("", "")
    assert name == "model.safetensors" and "cut short" in why


@pytest.mark.parametrize("name", ["tokenizer.json", "tokenizer_config.json", "config.json"])
@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("{", "is not valid JSON (Expecting property name enclosed in double quotes at line 1 column 2)"),
        ("[1]", "holds a JSON list where an object {...} belongs"),
    ],
)  # fmt: skip
def test_json_files_checked_without_weights(
    folder: Path, name: str, content: str, why: str
) -> None:
    """--init random loads no weights, but still reads the config and the tokenizer."""
    (folder / "model.safetensors").write_bytes(b"garbage\n")
    assert damaged(folder, weights=False) is None
    (folder / name).write_text(content)
    assert damaged(folder, weights=False) == (name, why)


def test_sharded_weights_checked_through_their_index(folder: Path) -> None:
    (folder / "model.safetensors").unlink()
    one, two = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
    (folder / one).write_bytes(GOOD)
    index = {"metadata": {}, "weight_map": {"a": one, "b": two}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    assert damaged(folder) == (two, "is missing: model.safetensors.index.json names it")
    (folder / two).write_bytes(GOOD[:-1])
    name, why = damaged(folder) or ("", "")
    assert name == two and "cut short" in why
    (folder / two).write_bytes(GOOD)
    assert damaged(folder) is None
    (folder / "model.safetensors.index.json").write_text('{"metadata": {}}')
    assert damaged(folder) == (
        "model.safetensors.index.json",
        'is not a weight index: it has no "weight_map" object',
    )
    (folder / "model.safetensors.index.json").write_text("{")
    name, why = damaged(folder) or ("", "")
    assert name == "model.safetensors.index.json" and why.startswith("is not valid JSON (")
    assert damaged(folder, weights=False) is None  # the index is a weight file


def test_what_from_pretrained_reads_first(folder: Path) -> None:
    """model.safetensors is what transformers loads: a stale .bin or shard beside it is not read."""
    (folder / "pytorch_model.bin").write_bytes(b"junk")
    (folder / "model-00001-of-00002.safetensors").write_bytes(b"junk")
    assert damaged(folder) is None
    (folder / "model.safetensors").unlink()
    (folder / "model-00001-of-00002.safetensors").unlink()
    assert damaged(folder) == (
        "pytorch_model.bin",
        "is not a PyTorch weights file (neither zip nor pickle)",
    )
    for whole in (b"PK\x03\x04rest", b"\x80\x02rest", bytes(257) + b"ustar"):  # zip, pickle, tar
        (folder / "pytorch_model.bin").write_bytes(whole)
        assert damaged(folder) is None
    (folder / "pytorch_model.bin").write_bytes(b"")
    assert damaged(folder) == ("pytorch_model.bin", "is empty (0 bytes)")
    assert damaged(folder, weights=False) is None


def test_adapter_weights_are_checked(tmp_path: Path) -> None:
    """PEFT loads adapter_model.safetensors whatever else the folder holds (a run's checkpoint)."""
    (tmp_path / "adapter_config.json").write_text("{}")
    (tmp_path / "adapter_model.safetensors").write_bytes(GOOD[:-1])
    assert damaged(tmp_path) == (
        "adapter_model.safetensors",
        f"is cut short: {len(GOOD) - 1:,} bytes where its header needs {len(GOOD):,} "
        "(a copy or download that stopped early?)",
    )
    (tmp_path / "model.safetensors").write_bytes(GOOD)
    assert damaged(tmp_path) is not None
    (tmp_path / "adapter_model.safetensors").write_bytes(GOOD)
    assert damaged(tmp_path) is None


def test_without_a_known_name_every_weight_file_is_checked(tmp_path: Path) -> None:
    (tmp_path / "consolidated.safetensors").write_bytes(GOOD)
    (tmp_path / "pytorch_model-00001-of-00002.bin").write_bytes(b"PK\x03\x04")
    assert damaged(tmp_path) is None
    (tmp_path / "pytorch_model-00001-of-00002.bin").write_bytes(b"<html>")
    name, _ = damaged(tmp_path) or ("", "")
    assert name == "pytorch_model-00001-of-00002.bin"
