"""The training-loop half of the resolver: evaluation, schedule, regularisation, LoRA variants,
logging and reporting. ``dojo.run.resolve`` calls ``problems`` with its other rules (one error
lists them all) and merges ``fields`` into the ``ResolvedRun``.
"""

import importlib.util
from typing import Any

from dojo.run.catalog import OPTIONS
from dojo.run.machine import Machine

REPORTER_MODULES = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}
"""--report-to choice -> the module the Trainer's integration imports."""
_LORA_ONLY = (("dora", "--dora"), ("rslora", "--rslora"), ("modules_to_save", "--modules-to-save"))


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def evaluates(v: dict[str, Any]) -> bool:
    return bool(v.get("eval_data")) or v.get("eval_split") is not None


def keep_best(v: dict[str, Any]) -> bool:
    choice = v.get("keep_best", "auto")
    return choice == "on" or (choice == "auto" and v.get("early_stopping") is not None)


def eval_steps(v: dict[str, Any]) -> int | None:
    """Given, else at each checkpoint; without checkpoints, at the catalogue's save interval."""
    if not evaluates(v):
        return None
    if v.get("eval_steps") is not None:
        return int(v["eval_steps"])
    return int(v["save_steps"] or OPTIONS["save_steps"].default)


def problems(v: dict[str, Any], machine: Machine, given: set[str]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    add = out.append
    eval_on = evaluates(v)
    need_eval = "give held-out rows: --eval-data FILE or --eval-split 0.05"
    if v.get("eval_data") and v.get("eval_split") is not None:
        add(("--eval-data and --eval-split exclude each other",
             "keep --eval-data FILE for a fixed held-out set, or --eval-split to hold out training rows"))  # fmt: skip
    for name, flag in (("eval_steps", "--eval-steps"), ("early_stopping", "--early-stopping")):
        if v.get(name) is not None and not eval_on:
            add((f"{flag} {v[name]} needs eval data", need_eval))
    if v.get("keep_best") == "on" and not eval_on:
        add(
            (
                "--keep-best on needs eval data: the best checkpoint is the one of lowest eval loss",
                need_eval,
            )
        )
    if eval_on and keep_best(v):
        why = "--early-stopping" if v.get("keep_best") == "auto" else "--keep-best on"
        steps = eval_steps(v) or 1
        if not v["save_steps"]:
            add((f"{why} keeps the best checkpoint, but --save-steps 0 saves none",
                 f"use --save-steps {steps} (a multiple of --eval-steps), or --keep-best off"))  # fmt: skip
        elif v["save_steps"] % steps:
            add((f"{why}: --save-steps {v['save_steps']} is not a multiple of --eval-steps {steps}: "
                 "the best checkpoint must be one that was evaluated",
                 f"use --save-steps {max(steps, v['save_steps'] // steps * steps)}, or --eval-steps "
                 f"{v['save_steps']}"))  # fmt: skip
    if v.get("lr_scheduler", "linear") != "linear" and v.get("scheduler") == "ds":
        add((f"--lr-scheduler {v['lr_scheduler']} is the Trainer's; with --scheduler ds DeepSpeed's "
             "WarmupDecayLR (linear decay) runs instead", "use --scheduler hf, or drop --lr-scheduler"))  # fmt: skip
    if v.get("warmup_ratio") is not None and "warmup_steps" in given:
        add(("--warmup-ratio and --warmup-steps exclude each other",
             "keep one: --warmup-ratio 0.03 scales with the run, --warmup-steps N is fixed"))  # fmt: skip
    if v.get("method") == "full":
        for name, flag in _LORA_ONLY:
            if v.get(name):
                add((f"{flag} applies to --method lora or qlora only",
                     f"drop {flag}, or use --method lora"))  # fmt: skip
    if v.get("modules_to_save") is not None and not _names(v["modules_to_save"]):
        add((f"--modules-to-save {v['modules_to_save']!r}: no module name",
             "e.g. --modules-to-save embed_tokens,lm_head"))  # fmt: skip
    report = v.get("report_to", "auto")
    if (
        report in REPORTER_MODULES
        and not machine.assumed
        and not installed(REPORTER_MODULES[report])
    ):
        add((f"--report-to {report}: {report} is not installed here",
             f"pip install {report}, or use --report-to none"))  # fmt: skip
    return out


def fields(v: dict[str, Any]) -> dict[str, Any]:
    """The loop's ResolvedRun fields, every "auto" decided."""
    report = v.get("report_to", "auto")
    if report == "auto":
        # Not added to ``said``: estimate and config resolve it too, where it means nothing.
        report = "tensorboard" if installed("tensorboard") else "none"
    logging = v.get("logging_steps", "auto")
    if logging == "auto":
        steps = v.get("max_steps")
        # Under 100 steps every step; else ~100 points per run. Without --max-steps the total is
        # known at train time only: None = transformers' ratio 0.01 (ceil(1% of the steps)).
        logging = None if steps is None else max(1, steps // 100) if steps >= 100 else 1
    mts = v.get("modules_to_save")
    return {
        "eval_data": tuple(v.get("eval_data") or ()),
        "eval_split": v.get("eval_split"),
        "eval_steps": eval_steps(v),
        "early_stopping": v.get("early_stopping"),
        "keep_best": evaluates(v) and keep_best(v),
        "lr_scheduler": v.get("lr_scheduler", "linear"),
        "warmup_ratio": v.get("warmup_ratio"),
        "weight_decay": v.get("weight_decay", 0.0),
        "max_grad_norm": v.get("max_grad_norm", 1.0),
        "neftune_alpha": v.get("neftune_alpha"),
        "dora": bool(v.get("dora")),
        "rslora": bool(v.get("rslora")),
        "modules_to_save": _names(mts) if mts else (),
        "report_to": () if report == "none" else (report,),
        "logging_steps": logging,
        **data_fields(v),
    }


def data_fields(v: dict[str, Any]) -> dict[str, Any]:
    """--data-columns and --data-ratios, checked (DataError names the flag)."""
    from dojo.train import sources

    columns = tuple(v.get("data_columns") or ())
    sources.parse_columns(columns)
    return {"data_columns": columns, "data_ratios": sources.parse_ratios(v.get("data_ratios"))}


def _names(text: str) -> tuple[str, ...]:
    return tuple(t.strip() for t in str(text).split(",") if t.strip())
