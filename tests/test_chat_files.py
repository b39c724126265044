"""dojo.chat.files: odd --messages / --template inputs give one error line and a hint.

Latin-1 files, JSON nested 100,000 deep, records of the wrong shape, FIFOs without a writer,
/dev/null, symlink loops, broken links: each is named for what it is, exit 1, no traceback,
never "internal error", never a hang (a 10 s alarm guards every FIFO case).
"""

import contextlib
import io
import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

OK = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
DEEP = b"[" * 100_000 + b"]" * 100_000
NEST_150 = json.dumps([{"role": "user", "content": "x", "meta": json.loads("[" * 150 + "]" * 150)}])


def _tc(calls: object) -> bytes:
    return json.dumps([OK[0], {"role": "assistant", "content": None, "tool_calls": calls}]).encode()


# (case id, file bytes, text the error line must contain)
MESSAGES = [
    ("latin1", '[{"role": "user", "content": "café"}]'.encode("latin-1"), "is not UTF-8 text (byte 0xe9 at offset 33)"),
    ("cp1252", '[{"role": "user", "content": "“x”"}]'.encode("cp1252"), "is not UTF-8 text (byte 0x93"),
    ("utf16", json.dumps(OK).encode("utf-16"), "is UTF-16 text, not UTF-8"),
    ("deep", DEEP, "nests lists/objects too deeply to parse"),
    ("deep-object", b'{"a":' * 50_000 + b"1" + b"}" * 50_000, "too deeply to parse"),
    ("nest150", NEST_150.encode(), "more than 100 levels deep"),
    ("messages-str", b'{"messages": "hi"}', "must be a non-empty list"),
    ("messages-obj", b'{"messages": {"role": "user"}}', "must be a non-empty list"),
    ("messages-empty", b'{"messages": []}', "must be a non-empty list"),
    ("int", b"5", "got int"),
    ("null", b"null", "got NoneType"),
    ("float-nan", b"NaN", "got float"),
    ("string", b'"hello"', "got str"),
    ("list-of-int", b"[1]", "message 0 is int"),
    ("list-of-list", b"[[1, 2]]", "message 0 is list"),
    ("role-int", b'[{"role": 5, "content": "x"}]', "unknown role 5"),
    ("role-list", b'[{"role": ["user"], "content": "x"}]', "unknown role ['user']"),
    ("role-object", b'[{"role": {"a": 1}, "content": "x"}]', "unknown role {'a': 1}"),
    ("role-null", b'[{"role": null, "content": "x"}]', "unknown role None"),
    ("no-content", b'[{"role": "user"}]', "has no 'content'"),
    ("content-object", b'[{"role": "user", "content": {"a": 1}}]', "content is dict"),
    ("content-bool", b'[{"role": "user", "content": true}]', "content is bool"),
    ("tool-calls-str", _tc("abc"), "tool_calls is str, not a list"),
    ("tool-calls-obj", _tc({"name": "f"}), "tool_calls is dict, not a list"),
    ("tool-call-empty", _tc([{}]), "tool_calls[0] has no function name"),
    ("tool-call-int", _tc([5]), "tool_calls[0] has no function name"),
    ("tool-call-fn-str", _tc([{"function": "get"}]), "tool_calls[0] has no function name"),
    ("tool-call-name-int", _tc([{"function": {"name": 5}}]), "has no function name"),
    ("tool-call-2nd", _tc([{"function": {"name": "f"}}, {"type": "function"}]), "tool_calls[1]"),
    ("surrogate", b'[{"role": "user", "content": "a\\ud800b"}]', "lone surrogate U+D800"),
    ("surrogate-deep", b'[{"role": "user", "content": [{"type": "text", "text": "\\udfff"}]}]', "U+DFFF"),
    ("sharegpt-int", b'{"conversations": 5}', "'conversations' must be a non-empty list"),
    ("sharegpt-from-obj", b'{"conversations": [{"from": {"a": 1}, "value": "x"}]}', "unknown speaker"),
    ("sharegpt-item-int", b'{"conversations": [5]}', "conversations[0] needs 'from' and 'value'"),
    ("sharegpt-value-obj", b'{"conversations": [{"from": "human", "value": {}}]}', "content is dict"),
    ("alpaca-int", b'{"instruction": 1, "output": "x"}', "alpaca field 'instruction' must be a string"),
    ("alpaca-history-int", b'{"instruction": "a", "output": "b", "history": 5}', "'history' is int"),
    ("alpaca-history-obj", b'{"instruction": "a", "output": "b", "history": {"a": 1}}', "'history' is dict"),
    ("alpaca-history-short", b'{"instruction": "a", "output": "b", "history": [["a"]]}', "[prompt, response] pairs"),
    ("alpaca-history-ints", b'{"instruction": "a", "output": "b", "history": [[1, 2]]}', "content is int"),
    ("unknown-keys", b'{"foo": 1}', "not in a known format (keys: foo)"),
    ("no-keys", b"{}", "keys: none"),
    ("empty", b"", "is empty"),
    ("blank", b" \n\t ", "is empty"),
    ("truncated", b'{"messages": [', "is not valid JSON"),
    ("trailing", json.dumps(OK).encode() + b" x", "is not valid JSON: Extra data"),
    ("bom", b"\xef\xbb\xbf" + json.dumps(OK).encode(), "Unexpected UTF-8 BOM"),
    ("nul", b'[{"role": "user", "content": "a\x00"}]', "is a binary file, not JSON"),
]  # fmt: skip


