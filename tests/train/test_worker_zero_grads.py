"""dojo.train.worker.zero_grads: a DeepSpeed ZeRO-1/2 optimizer that keeps its bf16 gradient
partition between steps trains exactly as one that makes it anew each backward, and the next
backward fills the kept tensor. DeepSpeed on the CPU (gloo), one process or two, a tiny MLP with
reentrant checkpointing, a few steps with and without gradient accumulation."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import json, sys
import torch
import deepspeed
from torch.utils.checkpoint import checkpoint
from dojo.train.worker.zero_grads import keep_partition

stage, accum, overlap, steps = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1", 4
deepspeed.init_distributed(dist_backend="gloo")
rank = torch.distributed.get_rank()


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(32, 32) for _ in range(3))

    def forward(self, x):
        for layer in self.layers:  # reentrant, as dojo's checkpointing
            x = checkpoint(lambda t, m=layer: torch.tanh(m(t)), x, use_reentrant=True)
        return x.pow(2).mean()


def run(keep):
    torch.manual_seed(0)
    net = Net()
    cfg = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": accum,
           "zero_optimization": {"stage": stage, "contiguous_gradients": True,
                                 "overlap_comm": overlap, "reduce_bucket_size": 500},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "torch_adam": True}},
           "gradient_clipping": 1.0, "bf16": {"enabled": True}}
    engine, *_ = deepspeed.initialize(model=net, model_parameters=net.parameters(), config=cfg)
    engaged = keep_partition(engine.optimizer) if keep else False
    g = torch.Generator().manual_seed(1 + rank)  # each rank its own batches
    ptrs, losses = [], []
    for _ in range(steps * accum):
        x = torch.randn(4, 32, generator=g).to(torch.bfloat16).requires_grad_()
        loss = engine(x)
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
        part = engine.optimizer.grads_in_partition
        ptrs.append(None if part is None else part.data_ptr())
    params = [p.detach().float().sum().item() for p in engine.module.parameters()]
    return {"engaged": engaged, "ptrs": ptrs, "losses": losses, "params": params}


out = {"plain": run(False), "kept": run(True)}
if rank == 0:
    print(json.dumps(out), flush=True)
# As dojo's worker does (main.leave_process_group): a gloo group left to interpreter teardown
# aborts now and then ("terminate called without an active exception") after the work is done.
torch.distributed.destroy_process_group()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(tmp_path: Path, stage: int, accum: int, ranks: int) -> dict[str, dict[str, object]]:
    """One rank, or two through torch's launcher (gloo) with overlap_comm on, as a multi-GPU
    ZeRO-2 run has it."""
    script = tmp_path / "keep.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "DS_ACCELERATOR": "cpu",
           "PYTHONPATH": f"{REPO}:{os.environ.get('PYTHONPATH', '')}"}  # fmt: skip
    args = [str(script), str(stage), str(accum), "1" if ranks > 1 else "0"]
    launch = ["-m", "torch.distributed.run", "--nproc_per_node", str(ranks),
              "--master_addr", "127.0.0.1", "--master_port", str(_free_port())]  # fmt: skip
    p = subprocess.run([sys.executable, *launch, *args], env=env, capture_output=True,
                       text=True, timeout=600, cwd=tmp_path)  # fmt: skip
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    result: dict[str, dict[str, object]] = json.loads(p.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.slow
@pytest.mark.parametrize(
    ("stage", "accum", "ranks"), [(1, 1, 1), (2, 1, 1), (1, 2, 1), (2, 2, 1), (2, 1, 2)]
)
def test_a_kept_partition_trains_the_same(
    tmp_path: Path, stage: int, accum: int, ranks: int
) -> None:
    pytest.importorskip("deepspeed")
    out = _run(tmp_path, stage, accum, ranks)
    plain, kept = out["plain"], out["kept"]
    assert kept["engaged"] and not plain["engaged"]
    assert kept["losses"] == plain["losses"] and kept["params"] == plain["params"]
    assert not any(plain["ptrs"])  # DeepSpeed drops it after every backward
    ptrs = [p for p in kept["ptrs"] if p]  # type: ignore[union-attr]
    if stage == 1 or accum == 1:  # where keeps_grad_partition applies: one tensor throughout
        assert len(ptrs) == len(kept["ptrs"]) - (accum - 1) and len(set(ptrs)) == 1  # type: ignore[arg-type]


class _Optimizer:
    """What keep_partition reads of a DeepSpeed ZeRO-1/2 optimizer."""

    def __init__(self, cpu_offload: bool = False, contiguous: bool = True) -> None:
        self.cpu_offload, self.contiguous_gradients = cpu_offload, contiguous
        self.grads_in_partition: object = None
        self.grads_in_partition_offset = 0
        self.boundary = True

    def _release_ipg_buffers(self) -> None:
        self.grads_in_partition, self.grads_in_partition_offset = None, 0

    def is_gradient_accumulation_boundary(self) -> bool:
        return self.boundary

    def step(self) -> str:
        return "stepped"


def test_the_callback_keeps_the_trainers_deepspeed_partition_once() -> None:
    """On train begin the callback finds the optimizer DeepSpeed's engine holds and keeps its
    partition; a run without a DeepSpeed engine, or one whose optimizer makes no partition on
    the GPU (offload, contiguous_gradients off), is left as it is."""
    pytest.importorskip("transformers")
    from types import SimpleNamespace

    from dojo.train.worker.zero_grads import KeepGradPartition

    def trainer(opt: object | None) -> SimpleNamespace:
        wrapped = None if opt is None else SimpleNamespace(engine=SimpleNamespace(optimizer=opt))
        return SimpleNamespace(accelerator=SimpleNamespace(deepspeed_engine_wrapped=wrapped))

    opt = _Optimizer()
    cb = KeepGradPartition(trainer(opt))
    cb.on_train_begin(None, None, None)
    assert cb.kept
    part = object()
    opt.grads_in_partition = part
    opt._release_ipg_buffers()  # the backward's end
    assert opt.grads_in_partition is None
    assert opt.step() == "stepped" and opt.grads_in_partition is part  # handed back after it
    opt.grads_in_partition = None
    opt.boundary = False  # between micro-batches nothing is held
    opt.grads_in_partition = object()
    opt._release_ipg_buffers()
    opt.step()
    assert opt.grads_in_partition is None
    for other in (None, _Optimizer(cpu_offload=True), _Optimizer(contiguous=False)):
        cb = KeepGradPartition(trainer(other))
        cb.on_train_begin(None, None, None)
        assert not cb.kept
