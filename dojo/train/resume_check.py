"""--resume with other settings than the checkpoint was trained with: refused before launch.

Without this, ``--resume --zero 3`` on a ZeRO-2 checkpoint (or another --method, LoRA rank, model,
precision or world size) passed preflight, rewrote train.json and died in every rank with a
DeepSpeed/PEFT traceback while loading. Pure: dicts in, sentences out.

The saved side is the checkpoint marker (``dojo_checkpoint.json``: what that checkpoint was
trained with, written by the worker's CheckpointMarker) over the run record beside it
(dojo.paths.RUN_FILE); the marker wins where both say something, because a later launch may have
rewritten the run record. Keys are compared only where both sides have them.
"""

import json
from pathlib import Path
from typing import Any

from dojo.errors import LaunchError
from dojo.paths import RUN_FILE

RESUME_KEYS: dict[str, str] = {
    "method": "--method",
    "objective": "--objective",
    "zero_stage": "--zero",
    "world_size": "processes",
    "model": "--model",
    "lora_r": "--lora-r",
    "lora_targets": "--lora-targets",
    "precision_resolved": "--precision",
    "offload": "--offload",
    "offload_param": "--offload-param",
    "sub_group_size": "--sub-group-size",
}
"""Settings that change what a checkpoint holds (shard layout, adapter shapes, dtypes, optimizer
placement, the objective its optimizer state followed): loading one across a change crashes or
silently trains something else."""
_LORA_ONLY = ("lora_r", "lora_targets")


def flat(record: dict[str, Any]) -> dict[str, Any]:
    """A run record ({"run": Run.to_dict(), "paths": ...}) in the keys markers use."""
    run = record.get("run")
    if not isinstance(run, dict):
        return record  # a marker
    group: dict[str, dict[str, Any]] = {
        g: run[g] if isinstance(run.get(g), dict) else {}
        for g in ("model", "zero", "kernels", "lora", "devices", "objective")
    }
    zero = group["zero"]
    paths = record.get("paths") or {}
    return {
        "method": group["model"].get("method"),
        # A run record written before --objective existed trained SFT.
        "objective": group["objective"].get("objective", "sft"),
        "zero_stage": zero.get("stage"),
        "world_size": int(run.get("gpus_per_node", 1)) * int(group["devices"].get("num_nodes", 1)),
        "model": group["model"].get("model"),
        "lora_r": group["lora"].get("lora_r"),
        "lora_targets": group["lora"].get("lora_targets"),
        "precision_resolved": group["kernels"].get("precision"),
        "offload": zero.get("offload"),
        "offload_param": zero.get("offload_param"),
        # ZeRO-3 shards the fp32 optimizer state by this tile: another tile cannot load it.
        "sub_group_size": zero.get("sub_group_size") if zero.get("stage") == 3 else None,
        "model_kind": record.get("model_kind"),
        "model_path": paths.get("model"),
    }


def saved_view(record: dict[str, Any]) -> dict[str, Any]:
    """The RESUME_KEYS of a run record or marker, normalised (model as the path that was used)."""
    record = flat(record)
    out = {k: record[k] for k in RESUME_KEYS if k in record}
    if record.get("model_kind") == "local" and record.get("model_path"):
        out["model"] = str(record["model_path"])  # absolute: the record's --model was relative
    elif "model" in out and out["model"] is not None:
        out["model"] = _model_ref(str(out["model"]))
    if "precision_resolved" not in out and record.get("precision") not in (None, "auto"):
        out["precision_resolved"] = record["precision"]
    return out


def _model_ref(ref: str) -> str:
    p = Path(ref).expanduser()
    return str(p.resolve()) if p.exists() else ref


def _show(key: str, value: Any) -> str:
    if key == "world_size":
        return f"{value} processes"
    if key == "model" and value is None:
        return "the bundled tiny model"
    if value is None:  # the setting does not apply there (--sub-group-size outside ZeRO-3)
        return f"no {RESUME_KEYS[key]}"
    return f"{RESUME_KEYS[key]} {value}"


def _flags(pairs: list[tuple[str, Any]]) -> str:
    """The flags for ``(key, value)`` pairs, leaving out settings without a value: they follow
    from another flag (--sub-group-size applies to --zero 3 only)."""
    return " ".join(_show(k, v) for k, v in pairs if v is not None or k == "model")


def differing(saved: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(key, saved value, new value) for each RESUME_KEY both sides have and disagree on."""
    a, b = saved_view(saved), saved_view(new)
    lora = a.get("method", "lora") != "full" and b.get("method", "lora") != "full"
    out = []
    for key in RESUME_KEYS:
        if key in a and key in b and a[key] != b[key]:
            if key in _LORA_ONLY and not lora:
                continue  # a full fine-tune has no adapter: its LoRA defaults mean nothing
            out.append((key, a[key], b[key]))
    return out


def resume_mismatches(saved: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """One phrase per setting that differs, e.g. 'trained with --zero 2, this run asks --zero 3'."""
    return [
        f"trained with {_show(k, old)}, this run asks {_show(k, now)}"
        for k, old, now in differing(saved, new)
    ]


def checkpoint_meta_mismatch(marker: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """resume_mismatches against a checkpoint's marker (what that checkpoint was trained with)."""
    return resume_mismatches(marker, new)


def read_record(output_dir: str | Path) -> dict[str, Any]:
    """The run record a previous launch wrote into the run folder ({} when there is none)."""
    try:
        data = json.loads((Path(output_dir) / RUN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def refuse_mismatch(ckpt: Path, output_dir: str | Path, new: dict[str, Any]) -> None:
    """LaunchError naming every setting that differs and how to continue; nothing if none."""
    from dojo.train.checkpoints import read_marker

    saved = {**saved_view(read_record(output_dir)), **saved_view(read_marker(ckpt))}
    diffs = differing(saved, new)
    if not diffs:
        return
    was = _flags([(k, old) for k, old, _ in diffs])
    now = _flags([(k, new_) for k, _, new_ in diffs])
    flags = _flags([(k, old) for k, old, _ in diffs if k not in ("world_size", "model")])
    if any(k == "model" for k, _, _ in diffs):
        old_model = next(old for k, old, _ in diffs if k == "model")
        flags = (f"--model {old_model} " if old_model is not None else "no --model ") + flags
    if any(k == "world_size" for k, _, _ in diffs):
        n = next(old for k, old, _ in diffs if k == "world_size")
        flags += f" on {n} GPUs/processes"
    raise LaunchError(
        f"--resume: {ckpt.name} was trained with {was}, this run asks {now}",
        hint=f"rerun with {flags.strip()}, or start a new --output-dir",
    )


def new_run(run: Any, model_kind: str) -> dict[str, Any]:
    """This run's side for resume_point(new=...), from its Run (what train.json will say)."""
    model = run.model.model
    if model_kind == "local" and model is not None:
        model = str(Path(model).expanduser().resolve())
    return flat({"run": run.to_dict(), "model_kind": model_kind, "paths": {"model": model}})
