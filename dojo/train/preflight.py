"""Everything ``dojo train`` checks before it launches, cheaply and without the training stack.

GPUs, extras (``importlib.util.find_spec``, nothing imported), model config, weights (their
headers: dojo.train.model_files) and tokenizer files, chat template, data (>= 1 valid row),
output folder (writable, free disk, no run clobbered), resume point. Each failure is one
DojoError naming the flag and the fix.
"""

import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dojo import _output
from dojo import gpus as gpus_mod
from dojo.errors import DataError, EstimateError, LaunchError, MissingExtraError
from dojo.paths import RUN_FILE
from dojo.run.groups.devices import DeviceOptions
from dojo.run.machine import Machine, assumed_cuda, host_memory_gib, local
from dojo.run.run import Run
from dojo.safe_load import shorten
from dojo.train import checkpoints, model_files
from dojo.train.launch import Devices

GIB = 1024**3
# Module -> pip name; what every run imports (the worker), plus per-method extras.
_EXTRAS = {"torch": "torch", "transformers": "transformers", "deepspeed": "deepspeed"}
_EXTRAS_BY_METHOD = {
    "lora": {"peft": "peft"},
    "qlora": {"peft": "peft", "bitsandbytes": "bitsandbytes"},
}
# DeepSpeed checkpoint bytes per parameter: fp32 master + Adam m + v (12) + 16-bit weights (2);
# LoRA checkpoints hold only the trainable adapter, same bytes per trainable parameter.
_CKPT_BYTES_PER_PARAM = 14
_DISK_MARGIN = 1.2  # 20% for tokenizer, logs, TensorBoard and filesystem rounding
DRY_RUN_MARK = ".dojo-dry-run"
"""A folder holding only what --dry-run wrote is not "an earlier run" to protect."""
DRY_RUN_FILES = {DRY_RUN_MARK, RUN_FILE, "ds_config.json", "tiny-model"}
WEIGHT_FILES = ("*.safetensors", "pytorch_model*.bin", "model.safetensors.index.json")


@dataclass(frozen=True)
class Plan:
    """The checked, resolved run: what the CLI writes to train.json and launches."""

    run: Run
    devices: Devices
    model_kind: str
    """tiny (bundled config, random weights) | local (folder) | hub (id, downloaded by the worker)."""
    spec: Any
    """dojo.modelspec.ModelSpec of the model."""
    data_paths: tuple[str, ...]
    data_info: dict[str, Any] = field(default_factory=dict)
    resume_from: str | None = None
    estimate: Any = None
    notes: tuple[str, ...] = ()
    """Lines for stderr before launch (warnings and what is in effect)."""


