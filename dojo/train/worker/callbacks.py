"""Trainer callbacks of the worker: progress on rank 0, complete-checkpoint markers, run measures.

Imported only by dojo.train.worker (inside the launched ranks), so torch may be imported here.
"""

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from transformers import TrainerCallback

from dojo.errors import DojoError
from dojo.gpus import process_memory_mib
from dojo.train.checkpoints import MARKER, manifest
from dojo.train.resume_check import read_record, saved_view

GIB = 1024**3


def is_rank0() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def print0(text: str) -> None:
    """One line on stderr from rank 0 only (nanochat's print0)."""
    if is_rank0():
        sys.stderr.write(text + "\n")
        sys.stderr.flush()


def barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def _write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2), encoding="utf-8")
    os.replace(tmp, path)


class Progress(TrainerCallback):
    """Loss, lr, tokens/s, eval loss and the time left on rank 0: a rich bar on a terminal,
    plain lines otherwise (logs, CI, a pipe), one per logging step.

    tokens/s and the time left follow the window since the previous logged loss, not the mean
    since launch: a compiled run's first step (Inductor, tens of seconds) otherwise weighs on
    every later line (H200, QLoRA with compile: the launch mean still read 10,858 tokens/s at
    step 40 of a run that trained at 40,000 from step 2, and its eta at step 10 was 3x too long).
    """

    def __init__(self, tty: bool | None = None) -> None:
        self._tty = tty
        self._bar: Any = None
        self._task: Any = None
        self._t0 = 0.0
        self._tok0 = 0
        self._step0 = 0
        self._last: tuple[float, int, int] = (0.0, 0, 0)  # time, tokens, step at the last log
        self._eval = ""

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self._t0, self._tok0 = time.perf_counter(), state.num_input_tokens_seen
        self._step0 = state.global_step  # a resumed run: the rate counts this launch's steps
        self._last = (self._t0, self._tok0, self._step0)
        leaves = z3_leaf_count(kw["model"]) if kw.get("model") is not None else {}
        # transformers flags MoE blocks as leaves whatever the stage; only ZeRO-3 gathers by them
        if leaves and _is_zero3(args):  # the engine exists by now: the flags it really set
            said = ", ".join(f"{n} {c}" for c, n in leaves.items())
            print0(f"ZeRO-3 leaf modules (each gathered whole): {said}")
        tty = sys.stderr.isatty() if self._tty is None else self._tty
        if is_rank0() and tty:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as Bar

            cols = (TextColumn("train"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TextColumn("eta"), TimeRemainingColumn())  # fmt: skip
            self._bar = Bar(*cols, TextColumn("{task.fields[info]}"), console=Console(stderr=True))
            self._bar.start()
            self._task = self._bar.add_task("train", total=state.max_steps, info="")
            self._bar.update(self._task, completed=state.global_step)

    def eta(self, state: Any) -> float | None:
        """Seconds left at the step time of the window since the previous logged loss (the
        launch's mean until one window has passed); None before the first step."""
        t, _, step = self._last  # launch until the first log: step 1 (compile) included
        done = int(state.global_step) - step
        if done <= 0:  # no step since the last log: the launch's mean
            t, done = self._t0, int(state.global_step) - self._step0
        if done <= 0:
            return None
        left = max(0, int(state.max_steps) - int(state.global_step))
        return (time.perf_counter() - t) / done * left

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
        if not is_rank0() or not logs:
            return
        if "eval_loss" in logs:
            self._eval = f"  eval {logs['eval_loss']:.4f}"
            if self._bar is None:
                print0(
                    f"step {state.global_step}/{state.max_steps}  eval loss {logs['eval_loss']:.4f}"
                )
            return
        if "loss" not in logs:
            return
        now = time.perf_counter()
        t, tok, _ = self._last
        tps = (state.num_input_tokens_seen - tok) / max(now - t, 1e-9)
        info = f"loss {logs['loss']:.4f}  lr {logs.get('learning_rate', 0.0):.2e}  tok/s {tps:,.0f}"
        for key, name in (("rewards/accuracies", "reward acc"), ("rewards/margins", "margin")):
            if key in logs:  # a preference run (TRL's metrics)
                info += f"  {name} {logs[key]:.3f}"
        if self._bar is not None:
            self._bar.update(self._task, completed=state.global_step, info=info + self._eval)
        else:
            left = self.eta(state)
            tail = f"  eta {_clock(left)}" if left is not None else ""
            print0(f"step {state.global_step}/{state.max_steps}  {info}{tail}")
        self._last = (now, state.num_input_tokens_seen, int(state.global_step))

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self._bar is not None:  # the bar moves every step, log lines only every N
            self._bar.update(self._task, completed=state.global_step)

    def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=state.global_step)
            self._bar.stop()


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return (
        f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
    )


