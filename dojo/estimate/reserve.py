"""The caching allocator's reserve at the peak: reserved but free memory beside what is
allocated (docs/estimate.md#allocator-reserve)."""

from dojo.estimate.setup import Setup
from dojo.run.groups.zero import ZeroOptions
from dojo.run.run import Run

BF16 = 2
FP32 = 4
FP64 = 8


def allocator_reserve(
    s: Setup,
    churn: float,
    step: float,
    p_t: int,
    largest_t: int,
    logits_block: float,
    bf16_logits: float,
) -> float:
    """Reserved-but-free memory at the peak (PyTorch's caching allocator, CUDACachingAllocator).

    A request over 10 MiB gets its own segment rounded to 2 MiB (smaller ones share 20 MiB
    segments); a segment is split for later requests but never merged with another, and
    nothing is handed back without empty_cache(). The backward's working set (activations,
    logits, gathered ZeRO-3 params: ``churn``) is freed before the optimizer step, in blocks no
    larger than one activation; the step's flat transients (bf16 flatten + fp32 upcast of the
    gradient partition, or one ZeRO-3 sub-group) are single tensors of hundreds of MiB to GiB
    that fit in none of them, so they get segments of their own the first step and the two
    sets stay reserved side by side: min(churn, step) is held twice. The comm buckets are
    allocated once and kept, so they are not in the churn. Without Liger the bf16 logits
    block (2 B x T x V) is the largest transient of the backward phase: when the step is
    small (LoRA) it is what stays reserved (measured on the H200: 2.16 GiB against 1.96 for
    Llama-3.2-1B LoRA, 6.71 against max(6.91, 1.96) for full ZeRO-2).
    expandable_segments maps the step into the pages the backward freed where a freed run is
    large enough (no second set); what stays is a fraction of one fp32 logits block without Liger
    (Calibration), and at ZeRO-1/2 what ``step_pages_hole`` names (the caller adds it: it needs
    the phases' sizes).
    """
    n = s.world_size
    if s.kernels.expandable:
        # HF's loss upcasts the logits: an fp32 block, twice the bf16 one
        reserve = s.calibration.expandable_logits_reserve * 2 * bf16_logits
        if s.zero.offload != "none":  # gradients held for their in-flight host copies
            cal = s.calibration.offload_reserve_expandable
            reserve += cal * (BF16 * p_t / n + FP32 * largest_t)
        return reserve
    if s.zero.offload != "none":
        return s.calibration.offload_reserve * (BF16 * p_t / n + FP32 * largest_t)
    if s.zero.level < 3 and not s.kernels.fused_loss:
        # The bf16 logits block is free at the backward (loss) peak and the wrong size for
        # the step's flat partitions, which keep segments of their own: both stay reserved.
        return max(min(churn, step) + bf16_logits, logits_block)
    return max(min(churn, step), logits_block)


EAGER_RESERVE_PER_SCORE = 2.0
"""Bytes a score element the allocator holds reserved beyond the allocated peak at a recomputed
eager layer's backward (``eager_backward_reserve``)."""


def eager_backward_reserve(s: Setup, scores: int) -> float:
    """What stays reserved around eager attention's score-sized blocks under checkpointing. The
    recomputed forward frees its bf16 scores, fp32 upcast and bf16 probabilities (2, 4 and 2 B a
    score element) in one layer's order, and the backward then asks for three fp32 blocks (4 B
    each) beside the kept softmax output: a block lands in a freed run only where the run is as
    large as it, so part of the forward's pages stays reserved beside the backward's. Allocator
    histories on an H100 (bench/results/memsnap/heldout-eager-checkpointed): 3.9 GiB above the
    allocated peak for Llama-3.2-1B LoRA at 1 x 8192 (0.5 of one layer's fp32 scores), 5.5 GiB
    for Gemma-2-2B QLoRA at 1 x 12288 (1.2 of them). The estimate charges one bf16 score block
    (2 B a score element), fitted on that set's five dojo runs (its plain-script run is SDPA) and
    heldout-users-next's Gemma-2 8k row (the totals then -4.9% to +9.0%); ``scores`` is 0 under
    any other attention kernel.
    Without checkpointing every layer keeps its blocks, and nothing is charged (not measured)."""
    if not s.kernels.grad_ckpt:
        return 0.0
    return EAGER_RESERVE_PER_SCORE * scores


