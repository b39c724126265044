"""The training loop: batch, optimizer, learning-rate schedule, length, evaluation cadence."""

import dataclasses
from dataclasses import dataclass
from typing import Literal

from dojo.run.field import ALL, PLAN, opt
from dojo.run.groups.output import OutputOptions

BNB_OPTIMS = ("adamw_8bit", "paged_adamw_8bit", "paged_adamw_32bit")
"""bitsandbytes' optimizers: CUDA only, their own state sizes (the estimator models each)."""
Optim = Literal[
    "auto",
    "adamw_torch_fused",
    "adamw_torch",
    "adamw_8bit",
    "paged_adamw_8bit",
    "paged_adamw_32bit",
]
Scheduler = Literal[
    "linear", "cosine", "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup",
    "inverse_sqrt",
]  # fmt: skip
"""transformers' SchedulerType names that need no lr_scheduler_kwargs and no eval metric."""


@dataclass(frozen=True)
class LoopOptions:
    micro_batch: int = opt(
        4, "Samples per GPU per forward pass", "fills a GPU at 2k tokens without checkpointing",
        lo=1, hi=4096, example="4", commands=PLAN,
    )  # fmt: skip
    grad_accum: int = opt(
        1, "Micro-batches per optimizer step", "TrainingArguments' default", lo=1, hi=65536,
        example="4", commands=PLAN,
    )  # fmt: skip
    optim: Optim = opt(
        "auto",
        "HF optimizer when --optimizer hf: auto | adamw_torch_fused | adamw_torch | adamw_8bit | "
        "paged_adamw_8bit | paged_adamw_32bit",
        "auto = adamw_torch_fused on CUDA (transformers' default there), adamw_torch on CPU; "
        "paged_adamw_8bit/32bit are the QLoRA paper's",
        metavar="CHOICE",
        commands=ALL,
    )
    lr: float | None = opt(
        None,
        "Peak learning rate [default: 2e-4 LoRA/QLoRA, 2e-5 full; a preference objective "
        "5e-6 / 1e-6]",
        lo=1e-12, hi=1.0, example="2e-4",
    )  # fmt: skip
    lr_scheduler: Scheduler = opt(
        "linear",
        "LR schedule after warmup (transformers' lr_scheduler_type)",
        "the Trainer's default, and the shape of DeepSpeed's WarmupDecayLR (--scheduler ds)",
        flags=("--lr-scheduler", "--scheduler-type"),
        metavar="CHOICE",
    )
    warmup_steps: int = opt(0, "Linear warmup, optimizer steps", "TrainingArguments' default",
                            lo=0, hi=10**9, example="10")  # fmt: skip
    warmup_ratio: float | None = opt(
        None, "Linear warmup as a fraction of the total steps (excludes --warmup-steps)",
        lo=0.0, hi=0.5, example="0.03",
    )  # fmt: skip
    weight_decay: float = opt(
        0.0, "AdamW decoupled weight decay (not applied to biases and norms)",
        "TrainingArguments' default", lo=0.0, hi=1.0, example="0.01",
    )  # fmt: skip
    max_grad_norm: float = opt(
        1.0, "Clip the gradient norm to this, 0 = no clipping", "TrainingArguments' default",
        lo=0.0, hi=1e6, example="1.0",
    )  # fmt: skip
    neftune_alpha: float | None = opt(
        None,
        "NEFTune: noise on the input embeddings while training, alpha (the paper uses 5) "
        "[default: off]",
        lo=1e-6, hi=1e4, example="5",
    )  # fmt: skip
    epochs: float = opt(1.0, "Passes over the data (ignored with --max-steps)",
                        lo=1e-6, hi=1e6, example="3")  # fmt: skip
    max_steps: int | None = opt(None, "Stop after N optimizer steps (overrides --epochs)",
                                lo=1, hi=10**9, example="100")  # fmt: skip
    seed: int = opt(42, "Seeds init, data order and dropout", lo=0, hi=2**32 - 1, example="42")
    eval_steps: int | None = opt(
        None,
        "Eval loss every N optimizer steps, and at the end [default: at each checkpoint, "
        "--save-steps]",
        lo=1, hi=10**9, example="50",
    )  # fmt: skip
    early_stopping: int | None = opt(
        None, "Stop when the eval loss has not improved for N evals in a row (needs eval data)",
        lo=1, hi=10**6, example="3",
    )  # fmt: skip
    keep_best: Literal["auto", "on", "off"] = opt(
        "auto",
        "End with the checkpoint of lowest eval loss (load_best_model_at_end): auto | on | off",
        "auto = on with --early-stopping, off otherwise (the last step is the model)",
    )

    @property
    def hf_optim(self) -> str:
        """TrainingArguments' optim (resolved). With --optimizer ds the JSON's optimizer block
        wins and this one is never built."""
        return self.optim


