"""Preference rows: the formats dojo.train.preference reads, bad rows counted with their reason
(parent side, pure), and dojo.train.worker.preference's tokens with the tiny tokenizer (prompt
apart, answers masked, over-long rows dropped and named)."""

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from dojo.errors import DataError
from dojo.train import tiny
from dojo.train._demo_data import render_jsonl
from dojo.train._demo_pref import bundled_path, make
from dojo.train.preference import Pair, Unpaired, to_preference
from dojo.train.rows import read_rows

U = {"role": "user", "content": "What is 2 + 2?"}
A_GOOD = {"role": "assistant", "content": "2 + 2 = 4."}
A_BAD = {"role": "assistant", "content": "2 + 2 = 5."}
TRL = {"prompt": [U], "chosen": [A_GOOD], "rejected": [A_BAD]}
PLAIN = {"prompt": "2 + 2 =", "chosen": " 4", "rejected": " 5"}
SHAREGPT = {
    "conversations": [{"from": "human", "value": "What is 2 + 2?"}],
    "chosen": {"from": "gpt", "value": "2 + 2 = 4."},
    "rejected": {"from": "gpt", "value": "2 + 2 = 5."},
    "system": "Be brief.",
}
ALPACA = {"instruction": "Add", "input": "2 + 2", "chosen": "4", "rejected": "5"}
IMPLICIT = {"chosen": [U, A_GOOD], "rejected": [U, A_BAD]}
KTO = {"prompt": "2 + 2 =", "completion": " 4", "label": True}
KTO_LF = {"messages": [U, A_BAD], "label": False}


@pytest.mark.parametrize(
    ("record", "fmt"),
    [(TRL, "preference"), (PLAIN, "preference"), (SHAREGPT, "sharegpt_preference"),
     (ALPACA, "alpaca_preference"), (IMPLICIT, "preference")],
)  # fmt: skip
def test_pair_formats(record: dict[str, Any], fmt: str) -> None:
    got_fmt, row = to_preference(record, "dpo")
    assert got_fmt == fmt and isinstance(row, Pair)
    if isinstance(row.prompt, list):
        assert row.prompt[-1]["role"] == "user"
        assert row.chosen[0]["role"] == "assistant" and row.rejected[0]["role"] == "assistant"


def test_sharegpt_keeps_the_system_prompt_and_alpaca_joins_its_input() -> None:
    _, row = to_preference(SHAREGPT, "dpo")
    assert isinstance(row, Pair) and row.prompt[0] == {"role": "system", "content": "Be brief."}
    _, row = to_preference(ALPACA, "orpo")
    assert isinstance(row, Pair)
    assert row.prompt == [{"role": "user", "content": "Add\n2 + 2"}]
    assert row.chosen == [{"role": "assistant", "content": "4"}]


def test_implicit_prompt_is_what_both_share() -> None:
    _, row = to_preference(IMPLICIT, "dpo")
    assert isinstance(row, Pair)
    assert (row.prompt, row.chosen, row.rejected) == ([U], [A_GOOD], [A_BAD])


def test_implicit_text_prompt_as_hh_rlhf() -> None:
    row = {
        "chosen": "\n\nHuman: Hi\n\nAssistant: Hello there",
        "rejected": "\n\nHuman: Hi\n\nAssistant: Go",
    }
    _, got = to_preference(row, "dpo")
    assert got == Pair("\n\nHuman: Hi\n\nAssistant:", " Hello there", " Go")


def test_a_string_side_beside_messages_becomes_a_message() -> None:
    _, row = to_preference({"prompt": "Hi", "chosen": [A_GOOD], "rejected": "no"}, "dpo")
    assert isinstance(row, Pair)
    assert row.prompt == [{"role": "user", "content": "Hi"}]
    assert row.rejected == [{"role": "assistant", "content": "no"}]


def test_unpaired_rows_for_kto() -> None:
    _, row = to_preference(KTO, "kto")
    assert row == Unpaired("2 + 2 =", " 4", True)
    _, row = to_preference(KTO_LF, "kto")
    assert isinstance(row, Unpaired) and row.label is False and row.completion == [A_BAD]
    _, row = to_preference({**KTO, "label": 0}, "kto")
    assert isinstance(row, Unpaired) and row.label is False


