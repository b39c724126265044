"""Number edge cases through the CLI: a 5,000-digit integer in a flag, a --config
file or a data row; mixing weights of 1e308 (their sum overflowed to inf), -1 and nan.

Python refuses int <-> str past 4,300 digits (ValueError, not JSONDecodeError): each such
value must be one error line naming where it is, or (in a data row) one counted bad row.
"""

import json
from pathlib import Path

import pytest

BIG = "1" * 5000
GOOD = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    import dojo.gpus
    import dojo.train.launch

    monkeypatch.setattr(dojo.gpus, "list_gpus", lambda: [])
    monkeypatch.setattr(dojo.train.launch, "run", _no_launch)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DOJO_DEBUG", raising=False)
    for name in ("a.jsonl", "b.jsonl"):
        (tmp_path / name).write_text(json.dumps(GOOD) + "\n")
    return tmp_path


def _no_launch(*_a: object, **_k: object) -> int:
    raise AssertionError("reached the launch")


def _one_error(r, *needles: str) -> None:
    both = r.stdout + r.stderr
    errors = [line for line in both.splitlines() if line.startswith("error: ")]
    assert r.exit_code == 1 and len(errors) == 1, both
    assert "internal error" not in both and "Traceback" not in both
    assert len(errors[0]) < 300 and all(n in errors[0] for n in needles), errors[0]


@pytest.mark.parametrize(
    "args",
    [
        ("estimate", "--model", "7b", "--micro-batch", BIG),
        ("train", "--dry-run", "--micro-batch", BIG, "--output-dir", "out"),
    ],
    ids=["estimate", "train"],
)
def test_a_5000_digit_flag_is_one_error(args: tuple[str, ...], workdir: Path, cli) -> None:
    _one_error(cli(*args), "--micro-batch", "...")


def test_a_5000_digit_integer_in_a_config_file(workdir: Path, cli) -> None:
    Path("run.yaml").write_text(f"micro_batch: {BIG}\n")
    r = cli("train", "--dry-run", "--config", "run.yaml", "--output-dir", "out")
    _one_error(r, "--config 'run.yaml' holds an integer of more than 4,300 digits")
    Path("ds.json").write_text('{"train_batch_size": ' + BIG + "}")
    _one_error(cli("config", "--check", "ds.json"), "--check 'ds.json'", "number that is too long")


def test_a_5000_digit_integer_in_a_data_row_is_one_bad_row(workdir: Path, cli) -> None:
    row = '{"messages": [{"role": "user", "content": "hi", "n": ' + BIG + "}]}"
    Path("d.jsonl").write_text(json.dumps(GOOD) + "\n" + row + "\n")
    r = cli("train", "--dry-run", "--data", "d.jsonl", "--output-dir", "out")
    assert r.exit_code == 0, r.stderr
    assert "data: 1 valid rows (messages 1), 1 bad" in r.stderr
    assert "skipped d.jsonl:2: holds an integer of more than 4,300 digits" in r.stderr


def test_huge_mixing_weights_are_planned(workdir: Path, cli) -> None:
    r = cli(
        "train",
        "--dry-run",
        "--data",
        "a.jsonl=1e308",
        "--data",
        "b.jsonl=1e308",
        "--output-dir",
        "out",
    )
    assert r.exit_code == 0, r.stderr
    from dojo.train import sources

    assert [s.weight for s in sources.parse_all(["a.jsonl=1e308", "b.jsonl=1e308"])] == [0.5, 0.5]


@pytest.mark.parametrize("weight", ["-1", "nan", "inf", "1e400", BIG])
def test_a_bad_weight_is_named_not_missing(weight: str, workdir: Path, cli) -> None:
    r = cli(
        "train",
        "--dry-run",
        "--data",
        f"a.jsonl={weight}",
        "--data",
        "b.jsonl=1",
        "--output-dir",
        "out",
    )
    _one_error(r, "--data a.jsonl=", "must be a positive number")
    assert "no mixing weight" not in r.stderr and not (workdir / "out").exists()