@contextlib.contextmanager
def no_hang(seconds: int = 10) -> Iterator[None]:
    """Interrupt a blocking open()/read() (a FIFO) instead of hanging the suite."""

    def boom(_sig: int, _frame: object) -> None:
        raise TimeoutError(f"blocked for {seconds} s")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _one_error(r: object, expect: str) -> None:
    out = r.stdout + r.stderr  # type: ignore[attr-defined]
    assert r.exit_code == 1, out  # type: ignore[attr-defined]
    assert "Traceback" not in out and "internal error" not in out, out
    lines = r.stderr.splitlines()  # type: ignore[attr-defined]
    assert [x for x in lines if x.startswith("error:")] == lines[:1], out
    assert len(lines) == 2 and lines[1].startswith("hint: "), out
    assert expect in lines[0], out


@pytest.fixture
def ok_file(tmp_path: Path) -> Path:
    p = tmp_path / "ok.json"
    p.write_text(json.dumps(OK), encoding="utf-8")
    return p


@pytest.mark.parametrize(("name", "data", "expect"), MESSAGES, ids=[c[0] for c in MESSAGES])
@pytest.mark.parametrize("command", ["render", "check"])
def test_bad_messages_file(
    cli, tmp_path: Path, command: str, name: str, data: bytes, expect: str
) -> None:
    p = tmp_path / f"{name}.json"
    p.write_bytes(data)
    r = cli("chat-template", command, "--template", "chatml", "--messages", str(p))
    _one_error(r, expect)
    assert str(p) in r.stderr or "(stdin)" in r.stderr


def _special(tmp_path: Path, kind: str) -> str:
    """A path of the given odd kind."""
    p = tmp_path / f"odd-{kind}"
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "loop":
        os.symlink(p, p)
    elif kind == "loop2":
        os.symlink(tmp_path / "odd-b", p)
        os.symlink(p, tmp_path / "odd-b")
    elif kind == "broken":
        os.symlink(tmp_path / "nowhere.json", p)
    elif kind == "dir":
        p.mkdir()
    elif kind == "through-file":
        p.write_text("x")
        return str(p / "chat.json")
    else:
        return {"null": "/dev/null", "zero": "/dev/zero"}[kind]
    return str(p)


MESSAGE_PATHS = [
    ("fifo", "is empty"),  # no writer: read gives EOF at once
    ("null", "is empty"),
    ("zero", "is a binary file, not JSON"),
    ("loop", "is a symlink loop"),
    ("loop2", "is a symlink loop"),
    ("broken", "is a broken symlink"),
    ("dir", "cannot be read: it is a directory"),
    ("through-file", "a part of it is a file, not a folder"),
]
TEMPLATE_PATHS = [
    ("fifo", "is a FIFO (named pipe), not a regular file"),
    ("null", "is a character device, not a regular file"),
    ("zero", "is a character device, not a regular file"),
    ("loop", "is a symlink loop"),
    ("loop2", "is a symlink loop"),
    ("broken", "is a broken symlink"),
    ("dir", "has no chat template"),
    ("through-file", "a part of it is a file, not a folder"),
]


