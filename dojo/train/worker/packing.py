"""Packing short samples into full rows, and the two collators the Trainer uses.

API (imported by the worker, after ``dojo.train.worker.examples.build_examples``):

    pack(examples, seq_len) -> list[dict]          rows of <= seq_len tokens: input_ids, labels,
                                                   position_ids restarting at 0 for each sample
    PackedCollator(pad_id, flatten=True)(rows)     batch without attention_mask (see below)
    packed_collator(pad_id, impl, ...)             the PackedCollator a run's attention takes
    compiled_width(seq_len)                        the one row width of a compiled packed run
    PadCollator(pad_id, pad_to_multiple_of=1)(ex)  pad to the longest in the batch
    TOKENS                                         both collators' key for the batch's real
                                                   tokens (an int, counted on the host)
    sample_offsets(position_ids) -> (cu, longest)  each sample's start in a flat row, the longest
    offset_kwargs(cu, longest)                     the model's kwargs for those offsets
    packing_supported(model) -> (bool, reason)     can this model's attention keep samples apart?

How samples stay apart (transformers 5.24): with ``attention_mask=None`` and ``position_ids``
given, ``masking_utils._preprocess_mask_arguments`` calls ``find_packed_sequence_indices``: every
place where the position does not grow by 1 starts a new sequence, and the causal mask becomes
block-diagonal (eager, sdpa, flex_attention). Flash attention (2/3) instead turns position_ids
into ``cu_seqlens`` (``modeling_flash_attention_utils._is_packed_sequence``), but only for a batch
of ONE row. So ``PackedCollator`` flattens the micro-batch into a single row [1, n_rows*seq_len]
(as transformers' DataCollatorWithFlattening does): it is correct for all five implementations,
needs no padding, and keeps the token budget at micro_batch * seq_len as the estimate assumes.
A model whose code does not build its mask through masking_utils (remote code, old
architectures) would attend across samples: ``packing_supported`` says so and the worker pads.

The first label of every packed sample is -100: the previous sample's last token must not be
trained to predict it (DataCollatorWithFlattening does the same).

Under ``--compile on`` (unflattened rows) every row is padded to one width, ``compiled_width``:
a compiled layer recompiles when its input's shape changes (the longest row of a micro-batch
shorter than seq_len) and when the mask changes kind. The second happens at the first
micro-batch whose rows each hold one whole sample: ``find_packed_sequence_indices`` finds no
boundary, the mask is skipped for SDPA's causal flag, and the layer gets ``attention_mask=None``
where it was compiled for a tensor (dynamo: "expected type of 'kwargs['attention_mask']' to be a
tensor type"). A width above seq_len gives every row a padding sample, so every batch has a
boundary, a mask and the same shape: the layers compile once. Not where every row holds one
sample (fixed-length data): there every batch already takes no mask, in SDPA's faster causal
kernel, which a padding sample would trade for the masked one. Either way an epoch's last
micro-batch, when short, gets rows of padding alone: a new row count compiles the layers again.
"""

import bisect
import sys
from dataclasses import dataclass
from typing import Any

IGNORE = -100
"""Label value the loss skips (torch CrossEntropyLoss ignore_index, HF convention)."""
PACKING_ATTENTION = (
    "eager",
    "sdpa",
    "flex_attention",
    "flash_attention_2",
    "flash_attention_3",
    "sdpa_varlen",
)
"""Attention implementations that honour per-sample position_ids (see module docstring)."""
TOKENS = "dojo_real_tokens"
"""Batch key of its real (non-padding) token count, a Python int made by the collator: the
worker's Trainer (dojo.train.worker.trainer) pops it before the model sees the batch and counts
tokens without a device sync."""


