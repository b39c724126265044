"""bench/report.py: docs/benchmarks.md is its output, ratios never cross GPU calls, merged calls
keep their runs apart."""

import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"


@pytest.fixture(scope="module")
def report() -> Iterator[object]:
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("report")
    finally:
        sys.path.remove(str(BENCH))


def test_docs_benchmarks_is_the_report(report: object) -> None:
    """No number in docs/benchmarks.md is typed by hand: it is report.py's output, from the
    result files and today's estimator. After a new result or an estimator change:
    python bench/report.py > docs/benchmarks.md"""
    page = report.page()  # type: ignore[attr-defined]
    assert (REPO / "docs" / "benchmarks.md").read_text() == page, (
        "docs/benchmarks.md is stale: python bench/report.py > docs/benchmarks.md"
    )
    assert "session" not in page.lower()


def _run(row: str, system: str, tps: float, rc: int = 0) -> dict[str, object]:
    return {"row": row, "system": system, "rc": rc, "tokens_per_s": tps, "windows": {},
            "peak_alloc_gib": 1.0, "losses": {"10": 2.0, "30": 1.5}}  # fmt: skip


def test_ratios_are_to_the_plain_median_of_the_same_call(report: object) -> None:
    call = {"runs": [_run("r", "plain", 100), _run("r", "dojo", 300), _run("r", "plain", 200),
                     _run("r", "dojo", 330), _run("r", "trl", 0, rc=1)]}  # fmt: skip
    lines = report.speed_call_table(call, ["r"])  # type: ignore[attr-defined]
    dojo = next(x for x in lines if "| dojo |" in x)
    assert "| 315 |" in dojo and "| 2.10x |" in dojo and "| 1.5000 |" in dojo
    assert "| 0 (+1 failed) |" in next(x for x in lines if "| trl |" in x)
    alone = report.speed_call_table({"runs": [_run("r", "dojo", 300)]}, ["r"])  # type: ignore[attr-defined]
    assert "| - |" in alone[-1]  # no plain run in this call: no ratio


def test_a_set_without_the_plain_script_divides_by_its_reference(report: object) -> None:
    """The preference set's reference is TRL's DPO script: dojo / TRL, same row, same call."""
    call = {"runs": [_run("r", "trl-dpo", 100), _run("r", "dojo", 120)]}
    lines = report.speed_call_table(call, ["r"], "trl-dpo")  # type: ignore[attr-defined]
    assert "vs trl-dpo" in lines[0]
    assert "| trl-dpo |" in lines[2] and "| - |" in lines[2]  # the reference first, no ratio
    assert "| 1.20x |" in next(x for x in lines if "| dojo |" in x)


def test_merge_keeps_each_call(report: object, tmp_path: Path) -> None:
    a = {
        "benchmark": "speed",
        "set": "peer",
        "calls": [{"command": "a", "runs": [_run("r", "plain", 1)]}],
    }
    b = {
        "benchmark": "speed",
        "set": "peer",
        "calls": [{"command": "b", "runs": [_run("r", "dojo", 2)]}],
    }
    m = {"benchmark": "memory", "set": "x", "command": "c", "calls": [{"command": "m"}],
         "rows": [{"row": "r1", "call": 0}]}  # fmt: skip
    for name, doc in (("a", a), ("b", b), ("m1", m), ("m2", m)):
        (tmp_path / f"{name}.json").write_text(json.dumps(doc))
    report.merge([tmp_path / "a.json", tmp_path / "b.json"], tmp_path / "o.json")  # type: ignore[attr-defined]
    assert [c["command"] for c in json.loads((tmp_path / "o.json").read_text())["calls"]] == [
        "a",
        "b",
    ]
    report.merge([tmp_path / "m1.json", tmp_path / "m2.json"], tmp_path / "p.json")  # type: ignore[attr-defined]
    assert [r["call"] for r in json.loads((tmp_path / "p.json").read_text())["rows"]] == [0, 1]
    with pytest.raises(SystemExit):
        report.merge([tmp_path / "a.json", tmp_path / "m1.json"], tmp_path / "q.json")  # type: ignore[attr-defined]


