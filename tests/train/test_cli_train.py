"""`dojo train` through the real CLI: dry run, and each bad input as one line before any launch."""

import json
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest

from dojo.gpus import Gpu
from tests.helpers.train import NO_TENSORS

TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "max_position_embeddings": 512,
    "tie_word_embeddings": False,
}
REPO = Path(__file__).resolve().parents[2]
H200 = [Gpu(0, "NVIDIA H200", 139.8), Gpu(1, "NVIDIA H200", 139.8)]


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(TINY_LLAMA))
    (d / "chat_template.jinja").write_text((REPO / "templates/chat/chatml.jinja").read_text())
    (d / "model.safetensors").write_bytes(NO_TENSORS)  # a dry run never loads it; it must exist
    return d


def _dry(out: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the run record's Run, ds_config.json) that a dry run wrote into ``out``."""
    rec = json.loads((out / "train.json").read_text())
    return {**rec["run"], "estimate": rec["estimate"]}, json.loads(
        (out / "ds_config.json").read_text()
    )


@pytest.fixture
def no_launch() -> Any:
    with patch("dojo.train.launch.run", side_effect=AssertionError("launched")) as m:
        yield m


def _gpus(found: list[Gpu]) -> Any:
    return patch("dojo.gpus.list_gpus", return_value=found)


def test_dry_run_prints_command_and_config(cli, model_dir: Path, tmp_path: Path, no_launch) -> None:
    out = tmp_path / "run dir"
    with _gpus(H200):
        r = cli(
            "train", "--model", str(model_dir), "--data", "org/chats", "--gpus", "1",
            "--output-dir", str(out), "--zero", "3", "--method", "full", "--master-port", "29999",
            "--dry-run",
        )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    first = r.stdout.strip()
    assert first.endswith(
        f"-m deepspeed.launcher.runner --include localhost:1 --master_port 29999 "
        f"--module dojo.train.worker --config '{out.resolve()}/train.json'"
    )
    run, ds = _dry(out)
    assert run["zero"]["stage"] == 3 and run["model"]["method"] == "full"
    assert run["gpu_ids"] == [1] and run["kernels"]["precision"] == "bf16"
    zero = ds["zero_optimization"]
    assert zero["stage"] == 3 and zero["stage3_gather_16bit_weights_on_model_save"] is True
    # Full ZeRO-3: 5e8 capped at the model's size; each decoder layer gathered whole.
    from dojo.modelspec import resolve_model

    params = resolve_model(str(model_dir / "config.json")).params
    assert zero["reduce_bucket_size"] == zero["stage3_prefetch_bucket_size"] == params
    assert zero["leaf_module"]["classes"][0] == "LlamaDecoderLayer"
    assert "optimizer:" in r.stderr  # which optimizer/scheduler is in effect is said before launch
    # The dry run wrote exactly the files its command references, and a real run may follow.
    assert sorted(p.name for p in out.iterdir()) == [
        ".dojo-dry-run",
        "ds_config.json",
        "train.json",
    ]


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_dry_run_leaves_a_trained_run_as_it_is(cli, model_dir: Path, tmp_path: Path) -> None:
    """chat, export and --resume read train.json as the record of the weights beside it: a dry
    run with other settings (--resume, --force) must not rewrite it or drop checkpoints."""
    out = tmp_path / "run"
    base = ["train", "--model", str(model_dir), "--data", "org/chats", "--nproc", "1",
            "-o", str(out)]  # fmt: skip
    with _gpus([]):
        assert cli(*base, "--seq-len", "64", "--dry-run").exit_code == 0
    (out / ".dojo-dry-run").unlink()  # as the launch leaves it, trained:
    (out / "model.safetensors").write_bytes(b"weights")
    ckpt = out / "checkpoint-2"
    ckpt.mkdir()
    (ckpt / "dojo_checkpoint.json").write_text(json.dumps({"world_size": 1, "step": 2}))
    before = _snapshot(out)
    for more in (["--resume"], ["--force"]):
        with _gpus([]):
            r = cli(*base, *more, "--seq-len", "128", "--max-steps", "3", "--dry-run")
        assert r.exit_code == 0, r.stderr
        assert f"note: --dry-run wrote nothing: {out.resolve()} holds a run" in r.stderr
        assert "run files:" not in r.stderr
        assert "--module dojo.train.worker" in r.stdout
        assert _snapshot(out) == before, more
    assert json.loads((out / "train.json").read_text())["run"]["data"]["seq_len"] == 64


def test_dry_run_plans_gpus_that_are_not_here(cli, model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "o"
    with _gpus([]):
        r = cli("train", "--model", str(model_dir), "--data", "org/chats", "--gpus", "0,1",
                "-o", str(out), "--dry-run")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    assert "these GPUs are not on this machine" in r.stderr
    assert "--include localhost:0,1" in r.stdout
    run, _ = _dry(out)
    assert run["device"] == "cuda" and run["machine_assumed"]
    assert run["kernels"]["precision"] == "bf16"
    with _gpus([]):  # without --dry-run it is refused before anything is written
        r = cli("train", "--model", str(model_dir), "--data", "org/chats", "--gpus", "0,1",
                "-o", str(tmp_path / "o2"))  # fmt: skip
    assert r.exit_code == 1 and "no NVIDIA GPU on this machine" in r.stderr
    assert not (tmp_path / "o2").exists()


@pytest.mark.parametrize(
    ("visible", "args", "include", "said"),
    [
        ("1", [], "localhost:1", "assumed: GPU 1 from CUDA_VISIBLE_DEVICES=1 (nvidia-smi's numbers)"),
        ("1", ["--gpus", "all"], "localhost:1", "assumed: GPU 1 from CUDA_VISIBLE_DEVICES=1"),
        ("1", ["--gpus", "1"], "localhost:1", ""),
        ("1,0", ["--num-gpus", "1"], "localhost:1",
         "assumed: GPU 1: --num-gpus 1 takes the first of CUDA_VISIBLE_DEVICES=1,0"),
        ("0,1", [], "localhost:0,1", "assumed: GPUs 0,1 from CUDA_VISIBLE_DEVICES=0,1"),
    ],
)  # fmt: skip
def test_cuda_visible_devices_picks_the_gpus(
    cli, model_dir: Path, tmp_path: Path, no_launch, monkeypatch: pytest.MonkeyPatch,
    visible: str, args: list[str], include: str, said: str,
) -> None:  # fmt: skip
    """DeepSpeed's runner reads CUDA_VISIBLE_DEVICES as the GPUs to include only when it gets no
    --include, and dojo always passes one: dojo reads it instead, as the same indices."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    with _gpus(H200):
        r = cli("train", "--model", str(model_dir), "--data", "org/chats", *args,
                "-o", str(tmp_path / "o"), "--dry-run")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    assert f"--include {include} " in r.stdout
    assert r.stdout.startswith("CUDA_DEVICE_ORDER=PCI_BUS_ID ")  # nvidia-smi's order in the ranks
    assert said in r.stderr
    assert ("CUDA_VISIBLE_DEVICES" in r.stderr) == bool(said)


@pytest.mark.parametrize(
    ("visible", "args", "message", "hint"),
    [
        ("1", ["--gpus", "0"], "error: --gpus '0': GPU 0 is hidden by CUDA_VISIBLE_DEVICES=1",
         "hint: unset CUDA_VISIBLE_DEVICES to use --gpus 0 (nvidia-smi's numbers), or drop --gpus "
         "to use GPU 1"),
        ("1", ["--num-gpus", "2"], "error: --num-gpus 2: CUDA_VISIBLE_DEVICES=1 shows 1 GPU(s)",
         "hint: use --num-gpus 1 or fewer, or unset CUDA_VISIBLE_DEVICES"),
        ("", [], "error: CUDA_VISIBLE_DEVICES='' hides every GPU", "hint: unset"),
        ("7", [], "error: CUDA_VISIBLE_DEVICES=7: GPU 7 does not exist", "hint: unset"),
    ],
)  # fmt: skip
def test_cuda_visible_devices_contradicted_is_one_line(
    cli, model_dir: Path, tmp_path: Path, no_launch, monkeypatch: pytest.MonkeyPatch,
    visible: str, args: list[str], message: str, hint: str,
) -> None:  # fmt: skip
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    with _gpus(H200):
        r = cli("train", "--model", str(model_dir), "--data", "org/chats", *args,
                "-o", str(tmp_path / "o"), "--dry-run")  # fmt: skip
    assert r.exit_code == 1
    assert r.stderr.splitlines() == [message, r.stderr.splitlines()[1]], r.stderr
    assert r.stderr.splitlines()[1].startswith(hint), r.stderr
    assert not (tmp_path / "o").exists()


def test_cuda_visible_devices_does_not_bind_cpu_runs(
    cli, model_dir: Path, tmp_path: Path, no_launch, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    with _gpus(H200):
        r = cli("train", "--model", str(model_dir), "--data", "org/chats", "--nproc", "2",
                "-o", str(tmp_path / "o"), "--dry-run")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    assert "--include localhost:0,1 " in r.stdout and "CUDA_VISIBLE_DEVICES" not in r.stderr


def test_folder_without_weights_needs_init_random(cli, model_dir: Path, tmp_path: Path) -> None:
    (model_dir / "model.safetensors").unlink()
    base = ["train", "--model", str(model_dir), "--data", "org/chats", "--nproc", "1", "--dry-run"]
    with _gpus([]):
        r = cli(*base, "-o", str(tmp_path / "a"))
        assert r.exit_code == 1 and "no weights" in r.stderr and "--init random" in r.stderr
        assert cli(*base, "-o", str(tmp_path / "b"), "--init", "random").exit_code == 0
        (model_dir / "pytorch_model.bin").write_bytes(b"PK\x03\x04")  # torch.save's zip
        assert cli(*base, "-o", str(tmp_path / "c")).exit_code == 0


def test_damaged_model_files_refused_before_launch(cli, model_dir: Path, tmp_path: Path) -> None:
    """Weights cut short and a tokenizer that is not JSON: named before launch, not in every
    rank's traceback while loading."""
    base = ["train", "--model", str(model_dir), "--data", "org/chats", "--nproc", "1", "--dry-run"]
    (model_dir / "model.safetensors").write_bytes(b"\x8fgarbage")
    with _gpus([]):
        r = cli(*base, "-o", str(tmp_path / "a"))
        assert r.exit_code == 1
        assert r.stderr.startswith(
            f"error: --model {model_dir}: model.safetensors is not a safetensors file"
        )
        assert r.stderr.splitlines()[1].startswith("hint: the file is damaged: copy it again")
        assert len(r.stderr.splitlines()) == 2 and not (tmp_path / "a").exists()
        assert cli(*base, "-o", str(tmp_path / "b"), "--init", "random").exit_code == 0
        (model_dir / "tokenizer.json").write_text("{")
        r = cli(*base, "-o", str(tmp_path / "c"), "--init", "random")
    assert r.exit_code == 1
    assert r.stderr.startswith(f"error: --model {model_dir}: tokenizer.json is not valid JSON")


def test_folder_named_like_a_builtin_is_estimated_from_its_config(
    cli, model_dir: Path, tmp_path: Path, no_launch, monkeypatch: pytest.MonkeyPatch
) -> None:
    """./Llama-3.2-1B is the folder the worker loads: its estimate and buckets are the folder's
    (a 1B's would be about 30 GiB and 5e8 buckets), as in dojo estimate and dojo config."""
    model_dir.rename(tmp_path / "Llama-3.2-1B")
    monkeypatch.chdir(tmp_path)
    for i, ref in enumerate(("./Llama-3.2-1B", "Llama-3.2-1B")):
        with _gpus(H200):
            r = cli("train", "--model", ref, "--data", "org/chats", "--gpus", "0",
                    "-o", str(tmp_path / f"o{i}"), "--dry-run")  # fmt: skip
        assert r.exit_code == 0, r.stderr
        run, ds = _dry(tmp_path / f"o{i}")
        assert run["estimate"]["device_gib"] < 5, ref
        assert ds["zero_optimization"]["reduce_bucket_size"] < 1e6, ref


def test_dry_run_cpu_processes(cli, model_dir: Path, tmp_path: Path, no_launch) -> None:
    with _gpus([]):
        r = cli(
            "train", "--model", str(model_dir), "--data", "org/chats", "--nproc", "2",
            "--output-dir", str(tmp_path / "o"), "--dry-run",
        )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert first.startswith("DS_ACCELERATOR=cpu LOCAL_SIZE=2 ")
    assert "--include localhost:0,1" in first
    assert _dry(tmp_path / "o")[0]["kernels"]["precision"] == "fp32"


def test_config_file_and_flag_precedence(cli, model_dir: Path, tmp_path: Path, no_launch) -> None:
    run = tmp_path / "run.yaml"
    run.write_text(f"model: {model_dir}\ndata: org/chats\nzero_stage: 3\nlr: 3e-4\nseq_len: 256\n")
    with _gpus(H200):
        r = cli("train", "-c", str(run), "--zero", "1", "-o", str(tmp_path / "o"), "--dry-run")
    assert r.exit_code == 0, r.stderr
    train = _dry(tmp_path / "o")[0]
    assert (train["zero"]["stage"], train["loop"]["lr"], train["data"]["seq_len"]) == (1, 3e-4, 256)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpus", "0,5"], "error: --gpus '0,5': GPU 5 does not exist"),
        (["--gpus", "0,0"], "error: --gpus '0,0': GPU 0 is listed twice"),
        (["--model", "./does-not-exist"], "error: --model ./does-not-exist: no such folder"),
        (
            ["--model", "7b"],
            "error: --model 7b (llama-2-7b): a built-in model shape without "
            "weights, for dojo estimate and dojo config; dojo train needs a model folder or a Hub id",
        ),
        (["--zero", "5"], "error: --zero '5': choose one of none, 0, 1, 2, 3"),
        (["--method", "qlora", "--nproc", "1"], "error: --method qlora needs an NVIDIA GPU"),
        (["--offload-param", "cpu"], "error: --offload-param cpu needs --zero 3"),
        (["--resume"], "error: --resume: no complete checkpoint in --output-dir"),
        (["--template", "chatmll"], "error: --template 'chatmll' is not a bundled template"),
        (["--seq-len", "0"], "error: --seq-len '0': out of range: from 8 to 1,048,576"),
        (["--lora-r", "8"], "error: --lora-r 8 applies to --method lora or qlora only"),
        (["--zero", "2", "--z3-leaf", "Foo"], "error: --z3-leaf Foo applies to ZeRO-3 only"),
        (["--zero", "3", "--z3-leaf", "Foo"], "error: --z3-leaf Foo: a llama model has no class"),
        (["--method", "lora", "--lora-targets", "nope"], "error: --lora-targets nope: matches no"),
        (
            ["--master-addr", "10.0.0.1"],
            "error: --master-addr 10.0.0.1 applies to a run on several",
        ),
    ],
)
def test_bad_input_one_line_nothing_launched(
    cli, model_dir: Path, tmp_path: Path, no_launch, args: list[str], message: str
) -> None:
    out = tmp_path / "out"
    base = ["train", "--model", str(model_dir), "--data", "org/chats", "-o", str(out)]
    if "--model" in args:
        base = ["train", "--data", "org/chats", "-o", str(out)]
    with _gpus(H200 if "--nproc" not in args else []):
        r = cli(*base, *args)
    assert r.exit_code == 1, r.stderr
    lines = r.stderr.splitlines()
    assert lines[0].startswith(message), r.stderr
    assert len(lines) == 2 and lines[1].startswith("hint: ")
    assert "Traceback" not in r.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        pytest.param("", lambda t: [
            f"error: --template {t}: marks no assistant tokens for training (its rendering of a "
            "sample conversation holds none of the 2 assistant replies)",
            "hint: dojo trains the assistant replies it finds in the rendering: use a template "
            "that writes each message's content, e.g. a bundled one (dojo chat-template list)",
        ], id="trains-on-nothing"),
        # the parse error names --template and the file as given, as chat-template's does
        pytest.param("a\n{% for %}", lambda t: [
            f"error: --template '{t}': does not parse: line 2: Expected an expression, "
            "got 'end of statement block'",
            "hint: fix the Jinja syntax at that line",
        ], id="does-not-parse"),
    ],
)  # fmt: skip
def test_template_file_refused(
    cli, model_dir: Path, tmp_path: Path, no_launch, source: str, expected: Any
) -> None:
    template = tmp_path / "t.jinja"
    template.write_text(source)
    out = tmp_path / "out"
    with _gpus(H200):
        r = cli("train", "--model", str(model_dir), "--data", "org/chats", "-o", str(out),
                "--template", str(template), "--dry-run")  # fmt: skip
    assert r.exit_code == 1
    assert r.stderr.splitlines() == expected(template)
    assert not out.exists()


