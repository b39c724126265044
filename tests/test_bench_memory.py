"""bench/memory.py and bench/rows.py: every memory row resolves through `dojo estimate` with the
flags it passes to `dojo train`, before a GPU call spends device time on it; committed sets
never change.

A GPU memory call once died in 37 s on a dojo field removed a session earlier: nothing on the CPU
had resolved the rows since. The dry run here is what the GPU run does before it launches a row.
"""

import dataclasses
import hashlib
import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"

FROZEN = {
    "calibration": "ecd767366d27bae8",
    "five-archs": "04c54fdba848ef44",
    "heldout-new-shapes": "cf510be6ad9568f1",
    "heldout-qwen3b-tinyllama": "da706196b764ae8a",
    "heldout-expandable": "6b5d4167d6bbbbb3",
    "heldout-zero3-tile": "cc05d763f450fddf",
    "heldout-compile-allocators": "e3ddfbdc10d62a67",
    "heldout-expandable-default": "59457c0e521c0a48",
    "heldout-liger-expandable": "f4ac143ea8051b02",
    "heldout-compile-qlora-varlen": "b1caffa476f4a71b",
    "heldout-fused-loss": "6ba0bf04946695d4",
    "heldout-step-pages": "3a50f0cd83caf526",
    "heldout-qk-norms": "947fc66fe429ab85",
    "heldout-zero3-nockpt": "fd691104ef272446",
    "heldout-plain-full": "25c326f5f6806286",
    "heldout-preference": "3034e672e704c72a",
    "heldout-moe-offload-long": "b8bb27bd22b59505",
    "heldout-moe-families": "d2123835381de817",
    "heldout-pref-loss-kbit": "00f8fe997f6cc240",
    "heldout-kbit-load": "e6b963e422574d44",
    "heldout-nods-backward-peak": "8d5e5758061ea59f",
    "heldout-ds-backward-peak": "59c72ec6c5789f9f",
    "heldout-second-upcast": "347384dbcbdcdd25",
    "heldout-logits-reserve": "5333d2ff9bde34d9",
    "heldout-dora-modules": "fd18deaf3986defe",
    "heldout-norm-copy": "69cb7f49e8f9cb3f",
    "heldout-step-upcast": "f313eeb89717c3c0",
    "heldout-step-remap": "22fa6d844e6ec86b",
    "heldout-users-next": "7c22f9accd0444a0",
    "heldout-eager-checkpointed": "db008a5eb3b3a997",  # committed before it runs: frozen from then on
    "heldout-offload-norm": "f2e08b6ebf570953",
    "heldout-offload-init": "a9284e42819cc9b6",
    "heldout-eager-cuda": "72d571f81883677a",  # committed before it runs
}
"""Each set that has run (or is committed to run as held-out rows): a fingerprint of its rows and
their fit/held split. A held-out claim rests on the rows committed before they ran, so these
never change; a new set gets its line once its GPU call has run, or when it is committed as a
held-out claim."""


@pytest.fixture(scope="module")
def bench() -> Iterator[None]:
    """bench/ on sys.path, as the scripts put it there themselves when run."""
    sys.path.insert(0, str(BENCH))
    try:
        yield
    finally:
        sys.path.remove(str(BENCH))


def _fingerprint(rows: object) -> str:
    text = "\n".join(f"{r.split} {r.label()}" for r in rows)  # type: ignore[attr-defined]
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def test_sets_that_ran_are_unchanged_and_labels_unique(bench: None) -> None:
    rows = importlib.import_module("rows")
    for name, fp in FROZEN.items():
        assert _fingerprint(rows.MEMORY_SETS[name].rows) == fp, f"{name}: its rows changed"
    for name, mset in rows.MEMORY_SETS.items():
        labels = [r.label() for r in mset.rows]
        assert len(set(labels)) == len(labels), name
        assert {r.split for r in mset.rows} <= {"fit", "held"}, name
        assert mset.committed and mset.was, name
        assert all(r.shape in rows.SHAPES for r in mset.rows), name


def test_every_row_resolves_through_dojo_estimate(bench: None, tmp_path: Path) -> None:
    """What `python bench/memory.py --set NAME --dry-run` does for every set: today's dojo
    estimates every row, except Gemma-2 rows that ran SDPA (transformers then dropped the
    soft-cap; dojo refuses --attn sdpa for Gemma-2 now, with its reason) and the one row that
    compiled with Liger's layer kernels (refused now: the pair trained to NaN losses)."""
    memory = importlib.import_module("memory")
    rows = importlib.import_module("rows")
    refused = []
    for name, mset in rows.MEMORY_SETS.items():
        for r in mset.rows:
            e = memory.estimate_row(r, tmp_path, memory.H200_GIB, memory.HOST_GIB)
            if "error" in e:
                refused.append((name, r.label(), e["error"]))
                continue
            assert e["gpu_gib"] > e["alloc_gib"] > 0, (name, r.label())
            assert e["verdict"] in ("fits", "tight", "does not fit"), (name, r.label())
    gemma = [(lbl, why) for _, lbl, why in refused if lbl.startswith("dojo_g2b")]
    assert gemma and all("sdpa" in why for _, why in gemma)
    rest = [(lbl, why) for _, lbl, why in refused if not lbl.startswith("dojo_g2b")]
    assert [lbl for lbl, _ in rest] == ["dojo_l1b_Z2_full_b8x512_nockpt_liger_pack_compile-auto"]
    assert "--compile on with --liger on" in rest[0][1]


