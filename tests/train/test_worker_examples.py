"""dojo.train.worker.examples + tiny + demo data: masking on every format and template, overflow, bad rows.

Fast tests drive build_examples with the tiny tokenizer through the `tokenizers` library (no
transformers import); the slow ones repeat the key checks with transformers' AutoTokenizer and
real Hub-style tokenizers (one that adds a BOS) to prove the same ids and labels.
"""

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from dojo.errors import DataError
from dojo.train import tiny
from dojo.train._demo_data import bundled_path, make, render_jsonl
from dojo.train.rows import RowsReport
from dojo.train.worker.examples import DataReport, build_examples, load_rows, mask_labels
from dojo.train.worker.packing import IGNORE

# The fast tests tokenize with `tokenizers` (in the train extra, through transformers).
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("tokenizers") is None,
    reason="needs the train extra (tokenizers): pip install -e '.[train]' in dojo's clone",
)

CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is 2 + 3?"},
    {"role": "assistant", "content": "2 + 3 = 5."},
    {"role": "user", "content": "And 4 + 4?"},
    {"role": "assistant", "content": "4 + 4 = 8."},
]


class RustTokenizer:
    """The slice of a transformers fast tokenizer that build_examples uses."""

    is_fast = True

    def __init__(self, folder: Path) -> None:
        from tokenizers import Tokenizer

        self.tok = Tokenizer.from_file(str(folder / "tokenizer.json"))

    def __call__(self, texts: list[str], **kw: Any) -> dict[str, Any]:
        assert kw == {"add_special_tokens": False, "return_offsets_mapping": True}
        encs = self.tok.encode_batch(texts, add_special_tokens=False)
        return {"input_ids": [e.ids for e in encs], "offset_mapping": [e.offsets for e in encs]}

    def decode(self, ids: list[int]) -> str:
        return str(self.tok.decode(ids, skip_special_tokens=False))


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny.materialize_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def tok(tiny_dir: Path) -> RustTokenizer:
    return RustTokenizer(tiny_dir)


def trained_text(tok: Any, ex: dict[str, list[int]]) -> str:
    return str(
        tok.decode(
            [i for i, lab in zip(ex["input_ids"], ex["labels"], strict=True) if lab != IGNORE]
        )
    )


def test_mask_labels_overlap_rule() -> None:
    offsets = [(0, 3), (3, 5), (5, 9), (9, 12), (12, 12)]
    assert mask_labels([1, 2, 3, 4, 5], offsets, [(4, 10)]) == [IGNORE, 2, 3, 4, IGNORE]
    assert mask_labels([1, 2, 3, 4, 5], offsets, [(0, 3), (9, 12)]) == [
        1,
        IGNORE,
        IGNORE,
        4,
        IGNORE,
    ]
    assert mask_labels([1, 2], [(0, 1), (1, 2)], []) == [IGNORE, IGNORE]


@pytest.mark.parametrize(
    "record",
    [
        {"messages": CHAT},
        {
            "system": "Be brief.",
            "conversations": [
                {"from": "human", "value": "What is 2 + 3?"},
                {"from": "gpt", "value": "2 + 3 = 5."},
                {"from": "human", "value": "And 4 + 4?"},
                {"from": "gpt", "value": "4 + 4 = 8."},
            ],
        },
        {
            "system": "Be brief.",
            "history": [["What is 2 + 3?", "2 + 3 = 5."]],
            "instruction": "And 4 + 4?",
            "output": "4 + 4 = 8.",
        },
    ],
    ids=["messages", "sharegpt", "alpaca"],
)
def test_each_format_trains_only_the_replies(
    tmp_path: Path, tiny_dir: Path, tok: RustTokenizer, record: dict[str, Any]
) -> None:
    from dojo.chat.template import load_template

    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps(record) + "\n")
    rows = load_rows([str(path)])
    examples, report = build_examples(rows, tok, load_template(tiny_dir), seq_len=256)
    assert report.used == 1 and report.bad == 0
    (ex,) = examples
    assert trained_text(tok, ex) == "2 + 3 = 5.<|im_end|>4 + 4 = 8.<|im_end|>"
    assert report.trained_tokens == sum(lab != IGNORE for lab in ex["labels"])
    assert report.tokens == len(ex["input_ids"])


