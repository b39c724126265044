"""tests/train: the Hub never answers here, and "org/chats" stands for a dataset in the local cache.

Many dry-run tests pass ``--data org/chats`` to reach the check they are about; since preflight
refuses a Hub dataset that is neither cached nor reachable (dojo.train.data_check), each test
gets a datasets cache holding it (the layout `datasets` writes: ``<owner>___<name>/.../*.arrow``)
and HF_HUB_OFFLINE=1, so no test depends on the network.
"""

from pathlib import Path

import pytest

CACHED_HUB_DATASET = "org/chats"


@pytest.fixture(autouse=True)
def _local_datasets_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    cache = tmp_path_factory.mktemp("hf-datasets")
    owner, name = CACHED_HUB_DATASET.split("/")
    part = cache / f"{owner}___{name}" / "default" / "0.0.0" / "abc123"
    part.mkdir(parents=True)
    (part / f"{name}-train.arrow").write_bytes(b"")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache
