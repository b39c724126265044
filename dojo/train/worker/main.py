"""The training process the DeepSpeed launcher starts once per rank (torchtune's recipe_main).

THE module that imports torch / transformers / peft / deepspeed / bitsandbytes. It reads the
resolved run config the parent wrote (``run_dir/train.json``), trains with the HF Trainer and
``TrainingArguments(deepspeed=run_dir/ds_config.json)`` (without, for --zero none: the Trainer's
own loop, DDP across ranks), saves, and writes ``dojo_summary.json``.

    python -m deepspeed.launcher.runner --include localhost:0 --master_port 29500 \
        --module dojo.train.worker --config runs/dojo/train.json
"""

import argparse
import json
import logging
import os
import socket
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, Trainer
from transformers.trainer_callback import PrinterCallback

from dojo.errors import DojoError
from dojo.estimate.reserve import keeps_grad_partition
from dojo.paths import RUN_FILE
from dojo.run.machine import conf_expandable
from dojo.run.run import Run
from dojo.train import rank_status
from dojo.train.preflight import has_weights
from dojo.train.worker import data as worker_data
from dojo.train.worker import serving
from dojo.train.worker.args import (
    build_training_args,
    eval_callbacks,
    fit_z3_leaf,
    spare_fused_experts,
)
from dojo.train.worker.callbacks import (
    CheckpointMarker,
    Measures,
    Progress,
    RecompileWatch,
    StopOnNonFinite,
    barrier,
    is_rank0,
    print0,
)
from dojo.train.worker.model import (
    DTYPES,
    apply_lora,
    hub_revision,
    load_model,
    prepare_adapters,
    safetensors,
)
from dojo.train.worker.trainer import DojoTrainer
from dojo.train.worker.zero_grads import KeepGradPartition

INIT_DIR = "init-weights"
"""Seeded random weights for a model folder without weights (the bundled tiny model)."""


@dataclass(frozen=True)
class Job:
    """What the parent wrote to RUN_DIR/train.json: the Run and the paths it decided."""

    run: Run
    run_dir: str
    ds_config: str | None
    """The DeepSpeed JSON; None for a run without DeepSpeed."""
    model_path: str
    tokenizer_path: str
    resume_from: str | None
    estimate: dict[str, Any] | None
    data: tuple[str, ...]


def load_job(path: str) -> Job:
    rec = json.loads(Path(path).read_text(encoding="utf-8"))
    paths = rec["paths"]
    return Job(
        run=Run.from_dict(rec["run"]),
        run_dir=paths["run_dir"],
        ds_config=paths["ds_config"],
        model_path=paths["model"],
        tokenizer_path=paths["tokenizer"],
        resume_from=paths.get("resume_from"),
        estimate=rec.get("estimate"),
        data=tuple(paths["data"]),
    )


def materialize_random_weights(job: Job) -> str:
    """Model folder without weights -> seeded random weights saved once per node (local rank 0)
    as safetensors, so every path (ZeRO-3, QLoRA, --merge) loads with from_pretrained."""
    run = job.run
    src = job.model_path
    if has_weights(src) or not Path(src).is_dir():
        return str(src)  # a Hub id, or a folder with weights
    out = Path(job.run_dir) / INIT_DIR
    if int(os.environ.get("LOCAL_RANK", "0")) == 0 and not has_weights(out):
        torch.manual_seed(run.loop.seed)
        config = AutoConfig.from_pretrained(src, trust_remote_code=run.model.trust_remote_code)
        dtype = DTYPES[run.kernels.precision]
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)  # type: ignore[no-untyped-call]
        tmp = out.with_name(f".{INIT_DIR}.{socket.gethostname()}.{os.getpid()}")
        model.save_pretrained(tmp, safe_serialization=True)
        config.save_pretrained(tmp)
        os.replace(tmp, out)  # the other ranks wait for the final name: never a half folder
        print0(f"random weights (seed {run.loop.seed}) written to {out}")
    deadline = time.monotonic() + 1800
    while not has_weights(out):  # the launcher kills us if local rank 0 fails
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {out}")
        time.sleep(0.5)
    return str(out)


