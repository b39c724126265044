"""Bench-only hooks for `dojo train` runs (never imported by dojo itself): put bench/hook first on
PYTHONPATH and set

- DOJO_BENCH_DS='{"stage3_param_persistence_threshold": 1e7}': merged into the DeepSpeed
  config's zero_optimization when accelerate calls deepspeed.initialize (ZeRO-3 reads its
  prefetch / live-parameter / persistence settings there), to try variants without editing dojo;
- DOJO_BENCH_LIGER='{"rms_norm": false, "swiglu": false, "rope": false}': TrainingArguments'
  liger_kernel_config (which of Liger's kernels apply when --liger is on);
- DOJO_BENCH_ARGS='{"gradient_checkpointing_kwargs": {"use_reentrant": true}}': set on
  TrainingArguments after its own checks (the Trainer reads them at train());
- DOJO_BENCH_PROFILE=FILE: torch.profiler over optimizer steps 4-6; the top CUDA ops go to FILE
  (and FILE.cpu for the host side), plus each profiled step's wall time;
- DOJO_BENCH_MEMSNAP=DIR: the CUDA allocator's memory history over steps 1-4 (or to the end of
  a shorter run: the memory matrix runs 3); DIR/<pid>.txt gets bench/memsnap.py's summary
  (each growth of the reserve, who asked for it, the holes left);
- DOJO_BENCH_STEP_SYNCS=1: a dojo run with the device waits at each step's edge that dojo
  removed in session 14 (dojo.train.worker.trainer): the HF Trainer's own token count and
  gradient-norm reads, DeepSpeed's synchronized throughput timer, blocking batch copies, the
  packed-sample search before sdpa_varlen;
- DOJO_BENCH_SYNCDEBUG=FILE: every synchronizing CUDA call over steps 4-5
  (torch.cuda.set_sync_debug_mode), counted per step and by call site, to FILE.

Both wrap functions after their module is first imported (a meta-path finder), so nothing is
imported early and runs without the variables are untouched.
"""

import importlib.abc
import importlib.machinery
import json
import os
import sys

_DS = os.environ.get("DOJO_BENCH_DS")
_PROFILE = os.environ.get("DOJO_BENCH_PROFILE")
_LIGER = os.environ.get("DOJO_BENCH_LIGER")
_ARGS = os.environ.get("DOJO_BENCH_ARGS")
_MEMSNAP = os.environ.get("DOJO_BENCH_MEMSNAP")
_STEP_SYNCS = os.environ.get("DOJO_BENCH_STEP_SYNCS")
_SYNCDEBUG = os.environ.get("DOJO_BENCH_SYNCDEBUG")


def _patch_training_args(mod):  # type: ignore[no-untyped-def]
    orig = mod.TrainingArguments.__post_init__
    kernels = json.loads(_LIGER or "{}")
    fields = json.loads(_ARGS or "{}")

    def post_init(self):  # type: ignore[no-untyped-def]
        orig(self)
        for k, val in fields.items():
            setattr(self, k, val)
            print(f"[bench hook] TrainingArguments.{k} = {val}", flush=True)
        if self.use_liger_kernel and _LIGER:
            self.liger_kernel_config = kernels
            print(f"[bench hook] liger_kernel_config = {kernels}", flush=True)
        if _STEP_SYNCS and self.deepspeed:  # dojo's settings before session 14
            self.include_num_input_tokens_seen = "non_padding"
            self.accelerator_config.non_blocking = False
            print("[bench hook] HF token count, blocking batch copies", flush=True)

    mod.TrainingArguments.__post_init__ = post_init


def _patch_deepspeed(mod):  # type: ignore[no-untyped-def]
    orig = mod.initialize
    extra = json.loads(_DS or "{}")

    def initialize(*args, **kw):  # type: ignore[no-untyped-def]
        for key in ("config", "config_params"):
            cfg = kw.get(key)
            if isinstance(cfg, dict) and "zero_optimization" in cfg:
                if extra:
                    cfg["zero_optimization"].update(extra)
                    print(f"[bench hook] zero_optimization += {extra}", flush=True)
                if _STEP_SYNCS:
                    cfg["timers"] = {"throughput": {"enabled": True, "synchronized": True}}
                    print("[bench hook] DeepSpeed's synchronized throughput timer", flush=True)
        return orig(*args, **kw)

    mod.initialize = initialize


