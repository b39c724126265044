"""`dojo export RUN_DIR`: one self-contained model folder that transformers and vLLM load as is.

An adapter is merged into its base loaded unquantized in --dtype (PEFT merge_and_unload; never
into 4-bit weights); a full fine-tune is re-saved the same way. The folder gets safetensors, the
tokenizer with the chat template the run trained with, and generation_config.json whose eos ids
include the template's end-of-turn token (what vLLM and generate() stop on), and the mark that
lets a later --force replace it (outputs.EXPORT_MARK). Written to a temporary folder beside OUT
and renamed, so OUT is never half-written.
"""

import copy
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from transformers import GenerationConfig

from dojo import _output
from dojo.errors import DojoError
from dojo.train.outputs import EXPORT_MARK, RunOutput, stop_texts
from dojo.train.worker.serve import (
    DTYPES,
    load_model,
    load_template,
    load_tokenizer,
    quiet,
    stop_ids,
)


def generation_config(model: Any, tokenizer: Any, template: Any) -> tuple[Any, list[str]]:
    """The base's generation config with eos = end-of-turn + eos ids; the stops left out."""
    own = getattr(model, "generation_config", None)
    gen = copy.deepcopy(own) if own is not None else GenerationConfig()  # type: ignore[no-untyped-call]
    ids, missing = stop_ids(tokenizer, stop_texts(template, tokenizer.eos_token))
    if ids:  # else the base's own eos stays
        gen.eos_token_id = ids[0] if len(ids) == 1 else ids
    if tokenizer.bos_token_id is not None:
        gen.bos_token_id = tokenizer.bos_token_id
    if tokenizer.pad_token_id is not None or ids:
        gen.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else ids[0]
    return gen, missing


def export(out: RunOutput, dest: Path, *, dtype: str, force: bool) -> Path:
    """Write the merged (or re-saved) model to ``dest``; returns it."""
    quiet()
    tokenizer = load_tokenizer(out)
    template = load_template(out, tokenizer)
    model = load_model(out, DTYPES[dtype], tokenizer, merge=True)
    gen, missing = generation_config(model, tokenizer, template)
    for text in missing:
        _output.warn(
            f"the template's end-of-turn {text!r} is not one token of the vocabulary: "
            "generation_config.json stops on the other eos ids only"
        )
    model.generation_config = gen
    tokenizer.chat_template = template.source
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    except OSError as e:
        raise _cannot_write(dest, e) from None
    try:
        model.save_pretrained(str(tmp), safe_serialization=True)
        tokenizer.save_pretrained(str(tmp))
        gen.save_pretrained(str(tmp))
        (tmp / EXPORT_MARK).write_text(f"written by dojo export from {out.folder}\n")
        _replace(tmp, dest, force=force)
    except OSError as e:  # ENOSPC, EDQUOT, EIO: nothing half-written is left
        raise _cannot_write(dest, e) from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _cannot_write(dest: Path, e: OSError) -> DojoError:
    return DojoError(
        f"export folder {str(dest)!r}: cannot write it ({e.strerror or e})",
        hint="check free space and permissions there, or choose another folder with -o",
    )


def _replace(tmp: Path, dest: Path, *, force: bool) -> None:
    """Rename the finished folder into place; an old export (--force) is moved aside first and
    removed only once the new one stands."""
    if not dest.exists():
        os.replace(tmp, dest)
        return
    if not force and any(dest.iterdir()):  # appeared while we merged
        raise DojoError(f"{dest} appeared while exporting", hint="rerun with --force")
    old = dest.with_name(f".{dest.name}.old.{os.getpid()}")
    os.replace(dest, old)
    try:
        os.replace(tmp, dest)
    except BaseException:
        os.replace(old, dest)
        raise
    shutil.rmtree(old, ignore_errors=True)
