"""GPU and host memory of a DeepSpeed ZeRO fine-tune, term by term (docs/estimate.md).

Model (docs/memory-model.md section 8): GPU peak = static + max(backward extras, optimizer
step extras) + fixed overheads. Pure arithmetic on a ModelSpec; no torch, no DeepSpeed.
Example: ``estimate(resolve_model("7b"), Setup(stage=3, num_gpus=8)).gpu_total_gib``.
"""

import math

from dojo.errors import EstimateError
from dojo.estimate.result import GIB as GIB
from dojo.estimate.result import MemoryEstimate as MemoryEstimate
from dojo.estimate.setup import Calibration as Calibration
from dojo.estimate.setup import Setup as Setup
from dojo.modelspec import ModelSpec

BF16 = 2  # bytes; params, grads, activations and comm buffers are bf16 (DeepSpeed bf16 mode)
FP32 = 4
# bitsandbytes 0.50 NF4 with double quant, measured: 0.5 B packed + 8-bit absmax per 64 values +
# fp32 second-level constants per 256 blocks (memory-model.md sec 4; QLoRA paper sec 3).
NF4_DQ_BYTES = 0.5159
DS_ALLREDUCE_BYTES_ELEMS = 500_000_000  # engine.py MEMORY_OPT_ALLREDUCE_SIZE (ZeRO-0 flatten)
# 1M tokens: beyond every released context window (= dojo train's --seq-len cap); a larger
# value is a typo'd extra digit, and its activation terms overflow any useful table.
MAX_SEQ_LEN = 1 << 20


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


def validate(setup: Setup) -> None:
    """Reject impossible settings with the flag, the value and the fix."""
    s = setup
    checks: list[tuple[bool, str, str]] = [
        (s.stage in (0, 1, 2, 3), f"--zero {s.stage}: no such ZeRO stage", "use 0, 1, 2, 3 or all"),
        (
            s.method in ("full", "lora", "qlora"),
            f"--method {s.method}: unknown",
            "use full, lora or qlora",
        ),
        (s.num_gpus >= 1, f"--num-gpus {s.num_gpus}: must be at least 1", "use e.g. --num-gpus 1"),
        (
            s.num_nodes >= 1,
            f"--num-nodes {s.num_nodes}: must be at least 1",
            "use e.g. --num-nodes 1",
        ),
        (
            s.micro_batch >= 1,
            f"--micro-batch {s.micro_batch}: must be at least 1",
            "use e.g. --micro-batch 1",
        ),
        (s.seq_len >= 1, f"--seq-len {s.seq_len}: must be at least 1", "use e.g. --seq-len 2048"),
        (
            s.seq_len <= MAX_SEQ_LEN,
            f"--seq-len {s.seq_len}: longer than {MAX_SEQ_LEN:,} tokens",
            "use a real context length, e.g. --seq-len 8192 (dojo train caps it the same way)",
        ),
        (
            s.bucket_size is None or s.bucket_size > 0,
            f"--bucket-size {s.bucket_size}: must be positive",
            "use e.g. --bucket-size 500000000, or leave it out for HF's auto (hidden^2)",
        ),
        (
            s.lora_rank >= 1,
            f"--lora-rank {s.lora_rank}: must be at least 1",
            "use e.g. --lora-rank 16",
        ),
        (
            s.offload_optimizer in ("none", "cpu", "nvme"),
            f"--offload {s.offload_optimizer}: unknown device",
            "use none, cpu or nvme",
        ),
        (
            s.offload_param in ("none", "cpu", "nvme"),
            f"--offload-param {s.offload_param}: unknown device",
            "use none, cpu or nvme",
        ),
        (
            s.offload_optimizer == "none" or s.stage >= 1,
            f"--offload {s.offload_optimizer} needs ZeRO stage 1-3, got --zero 0",
            "use --zero 2 or 3",
        ),
        (
            s.offload_param == "none" or s.stage == 3,
            f"--offload-param {s.offload_param} exists only at ZeRO stage 3, got --zero {s.stage}",
            "use --zero 3, or drop --offload-param",
        ),
        (
            s.attention in ("sdpa", "flash_attention_2", "eager"),
            f"--attention {s.attention}: unknown",
            "use sdpa, flash_attention_2 or eager",
        ),
        (
            s.gpu_memory_gib is None or 0 < s.gpu_memory_gib < math.inf,
            f"--gpu-memory {s.gpu_memory_gib}: must be a positive number of GiB",
            "give the GPU size in GiB, e.g. 80",
        ),
        (
            s.cpu_memory_gib is None or 0 < s.cpu_memory_gib < math.inf,
            f"--cpu-memory {s.cpu_memory_gib}: must be a positive number of GiB",
            "give host RAM in GiB, e.g. 512",
        ),
    ]
    for ok, message, hint in checks:
        if not ok:
            raise EstimateError(message, hint=hint)


