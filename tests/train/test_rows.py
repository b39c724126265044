"""dojo.train.rows: local data files row by row, bad rows with file:line, hard errors."""

import json
from pathlib import Path

import pytest

from dojo.errors import DataError
from dojo.train.rows import is_hub_name, read_rows

GOOD = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}
SHAREGPT = {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Yo"}]}
ALPACA = {"instruction": "Add", "input": "2 3", "output": "5"}


def write_jsonl(path: Path, lines: list[object]) -> str:
    path.write_text(
        "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines), "utf-8"
    )
    return str(path)


def test_three_formats_counted_in_order(tmp_path: Path) -> None:
    p = write_jsonl(tmp_path / "d.jsonl", [GOOD, SHAREGPT, ALPACA, GOOD])
    r = read_rows([p])
    assert [s for s, _ in r.rows] == [f"{p}:1", f"{p}:2", f"{p}:3", f"{p}:4"]
    assert r.format_counts == {
        "messages": 2,
        "sharegpt": 1,
        "alpaca": 1,
        "prompt_completion": 0,
        "text": 0,
    }
    assert r.bad == []
    assert r.rows[2][1][-1] == {"role": "assistant", "content": "5"}


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        ({"messages": []}, "non-empty list"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "unknown role 'robot'"),
        ({"messages": [{"role": "user"}]}, "has no 'content'"),
        ({"messages": [{"role": "user", "content": "only a question"}]}, "no assistant turn"),
        (
            {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": " "}]},
            "every assistant turn is empty",
        ),
        ({"conversations": [{"from": "alien", "value": "x"}]}, "unknown speaker 'alien'"),
        ({"conversations": [{"from": "human"}]}, "needs 'from' and 'value'"),
        ({"instruction": "x"}, "not in a known format"),
        ({"instruction": "x", "output": 5}, "'output' must be a string"),
        ([1, 2], "message 0 is int"),
        ('"just a string"', "expected a JSON object"),  # raw line: a JSON string
    ],
)
def test_bad_rows_reported_with_line_and_skipped(
    tmp_path: Path, record: object, reason: str
) -> None:
    p = write_jsonl(tmp_path / "d.jsonl", [GOOD, record, GOOD])
    r = read_rows([p])
    assert len(r.rows) == 2
    assert len(r.bad) == 1
    source, why = r.bad[0]
    assert source == f"{p}:2"
    assert reason in why


def test_blank_lines_keep_line_numbers(tmp_path: Path) -> None:
    p = write_jsonl(tmp_path / "d.jsonl", ["", GOOD, "   ", {"x": 1}])
    r = read_rows([p])
    assert [s for s, _ in r.rows] == [f"{p}:2"]
    assert r.bad[0][0] == f"{p}:4"


def test_json_array_sources_are_start_lines(tmp_path: Path) -> None:
    p = tmp_path / "d.json"
    p.write_text("[\n" + json.dumps(GOOD) + ",\n" + json.dumps(GOOD, indent=1) + ",\n{}\n]\n")
    r = read_rows([str(p)])
    assert [s for s, _ in r.rows] == [f"{p}:2", f"{p}:3"]
    assert r.bad[0][0] == f"{p}:{3 + len(json.dumps(GOOD, indent=1).splitlines())}"


def test_json_single_object_and_json_lines_named_json(tmp_path: Path) -> None:
    one = tmp_path / "one.json"
    one.write_text(json.dumps(GOOD, indent=2))
    lines = tmp_path / "lines.json"
    write_jsonl(lines, [GOOD, ALPACA])
    assert len(read_rows([str(one)]).rows) == 1
    assert len(read_rows([str(lines)]).rows) == 2


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("empty.jsonl", b"", "is empty"),
        ("blank.jsonl", b"\n  \n", "is empty"),
        ("bin.jsonl", b"\x00\x01\x02PK", "binary file"),
        ("latin.jsonl", b'{"a": "\xe9"}\n', "not UTF-8"),
        ("bad.jsonl", b'{"messages": []}\n{"messages": [\n', ":2: not valid JSON"),
        ("bad.json", b'[\n{"messages": []},\n{"messages": ]\n]', ":3: not valid JSON"),
        ("trail.json", b"[{}] x", "extra data"),
        ("data.csv", b"a,b\n", "CSV columns a, b hold no known format"),
        ("data.txt", b"a,b\n", "unsupported file type '.txt'"),
    ],
)
def test_file_errors(tmp_path: Path, name: str, content: bytes, message: str) -> None:
    p = tmp_path / name
    p.write_bytes(content)
    with pytest.raises(DataError) as e:
        read_rows([str(p)])
    assert message in e.value.message
    assert str(p) in e.value.message


