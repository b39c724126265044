"""dojo.cli: a table of wrong invocations of every command, run through the real entry point.

Every case must end with exactly one ``error:`` line holding the expected text, a non-zero exit
code (1 = DojoError, 2 = usage error), no traceback, and not a single file written or changed.
``dojo train`` cases can never launch: the launcher and the tiny-model writer are replaced by
functions that fail loudly, so a check that lets bad input through shows up as a wrong message.
"""

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from dojo.gpus import Gpu


@dataclass(frozen=True)
class Bad:
    args: tuple[str, ...]
    expect: str
    """Substring of the one ``error:`` line (names the flag and the value)."""
    code: int = 1
    gpus: int = 0
    """GPUs the (faked) nvidia-smi reports: 0 = a CPU machine, 2 = ids 0 and 1."""


def c(*args: str, expect: str, code: int = 1, gpus: int = 0) -> Bad:
    return Bad(args, expect, code, gpus)


# Files the cases point at (created in a fresh folder per case, relative paths).
FILES: dict[str, bytes] = {
    "bad.yaml": b"method: lora\nseq_len: [1, 2\nlr: 1e-4\n",
    "unknown.yaml": b"method: lora\nsequence_len: 512\n",
    "list.yaml": b"- lora\n- full\n",
    "chat_row.json": b'{"messages": [{"role": "user", "content": "hi"}]}\n',
    "types.yaml": b"micro_batch: four\n",
    "bad_ds.json": b'{\n  "zero_optimization": {"stage": 2,}\n}\n',
    "list.json": b"[1, 2]\n",
    "empty.jsonl": b"",
    "blank.jsonl": b"\n\n   \n",
    "binary.jsonl": b"PK\x03\x04\x00\x00\x08\x00" * 16,
    "latin1.jsonl": '{"messages": "caf\xe9"}\n'.encode("latin-1"),
    "no_content.jsonl": b'{"messages": [{"role": "user"}]}\n',
    "unknown_format.jsonl": b'{"question": "hi", "answer": "yo"}\n',
    "wrong_role.jsonl": b'{"messages": [{"role": "human", "content": "hi"}]}\n',
    "bad_speaker.jsonl": b'{"conversations": [{"from": "alien", "value": "hi"}]}\n',
    "alpaca_types.jsonl": b'{"instruction": 3, "output": "x"}\n',
    "broken_line.jsonl": b'{"messages": []}\n{"messages": [\n',
    "data.txt": b"hello\n",
    "bad_array.json": b'[\n  {"messages": []},\n  {"messages": [}\n]\n',
    "msgs_bad.json": b'{"messages": [\n  {"role": "user", "content": "hi"},\n]}\n',
    "msgs_role.json": b'{"messages": [{"role": "wizard", "content": "hi"}]}\n',
    "msgs_content.json": b'{"messages": [{"role": "user", "content": 42}]}\n',
    "msgs_empty_list.json": b'{"messages": []}\n',
    "msgs_scalar.json": b'"just a string"\n',
    "ok_msgs.json": b'{"messages": [{"role": "user", "content": "hi"},'
    b' {"role": "assistant", "content": "yo"}]}\n',
    "tools_obj.json": b'{"name": "get_weather"}\n',
    "syntax.jinja": b"{% for m in messages %}{{ m.content }",
    "endless.jinja": b"{% if %}",
    "tokcfg/tokenizer_config.json": b'{"eos_token": "</s>"}\n',
    "badmodel/config.json": b'{"hidden_size": 12,\n  "num_layers": }\n',
    "notamodel/README.md": b"nothing here\n",
    "existing.json": b"{}\n",
    "ro/keep.txt": b"x\n",
}
FOLDERS = ("folder",)