@pytest.mark.parametrize(
    ("record", "objective", "reason"),
    [
        ({"prompt": [U], "chosen": [A_GOOD]}, "dpo", "no 'rejected' answer"),
        ({"prompt": [U], "rejected": [A_BAD]}, "dpo", "no 'chosen' answer"),
        ({"prompt": [U], "chosen": [A_GOOD], "rejected": []}, "dpo", "the answer is empty"),
        ({"prompt": [U], "chosen": [A_GOOD], "rejected": [{"role": "assistant", "content": " "}]},
         "dpo", "the rejected answer is empty"),
        ({"prompt": "", "chosen": "a", "rejected": "b"}, "dpo", "the prompt is empty"),
        ({"prompt": "q", "chosen": "  ", "rejected": "b"}, "dpo", "the chosen is empty"),
        ({"prompt": "q", "chosen": "a", "rejected": "a"}, "dpo", "chosen and rejected are the same"),
        ({"prompt": [U, A_GOOD], "chosen": [A_GOOD], "rejected": [A_BAD]}, "dpo",
         "the prompt ends with an assistant turn"),
        ({"prompt": [U], "chosen": [U], "rejected": [A_BAD]}, "dpo", "must be assistant turns"),
        ({"prompt": "q", "chosen": 3, "rejected": "b"}, "dpo", "'chosen' is int"),
        ({"messages": [U, A_GOOD]}, "dpo", "not a preference row (keys: messages)"),
        (KTO, "dpo", "an unpaired row (one answer and a label) trains only with --objective kto"),
        ({**KTO, "label": "yes"}, "kto", "'label' must be true or false"),
        ({"messages": [U], "label": True}, "kto", "the last turn must be the assistant's answer"),
        ({"chosen": [U, A_GOOD], "rejected": [A_BAD]}, "dpo", "share no first turn"),
        ([TRL], "dpo", "expected a JSON object"),
    ],
)  # fmt: skip
def test_bad_rows_say_why(record: Any, objective: str, reason: str) -> None:
    with pytest.raises(DataError) as e:
        to_preference(record, objective)
    assert reason in e.value.message


def test_read_rows_counts_bad_rows_with_file_and_line(tmp_path: Path) -> None:
    p = tmp_path / "pairs.jsonl"
    rows = [
        TRL,
        {"prompt": [U], "chosen": [A_GOOD]},
        SHAREGPT,
        PLAIN,
        {"prompt": "q", "chosen": "", "rejected": "b"},
    ]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))  # fmt: skip
    r = read_rows([str(p)], objective="dpo")
    assert [s for s, _ in r.rows] == [f"{p}:1", f"{p}:3", f"{p}:4"]
    assert r.bad == [(f"{p}:2", "no 'rejected' answer: a preference row needs a chosen and a "
                                "rejected one"), (f"{p}:5", "the chosen is empty")]  # fmt: skip
    assert r.format_counts["preference"] == 2 and r.format_counts["sharegpt_preference"] == 1
    assert "3 valid rows (preference 2, sharegpt_preference 1), 2 bad" in r.summary()
    # the same file as SFT data: nothing is a conversation
    assert not read_rows([str(p)]).rows


def test_columns_map_and_folders_mix_as_for_sft(tmp_path: Path) -> None:
    from dojo.train.sources import parse_all, parse_columns

    folder = tmp_path / "prefs"
    folder.mkdir()
    (folder / "a.jsonl").write_text(json.dumps({"prompt": "q", "better": "a", "worse": "b"}) + "\n")
    (folder / "b.jsonl").write_text(json.dumps(PLAIN) + "\n")
    cols = parse_columns(("chosen=better", "rejected=worse"))
    r = read_rows([str(folder)], columns=cols, objective="dpo")
    assert [row for _, row in r.rows] == [Pair("q", "a", "b"), Pair("2 + 2 =", " 4", " 5")]
    mixed = parse_all([str(folder / "a.jsonl"), str(folder / "b.jsonl")], (0.7, 0.3))
    assert [s.weight for s in mixed] == pytest.approx([0.7, 0.3])


def test_preference_rows_under_sft_point_to_a_preference_objective(tmp_path: Path) -> None:
    from dojo.train.preflight import check_data

    p = tmp_path / "pref.jsonl"
    p.write_text(json.dumps(PLAIN) + "\n" + json.dumps(SHAREGPT) + "\n")
    with pytest.raises(DataError) as e:
        check_data((str(p),))
    assert e.value.message.endswith(
        f"{p}:1: a preference row (keys: chosen, prompt, rejected), and --objective sft trains "
        "conversations: pass --objective dpo (or orpo, simpo) to train on the chosen/rejected pairs"
    )
    bad = read_rows([str(p)]).bad
    assert [why.split(",")[0] for _, why in bad] == ["a preference row (keys: chosen"] * 2
    assert "(keys: chosen, conversations, rejected, system)" in bad[1][1]
    assert len(read_rows([str(p)], objective="dpo").rows) == 2


def test_preflight_names_the_preference_formats(tmp_path: Path) -> None:
    from dojo.train.preflight import check_data

    p = tmp_path / "chats.jsonl"
    p.write_text(json.dumps({"messages": [U, A_GOOD]}) + "\n")
    with pytest.raises(DataError) as e:
        check_data((str(p),), objective="dpo")
    assert "no valid row; first problem" in e.value.message
    assert "prompt, chosen and rejected" in (e.value.hint or "")


