"""`dojo chat` / `dojo export` before any model loads: what a run folder holds, and every refusal.

Fast and torch-free: run folders are faked with a real train.json (a Run) and the files
`dojo train` writes; the slow tests (test_chat_export.py) load and generate.
"""

import json
from pathlib import Path
from typing import Any

import pytest

from dojo.chat.template import load_template
from dojo.errors import DojoError
from dojo.train import outputs
from dojo.train.outputs import StopText, export_target, inspect, stop_texts
from tests.helpers.runs import run_of


def weights_file(path: Path) -> Path:
    """A well-formed .safetensors file: one F32 tensor of one element (4 bytes)."""
    header = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    path.write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 4)
    return path


def fake_run(
    root: Path, method: str = "lora", *, weights: bool = True, model: str | None = None, **run: Any
) -> Path:
    """A run folder as `dojo train` leaves it (tiny model: tiny-model/ + init-weights/)."""
    root.mkdir(parents=True)
    r = run_of(method=method, output_dir=str(root), **run)
    tiny = root / "tiny-model"
    tiny.mkdir()
    (tiny / "config.json").write_text("{}")
    (tiny / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")
    rec = {
        "run": r.to_dict(),
        "paths": {"run_dir": str(root), "model": model or str(tiny), "tokenizer": str(tiny)},
        "model_kind": "tiny" if model is None else "local",
    }
    (root / "train.json").write_text(json.dumps(rec))
    (root / "init-weights").mkdir()
    weights_file(root / "init-weights" / "model.safetensors")
    (root / "tokenizer.json").write_text("{}")
    if weights and method == "full":
        (root / "config.json").write_text("{}")
        weights_file(root / "model.safetensors")
    elif weights:
        (root / "adapter_config.json").write_text("{}")
        weights_file(root / "adapter_model.safetensors")
    return root


def test_adapter_on_the_seeded_random_base(tmp_path: Path) -> None:
    out = inspect(fake_run(tmp_path / "run"))
    assert out.kind == "adapter" and out.weights == tmp_path / "run"
    assert out.base == str(tmp_path / "run" / "init-weights")  # what the worker trained on
    assert out.tokenizer == str(tmp_path / "run")  # the tokenizer the run saved
    assert out.run.model.method == "lora"


def test_full_model_and_merged(tmp_path: Path) -> None:
    full = inspect(fake_run(tmp_path / "full", "full"))
    assert (full.kind, full.base) == ("full", None)
    run = fake_run(tmp_path / "lora")
    (run / "merged").mkdir()
    (run / "merged" / "config.json").write_text("{}")
    weights_file(run / "merged" / "model.safetensors")
    assert inspect(run).kind == "merged"  # chat: the merged model needs no PEFT
    assert inspect(run, use_merged=False).kind == "adapter"  # export merges afresh


def test_base_with_weights_is_used_and_moved_runs_follow(tmp_path: Path) -> None:
    model = tmp_path / "base"
    model.mkdir()
    weights_file(model / "model.safetensors")
    out = inspect(fake_run(tmp_path / "a", model=str(model)))
    assert out.base == str(model)
    moved = tmp_path / "moved"
    (tmp_path / "a").rename(moved)
    (model / "model.safetensors").unlink()
    # The recorded paths inside the old run folder now point into the moved one.
    out = inspect(moved)
    assert out.base == str(moved / "init-weights") and out.model_tokenizer == str(
        moved / "tiny-model"
    )


def test_checkpoint_folder_uses_the_parent_record(tmp_path: Path) -> None:
    run = fake_run(tmp_path / "run", weights=False)
    ckpt = run / "checkpoint-3"
    ckpt.mkdir()
    (ckpt / "adapter_config.json").write_text("{}")
    weights_file(ckpt / "adapter_model.safetensors")
    with pytest.raises(DojoError) as e:
        inspect(run)
    assert "did not finish" in e.value.message and str(ckpt) in (e.value.hint or "")
    out = inspect(ckpt)
    assert out.kind == "adapter" and out.weights == ckpt and out.base == str(run / "init-weights")


@pytest.mark.parametrize(
    "setup, message, hint",
    [
        (lambda p: None, "does not exist", "--output-dir"),
        (lambda p: p.mkdir(), "has no train.json", "--output-dir"),
        (lambda p: p.write_text("x"), "is a file", "--output-dir"),
        (lambda p: fake_run(p, save_model=False, weights=False), "--no-save-model", "--save-model"),
        (lambda p: fake_run(p, weights=False), "no model", "--save-model"),
    ],
)
def test_refusals_name_the_folder_and_the_fix(
    tmp_path: Path, setup: Any, message: str, hint: str
) -> None:
    path = tmp_path / "run"
    setup(path)
    with pytest.raises(DojoError) as e:
        inspect(path)
    assert message in e.value.message and "RUN_DIR" in e.value.message
    assert hint in (e.value.hint or "")


def test_dry_run_and_unreadable_record(tmp_path: Path) -> None:
    run = fake_run(tmp_path / "dry", weights=False)
    (run / ".dojo-dry-run").touch()
    with pytest.raises(DojoError, match="dry run"):
        inspect(run)
    (run / "train.json").write_text('{"run": {"format": 99}}')
    with pytest.raises(DojoError, match="cannot be read"):
        inspect(run)


def test_gone_base_is_named(tmp_path: Path) -> None:
    run = fake_run(tmp_path / "run")
    (run / "init-weights" / "model.safetensors").unlink()
    with pytest.raises(DojoError, match="base weights are gone"):
        inspect(run)


@pytest.mark.parametrize(
    "method, file, data, needle, fix",
    [
        ("full", "model.safetensors", b"garbage\n", "is not a safetensors file", "checkpoint-N"),
        ("full", "config.json", b"not json", "is not valid JSON", "checkpoint-N"),
        ("full", "tokenizer.json", b"xx", "is not valid JSON", "checkpoint-N"),
        ("lora", "adapter_model.safetensors", b"", "is empty", "checkpoint-N"),
        ("lora", "adapter_config.json", b"[]", "holds a JSON list", "checkpoint-N"),
        ("lora", "init-weights/model.safetensors", None, "is cut short", "or train again"),
    ],
)
def test_damaged_file_is_named_with_the_run(
    tmp_path: Path, method: str, file: str, data: bytes | None, needle: str, fix: str
) -> None:
    """A damaged file the loaders would choke on is one error naming RUN_DIR and the file."""
    run = fake_run(tmp_path / "run", method)
    whole = (run / file).read_bytes()
    (run / file).write_bytes(whole[:-1] if data is None else data)  # None: a copy cut short
    with pytest.raises(DojoError) as e:
        inspect(run)
    assert e.value.message.startswith(f"RUN_DIR {str(run)!r}: {file} {needle}"), e.value.message
    assert (e.value.hint or "").startswith("the file is damaged: copy the run folder again")
    assert fix in (e.value.hint or "")


def test_damaged_base_outside_the_run_is_named_by_its_path(tmp_path: Path) -> None:
    model = tmp_path / "base"
    model.mkdir()
    weights_file(model / "model.safetensors")
    run = fake_run(tmp_path / "run", model=str(model))
    (model / "model.safetensors").write_bytes(b"garbage\n")
    with pytest.raises(DojoError) as e:
        inspect(run)
    assert str(model / "model.safetensors") in e.value.message
    assert "copy or download that model's files again" in (e.value.hint or "")


@pytest.mark.parametrize("command", ["chat", "export"])
@pytest.mark.parametrize(
    "file, data", [("model.safetensors", b"garbage\n"), ("config.json", b"not json")]
)
def test_cli_damaged_run_is_one_error(
    cli: Any, tmp_path: Path, command: str, file: str, data: bytes
) -> None:
    run = fake_run(tmp_path / "run", "full")
    (run / file).write_bytes(data)
    r = cli(command, str(run), *(["--prompt", "hi"] if command == "chat" else []))
    assert r.exit_code == 1 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 2 and "internal error" not in r.stderr, r.stderr
    assert lines[0].startswith(f"error: RUN_DIR {str(run)!r}: {file} ")
    assert lines[1].startswith("hint: the file is damaged")
    assert not (run / "export").exists()


def test_template_is_the_runs(tmp_path: Path) -> None:
    out = inspect(fake_run(tmp_path / "own"))
    assert outputs.template_ref(out) == (str(tmp_path / "own" / "tiny-model"), "--model")
    out = inspect(fake_run(tmp_path / "named", template="llama-3-instruct"))
    assert outputs.template_ref(out) == ("llama-3-instruct", "--template")
    assert outputs.template_ref(out, "chatml") == ("chatml", "--template")
    gone = tmp_path / "gone.jinja"
    gone.write_text(load_template("chatml").source)
    out = inspect(fake_run(tmp_path / "file", template=str(gone)))  # there when the run was made
    gone.unlink()
    with pytest.raises(DojoError, match="not there any more"):
        outputs.template_ref(out)


def test_stop_texts_put_end_of_turn_first() -> None:
    assert stop_texts(load_template("llama-3-instruct"), "<|end_of_text|>") == [
        "<|eot_id|>",
        "<|end_of_text|>",
    ]
    assert stop_texts(load_template("chatml"), "<|im_end|>") == ["<|im_end|>"]


@pytest.mark.parametrize("cut", [1, 2, 3, 5, 7])
def test_stop_text_never_prints_a_stop_piece(cut: int) -> None:
    text = "Hello <there> friend<|eot_id|>junk"
    f = StopText(["<|eot_id|>"])
    pieces = [text[i : i + cut] for i in range(0, len(text), cut)]
    shown = "".join(f.feed(p) for p in pieces) + f.flush()
    assert shown == f.text == "Hello <there> friend" and f.done


def test_stop_text_flushes_a_held_tail() -> None:
    f = StopText(["<|im_end|>"])
    assert f.feed("a <|im") == "a " and f.flush() == "<|im" and f.text == "a <|im"


def test_export_target(tmp_path: Path) -> None:
    run = fake_run(tmp_path / "run")
    assert export_target(run, None, force=False) == run / "export"
    dest = tmp_path / "x" / "y"
    assert export_target(run, str(dest), force=False) == dest  # parents made at write time
    for bad, why in ((str(run), "holds the run folder"), (str(tmp_path), "holds the run folder")):
        with pytest.raises(DojoError, match=why):
            export_target(run, bad, force=True)
    (run / "export").mkdir()
    assert export_target(run, None, force=False) == run / "export"  # empty: nothing to lose
    export_folder(run / "export")
    with pytest.raises(DojoError, match="already exists") as e:
        export_target(run, None, force=False)
    assert "--force" in (e.value.hint or "")
    assert export_target(run, None, force=True) == run / "export"
    other = tmp_path / "notes"
    other.mkdir()
    (other / "todo.txt").write_text("keep me")
    with pytest.raises(DojoError, match="not a model folder"):
        export_target(run, str(other), force=True)  # --force never deletes an unrelated folder
    (tmp_path / "f").write_text("")
    with pytest.raises(DojoError, match="is a file"):
        export_target(run, str(tmp_path / "f"), force=True)


def export_folder(folder: Path, *, mark: bool = True) -> Path:
    """What `dojo export` writes (``mark=False``: as it did before it marked its folders)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "generation_config.json", "tokenizer.json"):
        (folder / name).write_text("{}")
    weights_file(folder / "model.safetensors")
    if mark:
        (folder / ".dojo-export").write_text("written by dojo export\n")
    return folder


def _checkpoint(p: Path) -> None:
    fake_run(p.parent, "full", weights=False)
    p.mkdir()
    (p / "trainer_state.json").write_text("{}")
    (p / "config.json").write_text("{}")
    weights_file(p / "model.safetensors")


@pytest.mark.parametrize(
    "name, make, why",
    [
        ("run", lambda p: fake_run(p, "full"), "is a `dojo train` run folder"),
        ("checkpoint-2", _checkpoint, "is a training checkpoint"),
        (
            "init-weights",
            lambda p: (fake_run(p.parent, "full"), export_folder(p, mark=False)),
            "is the init-weights folder of a `dojo train` run",
        ),
        (
            "m",
            lambda p: (export_folder(p, mark=False), (p / "sub").mkdir()),
            "not an earlier export",
        ),
        ("m", lambda p: (export_folder(p), (p / "generation_config.json").unlink()), None),
    ],
    ids=["run", "checkpoint", "run-subfolder", "model-with-subfolder", "marked-export"],
)
def test_force_replaces_only_an_export(
    tmp_path: Path, name: str, make: Any, why: str | None
) -> None:
    """--force on another run, a checkpoint or a folder of a run is refused, not replaced; a
    folder `dojo export` wrote (its mark says so) is replaced."""
    run = fake_run(tmp_path / "mine")
    dest = tmp_path / "other" / name
    make(dest)
    if why is None:
        assert export_target(run, str(dest), force=True) == dest
        return
    with pytest.raises(DojoError) as e:
        export_target(run, str(dest), force=True)
    assert why in e.value.message and "--force only replaces an earlier export" in e.value.message
    assert e.value.message.startswith(f"-o {str(dest)!r}") and "-o" in (e.value.hint or "")
    with pytest.raises(DojoError, match="only replaces"):  # without --force: no "pass --force"
        export_target(run, str(dest), force=False)


def test_force_replaces_an_export_from_before_the_mark(tmp_path: Path) -> None:
    run = fake_run(tmp_path / "run")
    old = export_folder(tmp_path / "chat-model", mark=False)
    assert export_target(run, str(old), force=True) == old


def test_unwritable_export_folder_has_a_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = fake_run(tmp_path / "run")
    monkeypatch.setattr(outputs.os, "access", lambda path, mode: False)  # root writes anywhere
    with pytest.raises(DojoError, match="is not writable") as e:
        export_target(run, str(tmp_path / "ro" / "y"), force=False)
    assert str(tmp_path) in e.value.message  # the nearest folder that exists
    assert "write to" in (e.value.hint or "") and "permissions" in (e.value.hint or "")


def test_repo_id_and_login_checked_before_merging(monkeypatch: pytest.MonkeyPatch) -> None:
    huggingface_hub = pytest.importorskip("huggingface_hub")
    from huggingface_hub import constants

    for bad in ("a/b/c", "-x", "a b", "../up", ""):
        with pytest.raises(DojoError, match="not a Hub repository id"):
            outputs.check_repo_id(bad)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    with pytest.raises(DojoError, match="not logged in") as e:
        outputs.check_repo_id("me/model")
    assert "hf auth login" in (e.value.hint or "")
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: "hf_x")
    assert outputs.check_repo_id("me/model") == "me/model"
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(DojoError, match="HF_HUB_OFFLINE"):
        outputs.check_repo_id("me/model")


def test_push_calls_upload_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    huggingface_hub = pytest.importorskip("huggingface_hub")

    calls: list[tuple[str, Any, dict[str, Any]]] = []
    monkeypatch.setattr(
        huggingface_hub,
        "create_repo",
        lambda *a, **kw: calls.append(("create", a, kw)) or "https://hf.co/me/m",
    )
    monkeypatch.setattr(
        huggingface_hub, "upload_folder", lambda *a, **kw: calls.append(("upload", a, kw))
    )
    assert outputs.push(tmp_path / "export", "me/m", tmp_path / "run") == "https://hf.co/me/m"
    assert calls[0] == ("create", ("me/m",), {"repo_type": "model", "exist_ok": True})
    assert calls[1][0] == "upload" and calls[1][2] == {
        "repo_id": "me/m",
        "folder_path": str(tmp_path / "export"),
        "repo_type": "model",
        "commit_message": "dojo export of run",
        "ignore_patterns": [".dojo-export"],  # dojo's own mark stays local
    }

    def fail(*a: Any, **kw: Any) -> None:
        raise ConnectionError("no network")

    monkeypatch.setattr(huggingface_hub, "upload_folder", fail)
    with pytest.raises(DojoError, match="upload failed: ConnectionError") as e:
        outputs.push(tmp_path / "export", "me/m", tmp_path / "run")
    assert "hf upload me/m" in (e.value.hint or "")


@pytest.mark.parametrize(
    "args, needle",
    [
        (["chat", "{run}", "--device", "tpu"], "--device 'tpu'"),
        (["chat", "{run}", "--prompt", " "], "--prompt is empty"),
        (["chat", "{run}", "--max-new-tokens", "0"], "--max-new-tokens"),
        (["chat", "{run}", "--temperature", "-1"], "--temperature"),
        (["chat", "{missing}", "--prompt", "hi"], "does not exist"),
        (["export", "{run}", "--dtype", "int8"], "--dtype 'int8'"),
        (["export", "{missing}"], "does not exist"),
        (["export", "{run}", "--push-to-hub", "a/b/c"], "--push-to-hub 'a/b/c'"),
    ],
)
def test_cli_bad_input_is_one_error_line(
    cli: Any, tmp_path: Path, args: list[str], needle: str
) -> None:
    run = fake_run(tmp_path / "run")
    argv = [a.format(run=run, missing=tmp_path / "nope") for a in args]
    r = cli(*argv)
    assert r.exit_code != 0 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert lines[0].startswith("error: ") and needle in lines[0], r.stderr
    assert len(lines) == 2 and lines[1].startswith("hint: ")
    assert not (run / "export").exists()


@pytest.mark.parametrize(
    "flag, value, why",
    [
        ("--temperature", "nan", "must be a number of at least 0"),
        ("--temperature", "inf", "must be a number of at least 0"),
        ("--temperature", "-inf", "must be a number of at least 0"),
        ("--temperature", "1e400", "must be a number of at least 0"),  # inf once parsed
        ("--temperature", "-1", "out of range: of at least 0"),
        ("--temperature", "warm", "must be a number of at least 0"),
        ("--max-new-tokens", "0", "out of range: of at least 1"),
        ("--max-new-tokens", "abc", "must be a whole number of at least 1"),
        ("--max-new-tokens", "2.5", "must be a whole number of at least 1"),
        ("--max-new-tokens", "nan", "must be a whole number of at least 1"),
    ],
)
def test_chat_numbers_are_checked_as_train_checks_them(
    cli: Any, tmp_path: Path, flag: str, value: str, why: str
) -> None:
    """NaN and inf are refused (a float range lets them through and sampling printed garbage),
    and every bad number is exit 1 with an example, as in dojo train."""
    r = cli("chat", str(fake_run(tmp_path / "run")), "--prompt", "hi", flag, value)
    assert r.exit_code == 1 and r.stdout == ""
    assert r.stderr.splitlines() == [
        f"error: {flag} {value!r}: {why}",
        f"hint: e.g. {flag} {'0' if flag == '--temperature' else '256'}",
    ]


@pytest.mark.parametrize("command", ["chat", "export"])
def test_without_the_train_extra(
    cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a)
    )
    r = cli(command, str(fake_run(tmp_path / "run")))
    assert r.exit_code == 1
    assert f"error: dojo {command} needs torch" in r.stderr
    assert "hint: pip install -e '.[train]' in dojo's clone" in r.stderr


def test_version(cli: Any) -> None:
    import dojo

    r = cli("--version")
    assert (r.exit_code, r.stdout) == (0, f"dojo {dojo.__version__}\n")
