"""Output that serves (dojo.train.vocab, the worker's serving and args), fast: which template tokens must be single tokens, the
tokenizer the run saves, generation_config.json; and the worker's eval split and Trainer args."""

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="needs the train extra"
)

from dojo.chat.template import load_template, render  # noqa: E402
from dojo.errors import DataError, DojoError  # noqa: E402
from dojo.train import vocab  # noqa: E402
from dojo.train.tiny import materialize_tiny_model  # noqa: E402
from tests.helpers.runs import run_of  # noqa: E402

CHAT = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there"}]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return materialize_tiny_model(tmp_path_factory.mktemp("m") / "tiny")


def _tok(folder: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def _run(adapters: bool = False) -> Any:
    return run_of(method="lora" if adapters else "full")


@pytest.mark.parametrize(
    ("name", "markers"),
    [
        ("chatml", ["<|im_start|>", "<|im_end|>"]),
        ("llama-3-instruct", ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]),
        ("gemma-2-it", ["<start_of_turn>", "<end_of_turn>", "<bos>"]),
        ("llama-2-chat", ["<s>", "</s>"]),  # [INST] and <<SYS>> stay text (module docstring)
        ("mistral-7b-instruct-v0.2", ["<s>", "</s>"]),
    ],
)  # fmt: skip
def test_required_markers(name: str, markers: list[str]) -> None:
    assert vocab.required_markers(load_template(name)) == markers


def test_split_markers_with_the_tokenizers_library(tiny_dir: Path) -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tiny_dir / "tokenizer.json"))  # what a torch-free caller has
    llama3 = vocab.required_markers(load_template("llama-3-instruct"))
    assert vocab.split_markers(tok, llama3) == llama3
    assert vocab.split_markers(tok, ["<|im_start|>", "<|im_end|>"]) == []


def test_adapters_refused_without_the_embeddings() -> None:
    with pytest.raises(DojoError) as e:
        vocab.refuse_for_adapters(["<|eot_id|>"], ())
    assert "<|eot_id|>" in e.value.message and "--modules-to-save embed_tokens,lm_head" in (
        e.value.hint or ""
    )
    with pytest.raises(DojoError):
        vocab.refuse_for_adapters(["<|eot_id|>"], ("embed_tokens",))  # head untrained
    vocab.refuse_for_adapters(["<|eot_id|>"], ("embed_tokens", "lm_head"))


def test_saved_tokenizer_renders_like_training(tiny_dir: Path, tmp_path: Path) -> None:
    """--template llama-3-instruct on the ChatML tiny tokenizer: the saved tokenizer's
    apply_chat_template gives the text training rendered, each control token one id."""
    from dojo.train.worker import serving

    tok = _tok(tiny_dir)
    before, eos_before = len(tok), tok.eos_token_id
    tpl = load_template("llama-3-instruct")
    added = serving.prepare_tokenizer(tok, tpl, _run())
    assert added == ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    assert len(tok) == before + 4 and tok.eos_token == "<|eot_id|>"
    tok.save_pretrained(tmp_path)
    again = _tok(tmp_path)
    text = render(tpl, CHAT)
    assert again.apply_chat_template(CHAT, tokenize=False) == text
    ids = again.encode(text, add_special_tokens=False)
    for marker in added:
        assert again.convert_tokens_to_ids(marker) in ids
    assert (tmp_path / "chat_template.jinja").read_text() == tpl.source
    # generation_config.json: end of turn first, then the tokenizer's eos before the run.
    from transformers import AutoConfig, AutoModelForCausalLM

    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(tiny_dir))
    serving.fit_embeddings(model, again, _run(), added)
    assert model.config.eos_token_id == again.convert_tokens_to_ids("<|eot_id|>")
    serving.write_generation_config(model, again, tpl, tmp_path, eos_before)
    gen = json.loads((tmp_path / "generation_config.json").read_text())
    assert gen["eos_token_id"] == [again.convert_tokens_to_ids("<|eot_id|>"), eos_before]
    assert gen["use_cache"] is True


def test_own_template_adds_nothing(tiny_dir: Path) -> None:
    from dojo.train.worker import serving

    tok = _tok(tiny_dir)
    n = len(tok)
    tpl = load_template(tiny_dir, flag="--model")
    assert serving.prepare_tokenizer(tok, tpl, _run(adapters=True)) == [] and len(tok) == n
    assert serving.stop_ids(tok, tpl, tok.eos_token_id) == [tok.convert_tokens_to_ids("<|im_end|>")]


def test_lora_refused_before_loading(tiny_dir: Path) -> None:
    from dojo.train.worker import serving

    with pytest.raises(DojoError, match="<|eot_id|>"):
        serving.prepare_tokenizer(
            _tok(tiny_dir), load_template("llama-3-instruct"), _run(adapters=True)
        )


