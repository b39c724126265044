"""TRL's ORPO and SimPO trainers as TRL's example scripts run them, the reference of the ORPO and
SimPO speed rows (TRL ships no installed script for them; trl/scripts has DPO's and KTO's).

    python -m deepspeed.launcher.runner --include localhost:0 bench/trl_pref.py \
        --objective orpo|simpo --model DIR --data FILE --out DIR --method lora \
        --micro-batch 4 --seq-len 2048 --steps 30 --deepspeed JSON [--grad-ckpt] [--cpu]

What examples/scripts/orpo.py and cpo.py do: the model and tokenizer from the folder, the
dataset as it is (conversational prompt/chosen/rejected: the trainer applies the folder's chat
template and tokenizes), and the trainer with its config and a PEFT config (LoRA r 16, alpha 32,
dropout 0.05, all linear layers: dojo's defaults). SimPO is TRL's CPOTrainer with
loss_type="simpo" and cpo_alpha=0, as TRL's docs give it. The rest are dojo train's settings of
the row, as bench/speed.py's trl_script_args gives TRL's DPO script: batch, max length, learning
rate (dojo's preference defaults, from bench/speed.py), linear schedule, no warm-up, fused AdamW, bf16, SDPA, TRL's
beta, two dataloader workers, and the DeepSpeed JSON dojo train writes for the row. The real
tokens of each batch are counted by bench/hook (BENCH_COUNT_TOKENS), as for TRL's DPO script.
``--cpu``: fp32 and torch's AdamW, for the CPU test of this script.
"""

import argparse
from pathlib import Path
from typing import Any


def config(a: argparse.Namespace) -> Any:
    common: dict[str, Any] = {
        "output_dir": a.out, "per_device_train_batch_size": a.micro_batch,
        "gradient_accumulation_steps": 1, "max_steps": a.steps, "max_length": a.seq_len,
        "learning_rate": a.lr, "lr_scheduler_type": "linear", "warmup_steps": 0,
        "weight_decay": 0.0, "max_grad_norm": 1.0,
        "optim": "adamw_torch" if a.cpu else "adamw_torch_fused", "bf16": not a.cpu,
        "gradient_checkpointing": a.grad_ckpt, "logging_steps": a.logging_steps,
        "save_strategy": "no",
        "report_to": "none", "dataloader_num_workers": 2, "seed": 42, "deepspeed": a.deepspeed,
        "remove_unused_columns": False, "beta": 0.1,
    }  # fmt: skip
    if a.objective == "orpo":
        from trl.experimental.orpo import ORPOConfig

        return ORPOConfig(**common)
    from trl.experimental.cpo import CPOConfig

    return CPOConfig(**common, loss_type="simpo", cpo_alpha=0.0, simpo_gamma=0.5)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--objective", required=True, choices=["orpo", "simpo"])
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--method", default="lora", choices=["full", "lora", "qlora"])
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--lr", type=float, required=True)  # dojo train's (bench/speed.py LR_PREF)
    ap.add_argument("--logging-steps", type=int, default=10)  # every system's (speed.py LOG_STEPS)
    ap.add_argument("--grad-ckpt", action="store_true")
    ap.add_argument("--deepspeed", default=None)
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--local_rank", type=int, default=-1)  # the DeepSpeed launcher's
    return ap


def main() -> None:
    a = parser().parse_args()

    import os

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    from datasets import load_dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig

    args = config(a)  # before the model: the HF config sets up DeepSpeed's ZeRO-3 loading
    quant = None
    if a.method == "qlora":
        quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                   bnb_4bit_use_double_quant=True,
                                   bnb_4bit_compute_dtype=torch.bfloat16)  # fmt: skip
    dtype = torch.float32 if a.cpu else torch.bfloat16
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=dtype, attn_implementation="sdpa",
                                                 quantization_config=quant)  # fmt: skip
    tokenizer = AutoTokenizer.from_pretrained(a.model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    data = load_dataset("json", data_files=str(Path(a.data)), split="train")
    peft = None
    if a.method != "full":
        peft = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules="all-linear",
                          task_type="CAUSAL_LM")  # fmt: skip
    if a.objective == "orpo":
        from trl.experimental.orpo import ORPOTrainer as Trainer
    else:
        from trl.experimental.cpo import CPOTrainer as Trainer
    trainer = Trainer(model=model, args=args, train_dataset=data, processing_class=tokenizer,
                      peft_config=peft)  # fmt: skip
    trainer.train()
    from steps import leave_process_group

    leave_process_group()


if __name__ == "__main__":
    main()