def allow_deepspeed_on_cpu() -> None:
    """Let accelerate run DeepSpeed on DeepSpeed's CPU accelerator (gloo), or DDP over gloo for a
    run without DeepSpeed.

    accelerate 1.15 ``PartialState._prepare_backend`` picks a backend only for a device it knows
    (cuda, xpu, npu, ...) unless ``cpu=True``, and ``cpu=True`` turns DeepSpeed off; with neither,
    a CPU rank gets "no distributed" and a world size of 1. Here a launched CPU rank gets gloo /
    MULTI_CPU, after which accelerate's own DeepSpeed path (deepspeed.init_distributed) runs.
    """
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType

    original = PartialState._prepare_backend

    def prepare(
        self: Any, cpu: bool = False, sagemaker_dp: bool = False, backend: Any = None
    ) -> Any:
        found, kind = original(self, cpu, sagemaker_dp, backend)
        if kind == DistributedType.NO and os.environ.get("LOCAL_RANK") is not None:
            return "gloo", DistributedType.MULTI_CPU
        return found, kind

    PartialState._prepare_backend = prepare


def save(trainer: Trainer, tokenizer: Any, job: Job, weights: str, served: Any) -> None:
    """ZeRO-3 gathers a 16-bit model (stage3_gather_16bit_weights_on_model_save); LoRA saves
    the adapter; --merge also writes base + adapter merged (rank 0, reloaded from disk). The
    tokenizer (with the run's chat template) and generation_config.json go beside each."""
    run = job.run
    template, original_eos = served
    out = Path(job.run_dir)
    trainer.save_model(str(out))  # all ranks: ZeRO-3 gathers shards collectively
    if is_rank0():
        tokenizer.save_pretrained(str(out))
        serving.write_generation_config(trainer.model, tokenizer, template, out, original_eos)
    barrier()
    if run.lora.merge and is_rank0():
        from peft import PeftModel
        from transformers.integrations.deepspeed import unset_hf_deepspeed_config

        # Training is over: a ZeRO-3 config still armed would make this rank-0-only load a
        # sharded (collective) zero.Init and hang waiting for the other ranks.
        unset_hf_deepspeed_config()  # type: ignore[no-untyped-call]

        # Merge into full-precision base weights (never into 4-bit QLoRA weights: lossy).
        dtype = DTYPES[run.kernels.precision]
        base = AutoModelForCausalLM.from_pretrained(
            weights,
            dtype=dtype,
            trust_remote_code=run.model.trust_remote_code,
            use_safetensors=safetensors(weights),
            **hub_revision(run, weights),
        )
        serving.fit_embeddings(base, tokenizer, run, [])  # the rows the adapter's tokens added
        merged = PeftModel.from_pretrained(base, str(out)).merge_and_unload()
        merged.save_pretrained(str(out / "merged"), safe_serialization=True)
        tokenizer.save_pretrained(str(out / "merged"))
        serving.write_generation_config(merged, tokenizer, template, out / "merged", original_eos)
        print0(f"merged weights: {out / 'merged'}")
    barrier()


