"""dojo.gpus.own_usage_mib: a run's device memory is its own share of a GPU others may use too
(rows sharing an H200 once reported 93.9 GiB measured against an 11.6 GiB estimate)."""

import pytest

from dojo.gpus import Gpu, own_usage_mib, parse_gpu_table

UUID = "6f2b8c1e-0d2a-4c55-9a77-3b1e2f4a5c6d"
TABLE = f"""\
4242, GPU-{UUID}, 11520
5151, GPU-{UUID}, 80000
4242, GPU-00000000-0000-0000-0000-000000000001, 512
"""


def test_own_row_on_this_gpu_only() -> None:
    assert own_usage_mib(TABLE, 4242, UUID) == 11520
    assert own_usage_mib(TABLE, 4242, f"GPU-{UUID.upper()}") == 11520  # either spelling


@pytest.mark.parametrize(
    ("table", "pid", "uuid"),
    [
        (TABLE, 7, UUID),  # not listed: a container's PID namespace
        (TABLE, 4242, "ffffffff-0000-0000-0000-000000000000"),  # another GPU
        (TABLE, 4242, ""),  # torch gave no uuid
        ("", 4242, UUID),  # "No running processes found" is not a row either
        (f"4242, GPU-{UUID}, [N/A]\n", 4242, UUID),
    ],
)
def test_unknown_is_none(table: str, pid: int, uuid: str) -> None:
    assert own_usage_mib(table, pid, uuid) is None


def test_gpu_table_reads_memory_in_use() -> None:
    table = "0, NVIDIA H200, 143771, 1\n1, NVIDIA H200, 143771, 92160\n"
    assert parse_gpu_table(table) == [
        Gpu(0, "NVIDIA H200", 143771 / 1024, 1 / 1024),
        Gpu(1, "NVIDIA H200", 143771 / 1024, 90.0),
    ]


def test_gpu_table_odd_rows() -> None:
    # A comma in the name, a used figure the driver does not give, a row that is not a GPU.
    table = "0, Acme, Inc. GPU, 1024, [N/A]\nNo devices were found\n2, X, [N/A], 3\n"
    assert parse_gpu_table(table) == [Gpu(0, "Acme, Inc. GPU", 1.0, 0.0)]
