"""`dojo chat` and `dojo export` on real runs of the bundled tiny model (CPU, slow).

One LoRA run and one full run per module (`dojo train --nproc 1 --max-steps 2`, ~20 s each),
then: chat answers through the run's template exactly as a hand-written greedy generate does;
export writes a folder transformers loads whose logits equal base + adapter, with the template's
end-of-turn token as eos; the Hub upload is called with the right arguments.
"""

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
IM_END = 4  # <|im_end|>: the tiny tokenizer's eos and ChatML's end of turn (dojo.train.tiny)


def _train(out: Path, method: str) -> Path:
    for mod in ("torch", "transformers", "peft", "deepspeed"):
        pytest.importorskip(mod)
    # A large learning rate so two steps move the adapter far from zero (base != base + adapter).
    cmd = [sys.executable, "-m", "dojo", "train", "--nproc", "1", "--method", method]
    cmd += ["--max-steps", "2", "--lr", "1e-2", "--seq-len", "128", "-o", str(out)]
    env = {k: v for k, v in os.environ.items() if k not in ("DS_ACCELERATOR", "LOCAL_SIZE")}
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    return out


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _train(tmp_path_factory.mktemp("chat") / "lora", "lora")


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _train(tmp_path_factory.mktemp("chat") / "full", "full")


def dojo(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "dojo", *args]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, input=stdin)


def base_plus_adapter(run: Path) -> Any:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(run / "init-weights")
    return PeftModel.from_pretrained(base, run).eval()


def greedy(model: Any, run: Path, messages: list[dict[str, str]], n: int) -> str:
    """What chat must print: HF's own apply_chat_template + greedy generate + decode."""
    import torch
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(run)
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt")
    ids = ids["input_ids"] if not isinstance(ids, torch.Tensor) else ids
    with torch.no_grad():
        gen = model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
            eos_token_id=IM_END, pad_token_id=tok.pad_token_id,
        )  # fmt: skip
    text: str = tok.decode(gen[0, ids.shape[1] :], skip_special_tokens=True)
    return text


def test_chat_prompt_streams_the_runs_answer(lora_run: Path) -> None:
    r = dojo("chat", str(lora_run), "--prompt", "hi", "--max-new-tokens", "5", "--temperature", "0")
    assert r.returncode == 0, r.stderr[-3000:]
    want = greedy(base_plus_adapter(lora_run), lora_run, [{"role": "user", "content": "hi"}], 5)
    assert r.stdout == want + "\n" and r.stdout.strip()  # seeded: the tiny run says something
    assert "Traceback" not in r.stderr


def test_chat_loop_keeps_the_conversation(
    lora_run: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import builtins

    from dojo.train import outputs
    from dojo.train.worker import serve

    said = iter(["hi", "", "more", "/reset", "hi"])

    def typed(prompt: str = "") -> str:
        try:
            return next(said)
        except StopIteration:
            raise EOFError from None

    monkeypatch.setattr(builtins, "input", typed)
    rc = serve.run(
        outputs.inspect(lora_run), prompt=None, system=None, max_new_tokens=4, temperature=0,
        device="cpu", interactive=True,
    )  # fmt: skip
    assert rc == 0
    first, second, third = capsys.readouterr().out.split("\n")[:3]
    model = base_plus_adapter(lora_run)
    assert first == third == greedy(model, lora_run, [{"role": "user", "content": "hi"}], 4)
    turns = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": first},
        {"role": "user", "content": "more"},
    ]
    assert second == greedy(model, lora_run, turns, 4)  # the answer saw the first exchange


def test_chat_full_run_with_system_from_stdin(full_run: Path, cli: Any, monkeypatch: Any) -> None:
    from transformers import AutoModelForCausalLM

    monkeypatch.setattr(sys, "stdin", io.StringIO("What is ZeRO?\n"))
    r = cli("chat", str(full_run), "--system", "Be brief.", "--max-new-tokens", "8",
            "--temperature", "0", "--device", "cpu")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    msgs = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is ZeRO?"},
    ]
    assert (
        r.stdout == greedy(AutoModelForCausalLM.from_pretrained(full_run), full_run, msgs, 8) + "\n"
    )


def test_chat_sampling_runs(lora_run: Path, cli: Any) -> None:
    r = cli("chat", str(lora_run), "-p", "hello", "--max-new-tokens", "4", "--temperature", "1.5")
    assert r.exit_code == 0 and r.stdout.endswith("\n"), r.stderr


