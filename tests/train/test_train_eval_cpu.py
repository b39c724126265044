"""Eval, early stopping, the best checkpoint, schedules, DoRA and the output that serves, through
the real DeepSpeed launcher on CPU processes with the bundled tiny model (slow)."""

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.train import dojo_train, summary

pytestmark = pytest.mark.slow
CHAT = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there"}]


def _ok(r: Any) -> None:
    assert r.returncode == 0, r.stderr[-4000:]


def test_eval_best_checkpoint_cosine_and_template(tmp_path: Path) -> None:
    """Full fine-tuning, 2 ranks: eval every 2 steps on a seeded 20% split, best checkpoint kept,
    cosine after 10% warmup, and --template llama-3-instruct saved with its tokens."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dojo.chat.template import render

    out = tmp_path / "run"
    r = dojo_train(
        out, "--max-steps", "12", "--lr", "2e-3", "--template", "llama-3-instruct",
        "--eval-split", "0.2", "--eval-steps", "2", "--save-steps", "4", "--keep-best", "on",
        "--lr-scheduler", "cosine", "--warmup-ratio", "0.1", "--weight-decay", "0.01",
        "--neftune-alpha", "5",
    )  # fmt: skip
    _ok(r)
    assert "eval data: 80 examples from 80 rows" in r.stderr  # 20% of the 400 demo rows
    s = summary(out)
    assert s["evals"] == 6 and s["eval_loss_last"] < s["eval_loss_first"]
    assert s["eval_loss_best"] == min(
        s["eval_loss_first"], s["eval_loss_last"], s["eval_loss_best"]
    )
    assert s["best_checkpoint"].endswith(f"checkpoint-{s['eval_best_step']}") and s["kept_best"]
    assert s["data"]["eval"]["used"] == 80
    # Cosine after ceil(0.1 * 12) = 2 warmup steps, as transformers computes it.
    state = json.loads((out / "checkpoint-12" / "trainer_state.json").read_text())
    lrs = {e["step"]: e["learning_rate"] for e in state["log_history"] if "learning_rate" in e}
    for step, lr in lrs.items():
        want = (
            2e-3 * (step - 1) / 2
            if step - 1 < 2
            else 2e-3 * 0.5 * (1 + math.cos(math.pi * (step - 1 - 2) / 10))
        )
        assert lr == pytest.approx(want, rel=1e-4, abs=1e-9), (step, lr, want)
    # The saved tokenizer renders what training rendered; its control tokens are single ids.
    tok = AutoTokenizer.from_pretrained(out)
    assert tok.apply_chat_template(CHAT, tokenize=False) == render("llama-3-instruct", CHAT)
    eot = tok.convert_tokens_to_ids("<|eot_id|>")
    gen = json.loads((out / "generation_config.json").read_text())
    assert gen["eos_token_id"] == [eot, 4]  # end of turn, then the tiny tokenizer's <|im_end|>
    model = AutoModelForCausalLM.from_pretrained(out)
    assert (
        model.get_input_embeddings().weight.shape[0] >= len(tok)
        and model.config.eos_token_id == eot
    )
    ids = tok.apply_chat_template(
        CHAT[:1], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    new = model.generate(**ids, max_new_tokens=4, do_sample=False)
    assert new.shape[1] > ids["input_ids"].shape[1]


def test_early_stopping_keeps_the_best_dora_adapter(tmp_path: Path) -> None:
    """LoRA + DoRA + rsLoRA at a constant, too high LR: the eval loss stops falling, training
    stops after one eval without improvement, and the saved adapter is the best checkpoint's."""
    import numpy as np
    from safetensors.numpy import load_file

    out = tmp_path / "run"
    r = dojo_train(
        out, "--method", "lora", "--dora", "--rslora", "--max-steps", "40", "--lr", "0.5",
        "--lr-scheduler", "constant", "--eval-split", "0.1", "--eval-steps", "2",
        "--save-steps", "2", "--early-stopping", "1", nproc=1, timeout=900,
    )  # fmt: skip
    _ok(r)
    assert "DoRA r=16 alpha=32 (rsLoRA scale)" in r.stderr
    s = summary(out)
    assert s["stopped_early"] and s["steps"] < 40 and s["eval_best_step"] < s["steps"]
    best = Path(s["best_checkpoint"])
    assert best.name == f"checkpoint-{s['eval_best_step']}"
    final = load_file(str(out / "adapter_model.safetensors"))
    kept = load_file(str(best / "adapter_model.safetensors"))
    last = load_file(str(out / f"checkpoint-{s['steps']}" / "adapter_model.safetensors"))
    assert any("lora_magnitude_vector" in k for k in final)  # DoRA's magnitudes are saved
    assert all(np.array_equal(final[k], kept[k]) for k in final)
    assert not all(np.array_equal(final[k], last[k]) for k in final)


def test_lora_template_tokens_need_the_embeddings(tmp_path: Path) -> None:
    """New template tokens under LoRA: refused without --modules-to-save; with it the adapter
    (on the resized base) and the merged model both load and carry the template."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dojo.chat.template import render

    base = (
        "--method",
        "lora",
        "--template",
        "llama-3-instruct",
        "--max-steps",
        "3",
        "--lr",
        "2e-3",
    )
    r = dojo_train(tmp_path / "refused", *base, nproc=1)
    assert r.returncode != 0
    assert "error: the chat template's tokens <|begin_of_text|>, <|start_header_id|>" in r.stderr
    assert "hint: pass --modules-to-save embed_tokens,lm_head" in r.stderr
    out = tmp_path / "run"
    r = dojo_train(out, *base, "--modules-to-save", "embed_tokens,lm_head", "--merge", nproc=1)
    _ok(r)
    tok = AutoTokenizer.from_pretrained(out)
    merged_tok = AutoTokenizer.from_pretrained(out / "merged")
    want = render("llama-3-instruct", CHAT)
    assert tok.apply_chat_template(CHAT, tokenize=False) == want
    assert merged_tok.apply_chat_template(CHAT, tokenize=False) == want
    eot = tok.convert_tokens_to_ids("<|eot_id|>")
    assert (
        json.loads((out / "merged" / "generation_config.json").read_text())["eos_token_id"][0]
        == eot
    )
    plain = AutoModelForCausalLM.from_pretrained(out / "init-weights")
    if len(tok) > plain.config.vocab_size:
        plain.resize_token_embeddings(len(tok))
    adapted = PeftModel.from_pretrained(plain, out)
    merged = AutoModelForCausalLM.from_pretrained(out / "merged")
    ids = torch.tensor([[eot, 5, 9, 14, eot]])
    with torch.no_grad():
        assert torch.allclose(
            adapted(input_ids=ids).logits, merged(input_ids=ids).logits, atol=1e-4
        )