def test_missing_and_folder(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no such file"):
        read_rows([str(tmp_path / "nope.jsonl")])
    with pytest.raises(DataError, match="the folder holds no .jsonl"):
        read_rows([str(tmp_path)])
    with pytest.raises(DataError, match="no data file"):
        read_rows([])


def test_hub_names_and_parquet_pass_through(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    table = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist([GOOD]), table)
    p = write_jsonl(tmp_path / "d.jsonl", [GOOD])
    r = read_rows(["org/chats", str(table), p])  # org/chats: in the test datasets cache (conftest)
    assert r.passthrough == ["org/chats", str(table)]
    assert len(r.rows) == 1
    assert is_hub_name("org/name")
    assert not is_hub_name("./org/name")
    assert not is_hub_name("dir/file.jsonl")
    assert not is_hub_name("a/b/c")


def test_template_render_check_marks_refused_rows_bad(tmp_path: Path) -> None:
    pytest.importorskip("jinja2")
    two_users = {
        "messages": [
            {"role": "user", "content": "a"},
            {"role": "user", "content": "b"},
            {"role": "assistant", "content": "c"},
        ]
    }
    p = write_jsonl(tmp_path / "d.jsonl", [GOOD, two_users])
    # mistral v0.1 raises "Conversation roles must alternate user/assistant/..."
    r = read_rows([p], template="mistral-7b-instruct-v0.1")
    assert len(r.rows) == 1
    assert r.bad[0][0] == f"{p}:2"
    assert "alternate" in r.bad[0][1]
    assert len(read_rows([p], template="chatml").rows) == 2


def test_summary_lists_first_bad_rows(tmp_path: Path) -> None:
    p = write_jsonl(tmp_path / "d.jsonl", [GOOD] + [{"x": i} for i in range(7)])
    text = read_rows([p]).summary(limit=2)
    assert text.splitlines()[0] == "1 valid rows (messages 1), 7 bad"
    assert f"skipped {p}:2:" in text
    assert "and 5 more bad rows" in text


def test_bundled_demo_data_is_all_valid() -> None:
    from dojo.paths import templates_dir

    r = read_rows([str(templates_dir() / "data" / "demo_chat.jsonl")], template="chatml")
    assert r.bad == []
    assert 200 <= len(r.rows) <= 1000


# ---------------------------------------------------------------- hostile data files


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder with odd data files; nothing may launch."""
    import dojo.gpus
    import dojo.train.launch

    monkeypatch.setattr(dojo.gpus, "list_gpus", lambda: [])
    monkeypatch.setattr(dojo.train.launch, "run", _no_launch)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DOJO_DEBUG", raising=False)
    import os

    for name in ("fifo.jsonl", "fifo.json", "fifo.csv", "fifo.parquet"):
        os.mkfifo(name)
    os.symlink("/dev/zero", "zero.jsonl")
    os.symlink("/dev/urandom", "urandom.jsonl")
    os.symlink("/dev/null", "null.json")
    return tmp_path


def _no_launch(*_a: object, **_k: object) -> int:
    raise AssertionError("hostile data reached the launch")


def _refused(r, needle: str) -> None:
    lines = r.stderr.splitlines()
    assert r.exit_code == 1 and len(lines) == 2, r.stdout + r.stderr
    assert lines[0].startswith("error: ") and needle in lines[0], lines[0]
    assert lines[1].startswith("hint: ") and len(lines[0]) < 400


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("fifo.jsonl", "a FIFO (named pipe)"),
        ("fifo.json", "a FIFO (named pipe)"),
        ("fifo.csv", "a FIFO (named pipe)"),
        ("fifo.parquet", "a FIFO (named pipe)"),
        ("zero.jsonl", "a character device"),
        ("urandom.jsonl", "a character device"),
        ("null.json", "a character device"),
    ],
)
@pytest.mark.parametrize("flag", ["--data", "--eval-data"])
def test_special_files_refused_at_once(
    name: str, kind: str, flag: str, data_dir: Path, cli
) -> None:
    import time

    start = time.monotonic()
    r = cli("train", "--dry-run", flag, name, "--output-dir", "out")
    _refused(r, f"{flag} {name} is {kind}, not a regular file")
    assert time.monotonic() - start < 5  # a FIFO hung forever, /dev/zero ran out of memory
    assert not (data_dir / "out").exists()


def test_a_json_file_past_the_size_bound_is_refused_unread(tmp_path: Path) -> None:
    huge = tmp_path / "huge.jsonl"
    with open(huge, "wb") as f:  # sparse: no disk, and reading it would need 5 GiB of memory
        f.truncate(5 << 30)
    with pytest.raises(
        DataError,
        match=r"huge.jsonl is 5,368,709,120 bytes; dojo reads a JSON file whole, up to 4 GiB",
    ):
        read_rows([str(huge)])


def test_a_json_line_past_the_row_bound_is_one_bad_row(tmp_path: Path, monkeypatch) -> None:
    from dojo.train import rows

    monkeypatch.setattr(rows, "MAX_ROW_CHARS", 1000)
    p = write_jsonl(tmp_path / "d.jsonl", [GOOD, {"text": "x" * 2000}, GOOD])
    r = read_rows([p])
    assert len(r.rows) == 2 and r.bad == [
        (f"{p}:2", "a row of 2,012 characters; more than 1,000 is not one conversation")
    ]


@pytest.mark.parametrize("row", [None, 5, 2.5, True, False])
def test_a_row_that_is_not_an_object_is_one_bad_row(
    row: object, tmp_path: Path, cli, data_dir: Path
) -> None:
    jsonl = write_jsonl(tmp_path / "d.jsonl", [GOOD, json.dumps(row), GOOD])
    array = tmp_path / "d.json"
    array.write_text(json.dumps([GOOD, row, GOOD]))
    for path in (jsonl, str(array)):
        r = read_rows([path])
        assert len(r.rows) == 2 and len(r.bad) == 1, r.bad
        assert f"got {type(row).__name__}" in r.bad[0][1]
    r = cli("train", "--dry-run", "--data", jsonl, "--output-dir", "out")
    assert r.exit_code == 0 and "data: 2 valid rows (messages 2), 1 bad" in r.stderr, r.stderr
    assert f"skipped {jsonl}:2: expected a JSON object or a list of messages, got" in r.stderr


def test_an_integer_past_python_limit_is_one_bad_row(tmp_path: Path) -> None:
    big = "7" * 5000
    long_row = '{"messages": [{"role": "user", "content": "hi", "n": ' + big + "}]}"
    jsonl = write_jsonl(tmp_path / "d.jsonl", [GOOD, long_row, GOOD])
    r = read_rows([jsonl])
    assert len(r.rows) == 2 and r.bad == [
        (f"{jsonl}:2", "holds an integer of more than 4,300 digits, not a value a row uses")
    ]
    array = tmp_path / "a.json"  # only the element holding it is skipped, the next ones are read
    array.write_text(
        "[\n"
        + json.dumps(GOOD)
        + ",\n"
        + long_row
        + ",\n["
        + big
        + "],\n"
        + json.dumps(GOOD)
        + "\n]"
    )
    r = read_rows([str(array)])
    assert len(r.rows) == 2 and [s for s, _ in r.bad] == [f"{array}:3", f"{array}:4"]
    one = tmp_path / "one.json"
    one.write_text(long_row)
    r = read_rows([str(one)])
    assert not r.rows and "more than 4,300 digits" in r.bad[0][1]


def test_utf16_data_is_named(tmp_path: Path) -> None:
    for enc in ("utf-16", "utf-16-le", "utf-32"):
        p = tmp_path / f"{enc}.jsonl"
        p.write_bytes((json.dumps(GOOD) + "\n").encode(enc))
        name = "UTF-32" if "32" in enc else "UTF-16"
        with pytest.raises(DataError, match=f"is {name} text, not UTF-8") as e:
            read_rows([str(p)])
        assert e.value.hint == f"save it as UTF-8, e.g. iconv -f {name.lower()} -t utf-8 IN > OUT"
    csv = tmp_path / "d.csv"
    csv.write_bytes("instruction,output\na,b\n".encode("utf-16"))
    with pytest.raises(DataError, match="is UTF-16 text, not UTF-8"):
        read_rows([str(csv)])


def test_csv_and_parquet_rows_are_counted(tmp_path: Path, cli, data_dir: Path) -> None:
    csv = tmp_path / "d.csv"
    csv.write_text('instruction,input,output\nSay hi,,hi\nAdd,1+1,2\n"multi\nline",,x\n,,\n')
    r = read_rows([str(csv)])
    assert r.valid == 3 and r.format_counts["alpaca"] == 3 and not r.rows
    assert r.bad == [(f"{csv}:6", "every assistant turn is empty: nothing to train on")]
    assert read_rows([str(csv)], count_tables=False).valid == 0  # a rank reads it with datasets
    out = cli("train", "--dry-run", "--data", str(csv), "--output-dir", "out")
    assert out.exit_code == 0 and "data: 3 valid rows (alpaca 3), 1 bad" in out.stderr, out.stderr
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    par = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist([GOOD] * 1500 + [{"messages": []}]), par)
    r = read_rows([str(par)])
    assert r.valid == 1500 and r.bad[0][0] == f"{par}[1500]"


def test_long_or_impossible_paths_are_errors(tmp_path: Path) -> None:
    for ref, needle in [
        ("a" * 5000 + ".jsonl", "cannot read it (File name too long)"),
        ("a/" * 3000 + "x.jsonl", "cannot read it"),
    ]:
        with pytest.raises(DataError, match="^--data a") as e:
            read_rows([ref])
        assert needle in e.value.message and len(e.value.message) < 300
    (tmp_path / "dangling.jsonl").symlink_to("nowhere.jsonl")
    with pytest.raises(DataError, match="a broken symbolic link"):
        read_rows([str(tmp_path / "dangling.jsonl")])