CONFIG = [
    c("config", "--stage", "2", "--optim", "adamw_torch", "--optimizer", "ds", expect="--optim adamw_torch applies to --optimizer hf"),
    c("config", "--stage", "5", expect="--stage '5': choose one of none, 0, 1, 2, 3"),
    c("config", "--stage", "-1", expect="--stage '-1': choose one of none, 0, 1, 2, 3"),
    c("config", "--stage", "two", expect="--stage 'two': choose one of none, 0, 1, 2, 3"),
    c("config", "--stage", "2", "--offload", "gpu", expect="--offload 'gpu': choose one of none, cpu, nvme"),
    c("config", "--stage", "0", "--offload", "cpu", expect="--offload cpu needs ZeRO stage 1, 2 or 3"),
    c("config", "--stage", "2", "--offload-param", "cpu", expect="--offload-param cpu needs --zero 3 (got --zero 2): only ZeRO-3 partitions parameters"),
    c("config", "--stage", "3", "--offload", "nvme", expect="--offload nvme needs --nvme-path"),
    c("config", "--stage", "2", "--bucket-size", "lots", expect="--bucket-size 'lots': must be a whole number from 1 to 1,000,000,000,000"),
    c("config", "--stage", "2", "--bucket-size", "-5", expect="--bucket-size '-5': out of range: from 1 to 1,000,000,000,000"),
    c("config", "--stage", "2", "--bucket-size", "1.5", expect="--bucket-size '1.5': must be a whole number from 1 to 1,000,000,000,000"),
    c("config", "--stage", "2", "--precision", "fp8", expect="--precision 'fp8': choose one of auto, bf16, fp16, fp32"),
    c("config", "--stage", "2", "--optimizer", "adam", expect="--optimizer 'adam': choose one of hf, ds"),
    c("config", "--stage", "2", "-o", "folder", expect="-o 'folder' is a folder"),
    c("config", "--stage", "2", "-o", "nodir/ds.json", expect="folder 'nodir' does not exist"),
    c("config", "--stage", "2", "-o", "existing.json", expect="-o 'existing.json' already exists"),
    c("config", "--stage", "2", "--model", "llama3-8b", expect="--model 'llama3-8b': unknown model"),
    c("config", "--stage", "2", "--model", "./badmodel", expect="is not valid JSON: Expecting value at line 2"),
    c("config", "--check", "nosuch.json", expect="--check 'nosuch.json': no such file"),
    c("config", "--check", "folder", expect="--check 'folder': is a folder"),
    c("config", "--check", "bad_ds.json", expect="bad_ds.json:2:36: error: invalid JSON"),
    c("config", "--check", "list.json", expect="expected a JSON object, got list"),
    c("config", "--check", "existing.json", "--stage", "2", expect="--check FILE lints a file"),
    c("config", "--stage", "2", "--stag", "3", expect="no such option: --stag", code=2),
]  # fmt: skip

ESTIMATE = [
    c("estimate", expect="missing --model"),
    c("estimate", "--model", "7b", "--zero", "4", expect="--zero '4': choose one of none, 0, 1, 2, 3"),
    c("estimate", "--model", "7b", "--num-gpus", "0", expect="--num-gpus '0': out of range: from 1 to 4,096"),
    c("estimate", "--model", "7b", "--num-gpus", "-2", expect="--num-gpus '-2': out of range: from 1 to 4,096"),
    c("estimate", "--model", "7b", "--num-nodes", "0", expect="--num-nodes '0': out of range: from 1 to 4,096"),
    c("estimate", "--model", "7b", "--micro-batch", "0", expect="--micro-batch '0': out of range: from 1 to 4,096"),
    c("estimate", "--model", "7b", "--seq-len", "0", expect="--seq-len '0': out of range: from 8 to 1,048,576"),
    c("estimate", "--model", "7b", "--seq-len", "99999999999", expect="--seq-len '99999999999': out of range: from 8 to 1,048,576"),
    c("estimate", "--model", "7b", "--seq-len", "4k", expect="--seq-len '4k': must be a whole number"),
    c("estimate", "--model", "7b", "--gpu-memory", "-1", expect="--gpu-memory '-1': out of range: from 0.1 to 1e+06"),
    c("estimate", "--model", "7b", "--gpu-memory", "inf", expect="--gpu-memory 'inf': must be a number from 0.1 to 1e+06"),
    c("estimate", "--model", "7b", "--gpu-memory", "nan", expect="--gpu-memory 'nan': must be a number from 0.1 to 1e+06"),
    c("estimate", "--model", "7b", "--cpu-memory", "0", expect="--cpu-memory '0': out of range: from 0.1 to 1e+09"),
    c("estimate", "--model", "7b", "--method", "lora", "--lora-rank", "0", expect="--lora-rank '0': out of range: from 1 to 65,536"),
    c("estimate", "--model", "7b", "--method", "sft", expect="--method 'sft': choose one of full, lora, qlora"),
    c("estimate", "--model", "7b", "--bucket-size", "0", expect="--bucket-size '0': out of range: from 1 to 1,000,000,000,000"),
    c("estimate", "--model", "7b", "--zero", "0", "--offload", "cpu", expect="--offload cpu needs ZeRO stage 1, 2 or 3 (got --zero 0)"),
    c("estimate", "--model", "7b", "--zero", "2", "--offload-param", "cpu", expect="--offload-param cpu needs --zero 3 (got --zero 2): only ZeRO-3 partitions parameters"),
    c("estimate", "--model", "llama3-8b", expect="did you mean llama-3.1-8b"),
    c("estimate", "--model", "./nosuch/config.json", expect="--model ./nosuch/config.json: no such file"),
    c("estimate", "--model", "./badmodel", expect="at line 2 column"),
    c("estimate", "--model", "notamodel", expect="--model notamodel: folder has no config.json"),
    c("estimate", "--model", "bad_ds.json", expect="not valid JSON: Expecting property name"),
    c("estimate", "--model", "list.json", expect="list.json is not a JSON object"),
    c("estimate", "--model", "empty.jsonl", expect="--model empty.jsonl"),
]  # fmt: skip

