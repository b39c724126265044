"""dojo.train.model_files: damaged weight and JSON files named without loading them (torch-free).

The layouts are checked against what the real loaders accept: a file this module passes,
safetensors loads, and each damage below is one the loader refuses.
"""

import json
from pathlib import Path
from typing import Any

import pytest

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
        ((4).to_bytes(8, "little") + b"[1] ", "not a JSON object"),
        ((4).to_bytes(8, "little") + b"\xff\xfe{}", "header is not JSON"),
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


def test_folder_names_the_first_damaged_file(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    (tmp_path / "tokenizer.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(GOOD)
    (tmp_path / "notes.json").write_text("not read by any loader")
    assert damaged(tmp_path) is None
    (tmp_path / "tokenizer.json").write_text("xx")
    assert damaged(tmp_path) == (
        "tokenizer.json",
        "is not valid JSON (Expecting value at line 1 column 1)",
    )
    (tmp_path / "tokenizer.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(GOOD[:HEAD])
    name, why = damaged(tmp_path) or ("", "")
    assert name == "model.safetensors" and "cut short" in why


def test_a_shard_the_index_names_must_be_there(tmp_path: Path) -> None:
    index = {"weight_map": {"a": "model-1-of-2.safetensors", "b": "model-2-of-2.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    (tmp_path / "model-1-of-2.safetensors").write_bytes(GOOD)
    assert damaged(tmp_path) == (
        "model.safetensors.index.json",
        "names model-2-of-2.safetensors, which is not in the folder",
    )
    (tmp_path / "model-2-of-2.safetensors").write_bytes(GOOD[:-1])
    name, why = damaged(tmp_path) or ("", "")
    assert name == "model-2-of-2.safetensors" and "cut short" in why
