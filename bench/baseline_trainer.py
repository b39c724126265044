"""The baseline `dojo train` is measured against: a plain HF Trainer + DeepSpeed ZeRO-2 SFT script
written the way LLaMA-Factory and LLM-Dojo do it (chat template, prompt tokens masked, padding to the
longest sample in the batch with DataCollatorForSeq2Seq, no packing, SDPA attention, bf16).

    deepspeed --include localhost:0 bench/baseline_trainer.py --model DIR --data FILE --out DIR

It writes OUT/baseline_summary.json with real (non-padding) tokens/s after step 1 and peak memory.
"""

import argparse
import json
import time
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    DataCollatorForSeq2Seq,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

# LLaMA-Factory examples/deepspeed/ds_z2_config.json (auto everywhere, 5e8 buckets).
DS_Z2 = {
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "zero_allow_untested_optimizer": True,
    "fp16": {"enabled": "auto"},
    "bf16": {"enabled": "auto"},
    "zero_optimization": {
        "stage": 2,
        "allgather_partitions": True,
        "allgather_bucket_size": 5e8,
        "overlap_comm": False,
        "reduce_scatter": True,
        "reduce_bucket_size": 5e8,
        "contiguous_gradients": True,
        "round_robin_gradients": True,
    },
}


def tokenize(tok, messages, seq_len):  # type: ignore[no-untyped-def]
    """Prompt tokens masked with -100, answer tokens trained; truncated to seq_len."""
    prompt = tok.apply_chat_template(messages[:-1], tokenize=False, add_generation_prompt=True)
    full = tok.apply_chat_template(messages, tokenize=False)
    p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
    ids = tok(full, add_special_tokens=False)["input_ids"][:seq_len]
    labels = [-100] * min(len(p_ids), len(ids)) + ids[len(p_ids) :]
    return {"input_ids": ids, "attention_mask": [1] * len(ids), "labels": labels[: len(ids)]}


class Clock(TrainerCallback):  # type: ignore[misc]
    def __init__(self) -> None:
        self.n = 0
        self.real = 0
        self.t1 = 0.0
        self.t_end = 0.0

    def on_step_end(self, args, state, control, **kw):  # type: ignore[no-untyped-def]
        self.n += 1
        if self.n == 1:
            torch.cuda.synchronize()
            self.t1 = time.perf_counter()
            self.tok1 = state.num_input_tokens_seen
            torch.cuda.reset_peak_memory_stats()

    def on_train_end(self, args, state, control, **kw):  # type: ignore[no-untyped-def]
        torch.cuda.synchronize()
        self.t_end = time.perf_counter()
        self.tok_end = state.num_input_tokens_seen


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--max-steps", type=int, default=30)
    ap.add_argument("--grad-ckpt", action="store_true")
    ap.add_argument("--local_rank", type=int, default=0)
    a = ap.parse_args()
    tok = AutoTokenizer.from_pretrained(a.model)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    rows = [json.loads(line) for line in Path(a.data).read_text().splitlines() if line.strip()]
    ds = [tokenize(tok, r["messages"], a.seq_len) for r in rows]
    model = AutoModelForCausalLM.from_pretrained(
        a.model, dtype=torch.bfloat16, attn_implementation="sdpa"
    )
    args = TrainingArguments(
        output_dir=a.out,
        per_device_train_batch_size=a.micro_batch,
        max_steps=a.max_steps,
        learning_rate=2e-5,
        bf16=True,
        logging_steps=10,
        save_strategy="no",
        report_to=[],
        deepspeed=DS_Z2,
        gradient_checkpointing=a.grad_ckpt,
        include_num_input_tokens_seen="non_padding",
        dataloader_num_workers=2,
        seed=42,
    )
    clock = Clock()
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=ds,
        data_collator=DataCollatorForSeq2Seq(tok, padding=True, label_pad_token_id=-100),
        callbacks=[clock],
    )
    trainer.train()
    secs = clock.t_end - clock.t1
    out = {
        "tokens_per_s_after_step1": (clock.tok_end - clock.tok1) / secs,
        "peak_allocated_gib_after_step1": torch.cuda.max_memory_allocated() / 2**30,
        "peak_reserved_gib_after_step1": torch.cuda.max_memory_reserved() / 2**30,
        "steps": trainer.state.global_step,
    }
    if args.process_index == 0:
        Path(a.out, "baseline_summary.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