@pytest.mark.parametrize(("kind", "expect"), MESSAGE_PATHS, ids=[c[0] for c in MESSAGE_PATHS])
def test_odd_messages_paths(cli, tmp_path: Path, kind: str, expect: str) -> None:
    path = _special(tmp_path, kind)
    with no_hang():
        r = cli("chat-template", "render", "--template", "chatml", "--messages", path)
    _one_error(r, expect)


@pytest.mark.parametrize(("kind", "expect"), TEMPLATE_PATHS, ids=[c[0] for c in TEMPLATE_PATHS])
@pytest.mark.parametrize("command", ["render", "check"])
def test_odd_template_paths(
    cli, tmp_path: Path, ok_file: Path, command: str, kind: str, expect: str
) -> None:
    path = _special(tmp_path, kind)
    with no_hang():
        r = cli("chat-template", command, "--template", path, "--messages", str(ok_file))
    _one_error(r, expect)


def test_fifo_messages_with_a_writer_still_work(cli, tmp_path: Path) -> None:
    """`--messages <(jq ...)` is a pipe: reading it must still work (only templates refuse)."""
    fifo = tmp_path / "chat.fifo"
    os.mkfifo(fifo)
    pid = os.fork()
    if pid == 0:  # child: the writer
        with open(fifo, "w", encoding="utf-8") as f:
            f.write(json.dumps(OK))
        os._exit(0)
    try:
        with no_hang():
            r = cli("chat-template", "render", "--template", "chatml", "--messages", str(fifo))
    finally:
        # If our read was over before the writer opened the pipe (EOF, the second case below), its
        # open() waits for a reader forever (a CI run hung here): be that reader, then reap it.
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        try:
            os.waitpid(pid, 0)
        finally:
            os.close(reader)
    assert r.exit_code in (0, 1), r.stderr
    if r.exit_code == 0:  # the writer was in time
        assert r.stdout.startswith("<|im_start|>user\nhi")
    else:  # it opened after our read: EOF, said as such
        assert "is empty" in r.stderr


# ---- template files and folders whose content is odd -----------------------------------------

