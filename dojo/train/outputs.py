"""What a finished run folder holds, for `dojo chat` and `dojo export`: torch-free checks.

``inspect(RUN_DIR)`` reads RUN_DIR/train.json (the Run and the paths the launcher chose)
and says what to load: a full model, a LoRA/QLoRA adapter with its base, or RUN_DIR/merged. A
``checkpoint-N`` folder of a run works too (the record is its parent's). Every problem is one
DojoError naming RUN_DIR and the fix; nothing here imports torch.
"""

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dojo.errors import DojoError, MissingExtraError, TemplateError
from dojo.paths import RUN_FILE
from dojo.run.run import Run
from dojo.train import model_files
from dojo.train.preflight import DRY_RUN_MARK, has_weights

INIT_DIR = "init-weights"  # = dojo.train.worker.main.INIT_DIR (that module imports torch)
MERGED = "merged"
ADAPTER_FILES = ("adapter_model.safetensors", "adapter_model.bin")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
EXPORT_MARK = ".dojo-export"
"""Written into every export folder: --force replaces a folder only when it holds one."""


@dataclass(frozen=True)
class RunOutput:
    """One run's trained model, ready to load."""

    folder: Path
    """The folder given on the command line (a run folder or one of its checkpoint-N)."""
    run: Run
    kind: str
    """full | adapter | merged."""
    weights: Path
    """full/merged: the model folder; adapter: the adapter folder."""
    base: str | None
    """adapter only: the base model (a folder with weights, or a Hub id)."""
    tokenizer: str
    """The tokenizer the run saved (a folder), else the one it trained with (folder or Hub id)."""
    model_tokenizer: str
    """The tokenizer the run trained with (record's paths.tokenizer): its chat template is the
    one the run used when --template was not given (dojo.train.worker.data.pick_template)."""

    def describe(self) -> str:
        if self.kind == "adapter":
            return f"{self.run.model.method} adapter {self.weights} on {self.base}"
        return f"{'merged model' if self.kind == 'merged' else 'model'} {self.weights}"


def inspect(path: str | Path, *, use_merged: bool = True, flag: str = "RUN_DIR") -> RunOutput:
    """What ``path`` holds; ``use_merged=False`` prefers the adapter over RUN_DIR/merged."""
    folder = Path(path).expanduser()
    where = f"{flag} {str(path)!r}"
    if not folder.is_dir():
        what = "is a file" if folder.exists() else "does not exist"
        raise DojoError(f"{where} {what}", hint="give the --output-dir of a `dojo train` run")
    folder = folder.resolve()
    root = folder
    if not (folder / RUN_FILE).is_file():
        if folder.name.startswith("checkpoint-") and (folder.parent / RUN_FILE).is_file():
            root = folder.parent
        else:
            raise DojoError(
                f"{where} has no {RUN_FILE}: not a `dojo train` run folder",
                hint="give the --output-dir of a `dojo train` run",
            )
    run, rec = read_record(root / RUN_FILE, where)
    out = _find_model(folder, root, run, rec, where, use_merged=use_merged)
    check_files(out, where)
    return out


def _find_model(
    folder: Path, root: Path, run: Run, rec: dict[str, Any], where: str, *, use_merged: bool
) -> RunOutput:
    paths = rec.get("paths") or {}
    rebase = _rebaser(str(paths.get("run_dir") or root), root)
    model_tokenizer = rebase(str(paths.get("tokenizer") or run.model.model or ""))
    tokenizer = str(folder) if _has_tokenizer(folder) else model_tokenizer
    merged = folder / MERGED
    adapter = (folder / "adapter_config.json").is_file() and any(
        (folder / f).is_file() for f in ADAPTER_FILES
    )
    if use_merged and (merged / "config.json").is_file() and has_weights(merged):
        tok = str(merged) if _has_tokenizer(merged) else tokenizer
        return RunOutput(folder, run, "merged", merged, None, tok, model_tokenizer)
    if adapter:
        base = _base(rebase(str(paths.get("model") or "")), root, rec, where)
        return RunOutput(folder, run, "adapter", folder, base, tokenizer, model_tokenizer)
    if (folder / "config.json").is_file() and has_weights(folder):
        return RunOutput(folder, run, "full", folder, None, tokenizer, model_tokenizer)
    raise _no_model(folder, run, where)