def test_export_lora_equals_base_plus_adapter(lora_run: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    r = dojo("export", str(lora_run), "--dtype", "fp32")
    assert r.returncode == 0, r.stderr[-3000:]
    out = lora_run / "export"
    assert r.stdout.strip() == str(out)
    names = {p.name for p in out.iterdir()}
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json"} <= names
    assert not any(n.startswith("adapter") for n in names)  # merged: no PEFT needed to load it
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".export")]  # no temp left
    merged = AutoModelForCausalLM.from_pretrained(out).eval()
    ids = torch.tensor([[1, 3, 50, 99, 7, 4, 3]])
    with torch.no_grad():
        want = base_plus_adapter(lora_run)(input_ids=ids).logits
        got = merged(input_ids=ids).logits
        base = AutoModelForCausalLM.from_pretrained(lora_run / "init-weights")(input_ids=ids).logits
    assert torch.allclose(got, want, atol=1e-5)
    assert not torch.allclose(got, base, atol=1e-3)  # the adapter is in there
    gen = GenerationConfig.from_pretrained(out)
    assert gen.eos_token_id in (IM_END, [IM_END]) and gen.use_cache
    tok = AutoTokenizer.from_pretrained(out)
    chatml = (REPO / "templates" / "chat" / "chatml.jinja").read_text()
    assert tok.chat_template == chatml  # the template the run trained with
    assert tok.convert_tokens_to_ids("<|im_end|>") == IM_END

    # Exists now: refused without --force, nothing touched; --force replaces it.
    before = (out / "model.safetensors").stat().st_mtime_ns
    r = dojo("export", str(lora_run), "--dtype", "fp32")
    assert r.returncode == 1 and "already exists" in r.stderr and "--force" in r.stderr
    assert (out / "model.safetensors").stat().st_mtime_ns == before


def test_export_bf16_full_and_push(
    full_run: Path, tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import huggingface_hub
    import torch
    from huggingface_hub import constants
    from transformers import AutoModelForCausalLM

    calls: list[dict[str, Any]] = []
    # The train tests' HF_HUB_OFFLINE=1 is read once, when huggingface_hub is first imported.
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: "hf_test")
    monkeypatch.setattr(huggingface_hub, "create_repo", lambda *a, **kw: "https://hf.co/me/tiny")
    monkeypatch.setattr(huggingface_hub, "upload_folder", lambda **kw: calls.append(kw))
    dest = tmp_path / "out" / "tiny-chat"
    r = cli("export", str(full_run), "-o", str(dest), "--dtype", "bf16", "--push-to-hub", "me/tiny")
    assert r.exit_code == 0, r.stderr
    assert calls == [
        {
            "repo_id": "me/tiny",
            "folder_path": str(dest),
            "repo_type": "model",
            "commit_message": "dojo export of full",
            "ignore_patterns": [".dojo-export"],
        }
    ]
    assert "pushed: https://hf.co/me/tiny" in r.stderr
    model = AutoModelForCausalLM.from_pretrained(dest)
    assert json.loads((dest / "config.json").read_text())["dtype"] == "bfloat16"
    trained = AutoModelForCausalLM.from_pretrained(full_run)
    for (name, p), q in zip(model.state_dict().items(), trained.state_dict().values(), strict=True):
        assert torch.equal(p, q.to(torch.bfloat16)), name


def test_chat_on_a_checkpoint(lora_run: Path, cli: Any) -> None:
    ckpt = lora_run / "checkpoint-2"
    assert (ckpt / "adapter_config.json").is_file()
    r = cli("chat", str(ckpt), "-p", "hi", "--max-new-tokens", "5", "--temperature", "0")
    assert r.exit_code == 0, r.stderr
    want = greedy(base_plus_adapter(lora_run), lora_run, [{"role": "user", "content": "hi"}], 5)
    assert r.stdout == want + "\n"  # the last checkpoint holds the final adapter


def test_chat_cuda_without_a_gpu_is_refused(lora_run: Path, cli: Any) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    r = cli("chat", str(lora_run), "-p", "hi", "--device", "cuda")
    assert r.exit_code == 1 and r.stdout == ""
    assert "error: --device cuda: no CUDA GPU" in r.stderr and "hint: use --device cpu" in r.stderr


@pytest.mark.gpu
def test_chat_on_the_gpu(lora_run: Path) -> None:
    r = dojo("chat", str(lora_run), "-p", "hi", "--max-new-tokens", "5", "--device", "cuda")
    assert r.returncode == 0 and r.stdout.endswith("\n"), r.stderr[-3000:]


