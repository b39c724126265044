"""Everything ``dojo train`` checks before it launches, cheaply and without the training stack.

GPUs, extras (``importlib.util.find_spec``, nothing imported), model config, chat template, data
(>= 1 valid row), output folder (writable, free disk, no run clobbered), resume point, and the
``dojo estimate`` verdict for this exact run. Each failure is one DojoError naming flag and fix.
"""

import importlib.util
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dojo import gpus as gpus_mod
from dojo.errors import DataError, EstimateError, LaunchError, MissingExtraError
from dojo.train import checkpoints
from dojo.train.config import TrainConfig
from dojo.train.launch import Devices

GIB = 1024**3
# Module -> pip name; what every run imports (worker.py), plus per-method extras.
_EXTRAS = {"torch": "torch", "transformers": "transformers", "deepspeed": "deepspeed"}
_EXTRAS_BY_METHOD = {
    "lora": {"peft": "peft"},
    "qlora": {"peft": "peft", "bitsandbytes": "bitsandbytes"},
}
# DeepSpeed checkpoint bytes per parameter: fp32 master + Adam m + v (12) + 16-bit weights (2);
# LoRA checkpoints hold only the trainable adapter, same bytes per trainable parameter.
_CKPT_BYTES_PER_PARAM = 14
_DISK_MARGIN = 1.2  # 20% for tokenizer, logs, TensorBoard and filesystem rounding


@dataclass(frozen=True)
class Plan:
    """The checked, resolved run: what the CLI writes to train.json and launches."""

    cfg: TrainConfig
    devices: Devices
    precision: str
    """bf16 | fp16 | fp32 actually used (auto resolved: bf16 on GPU, fp32 on CPU)."""
    model_kind: str
    """tiny (bundled config, random weights) | local (folder) | hub (id, downloaded by the worker)."""
    spec: Any
    """dojo.modelspec.ModelSpec of the model, or None when its config could not be read."""
    data_paths: tuple[str, ...]
    data_info: dict[str, Any] = field(default_factory=dict)
    resume_from: str | None = None
    estimate: Any = None
    notes: tuple[str, ...] = ()
    """Lines for stderr before launch (warnings and what is in effect)."""

    @property
    def estimated_gpu_gib(self) -> float | None:
        return None if self.estimate is None else round(float(self.estimate.gpu_total_gib), 3)


def resolve_devices(cfg: TrainConfig, present: list[Any] | None = None) -> Devices:
    """--gpus against nvidia-smi; no GPU (or --nproc) = N CPU processes."""
    found = gpus_mod.list_gpus() if present is None else present
    if cfg.nproc is not None:
        return Devices("cpu", tuple(range(cfg.nproc)))
    if cfg.hostfile is not None:
        if cfg.gpus not in (None, "all"):
            raise LaunchError(
                f"--gpus {cfg.gpus} with --hostfile: the hostfile's slots= choose the GPUs per machine",
                hint="drop --gpus, or edit slots= in the hostfile",
            )
        return Devices("cuda", tuple(g.index for g in found))
    if cfg.gpus is None:
        if not found:
            return Devices("cpu", (0,))
        return Devices("cuda", tuple(sorted(g.index for g in found)))
    return Devices("cuda", gpus_mod.parse_gpus(cfg.gpus, [g.index for g in found]))


def check_extras(cfg: TrainConfig, devices: Devices) -> None:
    need = {**_EXTRAS, **_EXTRAS_BY_METHOD.get(cfg.method, {})}
    missing = [pip for mod, pip in need.items() if importlib.util.find_spec(mod) is None]
    if missing:
        raise MissingExtraError(
            f"dojo train --method {cfg.method} needs {', '.join(missing)}, not installed",
            hint="pip install 'dojo[train]'",
        )
    if cfg.method == "qlora" and devices.kind != "cuda":
        raise LaunchError(
            "--method qlora needs an NVIDIA GPU: bitsandbytes 4-bit kernels do not run on the CPU",
            hint="use --method lora on this machine, or run on a GPU machine",
        )


