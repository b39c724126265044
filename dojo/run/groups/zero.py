"""DeepSpeed ZeRO: stage, offload, buckets, ZeRO-3 fetching, who builds optimizer and schedule.

``resolve_zero`` decides every "auto" for a known model and world size; with neither known
(``dojo config`` alone) the buckets stay "auto" and the HF Trainer fills them from the model.
Stage ``none`` is a run without DeepSpeed: the HF Trainer's own loop (DDP across ranks), no ZeRO
optimizer, no buckets, no offload.
"""

import dataclasses
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from dojo.run.field import ALL, Auto, opt

Device = Literal["none", "cpu", "nvme"]
Stage = Literal["none", 0, 1, 2, 3]
NO_DEEPSPEED = "none"
"""The stage of a run without DeepSpeed (``--zero none``)."""
MAX_BUCKET = 10**12
"""Elements. A 1e12-element bucket is 2 TB of bf16: anything above is a typo, not a bucket."""
DS_BUCKET = 500_000_000
"""DeepSpeed's own reduce/allgather bucket (runtime/zero/config.py), elements."""
SUB_GROUP_SIZE = 1_000_000_000
"""ZeRO-3 optimizer-step tile (elements), DeepSpeed's default: the step's grad transient is
6 B x min(P/N, this) (stage3 _prepare_fp32_grad_for_sub_group: a bf16 flatten, then fp32)."""
SUB_GROUP_GPU = 100_000_000
"""dojo's tile when the optimizer steps on the GPU: a 0.6 GB transient instead of 6 GB, for ten
times as many (GPU-fast) optimizer calls. With offload DeepSpeed's 1e9 stays: the tile sizes the
pinned host buffers and the CPU Adam's work per call."""
Z3_MAX_LEAF = 1_000_000_000
"""Largest module dojo makes a ZeRO-3 leaf (elements): DeepSpeed's own cap for leaves chosen by
stage3_module_granularity_threshold (parameter_offload.py Z3_MAX_LEAF_SIZE)."""
_CLASS = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")


