"""GPU and host memory of a DeepSpeed ZeRO fine-tune, or of the HF Trainer without DeepSpeed,
term by term (docs/estimate.md).

GPU peak = static + max(backward extras, optimizer-step extras) + allocator reserve + context.
Pure arithmetic on a ModelSpec; no torch, no DeepSpeed.
Example: ``estimate(resolve_model("7b"), Setup(stage=3, num_gpus=8)).gpu_total_gib``.
"""

from dojo.errors import EstimateError
from dojo.estimate.activations import activation_bytes as activation_bytes
from dojo.estimate.activations import activation_phases, split_peak
from dojo.estimate.host import host_terms
from dojo.estimate.result import GIB as GIB
from dojo.estimate.result import MemoryEstimate as MemoryEstimate
from dojo.estimate.setup import Calibration as Calibration
from dojo.estimate.setup import Setup as Setup
from dojo.estimate.setup import validate as validate
from dojo.modelspec import ModelSpec

BF16 = 2  # bytes; params, grads, activations and comm buffers are bf16 (DeepSpeed bf16 mode)
FP32 = 4
FP64 = 8
# bitsandbytes 0.50 NF4 with double quant, measured: 0.5 B packed + 8-bit absmax per 64 values +
# fp32 second-level constants per 256 blocks (docs/estimate.md, "LoRA and QLoRA"; QLoRA paper sec 3).
NF4_DQ_BYTES = 0.5159
NF4_BYTES = 0.5625  # without double quant: 0.5 B + an fp32 absmax per 64 values
BNB_4BIT = "bitsandbytes 4-bit"  # ModelSpec.quantization of a checkpoint bitsandbytes quantized
DS_ALLREDUCE_BYTES_ELEMS = 500_000_000  # engine.py MEMORY_OPT_ALLREDUCE_SIZE (ZeRO-0 flatten)
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
    if s.run.model.method == "lora":
        return p_t, float(BF16 * p), largest_t
    # NF4 + double quant for decoder linears; embeddings, head, norms and biases stay 16-bit,
    # or fp32 where prepare_model_for_kbit_training upcast them and no DeepSpeed cast them back.
    rest = FP32 if s.fp32_rest else BF16
    nf4 = NF4_BYTES if spec.quantization == BNB_4BIT and not spec.quant_double else NF4_DQ_BYTES
    w_base = nf4 * spec.quantizable_params + rest * (p - spec.quantizable_params)
    return p_t, w_base, largest_t


