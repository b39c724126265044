"""Preference rows: a prompt with a chosen and a rejected answer, or (KTO) one answer with a label.
Pure (stdlib); the worker renders and tokenizes them (dojo.train.worker.preference).

Formats, detected per record:
- TRL preference: ``{"prompt", "chosen", "rejected"}``, plain strings (no chat template, as
  dojo's prompt/completion rows) or lists of messages (rendered with the chat template); without
  ``prompt``, what chosen and rejected share (first messages, or text, as hh-rlhf's rows) becomes
  the prompt (TRL's implicit prompt)
- LLaMA-Factory ShareGPT: ``{"conversations": [...prompt turns], "chosen": {"from": "gpt",
  "value": ...}, "rejected": {...}, ["system"]}``; Alpaca: ``{"instruction", ["input"],
  "chosen", "rejected"}`` with string answers
- unpaired (KTO): TRL's ``{"prompt", "completion", "label": true|false}``, or LLaMA-Factory's
  ``{"messages" | "conversations": [..., last assistant turn], "label" | "kto_tag": bool}``

When one side is messages and another a string, the string becomes a message (a prompt a user
turn, an answer an assistant turn). A row missing a side, with an empty side, with chosen equal
to rejected, or in another objective's shape is a bad row with that reason (dojo.train.rows).
"""

from dataclasses import dataclass
from typing import Any

from dojo.chat.conversation import Message, check_messages, to_messages
from dojo.errors import DataError

PREF_FORMATS = ("preference", "sharegpt_preference", "alpaca_preference", "unpaired")
Side = list[Message] | str
"""A prompt or an answer: messages (chat template) or plain text (none)."""
_PAIR_KEYS = ("chosen", "rejected")
_LABEL_KEYS = ("label", "kto_tag")
_HINT = (
    'e.g. {"prompt": [{"role": "user", "content": "Hi"}], "chosen": [{"role": "assistant", '
    '"content": "Hello!"}], "rejected": [{"role": "assistant", "content": "Go away."}]}'
)
_KTO_HINT = 'e.g. {"prompt": "2+2=", "completion": "4", "label": true}'


@dataclass(frozen=True)
class Pair:
    """One prompt, the preferred answer and the other one."""

    prompt: Side
    chosen: Side
    rejected: Side


@dataclass(frozen=True)
class Unpaired:
    """One prompt and one answer, desirable (label True) or not (KTO)."""

    prompt: Side
    completion: Side
    label: bool


Preference = Pair | Unpaired


def is_preference(record: Any) -> bool:
    """The record has a preference shape (a chosen or rejected answer, or a label)."""
    return isinstance(record, dict) and any(k in record for k in _PAIR_KEYS + _LABEL_KEYS)


def to_preference(record: Any, objective: str) -> tuple[str, Preference]:
    """(format, Pair or Unpaired) for a usable row of ``objective`` (dpo, orpo, simpo, kto);
    DataError naming the problem otherwise."""
    if not isinstance(record, dict):
        raise DataError(
            f"expected a JSON object with prompt, chosen and rejected, got {type(record).__name__}",
            hint=_HINT,
        )
    if any(k in record for k in _LABEL_KEYS) and not all(k in record for k in _PAIR_KEYS):
        fmt, row = "unpaired", _unpaired(record)
        if objective != "kto":
            raise DataError(
                f"an unpaired row (one answer and a label) trains only with --objective kto, "
                f"not {objective}",
                hint="give chosen and rejected answers, or use --objective kto",
            )
        return fmt, row
    if not any(k in record for k in _PAIR_KEYS):
        keys = ", ".join(sorted(map(str, record))) or "none"
        raise DataError(
            f"not a preference row (keys: {keys}): --objective {objective} needs a chosen and a "
            "rejected answer" + (", or one answer and a label" if objective == "kto" else ""),
            hint=_HINT + " (or map yours with --data-columns chosen=COLUMN)",
        )
    for side in _PAIR_KEYS:
        if side not in record:
            raise DataError(
                f"no {side!r} answer: a preference row needs a chosen and a rejected one",
                hint=_HINT,
            )
    if "conversations" in record:
        return "sharegpt_preference", _sharegpt(record)
    if "instruction" in record:
        return "alpaca_preference", _alpaca(record)
    return "preference", _trl(record)


def _trl(record: dict[str, Any]) -> Pair:
    chosen, rejected = record["chosen"], record["rejected"]
    if "prompt" not in record:
        if isinstance(chosen, str) and isinstance(rejected, str):
            n = _shared_text(chosen, rejected)
            return _pair(chosen[:n], chosen[n:], rejected[n:])
        if not (isinstance(chosen, list) and isinstance(rejected, list)):
            raise DataError("no 'prompt': give one, or chosen and rejected as whole conversations "
                            "that share their first turns", hint=_HINT)  # fmt: skip
        chosen, rejected = _messages(chosen, "chosen"), _messages(rejected, "rejected")
        n = _shared(chosen, rejected)
        if n == 0:
            raise DataError("no 'prompt', and chosen and rejected share no first turn to take it "
                            "from", hint=_HINT)  # fmt: skip
        return _pair(chosen[:n], chosen[n:], rejected[n:])
    return _pair(record["prompt"], chosen, rejected)