def test_model_template_that_trains_on_nothing(cli, model_dir: Path, tmp_path: Path) -> None:
    """The model folder's own template gets the same check as --template."""
    (model_dir / "chat_template.jinja").write_text("")
    with _gpus(H200):
        r = cli("train", "--model", str(model_dir), "--data", "org/chats", "--dry-run",
                "-o", str(tmp_path / "out"))  # fmt: skip
    assert r.exit_code == 1
    assert r.stderr.splitlines()[0] == (
        f"error: --model {model_dir}: its chat template marks no assistant tokens for training "
        "(its rendering of a sample conversation holds none of the 2 assistant replies)"
    )
    assert not (tmp_path / "out").exists()


def test_data_columns_naming_no_column_of_the_data(cli, model_dir: Path, tmp_path: Path) -> None:
    data = tmp_path / "chats.jsonl"
    data.write_text('{"conversation": [{"role": "user", "content": "hi"}, '
                    '{"role": "assistant", "content": "hello"}]}\n')  # fmt: skip
    base = ["train", "--model", str(model_dir), "--data", str(data), "--dry-run"]
    with _gpus(H200):
        ok = cli(*base, "--data-columns", "messages=conversation", "-o", str(tmp_path / "a"))
        bad = cli(*base, "--data-columns", "messages=nosuch", "-o", str(tmp_path / "b"))
    assert ok.exit_code == 0, ok.stderr
    assert bad.exit_code == 1 and "nosuch" in bad.stderr.splitlines()[0]
    assert not (tmp_path / "b").exists()