def place(
    opts: DeviceOptions, present: list[Any], *, dry_run: bool, visible: str | None = None
) -> tuple[Machine, Devices, list[str]]:
    """Where the ranks run: --nproc CPU processes, --gpus/--num-gpus/all GPUs, or the hostfile.

    GPUs named on a machine without them are refused, except with --dry-run, which plans them
    for an assumed CUDA machine (the printed command is for that machine). ``visible``: this
    process's CUDA_VISIBLE_DEVICES, which picks among the GPUs here (see _visible_ids)."""
    notes: list[str] = []
    gpus, num, nproc = opts.gpus, opts.num_gpus, opts.nproc
    if sum(x is not None for x in (gpus, num, nproc)) > 1:
        raise LaunchError(
            "--gpus, --num-gpus and --nproc exclude each other",
            hint="--gpus 0,1 names GPUs, --num-gpus 2 counts them, --nproc N is for CPU runs",
        )
    if opts.hostfile is None and opts.num_nodes > 1:
        raise LaunchError(
            f"--num-nodes {opts.num_nodes} needs --hostfile FILE listing the machines",
            hint="see DeepSpeed's hostfile format: one 'host slots=N' line per machine",
        )
    if opts.hostfile is not None:
        if gpus not in (None, "all"):
            raise LaunchError(
                f"--gpus {shorten(gpus)} with --hostfile: the hostfile's slots= choose the GPUs "
                "per machine",
                hint="drop --gpus, or edit slots= in the hostfile",
            )
        notes += _hostfile_notes(opts.hostfile, opts.num_nodes)
    if nproc is not None:
        return _cpu(), Devices("cpu", tuple(range(nproc))), notes
    here = sorted(g.index for g in present)
    if present:
        machine = local(present)
    if opts.hostfile is not None:
        if visible is not None:
            notes.append(f"warning: {gpus_mod.show_visible(visible)} is not used: the hostfile's "
                         "slots= pick the GPUs on each machine")  # fmt: skip
        return (machine if present else assumed_cuda()), Devices("cuda", tuple(here)), notes
    if visible is not None and present:
        ids, said = _visible_ids(gpus, num, visible, here)
        notes += said
    elif gpus is None and num is None:
        if not present:
            return _cpu(), Devices("cpu", (0,)), notes
        return machine, Devices("cuda", tuple(here)), notes
    elif num is not None:
        if present and num > len(here):
            raise LaunchError(
                f"--num-gpus {num}: this machine has {len(here)} GPU(s)",
                hint=f"use --num-gpus {len(here)} or fewer, or --gpus to name them",
            )
        ids = tuple(here[:num]) if present else tuple(range(num))
    elif gpus is None:  # unreachable: neither flag was handled above
        raise AssertionError("place: no --gpus and no --num-gpus")
    elif present:
        ids = gpus_mod.parse_gpus(gpus, here)
    else:
        if gpus.strip() == "all":
            raise LaunchError(
                "--gpus all: no NVIDIA GPU found",
                hint="name them (--gpus 0,1) to plan with --dry-run, or use --nproc N on the CPU",
            )
        ids = gpus_mod.parse_gpus(gpus, None)  # syntax only: nothing is here
    if not present:
        shown = f"--gpus {shorten(gpus)}" if gpus is not None else f"--num-gpus {num}"
        if not dry_run:
            raise LaunchError(
                f"{shown}: no NVIDIA GPU on this machine",
                hint="use --dry-run to write the plan and command for a GPU machine, or --nproc N for a CPU run",
            )
        notes.append(
            f"warning: {shown}: these GPUs are not on this machine; planned for an assumed CUDA machine with dojo's GPU extras"
        )
        return assumed_cuda(), Devices("cuda", ids), notes
    # The verdict is against the smallest of the GPUs the run uses, not of all on the machine.
    smallest = min(g.memory_gib for g in present if g.index in ids)
    return replace(machine, gpu_memory_gib=smallest), Devices("cuda", ids), notes


def _visible_ids(
    gpus: str | None, num: int | None, visible: str, here: list[int]
) -> tuple[tuple[int, ...], list[str]]:
    """The GPUs a run uses where CUDA_VISIBLE_DEVICES is set, as DeepSpeed's own runner reads it
    (nvidia-smi's indices). The runner sets CUDA_VISIBLE_DEVICES for each rank from --include,
    and would drop the user's with a notice: dojo turns it into --include. Without --gpus it
    picks the GPUs (--num-gpus takes the first of them); --gpus naming a GPU it hides is refused
    rather than one of the two silently ignored."""
    shown = gpus_mod.show_visible(visible)
    seen = gpus_mod.visible_gpus(visible, here)
    if gpus is not None and gpus.strip() != "all":
        ids = gpus_mod.parse_gpus(gpus, here)
        hidden = [i for i in ids if i not in seen]
        if hidden:
            raise LaunchError(
                f"--gpus {shorten(gpus)}: GPU {hidden[0]} is hidden by {shown}",
                hint=f"unset {gpus_mod.VISIBLE_ENV} to use --gpus {gpus.strip()} (nvidia-smi's "
                f"numbers), or drop --gpus to use {_gpu_words(seen)}",
            )
        return ids, []
    if num is not None:
        if num > len(seen):
            raise LaunchError(
                f"--num-gpus {num}: {shown} shows {len(seen)} GPU(s)",
                hint=f"use --num-gpus {len(seen)} or fewer, or unset {gpus_mod.VISIBLE_ENV} to "
                "count every GPU here",
            )
        ids = tuple(sorted(seen[:num]))
        return ids, [f"assumed: {_gpu_words(ids)}: --num-gpus {num} takes the first of {shown} "
                     "(nvidia-smi's numbers)"]  # fmt: skip
    return tuple(sorted(seen)), [f"assumed: {_gpu_words(seen)} from {shown} (nvidia-smi's numbers)"]


