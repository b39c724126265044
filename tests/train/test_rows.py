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