@dataclass(frozen=True)
class ZeroOptions:
    stage: Stage = opt(
        2,
        "ZeRO stage 0-3, or none: the HF Trainer without DeepSpeed (DDP across GPUs; no fp32 "
        "master copy, the optimizer steps the weights in their own dtype); dojo estimate also "
        "takes all: every stage, bare and with CPU offload",
        "shards gradients and optimizer states at no extra communication",
        flags=("--zero", "--stage", "--zero-stage"),
        example="3",
        metavar="none|0|1|2|3",
        commands=ALL,
    )
    offload: Device = opt(
        "none",
        "Optimizer-state offload: none | cpu | nvme (ZeRO 1-3; at ZeRO-3 the parameters follow "
        "unless --offload-param says otherwise)",
        commands=ALL,
    )
    offload_param: Literal["auto", "none", "cpu", "nvme"] = opt(
        "auto",
        "Parameter offload (ZeRO-3 only): auto | none | cpu | nvme",
        "auto = as --offload at ZeRO-3, none below",
        commands=ALL,
    )
    nvme_path: str | None = opt(
        None, "Folder on a fast local NVMe disk, needed for nvme offload", example="/local_nvme",
        commands=ALL,
    )  # fmt: skip
    overlap_comm: bool | None = opt(
        None,
        "Overlap gradient reduction with backward [default: on, except at ZeRO-1/2 on one GPU and "
        "for adapters whose gradients fit one bucket]",
        "where there is communication to hide it pays; at ZeRO-1/2 it costs one extra reduce "
        "bucket and synchronises the device before each bucket's reduce",
        commands=ALL,
    )
    overflow_check: bool = opt(
        False,
        "bf16: test every gradient for inf/NaN and skip that step (DeepSpeed "
        "bf16.check_grad_overflow)",
        "bf16 has no loss scale to adjust, and the test costs two reductions per gradient tensor "
        "and two host syncs a step; dojo train stops at a logged loss that is not finite instead",
        commands=ALL,
    )
    bucket_size: int | Auto = opt(
        "auto",
        "reduce_bucket_size in elements, e.g. 5e8",
        "auto = 5e8 (capped at the model's size) for full fine-tuning: fewer, larger reductions; "
        "for LoRA/QLoRA every adapter gradient in one bucket; hidden_size^2 (HF's auto) when the "
        "model is unknown",
        lo=1,
        hi=MAX_BUCKET,
        example="5e8",
        metavar="ELEMENTS|auto",
        commands=ALL,
    )
    prefetch_bucket_size: int | Auto = opt(
        "auto",
        "ZeRO-3: parameters fetched ahead of use, in elements (stage3_prefetch_bucket_size)",
        "auto = 5e8 capped at the model's size: the next layers' weights arrive while this one "
        "computes; HF's 0.9 x hidden^2 holds less than one MLP weight",
        lo=1,
        hi=MAX_BUCKET,
        example="5e8",
        metavar="ELEMENTS|auto",
        commands=ALL,
    )
    sub_group_size: int | Auto = opt(
        "auto",
        "ZeRO-3: optimizer-step tile in elements (sub_group_size)",
        "auto = 1e8 with the optimizer on the GPU (the step makes a 6-byte-per-element fp32 copy "
        "of each tile's gradients: 5.6 GiB at DeepSpeed's 1e9); 1e9 with offload, where the tile "
        "sizes the pinned host buffers",
        lo=1,
        hi=MAX_BUCKET,
        example="1e8",
        metavar="ELEMENTS|auto",
        commands=ALL,
    )
    z3_leaf: str = opt(
        "auto",
        "ZeRO-3: gather each decoder layer whole (DeepSpeed leaf modules): auto | off | CLASS[,CLASS]",
        "auto = the decoder layer of dense models whose layer is under 1e9 params: one fetch and "
        "one set of hooks per layer instead of per linear, which makes small layers host-bound",
        example="LlamaDecoderLayer",
        metavar="auto|off|CLASS",
        commands=ALL,
    )
    optimizer: Literal["hf", "ds"] = opt(
        "hf",
        "Who builds the optimizer: hf (TrainingArguments optim) or ds (a DeepSpeed AdamW block)",
        "with a DeepSpeed block the TrainingArguments optimizer is silently ignored",
        commands=ALL,
    )
    scheduler: Literal["hf", "ds"] = opt(
        "hf",
        "Who builds the LR schedule: hf (TrainingArguments) or ds (DeepSpeed WarmupDecayLR)",
        "one place decides the schedule: --lr-scheduler",
        commands=ALL,
    )

    @property
    def deepspeed(self) -> bool:
        """The run goes through DeepSpeed's engine (every stage but none)."""
        return self.stage != NO_DEEPSPEED

    @property
    def level(self) -> int:
        """The stage as a number for the rules that compare stages: a run without DeepSpeed
        partitions nothing, as at stage 0."""
        return 0 if self.stage == NO_DEEPSPEED else int(self.stage)

    @property
    def param_device(self) -> str:
        """Where parameters go: at ZeRO-3 they follow --offload unless --offload-param says
        otherwise; below ZeRO-3 nothing partitions them."""
        if self.offload_param != "auto":
            return self.offload_param
        return self.offload if self.stage == 3 else "none"

    @property
    def leaf_classes(self) -> tuple[str, ...]:
        """ZeRO-3 leaf module classes; () = DeepSpeed's per-module hooks."""
        if self.stage != 3 or self.z3_leaf in ("auto", "off"):
            return ()
        return tuple(c.strip() for c in self.z3_leaf.split(",") if c.strip())

    @property
    def overlap(self) -> bool:
        """overlap_comm as DeepSpeed runs it (unset: HF's example configs' on)."""
        return True if self.overlap_comm is None else self.overlap_comm


@dataclass(frozen=True)
class StageClash:
    """An option the run's ZeRO stage cannot take: ``reason`` names the option and what it
    needs, ``why`` (may be "") says why; the message puts the stage asked between them."""

    reason: str
    why: str
    hint: str

    def problem(self, stage: Stage) -> tuple[str, str]:
        """(message, hint), the message naming the stage asked."""
        why = f": {self.why}" if self.why else ""
        return f"{self.reason} (got --zero {stage}){why}", self.hint