SOFTCAP_RESERVE_NOTE_FROM = 12288
"""Tokens a row from which Gemma-2's soft-capped eager attention held more reserved beside the
checkpointed backward than ``eager_backward_reserve`` charges: Gemma-2-2B QLoRA held 4.9 B a score
element above its allocated peak at 1 x 12288 and 5.8 at 1 x 16384, against 2.0-4.1 for Llama-,
Qwen- and TinyLlama-shaped runs at 4k-8k."""
SOFTCAP_SHORT_PER_SCORE = 2.5
"""What the 1 x 16384 run's device peak came out above the estimate's total (5.0 GiB), in bytes a
score element of a layer: the note's headroom, not in the total."""


def softcap_reserve_shortfall(s: Setup, scores: int, softcap: bool) -> float:
    """The headroom the note for soft-capped eager attention at long rows names (docs/estimate.md,
    Not modelled): 0 for shorter rows, other models and runs without checkpointing."""
    if not (softcap and s.kernels.grad_ckpt and s.run.data.seq_len >= SOFTCAP_RESERVE_NOTE_FROM):
        return 0.0
    return SOFTCAP_SHORT_PER_SCORE * scores


def offload_init_hold(s: Setup, params: float, p_t: int) -> float:
    """What the allocator holds reserved from ZeRO-1/2's set-up with optimizer offload: the
    model's bf16 weights as loaded (``params``, the frozen ones included), the flat copy of the
    trained ones DeepSpeed builds while the loaded tensors still exist (stage_1_and_2.py
    __init__: flatten_dense_tensors_aligned on the GPU when it has room), and the GPU clone of the
    rank's partition of that copy before it goes to the host as the fp32 master
    (``weights_partition = ...detach().clone().to(device=cpu)``). The loaded tensors are freed
    once the weights point into the flat copy, but their pages and the clone's stay reserved (no
    empty_cache() after them); training then allocates into them. Allocator histories on an H100
    (bench/results/memsnap/heldout-offload-norm) and the peaks of one-GPU offload runs: reserved
    is 3.00-3.01 x the bf16 weights in 8 of 12 full ZeRO-1/2 runs under expandable segments
    (Llama-3.2-3B, Llama-3.1-8B and Mistral-7B at 8 layers, Gemma-2-2B, Qwen2.5-1.5B/3B, Qwen3-1.7B)
    and never below it. On several GPUs the clone is 1/N of the copy and may land in the freed
    pages; the estimate charges it whole (not measured). A bound the training terms can only
    raise: 0 outside ZeRO-1/2 with offload."""
    if s.zero.stage not in (1, 2) or s.zero.offload == "none":  # stage "none": no DeepSpeed
        return 0.0
    return params + BF16 * p_t * (1 + 1 / s.world_size)