def test_usage_error_is_exit_2(cli) -> None:
    r = cli("train", "--no-such-flag")
    assert r.exit_code == 2
    assert r.stderr.startswith("error: ")
    r = cli("train", "--micro-batch", "four")
    assert r.exit_code == 1 and r.stderr.startswith("error: --micro-batch 'four'")


def test_does_not_fit_stops_with_table(cli, model_dir: Path, tmp_path: Path, no_launch) -> None:
    small = [Gpu(0, "tiny GPU", 0.01)]
    with _gpus(small):
        r = cli(
            "train", "--model", str(model_dir), "--data", "org/chats", "-o", str(tmp_path / "o")
        )
    assert r.exit_code == 1
    assert "GiB per GPU, the GPUs have 0.0 GiB" in r.stderr
    assert "--skip-fit-check to launch anyway" in r.stderr.splitlines()[-1]


def test_force_does_not_skip_the_fit_check_nor_the_reverse(
    cli, model_dir: Path, tmp_path: Path, no_launch
) -> None:
    """--force starts a run folder over (its checkpoints go); --skip-fit-check launches a run the
    estimate refuses. Asking for one must never do the other."""
    small = [Gpu(0, "tiny GPU", 0.01)]
    out = tmp_path / "o"
    args = ["train", "--model", str(model_dir), "--data", "org/chats", "-o", str(out)]
    with _gpus(small):
        r = cli(*args, "--force")
    assert r.exit_code == 1 and "the GPUs have 0.0 GiB" in r.stderr
    with _gpus(small):
        r = cli(*args, "--skip-fit-check", "--dry-run")
    assert r.exit_code == 0, r.stderr
    assert "launching anyway (--skip-fit-check)" in r.stderr + r.stdout
    (out / "checkpoint-10").mkdir()
    (out / "checkpoint-10" / "trainer_state.json").write_text("{}")
    (out / ".dojo-dry-run").unlink()  # a folder that holds a run
    with _gpus(small):
        r = cli(*args, "--skip-fit-check", "--dry-run")
    assert r.exit_code == 1 and "--resume" in r.stderr
    assert (out / "checkpoint-10").is_dir()


