"""The run folder, checkpoints and logging."""

import dataclasses
import importlib.util
from dataclasses import dataclass
from typing import Literal

from dojo.run.field import opt

REPORTER_MODULES = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}
"""--report-to choice -> the module the Trainer's integration imports."""


@dataclass(frozen=True)
class OutputOptions:
    output_dir: str = opt(
        "runs/dojo",
        "Run folder: the run record, ds_config.json, checkpoints, weights",
        flags=("--output-dir", "-o"),
        example="runs/my-run",
    )
    resume: bool = opt(False, "Continue from the latest complete checkpoint")
    save_steps: int = opt(
        50, "Checkpoint every N steps, 0 = never", "a lost run costs at most 50 steps",
        lo=0, hi=10**9, example="200",
    )  # fmt: skip
    save_total_limit: int = opt(
        2, "Checkpoints kept", "the latest and one before it, in case the last is cut short",
        lo=1, hi=10**6, example="2",
    )  # fmt: skip
    save_model: bool = opt(True, "Write the final model or adapter")
    logging_steps: int | Literal["auto"] = opt(
        "auto",
        "Log loss and lr every N steps",
        "auto = every step for runs under 100 steps, else every 1% of the steps",
        lo=1, hi=10**9, example="10", metavar="INT|auto",
    )  # fmt: skip
    report_to: Literal["auto", "tensorboard", "wandb", "mlflow", "none"] = opt(
        "auto",
        "Where the Trainer logs metrics: auto | tensorboard | wandb | mlflow | none",
        "auto = tensorboard when installed (in RUN_DIR/tensorboard), else none",
    )


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def output_problems(out: OutputOptions, assumed_machine: bool) -> list[tuple[str, str]]:
    report = out.report_to
    if (
        report in REPORTER_MODULES
        and not assumed_machine
        and not installed(REPORTER_MODULES[report])
    ):
        return [(f"--report-to {report}: {report} is not installed here",
                 f"pip install {report}, or use --report-to none")]  # fmt: skip
    return []


def resolve_output(out: OutputOptions, max_steps: int | None) -> OutputOptions:
    report = out.report_to
    if report == "auto":
        # Not said: estimate and config resolve it too, where it means nothing.
        report = "tensorboard" if installed("tensorboard") else "none"
    logging = out.logging_steps
    if logging == "auto" and max_steps is not None:
        # Under 100 steps every step; else ~100 points per run. Without --max-steps the total is
        # known at train time only: "auto" stays (the worker logs every 1% of the steps).
        logging = max(1, max_steps // 100) if max_steps >= 100 else 1
    return dataclasses.replace(out, report_to=report, logging_steps=logging)