def pack(examples: list[dict[str, Any]], seq_len: int) -> list[dict[str, list[int]]]:
    """Best-fit decreasing bin packing of examples (each <= seq_len tokens) into rows.

    Deterministic: longest first, ties in input order; each example goes to the fullest row it
    still fits in. Rows are returned in creation order (the Trainer's sampler shuffles them).
    """
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    order = sorted(range(len(examples)), key=lambda i: (-len(examples[i]["input_ids"]), i))
    bins: list[list[int]] = []
    free: list[tuple[int, int]] = []  # sorted (space left, bin index)
    for i in order:
        n = len(examples[i]["input_ids"])
        if n > seq_len:
            raise ValueError(f"example {i} has {n} tokens, more than seq_len {seq_len}")
        if n == 0:
            continue
        at = bisect.bisect_left(free, (n, -1))
        if at < len(free):
            space, b = free.pop(at)
        else:
            space, b = seq_len, len(bins)
            bins.append([])
        bins[b].append(i)
        if space - n > 0:
            bisect.insort(free, (space - n, b))
    return [_join([examples[i] for i in members]) for members in bins]


def _join(samples: list[dict[str, Any]]) -> dict[str, list[int]]:
    row: dict[str, list[int]] = {"input_ids": [], "labels": [], "position_ids": []}
    for s in samples:
        ids = list(s["input_ids"])
        labels = list(s["labels"])
        labels[0] = IGNORE
        row["input_ids"] += ids
        row["labels"] += labels
        row["position_ids"] += list(range(len(ids)))
    return row


@dataclass(frozen=True)
class PackedCollator:
    """Packed rows -> tensors with position_ids and no attention_mask.

    flatten=True (default): the whole micro-batch becomes one row [1, total] (works with every
    implementation in PACKING_ATTENTION). flatten=False: one row per packed row, right-padded to
    the longest with ``pad_id``; the padding is its own "sample" (positions restart at 0, labels
    -100), so no real token attends to it (eager/sdpa/flex only, not flash attention).
    varlen=True (``--attn sdpa_varlen``, implies flatten): also each sample's start offset and the
    longest sample (``cu_seq_lens_q/k``, ``max_length_q/k``, the names transformers'
    DataCollatorWithFlattening gives them), made here on the loader's side so the attention never
    waits on the GPU to find them.
    """

    pad_id: int
    flatten: bool = True
    varlen: bool = False
    width: int | None = None
    """flatten=False: pad every row to this width (``compiled_width``), not to the longest."""
    batch_rows: int | None = None
    """flatten=False: pad a short micro-batch (an epoch's last) to this many rows with rows of
    padding alone (labels -100), so a compiled run's batches keep one shape."""

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        keys = ("input_ids", "labels", "position_ids")
        if self.flatten or self.varlen:
            flat = {k: sum((list(r[k]) for r in rows), []) for k in keys}
            out: dict[str, Any] = {k: torch.tensor([v]) for k, v in flat.items()}
            out[TOKENS] = len(flat["input_ids"])  # a flat row has no padding
            if self.varlen:
                cu, longest = sample_offsets(flat["position_ids"])
                cu_t = torch.tensor(cu, dtype=torch.int32)
                out |= offset_kwargs(cu_t, longest)
            return out
        longest = max(len(r["input_ids"]) for r in rows)
        if self.width is not None:
            if longest >= self.width:  # a row without its padding sample would drop the mask
                raise ValueError(
                    f"a packed row of {longest} tokens does not fit width {self.width}"
                )
            longest = self.width
        # a short micro-batch's missing rows: empty ones, padded below like any other (padding
        # alone: no token trains, none sees it)
        blank = dict.fromkeys(keys, ())
        padded: dict[str, list[list[int]]] = {k: [] for k in keys}
        for r in rows + [blank] * ((self.batch_rows or 0) - len(rows)):
            gap = longest - len(r["input_ids"])
            padded["input_ids"].append(list(r["input_ids"]) + [self.pad_id] * gap)
            padded["labels"].append(list(r["labels"]) + [IGNORE] * gap)
            padded["position_ids"].append(list(r["position_ids"]) + list(range(gap)))
        real = sum(len(r["input_ids"]) for r in rows)
        return {**{k: torch.tensor(v) for k, v in padded.items()}, TOKENS: real}


