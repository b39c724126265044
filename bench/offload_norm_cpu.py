"""When ZeRO-1/2 with optimizer offload take each gradient's fp64 norm copy, on the CPU.

DeepSpeed's engine (one CPU process, gloo) on a tiny Llama whose embedding is its largest
tensor (16,384 values), bf16, full fine-tuning, ``offload_optimizer: cpu``, gradient
checkpointing off, a reduce bucket of 4,096 values (the embedding is larger than it) or 65,536
(it fits): a TorchDispatchMode tracks every live op output (bench/eager_backward_cpu.py's
``LiveBytes``) from the forward through ``engine.backward`` and notes each float64 tensor made,
its size, what of the forward was live beside it, and whether a bf16 block of its own size (the
gradient itself) was. The estimate's phase (dojo/estimate/model.py ``_offload_norm_phase``)
says: 8 B x the largest gradient piece (stage_1_and_2.py set_norm_for_param_grad_in_gpu), made
in the backward's hooks at ZeRO-2, a tied embedding's after the activations are freed (the
backward's last gradient), an untied head's beside them (its first); at ZeRO-1 without
overlap_comm after the backward; the gradient itself beside the copy where it is larger than
the bucket (a smaller one has moved into the bucket).

    .venv/bin/python bench/offload_norm_cpu.py      (under a minute on 2 cores)

Result (DeepSpeed 0.19.8, transformers 5.x; "at": where in ``engine.backward``'s ops, 0 its first,
1 its last; at ZeRO-1 the reduction after autograd's backward is most of them):

    | ZeRO | embedding | bucket | fp64 copy | forward's bytes live (of 1,235,984) | at | own grad beside |
    | 2 | tied | 4,096 | 131,072 B | 4 | 0.98 | yes |
    | 2 | untied | 4,096 | 131,072 B | 676,868 | 0.06 | yes |
    | 1 | tied | 4,096 | 131,072 B | 3,076 | 0.37 | yes |
    | 1 | untied | 4,096 | 131,072 B | 7,172 | 0.36 | yes |
    | 2 | tied | 65,536 | 131,072 B | 4 | 0.98 | no |
    | 1 | tied | 65,536 | 131,072 B | 4 | 0.48 | no |

(The forward's live bytes at ZeRO-1 vary by a few KB from run to run: when the tracker sees a
storage freed depends on the garbage collector.)
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
        self.copies: list[tuple[int, int, int, int]] = []
        self.fwd_keys: set[tuple[int, int]] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        out = super().__torch_dispatch__(func, types, args, kwargs)
        self.ops += 1
        if isinstance(out, torch.Tensor) and out.dtype == torch.float64 and out.numel() > 1:
            fwd_live = sum(self.meta[k][4] for k in self.fwd_keys if k in self.meta)
            # a bf16 block of the copy's own size live beside it: the gradient itself
            own = sum(
                1 for m in self.meta.values() if m[2] == "bfloat16" and m[4] == 2 * out.numel()
            )
            self.copies.append((self.ops, out.numel(), fwd_live, own))
        return out


def run(stage: int, tied: bool, bucket: int) -> str:
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
            "reduce_bucket_size": bucket, "offload_optimizer": {"device": "cpu"},
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
    at, values, live, own = max(m.copies, key=lambda c: (c[1], -c[0]))
    where = (at - start) / max(1, end - start)
    return (f"ZeRO-{stage} {'tied' if tied else 'untied'}, bucket {bucket:,}: largest fp64 copy "
            f"{values:,} values ({8 * values:,} B); forward's tensors live then {live:,} of "
            f"{fwd_bytes:,} B; at {where:.2f} of the backward; a bf16 block of its size beside "
            f"it: {'yes' if own else 'no'}")  # fmt: skip


def main() -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29534", RANK="0", WORLD_SIZE="1",
                      LOCAL_RANK="0")  # fmt: skip
    for stage, tied, bucket in [(2, True, 4096), (2, False, 4096), (1, True, 4096),
                                (1, False, 4096), (2, True, 65536), (1, True, 65536)]:  # fmt: skip
        print(run(stage, tied, bucket), flush=True)


if __name__ == "__main__":
    main()
    from steps import leave_process_group

    leave_process_group()