def resolve_model(cfg: TrainConfig) -> tuple[str, Any]:
    """(kind, ModelSpec) for --model: a local folder with config.json, or a Hub id."""
    from dojo.modelspec import resolve_model as _resolve

    if cfg.model is None:
        from dojo.train.tiny import TINY_CONFIG

        return "tiny", _resolve(str(TINY_CONFIG))
    ref = cfg.model
    path = Path(ref).expanduser()
    if path.exists():
        if not path.is_dir():
            raise LaunchError(
                f"--model {ref}: is a file; dojo train needs the model folder",
                hint="point --model at the folder holding config.json (and the weights)",
            )
        return "local", _resolve(str(path))
    if ref.startswith((".", "/", "~")) or ref.endswith("/") or ref.count("/") != 1:
        raise LaunchError(
            f"--model {ref}: no such folder",
            hint="give a local model folder (with config.json) or a Hub id like org/name",
        )
    try:
        return "hub", _resolve(ref)
    except EstimateError as e:  # offline or unknown id: the run would fail at download anyway
        raise LaunchError(e.message, hint=e.hint) from None


def check_template(cfg: TrainConfig, model_kind: str) -> None:
    """--template must resolve; without it a local model must ship its own chat template."""
    from dojo.chat.template import load_template
    from dojo.errors import TemplateError

    if cfg.template is not None:
        load_template(cfg.template, flag="--template")
    elif model_kind == "local":
        try:
            load_template(str(Path(str(cfg.model)).expanduser()), flag="--model")
        except TemplateError:
            raise TemplateError(
                f"--model {cfg.model}: the model folder has no chat template",
                hint="pass --template NAME, e.g. --template chatml (see 'dojo chat-template list')",
            ) from None


def default_data() -> tuple[str, ...]:
    from dojo.paths import templates_dir

    return (str(templates_dir() / "data" / "demo_chat.jsonl"),)


def check_data(cfg: TrainConfig, data: tuple[str, ...]) -> dict[str, Any]:
    """Local files must hold >= 1 valid row; Hub datasets and parquet are read by the worker."""
    from dojo.train.rows import read_rows

    report = read_rows(list(data))
    info: dict[str, Any] = {
        "valid": len(report.rows),
        "bad": len(report.bad),
        "passthrough": list(report.passthrough),
        "summary": report.summary(),
    }
    if not report.rows and not report.passthrough:
        first = f"; first problem: {report.bad[0][0]}: {report.bad[0][1]}" if report.bad else ""
        raise DataError(
            f"--data {', '.join(data)}: no valid row{first}",
            hint="each row needs messages (OpenAI), conversations (ShareGPT) or instruction/output (Alpaca)",
        )
    return info


def check_output(cfg: TrainConfig, spec: Any, *, force: bool) -> None:
    """Writable, enough free disk, and no earlier run overwritten without --force."""
    out = Path(cfg.output_dir)
    if out.exists() and not out.is_dir():
        raise LaunchError(f"--output-dir {cfg.output_dir}: is a file", hint="choose a folder path")
    parent = out
    while not parent.exists():
        parent = parent.parent
    if not os.access(parent, os.W_OK):
        raise LaunchError(
            f"--output-dir {cfg.output_dir}: {parent} is not writable", hint="choose another folder"
        )
    if out.is_dir() and not cfg.resume and not force and any(out.iterdir()):
        raise LaunchError(
            f"--output-dir {cfg.output_dir} already holds files (an earlier run?)",
            hint="pass --resume to continue it, --force to train into it anyway, or choose another folder",
        )
    if spec is not None:
        trainable = spec.params if cfg.method == "full" else spec.lora_params(cfg.lora_r)
        per_ckpt = trainable * _CKPT_BYTES_PER_PARAM
        final = spec.params * 2 if cfg.method == "full" or cfg.merge else trainable * 2
        n_ckpt = cfg.save_total_limit if cfg.save_steps > 0 else 0
        need = int((per_ckpt * n_ckpt + final) * _DISK_MARGIN)
        free = shutil.disk_usage(parent).free
        if free < need:
            raise LaunchError(
                f"--output-dir {cfg.output_dir}: {free / GIB:.1f} GiB free, this run writes about "
                f"{need / GIB:.1f} GiB ({n_ckpt} checkpoints + final weights)",
                hint="free disk space, lower --save-total-limit, or choose a folder on a larger disk",
            )


def check_resume(cfg: TrainConfig, devices: Devices) -> str | None:
    if not cfg.resume:
        return None
    return str(checkpoints.resume_point(cfg.output_dir, devices.world_size))


def resolve_precision(cfg: TrainConfig, devices: Devices) -> str:
    if cfg.precision != "auto":
        if devices.kind == "cpu" and cfg.precision == "fp16":
            raise LaunchError(
                "--precision fp16 needs a GPU", hint="use --precision fp32 or bf16 on CPU"
            )
        return cfg.precision
    # bf16 = the H100/H200/A100 default (no loss scaling); the CPU path trains in fp32.
    return "bf16" if devices.kind == "cuda" else "fp32"