def zero_problems(z: ZeroOptions, *, need_path: bool = True) -> list[tuple[str, str]]:
    """(message, hint) for every rule the ZeRO flags break together; ``need_path``: nvme offload
    needs --nvme-path (not for an estimate of the run)."""
    out = [c.problem(z.stage) for c in zero_clashes(z)]
    if "nvme" in (z.offload, z.param_device) and not z.nvme_path and need_path:
        flag = "--offload" if z.offload == "nvme" else "--offload-param"
        out.append((f"{flag} nvme needs --nvme-path",
                    "pass --nvme-path DIR (a folder on a fast local NVMe disk), or use cpu offload"))  # fmt: skip
    if z.z3_leaf not in ("auto", "off") and not all(
        _CLASS.fullmatch(c.strip()) for c in z.z3_leaf.split(",")
    ):
        out.append((f"--z3-leaf {z.z3_leaf!r}: not a class name",
                    "use auto, off, or the decoder layer's class, e.g. LlamaDecoderLayer"))  # fmt: skip
    return out


def zero_clashes(z: ZeroOptions) -> list[StageClash]:
    """The offload options ``z``'s stage cannot take, and what only DeepSpeed does asked of a run
    without it (the ZeRO-3 options are ``stage3_clashes``')."""
    out: list[StageClash] = []
    if not z.deepspeed:
        out += _no_deepspeed_clashes(z)
    elif z.offload != "none" and z.stage == 0:
        out.append(StageClash(f"--offload {z.offload} needs ZeRO stage 1, 2 or 3", "",
                              f"use --zero 2 --offload {z.offload}, or drop --offload"))  # fmt: skip
    if z.offload_param not in ("auto", "none") and z.stage != 3:
        out.append(StageClash(f"--offload-param {z.offload_param} needs --zero 3",
                              "only ZeRO-3 partitions parameters",
                              f"use --zero 3, or --offload {z.offload_param} for the optimizer only"))  # fmt: skip
    return out


STAGE3_ONLY = {
    "prefetch_bucket_size": ("--prefetch-bucket-size", ("auto",)),
    "sub_group_size": ("--sub-group-size", ("auto",)),
    "z3_leaf": ("--z3-leaf", ("auto", "off")),
}
"""Options only ZeRO-3 reads -> (flag, the values that ask nothing of the run)."""


def stage3_problems(z: ZeroOptions, given: set[str] | frozenset[str]) -> list[tuple[str, str]]:
    """(message, hint) for each of ``stage3_clashes``."""
    return [c.problem(z.stage) for c in stage3_clashes(z, given)]


def stage3_clashes(z: ZeroOptions, given: set[str] | frozenset[str]) -> list[StageClash]:
    """A ZeRO-3 option the user set (``given``) on a run below ZeRO-3, where it would be dropped
    unsaid. Their defaults ask nothing, and a --print-config file below ZeRO-3 writes those."""
    if z.stage == 3:
        return []
    out = []
    for name, (flag, idle) in STAGE3_ONLY.items():
        value = getattr(z, name)
        if name in given and value not in idle:
            out.append(StageClash(f"{flag} {value} applies to ZeRO-3 only", "",
                                  f"use --zero 3, or drop {flag}"))  # fmt: skip
    return out


def nvme_path_problem(z: ZeroOptions, said: list[str]) -> tuple[str, str] | None:
    """--nvme-path for a run on this machine: DeepSpeed makes its swap folders under it with
    os.makedirs (swap_tensor: optimizer_utils.py, partitioned_param_swapper.py), so a missing
    folder is made (and said); a file, or a folder that cannot be made or written, fails there,
    after the model is loaded. Another machine's path (several nodes, a plan) is not checked."""
    path = z.nvme_path
    if path is None or "nvme" not in (z.offload if z.stage else "none", z.param_device):
        return None
    p = Path(path).expanduser()
    if p.exists() and not p.is_dir():
        return (f"--nvme-path {path}: is a file, not a folder",
                "give a folder on a fast local NVMe disk, e.g. --nvme-path /local_nvme")  # fmt: skip
    near = next(a for a in (p, *p.absolute().parents) if a.exists())
    if not near.is_dir():
        return (f"--nvme-path {path}: {near} is a file, so the folder cannot be made",
                "give a folder on a fast local NVMe disk, e.g. --nvme-path /local_nvme")  # fmt: skip
    if not os.access(near, os.W_OK | os.X_OK):
        what = "is not writable" if near == p else f"cannot be made: {near} is not writable"
        return (f"--nvme-path {path}: {what}",
                f"mkdir -p {path} as a user who may, and give it to the user training, or "
                "choose a folder you can write")  # fmt: skip
    if near != p:
        said.append(f"nvme path: {path} does not exist; DeepSpeed makes it (mkdir -p) when the "
                    "run starts")  # fmt: skip
    return None


