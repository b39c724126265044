"""Chat templates rendered exactly as ``tokenizer.apply_chat_template(..., tokenize=False)`` does.

Owns: ``ChatTemplate`` (a template plus its tokens and defaults), ``load_template`` (bundled name,
``.jinja`` file, ``tokenizer_config.json`` or local model folder), ``render`` and ``assistant_spans``.

Semantics copied from transformers 5.x ``utils/chat_template_utils.py`` (``render_jinja_template``,
``_cached_compile_jinja_template``) and ``tokenization_utils_base.apply_chat_template``: an
``ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)`` with loopcontrols, the
``raise_exception``/``strftime_now`` globals, a ``tojson`` that keeps key order and non-ASCII,
limited ``dict``/``namespace`` globals, message keys whose value is None dropped, reasoning fields
aliased, ``tools``/``documents`` always defined (None when not given), and special tokens passed
only when set. Deliberate differences (both make a hostile template fail instead of misbehave):
any access to an unsafe attribute raises at once (transformers returns an undefined that renders
as ''), and a render has a budget (range items, output size, the size of every value built,
memory growth, wall time), each filter/method call bounded before it runs (dojo.chat.guards).

Example: ``dojo chat-template render --template qwen3 --messages chat.json``
"""

import contextlib
import json
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dojo.chat import files as _files
from dojo.chat import sandbox as _sandbox
from dojo.chat.spans import SpanReport, locate_spans
from dojo.errors import DataError, TemplateError
from dojo.paths import close_names, list_templates, templates_dir

# Tokenizer attributes transformers passes to every template (SpecialTokensMixin order).
SPECIAL_TOKEN_KEYS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


@dataclass(frozen=True)
class ChatTemplate:
    """A chat template's text with the tokens and default variables its model renders it with."""

    name: str
    """Bundled name, file path or "inline"; used in error messages."""
    source: str
    """The Jinja text, exactly as the model ships it."""
    bos_token: str | None = None
    """Passed as ``bos_token`` unless None (then left undefined, as transformers does)."""
    eos_token: str | None = None
    """Passed as ``eos_token`` unless None."""
    stop_token: str | None = None
    """Text the template emits after assistant content to end the turn (loss spans include it)."""
    variables: dict[str, Any] = field(default_factory=dict)
    """Default template variables (``date_string``, other special tokens, ...); callers override."""
    supports: dict[str, bool] = field(default_factory=dict)
    """{"system", "tools", "thinking"}: what the template handles (bundled sidecars say)."""
    family: str = ""
    model: str = ""
    official: bool = False
    """True when ``source`` is the model's official template byte-for-byte."""

    @classmethod
    def from_source(
        cls,
        source: str,
        *,
        name: str = "inline",
        bos_token: str | None = None,
        eos_token: str | None = None,
        stop_token: str | None = None,
        variables: Mapping[str, Any] | None = None,
        subject: str | None = None,
    ) -> "ChatTemplate":
        """Wrap a template string (e.g. a tokenizer's own ``chat_template``); compiled to check it.

        The stop token defaults to the eos token: for most chat tokenizers (Qwen, Llama-3-Instruct,
        Mistral, Zephyr) eos is the end-of-turn marker the template writes after the reply.
        ``subject`` names the template in a parse error (see ``sandbox.compile_template``).
        """
        _sandbox.compile_template(source, name, subject)
        return cls(
            name=name,
            source=source,
            bos_token=bos_token,
            eos_token=eos_token,
            stop_token=stop_token if stop_token is not None else eos_token,
            variables=dict(variables or {}),
        )


def bundled_names() -> list[str]:
    """Names of the bundled chat templates (templates/chat/*.jinja)."""
    return list_templates("chat", ".jinja")


def load_template(ref: "str | Path | ChatTemplate", *, flag: str = "--template") -> ChatTemplate:
    """Resolve a bundled name, a .jinja file, a tokenizer_config.json or a model folder."""
    if isinstance(ref, ChatTemplate):
        return ref
    text = str(ref)
    if _NAME_RE.match(text) and (templates_dir() / "chat" / f"{text}.jinja").is_file():
        return _load_bundled(text)
    try:
        path = Path(text).expanduser()
    except RuntimeError:  # ~nosuchuser/...: no home folder to expand to
        path = Path(text)
    # stat, not is_dir()/is_file(): those say False for a symlink loop, a FIFO or /dev/null,
    # and the error would then claim there is no such file.
    st = _files.stat_path(path, flag, TemplateError)
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            return _load_model_dir(path, flag)
        if path.name.endswith(".json"):
            return _load_tokenizer_config(path, flag)
        # A parse error names the flag and the file as the user wrote them.
        return ChatTemplate.from_source(
            _read(path, flag), name=str(path), subject=f"{flag} {text!r}:"
        )
    names = bundled_names()
    close = close_names(text, names)
    hint = f"did you mean {', '.join(close)}?" if close else f"available: {', '.join(names)}"
    raise TemplateError(
        f"{flag} {text!r} is not a bundled template, a file or a model folder",
        hint=hint + " (see 'dojo chat-template list')",
    )