def test_chat_colder_than_float_range_is_greedy(lora_run: Path, cli: Any) -> None:
    """logits / 1e-300 overflow and sampling failed; so cold a temperature answers greedily."""
    r = cli("chat", str(lora_run), "-p", "hi", "--max-new-tokens", "5", "--temperature", "1e-300")
    assert r.exit_code == 0, r.stderr
    want = greedy(base_plus_adapter(lora_run), lora_run, [{"role": "user", "content": "hi"}], 5)
    assert r.stdout == want + "\n"


def _copy(run: Path, dest: Path) -> Path:
    shutil.copytree(run, dest, ignore=shutil.ignore_patterns("checkpoint-*", "export"))
    return dest


@pytest.mark.parametrize("command", ["chat", "export"])
def test_damaged_run_files_are_one_error(
    full_run: Path, lora_run: Path, tmp_path: Path, cli: Any, command: str
) -> None:
    """Damaged files of a real run: the cheap checks name the file (before torch is imported);
    what they cannot see (a tokenizer.json or adapter_config.json of the wrong shape, weights that
    do not fit config.json) is the loader's failure named, never an internal error."""
    args = ["-p", "hi", "--max-new-tokens", "2"] if command == "chat" else []

    def refused(run: Path, needle: str) -> str:
        r = cli(command, str(run), *args, *([] if command == "chat" else ["-o", str(run) + "-x"]))
        assert r.exit_code == 1 and r.stdout == "", r.stderr
        err = [ln for ln in r.stderr.splitlines() if ln.startswith(("error:", "hint:"))]
        assert len(err) == 2 and needle in err[0] and "internal error" not in r.stderr, r.stderr
        assert not Path(str(run) + "-x").exists()
        return err[1]

    bad = _copy(full_run, tmp_path / "weights")
    (bad / "model.safetensors").write_bytes(b"garbage\n")
    hint = refused(bad, f"RUN_DIR {str(bad)!r}: model.safetensors is not a safetensors file")
    assert hint.startswith("hint: the file is damaged")
    bad = _copy(full_run, tmp_path / "cut")
    data = (bad / "model.safetensors").read_bytes()
    (bad / "model.safetensors").write_bytes(data[: len(data) // 2])
    refused(bad, "model.safetensors is cut short")
    bad = _copy(full_run, tmp_path / "tok")
    (bad / "tokenizer.json").write_text("{}")
    refused(bad, f"RUN_DIR {str(bad)!r}: the tokenizer cannot be loaded (KeyError")
    bad = _copy(full_run, tmp_path / "shape")
    cfg = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**cfg, "hidden_size": cfg["hidden_size"] // 2}))
    refused(bad, "the model cannot be loaded (RuntimeError")
    bad = _copy(lora_run, tmp_path / "adapter")
    (bad / "adapter_config.json").write_text("{}")
    refused(bad, "the adapter cannot be loaded (KeyError")


def test_export_force_replaces_only_an_export(full_run: Path, tmp_path: Path, cli: Any) -> None:
    dest = tmp_path / "chat-model"
    assert cli("export", str(full_run), "-o", str(dest)).exit_code == 0
    assert (dest / ".dojo-export").is_file()  # what lets --force replace it later
    before = (dest / "model.safetensors").stat().st_mtime_ns
    r = cli("export", str(full_run), "-o", str(dest), "--force")
    assert r.exit_code == 0, r.stderr
    assert (dest / "model.safetensors").stat().st_mtime_ns != before
    other = _copy(full_run, tmp_path / "other-run")
    (other / "checkpoint-7").mkdir()
    (other / "checkpoint-7" / "trainer_state.json").write_text("{}")
    for victim, why in ((other, "is a `dojo train` run folder"),
                        (other / "checkpoint-7", "is a training checkpoint")):  # fmt: skip
        kept = sorted(p.name for p in victim.iterdir())
        r = cli("export", str(full_run), "-o", str(victim), "--force")
        assert (
            r.exit_code == 1 and why in r.stderr and "only replaces an earlier export" in r.stderr
        )
        assert sorted(p.name for p in victim.iterdir()) == kept


def test_export_write_failure_is_one_error(full_run: Path, tmp_path: Path) -> None:
    from dojo.errors import DojoError
    from dojo.train import outputs
    from dojo.train.worker import export

    (tmp_path / "afile").write_text("")
    with pytest.raises(DojoError, match="cannot write it") as e:
        export.export(
            outputs.inspect(full_run), tmp_path / "afile" / "x", dtype="fp32", force=False
        )
    assert "permissions" in (e.value.hint or "")
