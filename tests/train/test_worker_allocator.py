"""A rank whose environment lacks dojo train's expandable-segments setting (another node of a
multi-node run: DeepSpeed's launcher does not export PYTORCH_*) sets it itself; a rank that has
it, or whose user said otherwise, is left alone. Library chatter each rank would repeat is
quietened, unless DOJO_DEBUG=1."""

import logging
import warnings
from unittest.mock import patch

import pytest

pytest.importorskip("transformers")  # the worker module imports the training stack
from dojo.train.worker import main as worker  # noqa: E402


@pytest.mark.parametrize(
    ("conf", "calls"),
    [
        (None, 1),
        ("max_split_size_mb:64", 1),
        ("expandable_segments:True", 0),
        ("expandable_segments:False", 0),  # the user's word stands
    ],
)
def test_the_worker_sets_expandable_segments_only_where_nothing_says(
    conf: str | None, calls: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    if conf is None:
        monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    else:
        monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", conf)
    with patch.object(worker.torch.cuda.memory, "_set_allocator_settings") as setter:
        worker.expandable_segments()
    assert setter.call_count == calls
    if calls:
        setter.assert_called_with("expandable_segments:True")


@pytest.mark.parametrize("debug", ["", "1"])
def test_liger_backend_warnings_are_quiet_unless_debugging(
    debug: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Liger's optional backends (CuTe DSL, Ascend) warn once per op and rank that they could
    not be imported on a GPU without them; the run is the same without them."""
    monkeypatch.setenv("DOJO_DEBUG", debug)
    liger = logging.getLogger(worker.LIGER_BACKENDS)
    monkeypatch.setattr(liger, "level", logging.NOTSET)
    with warnings.catch_warnings():
        warnings.resetwarnings()  # only what quiet_libraries adds
        worker.quiet_libraries()
        ignored = any(f[0] == "ignore" and f[2] is FutureWarning for f in warnings.filters)
    assert (liger.getEffectiveLevel() >= logging.ERROR) is (debug == "")
    assert ignored is (debug == "")