def render(
    template: "str | Path | ChatTemplate",
    messages: Any,
    *,
    add_generation_prompt: bool = False,
    tools: list[dict[str, Any]] | None = None,
    bos_token: str | None = None,
    eos_token: str | None = None,
    **variables: Any,
) -> str:
    """Render ``messages`` exactly as transformers' ``apply_chat_template(tokenize=False)``.

    ``bos_token``/``eos_token`` default to the template's own; ``variables`` override the
    template's defaults (e.g. ``enable_thinking=False``, ``date_string="26 Jul 2024"``).
    Raises TemplateError when the template raises, is refused by the sandbox or runs away.
    """
    tpl = load_template(template)
    kwargs: dict[str, Any] = {}
    for key, value in (
        ("bos_token", bos_token if bos_token is not None else tpl.bos_token),
        ("eos_token", eos_token if eos_token is not None else tpl.eos_token),
    ):
        if value is not None:  # transformers' special_tokens_map drops unset tokens
            kwargs[key] = value
    kwargs.update(tpl.variables)
    kwargs.update(variables)  # "kwargs overwrite special tokens if both are present"
    for reserved in ("messages", "add_generation_prompt", "tools"):
        if reserved in kwargs:
            raise TemplateError(
                f"variable {reserved!r} is reserved",
                hint=f"pass {reserved} as its own argument, not as a template variable",
            )
    documents = kwargs.pop("documents", None)
    chat = prepare_messages(messages)
    return _sandbox.render_source(
        tpl.source,
        tpl.name,
        messages=chat,
        tools=_sandbox.plain(list(tools) if tools is not None else None),
        documents=_sandbox.plain(documents),
        add_generation_prompt=add_generation_prompt,
        **_sandbox.plain(kwargs),
    )


def assistant_spans(
    template: "str | Path | ChatTemplate", messages: Any, **kw: Any
) -> tuple[str, list[tuple[int, int]]]:
    """The rendered text and the character spans of assistant content the loss trains on.

    One render; spans are located in it (see ``dojo.chat.spans``) and extended over the
    template's stop token. ``kw`` are ``render``'s keyword arguments.
    """
    report = span_report(template, messages, **kw)
    return report.text, report.spans


def span_report(template: "str | Path | ChatTemplate", messages: Any, **kw: Any) -> SpanReport:
    """``assistant_spans`` with the details: which spans end on the stop token, which are missing."""
    tpl = load_template(template)
    text = render(tpl, messages, **kw)
    return locate_spans(text, prepare_messages(messages), tpl.stop_token)


def prepare_messages(messages: Any) -> list[dict[str, Any]]:
    """What the template sees: plain dicts, None-valued keys dropped, reasoning names aliased."""
    messages = getattr(messages, "messages", messages)  # transformers' Conversation objects
    if not isinstance(messages, (list, tuple)) or not messages:
        raise DataError(
            "messages must be a non-empty list of {role, content} objects",
            hint='e.g. [{"role": "user", "content": "Hi"}]',
        )
    chat = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise DataError(
                f"message {i} is {type(m).__name__}, not an object with role and content"
            )
        chat.append({k: v for k, v in m.items() if v is not None})
    try:
        chat = _sandbox.plain(chat)
    except RecursionError as e:  # JSON nested ~1000 deep: json.loads accepts it, copying not
        raise DataError(
            "messages are nested too deeply to render",
            hint="a message holds strings, lists and objects a few levels deep, not hundreds",
        ) from e
    # _alias_reasoning_fields: `thinking` from older names unless set, `reasoning_content` forced.
    out = []
    for m in chat:
        reasoning = next((m[k] for k in _REASONING_FIELDS if m.get(k) is not None), None)
        if reasoning is not None:
            m = {"thinking": reasoning, **m, "reasoning_content": reasoning}
        out.append(m)
    return out


_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def _read(path: Path, flag: str) -> str:
    return _files.read_text(
        path,
        flag,
        TemplateError,
        regular_only=True,
        what="a .jinja file, a tokenizer_config.json or a model folder",
        noun="a chat template",
    )


def _present(path: Path, flag: str) -> bool:
    """A regular file is there (a loop or a broken link inside a model folder is an error)."""
    st = _files.stat_path(path, flag, TemplateError)
    return st is not None and not stat.S_ISDIR(st.st_mode)


