"""dojo.chat.conversation: records in the formats users bring, normalised to messages."""

from typing import Any

import pytest
from hypothesis import given

from dojo.chat.conversation import to_messages
from dojo.errors import DataError
from tests.helpers.fuzz import FAST, json_values


@pytest.mark.parametrize(
    ("instruction", "inp", "prompt"),
    [
        ("Add", "2 3", "Add\n2 3"),
        ("Add 2 and 3", "", "Add 2 and 3"),
        ("", "2 3", "2 3"),
        ("Line one\n", "x", "Line one\n\nx"),  # the parts are joined as they are, not stripped
    ],
)
def test_alpaca_prompt_joins_instruction_and_input_as_llama_factory(
    instruction: str, inp: str, prompt: str
) -> None:
    """LLaMA-Factory's AlpacaDatasetConverter: ``"\\n".join`` of the non-empty parts."""
    record = {"instruction": instruction, "input": inp, "output": "5"}
    assert to_messages(record) == (
        "alpaca",
        [{"role": "user", "content": prompt}, {"role": "assistant", "content": "5"}],
    )


def test_alpaca_system_and_history_come_first() -> None:
    record = {
        "system": "Be brief.",
        "history": [["hi", "hello"]],
        "instruction": "Add",
        "input": "2 3",
        "output": "5",
    }
    assert to_messages(record)[1] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "Add\n2 3"},
        {"role": "assistant", "content": "5"},
    ]


@pytest.mark.slow  # hypothesis: seconds; `make test` runs it
@FAST
@given(json_values)
def test_conversation_formats_fail_only_with_data_errors(record: Any) -> None:
    try:
        fmt, msgs = to_messages(record)
    except DataError:
        return
    assert fmt in ("messages", "sharegpt", "alpaca") and isinstance(msgs, list) and msgs