def write_summary(
    trainer: Trainer, measures: Measures, job: Job, data_report: dict[str, Any]
) -> None:
    """OUTPUT/dojo_summary.json: measured beside estimated, like for like (dojo.train.summary)."""
    from dojo.train.summary import memory_block
    from dojo.train.worker.objectives import reward_summary

    measured = measures.summary()  # every rank: all-reduces the GPU peaks
    if not is_rank0():
        return
    run = job.run
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    summary = {
        "steps": trainer.state.global_step,
        "loss_first": losses[0] if losses else None,
        "loss_last": losses[-1] if losses else None,
        "objective": run.objective.objective,
        **reward_summary(trainer.state, run),  # a preference run's (objectives.py)
        **eval_summary(trainer.state, run),
        "memory": memory_block(measured, job.estimate),
        "world_size": run.world_size,
        "zero": run.zero.stage,
        "method": run.model.method,
        # ZeRO-1/2's gradient partition kept between steps (dojo.train.worker.zero_grads)
        "kept_grad_partition": any(
            c.kept for c in trainer.callback_handler.callbacks if isinstance(c, KeepGradPartition)
        ),
        # --compile on: graphs compiled after step 1 (callbacks.RecompileWatch)
        "compiled_graphs_after_step1": next(
            (
                c.graphs_after_step1
                for c in trainer.callback_handler.callbacks
                if isinstance(c, RecompileWatch)
            ),
            None,
        ),  # fmt: skip
        "model_dir": job.run_dir if run.output.save_model else None,
        **measured,
        "resumed_from": job.resume_from,
        "data": data_report,
    }
    path = Path(job.run_dir) / "dojo_summary.json"
    tmp = path.with_name(".dojo_summary.json.tmp")
    tmp.write_text(json.dumps(summary, indent=2), encoding="utf-8")
    os.replace(tmp, path)
    print0(f"summary: {path}")


def eval_summary(state: Any, run: Run) -> dict[str, Any]:
    """Eval loss first / last / best (with its step and checkpoint), from the Trainer's state."""
    if not run.data.evaluates:
        return {}
    evals = [(e["step"], e["eval_loss"]) for e in state.log_history if "eval_loss" in e]
    best = min(evals, key=lambda se: se[1]) if evals else None
    return {
        "eval_loss_first": evals[0][1] if evals else None,
        "eval_loss_last": evals[-1][1] if evals else None,
        "eval_loss_best": best[1] if best else None,
        "eval_best_step": best[0] if best else None,
        "best_checkpoint": state.best_model_checkpoint,
        "evals": len(evals),
        "stopped_early": bool(
            run.loop.early_stopping is not None and evals and state.global_step < state.max_steps
        ),
        "kept_best": run.loop.keep_best == "on",
    }


def _record_rank_state(job: Job) -> int:
    """rank-N.json = "running"; the launcher's SIGTERM/SIGINT becomes "stopped" (see rank_status)."""
    import signal

    rank = int(os.environ.get("RANK", "0"))
    rank_status.write(job.run_dir, rank, "running")

    def stopped(signum: int, frame: Any) -> None:
        rank_status.write(job.run_dir, rank, "stopped", signal=signum)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, stopped)
    signal.signal(signal.SIGINT, stopped)
    return rank


LIGER_BACKENDS = "liger_kernel.backends.registry"
"""The logger of Liger's optional kernel backends (CuTe DSL, Ascend): on a GPU without one it
warns, once per op and rank, that the backend could not be imported, and Liger runs its Triton
kernels as it would anyway."""


def quiet_libraries() -> None:
    """Library chatter that would repeat once per rank and asks nothing of the user: deprecation
    notices (gradient_checkpointing naming, all_gather_into_tensor), the "Loading weights" /
    "Writing model shards" bars, Liger's optional backends. DOJO_DEBUG=1 keeps the notices and
    Liger's lines."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    if os.environ.get("DOJO_DEBUG", "") not in ("", "0"):
        return
    warnings.filterwarnings("ignore", category=FutureWarning)
    logging.getLogger(LIGER_BACKENDS).setLevel(logging.ERROR)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="dojo.train.worker")
    ap.add_argument("--config", required=True, help=f"run_dir/{RUN_FILE} written by `dojo train`")
    args, _ = ap.parse_known_args(argv)  # the launcher adds --local_rank=N (LOCAL_RANK env too)
    quiet_libraries()
    job = load_job(args.config)
    if job.run.kernels.expandable and job.run.device == "cuda":
        expandable_segments()
    rank = _record_rank_state(job)
    try:
        rc = train(job)
    except DojoError as e:  # a user problem found in the worker: one error line, no traceback
        print0(f"error: {e.message}" + (f"\nhint: {e.hint}" if e.hint else ""))
        rank_status.write(job.run_dir, rank, f"failed: {e.message}"[:500])
        raise SystemExit(1) from None
    except BaseException as e:
        if not isinstance(e, SystemExit) or e.code not in (0, None):
            rank_status.write(job.run_dir, rank, f"failed: {type(e).__name__}: {e}"[:500])
        raise
    rank_status.write(job.run_dir, rank, "done")
    leave_process_group()
    return rc


def leave_process_group() -> None:
    """torch.distributed's advice before a process exits: destroy the group. Left to interpreter
    teardown, a ZeRO-3 CPU rank (gloo) once died after training had finished and its summary was
    written ("terminate called without an active exception", exit 250, seen in CI)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def expandable_segments() -> None:
    """PyTorch's expandable segments, when this process's environment lacks what `dojo train`
    set: DeepSpeed's multi-node launcher exports only some variables to the other nodes (its
    EXPORT_ENVS and .deepspeed_env), not PYTORCH_CUDA_ALLOC_CONF. Nothing is on the GPU yet."""
    if conf_expandable(os.environ.get("PYTORCH_CUDA_ALLOC_CONF")) is None:
        torch.cuda.memory._set_allocator_settings("expandable_segments:True")


