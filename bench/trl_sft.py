"""The peer baseline: TRL's SFTTrainer with its own speed settings, as a TRL user runs it.

    python bench/trl_sft.py --model DIR --data FILE --out DIR [--method full|lora|qlora] \
        [--grad-ckpt] [--deepspeed JSON] [--liger on|off]
    python -m deepspeed.launcher.runner --include localhost:0 bench/trl_sft.py ... --deepspeed ds.json

The settings TRL's docs give for speed: packing with best-fit decreasing (``packing=True,
packing_strategy="bfd"``, which makes batches padding-free: one flattened sequence per batch with
position_ids), Liger's kernels (``use_liger_kernel``; TRL applies Liger's layer kernels and its own
chunked LM-head loss), the fused AdamW (``optim="adamw_torch_fused"``) and the loss on assistant
tokens only (``assistant_only_loss``). LoRA and QLoRA go through ``peft_config`` and
``quantization_config`` (BitsAndBytesConfig, NF4 with double quantization) as TRL's docs show;
r 16, alpha 32, dropout 0.05, all linear layers: dojo's and the plain script's defaults. With
``--deepspeed`` the HF Trainer reads the JSON (bench/speed.py passes the plain script's).

Same model folder, tokenizer, chat template and data as dojo and the plain script: the folder's
ChatML template, with TRL's ``{% generation %}`` markers around the assistant's content and its
end-of-turn token (the tokens dojo trains on; the rendered text is the same). Attention is SDPA:
the GPU machine has no flash-attn package, and transformers' SDPA takes a padding-free batch's
samples apart by their position_ids.

Tokens: a padding-free batch has no padding, so its real tokens are its length; they are counted
on the host into ``state.num_input_tokens_seen`` (TRL's own count is a metric only), which
bench/steps.py's record reads, as it reads dojo's and the plain script's counts. It writes
OUT/trl_summary.json (tokens/s after step 1, peaks, TRL and transformers versions).
"""

import argparse
import json
import os
import resource
import time
from pathlib import Path
from typing import Any

CHATML_TRAINING = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['role'] == 'assistant' %}{% generation %}{{ message['content'] + '<|im_end|>' }}"
    "{% endgeneration %}{{ '\\n' }}{% else %}{{ message['content'] + '<|im_end|>' + '\\n' }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
"""dojo's bundled ChatML (templates/chat/chatml.jinja) with TRL's generation markers: the same
text, and the assistant mask covers its content and <|im_end|>, as dojo's labels do."""


def real_tokens(inputs: dict[str, Any]) -> int:
    """A batch's real tokens: a padding-free batch's length (no device read), else its mask's."""
    if "attention_mask" in inputs:
        return int(inputs["attention_mask"].sum().item())
    if "position_ids" in inputs:
        return int(inputs["position_ids"].shape[-1])
    return int(inputs["input_ids"].numel())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--method", default="full", choices=["full", "lora", "qlora"])
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--max-steps", type=int, default=30)
    ap.add_argument("--grad-ckpt", action="store_true")
    ap.add_argument("--deepspeed", help="DeepSpeed JSON file (or inline JSON); none: no DeepSpeed")
    ap.add_argument("--liger", default="on", choices=["on", "off"], help="off: CPU runs")
    ap.add_argument("--attn", default="sdpa")
    ap.add_argument("--local_rank", type=int, default=0)
    a = ap.parse_args()

    import torch
    import transformers
    import trl
    from datasets import load_dataset
    from steps import leave_process_group, steplog
    from transformers import AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    cuda = torch.cuda.is_available()
    ds_cfg: Any = None
    if a.deepspeed:
        text = a.deepspeed.strip()
        ds_cfg = json.loads(text if text.startswith("{") else Path(text).read_text())
    zero3 = bool(ds_cfg) and ds_cfg.get("zero_optimization", {}).get("stage") == 3
    tok = AutoTokenizer.from_pretrained(a.model)
    tok.chat_template = CHATML_TRAINING
    args = SFTConfig(
        output_dir=a.out,
        per_device_train_batch_size=a.micro_batch,
        max_steps=a.max_steps,
        learning_rate=2e-5 if a.method == "full" else 2e-4,
        bf16=cuda,
        max_length=a.seq_len,
        packing=True,
        packing_strategy="bfd",
        padding_free=True,
        assistant_only_loss=True,
        use_liger_kernel=a.liger == "on",
        optim="adamw_torch_fused" if cuda else "adamw_torch",
        gradient_checkpointing=a.grad_ckpt,  # SFTConfig's default is on
        gradient_checkpointing_kwargs={"use_reentrant": False} if a.grad_ckpt else None,
        model_init_kwargs={
            "dtype": torch.bfloat16 if cuda else torch.float32,
            "attn_implementation": a.attn,
        },  # fmt: skip
        logging_steps=10,
        save_strategy="no",
        report_to=[],
        deepspeed=ds_cfg,
        dataloader_num_workers=2,
        seed=42,
    )
    quant = None
    if a.method == "qlora":
        from transformers import BitsAndBytesConfig

        quant = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.bfloat16,
            bnb_4bit_quant_storage=torch.bfloat16 if zero3 else torch.uint8,
        )
    peft_config = None
    if a.method != "full":
        from peft import LoraConfig

        peft_config = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05,
                                 target_modules="all-linear", task_type="CAUSAL_LM")  # fmt: skip

    class Trainer(SFTTrainer):  # type: ignore[misc]
        """TRL's trainer; the batch's real tokens counted on the host before it trains."""

        def training_step(self, model: Any, inputs: dict[str, Any], *rest: Any, **kw: Any) -> Any:
            self.state.num_input_tokens_seen += real_tokens(inputs)
            return super().training_step(model, inputs, *rest, **kw)

    log = steplog()
    trainer = Trainer(
        model=a.model,
        args=args,
        train_dataset=load_dataset("json", data_files=a.data, split="train"),
        processing_class=tok,
        peft_config=peft_config,
        quantization_config=quant,
        callbacks=[log] if log is not None else None,
    )
    t0 = time.perf_counter()
    trainer.train()
    state = trainer.state
    out = {
        "steps": state.global_step,
        "tokens": state.num_input_tokens_seen,
        "train_seconds": time.perf_counter() - t0,
        "host_rss_peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "trl": trl.__version__,
        "transformers": transformers.__version__,
        "ds_config": ds_cfg,
    }
    if cuda:
        out["peak_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30
        out["peak_reserved_gib"] = torch.cuda.max_memory_reserved() / 2**30
    if int(os.environ.get("RANK", "0")) == 0:
        Path(a.out, "trl_summary.json").write_text(json.dumps(out, indent=1))
    leave_process_group()


if __name__ == "__main__":
    main()
