"""The GPU benchmark scripts still fit dojo's code before a GPU call spends device time on them.

Session 7's first memory call died in 37 s on ``Machine(triton=...)``, a field removed from
dojo a session earlier: nothing on the CPU had imported bench/memory_parallel.py since.
"""

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture(scope="module")
def bench() -> Iterator[None]:
    """bench/ on sys.path, as the scripts put it there themselves when run."""
    pytest.importorskip("psutil")  # memory_parallel samples process trees with it
    sys.path.insert(0, str(BENCH))
    try:
        yield
    finally:
        sys.path.remove(str(BENCH))


def test_every_memory_row_resolves_to_an_estimate(bench: None) -> None:
    """What bench/memory_parallel.py does for each row before it launches anything."""
    parallel = importlib.import_module("memory_parallel")
    heldout = importlib.import_module("memory_heldout")
    from dojo.estimate import estimate

    for which in parallel.ROW_FILES:
        rows = parallel.load_rows(which)
        labels = [r.label() for r in rows]
        assert len(set(labels)) == len(labels), which
        for r in rows:
            spec = heldout.spec_for(r.shape)
            e = estimate(spec, parallel.setup_for(r, spec, None, heldout.H200_GIB, 64.0))
            assert e.gpu_total_gib > 0, r.label()


def test_speed_variants_pass_only_real_train_flags(bench: None) -> None:
    throughput = importlib.import_module("throughput")
    from dojo.run.catalog import COMMAND_OPTIONS, OPTIONS

    known = {
        spelling
        for name in COMMAND_OPTIONS["train"]
        for flag in OPTIONS[name].flags
        for spelling in flag.split("/")
    }
    for variant, (flags, _env) in throughput.VARIANTS.items():
        for token in flags:
            if token.startswith("--"):
                assert token in known, f"{variant}: {token} is not a dojo train flag"


def test_speed_warmup_runs_each_item_once_unrecorded(
    bench: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--warmup N: every distinct CASE:SYSTEM once for N steps before the recorded rounds, which
    alternate as before; nothing of the warm-up reaches the results."""
    import argparse
    import json
    from types import SimpleNamespace

    throughput = importlib.import_module("throughput")
    calls: list[tuple[str, int]] = []

    def fake(system: str):  # type: ignore[no-untyped-def]
        def run(model, data, out, case, steps, *rest):  # type: ignore[no-untyped-def]
            calls.append((system, steps))
            return {"rc": 0, "tail": "", "tokens_per_s_after_step1": 1000.0 + len(calls)}

        return run

    monkeypatch.setattr(throughput, "run_baseline", fake("baseline"))
    monkeypatch.setattr(throughput, "run_dojo", fake("dojo"))
    monkeypatch.setattr(
        throughput, "make_datasets", lambda work, n: {"fixed": tmp_path, "mix": tmp_path}
    )
    monkeypatch.setattr(throughput, "prepare_model", lambda shape, work: tmp_path)
    spec = SimpleNamespace(params=1e9, hidden_size=64, num_layers=2)
    monkeypatch.setattr(throughput, "resolve_model", lambda path: spec)
    out = tmp_path / "tp.json"
    a = argparse.Namespace(plan=["T1:baseline", "T1:dojo", "T1:baseline"], repeats=2, warmup=3,
                           steps=40, steps_7b=8, out=str(out))  # fmt: skip
    throughput.run_plan(a, tmp_path)
    assert calls[:2] == [("baseline", 3), ("dojo", 3)]  # each distinct item once, 3 steps
    assert calls[2:] == [("baseline", 40), ("dojo", 40), ("baseline", 40)] * 2
    rows = json.loads(out.read_text())
    assert [(r["system"], r["item"], r["rep"]) for r in rows] == [
        ("baseline", 0, 0), ("dojo", 1, 0), ("baseline", 2, 0),
        ("baseline", 3, 1), ("dojo", 4, 1), ("baseline", 5, 1),
    ]  # fmt: skip
    assert rows[0]["real_tokens_per_s"] == 1003  # the first recorded run, after the warm-up


def test_a_row_attention_reaches_the_run_and_the_estimate(bench: None, tmp_path: Path) -> None:
    """Session-11 rows may set --attn: the launched command carries it, the estimate models it."""
    parallel = importlib.import_module("memory_parallel")
    heldout = importlib.import_module("memory_heldout")
    (row,) = [
        r for r in parallel.load_rows("s11") if r.attn == "sdpa_varlen" and r.method == "full"
    ]
    cmd = parallel.command(row, tmp_path / "model", tmp_path, tmp_path / "run")
    assert cmd[cmd.index("--attn") + 1] == "sdpa_varlen"
    spec = heldout.spec_for(row.shape)
    assert parallel.setup_for(row, spec, None, 139.0, 64.0).attention == "flash_attention_2"
    plain = [r for r in parallel.load_rows("s11") if r.attn == "auto"][0]
    assert "--attn" not in parallel.command(plain, tmp_path / "model", tmp_path, tmp_path / "r2")


def test_a_liger_loss_row_runs_and_is_estimated_as_the_fused_loss_alone(
    bench: None, tmp_path: Path
) -> None:
    """Session-12 rows: --liger loss on the command, no Liger layer kernels in the estimate."""
    parallel = importlib.import_module("memory_parallel")
    heldout = importlib.import_module("memory_heldout")
    rows = parallel.load_rows("s12")
    loss = [r for r in rows if r.liger_loss][0]
    cmd = parallel.command(loss, tmp_path / "model", tmp_path, tmp_path / "run")
    assert cmd[cmd.index("--liger") + 1] == "loss" and cmd[cmd.index("--compile") + 1] == "on"
    setup = parallel.setup_for(loss, heldout.spec_for(loss.shape), None, 139.0, 64.0)
    assert setup.liger and not setup.liger_kernels and setup.compile
    full = [r for r in rows if r.system == "dojo" and not r.liger_loss][0]
    cmd = parallel.command(full, tmp_path / "model", tmp_path, tmp_path / "r2")
    assert cmd[cmd.index("--liger") + 1] == "on"


def test_memsnap_names_the_allocation_that_grew_the_reserve(bench: None) -> None:
    memsnap = importlib.import_module("memsnap")
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
    grown = memsnap.growths(trace)
    assert [(x["size"], x["allocated"], x["request"]) for x in grown] == [
        (2 * g, 0, g),
        (3 * g, g, 3 * g),
    ]
    assert grown[1]["where"].startswith("step (stage_1_and_2.py:99)")  # torch's own frames skipped
    segs = [{"total_size": 4 * g, "allocated_size": g, "stream": 0,
             "blocks": [{"size": g, "state": "active_allocated"}, {"size": 3 * g, "state": "inactive"}]}]  # fmt: skip
    assert memsnap.holes(segs) == [(3 * g, 0, 0)]
    text = memsnap.summarize({"device_traces": [trace], "segments": segs}, ["step 1: ..."])
    assert text.startswith("step 1: ...\nat the snapshot: 1 segments, reserved 4.00 GiB")
    assert "+ 3.000 GiB -> reserved   5.00, allocated   1.00 GiB; request 3.000 GiB at step" in text