def test_force_says_which_checkpoints_it_removes(cli, model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "o"
    (out / "checkpoint-10").mkdir(parents=True)
    (out / "checkpoint-10" / "trainer_state.json").write_text("{}")
    args = ["train", "--model", str(model_dir), "--data", "org/chats", "-o", str(out), "--force"]
    with _gpus(H200), patch("dojo.train.launch.run", return_value=1) as launched:
        r = cli(*args)
    assert launched.called and r.exit_code == 1  # the stub's failed launch: nothing trained
    assert (
        f"--force: starting over in {out.resolve()}: removed the earlier run's checkpoints "
        "(checkpoint-10)" in r.stderr
    )
    assert not (out / "checkpoint-10").exists()


def test_verdict_is_against_the_gpus_the_run_uses(
    cli, model_dir: Path, tmp_path: Path, no_launch
) -> None:
    mixed = [Gpu(0, "tiny GPU", 0.01), Gpu(1, "NVIDIA H200", 139.8)]
    args = ["train", "--model", str(model_dir), "--data", "org/chats", "-o", str(tmp_path / "o")]
    with _gpus(mixed):
        r = cli(*args, "--gpus", "1", "--dry-run")
    assert r.exit_code == 0, r.stderr
    with _gpus(mixed):
        r = cli(*args, "--gpus", "0")
    assert r.exit_code == 1 and "the GPUs have 0.0 GiB" in r.stderr


def test_gpu_others_fill_is_refused(cli, model_dir: Path, tmp_path: Path, no_launch) -> None:
    """The card fits the run, what other processes left on it does not: one line, no launch."""
    busy = [Gpu(0, "NVIDIA H200", 139.8), Gpu(1, "NVIDIA H200", 139.8, used_gib=139.5)]
    args = ["train", "--model", str(model_dir), "--data", "org/chats", "-o", str(tmp_path / "o")]
    with _gpus(busy):
        r = cli(*args, "--gpus", "1")
    assert r.exit_code == 1
    assert r.stderr.startswith("error: GPU 1 already has 139.5 GiB in use by other processes")
    assert "--skip-fit-check" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists()
    with _gpus(busy):  # GPU 0 is idle: nothing said
        r = cli(*args, "--gpus", "0", "--dry-run")
    assert r.exit_code == 0, r.stderr
    assert "in use by other processes" not in r.stderr + r.stdout
    with _gpus(busy):
        r = cli(*args, "--gpus", "1", "--dry-run", "--skip-fit-check")
    assert r.exit_code == 0, r.stderr
    assert "launching anyway (--skip-fit-check)" in r.stderr + r.stdout


def test_gpu_shared_but_enough_free_is_a_note(
    cli, model_dir: Path, tmp_path: Path, no_launch
) -> None:
    shared = [Gpu(0, "NVIDIA H200", 139.8, used_gib=40.0)]
    with _gpus(shared):
        r = cli("train", "--model", str(model_dir), "--data", "org/chats",
                "-o", str(tmp_path / "o"), "--dry-run")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    assert "note: GPUs shared with other processes: 0 (40.0 GiB)" in r.stderr + r.stdout


def test_host_ram_too_small_for_offload_warns(
    cli, model_dir: Path, tmp_path: Path, no_launch, monkeypatch
) -> None:
    """A warning, not a stop: MemTotal can read low on VMs whose memory grows on demand."""
    import dojo.run.machine  # GPU runs read the host through machine.local

    monkeypatch.setattr(dojo.run.machine, "host_memory_gib", lambda: 0.5)
    args = ["train", "--model", str(model_dir), "--data", "org/chats", "-o", str(tmp_path / "o")]
    with _gpus(H200):
        r = cli(*args, "--zero", "2", "--offload", "cpu", "--dry-run")
    assert r.exit_code == 0, r.stderr
    assert "GiB of host RAM (offloaded states, pinned), this machine reports 0.5 GiB" in r.stderr
    assert "try --zero 3 (pins less host memory)" in r.stderr
    monkeypatch.setattr(dojo.run.machine, "host_memory_gib", lambda: 64.0)
    with _gpus(H200):
        r = cli(*args, "--zero", "2", "--offload", "cpu", "--dry-run")
    assert "host RAM" not in r.stderr


def test_host_memory_is_positive() -> None:
    import dojo.train.preflight

    mem = dojo.train.preflight.host_memory_gib()
    assert mem is not None and 0.1 < mem < 1 << 20


def test_model_without_chat_template(cli, model_dir: Path, tmp_path: Path, no_launch) -> None:
    (model_dir / "chat_template.jinja").unlink()
    with _gpus(H200):
        r = cli(
            "train", "--model", str(model_dir), "--data", "org/chats", "-o", str(tmp_path / "o")
        )
    assert r.exit_code == 1
    assert r.stderr.splitlines()[0] == (
        f"error: --model {model_dir}: the model folder has no chat template"
    )
    with _gpus(H200):
        r = cli(
            "train", "--model", str(model_dir), "--data", "org/chats", "--template", "chatml",
            "-o", str(tmp_path / "o"), "--dry-run",
        )  # fmt: skip
    assert r.exit_code == 0, r.stderr


def test_model_whose_chat_template_does_not_parse(
    cli, model_dir: Path, tmp_path: Path, no_launch
) -> None:
    """A broken template in the model folder is named as broken, not as missing."""
    (model_dir / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }}")
    with _gpus(H200):
        r = cli(
            "train", "--model", str(model_dir), "--data", "org/chats", "-o", str(tmp_path / "o"),
            "--dry-run",
        )  # fmt: skip
    assert r.exit_code == 1
    assert r.stderr.splitlines()[0].startswith(
        f"error: --model {str(model_dir)!r}: its chat_template.jinja does not parse: line 1"
    )
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "is empty"),
        ('{"foo": 1}\n{"messages": []}\n', "no valid row; first problem:"),
    ],
)
def test_data_without_valid_rows(
    cli, model_dir: Path, tmp_path: Path, no_launch, content: str, message: str
) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text(content)
    out = tmp_path / "o"
    with _gpus(H200):
        r = cli("train", "--model", str(model_dir), "--data", str(data), "-o", str(out))
    assert r.exit_code == 1
    first = r.stderr.splitlines()[0]
    assert first.startswith("error: --data") and message in first, r.stderr
    assert not out.exists()


