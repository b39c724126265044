"""DeepSpeed's communication buffers: the gradient buckets (as DeepSpeed's source allocates them,
and as its docs' 4.5x rule reads), ZeRO-0's allreduce flattening and DDP's buckets without
DeepSpeed (docs/estimate.md, "Communication buckets")."""

from dojo.errors import EstimateError
from dojo.estimate.setup import Setup

BF16 = 2
FP32 = 4
DS_ALLREDUCE_BYTES_ELEMS = 500_000_000  # engine.py MEMORY_OPT_ALLREDUCE_SIZE (ZeRO-0 flatten)


def comm_buffer_bytes(
    stage: int,
    reduce_bucket_size: int,
    allgather_bucket_size: int,
    overlap_comm: bool,
    rule: str,
) -> int:
    """Bytes DeepSpeed allocates for gradient buckets (per GPU) under one of two readings.

    ``current`` (DeepSpeed >= 0.4, read in 0.19.8): ZeRO-1/2 allocate one bf16 IPG buffer of
    ``reduce_bucket_size`` elements and a second one when overlap_comm is on (stage_1_and_2.py
    ``setup_buckets``); ZeRO-3 allocates one, never doubled (stage3.py IPG); ZeRO-0 has no bucket.
    allgather_bucket_size allocates nothing on modern torch (all_gather_into_tensor in place).
    ``docs`` (HF/DeepSpeed docs, DeepSpeed <= 0.3.16): overlap_comm costs 4.5 x (allgather +
    reduce bucket) x 2 bytes, i.e. 9e9 bytes at 5e8/5e8. The docs state it for ZeRO-2 with
    overlap_comm on only; every other case falls back to ``current``.
    """
    if rule not in ("current", "docs"):
        raise EstimateError(f"--overlap-rule {rule!r} is not a rule", hint="use current or docs")
    if reduce_bucket_size <= 0 or allgather_bucket_size <= 0:
        bad = reduce_bucket_size if reduce_bucket_size <= 0 else allgather_bucket_size
        raise EstimateError(
            f"--bucket-size {bad}: bucket sizes must be positive",
            hint="use e.g. --bucket-size 500000000, or leave it out for HF's auto (hidden^2)",
        )
    if stage not in (0, 1, 2, 3):
        raise EstimateError(f"--zero {stage}: no such ZeRO stage", hint="use 0, 1, 2 or 3")
    if rule == "docs" and overlap_comm and stage in (1, 2):
        return int(4.5 * (allgather_bucket_size + reduce_bucket_size) * BF16)
    if stage in (1, 2):
        return BF16 * reduce_bucket_size * (2 if overlap_comm else 1)
    if stage == 3:
        return BF16 * reduce_bucket_size
    return 0


def comm_bytes(s: Setup, p_t: int, rbs: int) -> tuple[int, int]:
    """(current, docs) communication-buffer bytes in the backward phase (docs/estimate.md,
    "Communication buckets")."""
    kappa = s.calibration.kappa
    n = s.world_size
    if not s.deepspeed:
        # DDP (more than one rank) keeps every trainable gradient a second time in its flat
        # buckets (torch/csrc/distributed/c10d/reducer.cpp initialize_buckets; the Trainer leaves
        # gradient_as_bucket_view off), allocated with the model, in the gradients' dtype.
        cur = (FP32 if s.fp32_adapters else BF16) * p_t if n > 1 else 0
        return cur, cur
    if s.zero.stage == 0:
        # engine allreduce flattens up to MEMORY_OPT_ALLREDUCE_SIZE elements at a time, DP only
        cur = BF16 * min(DS_ALLREDUCE_BYTES_ELEMS, p_t) if n > 1 else 0
        return cur, cur
    allocated = comm_buffer_bytes(s.zero.level, rbs, rbs, s.overlap, "current")
    flatten = kappa * BF16 * min(rbs, p_t)
    transient = flatten
    if s.zero.stage == 3:  # reduce-scatter copies in flight: up to 2 with overlap_comm, 1 without
        transient = flatten * (2 if s.overlap else 1) if n > 1 else 0.0
    cur = int(allocated + transient)
    docs_alloc = comm_buffer_bytes(s.zero.level, rbs, rbs, s.overlap, "docs")
    docs = docs_alloc if docs_alloc != allocated else cur  # the docs figure is the whole cost
    return cur, docs
