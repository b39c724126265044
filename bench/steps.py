"""The per-step record every system of the speed benchmark writes the same way.

A TrainerCallback: with BENCH_STEPLOG=FILE in the environment, rank 0 writes FILE at the end of
training. bench/baseline_trainer.py and bench/trl_sft.py add it to their Trainer; dojo train gets
it from bench/hook/sitecustomize.py (no change to dojo). The record:

- ``marks``: after step 1, every WINDOW-th step and the last: {step, t (perf_counter, after a
  CUDA synchronize), tokens (``state.num_input_tokens_seen``)}. Every system's count is its real,
  non-padding tokens: the plain script's HF count over the attention mask, dojo's collators'
  count, bench/trl_sft.py's count of the padding-free batch. dojo sums its ranks' counts at step 1
  and at logging steps, so every system logs every WINDOW steps;
- ``losses``: {step: loss} at the logging steps;
- the peaks after step 1 (torch max allocated and reserved; reset at step 1, as every system's
  own summary does);
- with BENCH_STEPDETAIL=1, ``detail``: one entry per step, to find where a slow window's time
  went without changing the run (no synchronize per step): the host's clock at the step's end,
  the GPU time from the previous step's end (CUDA events), the time Python's garbage collector
  paused the host during the step, the allocator's cumulative cudaMalloc retries, and the SM
  clock and power the driver reports (NVML, when torch can read it).

bench/speed.py turns it into tokens/s after step 1 and per window (2-10, 11-20, 21-30: a run whose
later windows are slower recompiles).
"""

import gc
import json
import os
import time
from pathlib import Path
from typing import Any

WINDOW = 10
"""Steps between marks; = the logging steps every system runs with in the speed benchmark."""
GIB = 2**30


def steplog() -> Any:
    """A StepLog callback when BENCH_STEPLOG is set, else None."""
    path = os.environ.get("BENCH_STEPLOG")
    if not path:
        return None
    import torch
    from transformers import TrainerCallback

    cuda = torch.cuda.is_available()
    detail = os.environ.get("BENCH_STEPDETAIL") == "1"

    class StepLog(TrainerCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.marks: list[dict[str, Any]] = []
            self.losses: dict[int, float] = {}
            self.detail: list[dict[str, Any]] = []
            self.events: list[Any] = []
            self.gc_s = 0.0
            self._gc_t0 = 0.0
            if detail:
                gc.callbacks.append(self._gc)

        def _gc(self, phase: str, info: dict[str, Any]) -> None:
            if phase == "start":
                self._gc_t0 = time.perf_counter()
            else:
                self.gc_s += time.perf_counter() - self._gc_t0

        def _detail(self, step: int, tokens: int) -> None:
            d: dict[str, Any] = {"step": step, "t": time.perf_counter(), "tokens": tokens,
                                 "gc_ms": round(1000 * self.gc_s, 2)}  # fmt: skip
            self.gc_s = 0.0
            if cuda:
                ev = torch.cuda.Event(enable_timing=True)
                ev.record()
                self.events.append(ev)
                d["alloc_retries"] = torch.cuda.memory_stats().get("num_alloc_retries", 0)
                try:  # NVML through torch; absent where nvidia-ml-py is not installed
                    d["sm_mhz"] = torch.cuda.clock_rate()
                    d["power_w"] = round(torch.cuda.power_draw() / 1000, 1)
                except Exception:
                    pass
            self.detail.append(d)

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            step = int(state.global_step)
            if detail:
                self._detail(step, int(state.num_input_tokens_seen))
            if step == 1 or step % WINDOW == 0 or step >= state.max_steps:
                if cuda:
                    torch.cuda.synchronize()
                tokens = int(state.num_input_tokens_seen)
                self.marks.append({"step": step, "t": time.perf_counter(), "tokens": tokens})
                if step == 1 and cuda:
                    torch.cuda.reset_peak_memory_stats()

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if logs and "loss" in logs:
                self.losses[int(state.global_step)] = float(logs["loss"])

        def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if not state.is_world_process_zero:
                return
            out: dict[str, Any] = {"marks": self.marks, "losses": self.losses}
            if self.detail:
                if cuda:
                    torch.cuda.synchronize()
                    for a, b, d in zip(self.events, self.events[1:], self.detail[1:], strict=False):
                        d["gpu_ms"] = round(a.elapsed_time(b), 2)
                out["detail"] = self.detail
            if cuda:
                out["peak_alloc_gib"] = round(torch.cuda.max_memory_allocated() / GIB, 3)
                out["peak_reserved_gib"] = round(torch.cuda.max_memory_reserved() / GIB, 3)
            Path(path).write_text(json.dumps(out, indent=1))

    return StepLog()


def leave_process_group() -> None:
    """torch.distributed's advice before a process exits: destroy the group. A DeepSpeed CPU rank
    (gloo) left to interpreter teardown now and then aborts after its work is done ("terminate
    called without an active exception", exit 250); dojo's worker does the same."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def rates(log: dict[str, Any]) -> dict[str, Any]:
    """Tokens/s after step 1 and per window, and tokens per step, from a step log."""
    marks = log.get("marks") or []
    out: dict[str, Any] = {"tokens_per_s": None, "windows": {}, "tokens_per_step": None}
    if len(marks) < 2:
        return out
    first, last = marks[0], marks[-1]
    secs = max(last["t"] - first["t"], 1e-9)
    out["tokens_per_s"] = round((last["tokens"] - first["tokens"]) / secs)
    out["step_ms"] = round(1000 * secs / max(last["step"] - first["step"], 1), 1)
    out["tokens_per_step"] = round(
        (last["tokens"] - first["tokens"]) / max(last["step"] - first["step"], 1)
    )
    for a, b in zip(marks, marks[1:], strict=False):
        dt = max(b["t"] - a["t"], 1e-9)
        out["windows"][f"{a['step'] + 1}-{b['step']}"] = round((b["tokens"] - a["tokens"]) / dt)
    return out
