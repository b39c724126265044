"""dojo.train.data_check: data refused before launch (one line, nothing written), JSONL split at
"\\n" only, and Hub datasets asked with the token huggingface_hub would send.

Each case used to pass preflight and fail after launch in every rank (datasets' traceback), or,
for JSONL, cut a row in two at a raw U+2028/U+2029/U+0085 inside a string.
"""

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest

from dojo.errors import DataError
from dojo.train import data_check
from dojo.train.rows import jsonl_lines, read_rows

GOOD = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}
ALPACA = {"instruction": "Add", "input": "2 3", "output": "5"}
SEPARATORS = ["\u2028", "\u2029", "\u0085", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"]
"""What str.splitlines splits on besides \\n and \\r; the first three json.dumps writes raw."""

CUT = json.dumps(GOOD, indent=2)[:-3]


def _row(text: str) -> dict[str, Any]:
    return {
        "messages": [
            {"role": "user", "content": f"a{text}b"},
            {"role": "assistant", "content": f"c{text}d"},
        ]
    }


# ---- JSONL ---------------------------------------------------------------------------------


@pytest.mark.parametrize("sep", SEPARATORS[:3])
@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_jsonl_rows_keep_unicode_line_separators(
    tmp_path: Path, sep: str, suffix: str, newline: str
) -> None:
    rows = [_row(sep), GOOD, _row(sep * 3), {"x": sep}, _row(sep)]
    text = newline.join(json.dumps(r, ensure_ascii=False) for r in rows) + newline
    assert sep in text  # written raw, as ensure_ascii=False does
    p = tmp_path / f"d{suffix}"
    p.write_text(text, encoding="utf-8", newline="")
    r = read_rows([str(p)])
    assert [s for s, _ in r.rows] == [f"{p}:1", f"{p}:2", f"{p}:3", f"{p}:5"]
    assert r.bad == [(f"{p}:4", r.bad[0][1])]  # the row without a conversation, at its own line
    assert r.rows[0][1][0]["content"] == f"a{sep}b"
    assert r.rows[2][1][1]["content"] == f"c{sep * 3}d"


def test_jsonl_lines_split_at_newline_only() -> None:
    text = "a\u2028b\r\nc\u0085d\n\ne\r\r\n"
    assert list(jsonl_lines(text)) == [
        (1, "a\u2028b"),
        (2, "c\u0085d"),
        (3, ""),
        (4, "e\r"),
        (5, ""),
    ]


def test_bad_json_line_number_counts_newlines_only(tmp_path: Path) -> None:
    p = tmp_path / "d.jsonl"
    p.write_text(json.dumps(_row("\u2028"), ensure_ascii=False) + "\n{oops\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"d\.jsonl:2: not valid JSON"):
        read_rows([str(p)])


# ---- .json that is not JSON, CSV -----------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "content", "message", "hint"),
    [
        # a pretty-printed object cut short: the error is at its end, not "line 1"
        ("d.json", CUT, f":{CUT.count(chr(10)) + 1}: not valid JSON", "one JSON array"),
        ("d.json", "messages: [hi]\n", ":1: not valid JSON", "one JSON array"),
        ("d.json", "instruction,input,output\nAdd,2 3,5\n", ":1: not valid JSON", "looks like CSV"),
        (
            "d.jsonl",
            "instruction,input,output\nAdd,2 3,5\n",
            ":1: not valid JSON",
            "csv.DictReader",
        ),
        ("d.jsonl", "prompt\tresponse\nhi\tyo\n", ":1: not valid JSON", "looks like CSV"),
        ("d.csv", "a,b\n1,2\n", "CSV columns a, b hold no known format", "--data-columns"),
        ("d.tsv", "a\tb\n", "CSV/TSV is not read", "data.jsonl"),
    ],
)
def test_not_json_is_named_with_a_fix(
    tmp_path: Path, name: str, content: str, message: str, hint: str
) -> None:
    p = tmp_path / name
    p.write_text(content, encoding="utf-8")
    with pytest.raises(DataError) as e:
        read_rows([str(p)])
    assert message in e.value.message and str(p) in e.value.message
    assert e.value.hint is not None and hint in e.value.hint


# ---- Parquet -------------------------------------------------------------------------------


def _parquet(path: Path, records: list[dict[str, Any]]) -> Path:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(records), path)
    return path


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            json.dumps(GOOD) + "\n",
            "not a Parquet file (no PAR1 magic at its start: it looks like JSON)",
        ),
        ("instruction,output\nq,a\n", "it looks like CSV"),
        ("just some words\n", "it looks like text"),
        ("", "the file is empty"),
        ("PAR1", "truncated (4 bytes"),
        ("PAR1 some text PAR1", "cannot read the Parquet file"),
    ],
)
def test_not_parquet_refused(tmp_path: Path, content: str, message: str) -> None:
    p = tmp_path / "d.parquet"
    p.write_text(content)
    if "cannot read" in message:
        pytest.importorskip("pyarrow")
    with pytest.raises(DataError) as e:
        read_rows([str(p)])
    assert message in e.value.message, e.value.message


