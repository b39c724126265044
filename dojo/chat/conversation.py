"""Conversation records in the three formats users bring, normalised to OpenAI-style messages.

Detected per record, first match wins:
- messages: ``{"messages": [{"role": ..., "content": ...}, ...]}`` (or a bare list of messages)
- ShareGPT: ``{"conversations": [{"from": "human"|"gpt"|"system"|..., "value": ...}, ...]}``
- Alpaca:   ``{"instruction": ..., "input": ..., "output": ..., ["system"], ["history"]}``
- prompt/completion (TRL): ``{"prompt": str, "completion": str}`` is plain text, no chat
  template, the completion is trained; with lists of messages on both sides it is a conversation
- text (pre-training): ``{"text": str}``, no chat template, the whole text is trained

The two plain-text shapes become a ``PlainText`` (see ``to_example``), not messages.
"""

from dataclasses import dataclass
from typing import Any

from dojo.errors import DataError

ROLES = ("system", "user", "assistant", "tool")
Message = dict[str, Any]

# ShareGPT speaker names as used by FastChat, LLaMA-Factory and axolotl.
_SHAREGPT_ROLES = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "bard": "assistant",
    "bing": "assistant",
    "model": "assistant",
    "function_call": "assistant",
    "observation": "tool",
    "tool": "tool",
    "function": "tool",
}

FORMATS = ("messages", "sharegpt", "alpaca", "prompt_completion", "text")


@dataclass(frozen=True)
class PlainText:
    """A record trained without a chat template: ``prompt`` is context (not trained), then
    ``completion`` is trained (for the text format the prompt is empty)."""

    prompt: str
    completion: str


_MSG_HINT = 'e.g. [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]'
_SHAREGPT_HINT = 'e.g. {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", ...}]}'
_ALPACA_HINT = 'e.g. {"instruction": "...", "input": "", "output": "...", "history": [["q", "a"]]}'


def detect_format(record: Any) -> str:
    """Name the record's format, or raise DataError saying what was expected."""
    if isinstance(record, list):
        return "messages"
    if not isinstance(record, dict):
        raise DataError(
            f"expected a JSON object or a list of messages, got {type(record).__name__}",
            hint='use {"messages": [{"role": "user", "content": "..."}, ...]}',
        )
    if "messages" in record:
        return "messages"
    if "conversations" in record:
        return "sharegpt"
    if "instruction" in record and "output" in record:
        return "alpaca"
    if "prompt" in record and "completion" in record:
        return "prompt_completion"
    if "text" in record:
        return "text"
    keys = ", ".join(sorted(map(str, record))) or "none"
    raise DataError(
        f"record is not in a known format (keys: {keys})",
        hint="expected 'messages' (OpenAI), 'conversations' (ShareGPT), "
        "'instruction'+'output' (Alpaca), 'prompt'+'completion' or 'text' "
        "(or map yours with --data-columns messages=COLUMN)",
    )


MAX_NESTING = 100
"""Deepest lists/objects in a record: real messages (tool arguments included) nest a few levels;
thousands of levels make every recursive step after parsing (copy, render, tojson) fail."""