TEMPLATE_FILES = [
    ("latin1.jinja", "{{ 'café' }}".encode("latin-1"), "is not UTF-8 text (byte 0xe9"),
    ("bin.jinja", b"\x7fELF\x00\x01", "is a binary file, not a chat template"),
    ("big-number.jinja", b"{{ " + b"9" * 5000 + b" }}", "does not parse"),
    ("deep-parens.jinja", b"{{ " + b"(" * 5000 + b"1" + b")" * 5000 + b" }}", "does not parse"),
    ("tokenizer_config.json", '{"chat_template": "é"}'.encode("latin-1"), "is not UTF-8 text"),
    ("tc-deep/tokenizer_config.json", b"[" * 100_000 + b"]" * 100_000, "is not valid JSON"),
    ("tc-int/tokenizer_config.json", b'{"chat_template": 5}', "'chat_template' is not a template string"),
    ("tc-list/tokenizer_config.json", b"[1]", "is not a JSON object"),
    ("tc-none/tokenizer_config.json", b"{}", "has no 'chat_template'"),
    ("tc-named/tokenizer_config.json", b'{"chat_template": [{"name": "x"}]}', "is not a template string"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("rel", "data", "expect"), TEMPLATE_FILES, ids=[c[0] for c in TEMPLATE_FILES]
)
def test_bad_template_files(
    cli, tmp_path: Path, ok_file: Path, rel: str, data: bytes, expect: str
) -> None:
    p = tmp_path / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    r = cli("chat-template", "render", "--template", str(p), "--messages", str(ok_file))
    _one_error(r, expect)


@pytest.mark.parametrize("kind", ["loop", "fifo", "broken"])
def test_model_folder_with_an_odd_chat_template_jinja(
    cli, tmp_path: Path, ok_file: Path, kind: str
) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    target = folder / "chat_template.jinja"
    {"loop": lambda: os.symlink(target, target), "fifo": lambda: os.mkfifo(target),
     "broken": lambda: os.symlink(folder / "gone", target)}[kind]()  # fmt: skip
    with no_hang():
        r = cli("chat-template", "render", "--template", str(folder), "--messages", str(ok_file))
    _one_error(r, "chat_template.jinja")


def test_messages_larger_than_the_cap(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dojo.chat import files

    monkeypatch.setattr(files, "MAX_FILE_BYTES", 2 * 2**20)
    p = tmp_path / "big.json"
    p.write_text(json.dumps([{"role": "user", "content": "x" * 3 * 2**20}]), encoding="utf-8")
    _one_error(
        cli("chat-template", "render", "--template", "chatml", "--messages", str(p)),
        "larger than 2 MiB",
    )


@pytest.mark.parametrize(
    ("data", "expect"),
    [(b'[{"role": "user", "content": "caf\xe9"}]', "'-' (stdin) is not UTF-8 text"), (b"", "is empty"), (DEEP, "too deeply")],
)  # fmt: skip
def test_bad_stdin(cli, monkeypatch: pytest.MonkeyPatch, data: bytes, expect: str) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
    _one_error(cli("chat-template", "render", "--template", "chatml", "--messages", "-"), expect)


@pytest.mark.parametrize("flag", ["--bos-token", "--eos-token", "--var"])
def test_lone_surrogate_from_argv_is_an_error_not_a_crash(
    cli, tmp_path: Path, ok_file: Path, flag: str
) -> None:
    """Non-UTF-8 argv bytes arrive as surrogates (PEP 383): the output cannot be printed."""
    tpl = tmp_path / "t.jinja"
    tpl.write_text("{{ bos_token }}{{ eos_token }}{{ x }}", encoding="utf-8")
    value = "x=\udcff" if flag == "--var" else "\udcff"
    r = cli(
        "chat-template", "render", "--template", str(tpl), "--messages", str(ok_file), flag, value
    )
    _one_error(r, "lone surrogate that cannot be written as UTF-8")


def test_home_of_a_missing_user_is_not_a_crash(cli, ok_file: Path) -> None:
    r = cli(
        "chat-template",
        "render",
        "--template",
        "~nosuchuser-dojo/x.jinja",
        "--messages",
        str(ok_file),
    )
    _one_error(r, "is not a bundled template, a file or a model folder")


# ---- fuzz: any bytes, any JSON, as a messages file ---------------------------------------------

json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(
        st.sampled_from(["role", "content", "messages", "conversations", "from", "value",
                         "instruction", "output", "history", "tool_calls", "function", "name"]),
        kids, max_size=4),
    max_leaves=20,
)  # fmt: skip


def _cli_survives(cli, path: Path) -> None:
    r = cli("chat-template", "render", "--template", "chatml", "--messages", str(path))
    out = r.stdout + r.stderr
    assert "Traceback" not in out and "internal error" not in out, out
    assert r.exit_code in (0, 1), out
    if r.exit_code == 1:
        lines = r.stderr.splitlines()
        assert lines[0].startswith("error: --messages") and lines[1].startswith("hint: "), out


@pytest.mark.slow  # hypothesis: seconds; `make test` runs it
@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(st.binary(max_size=200) | st.sampled_from([b"[", b"{", b'"\\ud800"', b"\xff\xfe"]))
def test_fuzz_any_bytes_as_messages(cli, tmp_path: Path, data: bytes) -> None:
    p = tmp_path / "fuzz.json"
    p.write_bytes(data)
    _cli_survives(cli, p)


@pytest.mark.slow  # hypothesis: seconds; `make test` runs it
@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(json_like, st.integers(min_value=0, max_value=3000))
def test_fuzz_any_json_as_messages(cli, tmp_path: Path, record: object, depth: int) -> None:
    """Any JSON record, optionally wrapped `depth` lists deep: rendered or one error + hint."""
    p = tmp_path / "fuzz.json"
    p.write_text("[" * depth + json.dumps(record, allow_nan=True) + "]" * depth, encoding="utf-8")
    _cli_survives(cli, p)
