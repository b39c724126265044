"""GPU and host memory of a DeepSpeed ZeRO fine-tune, or of the HF Trainer without DeepSpeed,
term by term (docs/estimate.md).

GPU peak = static + max(backward extras, optimizer-step extras) + allocator reserve + context.
Pure arithmetic on a ModelSpec; no torch, no DeepSpeed.
Example: ``estimate(resolve_model("7b"), Setup(stage=3, num_gpus=8)).gpu_total_gib``.
"""

import math

from dojo.errors import EstimateError
from dojo.estimate.activations import activation_bytes as activation_bytes
from dojo.estimate.activations import activation_phases, eager_scores, split_peak
from dojo.estimate.adapter_extras import (
    dora_norm_transient,
    dora_params,
    modules_to_save_notes,
    saved_modules,
)
from dojo.estimate.comm import comm_bytes
from dojo.estimate.host import host_terms
from dojo.estimate.quant import (
    kbit_load_peak,
    load_note,
    qlora_base_bytes,
    quant_stats_bytes,
    quantized_notes,
)
from dojo.estimate.reserve import (
    FP64,
    allocator_reserve,
    eager_backward_reserve,
    gpu_step_partition,
    grad_norm_copy,
    keeps_grad_partition,
    offload_init_hold,
    softcap_reserve_shortfall,
    step_pages_hole,
    step_remap,
)
from dojo.estimate.result import GIB as GIB
from dojo.estimate.result import MemoryEstimate as MemoryEstimate
from dojo.estimate.setup import Calibration as Calibration
from dojo.estimate.setup import Setup as Setup
from dojo.estimate.setup import validate as validate
from dojo.modelspec import SOFTCAP_MODEL_TYPES, ModelSpec

BF16 = 2  # bytes; params, grads, activations and comm buffers are bf16 (DeepSpeed bf16 mode)
FP32 = 4
# bitsandbytes 0.50 optim/optimizer.py Optimizer2State.init_state: 8-bit m and v are uint8 with
# one fp32 absmax per 256 values each; tensors under min_8bit_size (4096) keep fp32 states.
BNB_8BIT_BYTES = 2 + 2 * FP32 / 256
OPTIM_STATE_BYTES = {
    "adamw_torch": 2.0 * FP32,  # torch's and DeepSpeed's AdamW: fp32 m and v
    "adamw_torch_fused": 2.0 * FP32,
    "adamw_8bit": BNB_8BIT_BYTES,
    "paged_adamw_8bit": BNB_8BIT_BYTES,
    "paged_adamw_32bit": 2.0 * FP32,
}
BNB_PAGED_MIN_NUMEL = 100_000  # get_state_buffer: smaller tensors are not paged
TORCH_ADAMW = ("adamw_torch", "adamw_torch_fused")
"""torch.optim.AdamW: m and v made by zeros_like(param), so in the parameter's dtype (torch
optim/adam.py _init_group); bitsandbytes' states have dtypes of their own."""
REMAP_NOTE_GIB = 0.5
"""What ZeRO-1/2's step may map anew beyond the total (reserve.step_remap) gets a note from this
size."""