def _kbit_load_peak(spec: ModelSpec, s: Setup) -> float:
    """Device bytes at the load of a QLoRA run under DeepSpeed ZeRO 0-2, before training.

    dojo's worker (like PEFT's guide) calls prepare_model_for_kbit_training on the 4-bit model
    on the GPU, which casts every parameter that is not 4-bit to fp32 one at a time
    (peft/utils/other.py: embeddings, head, norms, and an MoE model's fused experts and routers,
    which bitsandbytes does not quantize); the DeepSpeed engine casts them back to bf16 later,
    and ZeRO-1/2's __init__ empties the cache. So the device holds the NF4 weights + 4 B x the
    rest (+ the bf16 copy of the largest rest tensor while it is cast) once, at load. For a
    dense model that is below the training peak; for an MoE model, whose experts are most of
    it, it can be the peak nvidia-smi sees. Without DeepSpeed the fp32 weights stay and the
    training terms count them already; ZeRO-3 loads quantized models without zero.Init and is
    not counted here."""
    if s.run.model.method != "qlora" or not s.deepspeed or s.zero.stage == 3:
        return 0.0
    nf4 = NF4_BYTES if spec.quantization == BNB_4BIT and not spec.quant_double else NF4_DQ_BYTES
    rest = spec.params - spec.quantizable_params
    largest_rest = max(spec.embedding_params, spec.num_experts * spec.expert_params * 2 // 3)
    return nf4 * spec.quantizable_params + FP32 * rest + BF16 * largest_rest


def _paged_share(spec: ModelSpec, s: Setup) -> float:
    """Fraction of the trainable params whose optimizer states bitsandbytes pages."""
    if not s.run.loop.optim.startswith("paged"):
        return 0.0
    if (
        s.run.model.method == "full" or s.deepspeed
    ):  # ZeRO steps one flat fp32 partition: one big tensor
        return 1.0
    names = spec.all_linear_names() if s.lora.target_names is None else set(s.lora.target_names)
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
    if s.run.model.method == "qlora" and s.zero.stage == 3:
        notes.append(
            "ZeRO-3 + QLoRA needs bnb_4bit_quant_storage=bfloat16 (the model dtype) "
            "and zero3_init; quantized weights are then partitioned like bf16 ones"
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
    if opt_off and s.zero.level < 3 and s.zero.offload == "nvme":
        notes.append(
            "ZeRO-1/2 have no NVMe swapper: offload_optimizer nvme keeps states in CPU RAM"
        )
    # --- static GPU terms ---
    params = 0.0 if s.zero.offload_param != "none" else (stored / n if z3 else stored)
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
        step = 0.0  # DeepSpeed's CPU Adam steps on the host
    elif not s.deepspeed:
        step = _plain_step(s, t_bytes, p_t)
    elif s.zero.stage == 0:
        step = FP32 * p_t  # FP16_UnfusedOptimizer: an fp32 copy of every param's grad
    elif s.zero.stage in (1, 2):
        step = 6 * p_t / n  # bf16 flatten + fp32 upcast of the partition (stage_1_and_2 step)
    else:
        step = 6 * _z3_largest_sub_group(spec, s, p_t)  # stage3 _prepare_fp32_grad_for_sub_group
    # --- backward working set ---
    params_work = grads_work = 0.0
    if z3:
        params_work, grads_work = _z3_working_set(spec, s, stored, p_t, largest_t)
    if s.run.model.method == "qlora":
        biggest_w = max(a * b for _, a, b, _ in spec.linears())
        params_work += BF16 * biggest_w  # bnb dequantizes one weight to bf16 per matmul
    kept, loss_phase, layer_phase, loss_term = activation_phases(spec, s)
    comm_current, comm_docs = _comm(s, p_t, s.reduce_bucket(spec))
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
    reserve = _allocator_reserve(s, churn, flat_step, p_t, largest_t, logits_block, bf16_logits)
    if s.kernels.expandable:
        backward_extra = params_work + grads_work + activations + logits + comm_current
        largest_freed = max(kept, loss_phase)
        reserve += _step_pages_hole(s, p_t, largest_t, largest_freed, churn, step, backward_extra)
    backward = params_work + grads_work + activations + logits + comm_current
    step_phase = step + (comm_current if z3 else 0)
    trained = params + reference + grads + optim + max(backward, step_phase) + reserve
    load_excess = _kbit_load_peak(spec, s) - trained
    if load_excess > 0:
        reserve += load_excess
        notes.append(
            f"the load peaks above training: prepare_model_for_kbit_training upcasts every "
            f"weight that is not 4-bit to fp32 before DeepSpeed casts them back (+"
            f"{load_excess / GIB:.1f} GiB, shown in the reserve column)"
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
    )


def quantized_notes(spec: ModelSpec, s: Setup) -> list[str]:
    """A checkpoint quantized before training (config.json quantization_config): refused unless
    the estimate describes it. It models 16-bit weights, and for --method qlora the NF4 weights
    bitsandbytes makes at load; a bitsandbytes 4-bit checkpoint trained with --method qlora is
    that (transformers loads it with its own quantization_config), except at ZeRO-3, whose
    sharding of 4-bit weights needs the storage dojo sets when it quantizes."""
    q = spec.quantization
    if not q:
        return []
    method = s.run.model.method
    if q == BNB_4BIT and method == "qlora":
        if s.zero.stage == 3:
            raise EstimateError(
                f"{spec.name}: a checkpoint already bitsandbytes 4-bit is not estimated "
                "at --zero 3: ZeRO-3 shards 4-bit weights stored as bf16, which dojo sets up only "
                "when it quantizes the model itself",
                hint="use --zero 2 (or 0, none), or the unquantized model with --method qlora",
            )
        dq = "with" if spec.quant_double else "without"
        return [f"{spec.name} is already bitsandbytes 4-bit ({dq} double quant): estimated as "
                "QLoRA's 4-bit base"]  # fmt: skip
    hint = (
        "use --method qlora: a bitsandbytes 4-bit checkpoint trains as QLoRA"
        if q == BNB_4BIT
        else "use the unquantized model it was made from (its config.json, or a name "
        "like 8b); --method qlora quantizes that one with bitsandbytes"
    )
    raise EstimateError(
        f"{spec.name}: config.json has a {q} quantization_config; the estimate models "
        f"bf16 weights (NF4 for --method qlora), not {q} ones",
        hint=hint,
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
    accumulation the second micro-batch's backward starts beside every grad of the first."""
    one_process = not s.deepspeed and s.world_size == 1
    one_pass = s.run.loop.grad_accum == 1  # accumulating, the next backward meets every grad
    if not (one_process and one_pass) or s.kernels.grad_ckpt or s.run.model.method != "full":
        return 0.0
    per_param = grads / max(1, spec.params)
    layers = spec.num_layers
    first = per_param * (spec.vocab_size * spec.hidden_size + spec.hidden_size + spec.layer_params)
    last = grads - (layers - 1) * kept / layers
    return max(0.0, grads - max(first, last))


def _allocator_reserve(
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
    (Calibration), and at ZeRO-1/2 what ``_step_pages_hole`` names (the caller adds it: it needs
    the phases' sizes).
    """
    n = s.world_size
    if s.kernels.expandable:
        # HF's loss upcasts the logits (an fp32 block); ORPO's and CPO's log-prob kernel and NLL
        # work on the bf16 logits themselves
        upcast = 1 if s.run.objective.objective in ("orpo", "simpo") else 2
        reserve = s.calibration.expandable_logits_reserve * upcast * bf16_logits
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


def _step_pages_hole(
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

    The holes are beside the step, not the backward: only what the step phase then holds above
    the backward's allocated peak shows in the device total."""
    if s.zero.stage not in (1, 2) or not s.deepspeed or s.zero.offload != "none":
        return 0.0  # the norm is taken on the host's copy (offload); ZeRO-0/3 have no such step
    partition = -(-p_t // s.world_size)
    norm_copy = FP64 * min(largest_t, partition)
    if largest_freed >= FP32 * partition:
        return _norm_hole(norm_copy, partition)
    held = churn + (0.0 if norm_copy <= largest_freed else _norm_hole(norm_copy, partition))
    return max(0.0, step + held - max(backward_extra, step))


def _norm_hole(norm_copy: int, partition: int) -> float:
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
    only (``_step_pages_hole`` decides)."""
    return float(norm_copy) if norm_copy < BF16 * partition else 0.0


def _comm(s: Setup, p_t: int, rbs: int) -> tuple[int, int]:
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