def test_truncated_parquet_refused(tmp_path: Path) -> None:
    p = _parquet(tmp_path / "d.parquet", [GOOD] * 50)
    p.write_bytes(p.read_bytes()[:-100])
    with pytest.raises(DataError, match="truncated"):
        read_rows([str(p)])


def test_parquet_schema_and_first_rows(tmp_path: Path) -> None:
    wrong = _parquet(tmp_path / "wrong.parquet", [{"prompt": "q", "answer": "a"}])
    with pytest.raises(DataError, match="columns prompt, answer hold no known format"):
        read_rows([str(wrong)])
    bad = _parquet(tmp_path / "bad.parquet", [{"messages": [{"role": "user", "content": "q"}]}])
    with pytest.raises(
        DataError, match=r"none of the first 1 rows.*bad\.parquet\[0\]: no assistant"
    ):
        read_rows([str(bad)])
    late = [{"instruction": "x", "output": ""}] * 3 + [ALPACA]  # one valid row is enough
    assert read_rows([str(_parquet(tmp_path / "late.parquet", late))]).passthrough
    empty = _parquet(tmp_path / "empty.parquet", [GOOD])
    import pyarrow.parquet as pq

    pq.write_table(pq.read_table(empty).slice(0, 0), empty)
    with pytest.raises(DataError, match="has no rows"):
        read_rows([str(empty)])


# ---- Hub datasets --------------------------------------------------------------------------


def test_hub_dataset_in_either_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert read_rows(["org/chats"]).passthrough == ["org/chats"]  # datasets' Arrow cache
    hub = tmp_path / "hub"
    snap = hub / "datasets--acme--talk" / "snapshots" / "0123abc"
    snap.mkdir(parents=True)
    (snap / "train.jsonl").write_text(json.dumps(GOOD))
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    assert data_check.cached_dataset("acme/talk") == hub / "datasets--acme--talk" / "snapshots"
    assert read_rows(["acme/talk"]).passthrough == ["acme/talk"]


def test_hub_dataset_offline_and_not_cached_refused() -> None:
    with pytest.raises(DataError) as e:
        read_rows(["acme/missing"])
    assert "Hub dataset not in the local cache" in e.value.message
    assert "HF_HUB_OFFLINE=1" in e.value.message
    assert (
        e.value.hint is not None and "hf download acme/missing --repo-type dataset" in e.value.hint
    )


def test_ranks_do_not_ask_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_RANK", "0")  # inside a launched rank: the launcher already checked
    assert read_rows(["acme/missing"]).passthrough == ["acme/missing"]