def check_files(out: RunOutput, where: str) -> None:
    """Every file the loaders will read looks whole (model_files: safetensors headers, JSON), so
    a damaged copy is one error naming the file instead of a loader's traceback."""
    folders = [out.weights, out.base, out.tokenizer]
    seen: set[Path] = set()
    for f in folders:
        if f is None or not Path(f).is_dir() or Path(f).resolve() in seen:
            continue
        seen.add(Path(f).resolve())
        bad = model_files.damaged(f)
        if bad:
            name, why = bad
            raise DojoError(
                f"{where}: {_shown(Path(f) / name, out.folder)} {why}",
                hint=f"the file is damaged: {_fix(f, out)}",
            )


def _shown(path: Path, folder: Path) -> str:
    """A file of the run folder by its name there (model.safetensors, init-weights/...)."""
    try:
        return str(path.resolve().relative_to(folder))
    except ValueError:
        return str(path)


def _fix(folder: str | Path, out: RunOutput) -> str:
    root = out.folder.parent if out.folder.name.startswith("checkpoint-") else out.folder
    if not Path(folder).resolve().is_relative_to(root):
        return "copy or download that model's files again"
    if Path(folder).resolve() == out.folder and out.folder != root:
        return "copy the run folder again, or use another of its checkpoint-N folders"
    if Path(folder).resolve() == out.folder:
        return "copy the run folder again, use one of its checkpoint-N folders, or train again"
    return "copy the run folder again, or train again"


def read_record(path: Path, where: str) -> tuple[Run, dict[str, Any]]:
    import json

    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
        return Run.from_dict(rec["run"]), rec
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DojoError(
            f"{where}: {path.name} cannot be read ({type(e).__name__}: {e})",
            hint="it was written by another dojo version or edited; train again with this one",
        ) from None


def _rebaser(recorded: str, actual: Path) -> Any:
    """Paths inside the recorded run folder follow the folder when it was moved or copied."""
    old = recorded.rstrip("/")

    def rebase(p: str) -> str:
        if p == old or p.startswith(old + "/"):
            return str(actual) + p[len(old) :]
        return p

    return rebase


def _has_tokenizer(folder: Path) -> bool:
    return any((folder / f).is_file() for f in TOKENIZER_FILES)


def _base(model: str, root: Path, rec: dict[str, Any], where: str) -> str:
    """The weights the adapter trained on, as the worker chose them (materialize_random_weights):
    the model folder when it has weights, else the seeded random ones in RUN_DIR/init-weights."""
    if has_weights(model):
        return model
    if Path(model).is_dir() or rec.get("model_kind") == "tiny":
        init = root / INIT_DIR
        if has_weights(init):
            return str(init)
        raise DojoError(
            f"{where}: the adapter's base weights are gone (no weights in {model}, no {init})",
            hint=f"restore {init} (the run's seeded random weights) or the model's weights",
        )
    if rec.get("model_kind") == "hub":
        return model  # a Hub id: from the local cache, or downloaded
    raise DojoError(
        f"{where}: the adapter's base model {model!r} does not exist any more",
        hint="put the base model back at that path (see paths.model in train.json)",
    )


def _no_model(folder: Path, run: Run, where: str) -> DojoError:
    if (folder / DRY_RUN_MARK).exists():
        return DojoError(
            f"{where} is a dry run: nothing was trained",
            hint="run the printed command, or `dojo train` without --dry-run",
        )
    if not run.output.save_model:
        return DojoError(
            f"{where} has no model: the run was trained with --no-save-model",
            hint="train with --save-model (the default) to write the model or adapter",
        )
    ckpts = sorted(
        (p for p in folder.glob("checkpoint-*") if p.is_dir() and p.name[11:].isdigit()),
        key=lambda p: int(p.name[11:]),
    )
    usable = [p for p in ckpts if (p / "adapter_config.json").is_file() or has_weights(p)]
    if usable:
        return DojoError(
            f"{where} has no saved model: the run did not finish",
            hint=f"use its last checkpoint: {usable[-1]}, or finish it with `dojo train ... --resume`",
        )
    return DojoError(
        f"{where} has no model (no model weights, no adapter): the run did not finish",
        hint="train with --save-model (the default) and let the run finish",
    )