def test_resize_grows_never_shrinks(tiny_dir: Path) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM

    from dojo.train.worker import serving

    tok = _tok(tiny_dir)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(tiny_dir))
    serving.fit_embeddings(model, tok, _run(), [])  # ~760 tokens < 1024 rows: left as is
    assert model.get_input_embeddings().weight.shape[0] == 1024
    tok.add_special_tokens({"extra_special_tokens": [f"<|x{i}|>" for i in range(400)]})
    serving.fit_embeddings(model, tok, _run(), ["<|x0|>"])
    assert model.get_input_embeddings().weight.shape[0] == len(tok) > 1024


def test_eval_split_is_seeded_and_disjoint() -> None:
    from dojo.train.rows import RowsReport
    from dojo.train.worker.data import split_rows

    rows = RowsReport(rows=[(f"f:{i}", [{"role": "user", "content": str(i)}]) for i in range(40)])
    train, held = split_rows(rows, 0.1, seed=7)
    again, held2 = split_rows(rows, 0.1, seed=7)
    assert held == held2 and len(held) == 4 and len(train.rows) == 36
    assert {s for s, _ in held}.isdisjoint(s for s, _ in train.rows)
    assert split_rows(rows, 0.1, seed=8)[1] != held
    with pytest.raises(DataError, match="none left to train on"):
        split_rows(RowsReport(rows=rows.rows[:1]), 0.5, seed=7)


def test_training_args_spell_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dojo.train.worker.args import build_training_args, eval_callbacks

    # build_training_args sets this (setdefault) for the worker process; here, in pytest's own
    # process, it would leak into every later run's environment and move their TensorBoard logs.
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "tensorboard"))

    (tmp_path / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 0}}))
    run = run_of(
        method="lora", eval_split=0.1, early_stopping=2, save_steps=10, eval_steps=5,
        lr_scheduler="cosine", warmup_ratio=0.1, weight_decay=0.01, max_grad_norm=0.5,
        neftune_alpha=5.0, report_to="none",
    )  # fmt: skip
    job = SimpleNamespace(run=run, run_dir=str(tmp_path), ds_config=str(tmp_path / "ds.json"))
    args = build_training_args(job)
    assert (args.lr_scheduler_type, args.warmup_steps) == ("cosine", 0.1)
    assert (args.weight_decay, args.max_grad_norm, args.neftune_noise_alpha) == (0.01, 0.5, 5.0)
    assert (args.eval_strategy, args.eval_steps, args.metric_for_best_model) == (
        "steps",
        5,
        "eval_loss",
    )
    assert args.load_best_model_at_end and not args.greater_is_better and args.report_to == []
    assert args.logging_steps == 0.01  # auto without --max-steps: 1% of the steps
    assert args.dataloader_num_workers == 0  # CPU: collated in-process
    ckpt = build_training_args(SimpleNamespace(**{**vars(job), "run": run_of(grad_ckpt=True)}))
    kw = (
        getattr(ckpt, "activation_checkpointing_kwargs", None) or ckpt.gradient_checkpointing_kwargs
    )
    assert kw == {"use_reentrant": True}  # the faster path (host-bound steps)
    assert not args.use_liger_kernel and args.liger_kernel_config is None
    loss_only = run.replace(liger="loss")
    largs = build_training_args(SimpleNamespace(**{**vars(job), "run": loss_only}))
    assert largs.use_liger_kernel and largs.liger_kernel_config["fused_linear_cross_entropy"]
    assert not any(
        v for k, v in largs.liger_kernel_config.items() if k != "fused_linear_cross_entropy"
    )
    assert {"rms_norm", "swiglu", "rope", "geglu"} <= set(largs.liger_kernel_config)
    every = run.replace(liger="on")  # liger-kernel's own defaults
    assert (
        build_training_args(SimpleNamespace(**{**vars(job), "run": every})).liger_kernel_config
        is None
    )
    (stop,) = eval_callbacks(run)
    assert stop.early_stopping_patience == 2


