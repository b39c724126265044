"""Packing: rows within seq_len, positions restart per sample, no attention across samples."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dojo.train.worker.packing import IGNORE, pack, sample_offsets
from tests.helpers.examples import random_examples, tiny_llama


def make(lengths: list[int], start: int = 10) -> list[dict[str, list[int]]]:
    out = []
    for n_i, n in enumerate(lengths):
        ids = [start + n_i * 100 + j for j in range(n)]  # unique ids: each token is traceable
        out.append({"input_ids": ids, "labels": list(ids)})
    return out


def split_row(row: dict[str, list[int]]) -> list[list[int]]:
    samples: list[list[int]] = []
    for tok, pos in zip(row["input_ids"], row["position_ids"], strict=True):
        if pos == 0:
            samples.append([])
        samples[-1].append(tok)
    return samples


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 40), max_size=30), st.integers(40, 100))
def test_pack_keeps_every_sample_whole(lengths: list[int], seq_len: int) -> None:
    examples = make(lengths)
    rows = pack(examples, seq_len)
    seen = []
    for row in rows:
        assert 0 < len(row["input_ids"]) <= seq_len
        assert len(row["labels"]) == len(row["input_ids"]) == len(row["position_ids"])
        samples = split_row(row)
        seen += samples
        at = 0
        for s in samples:
            assert row["labels"][at] == IGNORE  # never trained to predict across a boundary
            assert row["labels"][at + 1 : at + len(s)] == s[1:]
            at += len(s)
    assert sorted(map(tuple, seen)) == sorted(tuple(e["input_ids"]) for e in examples)


def test_pack_fills_rows_best_fit() -> None:
    rows = pack(make([5, 3, 7, 2, 8, 1]), 8)
    assert [len(r["input_ids"]) for r in rows] == [8, 8, 8, 2]
    assert sum(len(r["input_ids"]) for r in rows) == 26


def test_sample_offsets() -> None:
    """Where each sample starts in a packed row (from its position ids), and the longest one."""
    assert sample_offsets([0, 1, 2, 0, 1, 0]) == ([0, 3, 5, 6], 3)
    assert sample_offsets([0, 1, 2, 3]) == ([0, 4], 4)
    assert sample_offsets([]) == ([0], 0)


def test_pack_is_deterministic_and_refuses_long() -> None:
    ex = make([3, 9, 4, 4, 1, 7])
    assert pack(ex, 10) == pack(ex, 10)
    with pytest.raises(ValueError, match="more than seq_len"):
        pack(make([11]), 10)
    assert pack([], 10) == []


# ---- slow: the real model proves no cross-sample attention ---------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("flatten", [True, False])
def test_packed_logits_equal_each_sample_alone(attn: str, flatten: bool) -> None:
    import torch

    from dojo.train.worker.packing import PackedCollator, packing_supported

    model = tiny_llama(attn)
    assert packing_supported(model)[0]
    examples = random_examples((7, 12, 5, 9, 3))
    rows = pack(examples, 16)
    assert len(rows) < len(examples)  # something was really packed together
    batch = PackedCollator(pad_id=0, flatten=flatten)(rows)
    assert "attention_mask" not in batch
    with torch.no_grad():
        packed = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"]).logits
        plain = model(input_ids=batch["input_ids"]).logits  # control: ordinary causal mask
        alone = {
            tuple(e["input_ids"]): model(input_ids=torch.tensor([e["input_ids"]])).logits[0]
            for e in examples
        }
    differs = False
    for b in range(batch["input_ids"].shape[0]):
        ids, pos = batch["input_ids"][b].tolist(), batch["position_ids"][b].tolist()
        starts = [i for i, p in enumerate(pos) if p == 0] + [len(pos)]
        for s, e in zip(starts, starts[1:], strict=False):
            key = tuple(ids[s:e])
            if key not in alone:
                assert not flatten and all(t == 0 for t in key)  # the padding "sample"
                continue
            torch.testing.assert_close(packed[b, s:e], alone[key], atol=1e-5, rtol=1e-4)
            differs |= s > 0 and not torch.allclose(plain[b, s:e], alone[key], atol=1e-3)
    assert differs, "control: without position_ids the later samples must see the earlier ones"


@pytest.mark.slow
def test_collators_pad_and_label() -> None:
    from dojo.train.worker.packing import PackedCollator, PadCollator

    ex = [{"input_ids": [5, 6, 7], "labels": [-100, 6, 7]}, {"input_ids": [8], "labels": [8]}]
    b = PadCollator(pad_id=0)(ex)
    assert b["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
    assert b["labels"].tolist() == [[-100, 6, 7], [8, -100, -100]]
    assert b["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert PadCollator(pad_id=0, pad_to_multiple_of=4)(ex)["input_ids"].shape == (2, 4)
    rows = pack(ex, 8)
    flat = PackedCollator(pad_id=0)(rows)
    assert flat["input_ids"].tolist() == [[5, 6, 7, 8]]
    assert flat["position_ids"].tolist() == [[0, 1, 2, 0]]
    assert flat["labels"].tolist() == [[-100, 6, 7, -100]]


def test_packing_not_supported_reasons() -> None:
    from dojo.train.worker.packing import packing_supported

    class Cfg:
        _attn_implementation = "paged_attention"

    class Remote:
        config = Cfg()

    ok, why = packing_supported(Remote())
    assert not ok and "paged_attention" in why
    Cfg._attn_implementation = "sdpa"
    ok, why = packing_supported(Remote())  # its module has no create_causal_mask
    assert not ok and "masking_utils" in why


@pytest.mark.slow
def test_compiled_width_gives_every_row_a_padding_sample() -> None:
    from dojo.train.worker.packing import PackedCollator, compiled_width

    assert [compiled_width(n) for n in (8, 15, 16, 2048)] == [16, 16, 24, 2056]
    rows = pack(make([5, 3, 16]), 16)  # one row of two samples, one row of one whole sample
    b = PackedCollator(pad_id=0, flatten=False, width=24)(rows)
    assert b["input_ids"].shape == (2, 24)
    for ids, pos, labels in zip(b["input_ids"].tolist(), b["position_ids"].tolist(),
                                b["labels"].tolist(), strict=True):  # fmt: skip
        n = sum(1 for t in ids if t)
        assert pos[n:] == list(range(24 - n)) and ids[n:] == [0] * (24 - n)
        assert labels[n:] == [IGNORE] * (24 - n)
    with pytest.raises(ValueError, match="does not fit width 16"):
        PackedCollator(pad_id=0, flatten=False, width=16)(rows)
    short = PackedCollator(pad_id=0, flatten=False, width=24, batch_rows=3)(rows)  # an epoch's last
    assert short["input_ids"].shape == (3, 24) and short["input_ids"][2].tolist() == [0] * 24
    assert short["labels"][2].tolist() == [IGNORE] * 24
    assert short["position_ids"][2].tolist() == list(range(24))
    assert short["dojo_real_tokens"] == b["dojo_real_tokens"] == 24  # the real tokens only


def test_packed_collator_by_attention_and_compile() -> None:
    from dojo.train.worker.packing import PackedCollator, packed_collator

    def kind(impl: str, compiled: bool) -> tuple[bool, bool, int | None, int | None]:
        c = packed_collator(0, impl, compiled=compiled, seq_len=2048, micro_batch=4)
        return c.flatten, c.varlen, c.width, c.batch_rows

    assert kind("sdpa", True) == (False, False, 2056, 4)  # compiled layers: one shape
    c = packed_collator(0, "sdpa", compiled=True, seq_len=2048, micro_batch=4, one_per_row=True)
    assert (c.width, c.batch_rows) == (None, 4)  # fixed-length data: no mask in any batch, as it is
    assert kind("sdpa", False) == kind("eager", False) == (False, False, None, None)
    assert kind("sdpa_varlen", True) == (False, True, None, None)  # left out of compile
    assert kind("flash_attention_2", True) == (True, False, None, None)
    assert isinstance(packed_collator(0, "sdpa", compiled=False, seq_len=8), PackedCollator)


@pytest.mark.slow
def test_compiled_layers_compile_once_over_every_packed_layout() -> None:
    """A micro-batch whose rows each hold one whole sample has no sample boundary: transformers
    then skips the mask (SDPA's causal flag), and a layer compiled for a mask tensor recompiles.
    The fixed width and row count keep one graph; without them, that batch, a batch of shorter
    rows and a short micro-batch each compile again."""
    import torch
    from accelerate.utils import compile_regions
    from torch._dynamo.utils import counters

    from dojo.train.worker.packing import PackedCollator, compiled_width

    def graphs_per_batch(width: int | None, rows: int | None) -> list[int]:
        torch._dynamo.reset()
        counters.clear()
        model = compile_regions(tiny_llama("sdpa").train(), backend="eager")
        collate = PackedCollator(pad_id=0, flatten=False, width=width, batch_rows=rows)
        out = []
        # micro-batches of two rows: (16, 16) is two whole samples, (9, 4, 6) two rows shorter
        # than seq_len (a shorter longest row); (7, 5) packs into one row, as an epoch's last
        # micro-batch may be short
        for lengths in ((5, 7, 4, 9, 6), (16, 16), (9, 4, 6), (3, 5, 2, 6, 8, 7), (7, 5)):
            batch = collate(pack(make(list(lengths)), 16))
            model(**batch, use_cache=False).loss.backward()
            out.append(int(counters["stats"]["unique_graphs"]))
        return out

    fixed = graphs_per_batch(compiled_width(16), 2)
    assert fixed == [fixed[0]] * 5, fixed
    plain = graphs_per_batch(None, None)
    assert plain[1] > plain[0] and plain[2] > plain[1], plain  # control: both compile again
    assert plain[4] > plain[3], plain  # and the short micro-batch