def _shared_text(a: str, b: str) -> int:
    """Where two texts part (TRL's extract_prompt: a space just before goes with the answers)."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n - 1 if n and a[n - 1] == " " else n


def _shared(a: list[Message], b: list[Message]) -> int:
    """How many first messages two conversations share, ending before an assistant turn."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    while n > 0 and a[n - 1]["role"] == "assistant":
        n -= 1
    return n


def _sharegpt(record: dict[str, Any]) -> Pair:
    _, prompt = to_messages({"conversations": record["conversations"],
                             "system": record.get("system")})  # fmt: skip
    answers = []
    for side in _PAIR_KEYS:
        turn = record[side]
        turns = turn if isinstance(turn, list) else [turn]
        if not turns or not all(isinstance(t, dict) for t in turns):
            raise DataError(f"{side!r} must be a turn like {{\"from\": \"gpt\", \"value\": ...}}",
                            hint="LLaMA-Factory's ShareGPT preference format")  # fmt: skip
        answers.append(to_messages({"conversations": turns})[1])
    return _pair(prompt, answers[0], answers[1])


def _alpaca(record: dict[str, Any]) -> Pair:
    stub = {k: v for k, v in record.items() if k not in _PAIR_KEYS}
    _, msgs = to_messages({**stub, "output": ""})
    return _pair(msgs[:-1], record["chosen"], record["rejected"])


def _unpaired(record: dict[str, Any]) -> Unpaired:
    key = next(k for k in _LABEL_KEYS if k in record)
    label = record[key]
    if isinstance(label, int) and not isinstance(label, bool) and label in (0, 1):
        label = bool(label)
    if not isinstance(label, bool):
        raise DataError(f"{key!r} must be true or false, got {label!r}"[:120], hint=_KTO_HINT)
    if "completion" in record:
        if "prompt" not in record:
            raise DataError("no 'prompt' for the completion", hint=_KTO_HINT)
        prompt, completion = _unify(record["prompt"], record["completion"])
    else:
        convo = record.get("messages", record.get("conversations"))
        if convo is None:
            raise DataError("an unpaired row needs prompt + completion, or messages whose last "
                            "turn is the answer", hint=_KTO_HINT)  # fmt: skip
        _, msgs = to_messages({"conversations" if "conversations" in record else "messages": convo,
                               "system": record.get("system")})  # fmt: skip
        if msgs[-1]["role"] != "assistant" or len(msgs) < 2:
            raise DataError("the last turn must be the assistant's answer, after a prompt",
                            hint=_KTO_HINT)  # fmt: skip
        prompt, completion = msgs[:-1], msgs[-1:]
    _check_side(prompt, "prompt")
    _check_side(completion, "completion")
    return Unpaired(prompt, completion, label)


def _pair(prompt: Any, chosen: Any, rejected: Any) -> Pair:
    prompt, chosen, rejected = _unify(prompt, chosen, rejected)
    _check_side(prompt, "prompt")
    _check_side(chosen, "chosen")
    _check_side(rejected, "rejected")
    if chosen == rejected:
        raise DataError("chosen and rejected are the same answer: nothing to prefer")
    return Pair(prompt, chosen, rejected)


def _unify(prompt: Any, *answers: Any) -> tuple[Any, ...]:
    """Strings stay strings when every side is one; else each becomes messages."""
    sides = (prompt, *answers)
    for name, side in zip(("prompt", "chosen", "rejected"), sides, strict=False):
        if not isinstance(side, str | list):
            raise DataError(f"{name!r} is {type(side).__name__}, not a string or a list of "
                            "messages", hint=_HINT)  # fmt: skip
    if all(isinstance(s, str) for s in sides):
        return sides
    out = [_as_messages(prompt, "user", "prompt")]
    out += [_as_messages(a, "assistant", "answer") for a in answers]
    return tuple(out)


def _as_messages(side: Any, role: str, name: str) -> list[Message]:
    if isinstance(side, str):
        return [{"role": role, "content": side}]
    return _messages(side, name)


def _messages(side: Any, name: str) -> list[Message]:
    if not side:
        raise DataError(f"the {name} is empty")
    try:
        return check_messages(side)
    except DataError as e:
        raise DataError(f"{name}: {e.message}", hint=e.hint) from None


def _check_side(side: Side, name: str) -> None:
    if isinstance(side, str):
        if not side.strip():
            raise DataError(f"the {name} is empty")
        check_messages([{"role": "user", "content": side}])  # lone surrogates: not text
        return
    if name == "prompt":
        if side[-1]["role"] == "assistant":
            raise DataError("the prompt ends with an assistant turn: the answer must follow a "
                            "user (or tool) turn", hint=_HINT)  # fmt: skip
        return
    if any(m["role"] != "assistant" and m["role"] != "tool" for m in side) or (
        side[0]["role"] != "assistant"
    ):
        raise DataError(f"the {name} answer must be assistant turns, not "
                        f"{', '.join(sorted({m['role'] for m in side}))}", hint=_HINT)  # fmt: skip
    if not any(_text(m.get("content")) for m in side if m["role"] == "assistant"):
        raise DataError(f"the {name} answer is empty")


def _text(content: Any) -> bool:
    if isinstance(content, str):
        return bool(content.strip())
    if isinstance(content, list):
        return any(isinstance(b, dict) and str(b.get("text", "")).strip() for b in content)
    return False