def _ceil_pow2(n: int) -> int:
    # torch CachingHostAllocator rounds each pinned block up to a power of two (sec 6).
    return 0 if n <= 0 else 1 << math.ceil(math.log2(n))


def activation_bytes(spec: ModelSpec, setup: Setup) -> tuple[int, int]:
    """(activations, logits) at the activation peak, bytes per GPU (memory-model.md sec 3).

    Peak = max(loss phase, layer phase); the split reports the logits term whole and the rest as
    activations, so the two always add up to the peak.
    """
    s, cal = setup, setup.calibration
    tokens = s.micro_batch * s.seq_len
    h, q, kv, i = spec.hidden_size, spec.q_dim, spec.kv_dim, spec.intermediate_size
    # Saved per token by one HF Llama layer, bf16 (sec 3.2): norms keep an fp32 input copy.
    if s.method == "full":
        per_token = 16 * h + 4 * q + 4 * kv + 8 * i
    else:
        per_token = 8 * h + 4 * q + 4 * kv + 6 * i  # frozen base: no linear inputs saved
        per_token += _lora_saved_per_token(spec, setup)
    if s.liger and s.method == "full":
        # Liger's RMSNorm keeps its bf16 input + fp32 rstd instead of HF's fp32 copy + bf16
        # output (-8h by that count) and its SwiGLU keeps gate and up but not silu(gate) (-2i).
        # Measured on the H200 (docs/benchmarks.md rows 1-5) the layer saves 14h + 2i less.
        per_token -= int(cal.liger_full_saved_per_token_h * h) + 2 * i
    elif s.liger:
        # Frozen base: HF norms keep no weight-grad inputs there (already excluded above); only
        # the SwiGLU saving applies.
        per_token -= 2 * i
    per_token += FP32 * spec.num_heads  # log-sum-exp of SDPA / FlashAttention
    a_layer = tokens * per_token
    if s.attention == "eager":
        a_layer += 6 * spec.num_heads * s.seq_len * tokens  # fp32 softmax + bf16 copy (sec 3.2)
    keep = BF16 * tokens * h if s.grad_ckpt else a_layer
    layer_extra = cal.recompute_factor * a_layer if s.grad_ckpt else a_layer
    logits = cal.loss_bytes_per_logit * tokens * spec.vocab_size
    if s.liger:
        logits = _fused_loss_bytes(spec, setup)
    loss_tail = cal.loss_tail_bytes_per_th * tokens * h
    kept = spec.num_layers * keep
    activations = kept + max(loss_tail, layer_extra - logits)
    return int(activations), int(logits)


def _fused_loss_bytes(spec: ModelSpec, setup: Setup) -> int:
    """Liger LigerFusedLinearCrossEntropyFunction: tokens in chunks of
    next_pow2(ceil(T / ceil(V / h))); per chunk bf16 logits + their fp32 grad (6 B x chunk x V),
    plus the bf16 grad of the hidden states (2 B x T x h) and, when the head trains, a 16-bit
    grad_weight (2 B x V x h) that lives through the loss."""
    tokens = setup.micro_batch * setup.seq_len
    v, h = spec.vocab_size, spec.hidden_size
    chunk = 1 << max(0, math.ceil(tokens / math.ceil(v / h)) - 1).bit_length()
    head_grad = BF16 * v * h if setup.method == "full" else 0
    return 6 * chunk * v + BF16 * tokens * h + head_grad


def _lora_saved_per_token(spec: ModelSpec, setup: Setup) -> int:
    """Extra bytes per token an adapted layer saves (inputs of lora_A, outputs of lora_A)."""
    names = {n for n, *_ in spec.linears()}
    targets = names if setup.lora_targets is None else set(setup.lora_targets) & names
    ins = {n: a for n, a, _, _ in spec.linears()}
    extra = 0
    # q/k/v share one input, gate/up another; o_proj's input is SDPA's output, saved anyway.
    if targets & {"q_proj", "k_proj", "v_proj"}:
        extra += BF16 * spec.hidden_size
    if targets & {"gate_proj", "up_proj"}:
        extra += BF16 * spec.hidden_size
    if "down_proj" in targets:
        extra += BF16 * spec.intermediate_size
    extra += BF16 * setup.lora_rank * len(targets)
    if setup.lora_dropout > 0:  # dropout output (bf16) + mask (bool) per adapted module
        extra += 3 * sum(ins[n] for n in targets)
    return extra


