"""A rank whose environment lacks dojo train's expandable-segments setting (another node of a
multi-node run: DeepSpeed's launcher does not export PYTORCH_*) sets it itself; a rank that has
it, or whose user said otherwise, is left alone."""

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
