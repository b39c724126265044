"""What the other layers are handed from a ``ResolvedRun``: the DeepSpeed JSON and the estimate."""

from typing import Any

from dojo.run.catalog import BNB_OPTIMS
from dojo.run.resolved import ResolvedRun


def ds_config(run: ResolvedRun, spec: Any = None, precision: str = "auto") -> dict[str, Any]:
    """The DeepSpeed JSON for ``run``. ``precision`` "auto" lets TrainingArguments' --bf16/--fp16
    fill it (what dojo train does); ``dojo config --precision bf16`` writes it out."""
    from dojo.zero.build import ZeroConfig, build_ds_config

    hidden = getattr(spec, "hidden_size", None)
    largest = spec.vocab_size * spec.hidden_size if spec is not None else None
    zc = ZeroConfig(
        stage=run.zero,
        offload=run.offload_optimizer,
        offload_param=run.offload_param,
        nvme_path=run.nvme_path,
        overlap_comm=run.overlap_comm,
        bucket_size=run.bucket_size,
        optimizer=run.optimizer_from,
        scheduler=run.scheduler_from,
        precision=precision,
        hidden_size=hidden,
        largest_param=largest,
        prefetch_bucket=run.prefetch_bucket_size,
        leaf_modules=run.z3_leaf,
        sub_group_size=run.sub_group_size,
        overflow_check=run.overflow_check,
    )
    return build_ds_config(zc)


ESTIMATED_AS = {
    "eager": "eager",
    "flash_attention_2": "flash_attention_2",
    "flex_attention": "flash_attention_2",
    "sdpa_varlen": "flash_attention_2",  # the same kernel family: no mask, log-sum-exp kept
}
"""--attn as the estimate's attention memory model; anything else is estimated as SDPA."""


def estimate_setup(
    run: ResolvedRun, gpu_memory_gib: float | None = None, cpu_memory_gib: float | None = None
) -> Any:
    """The ``dojo.estimate.Setup`` that describes ``run``."""
    from dojo.estimate.setup import Setup
    from dojo.zero.build import SUB_GROUP_SIZE

    # FlexAttention takes a BlockMask (a few ints per 128 x 128 block), materialises no bias
    # and saves the log-sum-exp, as FlashAttention-2 does: read from the source
    # (torch.nn.attention.flex_attention, transformers masking_utils), not measured.
    attention = ESTIMATED_AS.get(run.attn, "sdpa")
    return Setup(
        stage=run.zero,
        method=run.method,  # type: ignore[arg-type]
        num_gpus=run.gpus_per_node,
        num_nodes=run.num_nodes,
        offload_optimizer=run.offload_optimizer,  # type: ignore[arg-type]
        offload_param=run.offload_param,  # type: ignore[arg-type]
        micro_batch=run.micro_batch,
        seq_len=run.seq_len,
        grad_ckpt=run.grad_ckpt,
        overlap_comm=run.overlap_comm,
        bucket_size=run.bucket_size,
        lora_rank=run.lora_r,
        lora_targets=run.lora_target_names,
        lora_dropout=run.lora_dropout,
        attention=attention,  # type: ignore[arg-type]
        liger=run.liger,
        liger_kernels=run.liger_kernels,
        compile=run.compile,
        expandable_segments=run.expandable_segments,
        packing=run.packing,
        z3_leaf_layer=run.zero == 3 and bool(run.z3_leaf),
        prefetch_bucket=run.prefetch_bucket_size if run.zero == 3 else None,
        # torch's and DeepSpeed's AdamW keep the same fp32 m and v; bitsandbytes' do not.
        optim=run.optim if run.optim in BNB_OPTIMS else "adamw",  # type: ignore[arg-type]
        gpu_memory_gib=gpu_memory_gib,
        cpu_memory_gib=cpu_memory_gib,
        sub_group_size=run.sub_group_size or SUB_GROUP_SIZE,  # None: not ZeRO-3, unused
    )
