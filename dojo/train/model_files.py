"""Damaged model files, found without loading them: safetensors headers and the JSON files that
transformers, tokenizers and PEFT read.

A truncated copy, a garbage file or a hand-edited config.json otherwise surfaces deep inside a
loader as ``SafetensorError: header too large`` or ``JSONDecodeError`` without naming the file.
These checks read a few bytes of each weight file (never the tensors) and parse the small JSON
files, so a caller can name the file and what is wrong before anything heavy is imported.
Pure and torch-free: ``dojo chat``/``dojo export`` use it on a run folder, and it suits
``dojo train``'s --model folder as well.

    damaged(Path("runs/demo"))  # -> ("model.safetensors", "is cut short: ...") or None
"""

import json
from pathlib import Path
from typing import Any, TypeGuard

from dojo.safe_load import shorten

MAX_HEADER_BYTES = 100_000_000
"""safetensors' own limit on the JSON header (its loader refuses a longer one)."""
JSON_FILES = (
    "config.json",
    "generation_config.json",
    "adapter_config.json",
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
)
"""The JSON files of a model folder that loading the model or its tokenizer reads."""
SHARD_INDEX = "model.safetensors.index.json"


def damaged(folder: str | Path) -> tuple[str, str] | None:
    """The first damaged model file in ``folder`` as (file name, what is wrong), else None.
    Only files that are there are checked: a missing file is the loader's (or caller's) call."""
    p = Path(folder)
    for name in JSON_FILES:
        if (p / name).is_file():
            why = json_problem(p / name)
            if why:
                return name, why
    missing = missing_shard(p)
    if missing:
        return SHARD_INDEX, f"names {missing}, which is not in the folder"
    for f in sorted(p.glob("*.safetensors")):
        if f.is_file():  # a FIFO named *.safetensors would block the read
            why = safetensors_problem(f)
            if why:
                return f.name, why
    return None


def json_problem(path: Path) -> str | None:
    """What is wrong with a JSON file a loader reads as one object, else None."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    if not raw.strip():
        return "is empty"
    try:
        doc = json.loads(raw)
    except UnicodeDecodeError:
        return "is not text (not UTF-8): not a JSON file"
    except json.JSONDecodeError as e:
        return f"is not valid JSON ({e.msg} at line {e.lineno} column {e.colno})"
    except (ValueError, RecursionError) as e:  # a 5,000-digit integer, 100,000 nested brackets
        return f"is not usable JSON ({type(e).__name__})"
    if not isinstance(doc, dict):
        return f"holds a JSON {_json_type(doc)} where an object {{...}} belongs"
    return None


def missing_shard(folder: Path) -> str | None:
    """The first weight file that model.safetensors.index.json maps to and the folder lacks."""
    index = folder / SHARD_INDEX
    if not index.is_file() or json_problem(index):
        return None
    weight_map = json.loads(index.read_bytes()).get("weight_map")
    if not isinstance(weight_map, dict):
        return None
    for shard in sorted({v for v in weight_map.values() if isinstance(v, str)}):
        if not (folder / shard).is_file():
            return shard
    return None


def safetensors_problem(path: Path) -> str | None:
    """What is wrong with a .safetensors file's layout, else None. Reads the 8-byte header
    length (little-endian) and the JSON header, and checks that the tensors' byte ranges tile
    the rest of the file exactly, as safetensors' own loader does."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(8)
            if size == 0:
                return "is empty (0 bytes)"
            if len(head) < 8:
                return f"is too short to be a safetensors file ({size} bytes)"
            n = int.from_bytes(head, "little")
            if n > min(MAX_HEADER_BYTES, size - 8):
                return (
                    f"is not a safetensors file, or is cut short: its first 8 bytes give a "
                    f"header of {n:,} bytes, the file has {size:,}"
                )
            raw = f.read(n)
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    try:
        header = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError included
        return "is not a safetensors file: its header is not JSON"
    if not isinstance(header, dict):
        return "is not a safetensors file: its header is not a JSON object"
    ranges = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not _is_range(offsets):
            return f"is damaged: the header's entry {shorten(name)} has no valid data_offsets"
        ranges.append((offsets[0], offsets[1]))
    end = 0
    for start, stop in sorted(ranges):
        if start != end:
            return "is damaged: the tensors' byte ranges in its header leave gaps or overlap"
        end = stop
    data = size - 8 - n
    if data < end:
        return (
            f"is cut short: {size:,} bytes where its header needs {8 + n + end:,} "
            "(a copy or download that stopped early?)"
        )
    if data > end:
        return f"is damaged: {data - end:,} bytes past the last tensor its header lists"
    return None


def _is_range(value: Any) -> TypeGuard[list[int]]:
    return (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        and 0 <= value[0] <= value[1]
    )


def _json_type(doc: Any) -> str:
    if isinstance(doc, list):
        return "list"
    if isinstance(doc, str):
        return "string"
    if doc is None:
        return "null"
    return "boolean" if isinstance(doc, bool) else "number"