def _patch_trainer(mod):  # type: ignore[no-untyped-def]
    import time

    import torch
    from transformers import TrainerCallback

    class Prof(TrainerCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.n = 0
            self.prof = None
            self.times: list[float] = []
            self.t = 0.0

        def on_step_begin(self, args, state, control, **kw):  # type: ignore[no-untyped-def]
            self.n += 1
            if self.n == 4:
                acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
                self.prof = torch.profiler.profile(activities=acts)
                self.prof.__enter__()
            torch.cuda.synchronize()
            self.t = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):  # type: ignore[no-untyped-def]
            torch.cuda.synchronize()
            self.times.append(round(time.perf_counter() - self.t, 4))
            if self.n == 6 and self.prof is not None:
                self.prof.__exit__(None, None, None)
                ka = self.prof.key_averages()
                # Kernel time summed over the profiled steps (4-6): against their wall time it says
                # whether the GPU or the host sets the pace.
                busy = sum(
                    getattr(e, "self_device_time_total", 0)
                    for e in ka
                    if e.device_type.name == "CUDA"
                )
                with open(_PROFILE, "w") as f:
                    f.write(f"step wall s: {self.times}\n")
                    f.write(f"GPU kernel s per profiled step: {busy / 3 / 1e6:.4f}\n")
                    f.write(
                        ka.table(
                            sort_by="self_cuda_time_total", row_limit=30, max_name_column_width=70
                        )
                    )
                with open(f"{_PROFILE}.cpu", "w") as f:
                    f.write(
                        ka.table(
                            sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=70
                        )
                    )
                self.prof = None

    _add_callback(mod, Prof)


def _patch_dojo_trainer(mod):  # type: ignore[no-untyped-def]
    from transformers import Trainer

    def sum_tokens(self):  # type: ignore[no-untyped-def]
        self._tokens_unsummed = 0  # the HF Trainer counts (include_num_input_tokens_seen above)

    mod.DojoTrainer._get_grad_norm = Trainer._get_grad_norm
    mod.DojoTrainer._clip_grad_norm = Trainer._clip_grad_norm
    mod.DojoTrainer.sum_tokens = sum_tokens
    print("[bench hook] the HF Trainer's gradient-norm read", flush=True)


def _patch_varlen(mod):  # type: ignore[no-untyped-def]
    orig = mod.register

    def register():  # type: ignore[no-untyped-def]
        from transformers.masking_utils import AttentionMaskInterface

        orig()
        AttentionMaskInterface.register(mod.NAME, lambda *a, **k: None)  # the mask search again
        print("[bench hook] sdpa_varlen with a mask function", flush=True)

    mod.register = register