def _gpu_words(ids: tuple[int, ...]) -> str:
    return f"GPU {ids[0]}" if len(ids) == 1 else f"GPUs {gpus_mod.describe_ids(list(ids))}"


def _hostfile_notes(path: str, num_nodes: int) -> list[str]:
    """The hostfile is read here, before launch: DeepSpeed's runner takes a missing one for
    "this machine only" and a bad line for a traceback after launch."""
    from dojo.train import hostfile

    hosts = hostfile.read_hostfile(path)
    hostfile.check_nodes(hosts, num_nodes, path)
    if len(hosts) > num_nodes:
        return [
            f"note: --hostfile lists {len(hosts)} machines; this run uses the first {num_nodes} "
            f"(--num-nodes {num_nodes})"
        ]
    return []


def _cpu() -> Machine:
    return Machine(cuda=False, host_memory_gib=host_memory_gib())


def check_extras(
    method: str, devices: Devices, *, dry_run: bool = False, objective: str = "sft"
) -> None:
    need = {**_EXTRAS, **_EXTRAS_BY_METHOD.get(method, {})}
    if objective != "sft":
        need["trl"] = "trl"  # the preference trainers
    missing = [pip for mod, pip in need.items() if importlib.util.find_spec(mod) is None]
    if missing and not dry_run:
        what = f"--method {method}" + (f" --objective {objective}" if objective != "sft" else "")
        raise MissingExtraError(
            f"dojo train {what} needs {', '.join(missing)}, not installed",
            hint="pip install -e '.[train]' in dojo's clone",
        )
    if not dry_run:
        from dojo.train.toolchain import clear_stale_build_lock, cpu_compiler_error

        if devices.kind == "cpu":
            err = cpu_compiler_error()
            if err is not None:
                raise err
        # CPU runs build deepspeed_shm_comm; GPU runs cpu_adam (offload) and other ops.
        for lock in clear_stale_build_lock():
            _output.info(f"note: removed {lock}, a build lock left by a killed run")
    if method == "qlora" and devices.kind != "cuda":
        raise LaunchError(
            "--method qlora needs an NVIDIA GPU: bitsandbytes 4-bit kernels do not run on the CPU",
            hint="use --method lora on this machine, or run on a GPU machine",
        )


def resolve_model(
    model: str | None, revision: str | None = None, *, dry_run: bool = False
) -> tuple[str, Any]:
    """(kind, ModelSpec) for --model: the bundled tiny model, a local folder, or a Hub id.

    A Hub id offline must be in the cache, weights included: the run loads them. A dry run only
    plans (often for another machine), so there a built-in architecture of the same name may
    stand in for an uncached id, as in dojo estimate."""
    from dojo.modelspec import resolve_model as _resolve

    if revision is not None and (model is None or Path(model).expanduser().exists()):
        raise LaunchError(
            f"--revision {revision} applies to a Hub id (org/name), not to "
            + ("the bundled tiny model" if model is None else f"the local folder {model}"),
            hint="drop --revision, or give --model as a Hub id",
        )
    if model is None:
        from dojo.train.tiny import TINY_CONFIG

        return "tiny", _resolve(str(TINY_CONFIG))
    path = Path(model).expanduser()
    if path.exists():
        if not path.is_dir():
            raise LaunchError(
                f"--model {model}: is a file; dojo train needs the model folder",
                hint="point --model at the folder holding config.json (and the weights)",
            )
        # As a path: a folder named like a built-in (Llama-3.2-1B) is that folder, as the worker
        # loads it, never the built-in shape of the same name.
        return "local", _resolve(model if model.startswith((".", "/", "~")) else f"./{model}")
    _refuse_builtin_name(model)
    if model.startswith((".", "/", "~")) or model.endswith("/") or model.count("/") != 1:
        raise LaunchError(
            f"--model {model}: no such folder",
            hint="give a local model folder (with config.json) or a Hub id like org/name",
        )
    try:
        spec = _resolve(model, revision=revision, fallback=dry_run, for_train=True)
    except EstimateError as e:  # offline or unknown id: the run would fail at download anyway
        raise LaunchError(e.message, hint=e.hint) from None
    if not dry_run:
        _check_weights_offline(model, revision)
    return "hub", spec