def test_a_dojo_row_passes_the_same_settings_to_train_and_estimate(
    bench: None, tmp_path: Path
) -> None:
    memory = importlib.import_module("memory")
    rows = importlib.import_module("rows")
    row = rows.Row("held", "dojo", "q15", 2, "lora", micro_batch=2, liger_loss=True, compile="on",
                   attn="sdpa", alloc=rows.EXP, offload="none")  # fmt: skip
    flags = memory.dojo_flags(row)
    cmd = memory.command(row, tmp_path / "m", tmp_path / "d.jsonl", tmp_path / "run", gpu=3)
    assert cmd[cmd.index("train") + 1 : cmd.index("train") + 3] == ["--gpus", "3"]
    joined = " ".join(cmd)
    assert " ".join(flags) in joined  # the very flags the estimate gets
    assert (
        flags[flags.index("--liger") + 1] == "loss" and flags[flags.index("--attn") + 1] == "sdpa"
    )
    assert flags[flags.index("--expandable-segments") + 1] == "on"
    assert memory.alloc_env(row) == {"PYTORCH_CUDA_ALLOC_CONF": rows.EXP}
    off = rows.Row("fit", "dojo", "l1b", 2, offload="cpu", extra=("--bucket-size", "5e8"))
    assert memory.dojo_flags(off)[-4:] == ["--optimizer", "ds", "--bucket-size", "5e8"]
    plain = rows.Row("held", "plain", "l1b", -1, "qlora", grad_ckpt=True)
    cmd = memory.command(plain, tmp_path / "m", tmp_path / "d.jsonl", tmp_path / "run")
    assert cmd[7].endswith("baseline_trainer.py") and cmd[cmd.index("--zero") + 1] == "none"


def test_a_row_on_two_gpus(bench: None, tmp_path: Path) -> None:
    """It trains on GPUs 0 and 1 (dojo and the plain script), its estimate is for two GPUs, and
    its memory is its fullest GPU's, not the two ranks' sum."""
    memory = importlib.import_module("memory")
    rows = importlib.import_module("rows")
    row = rows.Row("held", "dojo", "q15", 3, "qlora", micro_batch=1, seq_len=512, gpus=2)
    assert row.label().endswith("_gpus2")
    assert not rows.Row("held", "dojo", "q15", 3, "qlora").label().endswith("gpus1")
    cmd = memory.command(row, tmp_path / "m", tmp_path / "d.jsonl", tmp_path / "run", gpu=3)
    assert cmd[cmd.index("--gpus") + 1] == "0,1"
    plain = memory.command(dataclasses.replace(row, system="plain"), tmp_path / "m",
                           tmp_path / "d.jsonl", tmp_path / "run")  # fmt: skip
    assert plain[plain.index("--include") + 1] == "localhost:0,1"
    one = memory.estimate_row(dataclasses.replace(row, gpus=1), tmp_path, 139.8, 125.8)
    two = memory.estimate_row(row, tmp_path, 139.8, 125.8)
    assert two["gpu_gib"] != one["gpu_gib"]  # ZeRO-3 over two GPUs, not one
    used = {(10, "GPU-a"): 3000.0, (11, "GPU-b"): 2500.0, (12, "GPU-a"): 500.0, (99, "GPU-b"): 7e4}
    assert memory.row_gpu_mib(used, {10, 11, 12}) == 3500.0
    assert memory.row_gpu_mib(used, {5}) == 0.0


def test_setting_flags_are_flags_of_both_commands(bench: None) -> None:
    memory = importlib.import_module("memory")
    rows = importlib.import_module("rows")
    train = memory.dojo_cli(["train", "--help"])
    estimate = memory.dojo_cli(["estimate", "--help"])
    used = {t for m in rows.MEMORY_SETS.values() for r in m.rows for t in memory.dojo_flags(r)}
    for flag in sorted(t for t in used if t.startswith("--")):
        assert flag in train and flag in estimate, flag


def test_what_ran_is_pinned_for_a_measured_row(bench: None) -> None:
    """A measured row is re-estimated on the settings it ran with: its zero_optimization and
    its attention kernel, where its own flags left dojo's auto."""
    memory = importlib.import_module("memory")
    rows = importlib.import_module("rows")
    z3 = rows.Row("held", "dojo", "l1b", 3)
    zo = {"reduce_bucket_size": 5e8, "overlap_comm": True, "sub_group_size": 1e8,
          "stage3_prefetch_bucket_size": "auto", "leaf_module": {"classes": ["LlamaDecoderLayer"]}}  # fmt: skip
    flags = memory.pinned_flags(z3, {"zero_optimization": zo, "attn": "sdpa"}, hidden=2048)
    assert flags == [
        "--bucket-size", "500000000", "--overlap-comm", "--sub-group-size", "100000000",
        "--prefetch-bucket-size", str(int(0.9 * 2048 * 2048)), "--z3-leaf", "auto",
        "--attn", "sdpa",
    ]  # fmt: skip
    old = memory.pinned_flags(z3, {"zero_optimization": {}}, hidden=2048)  # DeepSpeed's 1e9
    assert old[old.index("--sub-group-size") + 1] == "1000000000" and "off" in old
    named = rows.Row("held", "dojo", "l1b", 2, attn="eager")
    assert "--attn" not in memory.pinned_flags(named, {"attn": "sdpa"}, hidden=2048)


