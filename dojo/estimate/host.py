"""Host RAM per node (docs/estimate.md, "Host RAM"): offloaded states, pinned-block rounding,
the model load, the process baseline. Bytes."""

import math

from dojo.estimate.setup import Setup
from dojo.modelspec import ModelSpec

BF16 = 2
FP32 = 4


def ceil_pow2(n: int) -> int:
    """torch's CachingHostAllocator rounds each pinned block up to a power of two
    (ATen/core/CachingHostAllocator.h)."""
    return 0 if n <= 0 else 1 << math.ceil(math.log2(n))


def model_load_bytes(spec: ModelSpec, s: Setup) -> int:
    """Host RAM the checkpoint load needs on the busiest node (node 0).

    transformers 5.24 modeling_utils (_load_pretrained_model, ZeRO-3 branch): under zero.Init
    only global rank 0 reads the checkpoint (map_location="cpu") and merges every shard into one
    state dict before _load_state_dict_into_zero3_model copies it in, layer by layer, through
    GatheredParameters(modifier_rank=0); the other ranks read the keys on the meta device. So
    node 0 holds the whole 16-bit model once, not once per rank (H200: 7B ZeRO-3, 14.9 GiB host
    used for 12.6 GiB of bf16 weights). Quantized models skip zero.Init (is_quantized), and
    without ZeRO-3 each rank loads straight from the page cache to its GPU: about one layer of
    anonymous memory per rank (H200 rows: under 3.1 GiB in total).
    """
    if s.zero.stage == 3 and s.run.model.method != "qlora":
        return BF16 * spec.params
    return s.run.gpus_per_node * BF16 * spec.largest_layer_params


def host_terms(
    spec: ModelSpec, s: Setup, p_t: int, largest_t: int, stored: float
) -> dict[str, int]:
    """Offloaded states (per rank, summed over the node's g ranks), load and process baseline.

    Which host buffers DeepSpeed 0.19 pins (torch then rounds each up to a power of two):
    ZeRO-1/2 offload (stage_1_and_2.py): the fp32 master partition, its fp32 grad, the bf16 copy
    buffer and a bf16 temp grad of the largest parameter; DeepSpeedCPUAdam's m and v are plain
    (``zeros_like`` does not pin). ZeRO-3 offload (stage3.py): the bf16 grad partition buffer and
    one fp32 grad per sub-group; master, m and v are plain.
    """
    n, g = s.world_size, s.run.gpus_per_node
    part = p_t / n
    opt_cpu = s.zero.offload == "cpu" or (s.zero.offload == "nvme" and s.zero.level < 3)
    opt_nvme = s.zero.offload == "nvme" and s.zero.stage == 3
    params = gradients = optim = buffers = nvme = 0.0
    pinned: list[float] = []
    if opt_cpu:
        optim = 12 * part  # fp32 master + Adam m, v
        gradients = FP32 * part  # fp32 grad partition
        buffers = BF16 * part  # bf16 copy buffer (ZeRO-1/2) / bf16 grad partition (ZeRO-3)
        if s.zero.level < 3:
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
    if s.zero.offload_param == "cpu":
        params = stored / n
        pinned.append(params)
    elif s.zero.offload_param == "nvme":
        nvme += g * stored / n
        swap = 5 * 100_000_000 * BF16  # buffer_count 5 x buffer_size 1e8, bf16
        buffers += swap
        pinned.append(swap)
    rounding = sum(ceil_pow2(int(b)) - int(b) for b in pinned if b > 0)
    return {
        "params": int(g * params),
        "gradients": int(g * gradients),
        "optimizer_states": int(g * optim),
        "buffers": int(g * buffers),
        "load": model_load_bytes(spec, s),
        "process": int(g * s.calibration.cpu_process_gib * 2**30),
        "pinned_rounding": int(g * rounding),
        "nvme": int(nvme),
    }