CHAT = [
    c("chat-template", "render", "--template", "qwen", "--messages", "ok_msgs.json", expect="did you mean qwen3"),
    c("chat-template", "render", "--template", "./nosuch.jinja", "--messages", "ok_msgs.json", expect="--template './nosuch.jinja' is not a bundled"),
    c("chat-template", "render", "--template", "folder", "--messages", "ok_msgs.json", expect="--template 'folder' has no chat template"),
    c("chat-template", "render", "--template", "binary.jsonl", "--messages", "ok_msgs.json", expect="is a binary file, not a chat template"),
    c("chat-template", "render", "--template", "syntax.jinja", "--messages", "ok_msgs.json", expect="--template 'syntax.jinja': does not parse: line 1"),
    c("chat-template", "render", "--template", "endless.jinja", "--messages", "ok_msgs.json", expect="does not parse"),
    c("chat-template", "render", "--template", "tokcfg/tokenizer_config.json", "--messages", "ok_msgs.json", expect="has no 'chat_template'"),
    c("chat-template", "render", "--template", "chatml", "--messages", "nosuch.json", expect="--messages 'nosuch.json' cannot be read"),
    c("chat-template", "render", "--template", "chatml", "--messages", "folder", expect="--messages 'folder' cannot be read"),
    c("chat-template", "render", "--template", "chatml", "--messages", "msgs_bad.json", expect="is not valid JSON: Expecting value: line 3"),
    c("chat-template", "render", "--template", "chatml", "--messages", "empty.jsonl", expect="--messages 'empty.jsonl' is empty"),
    c("chat-template", "render", "--template", "chatml", "--messages", "binary.jsonl", expect="is a binary file, not JSON"),
    c("chat-template", "render", "--template", "chatml", "--messages", "msgs_role.json", expect="unknown role 'wizard'"),
    c("chat-template", "render", "--template", "chatml", "--messages", "msgs_content.json", expect="content is int, not a string"),
    c("chat-template", "render", "--template", "chatml", "--messages", "msgs_empty_list.json", expect="must be a non-empty list"),
    c("chat-template", "render", "--template", "chatml", "--messages", "msgs_scalar.json", expect="got str"),
    c("chat-template", "render", "--template", "chatml", "--messages", "ok_msgs.json", "--tools", "tools_obj.json", expect="--tools 'tools_obj.json' must be a JSON list"),
    c("chat-template", "render", "--template", "chatml", "--messages", "ok_msgs.json", "--var", "1x=3", expect="--var '1x=3' is not KEY=VALUE"),
    c("chat-template", "render", "--template", "chatml", "--messages", "ok_msgs.json", "--var", "novalue", expect="--var 'novalue'"),
    c("chat-template", "render", "--template", "chatml", expect="missing option '--messages'", code=2),
    c("chat-template", "show", "nosuch", expect="'nosuch' is not a bundled template"),
    c("chat-template", "check", "--template", "chatml", "--messages", "msgs_role.json", expect="unknown role 'wizard'"),
    c("chat-template", "frobnicate", expect="no such command 'frobnicate'", code=2),
]  # fmt: skip

