"""A local model folder's weight and tokenizer files, checked before launch without torch.

A damaged ``model.safetensors`` (a copy cut short, a file overwritten) or a ``tokenizer.json``
that is not JSON passes every other check, and then every rank dies loading it with a traceback.
Only what is cheap is read: a safetensors file's header (8-byte little-endian length, then that
many bytes of JSON naming each tensor's byte range), the first bytes of a ``pytorch_model.bin``,
and the tokenizer's JSON files. Tensor data is never read.
"""

import json
import struct
from pathlib import Path
from typing import Any

from dojo.errors import LaunchError

SAFETENSORS_MAX_HEADER = 100_000_000
"""The safetensors library refuses a longer header ("header too large")."""
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
_LOAD_ORDER = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
"""The files transformers' from_pretrained looks for, in its order: the first present is loaded."""
_WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")
_ZIP, _PICKLE, _TAR = b"PK\x03\x04", b"\x80", b"ustar"  # torch.save: zip; before 1.6 pickle; tar


def check_model_folder(folder: str | Path, flag_value: str, *, weights: bool = True) -> None:
    """LaunchError naming the first damaged file; ``weights`` off (--init random) checks the
    tokenizer only."""
    root = Path(folder)
    for path, why in problems(root, weights=weights):
        raise LaunchError(
            f"--model {flag_value}: {path.relative_to(root)} is damaged: {why}",
            hint="copy it again from where the model came from (the download, or the run that "
            "saved it)",
        )


def problems(root: Path, *, weights: bool = True) -> list[tuple[Path, str]]:
    """(file, why) for each damaged file the run would read, weights first."""
    out: list[tuple[Path, str]] = []
    for path in weight_files(root) if weights else []:
        why = _weight_problem(path)
        if why:
            out.append((path, why))
    for name in TOKENIZER_FILES:
        path = root / name
        if path.is_file():
            why = _json_object_problem(path)
            if why:
                out.append((path, why))
    return out


def weight_files(root: Path) -> list[Path]:
    """The first of _LOAD_ORDER present (an index with the shards it names); without any, every
    weight file in the folder."""
    for name in _LOAD_ORDER:
        path = root / name
        if path.is_file():
            return [path] + (_shards(root, path) if name.endswith(".index.json") else [])
    return sorted({p for pattern in _WEIGHT_PATTERNS for p in root.glob(pattern) if p.is_file()})


def _shards(root: Path, index: Path) -> list[Path]:
    data, _ = _load_json(index)
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict):
        return []  # the index's own problem is reported
    names = sorted({v for v in weight_map.values() if isinstance(v, str)})
    return [root / n for n in names]


def _weight_problem(path: Path) -> str:
    if not path.is_file():
        return "missing (the index names it)"
    if path.name.endswith(".index.json"):
        data, why = _load_json(path)
        if why or (isinstance(data, dict) and isinstance(data.get("weight_map"), dict)):
            return why
        return "not a weight index (no weight_map)"
    try:
        return safetensors_problem(path) if path.suffix == ".safetensors" else _bin_problem(path)
    except OSError as e:
        return f"cannot be read ({e.strerror})"


def safetensors_problem(path: Path) -> str:
    """Why ``path`` is not a whole safetensors file ("" if it is): the header's length, its JSON,
    and the tensors' byte ranges against the file's size."""
    size = path.stat().st_size
    if size < 8:
        return f"{size} bytes, shorter than a safetensors header"
    with path.open("rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        if length > size - 8:
            return f"its header says {length} bytes of JSON follow, the file holds {size - 8}"
        if length > SAFETENSORS_MAX_HEADER:
            return f"a {length}-byte header, over safetensors' {SAFETENSORS_MAX_HEADER}"
        raw = f.read(length)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return "its header is not JSON"
    if not isinstance(header, dict):
        return "its header is not a JSON object"
    end = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(isinstance(x, int) and x >= 0 for x in offsets)
        ):
            return f"its header gives tensor {name[:80]!r} no byte range"
        end = max(end, offsets[1])
    data = size - 8 - length
    if end != data:
        cut = "cut short: " if end > data else ""
        return f"{cut}its tensors take {end} bytes, the file holds {data} after the header"
    return ""


def _bin_problem(path: Path) -> str:
    with path.open("rb") as f:
        head = f.read(262)
    if not head:
        return "empty"
    if head.startswith((_ZIP, _PICKLE)) or head[257:262] == _TAR:
        return ""
    return "not a PyTorch checkpoint (neither zip nor pickle)"


def _json_object_problem(path: Path) -> str:
    data, why = _load_json(path)
    return why or ("" if isinstance(data, dict) else "not a JSON object")


def _load_json(path: Path) -> tuple[Any, str]:
    """(the parsed file, "") or (None, why it cannot be parsed)."""
    try:
        return json.loads(path.read_text(encoding="utf-8")), ""
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    except json.JSONDecodeError as e:
        return None, f"not valid JSON ({e.msg}: line {e.lineno} column {e.colno})"
    except OSError as e:
        return None, f"cannot be read ({e.strerror})"
    except RecursionError:  # JSON nested thousands deep
        return None, "nested too deep to be a tokenizer or index file"