def leaf_problem(z: ZeroOptions, spec: Any, remote_code: bool = False) -> tuple[str, str] | None:
    """--z3-leaf CLASS that the known model cannot hold: DeepSpeed would match no module and
    keep its per-module hooks. A class of transformers' modeling code is named after the model's
    type (LlamaMLP, Qwen2MoeSparseMoeBlock), so only a name outside it is refused; a name inside
    it the train worker checks against the loaded model. ``remote_code``: the model's own code
    (--trust-remote-code) names its classes as it likes."""
    if spec is None or not z.leaf_classes or remote_code:
        return None
    known = leaf_choices(spec)
    # The model's own prefix, as its type spells it (qwen2_moe) and its layer class does
    # (Gemma3DecoderLayer of gemma3_text, GPTNeoXLayer of gpt_neox).
    layer = str(spec.decoder_layer_class).removesuffix("DecoderLayer").removesuffix("Layer")
    prefixes = (_squash(spec.model_type), _squash(layer))
    foreign = [c for c in z.leaf_classes if not _squash(c.rsplit(".", 1)[-1]).startswith(prefixes)]
    if not foreign:
        return None
    return (f"--z3-leaf {z.z3_leaf}: a {spec.model_type} model has no class {foreign[0]}",
            f"use auto, off, or one of its classes: {', '.join(known)}")  # fmt: skip


def leaf_choices(spec: Any) -> tuple[str, ...]:
    """The leaf classes dojo knows in ``spec``'s model: its decoder layer, and the MoE block
    DeepSpeed's own defaults name for its type."""
    from dojo.zero.build import DS_LEAF_DEFAULTS  # dojo.zero.build imports this module

    blocks = [c.rsplit(".", 1)[-1] for c in DS_LEAF_DEFAULTS
              if f".{spec.model_type}.modeling_{spec.model_type}." in c]  # fmt: skip
    return (str(spec.decoder_layer_class), *(blocks if spec.is_moe else []))


def _squash(name: str) -> str:
    return name.replace("_", "").lower()


def _no_deepspeed_clashes(z: ZeroOptions) -> list[StageClash]:
    """What only DeepSpeed does, asked of a run without it (the reduce bucket is DeepSpeed's too,
    but it changes no result: it stays unused; the ZeRO-3 options are ``stage3_clashes``')."""
    out = []
    if z.offload != "none":
        out.append(StageClash(f"--offload {z.offload} needs DeepSpeed",
                              "the plain Trainer keeps the optimizer states on the GPU",
                              f"use --zero 2 --offload {z.offload}, or drop --offload"))  # fmt: skip
    if z.optimizer == "ds":
        out.append(StageClash("--optimizer ds needs DeepSpeed", "",
                              "drop --optimizer ds: the Trainer builds --optim"))  # fmt: skip
    if z.scheduler == "ds":
        out.append(StageClash("--scheduler ds needs DeepSpeed", "",
                              "drop --scheduler ds: the Trainer builds --lr-scheduler"))  # fmt: skip
    if z.overflow_check:
        out.append(StageClash("--overflow-check is DeepSpeed's bf16 overflow test", "",
                              "drop --overflow-check, or use --zero 0-3"))  # fmt: skip
    return out


def hf_auto_reduce_bucket(hidden: int) -> int:
    """transformers trainer_config_finalize's "auto" reduce_bucket_size: hidden_size^2."""
    return hidden * hidden


def hf_auto_prefetch(hidden: int) -> int:
    """transformers trainer_config_finalize's "auto" stage3_prefetch_bucket_size: 0.9 x hidden^2
    (at least 1 element)."""
    return max(1, int(0.9 * hidden * hidden))