TRAIN = [
    c("train", "--config", "nosuch.yaml", expect="--config 'nosuch.yaml' does not exist"),
    c("train", "--config", "folder", expect="--config 'folder' is a folder"),
    c("train", "--config", "bad.yaml", expect="malformed YAML (line 3, column 3)"),
    c("train", "--config", "unknown.yaml", expect="unknown key 'sequence_len'"),
    c("train", "--config", "list.yaml", expect="expected a mapping of option: value, got list"),
    c("train", "--config", "chat_row.json", expect="--config 'chat_row.json': holds a conversation or dataset row, not run options"),
    c("train", "--config", "types.yaml", expect="--config 'types.yaml': micro_batch 'four': must be a whole number from 1 to 4,096"),
    c("train", "--config", "binary.jsonl", expect="--config 'binary.jsonl'"),
    c("train", "--method", "sft", expect="--method 'sft': choose one of full, lora, qlora"),
    c("train", "--seq-len", "0", expect="--seq-len '0': out of range: from 8 to 1,048,576"),
    c("train", "--seq-len", "100000000", expect="--seq-len '100000000': out of range: from 8 to 1,048,576"),
    c("train", "--micro-batch", "-1", expect="--micro-batch '-1': out of range: from 1 to 4,096"),
    c("train", "--lr", "-1", expect="--lr '-1': out of range: from 1e-12 to 1"),
    c("train", "--lr", "fast", expect="--lr 'fast': must be a number"),
    c("train", "--lr", "nan", expect="--lr 'nan': must be a number from 1e-12 to 1"),
    c("train", "--zero", "5", expect="--zero '5': choose one of none, 0, 1, 2, 3"),
    c("train", "--compile", "yes", expect="--compile 'yes': choose one of auto, on, off"),
    c("train", "--compile", "on", expect="--compile on needs CUDA GPUs"),
    c("train", "--liger", "on", expect="--liger on needs CUDA GPUs"),
    c("train", "--epochs", "0", expect="--epochs '0': out of range: from 1e-06 to 1e+06"),
    c("train", "--lora-dropout", "1.5", expect="--lora-dropout '1.5': out of range: from 0 to 0.99"),
    c("train", "--master-port", "80", expect="--master-port '80': out of range: from 1,024 to 65,535"),
    c("train", "--nproc", "0", expect="--nproc '0': out of range: from 1 to 256"),
    c("train", "--offload-param", "cpu", expect="--offload-param cpu needs --zero 3"),
    c("train", "--gpus", "0", "--nproc", "2", expect="--gpus, --num-gpus and --nproc exclude each other"),
    c("train", "--gpus", "0, 1", expect="--gpus '0, 1': no spaces allowed", gpus=2),
    c("train", "--gpus", "0,0", expect="--gpus '0,0': GPU 0 is listed twice", gpus=2),
    c("train", "--gpus", "-1", expect="--gpus '-1': '-1' is not a GPU index", gpus=2),
    c("train", "--gpus", "2", expect="--gpus '2': GPU 2 does not exist", gpus=2),
    c("train", "--gpus", "0,1,7", expect="GPU 7 does not exist", gpus=2),
    c("train", "--gpus", "all", expect="--gpus all: no NVIDIA GPU found"),
    c("train", "--method", "qlora", expect="--method qlora needs an NVIDIA GPU"),
    c("train", "--precision", "fp16", expect="--precision fp16 needs a GPU"),
    c("train", "--data", "nosuch.jsonl", expect="--data nosuch.jsonl: no such file"),
    c("train", "--data", "folder", expect="--data folder: the folder holds no .jsonl"),
    c("train", "--data", "empty.jsonl", expect="--data empty.jsonl is empty"),
    c("train", "--data", "blank.jsonl", expect="--data blank.jsonl is empty"),
    c("train", "--data", "binary.jsonl", expect="--data binary.jsonl is a binary file"),
    c("train", "--data", "latin1.jsonl", expect="--data latin1.jsonl: not UTF-8 text"),
    c("train", "--data", "data.txt", expect="unsupported file type '.txt'"),
    c("train", "--data", "no_content.jsonl", expect="no_content.jsonl:1: message 0 (user) has no 'content'"),
    c("train", "--data", "unknown_format.jsonl", expect="not in a known format (keys: answer, question)"),
    c("train", "--data", "wrong_role.jsonl", expect="wrong_role.jsonl:1: message 0 has unknown role 'human'"),
    c("train", "--data", "bad_speaker.jsonl", expect="unknown speaker 'alien'"),
    c("train", "--data", "alpaca_types.jsonl", expect="alpaca field 'instruction' must be a string"),
    c("train", "--data", "broken_line.jsonl", expect="--data broken_line.jsonl:2: not valid JSON"),
    c("train", "--data", "bad_array.json", expect="--data bad_array.json:3: not valid JSON"),
    c("train", "--model", "./nosuch-model", expect="--model ./nosuch-model: no such folder"),
    c("train", "--model", "nosuch-dir/", expect="--model nosuch-dir/: no such folder"),
    c("train", "--model", "ok_msgs.json", expect="is a file; dojo train needs the model folder"),
    c("train", "--model", "./badmodel", expect="is not valid JSON: Expecting value at line 2"),
    c("train", "--model", "./notamodel", expect="folder has no config.json"),
    c("train", "--template", "nosuch", expect="--template 'nosuch' is not a bundled template"),
    c("train", "--output-dir", "existing.json", expect="--output-dir existing.json: is a file"),
    c("train", "--output-dir", "ro", expect="--output-dir ro already holds files"),
    c("train", "--resume", "--output-dir", "folder", expect="--resume: no complete checkpoint"),
    c("train", "--batch-size", "8", expect="no such option: --batch-size", code=2),
]  # fmt: skip

