"""The baseline `dojo train` is measured against: a plain HF Trainer + DeepSpeed SFT script written
the way LLaMA-Factory and LLM-Dojo do it (chat template, prompt tokens masked, padding to the
longest sample in the batch with DataCollatorForSeq2Seq, no packing, no Liger, SDPA attention,
bf16, HF "auto" values in the DeepSpeed JSON).

    python -m deepspeed.launcher.runner --include localhost:0 bench/baseline_trainer.py \
        --model DIR --data FILE --out DIR [--zero 0-3|none] [--method full|lora|qlora] \
        [--grad-ckpt] [--offload cpu] [--ds-override '{"stage3_param_persistence_threshold": 1e7}']

--zero none trains without DeepSpeed at all (plain Trainer; the way most QLoRA scripts run).
LoRA/QLoRA follow PEFT's guides: r 16, alpha 32, all-linear; QLoRA is NF4 + double quant with
prepare_model_for_kbit_training, 4-bit storage in bf16 under ZeRO-3 (so ZeRO can shard it).
It writes OUT/baseline_summary.json with real (non-padding) tokens/s after step 1, peak GPU
memory after step 1 and of the whole run, and this process's peak host RSS; with BENCH_STEPLOG
set, bench/steps.py's per-step record too. Imports of torch and transformers wait for main(), so
bench/memory.py and bench/speed.py read its DeepSpeed JSONs (``ds_config``) without them.
"""

import argparse
import json
import os
import resource
import time
from pathlib import Path
from typing import Any

# LLaMA-Factory examples/deepspeed/ds_z{0,2,3}_config.json (auto everywhere, 5e8 buckets at 2).
_COMMON: dict[str, Any] = {
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "zero_allow_untested_optimizer": True,
    "fp16": {"enabled": "auto"},
    "bf16": {"enabled": "auto"},
}
ZERO: dict[int, dict[str, Any]] = {
    0: {"stage": 0},
    1: {"stage": 1},
    2: {
        "stage": 2,
        "allgather_partitions": True,
        "allgather_bucket_size": 5e8,
        "overlap_comm": False,
        "reduce_scatter": True,
        "reduce_bucket_size": 5e8,
        "contiguous_gradients": True,
        "round_robin_gradients": True,
    },
    3: {
        "stage": 3,
        "overlap_comm": False,
        "contiguous_gradients": True,
        "sub_group_size": 1e9,
        "reduce_bucket_size": "auto",
        "stage3_prefetch_bucket_size": "auto",
        "stage3_param_persistence_threshold": "auto",
        "stage3_max_live_parameters": 1e9,
        "stage3_max_reuse_distance": 1e9,
        "stage3_gather_16bit_weights_on_model_save": True,
    },
}