CAP = -1
"""Expected bucket: 5e8 capped at the model's parameter count."""


@pytest.mark.parametrize(
    "args,bucket,compile_",
    [
        (["--method", "full", "--zero", "2"], CAP, False),
        (["--method", "full", "--zero", "2", "--bucket-size", "2e8"], 200_000_000, False),
        (["--method", "full", "--zero", "2", "--grad-ckpt"], CAP, False),
        (["--method", "full", "--zero", "2", "--offload", "cpu"], CAP, False),
        (["--method", "full", "--zero", "3"], CAP, False),  # full ZeRO-3 too
        (["--method", "lora", "--zero", "2"], "LORA", False),  # adapters: one bucket
        (["--method", "full", "--zero", "2", "--compile", "off"], CAP, False),
        (["--method", "lora", "--zero", "3", "--compile", "on"], 64 * 64, True),
        (["--method", "lora", "--zero", "2", "--packing"], "LORA", True),  # compile's auto
        (["--method", "lora", "--zero", "2", "--packing", "--grad-ckpt"], "LORA", False),
        (["--method", "lora", "--zero", "2", "--packing", "--compile", "off"], "LORA", False),
        (["--method", "lora", "--zero", "2", "--packing", "--compile", "on"], "LORA", True),
        (["--method", "lora", "--zero", "3", "--packing"], 64 * 64, False),
    ],
)
def test_default_buckets_and_compile(
    cli, model_dir: Path, tmp_path: Path, no_launch, args, bucket, compile_
) -> None:
    """5e8 buckets for full ZeRO-1/2, one bucket for adapters; regional compile only when asked
    for."""
    base = ["train", "--model", str(model_dir), "--data", "org/chats", "-o", str(tmp_path / "o")]
    with _gpus(H200):
        r = cli(*base, "--gpus", "0", *args, "--dry-run")
    assert r.exit_code == 0, r.stderr
    run, ds = _dry(tmp_path / "o")
    if bucket == CAP:  # 5e8, capped at the model size: the tiny model's whole parameter count
        from dojo.modelspec import resolve_model

        bucket = min(500_000_000, resolve_model(str(model_dir / "config.json")).params)
        assert bucket < 500_000_000
    if bucket == "LORA":  # every adapter grad in one bucket, reduced once: no overlap_comm
        from dojo.modelspec import resolve_model

        bucket = resolve_model(str(model_dir / "config.json")).lora_params(16)
        assert ds["zero_optimization"]["overlap_comm"] is False
    assert ds["zero_optimization"]["reduce_bucket_size"] == bucket
    assert (run["kernels"]["compile"] == "on") is compile_


