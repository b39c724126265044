"""dojo.train.weights_check: damaged weight and tokenizer files named before launch, torch-free."""

import json
import struct
from pathlib import Path

import pytest

from dojo.errors import LaunchError
from dojo.train import weights_check
from dojo.train.weights_check import check_model_folder, problems, safetensors_problem


def _safetensors(tensors: dict[str, bytes], pad: int = 0) -> bytes:
    """A safetensors file as the library writes it: header length, JSON header, the data."""
    header, data = {"__metadata__": {"format": "pt"}}, b""
    for name, raw in tensors.items():
        header[name] = {"dtype": "U8", "shape": [len(raw)], "data_offsets": [len(data), len(data) + len(raw)]}  # fmt: skip
        data += raw
    text = json.dumps(header).encode() + b" " * pad
    return struct.pack("<Q", len(text)) + text + data


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "model.safetensors").write_bytes(_safetensors({"a": b"abc", "b": b"de"}, pad=3))
    (tmp_path / "tokenizer.json").write_text('{"model": {}}')
    (tmp_path / "tokenizer_config.json").write_text("{}")
    return tmp_path


def test_whole_files_pass(folder: Path) -> None:
    assert problems(folder) == []
    check_model_folder(folder, "m")


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"", "0 bytes, shorter than a safetensors header"),
        (struct.pack("<Q", 10**12), "its header says 1000000000000 bytes of JSON follow, the file holds 0"),
        (struct.pack("<Q", 3) + b"{x}", "its header is not JSON"),
        (struct.pack("<Q", 2) + b"[]", "its header is not a JSON object"),
        (_safetensors({"a": b"abc"})[:-1], "cut short: its tensors take 3 bytes, the file holds 2 after the header"),
        (_safetensors({"a": b"abc"}) + b"x", "its tensors take 3 bytes, the file holds 4 after the header"),
        (struct.pack("<Q", 14) + b'{"a": {"x":1}}', "its header gives tensor 'a' no byte range"),
    ],
)  # fmt: skip
def test_damaged_safetensors_named(folder: Path, content: bytes, why: str) -> None:
    (folder / "model.safetensors").write_bytes(content)
    with pytest.raises(LaunchError) as e:
        check_model_folder(folder, "./m")
    assert e.value.message == f"--model ./m: model.safetensors is damaged: {why}"
    assert "copy it again" in (e.value.hint or "")
    # --init random loads no weights: only the tokenizer is read
    check_model_folder(folder, "./m", weights=False)


def test_header_over_the_library_limit(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(weights_check, "SAFETENSORS_MAX_HEADER", 10)
    assert "over safetensors' 10" in safetensors_problem(folder / "model.safetensors")


def test_sharded_weights_checked_through_their_index(folder: Path) -> None:
    (folder / "model.safetensors").unlink()
    one, two = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
    (folder / one).write_bytes(_safetensors({"a": b"abc"}))
    index = {"metadata": {}, "weight_map": {"a": one, "b": two}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    assert problems(folder) == [(folder / two, "missing (the index names it)")]
    (folder / two).write_bytes(b"\x01" * 8)
    assert "its header says" in problems(folder)[0][1]
    (folder / "model.safetensors.index.json").write_text("{")
    assert problems(folder)[0][1].startswith("not valid JSON (")


def test_what_from_pretrained_reads_first(folder: Path) -> None:
    """model.safetensors is what transformers loads: a stale .bin beside it is not read."""
    (folder / "pytorch_model.bin").write_bytes(b"junk")
    assert problems(folder) == []
    (folder / "model.safetensors").unlink()
    assert problems(folder) == [
        (folder / "pytorch_model.bin", "not a PyTorch checkpoint (neither zip nor pickle)")
    ]
    (folder / "pytorch_model.bin").write_bytes(b"PK\x03\x04rest")  # torch.save's zip
    assert problems(folder) == []
    (folder / "pytorch_model.bin").write_bytes(b"")
    assert problems(folder) == [(folder / "pytorch_model.bin", "empty")]


@pytest.mark.parametrize("name", ["tokenizer.json", "tokenizer_config.json"])
@pytest.mark.parametrize(
    ("content", "why"),
    [
        (
            "{",
            "not valid JSON (Expecting property name enclosed in double quotes: line 1 column 2)",
        ),
        ("[1]", "not a JSON object"),
    ],
)
def test_tokenizer_files_must_parse(folder: Path, name: str, content: str, why: str) -> None:
    (folder / name).write_text(content)
    with pytest.raises(LaunchError) as e:
        check_model_folder(folder, "m", weights=False)
    assert e.value.message == f"--model m: {name} is damaged: {why}"