def loop_problems(
    loop: LoopOptions, *, evaluates: bool, save_steps: int, ds_scheduler: bool,
    ds_optimizer: bool, offload: bool, cuda: bool, given: set[str],
) -> list[tuple[str, str]]:  # fmt: skip
    out: list[tuple[str, str]] = []
    add = out.append
    need_eval = "give held-out rows: --eval-data FILE or --eval-split 0.05"
    for value, flag in (
        (loop.eval_steps, "--eval-steps"),
        (loop.early_stopping, "--early-stopping"),
    ):
        if value is not None and not evaluates:
            add((f"{flag} {value} needs eval data", need_eval))
    if loop.keep_best == "on" and not evaluates:
        add(("--keep-best on needs eval data: the best checkpoint is the one of lowest eval loss",
             need_eval))  # fmt: skip
    if evaluates and keeps_best(loop):
        why = "--early-stopping" if loop.keep_best == "auto" else "--keep-best on"
        steps = eval_every(loop, save_steps)
        if not save_steps:
            add((f"{why} keeps the best checkpoint, but --save-steps 0 saves none",
                 f"use --save-steps {steps} (a multiple of --eval-steps), or --keep-best off"))  # fmt: skip
        elif save_steps % steps:
            add((f"{why}: --save-steps {save_steps} is not a multiple of --eval-steps {steps}: "
                 "the best checkpoint must be one that was evaluated",
                 f"use --save-steps {max(steps, save_steps // steps * steps)}, or --eval-steps "
                 f"{save_steps}"))  # fmt: skip
    if loop.lr_scheduler != "linear" and ds_scheduler:
        add((f"--lr-scheduler {loop.lr_scheduler} is the Trainer's; with --scheduler ds DeepSpeed's "
             "WarmupDecayLR (linear decay) runs instead", "use --scheduler hf, or drop --lr-scheduler"))  # fmt: skip
    if loop.warmup_ratio is not None and "warmup_steps" in given:
        add(("--warmup-ratio and --warmup-steps exclude each other",
             "keep one: --warmup-ratio 0.03 scales with the run, --warmup-steps N is fixed"))  # fmt: skip
    if ds_optimizer and "optim" in given and loop.optim != "auto":
        add((f"--optim {loop.optim} applies to --optimizer hf; with --optimizer ds DeepSpeed's "
             "AdamW steps", f"drop --optim, or use --optimizer hf --optim {loop.optim}"))  # fmt: skip
    if loop.optim in BNB_OPTIMS and offload:
        add((f"--optim {loop.optim} steps on the GPU (bitsandbytes); offloaded states live on the CPU",
             "use --offload none, or --optimizer ds (DeepSpeedCPUAdam) with offload"))  # fmt: skip
    if loop.optim in BNB_OPTIMS and not cuda:
        add((f"--optim {loop.optim} needs CUDA (bitsandbytes)", "use --optim adamw_torch here"))
    return out


def keeps_best(loop: LoopOptions) -> bool:
    return loop.keep_best == "on" or (loop.keep_best == "auto" and loop.early_stopping is not None)


def eval_every(loop: LoopOptions, save_steps: int) -> int:
    """Given, else at each checkpoint; without checkpoints, at the default save interval."""
    if loop.eval_steps is not None:
        return loop.eval_steps
    return save_steps or OutputOptions.save_steps


def resolve_loop(
    loop: LoopOptions, *, full: bool, cuda: bool, ds_optimizer: bool, evaluates: bool,
    save_steps: int, preference: bool = False,
) -> LoopOptions:  # fmt: skip
    optim = loop.optim
    if ds_optimizer:
        optim = "adamw_torch"  # never built: keeps TrainingArguments valid
    elif optim == "auto":
        optim = "adamw_torch_fused" if cuda else "adamw_torch"
    return dataclasses.replace(
        loop,
        optim=optim,
        lr=loop.lr if loop.lr is not None else default_lr(full, preference),
        eval_steps=eval_every(loop, save_steps) if evaluates else None,
        keep_best="on" if evaluates and keeps_best(loop) else "off",
    )


def default_lr(full: bool, preference: bool) -> float:
    """--lr unset: SFT's 2e-5 full / 2e-4 adapters; a preference objective's smaller steps
    (``dojo.run.groups.objective.LR_PREFERENCE``: TRL's and LLaMA-Factory's)."""
    if preference:
        from dojo.run.groups.objective import LR_PREFERENCE

        return LR_PREFERENCE["full" if full else "adapters"]
    return 2e-5 if full else 2e-4
