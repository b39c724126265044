"""dojo.cli given files that are not what they claim, through the real entry point.

Files with duplicate keys, NaN/Infinity/1e400, absurd sizes, 100,000 nested brackets, Latin-1
bytes; FIFOs, devices, symlink loops and folders where a file is expected; ``--gpus ²``. Every case
must end with exit code 1, exactly one short ``error:`` line naming the flag and the value (plus a
``hint:`` line when the error is raised rather than a lint finding), no traceback, no "internal
error", nothing written or changed -- and within seconds: a FIFO must never block the CLI.
"""

import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path

import pytest

from dojo.architectures import ARCHITECTURES
from dojo.gpus import Gpu


@dataclass(frozen=True)
class Hostile:
    args: tuple[str, ...]
    expect: tuple[str, ...]
    """Substrings of the one error line (+ its hint): the flag, the value, what is wrong."""
    hint: bool = True
    """False for `config --check` lint findings (FILE:WHERE: error: lines, no hint by design)."""
    gpus: int = 0


def _ds(zero: dict[str, object], **top: object) -> bytes:
    return json.dumps({"zero_optimization": {"stage": 2, **zero}, **top}).encode()


def _model(**fields: object) -> bytes:
    return json.dumps({**ARCHITECTURES["llama-3.2-1b"], **fields}).encode()


_MIXTRAL = {**ARCHITECTURES["mistral-7b"], "model_type": "mixtral", "num_local_experts": 8}
_QWEN_MOE = {**ARCHITECTURES["qwen3-8b"], "model_type": "qwen3_moe", "num_experts": 128}
_DEEPSEEK = json.loads((Path(__file__).parent / "data/moe/deepseek-v3.config.json").read_text())