def estimate(spec: ModelSpec, setup: Setup) -> MemoryEstimate:
    """GPU peak per GPU and host RAM per node for one setup (memory-model.md sec 8)."""
    validate(setup)
    s, cal = setup, setup.calibration
    n = s.world_size
    p = spec.params
    notes: list[str] = []
    # Trainable params and the bytes of the frozen base (full: none frozen).
    if s.method == "full":
        p_t, w_base, largest_t = p, 0.0, spec.largest_layer_params
    else:
        p_t = spec.lora_params(s.lora_rank, s.lora_targets)
        if p_t == 0:
            raise EstimateError(
                "--lora-targets matches no linear layer", hint="use q_proj,v_proj,..."
            )
        biggest = max(max(a, b) for _, a, b, _ in spec.linears())
        largest_t = s.lora_rank * biggest
        if s.method == "lora":
            w_base = float(BF16 * p)
        else:  # NF4 + double quant for decoder linears; embeddings, head and norms stay 16-bit
            w_base = NF4_DQ_BYTES * spec.quantizable_params + BF16 * (p - spec.quantizable_params)
            if s.stage == 3:
                notes.append(
                    "ZeRO-3 + QLoRA needs bnb_4bit_quant_storage=bfloat16 (the model dtype) "
                    "and zero3_init; quantized weights are then partitioned like bf16 ones"
                )
    stored = w_base + BF16 * p_t if s.method != "full" else float(BF16 * p)
    z3 = s.stage == 3
    opt_off = s.offload_optimizer != "none"
    if opt_off and s.stage < 3 and s.offload_optimizer == "nvme":
        notes.append(
            "ZeRO-1/2 have no NVMe swapper: offload_optimizer nvme keeps states in CPU RAM"
        )
    # --- static GPU terms ---
    params = 0.0 if s.offload_param != "none" else (stored / n if z3 else stored)
    grads: float
    if s.stage == 0 or s.stage == 1:
        grads = BF16 * p_t  # ZeRO-1 keeps full grads until the boundary reduce-scatter
    elif s.stage == 2:
        grads = BF16 * largest_t if opt_off else BF16 * p_t / n  # offload: one temp per param
    else:
        grads = 0.0 if opt_off else BF16 * p_t / n
    dp = n if s.stage >= 1 else 1
    optim = 0.0 if opt_off else 12 * p_t / dp  # 4 B master + 8 B Adam m, v
    if opt_off:
        step = 0.0
    elif s.stage == 0:
        step = FP32 * p_t
    elif s.stage in (1, 2):
        step = 6 * p_t / n  # bf16 flatten + fp32 upcast of the partition (stage_1_and_2 step)
    else:
        step = 6 * min(p_t / n, s.sub_group_size)  # per sub-group (stage3 _prepare_fp32_grad)
    # --- backward working set ---
    rbs = s.reduce_bucket(spec)
    params_work = 0.0
    grads_work = 0.0
    if z3:
        storage_elems = stored / BF16
        prefetch = int(0.9 * spec.hidden_size**2)  # HF auto stage3_prefetch_bucket_size
        # Parameters kept gathered for reuse (stage3_max_reuse_distance) need a complete
        # module trace; with a frozen base (LoRA/QLoRA) none was seen kept on the H200 (7B QLoRA
        # ZeRO-3: 6.9 GiB allocated; with retention the estimate said 9.5).
        reuse = min(s.stage3_max_reuse_distance, storage_elems) if s.method == "full" else 0
        gathered = spec.largest_layer_params + min(prefetch, s.stage3_max_live_parameters) + reuse
        small = spec.num_layers * spec.norms_per_layer * spec.hidden_size + spec.hidden_size
        params_work = BF16 * min(gathered + small, storage_elems)
        grads_work = BF16 * largest_t
    if s.method == "qlora":
        biggest_w = max(a * b for _, a, b, _ in spec.linears())
        params_work += BF16 * biggest_w  # dequantized weight in forward/backward
    activations, logits = activation_bytes(spec, s)
    comm_current, comm_docs = _comm(spec, s, p_t, rbs)
    # --- host RAM per node ---
    c = _cpu(spec, s, p_t, largest_t, stored, cal)
    if c["nvme"]:
        notes.append(f"NVMe holds {c['nvme'] / GIB:.1f} GiB per node")
    return MemoryEstimate(
        spec=spec,
        setup=s,
        trainable_params=p_t,
        params=int(params),
        params_work=int(params_work),
        gradients=int(grads),
        grads_work=int(grads_work),
        optimizer_states=int(optim),
        step=int(step),
        activations=activations,
        logits=logits,
        comm_current=comm_current,
        comm_docs=comm_docs,
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
    )


