"""ORPO's and SimPO's loss phase on the CPU, as TRL's trainers run it on a GPU: bytes per logit
from the logits to the hidden states' gradient (Calibration.orpo_bytes_per_logit and
cpo_bytes_per_logit, docs/estimate.md "Preference objectives").

TRL's real ``get_batch_loss_metrics`` runs (ORPOTrainer; CPOTrainer with loss_type="simpo",
cpo_alpha=0, as dojo runs SimPO) on a stand-in model whose forward is the lm_head over fixed
hidden states. On a GPU TRL's ``selective_log_softmax`` takes its Triton kernel
(trl/kernels/logprob_entropy.py), which keeps only the logits for backward and makes a bf16
gradient of them there; the CPU takes a per-row log-softmax loop instead. ``--path gpu`` swaps in
a function with the kernel's allocations (computed in small chunks), ``--path cpu`` keeps TRL's.

The measure is the process's peak resident memory (VmHWM, reset through /proc/self/clear_refs)
above what it held before the forward, with glibc told to mmap every block over 64 KiB, so a
freed tensor leaves the resident set at once. Run:

    MALLOC_MMAP_THRESHOLD_=65536 .venv/bin/python bench/orpo_loss_cpu.py
"""

import argparse
import os
import sys
from types import SimpleNamespace

import torch

CHUNK = 64  # rows of logits per step of the kernel stand-in: 64 x V x 4 B, small beside T x V


class FusedLogProb(torch.autograd.Function):
    """The allocations of TRL's ``_LogProbEntropyFunction`` (fp32 log-probs, log_z and the
    expected logit per token; the logits saved; backward one contiguous gradient of the logits
    in their dtype), computed with torch in chunks."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        b, s, _ = logits.shape
        out = torch.empty((b, s), dtype=torch.float32)
        log_z = torch.empty_like(out)
        for i in range(b):
            for r in range(0, s, CHUNK):
                chunk = logits[i, r : r + CHUNK].float()
                log_z[i, r : r + CHUNK] = torch.logsumexp(chunk, -1)
                picked = chunk.gather(-1, index[i, r : r + CHUNK, None])[:, 0]
                out[i, r : r + CHUNK] = picked - log_z[i, r : r + CHUNK]
        ctx.save_for_backward(logits, index, log_z, torch.empty_like(out))
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        logits, index, log_z, _ = ctx.saved_tensors
        b, s, _ = logits.shape
        out = torch.empty_like(logits, memory_format=torch.contiguous_format)
        for i in range(b):
            for r in range(0, s, CHUNK):
                p = torch.exp(logits[i, r : r + CHUNK].float() - log_z[i, r : r + CHUNK, None])
                g = grad[i, r : r + CHUNK, None]
                d = -p * g
                d.scatter_add_(-1, index[i, r : r + CHUNK, None], g)
                out[i, r : r + CHUNK] = d.to(out.dtype)
        return out, None


def fused_selective_log_softmax(logits: torch.Tensor, index: torch.Tensor, **_: object) -> torch.Tensor:
    return FusedLogProb.apply(logits, index)


def vm_hwm() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


def vm_rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


class HeadOnly(torch.nn.Module):
    """A causal LM whose forward is the (frozen, bf16) head over fixed hidden states."""

    def __init__(self, hidden: torch.Tensor, vocab: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.lm_head = torch.nn.Linear(hidden.shape[-1], vocab, bias=False, dtype=torch.bfloat16)
        self.lm_head.weight.requires_grad_(False)

    def forward(self, input_ids: torch.Tensor, **_: object) -> SimpleNamespace:
        return SimpleNamespace(logits=self.lm_head(self.hidden))


def trainer(objective: str) -> object:
    """A TRL trainer object with only what ``get_batch_loss_metrics`` reads."""
    if objective == "orpo":
        from trl.experimental.orpo import orpo_trainer as mod

        t = object.__new__(mod.ORPOTrainer)
        t.beta = 0.1
    else:
        from trl.experimental.cpo import cpo_trainer as mod

        t = object.__new__(mod.CPOTrainer)
        t.beta, t.loss_type, t.cpo_alpha, t.simpo_gamma, t.label_smoothing = 2.0, "simpo", 0.0, 0.5, 0.0
    t.is_encoder_decoder, t.padding_value, t.aux_loss_enabled, t.label_pad_token_id = False, 0, False, -100
    t.accelerator = SimpleNamespace(device=torch.device("cpu"), gather_for_metrics=lambda x: x)
    return t, mod


def measure(objective: str, path: str, pairs: int, seq: int, vocab: int, hidden: int) -> dict[str, float]:
    t, mod = trainer(objective)
    if path == "gpu":
        mod.selective_log_softmax = fused_selective_log_softmax
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (pairs, seq), generator=g)
    prompt = seq // 4
    labels = ids.clone()
    labels[:, :prompt] = -100
    side = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    batch = {f"{k}_{n}": v.clone() for k in ("chosen", "rejected") for n, v in side.items()}
    h = torch.randn(2 * pairs, seq, hidden, generator=g, dtype=torch.float32).to(torch.bfloat16)
    h.requires_grad_(True)
    model = HeadOnly(h, vocab)
    before = vm_rss()
    reset_peak()
    loss, _ = t.get_batch_loss_metrics(model, batch)
    after_forward = vm_hwm()
    loss.backward()
    peak = vm_hwm()
    logits = 2 * pairs * seq * vocab
    return {
        "forward_b_per_logit": (after_forward - before) / logits,
        "peak_b_per_logit": (peak - before) / logits,
    }


def main() -> None:
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") is None:
        os.environ["MALLOC_MMAP_THRESHOLD_"] = "65536"  # glibc reads it at start: run again
        os.execv(sys.executable, [sys.executable, *sys.argv])
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--objective", choices=["orpo", "simpo"], action="append")
    p.add_argument("--path", choices=["gpu", "cpu"], default="gpu")
    p.add_argument("--pairs", type=int, default=2)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=128256)
    p.add_argument("--hidden", type=int, default=256)
    a = p.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    for objective in a.objective or ["orpo", "simpo"]:
        r = measure(objective, a.path, a.pairs, a.seq, a.vocab, a.hidden)
        print(f"{objective:6s} path={a.path} pairs={a.pairs} seq={a.seq} vocab={a.vocab}: "
              f"forward {r['forward_b_per_logit']:.2f} B/logit, peak {r['peak_b_per_logit']:.2f} B/logit")


if __name__ == "__main__":
    main()