FILES: dict[str, bytes] = {
    # --- DeepSpeed JSON for config --check ---
    "dup.json": b'{"zero_optimization": {"stage": 2, "stage": 3}}',
    "dup_top.json": b'{"bf16": {"enabled": true}, "bf16": {"enabled": false}}',
    "long_key.json": json.dumps({"zero_optimization": {"stage": 2, "z" * 100_000: 1}}).encode(),
    "long_type.json": json.dumps({"scheduler": {"type": "W" * 100_000}}).encode(),
    "long_device.json": json.dumps({"zero_optimization": {"stage": 3, "offload_param": {"device": "d" * 100_000}}}).encode(),
    "dup_long.json": ('{"' + "k" * 100_000 + '": 1, "' + "k" * 100_000 + '": 2}').encode(),
    "nan.json": b'{"zero_optimization": {"stage": 2, "reduce_bucket_size": NaN}}',
    "inf.json": b'{"zero_optimization": {"stage": 2, "allgather_bucket_size": Infinity}}',
    "neginf.json": b'{"zero_optimization": {"stage": 2, "sub_group_size": -Infinity}}',
    "e400.json": b'{"zero_optimization": {"stage": 2, "reduce_bucket_size": 1e400}}',
    "nan_list.json": b'{"optimizer": {"type": "AdamW", "params": {"betas": [0.9, NaN]}}}',
    "bigint.json": b'{"train_batch_size": ' + b"9" * 5000 + b"}",
    "e30.json": _ds({"reduce_bucket_size": 1e30}),
    "e13_sub.json": _ds({"sub_group_size": 1e13}),
    "e20_live.json": json.dumps({"zero_optimization": {"stage": 3, "stage3_max_live_parameters": 1e20}}).encode(),
    "str_bucket.json": _ds({"reduce_bucket_size": "big"}),
    "bool_bucket.json": _ds({"allgather_bucket_size": True}),
    "frac_bucket.json": _ds({"reduce_bucket_size": 1.5}),
    "neg_bucket.json": _ds({"reduce_bucket_size": -5}),
    "zero_bucket.json": _ds({"allgather_bucket_size": 0}),
    "neg_persist.json": json.dumps({"zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": -1}}).encode(),
    "mb_zero.json": _ds({}, train_micro_batch_size_per_gpu=0),
    "ga_str.json": _ds({}, gradient_accumulation_steps="four"),
    "tbs_frac.json": _ds({}, train_batch_size=2.5),
    "stage_true.json": b'{"zero_optimization": {"stage": true}}',
    "stage_frac.json": b'{"zero_optimization": {"stage": 2.5}}',
    "deep100.json": b'{"a": ' * 100 + b"1" + b"}" * 100,
    "deep100k.json": b"[" * 100_000 + b"]" * 100_000,
    "unclosed100k.json": b"[" * 100_000,
    "latin1.json": '{"zero_optimization": {"stage": 2}, "x": "caf\xe9"}'.encode("latin-1"),
    "utf16.json": '{"zero_optimization": {"stage": 2}}'.encode("utf-16"),
    # --- model config.json for --model ---
    "m_e400/config.json": _model().replace(b'"hidden_size": 2048', b'"hidden_size": 1e400'),
    "m_nan/config.json": _model().replace(b'"vocab_size": 128256', b'"vocab_size": NaN'),
    "m_big/config.json": _model(hidden_size="big"),
    "m_neg/config.json": _model(hidden_size=-1),
    "m_zero/config.json": _model(hidden_size=0),
    "m_bool/config.json": _model(hidden_size=True),
    "m_frac/config.json": _model(hidden_size=2048.5),
    "m_e30/config.json": _model(hidden_size=1e30),
    "m_int40/config.json": _model(vocab_size=10**40),
    "m_heads0/config.json": _model(num_attention_heads=0),
    "m_kv0/config.json": _model(num_key_value_heads=0),
    "m_kv3/config.json": _model(num_key_value_heads=3),
    "m_hd0/config.json": _model(head_dim=0),
    "m_layers_str/config.json": _model(num_hidden_layers="16"),
    "m_inter_neg/config.json": _model(intermediate_size=-4),
    "m_tie_str/config.json": _model(tie_word_embeddings="false"),
    "m_type_int/config.json": _model(model_type=5),
    "m_text_str/config.json": json.dumps({"model_type": "llava", "text_config": "x"}).encode(),
    "m_indivisible/config.json": json.dumps({**ARCHITECTURES["llama-2-7b"], "hidden_size": 100}).encode(),
    "m_dup/config.json": b'{"hidden_size": 2048, "hidden_size": 4096}',
    "m_latin1/config.json": b'{"model_type": "llama", "name": "caf\xe9"}',
    "m_deep/config.json": b'{"a": ' * 200 + b"1" + b"}" * 200,
    "m_moe_llama/config.json": _model(n_routed_experts=64, num_experts_per_tok=6),
    "m_topk/config.json": json.dumps({**_MIXTRAL, "num_experts_per_tok": 9}).encode(),
    "m_topk0/config.json": json.dumps({**_MIXTRAL, "num_experts_per_tok": 0}).encode(),
    "m_dense_k/config.json": json.dumps({**_DEEPSEEK, "first_k_dense_replace": 100}).encode(),
    "m_mlp_only/config.json": json.dumps({**_QWEN_MOE, "num_experts_per_tok": 8, "moe_intermediate_size": 768, "mlp_only_layers": "all"}).encode(),
    "m_no_moe_width/config.json": json.dumps({**_QWEN_MOE, "num_experts_per_tok": 8}).encode(),
    "m_experts_neg/config.json": json.dumps({**_MIXTRAL, "num_local_experts": -8}).encode(),
    "m_kv_lora_str/config.json": json.dumps({**_DEEPSEEK, "kv_lora_rank": "512"}).encode(),
    "existing.json": b"{}\n",
    "target.json": b"{}\n",
}  # fmt: skip
FOLDERS = ("folder", "m_cfgdir/config.json", "m_fifo")


def _specials(root: Path) -> None:
    os.mkfifo(root / "fifo")
    os.mkfifo(root / "m_fifo/config.json")
    os.symlink("loop", root / "loop")
    os.symlink("nowhere.json", root / "dangling.json")
    os.symlink("target.json", root / "link.json")
    for name in ("huge.json", "m_huge/config.json"):  # 17 MB, sparse: costs no disk
        (root / name).parent.mkdir(exist_ok=True)
        with open(root / name, "wb") as f:
            f.truncate(17 << 20)


def c(*args: str, expect: tuple[str, ...] | str, hint: bool = True, gpus: int = 0) -> Hostile:
    return Hostile(args, (expect,) if isinstance(expect, str) else expect, hint, gpus)


