"""dojo.train.worker.zero_grads: a DeepSpeed ZeRO-1/2 optimizer that keeps its bf16 gradient
partition between steps trains exactly as one that makes it anew each backward, and the next
backward fills the kept tensor. One DeepSpeed process on the CPU (gloo), a tiny MLP with
reentrant checkpointing, a few steps with and without gradient accumulation."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

SCRIPT = r"""
import json, sys
import torch
import deepspeed
from torch.utils.checkpoint import checkpoint
from dojo.train.worker.zero_grads import keep_partition

stage, accum, steps = int(sys.argv[1]), int(sys.argv[2]), 4


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
                                 "overlap_comm": False, "reduce_bucket_size": 500},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "torch_adam": True}},
           "gradient_clipping": 1.0, "bf16": {"enabled": True}}
    engine, *_ = deepspeed.initialize(model=net, model_parameters=net.parameters(), config=cfg)
    engaged = keep_partition(engine.optimizer) if keep else False
    g = torch.Generator().manual_seed(1)
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


print(json.dumps({"plain": run(False), "kept": run(True)}))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(tmp_path: Path, stage: int, accum: int) -> dict[str, dict[str, object]]:
    script = tmp_path / "keep.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(_free_port()), "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1",
           "PYTHONPATH": f"{REPO}:{os.environ.get('PYTHONPATH', '')}"}  # fmt: skip
    p = subprocess.run([sys.executable, str(script), str(stage), str(accum)], env=env,
                       capture_output=True, text=True, timeout=600, cwd=tmp_path)  # fmt: skip
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    result: dict[str, dict[str, object]] = json.loads(p.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize(("stage", "accum"), [(1, 1), (2, 1), (1, 2), (2, 2)])
def test_a_kept_partition_trains_the_same(tmp_path: Path, stage: int, accum: int) -> None:
    pytest.importorskip("deepspeed")
    out = _run(tmp_path, stage, accum)
    plain, kept = out["plain"], out["kept"]
    assert kept["engaged"] and not plain["engaged"]
    assert kept["losses"] == plain["losses"] and kept["params"] == plain["params"]
    assert not any(plain["ptrs"])  # DeepSpeed drops it after every backward
    ptrs = [p for p in kept["ptrs"] if p]  # type: ignore[union-attr]
    if stage == 1 or accum == 1:  # where keeps_grad_partition applies: one tensor throughout
        assert len(ptrs) == len(kept["ptrs"]) - (accum - 1) and len(set(ptrs)) == 1  # type: ignore[arg-type]