class StopOnNonFinite(TrainerCallback):
    """A logged training loss that is inf or NaN ends the run with one error line on every rank.

    dojo writes bf16.check_grad_overflow false (unless --overflow-check), so DeepSpeed no longer
    skips such steps: after a non-finite gradient the weights are NaN and every later step is
    wasted GPU time. The loss is already on the host at a logging step: this costs no sync."""

    def __init__(self) -> None:
        self.last_finite: int | None = None
        """Step of the last finite logged loss: checkpoints after it may hold NaN weights."""

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
        loss = (logs or {}).get("loss")
        if not isinstance(loss, (int, float)):
            return
        if math.isfinite(loss):
            self.last_finite = state.global_step
            return
        since = (
            f"a checkpoint from step {self.last_finite} or earlier (the last finite loss)"
            if self.last_finite is not None
            else "the start"
        )
        raise DojoError(
            f"the training loss is {loss} at step {state.global_step}: the run diverged",
            hint=f"lower --lr or check the data, then resume from {since}; --overflow-check "
            "makes DeepSpeed skip steps whose gradients are not finite",
        )


class RecompileWatch(TrainerCallback):
    """--compile on: says once when torch.compile keeps compiling after the first steps. Each new
    batch shape (a packed row's layout, a padded batch's length) compiles the layer again, and a
    run that recompiles every few steps is slower than one never compiled."""

    LIMIT = 4
    """New graphs after step 10 tolerated: a last short batch, an eval pass."""

    def __init__(self) -> None:
        self.after_warmup: int | None = None
        self.recompiles = 0
        self.after_step1: int | None = None
        self.graphs_after_step1 = 0
        """New graphs after step 1 (the summary's compiled_graphs_after_step1): 0 where every
        batch reached the compiled layers with the same shape and mask kind."""

    @staticmethod
    def _graphs() -> int:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if state.global_step == 1:
            self.after_step1 = self._graphs()
        elif self.after_step1 is not None:
            self.graphs_after_step1 = self._graphs() - self.after_step1
        if state.global_step == 10:
            self.after_warmup = self._graphs()
        elif self.after_warmup is not None and state.global_step % 10 == 0:
            new = self._graphs() - self.after_warmup
            if new > self.LIMIT and not self.recompiles:
                print0(f"warning: torch.compile compiled {new} new graphs in steps 11-"
                       f"{state.global_step}: the batch shapes keep changing (packed rows of "
                       "varying layout), so each new one compiles again; --compile off is "
                       "likely faster on this data")  # fmt: skip
            if new > self.LIMIT:
                self.recompiles = new


class CheckpointMarker(TrainerCallback):
    """After every rank finished checkpoint-N, rank 0 writes its marker: then it counts as done.

    The marker holds what the checkpoint was trained with (``meta``, plus the resume-relevant
    settings of the run record beside it) and every file's size and checksum, so --resume
    refuses other settings and skips a checkpoint damaged after it was written (checkpoints).
    """

    def __init__(self, meta: dict[str, Any]) -> None:
        self.meta = meta

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        # A resumed run rewrites checkpoint-N in place over a damaged or older one: its stale
        # marker must go before the first shard is written, or a kill mid-save would leave an
        # old marker on new half-written files.
        if control.should_save and is_rank0():
            stale = Path(args.output_dir) / f"checkpoint-{state.global_step}" / MARKER
            stale.unlink(missing_ok=True)

    def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        barrier()  # every rank's ZeRO shard is on disk before the checkpoint is declared done
        path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if is_rank0() and path.is_dir():
            record = read_record(args.output_dir)
            marker = {**saved_view(record), **self.meta, "step": state.global_step}
            marker["files"] = manifest(path)
            _write_json_atomic(path / MARKER, marker)
        barrier()


def _is_zero3(args: Any) -> bool:
    """The run's DeepSpeed config is ZeRO-3 (no DeepSpeed: no config, False)."""
    ds = getattr(args, "hf_deepspeed_config", None)
    return bool(ds is not None and ds.is_zero3())


