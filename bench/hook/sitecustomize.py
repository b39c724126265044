"""Bench-only hooks for `dojo train` runs (never imported by dojo itself): bench/speed.py and
bench/gpu.sh put bench/hook first on PYTHONPATH and set

- BENCH_STEPLOG=FILE: bench/steps.py's per-step record added to the run's Trainer, as
  bench/baseline_trainer.py and bench/trl_sft.py add it to theirs;
- BENCH_COUNT_TOKENS=1: for a script that counts no tokens of its own (TRL's DPO and KTO
  scripts, bench/trl_pref.py), each batch's real tokens (its attention masks' ones, summed on the host in
  the collator, so no device read) added to ``state.num_input_tokens_seen`` before the step, as
  dojo's collators count them (a pair is its chosen and its rejected sequence, each with its
  prompt);
- DOJO_BENCH_MEMSNAP=DIR: the CUDA allocator's memory history over steps 1-4 (or to the end of
  a shorter run: most memory rows run 3); DIR/<pid>.txt gets bench/memsnap.py's summary
  (each growth of the reserve, who asked for it, the holes left), and a longer run's reserved
  and peak figures after each later step;
- BENCH_KEEP_GRAD_PARTITION=FILE: an experiment on ZeRO-1/2's step remap (dojo's
  reserve.step_remap): DeepSpeed frees its bf16 gradient partition (``grads_in_partition``)
  after every step and makes it anew in the next backward, where best fit can put it in the
  pages the step freed; here the optimizer keeps it after the step's last micro-batch
  (copy_grads_in_partition fills it again from offset 0), and FILE gets a line with its
  data_ptr at each such release. dojo's worker now keeps it itself where it was measured to help
  (dojo.train.worker.zero_grads); the hook stays for the runs in docs/benchmarks.md that used it.

The first three wrap the Trainer after transformers.trainer is first imported, the last
DeepSpeed's ZeRO-1/2 optimizer after its module is (a meta-path finder), so nothing is imported
early and runs without the variables are untouched.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_STEPLOG = os.environ.get("BENCH_STEPLOG")
_MEMSNAP = os.environ.get("DOJO_BENCH_MEMSNAP")
_COUNT = os.environ.get("BENCH_COUNT_TOKENS") == "1"
_KEEP = os.environ.get("BENCH_KEEP_GRAD_PARTITION")
_TOKENS = "bench_real_tokens"  # the count's key in a batch, popped before the model sees it
_BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def _bench_module(name):  # type: ignore[no-untyped-def]
    """bench/NAME.py, loaded by path (bench/ stays off sys.path in dojo's processes)."""
    spec = importlib.util.spec_from_file_location(
        f"dojo_bench_{name}", os.path.join(_BENCH, f"{name}.py")
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _add_callback(mod, make):  # type: ignore[no-untyped-def]
    orig = mod.Trainer.__init__

    def __init__(self, *args, **kw):  # type: ignore[no-untyped-def]
        orig(self, *args, **kw)
        names = {type(c).__name__ for c in self.callback_handler.callbacks}
        cb = make()
        if cb is not None and type(cb).__name__ not in names:
            self.add_callback(cb)

    mod.Trainer.__init__ = __init__


class _Counting:
    """The trainer's collator, plus the batch's real tokens under _TOKENS (a plain int: it rides
    through the dataloader's workers and accelerate's device copy unchanged)."""

    def __init__(self, inner):  # type: ignore[no-untyped-def]
        self.inner = inner

    def __call__(self, features):  # type: ignore[no-untyped-def]
        batch = self.inner(features)
        # DPO's batch: one mask over the chosen and rejected sequences; ORPO's and CPO's: one
        # per side (chosen_/rejected_attention_mask, each with its prompt) beside the prompt's;
        # KTO's: the rows' own, beside the KL term's mismatched pairs (KL_attention_mask)
        masks = [v for k, v in batch.items()
                 if k.endswith("attention_mask") and not k.startswith(("prompt", "KL_"))]  # fmt: skip
        if masks:
            batch[_TOKENS] = int(sum(int(m.sum()) for m in masks))
        else:
            batch[_TOKENS] = int(batch["input_ids"].numel())
        return batch


def _count_tokens(mod):  # type: ignore[no-untyped-def]
    init, step = mod.Trainer.__init__, mod.Trainer.training_step

    def __init__(self, *args, **kw):  # type: ignore[no-untyped-def]
        init(self, *args, **kw)
        self.data_collator = _Counting(self.data_collator)

    def training_step(self, model, inputs, *args, **kw):  # type: ignore[no-untyped-def]
        self.state.num_input_tokens_seen += int(inputs.pop(_TOKENS, 0))
        return step(self, model, inputs, *args, **kw)

    mod.Trainer.__init__ = __init__
    mod.Trainer.training_step = training_step


def _memsnap():  # type: ignore[no-untyped-def]
    import torch
    from transformers import TrainerCallback

    summarize = _bench_module("memsnap").summarize

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
            if self.done:  # a longer run: the history stopped at step 4, the marks did not
                with open(self._path(), "a") as f:
                    f.write("steps after the history:\n" + "\n".join(self.marks[4:]) + "\n")
            self._dump()  # runs shorter than 4 steps (most memory rows run 3)

        @staticmethod
        def _path() -> str:
            return os.path.join(_MEMSNAP, f"{os.getpid()}.txt")

        def _dump(self) -> None:
            if self.done:
                return
            self.done = True
            snap = torch.cuda.memory._snapshot()
            torch.cuda.memory._record_memory_history(enabled=None)
            os.makedirs(_MEMSNAP, exist_ok=True)
            with open(self._path(), "w") as f:
                f.write(summarize(snap, self.marks))

    return MemSnap()


def _patch_trainer(mod):  # type: ignore[no-untyped-def]
    if _COUNT:
        _count_tokens(mod)
    if _STEPLOG:
        _add_callback(mod, lambda: _bench_module("steps").steplog())
    if _MEMSNAP:
        _add_callback(mod, _memsnap)


def _keep_grad_partition(mod):  # type: ignore[no-untyped-def]
    cls = mod.DeepSpeedZeroOptimizer
    release = cls._release_ipg_buffers

    def _release_ipg_buffers(self):  # type: ignore[no-untyped-def]
        kept = getattr(self, "grads_in_partition", None)  # absent at the optimizer's init
        release(self)  # clears the buckets and the offset, and drops the partition
        # Only at the step's last micro-batch: before it, the accumulated gradients are views of
        # this partition, which the next micro-batch's copy would overwrite.
        if (
            kept is not None
            and self.contiguous_gradients
            and self.is_gradient_accumulation_boundary()
        ):
            self.grads_in_partition = kept
            with open(_KEEP, "a") as f:
                f.write(f"{kept.data_ptr()}\n")

    cls._release_ipg_buffers = _release_ipg_buffers


class _Finder(importlib.abc.MetaPathFinder):
    hooks = {"transformers.trainer": _patch_trainer}
    if _KEEP:
        hooks["deepspeed.runtime.zero.stage_1_and_2"] = _keep_grad_partition

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


if _STEPLOG or _MEMSNAP or _COUNT or _KEEP:
    sys.meta_path.insert(0, _Finder())
