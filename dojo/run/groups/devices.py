"""Where the run goes: GPUs, CPU processes, machines, and the memory the verdict is judged on."""

import re
from dataclasses import dataclass

from dojo.run.field import ESTIMATE, PLAN, opt, short

_HOST = re.compile(r"[A-Za-z0-9_\[][A-Za-z0-9_.:%\[\]-]*", re.ASCII)
"""A host name (RFC 1123, and the underscores clusters use anyway), IPv4 or IPv6 address: what
DeepSpeed's runner passes on to torch's rendezvous as MASTER_ADDR. A leading "-" would reach the
runner and pdsh as an option."""


@dataclass(frozen=True)
class DeviceOptions:
    gpus: str | None = opt(
        None, "GPU ids like 0,1 (nvidia-smi's) or 'all' [default: those CUDA_VISIBLE_DEVICES shows "
        "when set, else all GPUs here, else the CPU]",
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


def device_problems(d: DeviceOptions) -> list[tuple[str, str]]:
    """(message, hint) for the machine options that contradict each other."""
    out: list[tuple[str, str]] = []
    addr = d.master_addr
    if addr is not None and not _HOST.fullmatch(addr):
        out.append((f"--master-addr {short(addr)}: not a host name or address",
                    "give the first machine's name or IP address as the others reach it, e.g. "
                    "--master-addr 10.0.0.1 or worker-1"))  # fmt: skip
    elif addr is not None and d.hostfile is None:
        # The runner rendezvouses a run on this machine alone on localhost: the address would
        # be dropped.
        out.append((f"--master-addr {addr} applies to a run on several machines (--hostfile)",
                    "drop --master-addr (one machine meets on localhost), or add --hostfile FILE "
                    "--num-nodes N"))  # fmt: skip
    return out
