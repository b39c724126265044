"""`dojo chat RUN_DIR`: load what a run saved and talk to it through the template it trained with.

Loads a full model, RUN_DIR/merged, or base + LoRA/QLoRA adapter (the base unquantized, the
adapter merged in memory for speed), renders each turn with dojo's renderer (= HF's
apply_chat_template, add_generation_prompt=True), and streams the reply to stdout as it is
generated, stopping on the template's end-of-turn token and the tokenizer's eos.
"""

import contextlib
import logging
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, TextStreamer

from dojo.errors import DojoError
from dojo.safe_load import clip
from dojo.train.outputs import RunOutput, StopText, stop_texts, template_ref

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
GREEDY_BELOW = 1e-5
"""Temperatures under this answer greedily, as vLLM's do: logits divided by 1e-300 overflow
to inf and sampling fails, and sampling that cold is greedy decoding anyway."""


def quiet() -> None:
    """Library chatter (loading bars, deprecation notices, bitsandbytes' missing CPU kernels)
    is for dojo's developers; DOJO_DEBUG=1 keeps it."""
    if os.environ.get("DOJO_DEBUG", "") not in ("", "0"):
        return
    from transformers.utils import logging as hf_logging

    warnings.filterwarnings("ignore", category=FutureWarning)
    if not torch.cuda.is_available():  # else DeepSpeed (imported by PEFT's merge) says it guessed
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]


def pick_device(flag: str) -> str:
    if flag == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if flag == "cuda" and not torch.cuda.is_available():
        raise DojoError(
            "--device cuda: no CUDA GPU is visible here", hint="use --device cpu (or auto)"
        )
    return flag


@contextlib.contextmanager
def loading(out: RunOutput, what: str) -> Iterator[None]:
    """A loader's failure on the run's files is one error naming what was loaded. The cheap
    checks (dojo.train.outputs.check_files) catch damaged files first; this is for what they
    cannot see, e.g. a tokenizer.json of another format or weights that do not fit config.json.
    The loaders raise anything (tokenizers a bare Exception, transformers KeyError, OSError...)."""
    try:
        yield
    except (DojoError, MemoryError, torch.OutOfMemoryError):
        raise
    except Exception as e:  # noqa: BLE001 - see above: user files, whatever the loader says
        first = (str(e).strip().splitlines() or [""])[0]
        raise DojoError(
            f"RUN_DIR {str(out.folder)!r}: {what} cannot be loaded "
            f"({type(e).__name__}: {clip(first, 300)})",
            hint="its files are damaged or do not match each other: copy them again, or use "
            "another checkpoint (DOJO_DEBUG=1 shows the traceback)",
        ) from e


def _in(out: RunOutput, path: str | Path) -> str:
    return "" if Path(path) == out.folder else f" in {path}"


def load_tokenizer(out: RunOutput) -> Any:
    with loading(out, f"the tokenizer{_in(out, out.tokenizer)}"):
        return AutoTokenizer.from_pretrained(
            out.tokenizer, trust_remote_code=out.run.model.trust_remote_code
        )


def load_model(
    out: RunOutput, dtype: Any, tokenizer: Any, *, merge: bool = True, device: str = "cpu"
) -> Any:
    """The trained model in ``dtype``: an adapter goes on its base loaded unquantized (a QLoRA
    adapter too: merging into 4-bit weights would be lossy, and the CPU has no 4-bit kernels)."""
    kw: dict[str, Any] = {"dtype": dtype, "trust_remote_code": out.run.model.trust_remote_code}
    if device != "cpu":  # straight onto the GPU, never a whole copy in host memory first
        kw["device_map"] = {"": device}
    if out.kind != "adapter":
        with loading(out, f"the model{_in(out, out.weights)}"):
            return _serving(AutoModelForCausalLM.from_pretrained(str(out.weights), **kw))
    from peft import PeftModel

    # A Hub base is loaded at the revision the run trained on (--revision).
    rev = (
        out.run.model.revision
        if out.run.model.revision and not Path(str(out.base)).is_dir()
        else None
    )
    with loading(out, f"the adapter's base model {out.base}"):
        base = _serving(AutoModelForCausalLM.from_pretrained(str(out.base), **kw, revision=rev))
    if len(tokenizer) > base.get_input_embeddings().num_embeddings:
        # Tokens added for the template: the adapter saved the resized rows (PEFT docs).
        base.resize_token_embeddings(len(tokenizer))
    with loading(out, f"the adapter{_in(out, out.weights)}"):
        model = PeftModel.from_pretrained(base, str(out.weights))
    return model.merge_and_unload() if merge else model


def _serving(model: Any) -> Any:
    # Training saved use_cache=False (the KV cache is useless there); generation needs it.
    model.config.use_cache = True
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.use_cache = True
    return model


def load_template(out: RunOutput, tokenizer: Any, override: str | None = None) -> Any:
    from dojo.chat.template import load_template as load

    ref, flag = template_ref(out, override)
    return load(ref, flag=flag)


