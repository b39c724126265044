"""When ZeRO-1/2 with optimizer offload take each gradient's fp64 norm copy, on the CPU.

DeepSpeed's engine (one CPU process, gloo) on a tiny Llama whose embedding is its largest
tensor, bf16, full fine-tuning, ``offload_optimizer: cpu``, gradient checkpointing off, a
4096-value reduce bucket (the 16k-value embedding is larger than it, a layer's tensors are not):
a TorchDispatchMode tracks every live op output (bench/eager_backward_cpu.py's ``LiveBytes``)
from the forward through ``engine.backward`` and notes each float64 tensor made, its size and
what was live beside it. The estimate's phase (dojo/estimate/model.py ``_offload_norm_phase``)
says: 8 B x the largest gradient piece (stage_1_and_2.py set_norm_for_param_grad_in_gpu), made
in the backward's hooks at ZeRO-2; a tied embedding's after the activations are freed (the
backward's last gradient), an untied head's beside them (its first); at ZeRO-1 without
overlap_comm after the backward.

    .venv/bin/python bench/offload_norm_cpu.py      (about a minute on 2 cores)

Each line: the run, the largest fp64 copy (values, = the embedding's 16,384), the forward's
tensors still live when it was made, and where in ``engine.backward``'s ops it came (0 = its first
op, 1 = its last; at ZeRO-1 the reduction after autograd's backward is most of them). Result
(DeepSpeed 0.19.8, transformers 5.x):

    ZeRO-2 tied: 16,384 values (131,072 B); forward's tensors live then 4 of 1,235,984 B; at 0.98
    ZeRO-2 untied: 16,384 values; 676,868 of 1,235,984 B live; at 0.06
    ZeRO-1 tied: 16,384 values; 7,172 of 1,235,984 B live; at 0.37
    ZeRO-1 untied: 16,384 values; 38,916 of 1,235,984 B live; at 0.36

The copy is 8 B x the embedding in every case; at ZeRO-2 a tied embedding's comes at the
backward's end with the forward's tensors freed and an untied head's at its start beside them;
at ZeRO-1 both after the backward.
"""

import os
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eager_backward_cpu import LiveBytes, param_ptrs  # noqa: E402

VOCAB, HIDDEN = 512, 32  # embedding 16,384 values; a layer's largest linear 32 x 64


class Fp64Copies(LiveBytes):
    """LiveBytes that notes each float64 op output: (op index, values, live activation bytes)."""

    def __init__(self, ignore: set[int]) -> None:
        super().__init__(ignore)
        self.ops = 0
        self.copies: list[tuple[int, int, int]] = []
        self.fwd_keys: set[tuple[int, int]] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        out = super().__torch_dispatch__(func, types, args, kwargs)
        self.ops += 1
        if isinstance(out, torch.Tensor) and out.dtype == torch.float64 and out.numel() > 1:
            fwd_live = sum(self.meta[k][4] for k in self.fwd_keys if k in self.meta)
            self.copies.append((self.ops, out.numel(), fwd_live))
        return out


def run(stage: int, tied: bool) -> str:
    import deepspeed
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB,
                      tie_word_embeddings=tied)  # fmt: skip
    model = LlamaForCausalLM(cfg)
    ds: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
        "bf16": {"enabled": True},
        "zero_optimization": {
            "stage": stage, "contiguous_gradients": True, "overlap_comm": False,
            "reduce_bucket_size": 4096, "offload_optimizer": {"device": "cpu"},
        },
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "torch_adam": True}},
    }  # fmt: skip
    engine, _, _, _ = deepspeed.initialize(
        model=model, model_parameters=model.parameters(), config=ds
    )
    ids = torch.randint(0, VOCAB, (1, 256))
    with Fp64Copies(param_ptrs(engine.module)) as m:
        loss = engine(input_ids=ids, labels=ids).loss
        m.fwd_keys = set(m.meta)  # what the forward made and still holds: activations, loss
        fwd_bytes = sum(v[4] for v in m.meta.values())
        start = m.ops
        engine.backward(loss)
        end = m.ops
    _, values, live = max(m.copies, key=lambda c: c[1])
    at = next(op for op, n, _ in m.copies if n == values)
    where = (at - start) / max(1, end - start)
    return (f"ZeRO-{stage} {'tied' if tied else 'untied'}: largest fp64 copy {values:,} values "
            f"({8 * values:,} B); forward's tensors live then {live:,} of {fwd_bytes:,} B; "
            f"at {where:.2f} of the backward")  # fmt: skip


def main() -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29534", RANK="0", WORLD_SIZE="1",
                      LOCAL_RANK="0")  # fmt: skip
    for stage in (2, 1):
        for tied in (True, False):
            print(run(stage, tied), flush=True)


if __name__ == "__main__":
    main()
