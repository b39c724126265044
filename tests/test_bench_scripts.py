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