def train(job: Job) -> int:
    """Steps 3-8 of the recipe: model, LoRA, data, Trainer, train, save, summary."""
    run = job.run
    weights = materialize_random_weights(job)
    if run.device == "cpu":
        allow_deepspeed_on_cpu()
    training_args = build_training_args(job)
    torch.manual_seed(run.loop.seed)
    tokenizer = AutoTokenizer.from_pretrained(
        job.tokenizer_path,
        trust_remote_code=run.model.trust_remote_code,
        **hub_revision(run, job.tokenizer_path),
    )
    original_eos = tokenizer.eos_token_id
    template = worker_data.pick_template(job, tokenizer)
    added = serving.prepare_tokenizer(tokenizer, template, run)
    model = load_model(run, weights)
    spare_fused_experts(training_args, run, model.config.model_type)
    serving.fit_embeddings(model, tokenizer, run, added)
    if not run.objective.preference:
        model = apply_lora(model, run)  # a preference trainer wraps it itself (objectives.py)
        spare_fused_experts(training_args, run, model.config.model_type, wrapped=model)
    fit_z3_leaf(model, training_args, run)
    dataset, eval_set, collator, report = worker_data.build(job, tokenizer, model, template)
    measures = Measures()
    meta = {
        "world_size": run.world_size,
        "zero_stage": run.zero.stage,
        "method": run.model.method,
        "objective": run.objective.objective,
    }
    callbacks = [Progress(), StopOnNonFinite(), CheckpointMarker(meta), measures,
                 *eval_callbacks(run), *([RecompileWatch()] if run.kernels.compiled else [])]  # fmt: skip
    if run.objective.preference:
        from dojo.train.worker import objectives

        trainer = objectives.build_trainer(
            run, model=model, ref_model=objectives.reference_model(run, weights, tokenizer, added),
            args=training_args, train_dataset=dataset, eval_dataset=eval_set,
            tokenizer=tokenizer, callbacks=callbacks,
        )  # fmt: skip
        if run.model.adapters:
            prepare_adapters(trainer.model, run)
    else:
        trainer = DojoTrainer(
            model=model,
            args=training_args,
            train_dataset=dataset,
            eval_dataset=eval_set,
            data_collator=collator,
            processing_class=tokenizer,
            callbacks=callbacks,
        )
    trainer.remove_callback(PrinterCallback)  # it prints raw log dicts; Progress replaces it
    if keeps_grad_partition(run):
        trainer.add_callback(KeepGradPartition(trainer))
    trainer.train(resume_from_checkpoint=job.resume_from)
    if run.loop.keep_best == "on" and trainer.state.best_model_checkpoint:
        print0(f"best checkpoint (lowest eval loss): {trainer.state.best_model_checkpoint}")
    if run.output.save_model:
        save(trainer, tokenizer, job, weights, (template, original_eos))
    write_summary(trainer, measures, job, report)
    return 0
