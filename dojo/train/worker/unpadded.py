"""Preference batches without their padding: the decoder layers run on the real tokens only.

TRL's preference trainers pad every sequence of a micro-batch to the longest (DPO: the chosen
and the rejected sequence of each pair, [2 x micro-batch, longest]), and TRL 1.16 turns its own
``padding_free`` off for DPO. On a mix of lengths much of that batch is padding, which every
decoder layer computes, keeps for the backward, and computes again in the reference's forward.

Under ``--attn sdpa_varlen`` or ``flash_attention_2`` (``UNPADDED_ATTN``), dojo takes the padding
out before the decoder layers and puts it back after them:

- a forward pre-hook on the backbone (``model.base_model``: the module TRL's fused LM head and
  the models' own heads call) flattens the real tokens into one row [1, total] with positions
  restarting at 0 for each sequence and each sequence's start offset (``cu_seq_lens_q/k``,
  ``max_length_q/k``: what dojo.train.worker.varlen and transformers' FlashAttention-2 read), and
  drops the padding mask;
- a forward hook lays the last hidden state back out as [rows, longest, hidden], zeros at the
  padding, so TRL's head, log-probabilities, losses and metrics run as they would on a padded
  batch. Hidden states at padding never reach a log-probability: their labels are -100.

The losses are TRL's, unchanged; only where the layers spend their work changes. Hooks rather
than a wrapped forward: TRL replaces the model's forward with its fused head and PEFT calls
``forward`` directly, but both call the backbone as a module, so its hooks run for the policy,
the reference (the adapter-off base or the frozen copy) and the precomputed reference alike.

Where the offsets come from: the collator of DPO, ORPO and SimPO (``plan`` on the host, under
``PLAN_KEY``, so the forward never waits on the GPU to read them); any other call (KTO's
completions and KL completions) from its attention mask, one device read per forward. A plan
made for another shape than the call's is not used.
"""

from typing import Any

import torch

from dojo.train.worker.packing import offset_kwargs

UNPADDED_ATTN = ("sdpa_varlen", "flash_attention_2")
"""Attention kernels that take sample offsets instead of a padding mask."""
PLAN_KEY = "dojo_unpadded"
"""Batch key of a collator-made ``plan``; the backbone's pre-hook pops it before the model."""


def plan(attention_mask: torch.Tensor) -> dict[str, Any] | None:
    """Where each row's real tokens go in one flat row: ``shape`` (the padded batch's),
    ``index`` (their positions in the padded batch, flattened), ``position_ids`` [1, total],
    ``cu_seq_lens`` (int32 start offsets, then the total) and ``max_length``. None when a row is
    not right-padded (real tokens first, then padding only), or is empty: such a batch cannot
    be unpadded."""
    mask = attention_mask.to("cpu", torch.bool)
    lengths = mask.sum(1)
    prefix = torch.arange(mask.shape[1])[None, :] < lengths[:, None]
    if not torch.equal(prefix, mask) or int(lengths.min()) == 0:
        return None
    cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(lengths, 0)
    return {
        "shape": tuple(mask.shape),
        "index": mask.reshape(-1).nonzero().squeeze(1),
        "position_ids": torch.cat([torch.arange(int(n)) for n in lengths])[None],
        "cu_seq_lens": cu,
        "max_length": int(lengths.max()),
    }


def pair_mask(chosen: torch.Tensor, rejected: torch.Tensor) -> torch.Tensor:
    """ORPO's and CPO's batch keeps each side's mask padded to its own longest; their
    ``concatenated_inputs`` pads both to the wider and stacks chosen over rejected. The same
    layout on the host, for ``plan``."""
    width = max(chosen.shape[1], rejected.shape[1])
    pad = [torch.nn.functional.pad(m, (0, width - m.shape[1])) for m in (chosen, rejected)]
    return torch.cat(pad)


class Unpad:
    """The backbone's pair of hooks (``install``). A stack, not one slot: each pre-hook pairs
    with its own post-hook, and a forward that raised leaves nothing behind (the post-hook
    always runs, and a pre-hook that raised pushed nothing). ``strict``: a padded batch that
    cannot be unpadded is an error (sdpa_varlen has no padding mask to fall back on:
    transformers gives it none); FlashAttention-2 takes it padded."""

    def __init__(self, strict: bool = True) -> None:
        self._open: list[tuple[torch.Tensor, int, int] | None] = []
        self.strict = strict

    def before(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        given = kwargs.pop(PLAN_KEY, None)
        if len(args) == 1 and "input_ids" not in kwargs:  # model(ids, ...): the backbone's first
            kwargs["input_ids"], args = args[0], ()
        ids, mask = kwargs.get("input_ids"), kwargs.get("attention_mask")
        p = None
        if not args and ids is not None and ids.dim() == 2 and mask is not None:
            fits = given is not None and tuple(given["shape"]) == tuple(ids.shape)
            p = given if fits else plan(mask)
            if p is None and self.strict:
                raise ValueError("--attn sdpa_varlen: a batch with padding that is not at the "
                                 "end of each row, or an empty row; use --attn sdpa")  # fmt: skip
        if p is None or ids is None:
            self._open.append(None)
            return args, kwargs
        if kwargs.get("output_router_logits"):
            raise ValueError("an MoE aux loss (output_router_logits) needs padded rows: TRL "
                             "weighs the router by the padding mask; use --attn sdpa")  # fmt: skip
        rows, longest = ids.shape
        index = p["index"].to(ids.device, non_blocking=True)
        cu = p["cu_seq_lens"].to(ids.device, non_blocking=True)
        kwargs["input_ids"] = ids.reshape(-1).index_select(0, index)[None]
        kwargs["attention_mask"] = None
        kwargs["position_ids"] = p["position_ids"].to(ids.device, non_blocking=True)
        kwargs |= offset_kwargs(cu, p["max_length"])
        self._open.append((index, rows, longest))
        return args, kwargs

    def after(self, module: Any, args: Any, kwargs: Any, output: Any) -> Any:
        opened = self._open.pop() if self._open else None
        if opened is None or output is None:
            return output
        index, rows, longest = opened
        flat = output.last_hidden_state[0]  # [total, hidden]
        padded = flat.new_zeros(rows * longest, flat.shape[-1]).index_copy(0, index, flat)
        output.last_hidden_state = padded.view(rows, longest, flat.shape[-1])
        return output


def backbone(model: Any) -> Any:
    """The decoder stack a causal LM's head is called on (under PEFT: its base model's)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.base_model


def install(model: Any, attn: str = "sdpa_varlen") -> Unpad:
    """Hooks ``model``'s backbone so padded batches run unpadded through it (module docstring);
    ``attn``: the run's kernel, one of ``UNPADDED_ATTN``."""
    hooks = Unpad(strict=attn == "sdpa_varlen")
    stack = backbone(model)
    stack.register_forward_pre_hook(hooks.before, with_kwargs=True)
    stack.register_forward_hook(hooks.after, with_kwargs=True, always_call=True)
    return hooks
