"""dojo.gpus.parse_gpus and --gpus on a machine without GPUs.

A bad or repeated --gpus value on a CPU machine got the hint "GPUs present: 0,1,...,65535" (a
380 KB line: the syntax-only check listed 65,536 ids as present); 60,000 repeated ids took
minutes (ids.count per id). Now: one short error line naming the flag and value, the fix, exit 1.
"""

import os
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dojo.errors import LaunchError
from dojo.gpus import MAX_GPU_INDEX, describe_ids, parse_gpus

EXAMPLES = int(os.environ.get("DOJO_FUZZ_EXAMPLES", "300"))


@pytest.fixture
def cpu_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No GPU here; nothing may launch; the working folder is empty."""
    import dojo.gpus
    import dojo.train.launch

    monkeypatch.setattr(dojo.gpus, "list_gpus", lambda: [])
    monkeypatch.setattr(dojo.train.launch, "run", _no_launch)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DOJO_DEBUG", raising=False)
    return tmp_path


def _no_launch(*_a: object, **_k: object) -> int:
    raise AssertionError("a refused --gpus value reached the launch")


def _one_error(r) -> tuple[str, str]:
    lines = (r.stdout + r.stderr).splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    assert r.exit_code == 1 and len(errors) == 1, r.stdout + r.stderr
    i = lines.index(errors[0])
    hint = lines[i + 1] if i + 1 < len(lines) else ""
    assert hint.startswith("hint: ") and "Traceback" not in r.stderr
    assert len(errors[0]) < 300 and len(hint) < 300, (len(errors[0]), len(hint))
    return errors[0], hint


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("0,0", "GPU 0 is listed twice"),
        ("1,01", "GPU 1 is listed twice"),
        ("x", "'x' is not a GPU index"),
        ("5000", "no host has more than 1024 GPUs"),
        ("0,,1", "an empty entry between commas"),
        (",".join(["0"] * 60_000), "GPU 0 is listed twice"),
        (",".join(map(str, range(1024))) + ",7", "GPU 7 is listed twice"),
    ],
    ids=lambda x: x[:20],
)
@pytest.mark.parametrize("dry_run", [True, False])
def test_bad_gpus_on_a_cpu_machine(
    spec: str, needle: str, dry_run: bool, cpu_machine: Path, cli
) -> None:
    start = time.monotonic()
    r = cli("train", "--gpus", spec, "--output-dir", "out", *(["--dry-run"] if dry_run else []))
    error, hint = _one_error(r)
    assert time.monotonic() - start < 10
    assert error.startswith("error: --gpus '") and needle in error
    assert "65535" not in hint and "GPUs present" not in hint  # nothing is present here
    assert not any(cpu_machine.iterdir())


def test_good_gpus_on_a_cpu_machine_plan_with_dry_run_only(cpu_machine: Path, cli) -> None:
    r = cli("train", "--gpus", "0,1", "--output-dir", "out")
    error, hint = _one_error(r)
    assert "no NVIDIA GPU on this machine" in error and "--dry-run" in hint


def test_hint_lists_present_gpus_shortly() -> None:
    assert describe_ids([3, 0, 1, 2]) == "0,1,2,3"
    assert describe_ids([]) == "none"
    many = list(range(1024))
    assert describe_ids(many) == "0-1023"
    assert describe_ids([i for i in many if i != 500]) == "0-499,501-1023"
    assert len(describe_ids(list(range(0, 2048, 2)))) <= 120
    with pytest.raises(LaunchError) as e:
        parse_gpus("0,0", many)
    assert e.value.hint == "GPUs present: 0-1023; use e.g. --gpus 0,1 or --gpus all"


def test_syntax_only_check_names_no_present_gpus() -> None:
    assert parse_gpus("3,1", None) == (1, 3)
    assert parse_gpus(str(MAX_GPU_INDEX), None) == (MAX_GPU_INDEX,)
    with pytest.raises(LaunchError) as e:
        parse_gpus("2,2", None)
    assert "listed twice" in e.value.message and "present" not in (e.value.hint or "")


# ---------------------------------------------------------------- properties

_GPU_TEXT = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=st.sampled_from("0123456789,, -+x\t²٣１"), max_size=40),
    st.lists(st.integers(0, 2000).map(str), max_size=50).map(",".join),
)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=_GPU_TEXT, present=st.sampled_from([None, [], [0, 1, 2, 3], list(range(1024))]))
def test_any_gpus_string_is_parsed_or_refused_shortly(spec: str, present: list[int] | None) -> None:
    try:
        ids = parse_gpus(spec, present)
    except LaunchError as e:
        assert e.message.startswith("--gpus") and len(e.message) < 200
        assert e.hint and len(e.hint) < 200
        return
    assert ids == tuple(sorted(set(ids))) and all(0 <= i <= MAX_GPU_INDEX for i in ids)
    if present is not None:
        assert set(ids) <= set(present)
    assert spec.strip() == "all" or set(spec.strip()) <= set("0123456789,")


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=_GPU_TEXT, dry_run=st.booleans())
def test_any_gpus_string_on_a_cpu_machine_is_planned_or_refused(spec: str, dry_run: bool) -> None:
    from dojo.train import preflight
    from tests.helpers.runs import values

    try:
        _, devices, _ = preflight.place(values(gpus=spec).devices, [], dry_run=dry_run)
    except LaunchError as e:
        assert len(e.message) < 200 and e.hint is not None and len(e.hint) < 200
        return
    assert dry_run and devices.kind == "cuda" and devices.ids
