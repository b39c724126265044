"""--data syntax (dojo.train.sources), the text and prompt/completion formats, column mapping,
CSV/Parquet/folder reading and weighted mixing. Fast: no training."""

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dojo.chat.conversation import PlainText, to_example, to_messages
from dojo.errors import DataError
from dojo.train import sources
from dojo.train.rows import read_rows

GOOD = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}


def write_jsonl(path: Path, rows: list[Any]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.mark.parametrize(
    ("spec", "kind", "name", "subset", "split", "weight"),
    [
        ("HuggingFaceH4/ultrachat_200k@train_sft", "hub", "HuggingFaceH4/ultrachat_200k", None, "train_sft", None),
        ("org/ds:en@train", "hub", "org/ds", "en", "train", None),
        ("org/ds:en", "hub", "org/ds", "en", "train", None),
        ("org/ds@train[:10%]=3", "hub", "org/ds", None, "train[:10%]", 3.0),
        ("a.jsonl", "file", "a.jsonl", None, "train", None),
        ("a.jsonl=0.7", "file", "a.jsonl", None, "train", 0.7),
        ("C:\\data\\a.jsonl", "file", "C:\\data\\a.jsonl", None, "train", None),
        ("C:\\data\\a.jsonl=0.5", "file", "C:\\data\\a.jsonl", None, "train", 0.5),
        ("org/data.jsonl", "file", "org/data.jsonl", None, "train", None),
    ],
)  # fmt: skip
def test_parse_spec(
    spec: str, kind: str, name: str, subset: str | None, split: str, weight: float | None
) -> None:
    s = sources.parse(spec)
    assert (s.kind, s.name, s.subset, s.split, s.weight) == (kind, name, subset, split, weight)


def test_an_existing_path_with_equals_is_a_path(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "part=1").mkdir()
    write_jsonl(tmp_path / "part=1" / "a.jsonl", [GOOD])
    s = sources.parse("part=1")
    assert (s.kind, s.weight, s.files) == ("file", None, (str(Path("part=1") / "a.jsonl"),))


def test_folder_is_every_supported_file_sorted(tmp_path: Path) -> None:
    for name in ("b.jsonl", "a.parquet", "c.csv", "notes.txt", "d.json"):
        (tmp_path / name).write_text("x")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "e.jsonl").write_text("x")
    names = [Path(f).name for f in sources.parse(str(tmp_path)).files]
    assert names == ["a.parquet", "b.jsonl", "c.csv", "d.json"]


def test_weights_normalised_and_all_or_none() -> None:
    got = sources.parse_all(["a.jsonl=7", "b.parquet=3"])
    assert [round(s.weight or 0, 6) for s in got] == [0.7, 0.3]
    got = sources.parse_all(["a.jsonl", "b.parquet"], ratios=(1.0, 3.0))
    assert [s.weight for s in got] == [0.25, 0.75]
    assert [s.weight for s in sources.parse_all(["a.jsonl", "b.jsonl"])] == [None, None]
    with pytest.raises(DataError, match="--data b.jsonl: no mixing weight"):
        sources.parse_all(["a.jsonl=0.5", "b.jsonl"])
    with pytest.raises(DataError, match="1 ratio.s. for 2"):
        sources.parse_all(["a.jsonl", "b.jsonl"], ratios=(1.0,))
    with pytest.raises(DataError, match="carry =WEIGHT already"):
        sources.parse_all(["a.jsonl=1", "b.jsonl=1"], ratios=(1.0, 1.0))
    with pytest.raises(DataError, match="must be a positive number"):
        sources.parse("a.jsonl=0")