CHECK = [
    c("config", "--check", "dup.json", expect=("--check 'dup.json'", "key 'stage' twice")),
    c("config", "--check", "dup_top.json", expect=("--check 'dup_top.json'", "key 'bf16' twice")),
    c("config", "--check", "long_key.json", expect=("zero_optimization.zzzz", "unknown key 'zzzz", "...; DeepSpeed rejects it"), hint=False),
    c("config", "--check", "long_type.json", expect=("scheduler.type", "unknown scheduler type 'WWWW", "..."), hint=False),
    c("config", "--check", "long_device.json", expect=("device 'dddd", "...", "is not none, cpu or nvme"), hint=False),
    c("config", "--check", "dup_long.json", expect=("--check 'dup_long.json'", "'kkkkk", "...", "twice")),
    c("config", "--check", "nan.json", expect=("--check 'nan.json'", "'NaN' (key 'reduce_bucket_size')")),
    c("config", "--check", "inf.json", expect=("'Infinity' (key 'allgather_bucket_size')",)),
    c("config", "--check", "neginf.json", expect=("'-Infinity' (key 'sub_group_size')",)),
    c("config", "--check", "e400.json", expect=("--check 'e400.json'", "'1e400' (key 'reduce_bucket_size')")),
    c("config", "--check", "nan_list.json", expect=("--check 'nan_list.json'", "non-finite number 'NaN'")),
    c("config", "--check", "bigint.json", expect=("--check 'bigint.json'", "number that is too long")),
    c("config", "--check", "e30.json", expect=("zero_optimization.reduce_bucket_size", "1e+30 is more than 1e+12 elements"), hint=False),
    c("config", "--check", "e13_sub.json", expect=("sub_group_size 10000000000000.0 is more than",), hint=False),
    c("config", "--check", "e20_live.json", expect=("stage3_max_live_parameters 1e+20 is more than",), hint=False),
    c("config", "--check", "str_bucket.json", expect=("reduce_bucket_size 'big' is not a number of elements",), hint=False),
    c("config", "--check", "bool_bucket.json", expect=("allgather_bucket_size True is not a number",), hint=False),
    c("config", "--check", "frac_bucket.json", expect=("reduce_bucket_size 1.5 is not a whole number",), hint=False),
    c("config", "--check", "neg_bucket.json", expect=("reduce_bucket_size -5 must be positive",), hint=False),
    c("config", "--check", "zero_bucket.json", expect=("allgather_bucket_size 0 must be positive",), hint=False),
    c("config", "--check", "neg_persist.json", expect=("stage3_param_persistence_threshold -1 must be zero or more",), hint=False),
    c("config", "--check", "mb_zero.json", expect=("train_micro_batch_size_per_gpu 0 must be positive",), hint=False),
    c("config", "--check", "ga_str.json", expect=("gradient_accumulation_steps 'four' is not a number",), hint=False),
    c("config", "--check", "tbs_frac.json", expect=("train_batch_size 2.5 is not a whole number",), hint=False),
    c("config", "--check", "stage_true.json", expect=("stage True is not 0, 1, 2 or 3",), hint=False),
    c("config", "--check", "stage_frac.json", expect=("stage 2.5 is not 0, 1, 2 or 3",), hint=False),
    c("config", "--check", "deep100.json", expect=("--check 'deep100.json'", "nests deeper than 64 levels")),
    c("config", "--check", "deep100k.json", expect=("--check 'deep100k.json'", "nests deeper than 64 levels")),
    c("config", "--check", "unclosed100k.json", expect=("--check 'unclosed100k.json'", "nests deeper than 64")),
    c("config", "--check", "latin1.json", expect=("--check 'latin1.json'", "not UTF-8 text (byte 0xe9 on line 1)")),
    c("config", "--check", "utf16.json", expect=("--check 'utf16.json'", "not UTF-8 text (byte 0xff")),
    c("config", "--check", "fifo", expect="--check 'fifo': is a FIFO (named pipe), not a regular file"),
    c("config", "--check", "/dev/null", expect="--check '/dev/null': is a character device, not a regular file"),
    c("config", "--check", "loop", expect="--check 'loop': cannot read it (Too many levels of symbolic links)"),
    c("config", "--check", "dangling.json", expect="--check 'dangling.json': no such file"),
    c("config", "--check", "folder", expect="--check 'folder': is a folder"),
    c("config", "--check", "huge.json", expect="--check 'huge.json': is 17,825,792 bytes; more than 16,777,216 is not a real one"),
]  # fmt: skip

