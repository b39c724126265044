"""Where the run goes: GPUs, CPU processes, machines, and the memory the verdict is judged on."""

from dataclasses import dataclass

from dojo.run.field import ESTIMATE, PLAN, opt


@dataclass(frozen=True)
class DeviceOptions:
    gpus: str | None = opt(
        None, "GPU ids like 0,1 or 'all' [default: all GPUs here, else the CPU]",
        example="0,1", commands=PLAN,
    )  # fmt: skip
    num_gpus: int | None = opt(
        None, "Number of GPUs per node (the first N; DeepSpeed's --num_gpus)",
        lo=1, hi=4096, example="8", commands=PLAN,
    )  # fmt: skip
    nproc: int | None = opt(None, "CPU processes when no GPU is used [default: 1]",
                            lo=1, hi=256, example="2")  # fmt: skip
    num_nodes: int = opt(1, "Machines (with --hostfile for dojo train)",
                         lo=1, hi=4096, example="2", commands=PLAN)  # fmt: skip
    hostfile: str | None = opt(None, "DeepSpeed hostfile for several machines", example="hostfile")
    master_addr: str | None = opt(None, "First machine's address (multi-node)", example="10.0.0.1")
    master_port: int | None = opt(None, "Rendezvous port [default: a free one]",
                                  lo=1024, hi=65535, example="29500")  # fmt: skip
    gpu_memory: float | None = opt(
        None, "GiB per GPU for the verdict [default: the GPUs here]",
        lo=0.1, hi=1e6, example="80", commands=(ESTIMATE,),
    )  # fmt: skip
    cpu_memory: float | None = opt(
        None, "Host RAM per node in GiB for the verdict [default: this machine's when training]",
        lo=0.1, hi=1e9, example="512", commands=(ESTIMATE,),
    )  # fmt: skip
