"""`dojo chat-template list/show/render/check` through the real entry point."""

import json
import re
from pathlib import Path

import pytest

CONVO = [
    {"role": "system", "content": "S"},
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "yo"},
]


@pytest.fixture
def convo_file(tmp_path: Path) -> Path:
    p = tmp_path / "chat.json"
    p.write_text(json.dumps({"messages": CONVO}), encoding="utf-8")
    return p


def test_list_plain_and_json(cli) -> None:
    r = cli("chat-template", "list")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split()[:5] == ["name", "family", "system", "tools", "thinking"]
    chatml = next(line for line in lines if line.startswith("chatml "))
    assert chatml.split()[1:5] == ["chatml", "yes", "no", "no"]
    rows = json.loads(cli("chat-template", "list", "--json").stdout)
    glm = next(r for r in rows if r["name"] == "glm-4-9b-chat")
    assert glm["family"] == "glm" and glm["tools"] is True


def test_show_prints_source_exactly(cli) -> None:
    r = cli("chat-template", "show", "yi-1.5-chat")
    assert r.exit_code == 0
    src = (Path(__file__).resolve().parent.parent / "templates/chat/yi-1.5-chat.jinja").read_text(
        encoding="utf-8"
    )
    assert r.stdout == src
    assert "eos_token=" in r.stderr
    data = json.loads(cli("chat-template", "show", "yi-1.5-chat", "--json").stdout)
    assert data["source"] == src and data["bos_token"] == "<|startoftext|>"


def test_render_prints_exactly_the_text(cli, convo_file: Path) -> None:
    r = cli("chat-template", "render", "--template", "llama-2-chat", "--messages", str(convo_file))
    assert r.exit_code == 0, r.stderr
    assert r.stdout == "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\nhi [/INST] yo </s>"
    assert r.stderr == ""


def test_render_generation_prompt_tokens_and_vars(cli, tmp_path: Path) -> None:
    tpl = tmp_path / "t.jinja"
    tpl.write_text(
        "{{ bos_token }}|{{ flag }}|{{ n + 1 }}|{{ s }}{% if add_generation_prompt %}>{% endif %}",
        encoding="utf-8",
    )
    msgs = tmp_path / "m.json"
    msgs.write_text(json.dumps([{"role": "user", "content": "x"}]), encoding="utf-8")
    r = cli(
        "chat-template", "render", "--template", str(tpl), "--messages", str(msgs),
        "--add-generation-prompt", "--bos-token", "<B>", "--var", "flag=true", "--var", "n=2", "--var", "s=a=b",
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    assert r.stdout == "<B>|True|3|a=b>"


def test_render_sharegpt_and_alpaca(cli, tmp_path: Path) -> None:
    sg = tmp_path / "sg.json"
    sg.write_text(
        json.dumps(
            {"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]}
        ),
        encoding="utf-8",
    )
    r = cli("chat-template", "render", "--template", "chatml", "--messages", str(sg))
    assert r.stdout == "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\na<|im_end|>\n"
    al = tmp_path / "al.json"
    al.write_text(
        json.dumps({"instruction": "do", "input": "it", "output": "done"}), encoding="utf-8"
    )
    r = cli("chat-template", "render", "--template", "chatml", "--messages", str(al))
    assert r.stdout == "<|im_start|>user\ndo\nit<|im_end|>\n<|im_start|>assistant\ndone<|im_end|>\n"


def test_render_tools_file(cli, tmp_path: Path, convo_file: Path) -> None:
    tpl = tmp_path / "t.jinja"
    tpl.write_text("{{ tools | tojson }}", encoding="utf-8")
    tools = tmp_path / "tools.json"
    tools.write_text(
        json.dumps([{"type": "function", "function": {"name": "f"}}]), encoding="utf-8"
    )
    r = cli(
        "chat-template",
        "render",
        "--template",
        str(tpl),
        "--messages",
        str(convo_file),
        "--tools",
        str(tools),
    )
    assert r.stdout == '[{"type": "function", "function": {"name": "f"}}]'


def test_check_plain_marks_spans(cli) -> None:
    r = cli("chat-template", "check", "--template", "chatml")
    assert r.exit_code == 0, r.stderr
    assert "prefix-preserving:   yes" in r.stdout
    assert "turns end with stop: yes" in r.stdout
    assert "[[The answer is 6.<|im_end|>]]" in r.stdout


def test_check_json_for_template_without_system(cli) -> None:
    r = cli("chat-template", "check", "--template", "baichuan2-chat", "--json")
    data = json.loads(r.stdout)
    assert data["stop_token"] is None and data["ends_with_stop"] is False
    assert [s["text"] for s in data["assistant_spans"]][-1] == "The answer is 6."


def test_check_fails_for_a_template_that_trains_on_nothing(cli, tmp_path: Path) -> None:
    silent = tmp_path / "silent.jinja"
    silent.write_text("{% for m in messages if m.role != 'assistant' %}{{ m.content }}{% endfor %}")
    error = (
        f"error: --template {silent}: marks no assistant tokens for training (its rendering of "
        "the conversation holds none of the 2 assistant replies)"
    )
    r = cli("chat-template", "check", "--template", str(silent))
    assert r.exit_code == 1
    assert "assistant spans:     0 (0 chars trained on)" in r.stdout  # the report, then why
    assert r.stderr.splitlines()[0] == error
    assert r.stderr.splitlines()[1].startswith("hint: dojo trains the assistant replies it finds")
    r = cli("chat-template", "check", "--template", str(silent), "--json")
    assert r.exit_code == 1 and json.loads(r.stdout)["assistant_spans"] == []
    assert r.stderr.splitlines()[0] == error
    for name in ("chatml", "llama-3.1-instruct", "qwen3"):
        assert cli("chat-template", "check", "--template", name).exit_code == 0, name


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--template", "chatm"], "did you mean chatml"),
        (["--template", "nope-at-all"], "available:"),
        (["--var", "oops"], "--var 'oops' is not KEY=VALUE"),
        (["--var", "=1"], "is not KEY=VALUE"),
    ],
)
def test_render_bad_input(cli, convo_file: Path, args: list[str], needle: str) -> None:
    base = {"--template": "chatml", "--messages": str(convo_file)}
    for k, v in zip(args[::2], args[1::2], strict=True):
        base[k] = v
    argv = ["chat-template", "render"] + [x for kv in base.items() for x in kv]
    r = cli(*argv)
    assert r.exit_code == 1
    assert r.stdout == ""
    assert needle in r.stderr
    assert r.stderr.startswith("error: ")