CASES = CONFIG + ESTIMATE + CHAT + TRAIN


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under root with its size and mtime (ns)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.stat()
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out


def _refuse(*_a: object, **_k: object) -> None:
    raise RuntimeError("bad input reached the launch step")


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for rel, data in FILES.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    for rel in FOLDERS:
        (tmp_path / rel).mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DOJO_DEBUG", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing may reach the network
    import dojo.train.driver
    import dojo.train.launch

    monkeypatch.setattr(dojo.train.launch, "run", _refuse)
    monkeypatch.setattr(dojo.train.driver, "_prepare_model", _refuse)
    return tmp_path


def _fake_gpus(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    import dojo.gpus

    gpus = [Gpu(i, "NVIDIA H200", 139.8) for i in range(n)]
    monkeypatch.setattr(dojo.gpus, "list_gpus", lambda: list(gpus))


def _id(case: Bad) -> str:
    return " ".join(case.args)[:60]


def test_enough_cases() -> None:
    assert len(CASES) >= 40
    assert {c.args[0] for c in CASES} == {"config", "estimate", "chat-template", "train"}
    assert len({c.args for c in CASES}) == len(CASES)  # no duplicate rows


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_bad_input(case: Bad, workspace: Path, cli, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_gpus(monkeypatch, case.gpus)
    before = _snapshot(workspace)
    r = cli(*case.args)
    both = r.stdout + r.stderr
    assert r.exit_code == case.code, both
    assert "Traceback" not in both
    assert "internal error" not in both, both
    lines = both.splitlines()
    errors = [i for i, line in enumerate(lines) if "error:" in line]
    assert len(errors) == 1, both
    shown = lines[errors[0]]  # the error line, and its hint (did-you-mean lives there)
    if errors[0] + 1 < len(lines) and lines[errors[0] + 1].startswith("hint: "):
        shown += "\n" + lines[errors[0] + 1]
    assert case.expect in shown, both
    assert _snapshot(workspace) == before, "bad input wrote or changed a file"


def test_full_disk_is_found_before_launch(
    workspace: Path, cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Free space is compared with what the checkpoints will need before anything starts."""
    import shutil

    import dojo.train.preflight as pre

    _fake_gpus(monkeypatch, 0)
    usage = shutil.disk_usage(workspace)
    monkeypatch.setattr(pre.shutil, "disk_usage", lambda _p: usage._replace(free=1024))
    before = _snapshot(workspace)
    r = cli("train", "--method", "full", "--output-dir", "runs/full-disk")
    assert r.exit_code == 1, r.stderr
    assert (
        "error: --output-dir runs/full-disk: 0 MiB free, this run writes about 18 MiB" in r.stderr
    )
    assert "Traceback" not in r.stderr
    assert _snapshot(workspace) == before


def test_unwritable_output_is_found_before_launch(
    workspace: Path, cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only parent folder is refused before launch (os.access, so it also holds for root)."""
    import dojo.train.preflight as pre

    _fake_gpus(monkeypatch, 0)
    real = pre.os.access
    ro = (workspace / "ro").resolve()

    def access(path: object, mode: int) -> bool:
        if mode & os.W_OK and Path(str(path)).resolve() == ro:
            return False
        return real(path, mode)  # type: ignore[arg-type]

    monkeypatch.setattr(pre.os, "access", access)
    before = _snapshot(workspace)
    r = cli("train", "--output-dir", "ro/new-run/deeper")
    assert r.exit_code == 1, r.stderr
    assert "error: --output-dir ro/new-run/deeper: ro is not writable" in r.stderr
    assert _snapshot(workspace) == before