def sub_group_for(offload: str) -> int:
    """The ZeRO-3 tile dojo writes: SUB_GROUP_GPU, or DeepSpeed's own with optimizer offload."""
    return SUB_GROUP_SIZE if offload != "none" else SUB_GROUP_GPU


def resolve_zero(
    z: ZeroOptions,
    *,
    full: bool,
    spec: Any,
    adapter_params: int | None,
    world: int | None,
    given: set[str],
    said: list[str],
) -> ZeroOptions:
    """Every "auto" of the group decided. ``full``: full fine-tuning; ``adapter_params``: the
    LoRA/QLoRA trainable params when known; ``world``: ranks, None when nobody said."""
    if not z.deepspeed:
        return dataclasses.replace(
            z, offload="none", offload_param="none", bucket_size="auto", overlap_comm=False,
            prefetch_bucket_size="auto", sub_group_size="auto", z3_leaf="off",
        )  # fmt: skip
    params = getattr(spec, "params", None)
    hidden = getattr(spec, "hidden_size", None)
    # DeepSpeed allocates whole buckets however small the model: cap them at its size.
    big = min(DS_BUCKET, params) if params else DS_BUCKET
    bucket: int | Literal["auto"] = z.bucket_size
    if bucket == "auto":
        if full and z.stage in (1, 2, 3):
            bucket = big
        elif hidden:
            bucket = hf_auto_reduce_bucket(hidden)
        if adapter_params and z.stage in (1, 2):
            # Every adapter grad in one bucket: one reduce per step instead of one per h^2
            # elements, each of which (with overlap_comm) synchronises the whole device.
            bucket = min(DS_BUCKET, adapter_params)
    out = dataclasses.replace(
        z,
        offload=z.offload if z.stage else "none",
        offload_param=z.param_device,  # type: ignore[arg-type]
        bucket_size=bucket,
        overlap_comm=_overlap(z, adapter_params, bucket, world, given, said),
    )
    if z.stage != 3:
        return dataclasses.replace(out, z3_leaf="off", prefetch_bucket_size="auto",
                                   sub_group_size="auto")  # fmt: skip
    prefetch = big if z.prefetch_bucket_size == "auto" else z.prefetch_bucket_size
    tile = sub_group_for(z.offload) if z.sub_group_size == "auto" else z.sub_group_size
    return dataclasses.replace(
        out,
        prefetch_bucket_size=prefetch,
        sub_group_size=tile,
        z3_leaf=_leaf(z.z3_leaf, spec, said),
    )


def _leaf(choice: str, spec: Any, said: list[str]) -> str:
    if choice != "auto":
        return choice
    if spec is None:
        return "off"
    if spec.is_moe:
        said.append("z3 leaf off: an MoE layer holds every expert; DeepSpeed's own MoE-block "
                    "leaves apply")  # fmt: skip
        return "off"
    if spec.layer_params > Z3_MAX_LEAF:
        said.append(f"z3 leaf off: a decoder layer has {spec.layer_params:,} params "
                    f"(> {Z3_MAX_LEAF:,.0f}), too many to gather at once")  # fmt: skip
        return "off"
    said.append(f"z3 leaf: each {spec.decoder_layer_class} is gathered whole, one fetch and one "
                "set of DeepSpeed hooks per layer instead of per linear")  # fmt: skip
    return str(spec.decoder_layer_class)


def _overlap(
    z: ZeroOptions, adapter: int | None, bucket: int | str, world: int | None,
    given: set[str], said: list[str],
) -> bool:  # fmt: skip
    """overlap_comm as asked; unasked, off at ZeRO-1/2 where there is nothing to overlap: on one
    GPU (no communication at all), and when one bucket holds every trainable grad (adapters: the
    reduce runs once, after backward). DeepSpeed's overlap path synchronises the whole device
    before each bucket's reduce (stage_1_and_2.py), which costs speed where nothing overlaps."""
    if z.overlap_comm is not None or "overlap_comm" in given or z.stage not in (1, 2):
        return z.overlap
    if world == 1:
        said.append("overlap_comm off: one process, no gradient communication to overlap")
        return False
    if adapter and isinstance(bucket, int) and bucket >= adapter:
        said.append(f"overlap_comm off: the {adapter:,} adapter params reduce in one bucket "
                    "after backward, nothing to overlap")  # fmt: skip
        return False
    return True
