"""``--attn sdpa_varlen``: packed samples through PyTorch's own FlashAttention kernel, no mask.

Under ``sdpa``, a packed row that holds several samples gets a block-diagonal [s, s] mask
(masking_utils), and a mask sends SDPA to its memory-efficient kernel with an additive bias: every
masked block is still computed, and the bias is kept for the backward. FlashAttention's variable-
length mode takes the samples' start offsets (``cu_seqlens``) instead and skips what lies between
them. PyTorch ships that kernel (the one SDPA's flash backend and nested-tensor SDPA call,
``aten::_flash_attention_forward``, with its backward registered), so this needs no flash-attn
package.

How it is wired (transformers 5):
- ``register()`` adds the attention function under the name ``sdpa_varlen``; the worker calls it
  before loading the model. No mask function is registered: for an attention without one,
  ``masking_utils._preprocess_mask_arguments`` returns no mask at once, before it would look for
  packed samples in ``position_ids`` (``find_packed_sequence_indices``, a device read at the
  start of every forward, which made the host wait for the previous optimizer step).
- ``packing.PackedCollator(varlen=True)`` flattens the micro-batch into one row and adds
  ``cu_seq_lens_q/k`` and ``max_length_q/k``, as transformers' DataCollatorWithFlattening does for
  FlashAttention-2: the Trainer passes them to the model, which hands them to every attention call.
  The offsets are made on the loader's CPU side, so no layer waits on the GPU to find them.
- Off CUDA, in fp32 without autocast, or on a GPU older than Ampere (the kernel needs sm80), the
  same offsets drive one causal SDPA call per sample: exact, slow, for CPU runs and tests. An fp32
  query under bf16/fp16 autocast (QLoRA without DeepSpeed) is cast to it, as SDPA would.
- When every sample of the micro-batch has the same length (fixed-length data: one sample per
  row), there is nothing to skip: one causal SDPA call over [samples, heads, length, dim] lets
  PyTorch pick its fastest dense kernel, as the plain stack's unpacked rows do (a profile of 1B
  full ZeRO-2 4 x 2048 on the H200: the plain script's cuDNN kernel took 604 us per layer
  backward where the varlen flash kernel took 896).

Not supported: rows without packing (refused before launch) and logit soft-capping (refused
before launch for Gemma-2, at the first forward for a model dojo does not know). Sliding windows
go to the kernel as ``window_size_left``.
"""

import functools
from typing import Any

import torch
import torch.nn.functional as F

from dojo.train.worker.packing import sample_offsets

NAME = "sdpa_varlen"
_FLASH_DTYPES = (torch.float16, torch.bfloat16)


@functools.cache
def _flash_capable(index: int) -> bool:
    return torch.cuda.get_device_capability(index) >= (8, 0)


def _per_sample(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu: list[int], scale: float | None,
    dropout: float, window: int | None,
) -> torch.Tensor:  # fmt: skip
    """[total, h, d] inputs -> [total, h, d]: causal SDPA over each sample alone (exact)."""
    groups = q.shape[1] // k.shape[1]
    out = []
    for a, b in zip(cu, cu[1:], strict=False):
        qs, ks, vs = (t[a:b].transpose(0, 1) for t in (q, k, v))  # [h, n, d]
        if groups > 1:
            ks, vs = ks.repeat_interleave(groups, 0), vs.repeat_interleave(groups, 0)
        mask = None
        if window is not None and b - a > window:
            i = torch.arange(b - a, device=q.device)
            mask = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - window)
        o = F.scaled_dot_product_attention(
            qs, ks, vs, attn_mask=mask, dropout_p=dropout, is_causal=mask is None, scale=scale
        )
        out.append(o.transpose(0, 1))
    return torch.cat(out, 0)


def compute_dtype(query: torch.Tensor) -> torch.dtype:
    """The dtype attention runs in: the query's, or autocast's where an fp32 query arrives under
    it, as SDPA itself casts. QLoRA without DeepSpeed is such a run: PEFT's k-bit prep keeps the
    residual stream fp32 and bitsandbytes' 4-bit linears return it, so q, k and v come fp32, and
    without this they would miss the FlashAttention kernel for the per-sample loop."""
    kind = query.device.type
    if query.dtype == torch.float32 and torch.is_autocast_enabled(kind):
        return torch.get_autocast_dtype(kind)
    return query.dtype


@torch.compiler.disable  # type: ignore[untyped-decorator]
def attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Any,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention signature: query [b, h, s, d], key/value [b, h_kv, s, d] ->
    ([b, s, h, d], None). Left out of torch.compile: the offsets change with every batch, and a
    compiled layer would recompile for each new longest sample."""
    if kwargs.get("softcap") is not None:
        raise ValueError(f"--attn {NAME} has no logit soft-capping (Gemma-2): use --attn eager")
    b, h, s, d = query.shape
    cu = kwargs.get("cu_seq_lens_q")
    if cu is not None:  # from PackedCollator(varlen=True): no host sync on CUDA
        longest = int(kwargs["max_length_q"])
    elif attention_mask is not None:
        raise ValueError(f"--attn {NAME} needs packed rows (--packing), not a padding mask")
    else:  # no offsets given (a caller other than dojo's collator): from position_ids
        pos = kwargs.get("position_ids")
        starts, longest = sample_offsets(pos.reshape(-1).tolist() if pos is not None
                                         else list(range(s)) * b)  # fmt: skip
        cu = torch.tensor(starts, dtype=torch.int32)
    q = query.transpose(1, 2).reshape(b * s, h, d)
    k = key.transpose(1, 2).reshape(b * s, key.shape[1], d)
    v = value.transpose(1, 2).reshape(b * s, value.shape[1], d)
    window = kwargs.get("sliding_window")
    # dropout: the caller's, already 0.0 outside training (as transformers' sdpa takes it)
    samples = len(cu) - 1  # a shape: no host sync
    if samples * longest == b * s and (window is None or longest <= window):
        # Equal samples (each no longer than `longest`, and they fill the batch): dense causal.
        qs, ks, vs = (t.view(samples, longest, t.shape[1], d).transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(
            qs, ks, vs, dropout_p=dropout, is_causal=True, scale=scaling, enable_gqa=k.shape[1] != h
        )
        return out.transpose(1, 2).reshape(b, s, h, d), None
    cuda = query.device.type == "cuda"
    dtype = compute_dtype(query)
    if cuda and dtype in _FLASH_DTYPES and _flash_capable(query.device.index or 0):
        q, k, v = (t.to(dtype) for t in (q, k, v))
        cu = cu.to(device=query.device, dtype=torch.int32)
        extra = {"window_size_left": window - 1, "window_size_right": 0} if window else {}
        out = torch.ops.aten._flash_attention_forward(
            q, k, v, cu, cu, longest, longest, dropout, True, False, scale=scaling, **extra
        )[0]
    else:
        out = _per_sample(q, k, v, cu.tolist(), scaling, dropout, window)
    return out.reshape(b, s, h, d), None


def register() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, attention)
