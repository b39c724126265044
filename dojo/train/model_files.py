"""Damaged model files, found without loading them: the weight files from_pretrained would load
(safetensors headers, a pytorch_model.bin's first bytes, the shards an index names) and the JSON
files that transformers, tokenizers and PEFT read.

A truncated copy, a garbage file or a hand-edited config.json otherwise surfaces deep inside a
loader (in every rank, for a training run) as ``SafetensorError: header too large`` or
``JSONDecodeError`` without naming the file. These checks read a few bytes of each weight file
(its header; never the tensors) and parse the small JSON files, so a caller can name the file
and what is wrong before anything heavy is imported. Pure and torch-free: ``dojo train`` uses it
on its --model folder (preflight), ``dojo chat``/``dojo export`` on a run folder (outputs).

    damaged(Path("runs/demo"))  # -> ("model.safetensors", "is cut short: ...") or None
    damaged(Path("my-model"), weights=False)  # --init random: the JSON files only
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
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
)
"""The JSON files of a model folder that loading the model or its tokenizer reads (weight
indexes aside: they are weight files, below)."""
LOAD_ORDER = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
"""The files transformers' from_pretrained looks for, in its order: the first present is loaded."""
ADAPTER_ORDER = ("adapter_model.safetensors", "adapter_model.bin")
"""PEFT's adapter weights, in its order: the first present is loaded."""
FALLBACK_PATTERNS = ("*.safetensors", "pytorch_model*.bin")
"""Without any of the names above, every weight file is checked (one of them is loaded)."""
_ZIP, _PICKLE, _TAR = b"PK\x03\x04", b"\x80", b"ustar"  # torch.save: zip; before 1.6 pickle; tar


def damaged(folder: str | Path, *, weights: bool = True) -> tuple[str, str] | None:
    """The first damaged model file in ``folder`` as (its path relative to the folder, what is
    wrong), else None. ``weights`` off (--init random) skips the weight files and their index.
    Only files that are there are checked, but for a shard its index names: a missing file is
    the loader's (or caller's) call."""
    root = Path(folder)
    for name in JSON_FILES:
        if (root / name).is_file():
            why = json_problem(root / name)
            if why:
                return name, why
    for name in weight_files(root) if weights else []:
        why = weight_problem(root, name)
        if why:
            return name, why
    return None


def weight_files(root: Path) -> list[str]:
    """The weight files a load reads, by their path in ``root``: the adapter's (PEFT's order) and
    the model's (from_pretrained's order: an index comes with the shards it names); without any
    of those names, every weight file in the folder."""
    names = [n for n in ADAPTER_ORDER if (root / n).is_file()][:1]
    for name in LOAD_ORDER:
        if (root / name).is_file():
            names += [name] + (_shards(root / name) if name.endswith(".index.json") else [])
            break
    if names:
        return names
    # is_file: a FIFO named *.safetensors would block the read
    return sorted({p.name for pat in FALLBACK_PATTERNS for p in root.glob(pat) if p.is_file()})


def weight_problem(root: Path, name: str) -> str | None:
    """What is wrong with one weight file (an index, a shard it names, a weights file), else None."""
    path = root / name
    if not path.is_file():
        return f"is missing: {_index_of(name)} names it"
    if name.endswith(".index.json"):
        why = json_problem(path)
        if why or isinstance(_weight_map(path), dict):
            return why
        return 'is not a weight index: it has no "weight_map" object'
    if name.endswith(".safetensors"):
        return safetensors_problem(path)
    return bin_problem(path)


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
            if n > size - 8:
                return (
                    f"is not a safetensors file, or is cut short: its first 8 bytes give a "
                    f"header of {n:,} bytes, the file has {size:,}"
                )
            if n > MAX_HEADER_BYTES:
                return (
                    f"is not a safetensors file: its first 8 bytes give a header of {n:,} "
                    f"bytes, over the {MAX_HEADER_BYTES:,} safetensors reads"
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


def bin_problem(path: Path) -> str | None:
    """What is wrong with a PyTorch weights file (torch.save's zip, an older pickle or tar),
    judged by its first bytes only (nothing is unpickled), else None."""
    try:
        with path.open("rb") as f:
            head = f.read(262)
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    if not head:
        return "is empty (0 bytes)"
    if head.startswith((_ZIP, _PICKLE)) or head[257:262] == _TAR:
        return None
    return "is not a PyTorch weights file (neither zip nor pickle)"


def _shards(index: Path) -> list[str]:
    """The files the index's weight_map names (none when the index is damaged: that is its own
    problem, reported first)."""
    weight_map = _weight_map(index)
    if not isinstance(weight_map, dict):
        return []
    return sorted({v for v in weight_map.values() if isinstance(v, str)})


def _weight_map(index: Path) -> Any:
    if json_problem(index):
        return None
    return json.loads(index.read_bytes()).get("weight_map")


def _index_of(shard: str) -> str:
    return LOAD_ORDER[1] if shard.endswith(".safetensors") else LOAD_ORDER[3]


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