def _comm(spec: ModelSpec, s: Setup, p_t: int, rbs: int) -> tuple[int, int]:
    """(current, docs) communication-buffer bytes in the backward phase (sec 2.6)."""
    kappa = s.calibration.kappa
    n = s.world_size
    if s.stage == 0:
        # engine allreduce flattens up to MEMORY_OPT_ALLREDUCE_SIZE elements at a time, DP only
        cur = BF16 * min(DS_ALLREDUCE_BYTES_ELEMS, p_t) if n > 1 else 0
        return cur, cur
    allocated = comm_buffer_bytes(s.stage, rbs, rbs, s.overlap, "current")
    flatten = kappa * BF16 * min(rbs, p_t)
    transient = flatten
    if s.stage == 3:  # reduce-scatter copies in flight: up to 2 with overlap_comm, 1 without
        transient = flatten * (2 if s.overlap else 1) if n > 1 else 0.0
    cur = int(allocated + transient)
    docs_alloc = comm_buffer_bytes(s.stage, rbs, rbs, s.overlap, "docs")
    docs = docs_alloc if docs_alloc != allocated else cur  # the docs figure is the whole cost
    return cur, docs


def _cpu(
    spec: ModelSpec, s: Setup, p_t: int, largest_t: int, stored: float, cal: Calibration
) -> dict[str, int]:
    """Host RAM per node: offloaded states (sec 8 'CPU per node'), model load, process baseline.

    Which host buffers DeepSpeed 0.19 pins (torch then rounds each up to a power of two):
    ZeRO-1/2 offload (stage_1_and_2.py): the fp32 master partition, its fp32 grad, the bf16 copy
    buffer and a bf16 temp grad of the largest parameter; DeepSpeedCPUAdam's m and v are plain
    (``zeros_like`` does not pin). ZeRO-3 offload (stage3.py): the bf16 grad partition buffer and
    one fp32 grad per sub-group; master, m and v are plain.
    """
    n, g = s.world_size, s.num_gpus
    part = p_t / n
    opt_cpu = s.offload_optimizer == "cpu" or (s.offload_optimizer == "nvme" and s.stage < 3)
    opt_nvme = s.offload_optimizer == "nvme" and s.stage == 3
    params = gradients = optim = buffers = nvme = 0.0
    pinned: list[float] = []
    if opt_cpu:
        optim = 12 * part  # fp32 master + Adam m, v
        gradients = FP32 * part  # fp32 grad partition
        buffers = BF16 * part  # bf16 copy buffer (ZeRO-1/2) / bf16 grad partition (ZeRO-3)
        if s.stage < 3:
            buffers += BF16 * largest_t  # temp_grad_buffer_for_cpu_offload
            pinned += [FP32 * part, FP32 * part, BF16 * part, BF16 * largest_t]
        else:
            full, rest = divmod(part, s.sub_group_size)
            pinned += [FP32 * s.sub_group_size] * int(full) + [FP32 * rest, BF16 * part]
    elif opt_nvme:
        nvme += g * 16 * part
        # optimizer swap buffers: buffer_count 4 x sub-group tile x fp32 (offload_config.py)
        buffers = 4 * FP32 * min(part, s.sub_group_size) + BF16 * part
        pinned.append(buffers)
    if s.offload_param == "cpu":
        params = stored / n
        pinned.append(params)
    elif s.offload_param == "nvme":
        nvme += g * stored / n
        swap = 5 * 100_000_000 * BF16  # buffer_count 5 x buffer_size 1e8, bf16
        buffers += swap
        pinned.append(swap)
    # Model load, measured on the H200 (host RAM beyond the page cache): without zero.Init the
    # safetensors pages go straight to the GPU (about one layer in anonymous memory); under
    # ZeRO-3's zero.Init transformers materialises the whole bf16 state dict on each rank
    # before partitioning (7B: +12 GiB); QLoRA quantizes layer by layer onto the GPU.
    if s.stage == 3 and s.method != "qlora":
        load = BF16 * spec.params
    else:
        load = BF16 * spec.largest_layer_params
    rounding = sum(_ceil_pow2(int(b)) - int(b) for b in pinned if b > 0)
    return {
        "params": int(g * params),
        "gradients": int(g * gradients),
        "optimizer_states": int(g * optim),
        "buffers": int(g * buffers),
        "load": int(g * load),
        "process": int(g * cal.cpu_process_gib * GIB),
        "pinned_rounding": int(g * rounding),
        "nvme": int(nvme),
    }