PRIVATE = "acme/private"
TOKEN = "hf_readsprivate"
"""The one token the stand-in Hub lets read PRIVATE (any other request for it gets 401)."""


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[dict[str, int]]:
    """A local stand-in for the Hub API answering each dataset id with the status set here, and
    PRIVATE with 200 only to ``Authorization: Bearer TOKEN``. No token anywhere to begin with."""
    answers: dict[str, int] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            name = self.path.removeprefix("/api/datasets/")
            status = answers.get(name, 404)
            if name == PRIVATE:
                status = 200 if self.headers.get("Authorization") == f"Bearer {TOKEN}" else 401
            self.send_response(status)
            self.end_headers()
            self.wfile.write(b'{"id": "x"}')

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(var, raising=False)
    _token_file(monkeypatch, tmp_path / "hf-home")  # empty: not logged in
    yield answers
    server.shutdown()


def _token_file(monkeypatch: pytest.MonkeyPatch, home: Path, token: str | None = None) -> None:
    """HF_HOME=home, holding the file `hf auth login` writes when ``token`` is given.

    huggingface_hub fixes the file's path (constants.HF_TOKEN_PATH) when it is first imported,
    so in this process the constant is pointed there too; a fresh process reads HF_HOME itself
    (test_login_token_file_in_a_fresh_process)."""
    from huggingface_hub import constants

    home.mkdir(parents=True, exist_ok=True)
    if token is not None:
        (home / "token").write_text(token)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(home / "token"))


def test_hub_dataset_online(hub: dict[str, int]) -> None:
    hub.update({"acme/open": 200, "acme/gated": 401})
    assert read_rows(["acme/open"]).passthrough == ["acme/open"]
    with pytest.raises(DataError, match=r"refused the dataset \(HTTP 401"):
        read_rows(["acme/gated"])
    with pytest.raises(DataError, match=r"no such dataset on the Hub \(HTTP 404\)"):
        read_rows(["acme/typo"])


def test_private_dataset_refused_without_a_token(hub: dict[str, int]) -> None:
    with pytest.raises(DataError, match=r"refused the dataset \(HTTP 401") as e:
        read_rows([PRIVATE])
    assert e.value.hint is not None
    assert e.value.hint.startswith("run `hf auth login` with a token that can read it")