def _refuse_builtin_name(model: str) -> None:
    """Size aliases (7b) and architecture names (llama-3.1-8b) are shapes dojo knows, for
    estimate and config: nothing to load weights or a tokenizer from."""
    from dojo.modelspec import builtin_name

    arch = builtin_name(model)
    if arch is None:
        return
    shape = f" ({arch})" if arch != model.strip().lower() else ""
    raise LaunchError(
        f"--model {model}{shape}: a built-in model shape without weights, for dojo estimate and "
        "dojo config; dojo train needs a model folder or a Hub id",
        hint="give the model's folder (config.json, weights, tokenizer) or its Hub id, e.g. "
        "--model meta-llama/Llama-2-7b-hf",
    )


def _check_weights_offline(repo_id: str, revision: str | None) -> None:
    """Offline, the worker's from_pretrained reads the cache only: refuse before launching when
    the weights are not there (`hf download ID config.json` fetched the config alone)."""
    from dojo import hub

    if hub.offline() and not hub.weights_cached(repo_id, revision):
        rev = f" --revision {revision}" if revision else ""
        raise LaunchError(
            f"--model {repo_id}: its weights are not in the local Hugging Face cache and "
            "HF_HUB_OFFLINE is set",
            hint=f"`hf download {repo_id}{rev}` while online, or --model a local model folder",
        )


def has_weights(folder: str | Path) -> bool:
    p = Path(folder)
    return p.is_dir() and any(any(p.glob(pattern)) for pattern in WEIGHT_FILES)


def check_init(run: Run, model_kind: str) -> None:
    """A model folder without weights trains random weights only when asked (--init random)."""
    if (
        model_kind == "local"
        and run.model.init == "pretrained"
        and not has_weights(str(run.model.model))
    ):
        raise LaunchError(
            f"--model {run.model.model}: the folder has a config.json but no weights "
            "(*.safetensors or pytorch_model*.bin)",
            hint="copy the weights there, or pass --init random to train from seeded random weights",
        )


def check_model_files(run: Run, model_kind: str) -> None:
    """A local folder's weight headers (unless --init random) and JSON files (config, tokenizer)
    read whole: a damaged file is named here, not in every rank's traceback at load."""
    if model_kind != "local":
        return
    model = str(run.model.model)
    bad = model_files.damaged(Path(model).expanduser(), weights=run.model.init == "pretrained")
    if bad:
        name, why = bad
        raise LaunchError(
            f"--model {model}: {name} {why}",
            hint="the file is damaged: copy it again from where the model came from (the "
            "download, or the run that saved it)",
        )


