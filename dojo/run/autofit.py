"""--compile auto's memory rule: compile (with Liger off) only where the run still fits the GPU.

Compile's "auto" (``resolve.compile_auto_pays``) turns Liger's fused loss off, so the logits
come back in fp32: 11.5 GiB more at Llama-3.2-1B LoRA 4 x 2048 (docs/benchmarks.md, session 7).
When dojo's estimate of that run is not "fits" on the GPUs, the run resolves again with
``--compile off`` (Liger's "auto" then on) and says why. ``dojo train`` and ``dojo estimate`` both
call this, so the estimate describes the run train would launch. Pure: no torch.
"""

import dataclasses
from collections.abc import Callable
from typing import Any

from dojo.run.resolved import ResolvedRun


def fit_compile(
    values: dict[str, Any],
    run: ResolvedRun,
    spec: Any,
    gpu_memory_gib: float | None,
    again: Callable[[dict[str, Any]], ResolvedRun],
) -> ResolvedRun:
    """``run`` as resolved, or ``again({**values, "compile": "off"})`` when compile was dojo's own
    choice and its estimate does not fit ``gpu_memory_gib``. Unknown memory or model: kept."""
    if values.get("compile", "auto") != "auto" or not run.compile:
        return run
    if gpu_memory_gib is None or spec is None:
        return run
    from dojo.estimate.model import estimate
    from dojo.run import render

    est = estimate(spec, render.estimate_setup(run, gpu_memory_gib, None))
    if est.verdict == "fits":
        return run
    alt = again({**values, "compile": "off"})
    why = (
        f"compile off: with compile (Liger off) this run needs about {est.gpu_total_gib:.1f} GiB "
        f"per GPU ({est.verdict} on {gpu_memory_gib:.1f} GiB); Liger's fused loss needs less"
    )
    # An explicit --compile off says nothing of compile in alt.assumed: this line is the only one.
    return dataclasses.replace(alt, assumed=(*alt.assumed, why))