# Other templates: the tiny byte-level tokenizer encodes any text, so the masks of real templates
# can be checked here; the trained text is each reply followed by the template's stop token.
@pytest.mark.parametrize(
    ("name", "stop"),
    [
        ("llama-3.1-instruct", "<|eot_id|>"),
        ("qwen2.5-instruct", "<|im_end|>"),
        ("mistral-7b-instruct-v0.2", "</s>"),
        ("gemma-2-it", "<end_of_turn>"),
        ("phi-3-mini-instruct", "<|end|>"),
        ("zephyr-7b-beta", "</s>"),
    ],
)
def test_masks_on_bundled_templates(tok: RustTokenizer, name: str, stop: str) -> None:
    from dojo.chat.template import load_template

    tpl = load_template(name)
    chat = CHAT[1:] if not tpl.supports.get("system", True) else CHAT
    examples, report = build_examples([("x:1", chat)], tok, tpl, seq_len=1024)
    assert report.used == 1, report.bad_rows
    # A BPE token may carry the space before the reply ("[/INST] 2" -> " 2"): compare the
    # non-space characters; any prompt text leaking into the labels would still show.
    got = "".join(trained_text(tok, examples[0]).split())
    assert got == "".join(f"2 + 3 = 5.{stop}4 + 4 = 8.{stop}".split())


def test_bad_rows_counted_never_padded(tiny_dir: Path, tok: RustTokenizer) -> None:
    from dojo.chat.template import load_template

    rows = RowsReport(rows=[("a:1", CHAT[1:])], bad=[("a:2", "unknown role 'robot'")])
    alternating = load_template("mistral-7b-instruct-v0.1")  # refuses user, user
    two_users = [{"role": "user", "content": "a"}, *CHAT[1:]]
    rows.rows.append(("a:3", two_users))
    examples, report = build_examples(rows, tok, alternating, seq_len=256)
    assert report.rows == 3 and report.used == 1 and report.bad == 2
    assert [s for s, _ in report.bad_rows] == ["a:2", "a:3"]
    assert "alternate" in report.bad_rows[1][1]
    assert len(examples) == 1
    assert report.to_dict()["bad_rows"][0] == "a:2: unknown role 'robot'"


def test_overflow_truncate_and_drop(tiny_dir: Path, tok: RustTokenizer) -> None:
    from dojo.chat.template import load_template

    tpl = load_template(tiny_dir)
    long_prompt = [
        {"role": "user", "content": "word " * 200},
        {"role": "assistant", "content": "ok"},
    ]
    rows = [("a:1", CHAT), ("a:2", long_prompt)]
    full, _ = build_examples([rows[0]], tok, tpl, seq_len=4096)
    n = len(full[0]["input_ids"])
    ex, rep = build_examples(rows, tok, tpl, seq_len=n - 3, overflow="truncate")
    # CHAT is cut (still has trained tokens); the long prompt has no reply left: dropped
    assert (rep.used, rep.truncated, rep.dropped) == (1, 1, 1)
    assert ex[0]["input_ids"] == full[0]["input_ids"][: n - 3]
    ex, rep = build_examples(rows, tok, tpl, seq_len=n - 3, overflow="drop")
    assert (rep.used, rep.truncated, rep.dropped, len(ex)) == (0, 0, 2, 0)
    ex, rep = build_examples(rows, tok, tpl, seq_len=n, overflow="drop")
    assert (rep.used, rep.dropped) == (1, 1)


def test_argument_errors(tok: RustTokenizer) -> None:
    with pytest.raises(DataError, match="--overflow 'cut'"):
        build_examples([], tok, "chatml", seq_len=8, overflow="cut")
    with pytest.raises(DataError, match="--seq-len 1"):
        build_examples([], tok, "chatml", seq_len=1)

    class Slow:
        is_fast = False

    with pytest.raises(DataError, match="not a fast tokenizer"):
        build_examples([], Slow(), "chatml", seq_len=8)


def test_report_defaults() -> None:
    r = DataReport()
    for i in range(30):
        r.skip(f"f:{i}", "bad")
    assert r.bad == 30 and len(r.bad_rows) == 20


# ---- the bundled tiny default -----------------------------------------------------------


