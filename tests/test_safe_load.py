"""dojo.safe_load: limits on JSON/YAML from users (depth, alias bombs, duplicates, NaN, encoding,
special files), plus hypothesis fuzz: any text or bytes either loads or raises LoadError."""

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dojo.safe_load import MAX_DEPTH, LoadError, load_json, load_yaml, nesting_exceeds

# DOJO_FUZZ_EXAMPLES=5000 for a longer run; 300 keeps the fast suite fast.
FUZZ = settings(
    max_examples=int(os.environ.get("DOJO_FUZZ_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _bomb(levels: int, fan: int) -> str:
    """The classic billion laughs: each level lists the previous one ``fan`` times."""
    lines = ["a0: &a0 [" + ",".join(["lol"] * fan) + "]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * fan) + "]")
    return "\n".join(lines) + "\n"


def test_billion_laughs_fails_fast() -> None:
    bomb = _bomb(9, 9)
    assert len(bomb) < 420
    t = time.perf_counter()
    with pytest.raises(LoadError, match="a YAML bomb") as e:
        load_yaml(bomb, what="--config 'bomb.yaml'")
    assert time.perf_counter() - t < 1.0
    assert e.value.reason == "aliases" and e.value.message.startswith("--config 'bomb.yaml': ")


def test_long_string_aliased_many_times_is_refused() -> None:
    text = "s: &s " + "x" * 20_000 + "\nl: [" + ", ".join(["*s"] * 100) + "]\n"
    with pytest.raises(LoadError, match="1,000,000 characters"):
        load_yaml(text, what="f")


def test_self_reference_and_chained_aliases() -> None:
    with pytest.raises(LoadError, match="refers to itself"):
        load_yaml("a: &a [1, *a]\n", what="f")
    # 100 anchors each wrapping the last: short text, depth 100 once expanded.
    chain = "x0: &x0 [1]\n" + "".join(f"x{i}: &x{i} [*x{i - 1}]\n" for i in range(1, 100))
    with pytest.raises(LoadError, match="nests deeper than 64 levels through its aliases"):
        load_yaml(chain, what="f")


def test_merge_keys_and_small_aliases_still_work() -> None:
    text = "base: &b {lr: 1.0e-4, seq_len: 512}\nrun:\n  <<: *b\n  seq_len: 1024\n"
    assert load_yaml(text, what="f")["run"] == {"lr": 1e-4, "seq_len": 1024}


@pytest.mark.parametrize("depth", [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, 1000, 100_000])
def test_yaml_depth_boundary(depth: int) -> None:
    text = "[" * depth + "]" * depth
    if depth <= MAX_DEPTH:
        assert load_yaml(text, what="f") is not None
    else:
        with pytest.raises(LoadError, match="nests deeper than 64 levels") as e:
            load_yaml(text, what="f")
        assert e.value.reason == "depth"


@pytest.mark.parametrize(
    ("text", "reason", "part"),
    [
        ("a: 1\na: 2\n", "duplicate", "key 'a' twice"),
        ("? [1]\n: x\n? [1]\n: y\n", "duplicate", "key [1] twice"),
        ("? [1]\n: x\n", "syntax", "found unhashable key"),
        ("a: \x00\n", "syntax", "unacceptable character #x0000"),
        ("1: a\n1.0: b\n", "duplicate", "key 1.0 twice"),
        ("x: .nan\n", "nonfinite", "'.nan'"),
        ("x: -.inf\n", "nonfinite", "'-.inf'"),
        ("x: 1.0e+400\n", "nonfinite", "'1.0e+400'"),
        ("x: !!python/object/apply:os.system ['true']\n", "syntax", "could not determine"),
        ("a: [1, 2\n", "syntax", "line 2, column 1"),
        ("--- 1\n--- 2\n", "syntax", "expected a single document in the stream; but found another"),
        ("k: " + "v" * 10_000 + "\nk: 1\n", "duplicate", "key 'k' twice"),
    ],
)
def test_yaml_refusals(text: str, reason: str, part: str) -> None:
    with pytest.raises(LoadError) as e:
        load_yaml(text, what="--config 'x.yaml'")
    assert e.value.reason == reason, e.value.message
    assert part in e.value.message
    assert len(e.value.message) < 300


def test_yaml_nan_allowed_when_asked() -> None:
    assert load_yaml("x: .nan\n", what="f", finite=False)["x"] != 0


@pytest.mark.parametrize(
    ("text", "reason", "part"),
    [
        ('{"a": 1, "a": 2}', "duplicate", "key 'a' twice"),
        ('{"x": {"hidden_size": 1e400}}', "nonfinite", "'1e400' (key 'hidden_size')"),
        ('{"x": NaN}', "nonfinite", "'NaN' (key 'x')"),
        ("[1, -Infinity]", "nonfinite", "'-Infinity'"),
        ("9" * 5000, "number", "too long"),
        ("[" * 65 + "]" * 65, "depth", "deeper than 64"),
        ("[" * 100_000, "depth", "deeper than 64"),
        ('{"a": [1,]}', "syntax", "Expecting value at line 1 column 10"),
        ("", "syntax", "Expecting value"),
    ],
)
def test_json_refusals(text: str, reason: str, part: str) -> None:
    with pytest.raises(LoadError) as e:
        load_json(text, what="--data rows.jsonl:3")
    assert e.value.reason == reason and part in e.value.message
    assert e.value.message.startswith("--data rows.jsonl:3")


def test_json_depth_counts_containers_not_brackets_in_strings() -> None:
    assert load_json('["' + "[" * 500 + '"]', what="f") == ["[" * 500]
    assert load_json('{"a\\"[[[[": ' + "[" * 60 + "]" * 60 + "}", what="f")
    assert not nesting_exceeds(json.loads("[" * 64 + "]" * 64), 64)
    assert nesting_exceeds(json.loads("[" * 65 + "]" * 65), 64)
    assert nesting_exceeds({"a": [{"b": [1]}]}, 3) and not nesting_exceeds({"a": [{"b": [1]}]}, 4)
    assert load_json('["' + "{" * 5000 + '"]', what="f") == ["{" * 5000]


def test_json_nan_allowed_when_asked_and_jsonl_line() -> None:
    assert load_json("[NaN]", what="f", finite=False)[0] != 0
    line = '{"messages": [{"role": "user", "content": "hi"}]}'
    assert load_json(line, what="--data d.jsonl:7")["messages"][0]["content"] == "hi"


def test_encodings() -> None:
    with pytest.raises(LoadError, match=r"is not UTF-8 text \(byte 0xe9 on line 2\)") as e:
        load_json('{\n"a": "caf\xe9"}'.encode("latin-1"), what="f")
    assert "iconv" in (e.value.hint or "")
    assert load_json(b'\xef\xbb\xbf{"a": 1}', what="f") == {"a": 1}  # a BOM is fine
    assert load_yaml("a: café\n".encode(), what="f") == {"a": "café"}


def test_special_files_never_block(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    os.symlink("loop", tmp_path / "loop")
    cases = {
        tmp_path / "fifo": "is a FIFO (named pipe), not a regular file",
        Path("/dev/null"): "is a character device, not a regular file",
        Path("/dev/zero"): "is a character device",
        tmp_path: "is a folder",
        tmp_path / "loop": "Too many levels of symbolic links",
        tmp_path / "none.json": "no such file",
    }
    for path, part in cases.items():
        for load in (load_json, load_yaml):
            with pytest.raises(LoadError, match=part.replace("(", r"\(").replace(")", r"\)")):
                load(path, what="f")


def test_max_bytes(tmp_path: Path) -> None:
    p = tmp_path / "big.json"
    p.write_text("[" + "1," * 1000 + "1]")
    with pytest.raises(LoadError, match="more than 100 is not a real one"):
        load_json(p, what="f", max_bytes=100)
    assert len(load_json(p, what="f", max_bytes=10_000)) == 1001


# ---------------------------------------------------------------- fuzz

_SEEN = {"json_text": 0, "json_bytes": 0, "yaml_text": 0, "roundtrip": 0, "nests": 0, "bombs": 0}


@pytest.mark.slow  # hypothesis: seconds together; `make test` runs it
@FUZZ
@given(st.text(alphabet=st.sampled_from('{}[]",:0123456789.eE+-NaInfity tru\\\n')))
def test_fuzz_json_text_loads_or_refuses(text: str) -> None:
    _SEEN["json_text"] += 1
    with contextlib.suppress(LoadError):
        load_json(text, what="f")


@pytest.mark.slow  # hypothesis: seconds together; `make test` runs it
@FUZZ
@given(st.binary(max_size=200))
def test_fuzz_json_and_yaml_bytes_load_or_refuse(data: bytes) -> None:
    _SEEN["json_bytes"] += 1
    for load in (load_json, load_yaml):
        with contextlib.suppress(LoadError):
            load(data, what="f")


@pytest.mark.slow  # hypothesis: seconds together; `make test` runs it
@FUZZ
@given(st.text(alphabet=st.sampled_from("&*ab: -[]{}?!<>|'\"\n.naninf01e+,#%@`~"), max_size=120))
def test_fuzz_yaml_text_loads_or_refuses(text: str) -> None:
    _SEEN["yaml_text"] += 1
    with contextlib.suppress(LoadError):
        load_yaml(text, what="f")


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(), kids, max_size=4),
    max_leaves=30,
)


@pytest.mark.slow  # hypothesis: seconds together; `make test` runs it
@FUZZ
@given(_JSON)
def test_fuzz_valid_json_round_trips(value: Any) -> None:
    """What json.dumps writes (finite, unique keys, shallow) is never refused or changed."""
    _SEEN["roundtrip"] += 1
    assert load_json(json.dumps(value), what="f") == value


@pytest.mark.slow  # hypothesis: seconds together; `make test` runs it
@FUZZ
@given(st.lists(st.sampled_from("[{"), min_size=1, max_size=300))
def test_fuzz_nesting_refused_exactly_past_the_limit(opens: list[str]) -> None:
    _SEEN["nests"] += 1
    closes = "".join("]" if o == "[" else "}" for o in reversed(opens))
    text = "".join(o if o == "[" else o + '"k": ' for o in opens[:-1])
    text = text + ("[]" if opens[-1] == "[" else "{}") + closes[1:]
    ok = len(opens) <= MAX_DEPTH
    try:
        load_json(text, what="f")
        assert ok
    except LoadError as e:
        assert not ok and e.reason == "depth"


@pytest.mark.slow  # hypothesis: seconds together; `make test` runs it
@FUZZ
@given(st.integers(1, 12), st.integers(1, 12))
def test_fuzz_alias_bombs_refused_exactly_past_the_budget(levels: int, fan: int) -> None:
    _SEEN["bombs"] += 1
    # Expanded node count, as yaml composes it: a0 = [fan scalars]; a_i = [fan x a_(i-1)];
    # the root mapping holds each key (1 node) and its expanded value.
    size, root = 1 + fan, 1
    for _ in range(levels):
        root += 1 + size
        size = 1 + fan * size
    try:
        load_yaml(_bomb(levels, fan), what="f")
        assert root <= 10_000
    except LoadError as e:
        assert e.reason == "aliases" and root > 10_000


def test_fuzz_counts() -> None:
    """Runs last in this file: the fuzz tests above really ran their examples."""
    if all(v == 0 for v in _SEEN.values()):
        pytest.skip("run with the whole file to count")
    print("safe_load fuzz inputs:", _SEEN, "total", sum(_SEEN.values()))
    assert all(v > 0 for v in _SEEN.values())


# ---------------------------------------------------------------- hostile values


def test_wide_encodings_are_recognised() -> None:
    from dojo.safe_load import wide_encoding

    text = json.dumps({"messages": [{"role": "user", "content": "hi there"}]})
    for enc, name in [("utf-16", "UTF-16"), ("utf-16-le", "UTF-16"), ("utf-16-be", "UTF-16"),
                      ("utf-32", "UTF-32"), ("utf-32-le", "UTF-32"), ("utf-32-be", "UTF-32")]:  # fmt: skip
        assert wide_encoding(text.encode(enc)) == name, enc
    for data in (text.encode(), text.encode("latin-1"), b"\x00" * 100, bytes(range(256)) * 4, b"a"):
        assert wide_encoding(data) is None
    with pytest.raises(LoadError, match="is UTF-16 text, not UTF-8") as e:
        load_json(text.encode("utf-16-le"), what="--check 'x'")
    assert e.value.hint == "save it as UTF-8, e.g. iconv -f utf-16 -t utf-8 IN > OUT"


def test_shorten_describes_integers_repr_refuses() -> None:
    from dojo.safe_load import shorten

    assert shorten(10**5000) == "<an integer of about 5,001 digits>"
    assert shorten([1, 10**5000]) == "[1, <an integer of about 5,001 digits>]"
    assert shorten({"a": 10**6000}).startswith("{'a': <an integer of about 6,001")
    assert shorten(12) == "12" and shorten("x" * 100).endswith("...")


@pytest.mark.parametrize("value", [None, 5, 2.5, True, "text"])
def test_nesting_of_a_scalar_is_zero(value: Any) -> None:
    assert not nesting_exceeds(value, 1)