def _z3_largest_sub_group(spec: ModelSpec, s: Setup, p_t: int) -> float:
    """Elements of ZeRO-3's largest optimizer sub-group on one rank.

    DeepSpeed (stage3 ``_create_fp16_sub_groups``) adds whole parameter partitions, in the
    optimizer's order, to a group until it holds at least ``sub_group_size``: a group overshoots
    the tile by up to one parameter, and a parameter larger than the tile (a 128k-256k
    vocabulary's embedding against dojo's 1e8) is a group of its own. Full fine-tuning follows
    the HF Trainer's decay group (embedding, each layer's linears, an untied head; norms and
    biases go to the small second group); adapters are far below any tile."""
    n = s.world_size
    tile = s.sub_group_size
    if p_t / n <= tile or s.run.model.method != "full":
        return min(p_t / n, tile)
    sizes = [spec.embedding_params]
    attention = len(spec.attention_linears())
    for count, moe, linears in spec.layer_kinds():
        layer = [a * b for _, a, b, _ in linears]
        if moe:
            # In module order, after attention: the routed experts, fused into two 3-D
            # parameters (transformers 5: gate_up_proj [E, 2I, h] and down_proj [E, h, I]),
            # then the shared expert, if any.
            experts = spec.num_experts * spec.expert_params
            layer[attention:attention] = [experts * 2 // 3, experts // 3]
        sizes += layer * count
    sizes += [spec.head_params] if spec.head_params else []
    largest = group = 0
    for size in sizes:
        group += -(-size // n)  # partition_numel: ceil(numel / world)
        if group >= tile:
            largest, group = max(largest, group), 0
    return float(max(largest, group))


def _trainable(spec: ModelSpec, s: Setup) -> tuple[int, float, int]:
    """(trainable params, bytes of the frozen base, largest trainable tensor)."""
    p = spec.params
    if s.run.model.method == "full":
        return p, 0.0, spec.largest_layer_params
    p_t = spec.lora_params(s.lora.lora_r, s.lora.target_names)
    if p_t == 0:
        raise EstimateError("--lora-targets matches no linear layer", hint="use q_proj,v_proj,...")
    largest_t = s.lora.lora_r * max(max(a, b) for _, a, b, _ in spec.linears())
    if s.lora.target_names is None and spec.lora_adapts_experts:
        largest_t = max(largest_t, spec.expert_lora_largest(s.lora.lora_r))
    saved, saved_largest, _ = saved_modules(spec, s.lora.modules_to_save)
    p_t += saved + dora_params(spec, s)
    largest_t = max(largest_t, saved_largest)
    if s.run.model.method == "lora":
        return p_t, float(BF16 * p), largest_t
    # NF4 + double quant for decoder linears; embeddings, head, norms and biases stay 16-bit,
    # or fp32 where prepare_model_for_kbit_training upcast them and no DeepSpeed cast them back.
    return p_t, qlora_base_bytes(spec, FP32 if s.fp32_rest else BF16), largest_t


def _paged_share(spec: ModelSpec, s: Setup) -> float:
    """Fraction of the trainable params whose optimizer states bitsandbytes pages."""
    if not s.run.loop.optim.startswith("paged"):
        return 0.0
    if (
        s.run.model.method == "full" or s.deepspeed
    ):  # ZeRO steps one flat fp32 partition: one big tensor
        return 1.0
    names = spec.adapted_names(s.lora.target_names)
    sizes = [s.lora.lora_r * d for n, a, b, _ in spec.linears() if n in names for d in (a, b)]
    return sum(x for x in sizes if x >= BNB_PAGED_MIN_NUMEL) / max(1, sum(sizes))


def estimate(spec: ModelSpec, setup: Setup) -> MemoryEstimate:
    """GPU peak per GPU and host RAM per node for one setup (docs/estimate.md, "The formula")."""
    validate(setup)
    s, cal = setup, setup.calibration
    n = s.world_size
    notes = quantized_notes(spec, s)
    if s.kernels.precision == "fp32":
        notes.append("--precision fp32 is not modelled: every term counts 16-bit weights, "
                     "gradients and activations (fp32 ones take about twice as much)")  # fmt: skip
    p_t, w_base, largest_t = _trainable(spec, s)
    notes += modules_to_save_notes(spec, s)
    scores = eager_scores(spec, s)  # 0 unless eager: the backward's reserve and its note
    short = softcap_reserve_shortfall(s, scores, spec.model_type in SOFTCAP_MODEL_TYPES)
    if short >= 0.5 * GIB:
        notes.append(
            f"soft-capped eager attention under checkpointing at {s.run.data.seq_len:,} tokens a "
            "row: the allocator holds more reserved beside the backward than this estimate counts "
            "(a measured Gemma-2-2B run at 16k peaked 2.5 B a score element above it), up to "
            f"{short / GIB:.1f} GiB here, so leave "
            "that headroom (docs/estimate.md, Not modelled)"
        )
    if s.run.model.method == "qlora" and s.zero.stage == 3:
        notes.append(
            "ZeRO-3 + QLoRA stores the 4-bit weights as bf16 (bnb_4bit_quant_storage) so ZeRO-3 "
            "partitions them like bf16 ones; their quantization statistics stay whole on every "
            "GPU"
        )
    t_bytes = FP32 if s.fp32_adapters else BF16  # bytes per trainable param (and its grad)
    stored = w_base + t_bytes * p_t if s.run.model.method != "full" else float(BF16 * spec.params)
    z3 = s.zero.stage == 3
    opt_off = s.zero.offload != "none"
    reference = _reference_bytes(spec, s)
    if reference:
        notes.append(
            f"reference model: a frozen bf16 copy of the weights, {reference / GIB:.2f} GiB per "
            "GPU (in the params column)" + (" sharded like the policy" if z3 else "")
        )
    if opt_off and s.zero.level in (1, 2) and s.kernels.expandable and s.run.model.method == "full":
        notes.append(
            "full fine-tuning at ZeRO-1/2 with optimizer offload: the reserve counted here is the "
            "larger of what DeepSpeed's set-up leaves reserved and what the gradients' copies to "
            "the host hold; where training's blocks nearly fill the set-up's pages, measured runs "
            "peaked up to 1.2 GiB above both, so leave that headroom (docs/estimate.md, "
            "Allocator reserve)"
        )
    if opt_off and s.zero.level < 3 and s.zero.offload == "nvme":
        notes.append(
            "ZeRO-1/2 have no NVMe swapper: offload_optimizer nvme keeps states in CPU RAM"
        )
    # --- static GPU terms ---
    # ZeRO-3 partitions the 4-bit weights' packed data but not their quantization statistics
    # (bitsandbytes keeps them in the weight's quant_state, not a parameter): every GPU holds
    # them all (bench/kbit_z3_cpu.py).
    stats = quant_stats_bytes(spec, s) if z3 else 0.0
    sharded = 0.0 if s.zero.offload_param != "none" else (stored - stats) / n
    params = stats + sharded if z3 else stored
    grads: float
    if s.zero.level in (0, 1):
        grads = t_bytes * p_t  # ZeRO-1 keeps full grads until the boundary reduce-scatter
    elif s.zero.level == 2:
        grads = BF16 * largest_t if opt_off else BF16 * p_t / n  # offload: one temp per param
    else:
        grads = 0.0 if opt_off else BF16 * p_t / n
    dp = n if s.zero.level >= 1 else 1
    # DeepSpeed's bf16 mode keeps an fp32 master copy for the optimizer; without DeepSpeed the
    # optimizer steps the parameters in their own dtype.
    master = FP32 if s.deepspeed else 0
    state_b = _state_bytes(s, t_bytes)
    optim = 0.0 if opt_off else (master + state_b) * p_t / dp
    paged = 0.0 if opt_off else state_b * p_t / dp * _paged_share(spec, s)
    if opt_off:
        step = 0.0  # DeepSpeed's CPU Adam steps on the host (ZeRO-1/2's norms: below)
    elif not s.deepspeed:
        step = _plain_step(s, t_bytes, p_t)
    elif s.zero.stage == 0:
        step = FP32 * p_t  # FP16_UnfusedOptimizer: an fp32 copy of every param's grad
    elif s.zero.stage in (1, 2):
        partition = gpu_step_partition(s, p_t)
        assert partition is not None  # ZeRO-1/2 under DeepSpeed, no optimizer offload
        step = _zero12_step(partition, largest_t)
        if step > 6 * p_t / n:
            notes.append(
                f"the optimizer step's largest block is the gradient norm's fp64 copy of one "
                f"{math.ceil(step / FP64):,}-value gradient ({step / GIB:.1f} GiB, more "
                "than the flat gradient and its fp32 upcast): DeepSpeed ZeRO-1/2 take the norm "
                "in fp64, one tensor at a time"
            )
    else:
        step = 6 * _z3_largest_sub_group(spec, s, p_t)  # stage3 _prepare_fp32_grad_for_sub_group
    # --- backward working set ---
    params_work = grads_work = 0.0
    if z3:
        params_work, grads_work = _z3_working_set(spec, s, stored, p_t, largest_t)
    dequantized = 0
    if s.run.model.method == "qlora":
        biggest_w = max(a * b for _, a, b, _ in spec.linears())
        dequantized = BF16 * biggest_w  # bnb dequantizes one weight to bf16 per matmul
    # DoRA's weight norm comes after its layer's matmul has freed the dequantized weight.
    params_work += max(dequantized, dora_norm_transient(spec, s))
    kept, loss_phase, layer_phase, loss_term = activation_phases(spec, s)
    comm_current, comm_docs = comm_bytes(s, p_t, s.reduce_bucket(spec))
    if opt_off and s.deepspeed and s.zero.level in (1, 2):
        norm = grad_norm_copy(largest_t, -(-p_t // n))
        step = _offload_norm_phase(spec, s, norm, largest_t, comm_current, kept, layer_phase)
        if norm >= GIB / 2:
            notes.append(
                f"with optimizer offload ZeRO-1/2 take each gradient's norm on the GPU in the "
                f"backward, as an fp64 copy: {norm / GIB:.1f} GiB for the largest "
                f"({math.ceil(norm / FP64):,} values), beside the reduce bucket (in the "
                "optimizer column where it is the peak)"
            )
    # The loss is the first thing the backward does. At ZeRO 0-2 (and without DeepSpeed) no
    # gradient exists yet then: ZeRO-1/2 allocate the IPG buckets and the gradient partition
    # from the first grad hook (stage_1_and_2.py process_gradients -> setup_buckets, and
    # grads_in_partition, both freed again by _release_ipg_buffers before the step); ZeRO-0's
    # FP16_UnfusedOptimizer and torch's zero_grad set grads to None. So the loss phase stands
    # beside the static terms less those grads and buckets; the layer phase has them all.
    not_yet = 0.0
    # Accumulating micro-batches keep the grads from the first backward on: param.grad without
    # DeepSpeed and at ZeRO-0/1, the partition's all_grad_tensors at ZeRO-2
    # (bench/accum_grads_cpu.py), so only a one-micro-batch step's loss comes before them.
    accumulating = s.run.loop.grad_accum > 1
    if s.zero.level < 3 and s.zero.offload == "none" and not accumulating:
        # DDP's buckets (no DeepSpeed) are built with the model, before the first backward.
        not_yet = grads + (comm_current if s.deepspeed else 0)
        if keeps_grad_partition(s.run):  # held from the step before (dojo.train.worker.zero_grads)
            not_yet -= min(grads, BF16 * (gpu_step_partition(s, p_t) or 0))
    later = _grads_after_layer_peak(spec, s, grads, kept)
    activations, logits = split_peak(kept, loss_phase, layer_phase - later, loss_term, not_yet)
    if later:
        notes.append(
            f"the backward peaks before most gradients exist (one process without DeepSpeed or "
            f"checkpointing: torch makes each as the backward reaches it): "
            f"{later / GIB:.1f} GiB of them are not yet made then, taken off the activ column"
        )
    # The backward's working set in full (the loss blocks are allocated before the grads).
    churn = kept + max(loss_phase, layer_phase) + params_work + grads_work
    tokens = s.batch_rows * s.run.data.seq_len
    # HF's loss without Liger: the bf16 logits (2 B x T x V) are the largest single block of the
    # backward phase; nothing that size is asked for again until the next loss.
    bf16_logits = BF16 * tokens * spec.vocab_size if s.full_logits else 0
    logits_block = bf16_logits
    if s.full_logits and s.run.data.packing:
        # Packed rows make every step's loss the same shape, so each of its logits-sized
        # blocks (bf16 logits, fp32 upcast, log-softmax, their grads; the loss term) asks for
        # exactly the size it got the step before. One small block that lives across the
        # step (the next forward's, placed by best fit into the big free segments) leaves the
        # old segment a little too small, the allocator cudaMallocs a new one, and the loss
        # blocks end up reserved twice (measured on the H200: 13.5 and 14.1 GiB reserved
        # beyond allocated for 13.7 and 13.9 GiB of loss term). Padded batches vary in length and
        # reuse them (plain rows: about the bf16 logits block).
        logits_block = loss_term
    # torch's foreach step allocates a temporary per parameter, each no larger than the blocks
    # the backward freed; only DeepSpeed's flat transients need segments of their own.
    flat_step = step if s.deepspeed else 0.0
    reserve = allocator_reserve(s, churn, flat_step, p_t, largest_t, logits_block, bf16_logits)
    reserve += eager_backward_reserve(s, scores)
    remap = 0.0
    if s.kernels.expandable:
        backward_extra = params_work + grads_work + activations + logits + comm_current
        largest_freed = max(kept, loss_phase)
        reserve += step_pages_hole(s, p_t, largest_t, largest_freed, churn, step, backward_extra)
        remap = step_remap(s, p_t, largest_t)  # not in the total: the verdict counts it
        if remap >= REMAP_NOTE_GIB * GIB:
            notes.append(
                f"the allocator may hold up to {remap / GIB:.1f} GiB more than the total: "
                "ZeRO-1/2's optimizer step can map its largest transient (the fp32 gradient, or "
                "the fp64 norm copy of a trained embedding or head) anew at step 2 or 3 instead "
                "of reusing its pages (some checkpointed runs do by step 3 and keep it, most never "
                "do); the verdict counts that case"
            )
    backward = params_work + grads_work + activations + logits + comm_current
    step_phase = step + (comm_current if z3 else 0)
    trained = params + reference + grads + optim + max(backward, step_phase) + reserve
    load_excess = kbit_load_peak(spec, s) - trained
    if load_excess > 0:
        reserve += load_excess
        trained += load_excess
        notes.append(load_note(s, load_excess / GIB))
    init_excess = offload_init_hold(s, params, p_t) - trained
    if init_excess > 0:
        reserve += init_excess
        notes.append(
            f"DeepSpeed's set-up holds {init_excess / GIB:.1f} GiB more than training (in the "
            "reserve column): the loaded bf16 weights, their flat copy and the partition's copy "
            "on its way to the host stay reserved for training to reuse"
        )
    c = host_terms(spec, s, p_t, largest_t, stored)
    if c["nvme"]:
        notes.append(f"NVMe holds {c['nvme'] / GIB:.1f} GiB per node")
    if paged:
        notes.append(
            f"{paged / GIB:.1f} GiB of {s.run.loop.optim} states are paged (CUDA unified memory): "
            "counted on the GPU, they move to host RAM when the GPU runs short (slower)"
        )
    return MemoryEstimate(
        spec=spec,
        setup=s,
        trainable_params=p_t,
        params=int(params),
        params_work=int(params_work),
        gradients=int(grads),
        grads_work=int(grads_work),
        optimizer_states=int(optim),
        optimizer_paged=int(paged),
        step=int(step),
        activations=activations,
        logits=logits,
        comm_current=comm_current,
        comm_docs=comm_docs,
        fragmentation=int(reserve),
        context=int(cal.cuda_context_gib * GIB),
        nccl=int(cal.nccl_gib * GIB) if n > 1 else 0,
        cpu_params=c["params"],
        cpu_gradients=c["gradients"],
        cpu_optimizer_states=c["optimizer_states"],
        cpu_buffers=c["buffers"],
        cpu_load=c["load"],
        cpu_process=c["process"],
        cpu_pinned_rounding=c["pinned_rounding"],
        nvme=c["nvme"],
        notes=tuple(notes),
        reference=int(reference),
        load_excess=int(max(0.0, load_excess)),
        step_remap=int(remap),
    )


def _state_bytes(s: Setup, t_bytes: int) -> float:
    """Optimizer state bytes per trainable parameter. Under DeepSpeed the optimizer steps the
    fp32 master copy, so torch's AdamW keeps fp32 m and v; without DeepSpeed it steps the
    parameters themselves and its states take their dtype: bf16 for a bf16 full fine-tune, fp32
    for PEFT's fp32 adapters. bitsandbytes' states keep their own dtypes either way."""
    optim = s.run.loop.optim
    if not s.deepspeed and optim in TORCH_ADAMW:
        return 2.0 * t_bytes
    return OPTIM_STATE_BYTES[optim]


def _zero12_step(partition: int, largest_t: int) -> float:
    """ZeRO-1/2's optimizer-step transient beside the static terms (stage_1_and_2.py step): first
    the gradient norm's fp64 copy of one piece (``reserve.grad_norm_copy``), then the flat bf16
    gradient and its fp32 upcast, 6 B x the partition. The norm's copy is the larger where one
    piece is over 3/4 of the partition: a trained head or embedding copy beside LoRA adapters
    (--modules-to-save), or an embedding on many GPUs."""
    return float(max(6 * partition, grad_norm_copy(largest_t, partition)))


def _offload_norm_phase(
    spec: ModelSpec,
    s: Setup,
    norm: float,
    largest_t: int,
    comm: float,
    kept: float,
    layer_phase: float,
) -> float:
    """ZeRO-1/2 with optimizer offload, beside the static terms: each gradient's norm is taken on
    the GPU as its reduce bucket is emptied (stage_1_and_2.py reduce_ipg_grads ->
    copy_grads_in_partition -> set_norm_for_param_grad_in_gpu), as an fp64 copy of the rank's
    piece (``norm``, ``grad_norm_copy``), beside the bucket; then its fp32 upcast, half that, goes
    to the host. The largest piece is the embedding or head of a full fine-tune: 8 B x 311M
    values (2.3 GiB) for Qwen3-1.7B, more than its checkpointed backward's peak. What else is live
    then depends on when that gradient is reduced:

    - in the backward's hooks (ZeRO-2, and ZeRO-1 with overlap_comm): a tied embedding's gradient
      is the backward's last, after the activations are freed; an untied head's is the first,
      beside the kept activations, and a layer's backward too when the head waits in the bucket
      for the next layers' gradients (so does any other tensor, reduced inside its layer's
      backward);
    - after the backward (ZeRO-1 without overlap_comm, stage_1_and_2.py reduce_gradients): the
      activations are freed.

    A tensor larger than the bucket is reduced from its own gradient, which stays beside the
    copy (at ZeRO-1, whose gradients are all kept, the static terms count it already); a smaller
    one has moved into the bucket, and at ZeRO-1 its own block is free then. The copy's size and
    when it comes (tied, untied, ZeRO-1 and 2) are measured on the CPU by
    bench/offload_norm_cpu.py.
    """
    raw = BF16 * largest_t if largest_t > s.reduce_bucket(spec) else 0
    head = spec.embedding_params  # an untied head is the embedding's size
    if (s.zero.level == 1 and not s.overlap) or (largest_t == head and spec.tied_embeddings):
        live = 0.0
    elif largest_t == head and raw:
        live = kept
    else:
        live = kept + layer_phase
    if s.zero.level == 1:  # its gradients are all in the static terms, this one too
        return comm + norm + live - (0 if raw else BF16 * largest_t)
    return comm + raw + norm + live


def _plain_step(s: Setup, t_bytes: int, p_t: int) -> float:
    """The optimizer step's transient without DeepSpeed. torch's foreach AdamW (adamw_torch)
    makes sqrt(v) for every parameter of a dtype at once (optim/adam.py _multi_tensor_adam:
    ``exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs)``), a copy of v; the fused
    kernel (adamw_torch_fused) and bitsandbytes update in place."""
    return float(t_bytes * p_t) if s.run.loop.optim == "adamw_torch" else 0.0


def _reference_bytes(spec: ModelSpec, s: Setup) -> float:
    """DPO/KTO full fine-tuning without precomputed log-probs: TRL keeps a frozen copy of the
    starting weights (16-bit) as its reference and prepares it with DeepSpeed
    (trl/models/utils.py prepare_deepspeed): sharded at ZeRO-3 like the policy (its partition
    on the host with --offload-param), whole on every GPU below (ZeRO stage 0). LoRA/QLoRA
    score the reference with the adapter disabled: no copy."""
    if s.reference != "copy":
        return 0.0
    if s.zero.stage == 3:
        return 0.0 if s.zero.offload_param != "none" else BF16 * spec.params / s.world_size
    return float(BF16 * spec.params)


def _z3_working_set(
    spec: ModelSpec, s: Setup, stored: float, p_t: int, largest_t: int
) -> tuple[float, float]:
    """(gathered params, unreduced grads) bytes that ZeRO-3's backward holds beside the static
    terms, from DeepSpeed 0.19.8's source:

    - Gathering (partition_parameters.py all_gather_coalesced): when every param's partition
      group has one rank it calls ``_no_gather_coalesced``, whose NoGatherHandle sets
      ``param.data = param.ds_tensor.data.to(device).view(ds_shape)``: the partition IS the full
      tensor, so at world size 1 a gathered, prefetched or retained param costs nothing (unless
      the partition is offloaded to the CPU: then ``.to`` copies it onto the GPU).
    - Otherwise the gathered set is one fetch unit (the largest single module, or with
      ``z3_leaf_layer`` the whole decoder layer: z3_leaf_module makes fetch_sub_module and
      release_sub_module take ``iter_params(layer, recurse=True)`` at once), plus the prefetch
      (partitioned_param_coordinator.fetch_sub_module: up to min(max_live - available,
      stage3_prefetch_bucket_size) numel), plus params kept for reuse within
      stage3_max_reuse_distance (__params_to_release; not seen for 4-bit weights, H200 row 19).
    - Grads (stage3.py create_reduce_and_remove_grad_hooks): a normal param is reduced from its
      own grad-accumulation hook, so one full grad (the largest trainable tensor) waits for a
      bucket; a leaf module's params get no such hook: ``reduce_leaf_module_grads`` runs from
      the layer's full backward hook, so every trainable grad of the layer is alive at once.
    """
    n = s.world_size
    # Grads alive at once: a tied embedding's grad from the lm_head backward (the first) waits
    # for the embedding backward (the last) before its hook fires, so it lives through the whole
    # backward; beside it one layer's unit: all the layer's trainable grads (leaf) or its
    # biggest trainable tensor. An untied head's grad is reduced on its own, at the start.
    if s.run.model.method == "full":
        layer_t = spec.layer_params
        tensor_t = max(a * b + (b if bias else 0) for _, a, b, bias in spec.linears())
        tied_t = spec.embedding_params if spec.tied_embeddings else 0
    else:
        layer_t, tensor_t, tied_t = p_t // max(1, spec.num_layers), largest_t, 0
    unit_t = layer_t if s.z3_leaf_layer else tensor_t
    grads_work = float(BF16 * max(tied_t + unit_t, largest_t))
    if n == 1 and s.zero.offload_param == "none":  # offloaded: .to(device) copies to the GPU
        return 0.0, grads_work
    storage_elems = stored / BF16
    ratio = storage_elems / spec.params  # 4-bit storage packs QLoRA weights
    unit: float = spec.largest_layer_params
    if s.z3_leaf_layer:
        unit = max(spec.layer_params * ratio, spec.embedding_params)
    prefetched = max(0.0, min(s.prefetch_size(spec), s.stage3_max_live_parameters - unit))
    kept = s.run.model.method != "qlora"
    reuse = min(s.stage3_max_reuse_distance, storage_elems) if kept else 0
    small = spec.num_layers * spec.norms_per_layer * spec.hidden_size + spec.hidden_size
    params_work = BF16 * min(unit + prefetched + reuse + small, storage_elems)
    return params_work, grads_work


def _grads_after_layer_peak(spec: ModelSpec, s: Setup, grads: float, kept: float) -> float:
    """Bytes of the gradients not yet made when the layer phase peaks, for full fine-tuning in
    one process without DeepSpeed or checkpointing. torch makes each grad as the backward
    reaches its parameter (the Trainer's zero_grad leaves them None; one process has no DDP
    buckets), while each layer's backward frees what the layer kept: the phase peaks at the
    first layer (every kept tensor, the head's grad and one layer's), or at the last where a
    layer's grads outweigh what it frees (every grad). The allocator's history of a Llama-3.2-1B
    run on the H200 holds, at its peak, no layer's grad beside the head's (heldout-moe-families,
    fit row). Elsewhere 0: DeepSpeed and DDP allocate their gradient buffers whole, a
    checkpointed backward keeps little while every grad accumulates, and with gradient
    accumulation the second micro-batch's backward starts beside every grad of the first
    (Setup.peak_before_grads)."""
    if not s.peak_before_grads:
        return 0.0
    per_param = grads / max(1, spec.params)
    layers = spec.num_layers
    first = per_param * (spec.vocab_size * spec.hidden_size + spec.hidden_size + spec.layer_params)
    last = grads - (layers - 1) * kept / layers
    return max(0.0, grads - max(first, last))