def _patch_trainer_syncdebug(mod):  # type: ignore[no-untyped-def]
    import collections
    import traceback
    import warnings

    import torch
    from transformers import TrainerCallback

    class SyncDebug(TrainerCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.n = 0
            self.sites: collections.Counter[str] = collections.Counter()
            self.count = 0
            self.show = warnings.showwarning

        def _record(self, message, category, filename, lineno, file=None, line=None):  # type: ignore[no-untyped-def]
            if "synchronizing" not in str(message):
                return self.show(message, category, filename, lineno, file, line)
            self.count += 1
            stack = [f for f in traceback.extract_stack()[:-2] if "/warnings.py" not in f.filename]
            # The three innermost frames outside this hook: who asked for the wait.
            self.sites[" < ".join(f"{f.filename.split('site-packages/')[-1]}:{f.lineno} {f.name}"
                                  for f in reversed(stack[-3:]))] += 1  # fmt: skip

        def on_step_begin(self, args, state, control, **kw):  # type: ignore[no-untyped-def]
            self.n += 1
            if self.n == 4:
                warnings.simplefilter("always")
                warnings.showwarning = self._record
                torch.cuda.set_sync_debug_mode("warn")
            elif self.n == 6:
                torch.cuda.set_sync_debug_mode("default")
                warnings.showwarning = self.show
                with open(_SYNCDEBUG, "w") as f:
                    f.write(f"synchronizing CUDA calls per step (steps 4-5): {self.count / 2}\n")
                    for site, k in self.sites.most_common(30):
                        f.write(f"{k / 2:6.1f}  {site}\n")

    _add_callback(mod, SyncDebug)


def _add_callback(mod, cls):  # type: ignore[no-untyped-def]
    orig = mod.Trainer.__init__

    def __init__(self, *args, **kw):  # type: ignore[no-untyped-def]
        orig(self, *args, **kw)
        self.add_callback(cls())

    mod.Trainer.__init__ = __init__


def _patch_trainer_memsnap(mod):  # type: ignore[no-untyped-def]
    import torch
    from transformers import TrainerCallback

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    from memsnap import summarize

    class MemSnap(TrainerCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.marks: list[str] = []
            self.done = False

        def on_train_begin(self, args, state, control, **kw):  # type: ignore[no-untyped-def]
            torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="python")

        def on_step_end(self, args, state, control, **kw):  # type: ignore[no-untyped-def]
            g = 2**30
            self.marks.append(
                f"step {state.global_step}: reserved {torch.cuda.memory_reserved() / g:.2f}, "
                f"allocated {torch.cuda.memory_allocated() / g:.2f}, peak reserved "
                f"{torch.cuda.max_memory_reserved() / g:.2f}, peak allocated "
                f"{torch.cuda.max_memory_allocated() / g:.2f} GiB"
            )
            if state.global_step == 4:
                self._dump()

        def on_train_end(self, args, state, control, **kw):  # type: ignore[no-untyped-def]
            self._dump()  # runs shorter than 4 steps (the memory matrix runs 3)

        def _dump(self) -> None:
            if self.done:
                return
            self.done = True
            snap = torch.cuda.memory._snapshot()
            torch.cuda.memory._record_memory_history(enabled=None)
            os.makedirs(_MEMSNAP, exist_ok=True)
            with open(os.path.join(_MEMSNAP, f"{os.getpid()}.txt"), "w") as f:
                f.write(summarize(snap, self.marks))

    _add_callback(mod, MemSnap)


def _patch_trainer_all(mod):  # type: ignore[no-untyped-def]
    if _PROFILE:
        _patch_trainer(mod)
    if _MEMSNAP:
        _patch_trainer_memsnap(mod)
    if _SYNCDEBUG:
        _patch_trainer_syncdebug(mod)


class _Finder(importlib.abc.MetaPathFinder):
    hooks = {}
    if _DS or _STEP_SYNCS:
        hooks["deepspeed"] = _patch_deepspeed
    if _PROFILE or _MEMSNAP or _SYNCDEBUG:
        hooks["transformers.trainer"] = _patch_trainer_all
    if _LIGER or _ARGS or _STEP_SYNCS:
        hooks["transformers.training_args"] = _patch_training_args
    if _STEP_SYNCS:
        hooks["dojo.train.worker.trainer"] = _patch_dojo_trainer
        hooks["dojo.train.worker.varlen"] = _patch_varlen

    def find_spec(self, name, path, target=None):  # type: ignore[no-untyped-def]
        if name not in self.hooks:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        loader, hook = spec.loader, self.hooks.pop(name)
        exec_module = loader.exec_module

        def run(module):  # type: ignore[no-untyped-def]
            exec_module(module)
            hook(module)

        loader.exec_module = run  # type: ignore[method-assign]
        return spec


if _DS or _PROFILE or _LIGER or _ARGS or _MEMSNAP or _STEP_SYNCS or _SYNCDEBUG:
    sys.meta_path.insert(0, _Finder())