def test_render_template_that_does_not_parse(cli, tmp_path: Path, convo_file: Path) -> None:
    bad = tmp_path / "bad.jinja"
    bad.write_text("a\nb\n{% for %}", encoding="utf-8")
    r = cli("chat-template", "render", "--template", str(bad), "--messages", str(convo_file))
    assert r.exit_code == 1
    assert "does not parse: line 3" in r.stderr


@pytest.mark.parametrize(
    ("payload", "needle"),
    [
        ('[{"role": "bot", "content": "x"}]', "unknown role 'bot'"),
        ('{"messages": "hi"}', "non-empty list"),
        ("[1, 2]", "message 0 is int"),
        ("not json", "is not valid JSON"),
    ],
)
def test_render_bad_messages(cli, tmp_path: Path, payload: str, needle: str) -> None:
    p = tmp_path / "m.json"
    p.write_text(payload, encoding="utf-8")
    r = cli("chat-template", "render", "--template", "chatml", "--messages", str(p))
    assert r.exit_code == 1
    assert needle in r.stderr
    assert len(r.stderr.splitlines()) <= 2


def test_render_missing_messages_file(cli) -> None:
    r = cli("chat-template", "render", "--template", "chatml", "--messages", "/nonexistent/x.json")
    assert r.exit_code == 1 and "cannot be read" in r.stderr


def test_template_raise_becomes_one_error_line(cli, tmp_path: Path) -> None:
    p = tmp_path / "m.json"
    p.write_text(json.dumps([{"role": "assistant", "content": "x"}]), encoding="utf-8")
    r = cli("chat-template", "render", "--template", "llama-2-chat", "--messages", str(p))
    assert r.exit_code == 1
    assert r.stderr.splitlines()[0] == (
        "error: template 'llama-2-chat': Conversation roles must alternate user/assistant/user/assistant/..."
    )