def packed_collator(
    pad_id: int,
    impl: str,
    compiled: bool,
    seq_len: int,
    micro_batch: int = 1,
    one_per_row: bool = False,
) -> PackedCollator:
    """The collator of a packed run under attention ``impl``. FlashAttention-2 finds packed
    samples only in a batch of one row, so the micro-batch is flattened there; SDPA, flex and
    eager read per-row position_ids, and keeping [micro_batch, seq_len] rows lets a row that holds
    one sample use the unmasked causal (flash) SDPA kernel instead of a masked one over the whole
    flat batch; sdpa_varlen (dojo.train.worker.varlen) takes the samples' offsets from a flat row.
    Compiled layers get rows of one width (``compiled_width``), unless every row holds one sample
    (``one_per_row``: fixed-length data), whose batches already share a shape and take no mask:
    a padding sample there would send every batch to the masked kernel. Either way a compiled
    run's short micro-batch (an epoch's last) is padded to ``micro_batch`` rows."""
    flatten, varlen = impl == "flash_attention_2", impl == "sdpa_varlen"
    one_shape = compiled and not (flatten or varlen)  # flat rows vary in length anyway
    width = compiled_width(seq_len) if one_shape and not one_per_row else None
    batch_rows = micro_batch if one_shape else None
    return PackedCollator(
        pad_id, flatten=flatten, varlen=varlen, width=width, batch_rows=batch_rows
    )


def compiled_width(seq_len: int) -> int:
    """The row width of a compiled packed run: above seq_len, so that every row ends in a padding
    sample, and a multiple of 8 (Inductor's SDPA lowering guards on the mask's alignment)."""
    return (seq_len // 8 + 1) * 8


def offset_kwargs(cu: Any, longest: int) -> dict[str, Any]:
    """The model's keyword arguments that keep samples apart by their start offsets (int32
    ``cu``, then the total) and the longest sample: the names transformers'
    DataCollatorWithFlattening gives them, which FlashAttention-2 and dojo.train.worker.varlen
    read."""
    return {"cu_seq_lens_q": cu, "cu_seq_lens_k": cu,
            "max_length_q": longest, "max_length_k": longest}  # fmt: skip


def sample_offsets(position_ids: list[int]) -> tuple[list[int], int]:
    """cu_seqlens (each sample's start, then the total) and the longest sample of one flat row
    whose samples restart their positions at 0."""
    cu = [i for i, p in enumerate(position_ids) if i == 0 or p != position_ids[i - 1] + 1]
    cu.append(len(position_ids))
    return cu, max((b - a for a, b in zip(cu, cu[1:], strict=False)), default=0)


@dataclass(frozen=True)
class PadCollator:
    """Unpacked examples -> right-padded tensors with an attention_mask; labels -100 on padding."""

    pad_id: int
    pad_to_multiple_of: int = 1
    """1 = pad to the longest only; 8 or 64 suit tensor cores at the cost of a few pad tokens."""

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        longest = max(len(e["input_ids"]) for e in examples)
        m = max(1, self.pad_to_multiple_of)
        longest = -(-longest // m) * m
        ids, labels, mask = [], [], []
        for e in examples:
            n = len(e["input_ids"])
            ids.append(list(e["input_ids"]) + [self.pad_id] * (longest - n))
            labels.append(list(e["labels"]) + [IGNORE] * (longest - n))
            mask.append([1] * n + [0] * (longest - n))
        return {
            "input_ids": torch.tensor(ids),
            "labels": torch.tensor(labels),
            "attention_mask": torch.tensor(mask),
            TOKENS: sum(len(e["input_ids"]) for e in examples),
        }


def packing_supported(model: Any) -> tuple[bool, str]:
    """Whether ``model`` keeps packed samples apart; the reason either way (for the run log)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # PEFT
    impl = getattr(getattr(base, "config", None), "_attn_implementation", None)
    if impl not in PACKING_ATTENTION:
        return False, f"attention {impl!r} does not separate packed samples"
    module = sys.modules.get(type(base).__module__)
    if module is None or not hasattr(module, "create_causal_mask"):
        return (
            False,
            f"{type(base).__name__} does not build its mask with transformers' masking_utils",
        )
    return True, f"attention {impl!r} separates samples by position_ids"