def template_ref(out: RunOutput, override: str | None = None) -> tuple[str, str]:
    """(reference, flag) of the chat template the run trained with: --template, else the model's
    own from its tokenizer folder (as pick_template does), else the tokenizer the run saved."""
    if override:
        return override, "--template"
    if out.run.model.template:
        tpl = out.run.model.template
        if _looks_like_file(tpl) and not Path(tpl).expanduser().exists():
            raise TemplateError(
                f"the run's --template {tpl!r} is not there any more",
                hint="pass it again: --template FILE (the same template the run trained with)",
            )
        return tpl, "--template"
    for folder in (out.model_tokenizer, out.tokenizer):
        if Path(folder).is_dir():
            return folder, "--model"
    raise TemplateError(
        f"{out.folder}: no chat template (the run used the model's own, and no tokenizer "
        "folder with it is left)",
        hint="pass --template NAME (see 'dojo chat-template list')",
    )


def _looks_like_file(ref: str) -> bool:
    return "/" in ref or ref.endswith((".jinja", ".json"))


def stop_texts(template: Any, tokenizer_eos: str | None) -> list[str]:
    """End-of-turn texts that end a reply: the template's stop token, its eos, the tokenizer's."""
    out: list[str] = []
    for t in (template.stop_token, template.eos_token, tokenizer_eos):
        if t and t not in out:
            out.append(t)
    return out


