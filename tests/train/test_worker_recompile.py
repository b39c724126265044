"""dojo.train.worker.callbacks.RecompileWatch: --compile on says when the graphs keep coming."""

from types import SimpleNamespace

import pytest

pytest.importorskip("transformers")

from torch._dynamo.utils import counters  # noqa: E402

from dojo.train.worker.callbacks import RecompileWatch  # noqa: E402


def _steps(watch: RecompileWatch, graphs_at: dict[int, int]) -> None:
    for step in range(1, max(graphs_at) + 1):
        if step in graphs_at:
            counters["stats"]["unique_graphs"] = graphs_at[step]
        watch.on_step_end(None, SimpleNamespace(global_step=step), None)


def test_a_storm_is_said_once(capsys: pytest.CaptureFixture[str]) -> None:
    saved = counters["stats"]["unique_graphs"]
    try:
        watch = RecompileWatch()
        _steps(watch, {1: 2, 10: 3, 20: 9, 30: 15})
        out = capsys.readouterr().err
        assert out.count("warning: torch.compile compiled") == 1 and "--compile off" in out
        assert watch.recompiles == 12
        steady = RecompileWatch()
        _steps(steady, {1: 2, 10: 3, 30: 4})  # one last short batch: nothing to say
        assert "warning" not in capsys.readouterr().err and steady.recompiles == 0
    finally:
        counters["stats"]["unique_graphs"] = saved


def test_graphs_after_step_1_are_counted() -> None:
    saved = counters["stats"]["unique_graphs"]
    try:
        watch = RecompileWatch()
        _steps(watch, {1: 6, 2: 6, 5: 6})
        assert watch.graphs_after_step1 == 0
        _steps(watch, {1: 6, 23: 7, 30: 7})  # one batch of a new kind
        assert watch.graphs_after_step1 == 1
    finally:
        counters["stats"]["unique_graphs"] = saved
