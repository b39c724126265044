"""What the other layers are handed from a ``Run``: the DeepSpeed JSON and the estimate's Setup."""

from typing import Any

from dojo.run.run import Run


def ds_config(run: Run, spec: Any = None, precision: str = "auto") -> dict[str, Any] | None:
    """The DeepSpeed JSON for ``run``; None for a run without DeepSpeed (--zero none), which
    needs none. ``precision`` "auto" lets TrainingArguments' --bf16/--fp16 fill it (what dojo
    train does); ``dojo config --precision bf16`` writes it out."""
    from dojo.zero.build import build_ds_config

    if not run.zero.deepspeed:
        return None
    return build_ds_config(
        run.zero,
        precision=precision,
        hidden_size=getattr(spec, "hidden_size", None),
        largest_param=spec.vocab_size * spec.hidden_size if spec is not None else None,
    )


def estimate_setup(
    run: Run, gpu_memory_gib: float | None = None, cpu_memory_gib: float | None = None
) -> Any:
    """The ``dojo.estimate.Setup`` that describes ``run``, judged against these memories."""
    from dojo.estimate.setup import Setup

    return Setup(run=run, gpu_memory_gib=gpu_memory_gib, cpu_memory_gib=cpu_memory_gib)