def step_pages_hole(
    s: Setup,
    p_t: int,
    largest_t: int,
    largest_freed: float,
    churn: float,
    step: float,
    backward_extra: float,
) -> float:
    """What ZeRO-1/2's optimizer step leaves reserved under expandable segments, beyond the
    allocated peak. The step asks for partition-sized blocks (stage_1_and_2.py step: the fp64
    norm copy of each gradient piece, the flat bf16 gradient, its fp32 upcast; on the first
    step AdamW's m and v), each contiguous in the segment's virtual range. The pages the
    backward freed (``churn``: activations, loss blocks) stay mapped; a block lands in them only
    where one freed run is as large as it. The largest run is about the larger of the
    activations the forward kept (allocated one after another) and the loss phase's blocks
    (``largest_freed``).

    - Runs smaller than the fp32 upcast (4 B x partition): the step's big blocks are mapped
      anew beside them and all the freed pages stay reserved (allocator history on the H200,
      Qwen3-1.7B full ZeRO-2 2 x 2048 without checkpointing, 6.1 GiB of kept activations
      against a 6.4 GiB upcast: holes of 9.6, 6.4 and 6.3 GiB at the end); the fp64 norm copy
      lands in them when it fits (``_norm_hole`` otherwise).
    - Runs as large as the upcast take the step's blocks: only the norm copy's hole stays.
    - Without checkpointing, in both cases, one bf16 partition's pages (2 B x partition) more
      stay reserved beyond the allocated peak. Where the upcast does not fit the freed run, the
      next backward's bf16 gradient partition (made at its first bucket reduction) takes the
      last upcast's freed pages when what the forward left of the activations' run is just
      short of it, and the step maps its upcast anew (allocator history on the H200,
      Llama-3.2-3B full ZeRO-1 and ZeRO-2 2 x 2048: holes of 19.6, 12.0 and 7.9 GiB at the
      end, two upcasts' worth). Where it fits, TinyLlama's ZeRO-1 4 x 2048 history ends with a
      hole of exactly 2 B x its partition beside the backward's peak. Whether a partition
      fits what is left is a matter of MiB (one Qwen3-1.7B setting held 7.0 GiB beyond its
      peak in one call and 11.1 in another), so the estimate charges the larger case. With
      checkpointing the forward keeps only the layer inputs and the flat gradient gets pages of
      its own the first step, where the partition lands (``step_remap`` is what a later step
      may add).

    In the first case the holes are beside the step, not the backward: only what the step phase
    then holds above the backward's allocated peak shows in the device total."""
    partition = gpu_step_partition(s, p_t)
    if partition is None:
        return 0.0
    norm_copy = grad_norm_copy(largest_t, partition)
    second = 0.0 if s.kernels.grad_ckpt else BF16 * partition  # see the docstring
    if largest_freed >= FP32 * partition:
        return _norm_hole(norm_copy, partition) + second
    norm = 0.0 if norm_copy <= largest_freed else _norm_hole(norm_copy, partition)
    return max(0.0, step + churn + second + norm - max(backward_extra, step))


def step_remap(s: Setup, p_t: int, largest_t: int) -> float:
    """What ZeRO-1/2's step may hold beyond ``step_pages_hole`` with checkpointing under
    expandable segments, not in the total: its largest transient mapped anew at some step instead
    of into the pages it had the step before: the fp32 upcast of the gradient partition (4 B x
    partition), or the gradient norm's fp64 copy where a trained embedding or head makes that the
    larger (``grad_norm_copy``). Between two steps the next backward's bf16 gradient partition
    (made at its first bucket reduction, stage_1_and_2.py copy_grads_in_partition) is placed by
    best fit: where the first step's bf16 flat copy left a hole of its own size, it lands there;
    where that hole had merged with free pages beside it (the first step found a free tail at the
    end of the segment and grew into it), it lands in the pages the step freed and the step's
    transient is mapped anew, and kept. Allocator histories (bench/results/memsnap/
    heldout-step-upcast, heldout-step-remap) show it at step 2 or 3: Qwen2.5-3B full 4 x 2048
    maps its 11.5 GiB upcast anew at step 2, Llama-3.2-3B LoRA with an embedding copy its 2.9 GiB
    norm copy at step 2. Whether the first step finds that tail is a matter of MiB, not of sizes
    the settings give: Qwen2.5-1.5B full took it at 4 x 2048 packed and not at 2 x 4096 unpacked.
    Of 32 checkpointed runs measured, 12 took it (a setting run twice did the same both times);
    8 runs of 30 steps that had not by step 3 never did; so the total charges the case most runs
    take, and the verdict counts this one ("tight" where it would cross the card). 0 without
    checkpointing (``step_pages_hole`` charges the larger case there), with offload or outside
    ZeRO-1/2; the caller takes it under expandable segments only, as it does ``step_pages_hole``.
    Where dojo's worker keeps the gradient partition (``keeps_grad_partition``) the next
    backward's partition is the one the step before read, and the step finds its upcast's pages
    again: 0 (allocator histories on an H100, bench/results/memsnap/keep-grad: the Qwen2.5 runs
    above held 35.7 and 68.0 GiB at their 36.7 and 69.6 GiB totals), unless the norm copy is the
    larger (an embedding on many GPUs): kept beside LoRA adapters and a trained embedding, that
    copy was still mapped anew."""
    partition = gpu_step_partition(s, p_t)
    if partition is None or not s.kernels.grad_ckpt:
        return 0.0
    upcast, norm_copy = float(FP32 * partition), grad_norm_copy(largest_t, partition)
    if keeps_grad_partition(s.run):  # a norm copy larger than the upcast was still mapped anew
        return norm_copy if norm_copy > upcast else 0.0
    return max(upcast, norm_copy)