def ds_config(zero: int, offload: str, override: dict[str, Any]) -> dict[str, Any]:
    z = dict(ZERO[zero])
    if offload == "cpu":
        z["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    z.update(override)
    return {**_COMMON, "zero_optimization": z}


def tokenize(tok, messages, seq_len):  # type: ignore[no-untyped-def]
    """Prompt tokens masked with -100, answer tokens trained; truncated to seq_len."""
    prompt = tok.apply_chat_template(messages[:-1], tokenize=False, add_generation_prompt=True)
    full = tok.apply_chat_template(messages, tokenize=False)
    p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
    ids = tok(full, add_special_tokens=False)["input_ids"][:seq_len]
    labels = [-100] * min(len(p_ids), len(ids)) + ids[len(p_ids) :]
    return {"input_ids": ids, "attention_mask": [1] * len(ids), "labels": labels[: len(ids)]}


def clock() -> Any:
    """The callback behind baseline_summary.json: tokens and time at step 1 and at the end."""
    import torch
    from transformers import TrainerCallback

    class Clock(TrainerCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.n = 0
            self.t1 = 0.0
            self.t_end = 0.0
            self.tok1 = 0
            self.tok_end = 0
            self.peak_total = (0.0, 0.0)

        def on_step_end(self, args, state, control, **kw):  # type: ignore[no-untyped-def]
            self.n += 1
            if self.n == 1:
                self.t1, self.tok1 = time.perf_counter(), state.num_input_tokens_seen
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
                    self.t1 = time.perf_counter()
                    self.peak_total = (
                        torch.cuda.max_memory_allocated(),
                        torch.cuda.max_memory_reserved(),
                    )
                    torch.cuda.reset_peak_memory_stats()

        def on_train_end(self, args, state, control, **kw):  # type: ignore[no-untyped-def]
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            self.t_end = time.perf_counter()
            self.tok_end = state.num_input_tokens_seen

    return Clock()


def load(a: argparse.Namespace, zero3: bool) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    cuda = torch.cuda.is_available()  # CPU: fp32 (tests run the script on a tiny model)
    kw: dict[str, Any] = {
        "dtype": torch.bfloat16 if cuda else torch.float32,
        "attn_implementation": "sdpa",
    }
    if a.method == "qlora":
        from transformers import BitsAndBytesConfig

        kw["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.bfloat16,
            bnb_4bit_quant_storage=torch.bfloat16 if zero3 else torch.uint8,
        )
        if not zero3:
            kw["device_map"] = {"": int(os.environ.get("LOCAL_RANK", "0"))}
    model = AutoModelForCausalLM.from_pretrained(a.model, **kw)
    model.config.use_cache = False
    if a.method == "full":
        return model
    from peft import LoraConfig, get_peft_model

    if a.method == "qlora":
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=a.grad_ckpt)
    cfg = LoraConfig(r=16, lora_alpha=32, lora_dropout=a.lora_dropout, target_modules="all-linear")
    return get_peft_model(model, cfg)


def main() -> None:
    import torch
    from steps import leave_process_group, steplog
    from transformers import AutoTokenizer, DataCollatorForSeq2Seq, Trainer, TrainingArguments

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--max-steps", type=int, default=30)
    ap.add_argument("--grad-ckpt", action="store_true")
    ap.add_argument("--zero", default="2", choices=["none", "0", "1", "2", "3"])
    ap.add_argument("--method", default="full", choices=["full", "lora", "qlora"])
    ap.add_argument("--lora-dropout", type=float, default=0.05)
    ap.add_argument("--offload", default="none", choices=["none", "cpu"])
    ap.add_argument("--ds-override", default="{}", help="JSON merged into zero_optimization")
    ap.add_argument("--local_rank", type=int, default=0)
    a = ap.parse_args()
    zero = None if a.zero == "none" else int(a.zero)
    ds = ds_config(zero, a.offload, json.loads(a.ds_override)) if zero is not None else None
    tok = AutoTokenizer.from_pretrained(a.model)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    rows = [json.loads(line) for line in Path(a.data).read_text().splitlines() if line.strip()]
    ds_rows = [tokenize(tok, r["messages"], a.seq_len) for r in rows]
    args = TrainingArguments(  # before the model: with ZeRO-3 this arms zero.Init
        output_dir=a.out,
        per_device_train_batch_size=a.micro_batch,
        max_steps=a.max_steps,
        learning_rate=2e-5 if a.method == "full" else 2e-4,
        bf16=torch.cuda.is_available(),
        logging_steps=10,
        save_strategy="no",
        report_to=[],
        deepspeed=ds,
        gradient_checkpointing=a.grad_ckpt,
        gradient_checkpointing_kwargs={"use_reentrant": False} if a.grad_ckpt else None,
        include_num_input_tokens_seen="non_padding",
        dataloader_num_workers=2,
        seed=42,
    )
    model = load(a, zero == 3)
    timer = clock()
    log = steplog()
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=ds_rows,
        data_collator=DataCollatorForSeq2Seq(tok, padding=True, label_pad_token_id=-100),
        callbacks=[timer] + ([log] if log is not None else []),
    )
    trainer.train()
    secs = max(timer.t_end - timer.t1, 1e-9)
    gib = 2**30
    cuda = torch.cuda.is_available()
    alloc = torch.cuda.max_memory_allocated() if cuda else 0
    reserved = torch.cuda.max_memory_reserved() if cuda else 0
    out = {
        "tokens_per_s_after_step1": (timer.tok_end - timer.tok1) / secs,
        "peak_allocated_gib_after_step1": alloc / gib,
        "peak_reserved_gib_after_step1": reserved / gib,
        "peak_allocated_gib": max(timer.peak_total[0], alloc) / gib,
        "peak_gpu_gib": max(timer.peak_total[1], reserved) / gib,
        "host_rss_peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "train_seconds_after_step1": secs,
        "seconds_per_step_after_step1": secs / max(timer.n - 1, 1),
        "steps": trainer.state.global_step,
        "ds_config": ds,
    }
    if args.process_index == 0:
        Path(a.out, "baseline_summary.json").write_text(json.dumps(out, indent=1))
    leave_process_group()


if __name__ == "__main__":
    main()