# Each model file is tried through `config --model` and `estimate --model` (both resolve_model).
MODEL_FILES = [
    ("m_e400", ("'1e400' (key 'hidden_size')",)),
    ("m_nan", ("'NaN' (key 'vocab_size')",)),
    ("m_big", ("hidden_size 'big' must be a whole number 1..1,048,576 in",)),
    ("m_neg", ("hidden_size -1 must be a whole number",)),
    ("m_zero", ("hidden_size 0 must be a whole number",)),
    ("m_bool", ("hidden_size True must be a whole number",)),
    ("m_frac", ("hidden_size 2048.5 must be a whole number",)),
    ("m_e30", ("hidden_size 1e+30 must be a whole number",)),
    ("m_int40", ("vocab_size 10000000000000000000000000000000000000000 must be a whole number 1..16,777,216",)),
    ("m_heads0", ("num_attention_heads 0 must be a whole number",)),
    ("m_kv0", ("num_key_value_heads 0 must be a whole number",)),
    ("m_kv3", ("num_attention_heads 32 is not a multiple of num_key_value_heads 3",)),
    ("m_hd0", ("head_dim 0 must be a whole number",)),
    ("m_layers_str", ("num_hidden_layers '16' must be a whole number",)),
    ("m_inter_neg", ("intermediate_size -4 must be a whole number",)),
    ("m_tie_str", ("tie_word_embeddings 'false' must be true or false",)),
    ("m_type_int", ("model_type 5 must be a string",)),
    ("m_text_str", ("text_config 'x' must be an object",)),
    ("m_indivisible", ("hidden_size 100 is not a multiple of num_attention_heads 32",)),
    ("m_dup", ("key 'hidden_size' twice",)),
    ("m_latin1", ("not UTF-8 text (byte 0xe9",)),
    ("m_deep", ("nests deeper than 64 levels",)),
    ("m_moe_llama", ("n_routed_experts 64", "layout of model_type 'llama' is not known")),
    ("m_topk", ("num_experts_per_tok 9 is more than num_local_experts 8",)),
    ("m_topk0", ("num_experts_per_tok 0 must be a whole number",)),
    ("m_dense_k", ("first_k_dense_replace 100 is more than num_hidden_layers 61",)),
    ("m_mlp_only", ("mlp_only_layers 'all' must be a list",)),
    ("m_no_moe_width", ("has no 'moe_intermediate_size'",)),
    ("m_experts_neg", ("num_local_experts -8 must be a whole number",)),
    ("m_kv_lora_str", ("kv_lora_rank '512' must be a whole number",)),
    ("m_fifo", ("is a FIFO (named pipe), not a regular file",)),
    ("m_cfgdir", ("is a folder, not a regular file",)),
    ("m_huge", ("is 17,825,792 bytes; more than 16,777,216",)),
]  # fmt: skip
MODEL = [
    case
    for name, expect in MODEL_FILES
    for case in (
        c("config", "--stage", "2", "--model", f"./{name}", expect=(f"--model ./{name}", *expect)),
        c("estimate", "--model", f"./{name}", expect=(f"--model ./{name}", *expect)),
    )
]
MODEL += [
    c("estimate", "--model", "./fifo", expect="--model ./fifo: fifo: is a FIFO (named pipe)"),
    c("estimate", "--model", "/dev/null", expect="--model /dev/null: /dev/null: is a character device"),
    c("estimate", "--model", "./loop", expect=("--model ./loop", "Too many levels of symbolic links")),
    c("estimate", "--model", "a" * 5000, expect=("--model aaaaa", "...: not a usable path (File name too long)")),
    c("estimate", "--model", "x/" * 3000 + "config.json", expect=("--model x/x/", "not a usable path")),
    c("config", "--stage", "2", "--model", "q" * 250, expect=("--model 'qqqq", "...: unknown model")),
    c("estimate", "--model", "org/" + "n" * 300, expect=("--model 'org/nnnn", "unknown model")),
]  # fmt: skip

