"""dojo.gpus.parse_gpus under hypothesis: any --gpus string is a sorted list of present GPUs or
one LaunchError naming --gpus."""

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dojo.errors import LaunchError
from dojo.gpus import parse_gpus

_GPU_FUZZ = {"accepted": 0, "refused": 0}


@settings(
    max_examples=int(os.environ.get("DOJO_FUZZ_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    st.one_of(
        st.text(max_size=12),
        st.text(alphabet=st.sampled_from("0123456789,²³¹٣१０１ -+x\t"), max_size=12),
    )
)
def test_fuzz_gpus(spec: str) -> None:
    present = [0, 1, 2, 3]
    try:
        ids = parse_gpus(spec, present)
    except LaunchError as e:
        _GPU_FUZZ["refused"] += 1
        assert e.message.startswith("--gpus") and len(e.message) < 300
        return
    _GPU_FUZZ["accepted"] += 1
    assert ids and set(ids) <= set(present) and list(ids) == sorted(set(ids))
    body = spec.strip()
    assert body == "all" or set(body) <= set("0123456789,"), spec


def test_fuzz_gpus_counts() -> None:
    if not any(_GPU_FUZZ.values()):
        pytest.skip("run with the whole file to count")
    print("gpus fuzz:", _GPU_FUZZ)
    assert _GPU_FUZZ["accepted"] > 0 and _GPU_FUZZ["refused"] > 0