def test_demo_data_file_matches_generator() -> None:
    assert bundled_path().read_text(encoding="utf-8") == render_jsonl(make())
    assert make(5, seed=1) == make(5, seed=1) != make(5, seed=2)


def test_tiny_tokenizer_is_deterministic_and_fits_config(tmp_path: Path, tiny_dir: Path) -> None:
    again = tiny.build_tiny_tokenizer(tmp_path / "again")
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        assert (again / name).read_bytes() == (tiny_dir / name).read_bytes()
    config = json.loads(tiny.TINY_CONFIG.read_text())
    vocab = json.loads((tiny_dir / "tokenizer.json").read_text())["model"]["vocab"]
    assert config["vocab_size"] == tiny.VOCAB_SIZE >= len(vocab) > 256
    for key, token in (
        ("pad_token_id", tiny.PAD),
        ("bos_token_id", tiny.BOS),
        ("eos_token_id", tiny.EOS),
    ):
        assert vocab[token] == config[key]
    assert (tiny_dir / "config.json").read_bytes() == tiny.TINY_CONFIG.read_bytes()


def test_tiny_demo_examples(tiny_dir: Path, tok: RustTokenizer) -> None:
    from dojo.chat.template import load_template

    rows = load_rows([str(bundled_path())])
    examples, report = build_examples(rows, tok, load_template(tiny_dir), seq_len=256)
    assert report.used == len(make()) and report.bad == report.dropped == 0
    assert 0.1 < report.trained_tokens / report.tokens < 0.5  # replies are a minority, not none
    assert max(len(e["input_ids"]) for e in examples) < 256


def test_materialize_replaces_folder(tmp_path: Path) -> None:
    out = tmp_path / "m"
    out.mkdir()
    (out / "stale.txt").write_text("x")
    tiny.materialize_tiny_model(out)
    assert sorted(p.name for p in out.iterdir()) == [
        "chat_template.jinja",
        "config.json",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


# ---- slow: transformers' own tokenizer classes ----------------------------------------------


@pytest.mark.slow
def test_autotokenizer_matches_and_templates_agree(tiny_dir: Path, tok: RustTokenizer) -> None:
    from transformers import AutoTokenizer

    from dojo.chat.template import load_template, render

    hf = AutoTokenizer.from_pretrained(tiny_dir)
    assert hf.is_fast and (hf.pad_token, hf.bos_token, hf.eos_token) == (
        tiny.PAD,
        tiny.BOS,
        tiny.EOS,
    )
    assert hf.apply_chat_template(CHAT, tokenize=False) == render(load_template(tiny_dir), CHAT)
    tpl = load_template(tiny_dir)
    a, _ = build_examples([("x", CHAT)], hf, tpl, seq_len=256)
    b, _ = build_examples([("x", CHAT)], tok, tpl, seq_len=256)
    assert a == b


@pytest.mark.slow
def test_no_double_bos(tmp_path: Path, tiny_dir: Path) -> None:
    """A template that writes BOS + a tokenizer that adds BOS: the sample starts with ONE."""
    from transformers import AutoTokenizer

    from dojo.chat.template import ChatTemplate

    spec = json.loads((tiny_dir / "tokenizer.json").read_text())
    spec["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [
            {"SpecialToken": {"id": "<s>", "type_id": 0}},
            {"Sequence": {"id": "A", "type_id": 0}},
        ],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}},
    }
    folder = tmp_path / "bos"
    folder.mkdir()
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        (folder / name).write_bytes((tiny_dir / name).read_bytes())
    (folder / "tokenizer.json").write_text(json.dumps(spec))
    hf = AutoTokenizer.from_pretrained(folder)
    assert hf("hi")["input_ids"][0] == 1  # this tokenizer does add a BOS
    source = (tiny_dir / "chat_template.jinja").read_text()
    tpl = ChatTemplate.from_source(
        "{{ bos_token }}" + source, bos_token="<s>", eos_token="<|im_end|>"
    )
    (ex,), _ = build_examples([("x", CHAT)], hf, tpl, seq_len=256)
    assert ex["input_ids"][0] == 1 and ex["input_ids"][1] != 1
    assert ex["input_ids"].count(1) == 1