OUTPUT = [
    c("config", "--stage", "2", "-o", "dangling.json", expect="-o 'dangling.json' is a symbolic link (to 'nowhere.json')"),
    c("config", "--stage", "2", "-o", "link.json", expect="-o 'link.json' is a symbolic link (to 'target.json')"),
    c("config", "--stage", "2", "-o", "link.json", "--force", expect="-o 'link.json' is a symbolic link"),
    c("config", "--stage", "2", "-o", "loop", expect="-o 'loop' is a symbolic link (to 'loop')"),
    c("config", "--stage", "2", "-o", "fifo", expect="-o 'fifo' is a FIFO (named pipe), not a regular file"),
    c("config", "--stage", "2", "-o", "fifo", "--force", expect="-o 'fifo' is a FIFO (named pipe), not a regular file"),
    c("config", "--stage", "2", "-o", "/dev/null", "--force", expect="-o '/dev/null' is a character device, not a regular file"),
    c("config", "--stage", "2", "-o", "existing.json", expect="-o 'existing.json' already exists"),
]  # fmt: skip

GPUS = [
    c("train", "--gpus", spec, expect=(f"--gpus {spec!r}", why), gpus=2)
    for spec, why in [
        ("²", "'²' is not a GPU index"),
        ("٣", "'٣' is not a GPU index"),
        ("１", "'１' is not a GPU index"),
        ("0,,1", "an empty entry between commas"),
        ("0,", "an empty entry between commas"),
        (",", "an empty entry between commas"),
        ("-1", "'-1' is not a GPU index"),
        ("+1", "'+1' is not a GPU index"),
        ("1e3", "'1e3' is not a GPU index"),
        ("0x1", "'0x1' is not a GPU index"),
        ("1024", "no host has more than 1024 GPUs"),
        ("99999999999999999999999", "no host has more than 1024 GPUs"),
        ("0,\u00a01", "no spaces allowed"),
        ("1,01", "GPU 1 is listed twice"),
    ]
]  # fmt: skip

CASES = CHECK + MODEL + OUTPUT + GPUS


def _snapshot(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every entry under root (lstat: links and FIFOs as themselves), with size, mtime, mode."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns, st.st_mode)
    return out


def _refuse(*_a: object, **_k: object) -> None:
    raise RuntimeError("hostile input reached the launch step")


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for rel in FOLDERS:
        (tmp_path / rel).mkdir(parents=True)
    for rel, data in FILES.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    _specials(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DOJO_DEBUG", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing may reach the network
    import dojo.train.driver
    import dojo.train.launch

    monkeypatch.setattr(dojo.train.launch, "run", _refuse)
    monkeypatch.setattr(dojo.train.driver, "_prepare_model", _refuse)
    return tmp_path


def _hang(*_a: object) -> None:
    raise TimeoutError("the CLI blocked (a FIFO opened for reading?)")


def test_table_is_large_and_unique() -> None:
    assert len(CASES) >= 100
    assert len({c.args for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: " ".join(c.args)[:70])
def test_hostile(case: Hostile, workspace: Path, cli, monkeypatch: pytest.MonkeyPatch) -> None:
    import dojo.gpus

    gpus = [Gpu(i, "NVIDIA H200", 139.8) for i in range(case.gpus)]
    monkeypatch.setattr(dojo.gpus, "list_gpus", lambda: list(gpus))
    before = _snapshot(workspace)
    old = signal.signal(signal.SIGALRM, _hang)
    signal.alarm(60)
    try:
        r = cli(*case.args)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    both = r.stdout + r.stderr
    assert r.exit_code == 1, both
    assert "Traceback" not in both and "internal error" not in both, both
    lines = both.splitlines()
    errors = [i for i, line in enumerate(lines) if "error:" in line]
    assert len(errors) == 1, both
    shown = lines[errors[0]]
    assert len(shown) < 400, f"error line of {len(shown)} chars: values must be shortened"
    has_hint = errors[0] + 1 < len(lines) and lines[errors[0] + 1].startswith("hint: ")
    assert has_hint == case.hint, both
    if has_hint:
        assert shown.startswith("error: ")
        shown += "\n" + lines[errors[0] + 1]
    for part in case.expect:
        assert part in shown, both
    assert _snapshot(workspace) == before, "hostile input wrote or changed a file"
