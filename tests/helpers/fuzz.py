"""Hypothesis settings and strategies the fuzz tests share.

Deterministic (derandomize=True) and bounded (max_examples), so every run tries the same examples
in seconds."""

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

FAST = settings(
    max_examples=100,
    derandomize=True,
    deadline=None,  # a shared 2-core CI box: wall time per example is not the property
    suppress_health_check=[HealthCheck.too_slow],
)
DEVICES = st.sampled_from(["none", "cpu", "nvme"])
"""Offload devices, as --offload and --offload-param take them."""

json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=30),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
ROLE = st.one_of(st.sampled_from(["system", "user", "assistant", "tool"]), st.text(max_size=8))
message = st.one_of(
    st.fixed_dictionaries(
        {"role": ROLE, "content": st.one_of(st.text(max_size=60), json_values)},
        optional={
            "reasoning_content": st.one_of(st.text(max_size=20), json_values),
            "tool_calls": json_values,
            "name": json_values,
        },
    ),
    json_values,
)
conversations = st.one_of(st.lists(message, max_size=6), json_values)
