"""dojo estimate against published measurements (tests/data/published_memory.json).

Each row: the settings a public source states, its per-GPU figure and the card it ran on. The
verdict must be right on every row (each of these runs finished), and where the settings pin
the run down the device estimate must be within the row's stated tolerance.
"""

import json
from pathlib import Path
from typing import Any

import pytest

from dojo.estimate import GIB, Setup, estimate
from dojo.modelspec import ModelSpec, from_hf_config, resolve_model

DATA = json.loads((Path(__file__).parent / "data" / "published_memory.json").read_text())


def _spec(name: str) -> ModelSpec:
    if name in DATA["models"]:
        cfg = {k: v for k, v in DATA["models"][name].items() if not k.startswith("_")}
        return from_hf_config(cfg, name)
    return resolve_model(name)


def _setup(row: dict[str, Any]) -> Setup:
    return Setup.of(**row["setup"], gpu_memory_gib=row["gpu_memory_gib"])


@pytest.mark.parametrize("row", DATA["rows"], ids=[r["name"] for r in DATA["rows"]])
def test_verdict_right_on_published_runs(row: dict[str, Any]) -> None:
    e = estimate(_spec(row["model"]), _setup(row))
    allowed = {"fits": {"fits"}, "fits or tight": {"fits", "tight"}}[row["expected_verdict"]]
    assert e.verdict in allowed, f"{e.gpu_total_gib:.1f} GiB on {row['gpu_memory_gib']} GiB"


TOLERANCED = [r for r in DATA["rows"] if r["tolerance"] is not None]


@pytest.mark.parametrize("row", TOLERANCED, ids=[r["name"] for r in TOLERANCED])
def test_estimate_within_stated_tolerance(row: dict[str, Any]) -> None:
    """A row whose stack loaded its quantized model under zero.Init (``training_phase``) never
    held the whole model on one GPU: its figure is compared with the training phase alone."""
    e = estimate(_spec(row["model"]), _setup(row))
    gib = e.gpu_total_gib - (e.load_excess / GIB if row.get("training_phase") else 0.0)
    assert gib == pytest.approx(row["published_gib"], rel=row["tolerance"])


def test_rows_name_their_source_and_units() -> None:
    for row in DATA["rows"]:
        assert row["source"].startswith("https://") and row["units"] and row["settings_note"]
        assert row["tolerance"] is None or row["published_gib"] is not None