def _load_bundled(name: str) -> ChatTemplate:
    folder = templates_dir() / "chat"
    source = _read(folder / f"{name}.jinja", "--template")
    meta_path = folder / f"{name}.json"
    meta = json.loads(_read(meta_path, "--template")) if meta_path.is_file() else {}
    _sandbox.compile_template(source, name)
    return ChatTemplate(
        name=name,
        source=source,
        bos_token=meta.get("bos_token"),
        eos_token=meta.get("eos_token"),
        stop_token=meta.get("stop_token"),
        variables=dict(meta.get("variables") or {}),
        supports=dict(meta.get("supports") or {}),
        family=meta.get("family", ""),
        model=meta.get("model", ""),
        official=bool(meta.get("official", False)),
    )


def _token_text(value: Any) -> str | None:
    # tokenizer_config.json stores tokens as strings or AddedToken dicts {"content": ...}.
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def _special_tokens(folder: Path, config: Mapping[str, Any]) -> dict[str, str]:
    tokens: dict[str, str] = {}
    extra = folder / "special_tokens_map.json"
    sources: list[Mapping[str, Any]] = [config]
    if extra.is_file():
        with contextlib.suppress(OSError, ValueError):
            sources.append(json.loads(extra.read_text(encoding="utf-8")))
    for src in sources:  # tokenizer_config.json first; special_tokens_map.json fills gaps
        for key in SPECIAL_TOKEN_KEYS:
            text = _token_text(src.get(key))
            if text is not None and key not in tokens:
                tokens[key] = text
    return tokens


def _json_file(path: Path, flag: str) -> dict[str, Any]:
    try:
        data = json.loads(_read(path, flag))
    except (ValueError, RecursionError) as e:
        raise TemplateError(
            f"{flag} {str(path)!r} is not valid JSON: {e}",
            hint="a tokenizer_config.json is one JSON object; is the file complete?",
        ) from e
    if not isinstance(data, dict):
        raise TemplateError(
            f"{flag} {str(path)!r} is not a JSON object",
            hint="a tokenizer_config.json is one JSON object with a 'chat_template' key",
        )
    return data


def _pick_template(value: Any, where: str, flag: str) -> str:
    # A list of {"name", "template"} is the multi-template form; "default" is what
    # apply_chat_template uses when no tools are passed.
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        named = {d.get("name"): d.get("template") for d in value if isinstance(d, dict)}
        if isinstance(named.get("default"), str):
            return str(named["default"])
    raise TemplateError(
        f"{flag} {where}: 'chat_template' is not a template string",
        hint='it must be a string, or a list of {"name": ..., "template": ...} with a "default"',
    )


class NoChatTemplate(TemplateError):
    """A model folder that ships no chat template at all (not one whose template is broken)."""


def _load_tokenizer_config(path: Path, flag: str) -> ChatTemplate:
    config = _json_file(path, flag)
    if "chat_template" not in config:
        raise TemplateError(
            f"{flag} {str(path)!r} has no 'chat_template'",
            hint="pass the model's chat_template.jinja, or a bundled name (dojo chat-template list)",
        )
    source = _pick_template(config["chat_template"], str(path), flag)
    return _with_tokens(source, str(path), _special_tokens(path.parent, config))


def _load_model_dir(folder: Path, flag: str) -> ChatTemplate:
    cfg_path = folder / "tokenizer_config.json"
    config = _json_file(cfg_path, flag) if _present(cfg_path, flag) else {}
    tokens = _special_tokens(folder, config)
    jinja = (
        folder / "chat_template.jinja"
    )  # transformers >= 4.43 saves it separately, and prefers it
    said = f"{flag} {str(folder)!r}:"  # a broken template names the folder the user gave
    if _present(jinja, flag):
        return _with_tokens(_read(jinja, flag), str(jinja), tokens, f"{said} its {jinja.name}")
    if "chat_template" in config:
        source = _pick_template(config["chat_template"], str(cfg_path), flag)
        return _with_tokens(source, str(folder), tokens, f"{said} its {cfg_path.name}'s template")
    raise NoChatTemplate(
        f"{flag} {str(folder)!r} has no chat template (no chat_template.jinja, "
        "no chat_template in tokenizer_config.json)",
        hint="base models often ship none: pick a bundled one (dojo chat-template list)",
    )


def _with_tokens(
    source: str, name: str, tokens: dict[str, str], subject: str | None = None
) -> ChatTemplate:
    tpl = ChatTemplate.from_source(
        source,
        name=name,
        subject=subject,
        bos_token=tokens.get("bos_token"),
        eos_token=tokens.get("eos_token"),
        variables={k: v for k, v in tokens.items() if k not in ("bos_token", "eos_token")},
    )
    return tpl