def nesting_depth(value: Any, limit: int = MAX_NESTING) -> int:
    """How deep lists/objects nest in ``value`` (stops counting past ``limit``; no recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            v = list(v.values())
        if isinstance(v, list):
            deepest = max(deepest, d)
            if deepest > limit:
                return deepest
            stack.extend((x, d + 1) for x in v)
    return deepest


def to_messages(record: Any) -> tuple[str, list[Message]]:
    """Return (format, messages) with every message checked; raise DataError otherwise (a
    plain-text record too: it has no messages)."""
    fmt, out = to_example(record)
    if isinstance(out, PlainText):
        raise DataError(
            f"a {fmt} record is plain text, not a conversation",
            hint="chat templates render messages: use messages, ShareGPT or Alpaca rows",
        )
    return fmt, out


def to_example(record: Any) -> tuple[str, "list[Message] | PlainText"]:
    """(format, messages) for a conversation, (format, PlainText) for text and string
    prompt/completion records; DataError saying why not."""
    if nesting_depth(record) > MAX_NESTING:
        raise DataError(
            f"record nests lists/objects more than {MAX_NESTING} levels deep",
            hint="a message holds strings, lists and objects a few levels deep",
        )
    fmt = detect_format(record)
    if fmt == "messages":
        msgs = record if isinstance(record, list) else record["messages"]
        return fmt, check_messages(msgs)
    if fmt == "sharegpt":
        return fmt, check_messages(_from_sharegpt(record))
    if fmt == "alpaca":
        return fmt, check_messages(_from_alpaca(record))
    return fmt, _plain(fmt, record)


def _plain(fmt: str, record: dict[str, Any]) -> "list[Message] | PlainText":
    if fmt == "text":
        text = record["text"]
        if not isinstance(text, str) or not text.strip():
            raise DataError("'text' must be a non-empty string", hint='e.g. {"text": "..."}')
        _check_text(0, "text", {"content": text})
        return PlainText("", text)
    prompt, completion = record["prompt"], record["completion"]
    if isinstance(prompt, list) and isinstance(completion, list):
        return check_messages(prompt + completion)  # TRL's conversational prompt/completion
    if not isinstance(prompt, str) or not isinstance(completion, str):
        raise DataError(
            "'prompt' and 'completion' must both be strings (or both lists of messages)",
            hint='e.g. {"prompt": "2+2=", "completion": "4"}',
        )
    if not completion.strip():
        raise DataError("'completion' is empty: nothing to train on")
    _check_text(0, "prompt/completion", {"content": prompt + completion})
    return PlainText(prompt, completion)


def check_messages(msgs: Any) -> list[Message]:
    """A non-empty list of objects with a known role and a string (or list, or null) content."""
    if not isinstance(msgs, list) or not msgs:
        raise DataError(
            "messages must be a non-empty list of {role, content} objects",
            hint='e.g. [{"role": "user", "content": "Hi"}]',
        )
    out: list[Message] = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise DataError(
                f"message {i} is {type(m).__name__}, not an object with role and content",
                hint=_MSG_HINT,
            )
        role = m.get("role")
        if role not in ROLES:
            raise DataError(
                f"message {i} has unknown role {role!r}",
                hint=f"roles are {', '.join(ROLES)}",
            )
        if "content" not in m and not m.get("tool_calls"):
            raise DataError(
                f"message {i} ({role}) has no 'content'",
                hint="give it a 'content' string (or 'tool_calls' for an assistant tool call)",
            )
        content = m.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise DataError(
                f"message {i} ({role}) content is {type(content).__name__}, not a string",
                hint='content is a string, or a list of blocks like {"type": "text", "text": "..."}',
            )
        _check_tool_calls(i, m.get("tool_calls"))
        _check_text(i, role, m)
        out.append(dict(m))
    return out


_TOOL_CALL_HINT = (
    'tool_calls is a list of {"type": "function", "function": {"name": "...", "arguments": {...}}}'
)


def _check_tool_calls(i: int, calls: Any) -> None:
    # Templates loop over tool_calls and read .function.name (or .name): anything else renders
    # as garbage or fails inside the template with an error that names no message.
    if calls is None:
        return
    if not isinstance(calls, list):
        raise DataError(
            f"message {i} tool_calls is {type(calls).__name__}, not a list", hint=_TOOL_CALL_HINT
        )
    for j, call in enumerate(calls):
        fn = call.get("function", call) if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise DataError(
                f"message {i} tool_calls[{j}] has no function name", hint=_TOOL_CALL_HINT
            )


def _check_text(i: int, role: str, m: Message) -> None:
    """Lone surrogates ("\\ud800" in JSON) are not Unicode: nothing can print or tokenize them."""
    stack: list[Any] = [m]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if not v.isascii():
                try:
                    v.encode("utf-8")
                except UnicodeEncodeError as e:
                    raise DataError(
                        f"message {i} ({role}) holds a lone surrogate "
                        f"U+{ord(v[e.start]):04X}, which is not valid Unicode text",
                        hint="fix the \\uXXXX escapes that produced it (a broken emoji?)",
                    ) from e
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)


def _from_sharegpt(record: dict[str, Any]) -> list[Message]:
    turns = record["conversations"]
    if not isinstance(turns, list) or not turns:
        raise DataError(
            "'conversations' must be a non-empty list of {from, value} objects",
            hint=_SHAREGPT_HINT,
        )
    msgs: list[Message] = []
    if isinstance(record.get("system"), str) and record["system"]:
        msgs.append({"role": "system", "content": record["system"]})
    for i, t in enumerate(turns):
        if not isinstance(t, dict) or "from" not in t or "value" not in t:
            raise DataError(f"conversations[{i}] needs 'from' and 'value'", hint=_SHAREGPT_HINT)
        role = _SHAREGPT_ROLES.get(str(t["from"]).lower())
        if role is None:
            raise DataError(
                f"conversations[{i}] has unknown speaker {t['from']!r}",
                hint="use human/gpt/system (or user/assistant/tool)",
            )
        msgs.append({"role": role, "content": t["value"]})
    return msgs


def _from_alpaca(record: dict[str, Any]) -> list[Message]:
    instruction, inp, output = record["instruction"], record.get("input") or "", record["output"]
    for key, val in (("instruction", instruction), ("input", inp), ("output", output)):
        if not isinstance(val, str):
            raise DataError(
                f"alpaca field {key!r} must be a string, got {type(val).__name__}",
                hint=_ALPACA_HINT,
            )
    msgs: list[Message] = []
    if isinstance(record.get("system"), str) and record["system"]:
        msgs.append({"role": "system", "content": record["system"]})
    history = record.get("history") or []
    if not isinstance(history, list):
        raise DataError(
            f"alpaca 'history' is {type(history).__name__}, not a list of [prompt, response] pairs",
            hint=_ALPACA_HINT,
        )
    for pair in history:
        if not (isinstance(pair, list) and len(pair) == 2):
            raise DataError(
                "alpaca 'history' must be a list of [prompt, response] pairs", hint=_ALPACA_HINT
            )
        msgs += [{"role": "user", "content": pair[0]}, {"role": "assistant", "content": pair[1]}]
    # LLaMA-Factory's join (src/llamafactory/data/converter.py, AlpacaDatasetConverter): the
    # non-empty ones of instruction and input, one newline between them.
    prompt = "\n".join(part for part in (instruction, inp) if part)
    msgs += [{"role": "user", "content": prompt}, {"role": "assistant", "content": output}]
    return msgs