def test_verdict_refuses_does_not_fit_and_warns_on_tight() -> None:
    import dataclasses

    from dojo.errors import LaunchError
    from dojo.modelspec import resolve_model
    from dojo.train import driver
    from tests.helpers.runs import CUDA, run_of

    spec = resolve_model("1b")
    run = run_of(CUDA, spec)
    est, notes = driver.fit_check(
        run, spec, dataclasses.replace(CUDA, gpu_memory_gib=1e4), anyway=False
    )
    assert est.verdict == "fits" and not notes
    need = est.gpu_total_gib
    tight = dataclasses.replace(CUDA, gpu_memory_gib=need / 0.98)
    _, notes = driver.fit_check(run, spec, tight, anyway=False)
    assert any("within 5% of the GPUs'" in n for n in notes)
    small = dataclasses.replace(CUDA, gpu_memory_gib=need * 0.8)
    with pytest.raises(LaunchError, match="needs about"):
        driver.fit_check(run, spec, small, anyway=False)
    _, notes = driver.fit_check(run, spec, small, anyway=True)
    assert any("launching anyway (--skip-fit-check)" in n for n in notes)


def test_tight_only_by_the_step_remap_says_so() -> None:
    """A checkpointed full ZeRO-2 run with gradient accumulation (where dojo leaves DeepSpeed's
    gradient partition as it is) whose total fits with room, but whose step may map its fp32
    upcast anew (estimate.step_remap) beyond the card: the warning gives that case's size, not
    "within 5%". With one micro-batch a step dojo keeps the partition: no warning."""
    import dataclasses

    from dojo.modelspec import resolve_model
    from dojo.train import driver
    from tests.helpers.runs import CUDA, run_of

    spec = resolve_model("qwen2.5-3b")
    card = dataclasses.replace(CUDA, gpu_memory_gib=79.6, liger=True)  # Liger's fused loss
    kw = {"micro_batch": 4, "seq_len": 2048, "grad_ckpt": True, "packing": True}
    est, notes = driver.fit_check(run_of(card, spec, **kw), spec, card, anyway=False)
    assert est.verdict == "fits" and not notes
    run = run_of(card, spec, grad_accum=2, **kw)
    est, notes = driver.fit_check(run, spec, card, anyway=False)
    assert est.verdict == "tight" and est.gpu_total_gib < 0.95 * 79.6
    (warning,) = notes
    most = (est.gpu_total + est.step_remap) / 2**30
    assert f"up to {most:.1f} GiB" in warning and "more than the GPUs' 79.6 GiB" in warning
    assert "within 5%" not in warning