def test_plain_rows_are_estimated_as_the_plain_script_runs(bench: None, tmp_path: Path) -> None:
    memory = importlib.import_module("memory")
    rows = importlib.import_module("rows")
    no_ds = rows.Row("held", "plain", "l1b", -1, "qlora", grad_ckpt=True)
    z2 = rows.Row("held", "plain", "l1b", 2, "qlora", grad_ckpt=True)
    a = memory.estimate_row(no_ds, tmp_path, memory.H200_GIB, memory.HOST_GIB)
    b = memory.estimate_row(z2, tmp_path, memory.H200_GIB, memory.HOST_GIB)
    assert a["gpu_gib"] != b["gpu_gib"]  # no DeepSpeed: no engine, no buckets
    assert memory.verdict_right({"oom": True}, {"verdict": "does not fit", "cpu_gib": 1.0})
    assert not memory.verdict_right({"oom": False}, {"verdict": "does not fit", "cpu_gib": 1.0})
    host = {"verdict": "does not fit", "cpu_gib": memory.HOST_GIB + 1}
    assert memory.verdict_right({"host_killed": True}, host)


def test_results_are_rows_of_their_sets(bench: None) -> None:
    rows = importlib.import_module("rows")
    for f in sorted((BENCH / "results").glob("memory-*.json")):
        doc = json.loads(f.read_text())
        mset = rows.MEMORY_SETS[doc["set"]]
        assert f.name == f"memory-{doc['set']}.json"
        by_label = {r.label(): r for r in mset.rows}
        for m in doc["rows"]:
            assert m["row"] in by_label, (f.name, m["row"])
            assert m["split"] == by_label[m["row"]].split, (f.name, m["row"])
            assert 0 <= m.get("call", 0) < len(doc["calls"])


def test_dry_run_prints_every_row(bench: None, capsys: pytest.CaptureFixture[str]) -> None:
    memory = importlib.import_module("memory")
    memory.dry_run("heldout-plain-full", None, 132.0)
    out = capsys.readouterr().out
    assert out.count("| held |") == 10
    assert "10 rows, shapes g2b, l1b, l3b, m7b, q06, q15, q3, tl1b" in out


def test_each_row_gets_its_own_memsnap_folder(
    bench: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With DOJO_BENCH_MEMSNAP=DIR a row's allocator history goes to DIR/<its label>, so
    concurrent rows' summaries can be told apart; without it rows get no variable."""
    memory, rows = importlib.import_module("memory"), importlib.import_module("rows")
    row = rows.MEMORY_SETS["heldout-moe-families"].rows[1]
    monkeypatch.delenv("DOJO_BENCH_MEMSNAP", raising=False)
    assert memory.memsnap_env(row) == {}
    monkeypatch.setenv("DOJO_BENCH_MEMSNAP", str(tmp_path))
    assert memory.memsnap_env(row) == {"DOJO_BENCH_MEMSNAP": str(tmp_path / row.label())}


def test_a_sets_next_call_runs_the_rows_left(bench: None, tmp_path: Path) -> None:
    memory = importlib.import_module("memory")
    rows = importlib.import_module("rows")
    labels = [r.label() for r in rows.MEMORY_SETS["heldout-users-next"].rows]
    done = tmp_path / "memory-heldout-users-next.json"
    assert memory.left_after("heldout-users-next", None, done) == labels  # no file yet: all
    crashed, oom = {"row": labels[2], "rc": -9}, {"row": labels[3], "rc": 1, "oom": True}
    ran = [{"row": labels[0], "rc": 0}, {"row": labels[5], "refused": "e"}, crashed, oom]
    done.write_text(json.dumps({"rows": ran}))
    left = memory.left_after("heldout-users-next", None, done)  # a crashed row runs again
    assert left == [x for i, x in enumerate(labels) if i not in (0, 3, 5)]
    assert memory.left_after("heldout-users-next", labels[:2], done) == [labels[1]]
    with pytest.raises(SystemExit, match="nothing left to run"):
        memory.left_after("heldout-users-next", [labels[0]], done)


def test_the_calls_time_limit_is_not_taken_for_a_refusal(
    bench: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stop on the call's time limit can land while `dojo estimate` runs in the process:
    it ends the call, where a SystemExit would have read as dojo refusing the row."""
    import dojo.cli

    memory = importlib.import_module("memory")

    def stopped(argv: list[str]) -> None:
        raise memory.Stopped

    monkeypatch.setattr(dojo.cli, "main", stopped)
    with pytest.raises(memory.Stopped):
        memory.dojo_cli(["estimate"])