def check_quantized(run: Run, spec: Any) -> None:
    """A checkpoint quantized before training cannot be trained in full: transformers' Trainer
    refuses a quantized model without adapters (trainer_utils.validate_quantization_for_training).
    What adapters on it can be estimated (and so launched) the estimate decides."""
    q = getattr(spec, "quantization", "")
    if q and run.model.method == "full":
        bnb4 = q == "bitsandbytes 4-bit"
        raise LaunchError(
            f"--method full on {spec.name}: its weights are {q} (config.json quantization_config), "
            "and quantized weights cannot be trained in full",
            hint="use --method qlora (adapters on the 4-bit base)"
            if bnb4
            else "train the unquantized model it was made from (--method qlora quantizes it "
            "with bitsandbytes at load)",
        )


def check_template(template: str | None, model: str | None, model_kind: str) -> None:
    """--template must resolve; without it a local model must ship its own chat template."""
    from dojo.chat.template import NoChatTemplate, load_template

    if template is not None:
        load_template(template, flag="--template")
    elif model_kind == "local":
        from dojo.chat.check import check_trains

        folder = str(Path(str(model)).expanduser())
        try:
            own = load_template(folder, flag="--model")
        except NoChatTemplate:  # one that does not parse says so itself
            raise NoChatTemplate(
                f"--model {model}: the model folder has no chat template",
                hint="pass --template NAME, e.g. --template chatml (see 'dojo chat-template list')",
            ) from None
        check_trains(folder, flag="--model", template=own)


def default_data(objective: str = "sft") -> tuple[str, ...]:
    """The bundled demo data: chats for SFT, preference pairs for the other objectives."""
    from dojo.paths import templates_dir

    name = "demo_chat.jsonl" if objective == "sft" else "demo_preference.jsonl"
    return (str(templates_dir() / "data" / name),)


def check_data(
    data: tuple[str, ...],
    flag: str = "--data",
    columns: tuple[str, ...] = (),
    ratios: tuple[float, ...] = (),
    objective: str = "sft",
) -> dict[str, Any]:
    """Local files must hold >= 1 valid row (of ``objective``: conversations for sft,
    preference rows otherwise); Hub datasets, Parquet and CSV are checked cheaply (cache,
    schema, first rows) and read by the worker."""
    from dojo.train import sources
    from dojo.train.rows import read_rows

    try:
        if flag == "--data":  # weights: all or none, one ratio per source
            parsed = sources.parse_all(list(data), ratios)
        else:
            parsed = [sources.parse(d, flag) for d in data]
        sources.check_repeats(parsed, flag)
        report = read_rows(
            list(data),
            columns=sources.parse_columns(columns),
            objective=objective,
            # Every --data source is read here at once; --eval-data need not hold its columns.
            require_columns=flag == "--data",
        )
    except DataError as e:  # rows.py names --data; the same reader checks --eval-data
        if flag == "--data" or not e.message.startswith("--data"):
            raise
        raise DataError(flag + e.message[len("--data") :], hint=e.hint) from None
    info: dict[str, Any] = {
        "valid": report.valid,
        "bad": len(report.bad),
        "passthrough": list(report.passthrough),
        "summary": report.summary(),
    }
    if not report.rows and not report.passthrough:
        first = f"; first problem: {report.bad[0][0]}: {report.bad[0][1]}" if report.bad else ""
        raise DataError(
            f"{flag} {', '.join(data)}: no valid row{first}",
            hint=PREFERENCE_HINT
            if objective != "sft"
            else "each row needs messages (OpenAI), conversations (ShareGPT) or instruction/output (Alpaca)",
        )
    return info


PREFERENCE_HINT = (
    "each row needs prompt, chosen and rejected (TRL), conversations + chosen + rejected "
    "(LLaMA-Factory), or for kto prompt + completion + label (docs/train.md#preference-tuning)"
)