def test_private_dataset_read_with_the_login_token(
    hub: dict[str, int], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The token `hf auth login` saved ($HF_HOME/token) is sent, as the ranks would send it."""
    _token_file(monkeypatch, tmp_path / "logged-in", TOKEN)
    assert read_rows([PRIVATE]).passthrough == [PRIVATE]


def test_private_dataset_read_with_hf_token(
    hub: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert read_rows([PRIVATE]).passthrough == [PRIVATE]


def test_login_token_file_in_a_fresh_process(hub: dict[str, int], tmp_path: Path) -> None:
    """A new process with only HF_HOME set (as after `hf auth login`) reaches the dataset."""
    home = tmp_path / "fresh-home"
    home.mkdir()
    (home / "token").write_text(TOKEN + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_TOKEN")}
    env["HF_HOME"] = str(home)
    code = f"from dojo.train.data_check import check_hub_dataset as c; print(c({PRIVATE!r}))"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "hub"


def test_hub_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on: connection refused at once
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    with pytest.raises(DataError, match="not in the local cache and the Hub is unreachable"):
        read_rows(["acme/far"])


# ---- through `dojo train`: one line, nothing launched, nothing written ----------------------


@pytest.mark.parametrize(
    ("name", "content", "first"),
    [
        ("d.parquet", json.dumps(GOOD) + "\n", "error: --data {p} is not a Parquet file"),
        ("d.json", '{"messages": [', "error: --data {p}:1: not valid JSON"),
        ("d.csv", "a,b\nq,a\n", "error: --data {p}: CSV columns a, b hold no known format"),
        ("acme/missing", None, "error: --data acme/missing: Hub dataset not in the local cache"),
    ],
)
def test_cli_refuses_before_launch(
    cli: Any, tmp_path: Path, name: str, content: str | None, first: str
) -> None:
    data = name
    if content is not None:
        (tmp_path / name).write_text(content)
        data = str(tmp_path / name)
    out = tmp_path / "out"
    with patch("dojo.train.launch.run", side_effect=AssertionError("launched")):
        r = cli("train", "--nproc", "1", "--data", data, "-o", str(out))
    assert r.exit_code == 1, r.stderr
    lines = r.stderr.splitlines()
    assert lines[0].startswith(first.format(p=data)), r.stderr
    assert len(lines) == 2 and lines[1].startswith("hint: ")
    assert not out.exists()


def test_cli_refuses_a_file_given_twice_before_launch(cli: Any, tmp_path: Path) -> None:
    """Read twice, its rows would be trained on twice, unsaid."""
    (tmp_path / "a.jsonl").write_text(json.dumps(GOOD) + "\n")
    out = tmp_path / "out"
    a, again = str(tmp_path / "a.jsonl"), f"{tmp_path}/./a.jsonl"
    with patch("dojo.train.launch.run", side_effect=AssertionError("launched")):
        r = cli("train", "--nproc", "1", "--data", a, "--data", again, "-o", str(out))
        ev = cli("train", "--nproc", "1", "--eval-data", a, "--eval-data", a, "-o", str(out))
    assert r.exit_code == 1, r.stderr
    assert r.stderr.splitlines() == [
        f"error: --data {again}: the same file as --data {a}, so each of its rows would count "
        "twice",
        "hint: give each file once (a folder reads every data file in it); to weight a source "
        "in a mix use =WEIGHT: --data a.jsonl=0.7 --data b.jsonl=0.3",
    ]
    assert ev.exit_code == 1 and ev.stderr.startswith(f"error: --eval-data {a}: given twice")
    assert not out.exists()


# ---- --data-columns ------------------------------------------------------------------------


def test_a_column_map_naming_no_column_of_the_data_is_refused(tmp_path: Path) -> None:
    chats = tmp_path / "chats.jsonl"
    chats.write_text(json.dumps(GOOD) + "\n")
    with pytest.raises(DataError) as e:
        read_rows([str(chats)], columns={"nosuch": "messages"}, require_columns=True)
    assert e.value.message == (
        f"--data-columns messages=nosuch: no row of --data {chats} has a column 'nosuch'"
    )
    assert e.value.hint == "the right side names a column of your data: messages"
    # A map is for the files that have the column: across several files, one is enough.
    qa = tmp_path / "qa.csv"
    qa.write_text("question,answer\nq,a\n")
    cols = {"question": "prompt", "answer": "completion"}
    assert read_rows([str(chats), str(qa)], columns=cols, require_columns=True).valid == 2
    with pytest.raises(DataError, match="--data-columns text=body: no row of --data .* 'body'"):
        read_rows([str(chats), str(qa)], columns={**cols, "body": "text"}, require_columns=True)
    # A Hub dataset's columns are the ranks' to read: nothing to compare with here; and a rank
    # (one source at a time) or --eval-data does not ask.
    hub = read_rows(["org/chats"], columns={"nosuch": "messages"}, hub_check=False,
                    require_columns=True)  # fmt: skip
    assert hub.passthrough
    assert read_rows([str(chats)], columns={"nosuch": "messages"}).valid == 1


def test_a_column_map_is_checked_against_parquet_columns(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    chats = tmp_path / "chats.jsonl"
    chats.write_text(json.dumps(GOOD) + "\n")
    pq.write_table(pa.table({"conversation": [GOOD["messages"]]}), tmp_path / "c.parquet")
    parquet = str(tmp_path / "c.parquet")
    assert (
        read_rows([parquet], columns={"conversation": "messages"}, require_columns=True).valid == 1
    )
    with pytest.raises(DataError, match="has a column 'body'") as e:
        read_rows(
            [parquet, str(chats)],
            columns={"conversation": "messages", "body": "text"},
            require_columns=True,
        )
    assert e.value.hint == "the right side names a column of your data: conversation, messages"
