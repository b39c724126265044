"""bench/memsnap.py (the allocator-history summary docs/estimate.md cites) names the allocation
that grew the reserve."""

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture(scope="module")
def memsnap() -> Iterator[object]:
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("memsnap")
    finally:
        sys.path.remove(str(BENCH))


def test_memsnap_names_the_allocation_that_grew_the_reserve(memsnap: object) -> None:
    m = memsnap
    g = 2**30
    step = [{"filename": "/x/torch/optim/adamw.py", "line": 5, "name": "_fused"},
            {"filename": "/x/deepspeed/runtime/zero/stage_1_and_2.py", "line": 99, "name": "step"}]  # fmt: skip
    fwd = [
        {"filename": "/x/transformers/models/llama/modeling_llama.py", "line": 7, "name": "forward"}
    ]
    trace = [
        {"action": "segment_map", "size": 2 * g, "stream": 0},
        {"action": "alloc", "size": g, "stream": 0, "frames": fwd},
        {"action": "segment_map", "size": 3 * g, "stream": 0},
        {"action": "alloc", "size": 3 * g, "stream": 0, "frames": step},
        {"action": "free_completed", "size": 3 * g},
        {"action": "segment_unmap", "size": g},
    ]
    grown = m.growths(trace)  # type: ignore[attr-defined]
    assert [(x["size"], x["allocated"], x["request"]) for x in grown] == [
        (2 * g, 0, g),
        (3 * g, g, 3 * g),
    ]
    assert grown[1]["where"].startswith("step (stage_1_and_2.py:99)")  # torch's own frames skipped
    segs = [{"total_size": 4 * g, "allocated_size": g, "stream": 0,
             "blocks": [{"size": g, "state": "active_allocated"}, {"size": 3 * g, "state": "inactive"}]}]  # fmt: skip
    assert m.holes(segs) == [(3 * g, 0, 0)]  # type: ignore[attr-defined]
    text = m.summarize({"device_traces": [trace], "segments": segs}, ["step 1: ..."])  # type: ignore[attr-defined]
    assert text.startswith("step 1: ...\nat the snapshot: 1 segments, reserved 4.00 GiB")
    assert "+ 3.000 GiB -> reserved   5.00, allocated   1.00 GiB; request 3.000 GiB at step" in text


def test_memsnap_lists_what_is_live_at_the_peak(memsnap: object) -> None:
    m = memsnap
    g = 2**30
    head = [{"filename": "/x/trl/experimental/orpo/orpo_trainer.py", "line": 7, "name": "fwd"}]
    trace = [
        {"action": "alloc", "addr": 1, "size": 2 * g, "frames": head},
        {"action": "alloc", "addr": 2, "size": g, "frames": []},
        {"action": "alloc", "addr": 3, "size": g, "frames": []},
        {"action": "free_completed", "addr": 2, "size": g},
        {"action": "free_completed", "addr": 3, "size": g},
        {"action": "alloc", "addr": 4, "size": g, "frames": head},  # 3 GiB: not the peak
    ]
    top, live = m.at_peak(trace)  # type: ignore[attr-defined]
    assert top == 4 * g
    assert live == [(2 * g, 2, "1.000 GiB at backward"),
                    (2 * g, 1, "2.000 GiB at fwd (orpo_trainer.py:7)")]  # fmt: skip