def test_tty_paths_use_rich(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("dojo._output.stdout_is_tty", lambda: True)
    # rich cuts cells to the terminal's width, which must not be the runner's
    monkeypatch.setenv("COLUMNS", "160")
    r = cli("chat-template", "check", "--template", "chatml")
    assert r.exit_code == 0, r.stderr
    assert "[[" not in r.stdout and "The answer is 6.<|im_end|>" in r.stdout
    r = cli("chat-template", "list")
    assert r.exit_code == 0 and "chatml" in r.stdout


@pytest.mark.parametrize("columns", [80, 160])
def test_tty_list_never_cuts_a_template_name(cli, monkeypatch: pytest.MonkeyPatch, columns: int):
    """A name is what --template takes: on an 80-column terminal the model id column goes (it is
    in --json), and every name stays whole; a wide one has room for both."""
    from dojo.chat.listing import bundled_rows

    monkeypatch.setattr("dojo._output.stdout_is_tty", lambda: True)
    monkeypatch.setenv("COLUMNS", str(columns))
    r = cli("chat-template", "list")
    assert r.exit_code == 0, r.stderr
    text = re.sub(r"\x1b\[[0-9;]*m", "", r.stdout)  # styles, where FORCE_COLOR asks for them
    assert "…" not in text and max(map(len, text.splitlines())) <= columns
    rows = bundled_rows()
    cells = {c.strip() for line in text.splitlines() for c in line.split("│")}
    assert {str(row["name"]) for row in rows} <= cells
    models = {str(row["model"]) for row in rows}
    assert (models <= cells) == (columns == 160)
    assert ("model ids: --json" in text) == (columns == 80)


# ---------------------------------------------------------------- --tools, UTF-16

_TOOLS_HINT = "the file must hold a JSON list of tool schemas"


@pytest.mark.parametrize(
    ("content", "needle", "hint"),
    [
        (b"", "is empty", _TOOLS_HINT),
        (b"  \n", "is empty", _TOOLS_HINT),
        (b"{bad", "is not valid JSON", _TOOLS_HINT),
        (b"[" * 100_000, "nests lists/objects too deeply", "a JSON list of tool schemas"),
        (
            b'[{"n": ' + b"7" * 5000 + b"}]",
            "holds an integer of more than 4,300 digits",
            _TOOLS_HINT,
        ),
        (b"5", "must be a JSON list of tool schemas, not int", '[{"type": "function"'),
        (b'{"tools": "x"}', "must be a JSON list of tool schemas, not str", '[{"type": "function"'),
        (b"[1]", "tool 0 is int 1, not an object (a tool schema)", '[{"type": "function"'),
        (
            b'[{"role": "user", "content": "hi"}]',
            "tool 0 has a 'role': it is a chat message",
            "--messages",
        ),
        (
            json.dumps([{"type": "function"}]).encode("utf-16"),
            "is UTF-16 text, not UTF-8",
            "iconv -f utf-16",
        ),
    ],
    ids=lambda x: x[:20] if isinstance(x, str) else None,
)
def test_tools_errors_speak_of_tools(
    cli, tmp_path: Path, convo_file: Path, content: bytes, needle: str, hint: str
) -> None:
    tools = tmp_path / "tools.json"
    tools.write_bytes(content)
    r = cli(
        "chat-template",
        "render",
        "--template",
        "chatml",
        "--messages",
        str(convo_file),
        "--tools",
        str(tools),
    )
    lines = r.stderr.splitlines()
    assert r.exit_code == 1 and len(lines) == 2, r.stderr
    assert lines[0].startswith(f"error: --tools '{tools}'") and needle in lines[0], lines[0]
    assert hint in lines[1] and "JSON conversation" not in r.stderr


def test_utf16_messages_are_named_not_binary(cli, tmp_path: Path, monkeypatch) -> None:
    import io
    import sys

    p = tmp_path / "chat.json"
    p.write_bytes(json.dumps(CONVO).encode("utf-16"))
    r = cli("chat-template", "render", "--template", "chatml", "--messages", str(p))
    assert r.exit_code == 1 and "is UTF-16 text, not UTF-8" in r.stderr and "binary" not in r.stderr
    stdin = io.TextIOWrapper(io.BytesIO(json.dumps(CONVO).encode("utf-16-le")))
    monkeypatch.setattr(sys, "stdin", stdin)
    r = cli("chat-template", "render", "--template", "chatml", "--messages", "-")
    assert r.exit_code == 1 and "--messages '-' (stdin) is UTF-16 text, not UTF-8" in r.stderr


def test_a_long_tools_path_is_shortened(cli, convo_file: Path) -> None:
    r = cli(
        "chat-template",
        "render",
        "--template",
        "chatml",
        "--messages",
        str(convo_file),
        "--tools",
        "t" * 5000,
    )
    assert r.exit_code == 1 and len(r.stderr.splitlines()[0]) < 300, r.stderr[:400]