def z3_leaf_count(model: Any) -> dict[str, int]:
    """Modules DeepSpeed really made ZeRO-3 leaves (its ``_z3_leaf`` flag), by class."""
    out: dict[str, int] = {}
    for m in model.modules():
        if getattr(m, "_z3_leaf", False):
            out[type(m).__name__] = out.get(type(m).__name__, 0) + 1
    return out


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class Measures(TrainerCallback):
    """Tokens/s and peak GPU memory, the whole run and after step 1 (the first step compiles and
    warms caches, so the two differ; dojo_summary.json keeps both)."""

    def __init__(self) -> None:
        self.t_begin = 0.0
        self.t_step1 = 0.0
        self.t_end = 0.0
        self.tok_begin = 0
        self.tok_step1 = 0
        self.tok_end = 0
        self.steps_run = 0
        self.peak_total: dict[str, float] = {}

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.t_begin, self.tok_begin = time.perf_counter(), state.num_input_tokens_seen

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.steps_run += 1
        if self.steps_run == 1:
            # Kernels are queued ahead of the host: without a sync the clock would start while
            # step 1 still runs on the GPU and charge its tail to the steady state (once only).
            _sync()
            self.t_step1, self.tok_step1 = time.perf_counter(), state.num_input_tokens_seen
            if torch.cuda.is_available():
                # Peak of the whole run so far, then restart the counters: later steps are
                # the steady state the estimate predicts (step 1 adds one-time allocations).
                self.peak_total = _cuda_peaks()
                torch.cuda.reset_peak_memory_stats()

    def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        _sync()
        self.t_end, self.tok_end = time.perf_counter(), state.num_input_tokens_seen

    def summary(self) -> dict[str, Any]:
        """Measured numbers (peaks = max over ranks); call on every rank (it all-reduces)."""
        run_s = max(self.t_end - self.t_begin, 1e-9)
        out: dict[str, Any] = {
            "tokens_per_s": (self.tok_end - self.tok_begin) / run_s,
            "tokens_per_s_after_step1": None,
            "train_seconds": run_s,
            "tokens": self.tok_end - self.tok_begin,
        }
        if self.steps_run > 1 and self.t_end > self.t_step1:
            secs = self.t_end - self.t_step1
            out["tokens_per_s_after_step1"] = (self.tok_end - self.tok_step1) / secs
            # Step time: a speed that does not depend on how tokens are counted.
            out["seconds_per_step_after_step1"] = secs / (self.steps_run - 1)
        keys = (
            "peak_reserved_gib",
            "peak_allocated_gib",
            "peak_reserved_gib_after_step1",
            "peak_allocated_gib_after_step1",
            "context_gib",
        )
        out.update(_host_memory())
        if not torch.cuda.is_available():
            return {**out, **dict.fromkeys(keys)}
        after = _cuda_peaks()
        total = {k: max(self.peak_total.get(k, 0.0), after[k]) for k in after}
        # Device memory beyond PyTorch's pool (CUDA context, kernels, cuBLAS, NCCL), read now:
        # what the driver counts for this process minus what the allocator holds. Where the
        # driver does not list this process (a container's PID namespace), the whole GPU's use:
        # right for one rank per GPU, and over by whatever else shares the GPU.
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        own = process_memory_mib(os.getpid(), str(getattr(props, "uuid", "")))
        if own is not None:
            used = own * 2**20
        else:
            free, total_mem = torch.cuda.mem_get_info()
            used = float(total_mem - free)
        context = max(0.0, used - float(torch.cuda.memory_reserved()))
        vals = torch.tensor(
            [total["reserved"], total["allocated"], after["reserved"], after["allocated"], context],
            device="cuda",
        )
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(vals, op=dist.ReduceOp.MAX)
        return {**out, **dict(zip(keys, (round(v / GIB, 3) for v in vals.tolist()), strict=True))}


def _host_memory() -> dict[str, Any]:
    """This rank's host RAM: peak RSS, and pinned bytes held by torch's CachingHostAllocator
    (offload buffers; it rounds each block up to a power of two, which the estimate models)."""
    import resource

    out: dict[str, Any] = {
        "host_rss_peak_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)
    }
    try:
        stats = torch.cuda.host_memory_stats() if torch.cuda.is_available() else {}
    except (AttributeError, RuntimeError):  # older torch: no host allocator statistics
        stats = {}
    for key, name in (
        ("allocated_bytes.peak", "host_pinned_allocated_peak_gib"),
        ("active_bytes.peak", "host_pinned_active_peak_gib"),
    ):
        if key in stats:
            out[name] = round(stats[key] / GIB, 3)
    return out


def _cuda_peaks() -> dict[str, float]:
    return {
        "reserved": float(torch.cuda.max_memory_reserved()),
        "allocated": float(torch.cuda.max_memory_allocated()),
    }