class StopText:
    """Streamed text up to the first stop string, never printing a stop string's first pieces.

    The tail that could still become a stop string is held back until the next piece says;
    ``feed`` returns what can be printed now, ``done`` is True once a stop string was seen.
    """

    def __init__(self, stops: list[str]) -> None:
        self.stops = [s for s in stops if s]
        self.held = ""
        self.done = False
        self.text = ""  # everything printed so far: the reply

    def feed(self, piece: str) -> str:
        if self.done:
            return ""
        buf = self.held + piece
        cut = min((i for i in (buf.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            self.done, self.held = True, ""
            return self._emit(buf[:cut])
        keep = max((_overlap(buf, s) for s in self.stops), default=0)
        self.held = buf[len(buf) - keep :] if keep else ""
        return self._emit(buf[: len(buf) - keep])

    def flush(self) -> str:
        rest, self.held = self.held, ""
        return "" if self.done else self._emit(rest)

    def _emit(self, s: str) -> str:
        self.text += s
        return s


def _overlap(text: str, stop: str) -> int:
    """Length of the longest end of ``text`` that is a start of ``stop``."""
    for n in range(min(len(text), len(stop) - 1), 0, -1):
        if stop.startswith(text[-n:]):
            return n
    return 0


def require_extras(command: str, *, adapter: bool) -> None:
    """torch + transformers (+ peft for an adapter) or one error naming the extra to install."""
    need = ["torch", "transformers"] + (["peft"] if adapter else [])
    missing = [m for m in need if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingExtraError(
            f"dojo {command} needs {', '.join(missing)}, not installed",
            hint="pip install -e '.[train]' in dojo's clone",
        )


def export_target(run_dir: Path, out: str | None, *, force: bool, flag: str = "-o") -> Path:
    """The export folder (default RUN_DIR/export); refused before any work when it exists
    (without --force), is a file, is not an earlier export, or holds the run itself."""
    dest = (Path(out).expanduser() if out else run_dir / "export").resolve()
    shown = f"{flag} {str(out)!r}" if out else f"export folder {str(dest)!r}"
    if dest == run_dir or dest in run_dir.parents:
        raise DojoError(
            f"{shown} holds the run folder {run_dir}", hint=f"give a new folder to {flag}"
        )
    if dest.exists() and not dest.is_dir():
        raise DojoError(f"{shown} is a file", hint=f"give a folder path to {flag}")
    if dest.exists() and any(dest.iterdir()):
        # --force replaces an earlier export, never a run, a checkpoint or an unrelated folder.
        why = not_an_export(dest)
        if why:
            raise DojoError(
                f"{shown} {why}: --force only replaces an earlier export",
                hint=f"choose another folder with {flag}",
            )
        if not force:
            raise DojoError(
                f"{shown} already exists",
                hint=f"pass --force to replace it, or choose another folder with {flag}",
            )
    parent = dest.parent
    while not parent.exists():  # missing folders are made at write time
        parent = parent.parent
    if not os.access(parent, os.W_OK):
        raise DojoError(
            f"{shown}: folder {str(parent)!r} is not writable",
            hint=f"choose a folder you can write to with {flag}, or fix its permissions",
        )
    return dest


def not_an_export(folder: Path) -> str | None:
    """Why ``folder`` is not a folder `dojo export` wrote (None when it is one): its mark, or for
    exports older than the mark, a flat model folder with generation_config.json and nothing
    that training writes."""
    if (folder / EXPORT_MARK).is_file():
        return None
    if (folder / RUN_FILE).is_file():
        return "is a `dojo train` run folder"
    if (folder / "trainer_state.json").is_file():
        return "is a training checkpoint"
    if (folder.parent / RUN_FILE).is_file() and folder.name != "export":
        return f"is the {folder.name} folder of a `dojo train` run"
    if not (folder / "config.json").is_file():
        return "exists and is not a model folder (no config.json)"
    flat = not any(p.is_dir() for p in folder.iterdir())
    if (
        not flat
        or not (folder / "generation_config.json").is_file()
        or (folder / "adapter_config.json").is_file()
    ):
        return "exists and is not an earlier export"
    return None


def check_repo_id(repo: str) -> str:
    """--push-to-hub NAME or OWNER/NAME, checked before the (slow) merge; and a login."""
    import re

    if not re.fullmatch(r"([A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]{0,95}", repo) or ".." in repo:
        raise DojoError(
            f"--push-to-hub {repo!r} is not a Hub repository id",
            hint="give OWNER/NAME, e.g. --push-to-hub my-org/my-model",
        )
    if importlib.util.find_spec("huggingface_hub") is None:
        raise MissingExtraError(
            "--push-to-hub needs huggingface_hub", hint="pip install -e '.[train]' in dojo's clone"
        )
    from huggingface_hub import constants, get_token

    if constants.HF_HUB_OFFLINE:
        raise DojoError(
            f"--push-to-hub {repo}: HF_HUB_OFFLINE is set",
            hint="unset HF_HUB_OFFLINE to upload, or export without --push-to-hub",
        )
    if get_token() is None:
        raise DojoError(
            f"--push-to-hub {repo}: not logged in to the Hugging Face Hub",
            hint="run 'hf auth login' (or set HF_TOKEN), then export again",
        )
    return repo


def push(folder: Path, repo: str, run_dir: Path) -> str:
    """Upload the export folder to the Hub model repo (created if missing); returns its URL."""
    from huggingface_hub import create_repo, upload_folder

    try:
        url = create_repo(repo, repo_type="model", exist_ok=True)
        upload_folder(
            repo_id=repo,
            folder_path=str(folder),
            repo_type="model",
            ignore_patterns=[EXPORT_MARK],
            commit_message=f"dojo export of {run_dir.name}",
        )
    except Exception as e:  # noqa: BLE001 - HTTP, network and auth errors alike: one line
        raise DojoError(
            f"--push-to-hub {repo}: upload failed: {type(e).__name__}: {e}",
            hint=f"the export is saved in {folder}; retry with: hf upload {repo} {folder}",
        ) from None
    return str(url)