def stop_ids(tokenizer: Any, stops: list[str]) -> tuple[list[int], list[str]]:
    """(token ids, texts): a stop that is one token stops by id, any other by its text."""
    vocab = tokenizer.get_vocab()
    ids = [vocab[s] for s in stops if s in vocab]
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    return ids, [s for s in stops if s not in vocab]


class _Streamer(TextStreamer):
    """TextStreamer (whole words, special tokens skipped) writing through a StopText filter."""

    def __init__(self, tokenizer: Any, stops: list[str], write: Callable[[str], None]) -> None:
        super().__init__(tokenizer, skip_prompt=True, skip_special_tokens=True)
        self.filter = StopText(stops)
        self.write = write

    def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
        self.write(self.filter.feed(text) + (self.filter.flush() if stream_end else ""))


class Session:
    """One loaded model and its template; ``reply`` answers one turn of a conversation."""

    def __init__(self, out: RunOutput, device: str, template: str | None = None) -> None:
        quiet()
        prec = out.run.kernels.precision
        # fp16 matmuls on a CPU are slow or missing; bf16 and fp32 run there as trained.
        dtype = DTYPES["fp32" if device == "cpu" and prec == "fp16" else prec]
        self.tokenizer = load_tokenizer(out)
        self.template = load_template(out, self.tokenizer, template)
        self.model = load_model(out, dtype, self.tokenizer, device=device).eval()
        self.device = device
        stops = stop_texts(self.template, self.tokenizer.eos_token)
        self.eos_ids, self.stop_strings = stop_ids(self.tokenizer, stops)
        self.stops = stops

    def prompt_ids(self, messages: list[dict[str, Any]]) -> Any:
        from dojo.chat.template import render

        text = render(self.template, messages, add_generation_prompt=True)
        # The template writes BOS itself (as apply_chat_template(tokenize=True) does).
        ids = self.tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        return ids.to(self.device)

    def reply(
        self,
        messages: list[dict[str, Any]],
        *,
        max_new_tokens: int,
        temperature: float,
        write: Callable[[str], None],
    ) -> str:
        """Stream the assistant's answer through ``write``; return it (what was written)."""
        ids = self.prompt_ids(messages)
        streamer = _Streamer(self.tokenizer, self.stops, write)
        kw: dict[str, Any] = {
            "max_new_tokens": max_new_tokens,
            "eos_token_id": self.eos_ids or None,
            "pad_token_id": _first(self.tokenizer.pad_token_id, *self.eos_ids),
            "streamer": streamer,
        }
        if temperature >= GREEDY_BELOW:
            kw.update(do_sample=True, temperature=temperature, top_p=1.0, top_k=0)
        else:
            kw.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        if self.stop_strings:
            kw.update(stop_strings=self.stop_strings, tokenizer=self.tokenizer)
        with torch.inference_mode():
            self.model.generate(ids, attention_mask=torch.ones_like(ids), **kw)
        return streamer.filter.text


def _first(*ids: int | None) -> int | None:
    return next((i for i in ids if i is not None), None)


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def run(
    out: RunOutput,
    *,
    prompt: str | None,
    system: str | None,
    max_new_tokens: int,
    temperature: float,
    device: str,
    template: str | None = None,
    interactive: bool,
) -> int:
    """One answer (``prompt``) or a prompt loop; the banner and prompts go to stderr."""
    where = pick_device(device)
    session = Session(out, where, template)
    head: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    gen: dict[str, Any] = {
        "max_new_tokens": max_new_tokens,
        "temperature": temperature,
        "write": _write,
    }
    if prompt is not None:
        session.reply([*head, {"role": "user", "content": prompt}], **gen)
        _write("\n")
        return 0
    if not interactive:
        text = sys.stdin.read().strip()
        if not text:
            raise DojoError("no prompt: stdin is empty", hint="pass --prompt TEXT")
        session.reply([*head, {"role": "user", "content": text}], **gen)
        _write("\n")
        return 0
    return _loop(session, out, where, head, gen)


def _loop(
    session: Session, out: RunOutput, where: str, head: list[dict[str, Any]], gen: dict[str, Any]
) -> int:
    with contextlib.suppress(ImportError):
        import readline  # noqa: F401 - line editing and history for input()
    sys.stderr.write(
        f"dojo chat: {out.describe()}, template {session.template.name}, {where}\n"
        "/reset starts over, /exit or Ctrl-D quits, Ctrl-C stops an answer\n"
    )
    history = list(head)
    while True:
        try:
            line = input("> ")
        except EOFError:
            sys.stderr.write("\n")
            return 0
        text = line.strip()
        if not text:
            continue
        if text in ("/exit", "/quit"):
            return 0
        if text == "/reset":
            history = list(head)
            sys.stderr.write("(conversation cleared)\n")
            continue
        history.append({"role": "user", "content": line})
        try:
            answer = session.reply(history, **gen)
        except KeyboardInterrupt:  # stop this answer, keep the session
            history.pop()
            sys.stderr.write("\n(stopped)\n")
            continue
        _write("\n")
        history.append({"role": "assistant", "content": answer})