@pytest.mark.parametrize(
    ("specs", "message"),
    [
        (["d/a.jsonl", "d/a.jsonl"], "--data d/a.jsonl: given twice"),
        (["d/a.jsonl=0.5", "d/a.jsonl=0.5"], "--data d/a.jsonl=0.5: given twice"),
        (["d/a.jsonl", "./d/a.jsonl"], "--data ./d/a.jsonl: the same file as --data d/a.jsonl"),
        (["d/a.jsonl", "ln.jsonl"], "--data ln.jsonl: the same file as --data d/a.jsonl"),
        (["d", "./d/"], "--data ./d/: the same folder as --data d"),
        (["d", "d/b.jsonl"], "--data d/b.jsonl: d/b.jsonl is read by --data d too"),
        (["d/b.jsonl", "d"], "--data d: d/b.jsonl is read by --data d/b.jsonl too"),
        (["org/ds", "org/ds@train"], "--data org/ds@train: the same dataset as --data org/ds"),
    ],
)
def test_a_source_given_twice_is_refused(
    tmp_path: Path, monkeypatch: Any, specs: list[str], message: str
) -> None:
    """Each repeat would read every row of the file twice: the mix syntax weights a source
    (=WEIGHT), so a repeat is a mistake, not a way to upweight."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    write_jsonl(tmp_path / "d" / "a.jsonl", [GOOD])
    write_jsonl(tmp_path / "d" / "b.jsonl", [GOOD])
    (tmp_path / "ln.jsonl").symlink_to(tmp_path / "d" / "a.jsonl")
    with pytest.raises(DataError) as e:
        sources.check_repeats([sources.parse(s) for s in specs])
    assert e.value.message == message + ", so each of its rows would count twice"
    assert e.value.hint.startswith("give each file once") and "=WEIGHT" in e.value.hint
    distinct = ["d/a.jsonl", "d/b.jsonl", "org/ds:en", "org/ds:fr", "org/ds@test"]
    sources.check_repeats([sources.parse(s) for s in distinct])
    with pytest.raises(DataError, match="^--eval-data d/a.jsonl: given twice") as e:
        sources.check_repeats([sources.parse("d/a.jsonl")] * 2, "--eval-data")
    assert "=WEIGHT" not in e.value.hint


@pytest.mark.parametrize("bad", ["0.7,x", "0.7,-1", "inf", "0.7,,0.3"])
def test_bad_ratios(bad: str) -> None:
    with pytest.raises(DataError, match=r"^--data-ratios .*not a positive number"):
        sources.parse_ratios(bad)


def test_columns() -> None:
    assert sources.parse_columns(["messages=conversation"]) == {"conversation": "messages"}
    assert sources.parse_columns({"prompt": "q", "completion": "a"}) == {"q": "prompt", "a": "completion"}  # fmt: skip
    assert sources.parse_columns(["prompt=q,completion=a"]) == {"q": "prompt", "a": "completion"}
    with pytest.raises(DataError, match="expected TARGET=SOURCE"):
        sources.parse_columns(["messages"])
    with pytest.raises(DataError, match="'answer' is not a column dojo reads"):
        sources.parse_columns(["answer=a"])
    assert sources.rename({"q": 1, "x": 2}, {"q": "prompt"}) == {"prompt": 1, "x": 2}


def test_text_and_prompt_completion_formats() -> None:
    assert to_example({"text": "Once upon"}) == ("text", PlainText("", "Once upon"))
    assert to_example({"prompt": "2+2=", "completion": "4"}) == (
        "prompt_completion",
        PlainText("2+2=", "4"),
    )
    fmt, msgs = to_example(
        {"prompt": [{"role": "user", "content": "hi"}],
         "completion": [{"role": "assistant", "content": "yo"}]}
    )  # fmt: skip
    assert fmt == "prompt_completion" and [m["role"] for m in msgs] == ["user", "assistant"]
    for bad, why in [
        ({"text": ""}, "non-empty string"),
        ({"text": 3}, "non-empty string"),
        ({"prompt": "a", "completion": ""}, "'completion' is empty"),
        ({"prompt": "a", "completion": ["x"]}, "both be strings"),
    ]:
        with pytest.raises(DataError, match=why):
            to_example(bad)
    with pytest.raises(DataError, match="plain text, not a conversation"):
        to_messages({"text": "x"})


def test_read_rows_formats_and_mapping(tmp_path: Path) -> None:
    p = write_jsonl(
        tmp_path / "d.jsonl",
        [{"text": "doc"}, {"prompt": "q", "completion": "a"}, {"conv": GOOD["messages"]}],
    )
    r = read_rows([p], columns={"conv": "messages"})
    assert r.format_counts["text"] == 1 and r.format_counts["prompt_completion"] == 1
    assert r.format_counts["messages"] == 1 and not r.bad
    r = read_rows([p])
    assert len(r.bad) == 1 and "keys: conv" in r.bad[0][1]


def test_csv_and_parquet_checked_cheaply(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    csv = tmp_path / "d.csv"
    csv.write_text("question,answer\nq1,a1\nq2,a2\n")
    with pytest.raises(DataError, match="CSV columns question, answer hold no known format"):
        read_rows([str(csv)])
    r = read_rows([str(csv)], columns={"question": "prompt", "answer": "completion"})
    assert r.passthrough == [str(csv)] and not r.rows
    par = tmp_path / "d.parquet"
    pq.write_table(pa.table({"text": ["a", "b"]}), par)
    assert read_rows([str(par)]).passthrough == [str(par)]
    empty = tmp_path / "e.csv"
    empty.write_text("text\n")
    with pytest.raises(DataError, match="the CSV file has no rows"):
        read_rows([str(empty)])


def test_worker_reads_csv_and_parquet_with_mapping(tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dojo.train.worker.examples import load_rows

    csv = tmp_path / "d.csv"
    csv.write_text("q,a\nq1,a1\nq2,a2\n")
    pq.write_table(pa.table({"q": ["q3"], "a": ["a3"]}), tmp_path / "e.parquet")
    r = load_rows([str(tmp_path)], {"q": "prompt", "a": "completion"})
    assert [m for _, m in r.rows] == [PlainText(f"q{i}", f"a{i}") for i in (1, 2, 3)]  # sorted


def _mix(tmp_path: Path, specs: list[str], seed: int = 7) -> list[str]:
    from dojo.train.worker import examples, tokenized

    srcs = sources.parse_all(specs)
    parts = [(s, examples.load_rows(tokenized._refs(s))) for s in srcs]
    return [src for src, _ in tokenized._mix(parts, seed).rows]


def test_mixing_follows_the_ratios_and_stops_at_the_first_exhausted(tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    a = write_jsonl(tmp_path / "a.jsonl", [{"text": f"a{i}"} for i in range(300)])
    b = write_jsonl(tmp_path / "b.jsonl", [{"text": f"b{i}"} for i in range(300)])
    got = _mix(tmp_path, [f"{a}=0.75", f"{b}=0.25"])
    from_a = sum(s.startswith(a) for s in got)
    assert from_a == 300  # a ran out first: the mix stops there, nothing repeated
    assert 60 < len(got) - from_a < 140  # ~100 of b for 300 of a at 3:1
    assert len(set(got)) == len(got)
    assert got == _mix(tmp_path, [f"{a}=0.75", f"{b}=0.25"])  # seeded
    assert got != _mix(tmp_path, [f"{a}=0.75", f"{b}=0.25"], seed=8)
    plain = _mix(tmp_path, [a, b])
    assert plain[:300] == [f"{a}:{i}" for i in range(1, 301)] and len(plain) == 600


def test_plain_examples_train_the_completion_and_eos(tmp_path: Path) -> None:
    pytest.importorskip("transformers", reason="needs the train extra")
    from transformers import AutoTokenizer

    from dojo.train.tiny import build_tiny_tokenizer
    from dojo.train.worker.examples import build_examples
    from dojo.train.worker.packing import IGNORE

    tok = AutoTokenizer.from_pretrained(build_tiny_tokenizer(tmp_path / "tok"))
    rows = [("t:1", PlainText("", "hello world")), ("t:2", PlainText("Q: 2+2? A:", " four"))]
    exs, rep = build_examples(rows, tok, SimpleNamespace(), seq_len=64)
    assert rep.used == 2 and exs[0]["input_ids"][-1] == tok.eos_token_id
    text = exs[0]
    assert all(lab != IGNORE for lab in text["labels"][-3:])
    pc = exs[1]
    trained = [i for i, lab in zip(pc["input_ids"], pc["labels"], strict=True) if lab != IGNORE]
    assert tok.decode(trained[:-1]).strip() == "four" and trained[-1] == tok.eos_token_id


def test_cli_yaml_columns_and_bad_flags_refused_before_launch(cli: Any, tmp_path: Path) -> None:
    from unittest.mock import patch

    csv = tmp_path / "qa.csv"
    csv.write_text("question,answer\nq,a\n")
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"data: [{csv}]\ndata_columns:\n  prompt: question\n  completion: answer\n")
    with patch("dojo.train.launch.run", side_effect=AssertionError("launched")):
        r = cli(
            "train", "--nproc", "1", "--config", str(cfg), "--dry-run", "-o", str(tmp_path / "o")
        )
    assert r.exit_code == 0, r.stderr
    cases = [
        (["--data", str(csv)], f"error: --data {csv}: CSV columns question, answer hold no known format"),
        (["--data", f"{csv}=0.5", "--data", str(csv)], f"error: --data {csv}: no mixing weight"),
        (["--data", str(csv), "--data-ratios", "1,x"], "error: --data-ratios '1,x': 'x' is not a positive number"),
        (["--data", str(csv), "--data-columns", "answer=a"], "error: --data-columns answer=a: 'answer' is not"),
    ]  # fmt: skip
    for args, first in cases:
        with patch("dojo.train.launch.run", side_effect=AssertionError("launched")):
            r = cli("train", "--nproc", "1", *args, "-o", str(tmp_path / "out"))
        lines = r.stderr.splitlines()
        assert r.exit_code == 1 and lines[0].startswith(first), r.stderr
        assert len(lines) == 2 and lines[1].startswith("hint: ")


# ---------------------------------------------------------------- weights' edge cases


@pytest.mark.parametrize(
    "weight", ["-1", "nan", "inf", "-inf", "1e400", "0", "0x10", "abc", "", "1" * 5000, "٣"]
)
def test_a_bad_weight_is_named(weight: str, tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "a.jsonl", [GOOD])
    with pytest.raises(DataError) as e:
        sources.parse_all([f"a.jsonl={weight}", "b.jsonl=1"])
    assert (
        e.value.message.startswith("--data a.jsonl=")
        and "must be a positive number" in e.value.message
    )
    assert "no mixing weight" not in e.value.message and len(e.value.message) < 300
    assert e.value.hint and "relative" in e.value.hint


def test_huge_weights_do_not_overflow() -> None:
    mixed = sources.parse_all(["a.jsonl=1e308", "b.jsonl=1e308", "c.jsonl=5e307"])
    assert [s.weight for s in mixed] == [0.4, 0.4, 0.2]
    assert [s.weight for s in sources.parse_all(["a.jsonl", "b.jsonl"], ratios=(1e308, 1e308))] == [
        0.5,
        0.5,
    ]
    assert sources.normalise([1e-300, 1e-300]) == [0.5, 0.5]


def test_a_share_that_rounds_to_zero_is_refused() -> None:
    with pytest.raises(DataError, match="a.jsonl=1e-320: weight .* is too small next to 1e\\+308"):
        sources.parse_all(["a.jsonl=1e-320", "b.jsonl=1e308"])


def test_ratios_that_are_not_numbers() -> None:
    for bad in ([10**5000, 1], ["nan", 1], [-1, 1], [True, "x"]):
        with pytest.raises(DataError, match="is not a positive number") as e:
            sources.parse_ratios(bad)
        assert len(e.value.message) < 300


def test_paths_the_os_refuses_are_not_hub_ids_and_do_not_crash() -> None:
    long = "a" * 5000 + ".jsonl"
    assert not sources.on_disk(long) and not sources.on_disk("a\x00b")
    assert sources.parse(long).kind == "file"
    assert sources.parse("org/" + "n" * 5000).kind == "hub"