def test_merge_keeps_a_crashed_rows_rerun_only(report: object, tmp_path: Path) -> None:
    """A row that crashed or was refused in one call and ran again in a later one is shown
    once, as rerun; an out-of-memory row is a result and stays beside its rerun."""
    first = {"benchmark": "memory", "set": "x", "command": "c", "calls": [{"command": "m"}],
             "rows": [{"row": "crash", "rc": 1}, {"row": "oom", "rc": 1, "oom": True},
                      {"row": "ok", "rc": 0}, {"row": "refused", "refused": "e"}]}  # fmt: skip
    again = {**first, "rows": [{"row": "crash", "rc": 0}, {"row": "oom", "rc": 0},
                               {"row": "refused", "rc": 0}]}  # fmt: skip
    for name, doc in (("one", first), ("two", again)):
        (tmp_path / f"{name}.json").write_text(json.dumps(doc))
    report.merge([tmp_path / "one.json", tmp_path / "two.json"], tmp_path / "o.json")  # type: ignore[attr-defined]
    rows = json.loads((tmp_path / "o.json").read_text())["rows"]
    assert [(r["row"], r["call"]) for r in rows] == [
        ("oom", 0),
        ("ok", 0),
        ("crash", 1),
        ("oom", 1),
        ("refused", 1),
    ]


def test_orpo_and_simpo_rows_of_whole_logits_get_no_estimate_now(report: object) -> None:
    """ORPO/SimPO rows measured before dojo ran them through TRL's fused LM head made the whole
    logits; today's estimate describes the fused run, so it is not set beside them. Rows the
    bench records now say "lm_head": "chunked"; DPO and KTO always ran TRL's fused head."""
    from rows import Row

    whole = report.whole_logits_run  # type: ignore[attr-defined]
    orpo = Row("held", "dojo", "l1b", 2, "lora", extra=("--objective", "orpo"))
    simpo = Row(
        "held", "dojo", "l1b", 2, "lora", extra=("--grad-accum", "2", "--objective", "simpo")
    )
    dpo = Row(
        "held", "dojo", "l1b", 2, "lora", extra=("--objective", "dpo", "--precompute-ref-log-probs")
    )
    assert whole(orpo, {}) and whole(simpo, {"attn": "sdpa"})
    assert not whole(orpo, {"lm_head": "chunked"}) and not whole(dpo, {})
    assert not whole(Row("held", "dojo", "l1b", 2), {})
    assert dpo.objective == "dpo" and Row("held", "dojo", "l1b", 2).objective == "sft"


def test_qlora_rows_without_deepspeed_from_the_per_sample_attention_calls_get_no_estimate_now(
    report: object,
) -> None:
    """QLoRA without DeepSpeed on sdpa_varlen, measured at a commit whose sdpa_varlen sent the
    fp32 query through its per-sample loop: today's estimate describes the FlashAttention run, so
    it is not set beside them. Other methods, stages, kernels and later calls are judged."""
    from rows import Row

    run = report.per_sample_attention_run  # type: ignore[attr-defined]
    old = next(iter(report.PER_SAMPLE_COMMITS))  # type: ignore[attr-defined]
    qlora = Row("held", "dojo", "tl1b", -1, "qlora", grad_ckpt=True)
    varlen = {"ran": {"attn": "sdpa_varlen"}}
    assert run(qlora, varlen, old)
    assert run(qlora, {"estimate": {"resolved": {"attn": "sdpa_varlen"}}}, old)
    assert not run(qlora, varlen, "af74871")  # after the fix
    assert not run(qlora, {"ran": {"attn": "sdpa"}}, old)
    assert not run(Row("held", "dojo", "tl1b", 2, "qlora"), varlen, old)  # DeepSpeed: bf16
    assert not run(Row("held", "dojo", "tl1b", -1, "lora"), varlen, old)