def check_eval_data(run: Run, train_info: dict[str, Any]) -> str:
    """--eval-data is checked like --data; --eval-split must leave rows on both sides. Returns
    the line to print ("" without eval)."""
    if run.data.eval_data:
        info = check_data(run.data.eval_data, flag="--eval-data", columns=run.data.data_columns,
                          objective=run.objective.objective)  # fmt: skip
        return str(info["summary"])
    if run.data.eval_split is None:
        return ""
    n = train_info["valid"]
    held = max(1, round(n * run.data.eval_split))
    if not train_info["passthrough"] and n - held < 1:
        raise DataError(
            f"--eval-split {run.data.eval_split}: {n} valid row(s), none would be left to train on",
            hint="add rows, or give held-out rows with --eval-data FILE",
        )
    return f"{held} of {n} valid rows held out (--eval-split {run.data.eval_split}, seed {run.loop.seed})"


def check_output(run: Run, spec: Any, *, force: bool) -> None:
    """Writable, enough free disk, and no earlier run overwritten without --force."""
    out = Path(run.output.output_dir)
    if out.exists() and not out.is_dir():
        raise LaunchError(
            f"--output-dir {run.output.output_dir}: is a file", hint="choose a folder path"
        )
    parent = out
    while not parent.exists():
        parent = parent.parent
    _check_writable(run.output.output_dir, out, parent)
    if holds_run(out) and not run.output.resume and not force:
        raise LaunchError(
            f"--output-dir {run.output.output_dir} already holds files (an earlier run?)",
            hint="pass --resume to continue it, --force to start over in it (its checkpoints are "
            "removed), or choose another folder",
        )
    if spec is not None:
        trainable = spec.params if run.model.method == "full" else spec.lora_params(run.lora.lora_r)
        per_ckpt = trainable * _CKPT_BYTES_PER_PARAM
        final = spec.params * 2 if run.model.method == "full" or run.lora.merge else trainable * 2
        final = final if run.output.save_model else 0  # --no-save-model writes no final weights
        n_ckpt = run.output.save_total_limit if run.output.save_steps > 0 else 0
        need = int((per_ckpt * n_ckpt + final) * _DISK_MARGIN)
        free = shutil.disk_usage(parent).free
        if free < need:
            what = f"{n_ckpt} checkpoints" + (" + final weights" if final else "")
            raise LaunchError(
                f"--output-dir {run.output.output_dir}: {_size(free)} free, this run writes about "
                f"{_size(need)} ({what})",
                hint="free disk space, lower --save-total-limit, or choose a folder on a larger disk",
            )


def _check_writable(flag_value: str, out: Path, parent: Path) -> None:
    """``parent`` (``out``, or its nearest existing folder) takes new files and folders. A folder
    still to be made is made and removed once, in ``parent``: root passes the permission check
    where the filesystem refuses anything new (/proc, /sys)."""
    if not os.access(parent, os.W_OK | os.X_OK):
        raise LaunchError(
            f"--output-dir {flag_value}: {parent} is not writable", hint="choose another folder"
        )
    if parent == out:
        return  # it exists: a run's folder is never written to by a check
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".dojo-check-", dir=parent))
    except OSError as e:
        raise LaunchError(
            f"--output-dir {flag_value}: no folder can be created in {parent} ({e.strerror})",
            hint="choose a folder on a filesystem you can write to",
        ) from None


def _size(n: float) -> str:
    """GiB, or MiB below a tenth of one: a tiny model's run does not write "0.0 GiB"."""
    return f"{n / GIB:.1f} GiB" if n >= GIB / 10 else f"{n / 2**20:.0f} MiB"


def holds_run(folder: str | Path) -> bool:
    """The folder holds files other than an earlier dry run's: a run that a launch overwrites
    only with --resume or --force, and a dry run never touches."""
    out = Path(folder)
    held = {p.name for p in out.iterdir()} if out.is_dir() else set()
    return bool(held) and not (DRY_RUN_MARK in held and held <= DRY_RUN_FILES)


def check_resume(run: Run, model_kind: str = "tiny") -> str | None:
    """The checkpoint to continue from; other settings than it was trained with are refused."""
    from dojo.train import resume_check

    if not run.output.resume:
        return None
    new = resume_check.new_run(run, model_kind)
    return str(checkpoints.resume_point(run.output.output_dir, run.world_size, new=new))