def test_a_full_run_that_does_not_fit_one_gpu_is_offered_bf16_states() -> None:
    """Full fine-tuning on one GPU: --zero none keeps bf16 weights and AdamW states (8 B a
    parameter, what a plain Trainer script runs) is among the fixes; not for LoRA, nor where
    DeepSpeed shards across GPUs."""
    import dataclasses

    from dojo.errors import LaunchError
    from dojo.modelspec import resolve_model
    from dojo.train import driver
    from tests.helpers.runs import CUDA, run_of

    spec = resolve_model("7b")
    small = dataclasses.replace(CUDA, gpu_memory_gib=79.6)
    with pytest.raises(LaunchError) as e:
        driver.fit_check(run_of(small, spec, method="full"), spec, small, anyway=False)
    assert "--zero none (bf16 weights and AdamW states" in (e.value.hint or "")
    two = dataclasses.replace(small, gpu_memory_gib=20.0)
    for run in (
        run_of(two, spec, method="lora"),
        run_of(two, spec, gpus_per_node=2, method="full"),
    ):
        with pytest.raises(LaunchError) as e:
            driver.fit_check(run, spec, two, anyway=False)
        assert "--zero none" not in (e.value.hint or "")


def test_dry_run_without_deepspeed(cli, model_dir: Path, tmp_path: Path, no_launch) -> None:
    out = tmp_path / "run"
    (out).mkdir()
    (out / "ds_config.json").write_text("{}")  # an earlier plan's: it would tell a wrong story
    (out / ".dojo-dry-run").touch()
    with _gpus(H200):
        r = cli(
            "train", "--model", str(model_dir), "--data", "org/chats", "--gpus", "0,1",
            "-o", str(out), "--zero", "none", "--method", "full", "--dry-run", "--force",
        )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    assert "dojo train: full, no DeepSpeed, GPUs 0,1, bf16" in r.stderr
    assert (
        "note: --zero none trains the bf16 weights themselves, with AdamW states in bf16"
        in r.stderr
    )
    assert "optimizer: TrainingArguments optim=adamw_torch_fused" in r.stderr
    assert f"run files: {out.resolve() / 'train.json'}\n" in r.stderr
    assert "--module dojo.train.worker" in r.stdout  # DeepSpeed's runner starts the ranks
    assert not (out / "ds_config.json").exists()
    rec = json.loads((out / "train.json").read_text())
    assert rec["paths"]["ds_config"] is None and rec["run"]["zero"]["stage"] == "none"
    # Nothing sharded: 8 B a parameter, plus DDP's second copy of the gradients on two GPUs.
    assert rec["estimate"]["device_gib"] > 0


