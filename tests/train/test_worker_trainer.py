"""DojoTrainer (dojo.train.worker.trainer): tokens counted on the host, summed where read; the
DeepSpeed gradient norm left on the device.

One process on the CPU, a tiny Llama, no DeepSpeed: the count against HF's own "non_padding"
count on the same batches, the steps where it is summed, and the collators' counts. (That the
GPU waits are gone is measured on the H200: bench/throughput.py's syncdebug variants.)
"""

from pathlib import Path
from typing import Any

import pytest

from dojo.train.worker.packing import TOKENS, PackedCollator, PadCollator, pack
from tests.helpers.examples import random_examples, tiny_llama

pytestmark = pytest.mark.slow
LENGTHS = (7, 12, 5, 9, 3, 11, 4, 8, 6, 10, 2, 13)


class Seen:
    """A callback that records num_input_tokens_seen where the Trainer logs and at step ends."""

    def __new__(cls) -> Any:
        from transformers import TrainerCallback

        class _Seen(TrainerCallback):
            def __init__(self) -> None:
                self.logged: dict[int, int] = {}
                self.step_end: dict[int, int] = {}

            def on_log(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                self.logged[state.global_step] = state.num_input_tokens_seen

            def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                self.step_end[state.global_step] = state.num_input_tokens_seen

        return _Seen()


def train(
    tmp: Path, collator: Any, dojo: bool, steps: int = 5, data: Any = None
) -> tuple[Any, Any]:
    from transformers import Trainer, TrainingArguments

    from dojo.train.worker.trainer import DojoTrainer

    args = TrainingArguments(
        output_dir=str(tmp), per_device_train_batch_size=2, max_steps=steps, logging_steps=2,
        learning_rate=1e-3, report_to="none", save_strategy="no", use_cpu=True, disable_tqdm=True,
        remove_unused_columns=False, dataloader_num_workers=0, seed=0, data_seed=0,
        include_num_input_tokens_seen="no" if dojo else "non_padding",
    )  # fmt: skip
    seen = Seen()
    cls = DojoTrainer if dojo else Trainer
    data = data if data is not None else random_examples(LENGTHS)
    if dojo is False:  # HF's Trainer would hand the count key to the model
        inner = collator
        collator = lambda b: {k: v for k, v in inner(b).items() if k != TOKENS}  # noqa: E731
    trainer = cls(
        model=tiny_llama("sdpa").train(), args=args, train_dataset=data, data_collator=collator,
        callbacks=[seen],
    )  # fmt: skip
    trainer.train()
    return trainer, seen


def test_count_equals_hf_non_padding_and_is_summed_where_read(tmp_path: Path) -> None:
    mine, seen = train(tmp_path / "dojo", PadCollator(pad_id=0), dojo=True)
    hf, hf_seen = train(tmp_path / "hf", PadCollator(pad_id=0), dojo=False)
    # Same batches (same seeds): the host count is HF's attention-mask count, step for step
    # wherever it is read (logging steps 2 and 4, the first step, the last).
    assert mine.state.num_input_tokens_seen == hf.state.num_input_tokens_seen > 0
    assert seen.logged == hf_seen.logged and set(seen.logged) >= {2, 4}
    for step in (1, 2, 4, 5):
        assert seen.step_end[step] == hf_seen.step_end[step]
    # Between reads it is not summed (that would be a wait per step on a GPU).
    assert seen.step_end[3] == seen.step_end[2] < hf_seen.step_end[3]
    assert mine._tokens_unsummed == 0


def test_packed_rows_count_every_real_token(tmp_path: Path) -> None:
    """A packed row has no padding: every token counts, an eos equal to the pad id too (HF's
    "non_padding" count without a mask skipped those)."""
    rows = pack(random_examples(LENGTHS), 24)
    real = sum(LENGTHS)
    epoch = -(-len(rows) // 2)  # steps of 2 rows: every row once
    trainer, _ = train(tmp_path, PackedCollator(pad_id=0), dojo=True, steps=epoch, data=rows)
    assert trainer.state.num_input_tokens_seen == real
    batch = PackedCollator(pad_id=5)([{**r, "input_ids": [5] * len(r["input_ids"])} for r in rows])
    assert batch[TOKENS] == real  # every token is the pad id, and still counts


def test_collators_count_real_tokens() -> None:
    ex = [{"input_ids": [5, 6, 7], "labels": [5, 6, 7]}, {"input_ids": [8], "labels": [8]}]
    assert PadCollator(pad_id=0)(ex)[TOKENS] == 4
    assert PadCollator(pad_id=0, pad_to_multiple_of=8)(ex)[TOKENS] == 4
    rows = [pack(ex[:1], 8)[0], pack(ex[1:], 8)[0]]
    assert PackedCollator(pad_id=0, flatten=False)(rows)[TOKENS] == 4  # padded to 3: 2 pads
    assert PackedCollator(pad_id=0)(rows)[TOKENS] == 4
    assert PackedCollator(pad_id=0, varlen=True)(rows)[TOKENS] == 4


def test_a_batch_without_the_count_is_counted_like_hf() -> None:
    import torch

    from dojo.train.worker.trainer import _pop_tokens

    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert _pop_tokens({"input_ids": torch.zeros(2, 3), "attention_mask": mask}) == 3
    assert _pop_tokens({"input_ids": torch.zeros(2, 3)}) == 6
    batch = {"input_ids": torch.zeros(2, 3), TOKENS: 5}
    assert _pop_tokens(batch) == 5 and TOKENS not in batch


def test_deepspeed_grad_norm_stays_on_the_device(tmp_path: Path) -> None:
    """Under DeepSpeed the norm is the engine's tensor itself, not accelerate's .item() of it
    (the log reads it at logging steps); without DeepSpeed the Trainer's own path."""
    from types import SimpleNamespace

    import torch

    trainer, _ = train(tmp_path, PadCollator(pad_id=0), dojo=True, steps=1)
    assert trainer._engine() is None  # no DeepSpeed: HF's own clip and read
    norm = torch.tensor(3.5)
    engine = SimpleNamespace(get_global_grad_norm=lambda: norm)
    trainer.accelerator.deepspeed_engine_wrapped = SimpleNamespace(engine=engine)
    trainer.is_deepspeed_enabled = True
    assert trainer._clip_grad_norm(trainer.model) is norm
    assert trainer._get_grad_norm(trainer.model, norm) is norm
    assert trainer._get_grad_norm(trainer.model) is norm  # --max-grad-norm 0: no clip call


def _sum_on_rank(rank: int, port: int, out: Any) -> None:
    import os
    from types import SimpleNamespace

    import torch.distributed as dist

    from dojo.train.worker.trainer import DojoTrainer

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    me = SimpleNamespace(
        _tokens_unsummed=10 + rank, state=SimpleNamespace(num_input_tokens_seen=100),
        args=SimpleNamespace(device="cpu"),
    )  # fmt: skip
    DojoTrainer.sum_tokens(me)
    first = me.state.num_input_tokens_seen
    me._tokens_unsummed = 5 * rank
    DojoTrainer.sum_tokens(me)
    out.put((rank, first, me.state.num_input_tokens_seen, me._tokens_unsummed))
    dist.destroy_process_group()


def test_ranks_counts_are_summed_on_every_rank() -> None:
    """Two gloo ranks: each adds the sum of both ranks' tokens since the last sum."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_sum_on_rank, args=(r, port, out)) for r in (0, 1)]
    for p in procs:
        p.start()
    got = sorted(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    assert got == [(0, 121, 126, 0), (1, 121, 126, 0)]