def keeps_grad_partition(run: Run) -> bool:
    """Where dojo's worker keeps ZeRO-1/2's bf16 gradient partition from one step to the next
    (dojo.train.worker.zero_grads): checkpointed full fine-tuning (SFT) with the fused loss under
    expandable segments, its optimizer stepping on the GPU: the runs whose step could otherwise map
    its fp32 upcast (4 B x the partition) anew at step 2 or 3 (``step_remap``). The partition is
    then held from the second forward on, through the loss, where DeepSpeed had not made it yet.

    Not elsewhere, as measured on an H100 with the partition kept (bench/results/memsnap/
    keep-grad): a trained embedding or head beside LoRA adapters still mapped its fp64 norm copy
    anew (Llama-3.2-3B with embed_tokens: 20.8 GiB, 19.2 without), and HF's unfused loss held more
    (Qwen2.5-0.5B 1 x 8192 without Liger: 30.6 GiB, 28.6 without); nor at ZeRO-2 with gradient
    accumulation, where every micro-batch's backward makes a partition of its own and the kept one
    serves only the first."""
    return (
        _zero12_on_gpu(run.zero)
        and run.model.method == "full"
        and not run.objective.preference
        and run.kernels.fused_loss
        and run.kernels.grad_ckpt
        and run.kernels.expandable
        and run.device == "cuda"
        and (run.zero.stage == 1 or run.loop.grad_accum == 1)
    )


def gpu_step_partition(s: Setup, p_t: int) -> int | None:
    """The rank's gradient partition where ZeRO-1/2 step it on the GPU, rounded up (DeepSpeed
    pads the flat groups to split evenly); None at ZeRO-0/3, without DeepSpeed, or with optimizer
    offload (the step is taken on the host; each gradient's norm on the GPU in the backward,
    ``dojo.estimate.model._offload_norm_phase``)."""
    if not _zero12_on_gpu(s.zero):
        return None
    return -(-p_t // s.world_size)


def _zero12_on_gpu(zero: ZeroOptions) -> bool:
    """ZeRO-1/2 under DeepSpeed without optimizer offload: the gradient partition, its norm and
    the step are on the GPU (``gpu_step_partition``, ``keeps_grad_partition``)."""
    return zero.stage in (1, 2) and zero.deepspeed and zero.offload == "none"


def grad_norm_copy(largest_t: int, partition: float) -> float:
    """ZeRO-1/2's gradient norm, taken before the step's flat gradient: get_grad_norm_direct
    copies each gradient piece of the rank's partition ``.to(torch.double)``, one at a time
    (deepspeed/runtime/zero/stage_1_and_2.py, zero/utils.py get_norm_dtype), so 8 B x the
    largest piece; a piece never crosses the partition's edge."""
    return FP64 * min(largest_t, partition)


def _norm_hole(norm_copy: float, partition: int) -> float:
    """ZeRO-1/2 clip by a gradient norm taken in fp64: get_grad_norm_direct copies each gradient
    piece of the rank's partition ``.to(get_norm_dtype())``, torch.double on CUDA, one at a time
    (deepspeed/runtime/zero/stage_1_and_2.py, zero/utils.py). On the first step that 8 B copy of
    the largest piece comes before the step's flat bf16 gradient (2 B x partition), its fp32
    upcast and the optimizer's first m and v; all of them are larger, so none reuses its pages
    and under expandable segments it stays reserved beside them. Read from the allocator's
    history (bench/memsnap.py, H200, Gemma-2-2B full ZeRO-2 1 x 2048: a 4.395 GiB hole, 8 B
    x its 590M-value embedding, of the 6.84 GiB reserved beyond the allocated peak). Where the
    flat gradient is the smaller (an embedding over a quarter of the model), it lands in the
    hole instead. ``norm_copy`` = 8 B x min(largest piece, partition); ZeRO-1/2 without offload
    only (``step_pages_hole`` decides)."""
    return float(norm_copy) if norm_copy < BF16 * partition else 0.0