def test_parquet_preference_columns_are_a_known_format(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    p = tmp_path / "pairs.parquet"
    pq.write_table(pa.Table.from_pylist([PLAIN, PLAIN]), p)
    r = read_rows([str(p)], objective="dpo")
    assert r.passthrough == [str(p)]


def test_demo_preference_file_matches_generator() -> None:
    assert bundled_path().read_text(encoding="utf-8") == render_jsonl(make())
    r = read_rows([str(bundled_path())], objective="dpo")
    assert len(r.rows) == 256 and not r.bad


# ---- tokens (dojo.train.worker.preference), the tiny tokenizer --------------------------------

needs_tokenizers = pytest.mark.skipif(
    importlib.util.find_spec("tokenizers") is None,
    reason="needs the train extra (tokenizers): pip install -e '.[train]' in dojo's clone",
)


class Tok:
    """The slice of a transformers fast tokenizer dojo.train.worker.preference uses."""

    def __init__(self, folder: Path) -> None:
        from tokenizers import Tokenizer

        self.tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.eos_token_id = self.tok.token_to_id(tiny.EOS)
        self.bos = self.tok.token_to_id(tiny.BOS)

    def __call__(self, text: str, **kw: Any) -> dict[str, Any]:
        e = self.tok.encode(text, add_special_tokens=False)
        ids, offsets = list(e.ids), list(e.offsets)
        if kw.get("add_special_tokens"):  # as the Llama-style tokenizers that add a BOS
            ids, offsets = [self.bos, *ids], [(0, 0), *offsets]
        return {"input_ids": ids, "offset_mapping": offsets}

    def decode(self, ids: list[int]) -> str:
        return str(self.tok.decode(ids, skip_special_tokens=False))


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> Tok:
    return Tok(tiny.materialize_tiny_model(tmp_path_factory.mktemp("tiny") / "model"))


def _build(rows: list[Any], tok: Tok, objective: str = "dpo", **kw: Any) -> Any:
    from dojo.chat.template import load_template
    from dojo.train.worker import preference

    pairs = [(f"f:{i + 1}", to_preference(r, objective)[1]) for i, r in enumerate(rows)]
    kw = {"seq_len": 256, "overflow": "truncate", **kw}
    return preference.build(pairs, tok, load_template(tiny.TEMPLATE), objective=objective, **kw)


@needs_tokenizers
def test_conversation_pair_splits_at_the_answer(tok: Tok) -> None:
    (ex,), rep = _build([TRL], tok)
    prompt, chosen, rejected = (
        tok.decode(ex[k]) for k in ("prompt_ids", "chosen_ids", "rejected_ids")
    )
    assert prompt == "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n"
    assert chosen == "2 + 2 = 4.<|im_end|>" and rejected == "2 + 2 = 5.<|im_end|>"  # stop trained
    assert (rep.rows, rep.used, rep.bad) == (1, 1, 0)
    assert rep.trained_tokens == len(ex["chosen_ids"]) + len(ex["rejected_ids"])


@needs_tokenizers
def test_plain_pair_gets_bos_and_eos(tok: Tok) -> None:
    (ex,), _ = _build([PLAIN], tok)
    assert ex["prompt_ids"][0] == tok.bos and tok.decode(ex["prompt_ids"][1:]) == "2 + 2 ="
    assert ex["chosen_ids"][-1] == tok.eos_token_id and tok.decode(ex["chosen_ids"][:-1]) == " 4"


@needs_tokenizers
def test_kto_unpairs_a_pair_and_reads_labels(tok: Tok) -> None:
    exs, rep = _build([TRL, KTO, KTO_LF], tok, objective="kto")
    assert [e["label"] for e in exs] == [True, False, True, False]
    assert exs[0]["prompt_ids"] == exs[1]["prompt_ids"]
    assert set(exs[0]) == {"prompt_ids", "completion_ids", "label"} and rep.used == 3


@needs_tokenizers
def test_over_long_rows_are_dropped_and_named(tok: Tok) -> None:
    long = {"prompt": "q " * 40, "chosen": "a " * 40, "rejected": "b"}
    exs, rep = _build([TRL, long], tok, seq_len=40, overflow="drop")
    assert len(exs) == 1 and (rep.used, rep.dropped) == (1, 1)
    assert rep.bad_rows[0][0] == "f:2" and "over --seq-len 40" in rep.bad_rows[0][1]
    # truncate cuts the answers after a prompt that fits, counts it; a prompt alone over is dropped
    cut, rep = _build([{**long, "prompt": "q"}], tok, seq_len=10)
    assert rep.truncated == 1 and len(cut[0]["prompt_ids"]) + len(cut[0]["chosen_ids"]) == 10
    _, rep = _build([long], tok, seq_len=20)
    assert rep.dropped == 1 and "the prompt alone is" in rep.bad_rows[0][1]


@needs_tokenizers
def test_a_template_that_drops_the_answer_is_a_bad_row(tok: Tok) -> None:
    from dojo.chat.template import ChatTemplate
    from dojo.train.worker import preference

    drop_last = ChatTemplate.from_source(
        "{% for m in messages[:-1] %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}", name="x"
    )
    _, row = to_preference(TRL, "dpo")
    exs, rep = preference.build([("f:1", row)], tok, drop_last, seq_len=64, overflow="drop",
                                objective="dpo")  # fmt: skip
    assert not exs and rep.bad == 1
    assert rep.bad_rows == [("f:1", "the chat template dropped the chosen answer")]