@pytest.mark.parametrize(
    ("quantization", "method", "message", "hint"),
    [
        ({"quant_method": "gptq", "bits": 4}, "full",
         "error: --method full on model: its weights are gptq 4-bit (config.json "
         "quantization_config), and quantized weights cannot be trained in full",
         "hint: train the unquantized model it was made from"),
        ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "full",
         "error: --method full on model: its weights are bitsandbytes 4-bit",
         "hint: use --method qlora (adapters on the 4-bit base)"),
        ({"quant_method": "awq", "bits": 4}, "lora",
         "error: --model model: config.json has a awq 4-bit quantization_config; the estimate models bf16 "
         "weights (NF4 for --method qlora), not awq 4-bit ones",
         "hint: use the unquantized model it was made from"),
        ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "lora",
         "error: --model model: config.json has a bitsandbytes 4-bit quantization_config",
         "hint: use --method qlora: a bitsandbytes 4-bit checkpoint trains as QLoRA"),
    ],
)  # fmt: skip
def test_quantized_checkpoint_refused(
    cli, model_dir: Path, tmp_path: Path, no_launch, quantization: dict[str, Any], method: str,
    message: str, hint: str,
) -> None:  # fmt: skip
    config = json.loads((model_dir / "config.json").read_text())
    (model_dir / "config.json").write_text(
        json.dumps({**config, "quantization_config": quantization})
    )
    out = tmp_path / "out"
    with _gpus(H200):
        r = cli("train", "--model", str(model_dir), "--data", "org/chats", "-o", str(out),
                "--method", method)  # fmt: skip
    assert r.exit_code == 1, r.stderr
    lines = r.stderr.splitlines()
    assert lines[0].startswith(message) and lines[1].startswith(hint), r.stderr
    assert not out.exists()


@pytest.mark.parametrize("model_type", ["bert", "t5", "whisper"])
def test_encoders_refused(cli, model_dir: Path, tmp_path: Path, no_launch, model_type: str) -> None:
    config = json.loads((model_dir / "config.json").read_text())
    (model_dir / "config.json").write_text(json.dumps({**config, "model_type": model_type}))
    with _gpus(H200):
        r = cli(
            "train", "--model", str(model_dir), "--data", "org/chats", "-o", str(tmp_path / "o")
        )
    assert r.exit_code == 1
    assert "dojo estimates and trains decoder-only causal language models" in r.stderr
