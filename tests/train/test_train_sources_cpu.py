"""Data sources through the real launcher on 2 CPU processes with the bundled tiny model (slow):
a weighted CSV + Parquet mix, the text format, prompt/completion, and tokenize-once (local rank
0 builds the cache, rank 1 and the next run read it)."""

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.train import dojo_train, summary

pytestmark = pytest.mark.slow
BUILT = "data: rank 0 tokenized the data once into "


def _ok(r: Any) -> None:
    assert r.returncode == 0, r.stderr[-4000:]


def _cache_dir(stderr: str) -> Path:
    line = next(ln for ln in stderr.splitlines() if ln.startswith(BUILT))
    return Path(line[len(BUILT) :].rsplit(" (", 1)[0])


def test_csv_parquet_mix_with_column_mapping(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    csv = tmp_path / "qa.csv"
    csv.write_text("question,answer\n" + "".join(f"What is {i}?,It is {i}.\n" for i in range(60)))
    chats = [
        [{"role": "user", "content": f"Say {i}"}, {"role": "assistant", "content": f"{i}!"}]
        for i in range(60)
    ]
    pq.write_table(pa.table({"conversation": chats}), tmp_path / "chats.parquet")
    out = tmp_path / "run"
    r = dojo_train(
        out, "--max-steps", "3", "--data", f"{csv}=0.5", "--data", f"{tmp_path / 'chats.parquet'}=0.5",
        "--data-columns", "prompt=question", "--data-columns", "completion=answer",
        "--data-columns", "messages=conversation",
    )  # fmt: skip
    _ok(r)
    assert BUILT in r.stderr and "data: rank 1 read the tokenized cache" in r.stderr
    data = summary(out)["data"]
    # first_exhausted at 1:1 of 60 + 60 rows: one source runs out, so 60 < rows < 120.
    assert 60 < data["used"] < 120 and data["bad"] == 0, data
    assert summary(out)["steps"] == 3


def test_text_format_trains_every_token_packed(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for k in range(2):
        rows = [{"text": f"Document {k}-{i}: the quick brown fox jumps."} for i in range(40)]
        (docs / f"part{k}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    out = tmp_path / "run"
    r = dojo_train(out, "--max-steps", "3", "--data", str(docs), "--packing")
    _ok(r)
    assert "packing: on" in r.stderr
    data = summary(out)["data"]
    assert data["used"] == 80 and data["packing"] is True
    # Everything but each document's first token (nothing predicts it) is trained, eos included.
    assert data["tokens"] - data["trained_tokens"] <= 80, data


def test_prompt_completion_and_the_cache_is_reused(tmp_path: Path) -> None:
    rows = [{"prompt": f"{i} + 1 =", "completion": f" {i + 1}"} for i in range(80)]
    data = tmp_path / "pc.jsonl"
    data.write_text("".join(json.dumps(x) + "\n" for x in rows))
    r = dojo_train(tmp_path / "run1", "--max-steps", "2", "--data", str(data))
    _ok(r)
    cache = _cache_dir(r.stderr)
    assert (cache / "train.arrow").is_file() and (cache / "info.json").is_file()
    assert f"data: rank 1 read the tokenized cache {cache}" in r.stderr
    first = summary(tmp_path / "run1")["data"]
    assert first["used"] == 80 and 0 < first["trained_tokens"] < first["tokens"] / 2, first
    stamp = (cache / "train.arrow").stat().st_mtime_ns
    r2 = dojo_train(tmp_path / "run2", "--max-steps", "2", "--data", str(data))
    _ok(r2)
    assert BUILT not in r2.stderr  # nobody tokenized again
    assert f"data: rank 0 read the tokenized cache {cache}" in r2.stderr
    assert f"data: rank 1 read the tokenized cache {cache}" in r2.stderr
    assert (cache / "train.arrow").stat().st_mtime_ns == stamp
    assert summary(tmp_path / "run2")["data"] == first  # the same report, read back
    # A changed file is a new key: tokenized again.
    os.utime(data, ns=(stamp + 10**9, stamp + 10**9))
    r3 = dojo_train(tmp_path / "run3", "--max-steps", "1", "--data", str(data))
    _ok(r3)
    assert BUILT in r3.stderr and _cache_dir(r3.stderr) != cache