def test_liger_keeps_off_fused_experts_that_lora_adapts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The HF Trainer applies Liger after PEFT has wrapped the fused experts: Liger's MoE kernel
    would replace the wrapper's forward (and fail on it), so such a run gets Liger without its
    SwiGLU; other models, named targets and full fine-tuning keep Liger's defaults."""
    from dojo.train.worker.args import build_training_args, spare_fused_experts

    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "tensorboard"))
    (tmp_path / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 0}}))

    def job_of(run: Any) -> SimpleNamespace:
        return SimpleNamespace(run=run, run_dir=str(tmp_path), ds_config=str(tmp_path / "ds.json"))

    job = job_of(run_of(method="lora").replace(liger="on"))
    for model_type, spared in (("qwen3_moe", True), ("mixtral", True), ("llama", False)):
        args = build_training_args(job)
        spare_fused_experts(args, job.run, model_type)
        assert (args.liger_kernel_config == {"swiglu": False}) is spared, model_type
    named = job.run.replace(lora_targets="q_proj,v_proj")
    for run in (named, run_of(method="full").replace(liger="on")):
        args = build_training_args(job_of(run))
        spare_fused_experts(args, run, "qwen3_moe")
        assert args.liger_kernel_config is None
    # a model type the table does not list: the wrappers PEFT put on its 3-D expert weights
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    cfg = Qwen3MoeConfig(hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
                         num_experts=4, num_experts_per_tok=2, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, vocab_size=64)  # fmt: skip
    lora = LoraConfig(r=2, target_modules="all-linear", lora_dropout=0.0)
    wrapped = get_peft_model(Qwen3MoeForCausalLM(cfg), lora)
    args = build_training_args(job)
    spare_fused_experts(args, job.run, "not_in_the_table", wrapped=wrapped)
    assert args.liger_kernel_config == {"swiglu": False}
    loss_only = job.run.replace(liger="loss")  # no layer kernels: nothing to spare
    args = build_training_args(job_of(loss_only))
    spare_fused_experts(args, loss_only, "qwen3_moe")
    assert (
        args.liger_kernel_config["swiglu"] is False
        and args.liger_kernel_config["rms_norm"] is False
    )


def test_progress_plain_lines_have_eta(capsys: pytest.CaptureFixture[str]) -> None:
    from dojo.train.worker.callbacks import Progress

    p = Progress(tty=False)
    state = SimpleNamespace(global_step=0, max_steps=10, num_input_tokens_seen=0)
    p.on_train_begin(None, state, None)
    state.global_step, state.num_input_tokens_seen = 5, 500
    p.on_log(None, state, None, logs={"loss": 1.5, "learning_rate": 1e-4})
    p.on_log(None, state, None, logs={"eval_loss": 1.25})
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("step 5/10  loss 1.5000  lr 1.00e-04  tok/s ") and " eta 0:" in err[0]
    assert err[1] == "step 5/10  eval loss 1.2500"


def test_progress_names_zero3_leaves_only_at_zero3(capsys: pytest.CaptureFixture[str]) -> None:
    """transformers flags MoE blocks as DeepSpeed leaves whatever the stage: the leaves line is
    printed for a ZeRO-3 run only, where they decide how parameters are gathered."""
    import torch

    from dojo.train.worker.callbacks import Progress

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    for m in model:
        m._z3_leaf = True
    state = SimpleNamespace(global_step=0, max_steps=10, num_input_tokens_seen=0)
    for zero3 in (False, True):
        args = SimpleNamespace(hf_deepspeed_config=SimpleNamespace(is_zero3=lambda z=zero3: z))
        Progress(tty=False).on_train_begin(args, state, None, model=model)
        said = "ZeRO-3 leaf modules (each gathered whole): 2 Linear" in capsys.readouterr().err
        assert said == zero3
    Progress(tty=False).on_train_begin(SimpleNamespace(), state, None, model=model)  # no DeepSpeed
    assert "leaf" not in capsys.readouterr().err


def test_progress_rate_and_eta_follow_the_last_window(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slow first window (compile) must not weigh on later lines: step 20's rate and eta are
    those of steps 11-20 alone."""
    from dojo.train.worker import callbacks

    clock = iter([0.0, 100.0, 100.0, 110.0, 110.0])  # begin; log 10 (+eta); log 20 (+eta)
    monkeypatch.setattr(callbacks.time, "perf_counter", lambda: next(clock))
    p = callbacks.Progress(tty=False)
    state = SimpleNamespace(global_step=0, max_steps=30, num_input_tokens_seen=0)
    p.on_train_begin(None, state, None)
    state.global_step, state.num_input_tokens_seen = 10, 10_000
    p.on_log(None, state, None, logs={"loss": 2.0})
    state.global_step, state.num_input_tokens_seen = 20, 20_000
    p.on_log(None, state, None, logs={"loss": 1.0})
    first, second = capsys.readouterr().err.splitlines()
    assert "tok/s 100 " in first and first.endswith("eta 3:20")  # 10 s/step, 20 left
    assert "tok/s 1,000 " in second and second.endswith("eta 0:10")  # 1 s/step, 10 left


def test_last_line_reports_eval() -> None:
    from dojo.train.summary import describe

    s = {"loss_first": 7.0, "loss_last": 5.0, "eval_loss_first": 6.5, "eval_loss_last": 5.6,
         "eval_loss_best": 5.5, "eval_best_step": 12, "kept_best": True, "stopped_early": True}  # fmt: skip
    line = describe(s, Path("runs/x"), 30.0)
    assert "eval loss 6.500 -> 5.600, best 5.500 at step 12 (kept), stopped early" in line
    assert "eval" not in describe({"loss_first": 7.0, "loss_last": 5.0}, Path("runs/x"), 30.0)
