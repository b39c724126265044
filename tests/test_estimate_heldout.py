"""bench/memory_heldout.py turns a measured session-3 row into the Setup it ran (issue 12)."""

import importlib.util
import json
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parent.parent / "bench" / "memory_heldout.py"
_spec = importlib.util.spec_from_file_location("memory_heldout", _PATH)
assert _spec and _spec.loader
heldout = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(heldout)


def _row(**params: object) -> dict[str, object]:
    base = {"system": "dojo", "shape": "l1b", "stage": 2, "method": "full", "micro_batch": 4,
            "seq_len": 2048, "grad_ckpt": False, "liger": "on", "packing": True, "offload": "none"}  # fmt: skip
    return {"row": "r", "split": "held", "params": {**base, **params}, "zero_optimization": {}}


def test_plain_rows_have_no_liger_or_packing_and_no_deepspeed_below_zero() -> None:
    s = heldout.setup_for(_row(system="plain", stage=-1, method="qlora"))
    assert (s.stage, s.deepspeed, s.liger, s.packing) == (0, False, False, False)
    assert s.fp32_adapters and s.fp32_rest  # PEFT's defaults, nothing casts them
    d = heldout.setup_for({**_row(stage=3), "zero_optimization": {"reduce_bucket_size": 5e8}})
    assert d.liger and d.packing and d.deepspeed and d.bucket_size == 500_000_000 and d.overlap
    assert not d.expandable_segments
    assert heldout.setup_for(_row(expandable=True)).expandable_segments  # the row's allocator
    assert heldout.setup_for(_row(alloc="expandable_segments:True")).expandable_segments  # s8 on
    assert not heldout.setup_for(_row(alloc="max_split_size_mb:256")).expandable_segments
    assert heldout.setup_for(_row(compile="on", liger=False)).compile
    assert not heldout.setup_for(_row(system="plain", compile="on")).compile


def test_verdict_right_needs_does_not_fit_for_oom(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [
        {**_row(shape="l8b", stage=1), "oom": True, "smi_proc_peak_gib": 139.0},
        {**_row(method="lora"), "oom": False, "smi_proc_peak_gib": 30.0, "alloc_gib": 28.0},
    ]
    f = tmp_path / "mem_s3_x.json"
    f.write_text(json.dumps(rows))
    import sys

    argv, sys.argv = sys.argv, ["memory_heldout.py", str(f)]
    try:
        heldout.main()
    finally:
        sys.argv = argv
    out = capsys.readouterr().out
    assert "| OOM |" in out and "verdict right: 2/2" in out
