"""The training process (one per rank): the only modules of dojo that import torch and the
training stack. ``python -m dojo.train.worker --config RUN_DIR/train.json`` runs ``main.main``."""

from collections.abc import MutableMapping


def hide_gpus_on_cpu_runs(env: MutableMapping[str, str]) -> None:
    """A CPU run (``--nproc``, which sets DS_ACCELERATOR=cpu) hides every GPU from its rank.

    DeepSpeed's CPU accelerator sets CUDA_VISIBLE_DEVICES to the rank's slot ("0", "1", ...:
    deepspeed/accelerator/cpu_accelerator.py), so on a machine with GPUs each rank saw one.
    The Trainer then set up NCCL and DeepSpeed's broadcast of the CPU weights failed ("No backend
    type associated with device type cpu"). Must run before torch first touches CUDA.
    """
    if env.get("DS_ACCELERATOR") == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
