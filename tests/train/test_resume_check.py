"""dojo.train.resume_check: --resume with other settings refused before launch; damaged
checkpoints skipped with a warning."""

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dojo.errors import LaunchError
from dojo.train import checkpoints
from dojo.train.checkpoints import MARKER, choose_resume, manifest, resume_point, verify
from dojo.train.resume_check import checkpoint_meta_mismatch, resume_mismatches

RUN = {"method": "lora", "zero_stage": 2, "world_size": 2, "model": None, "lora_r": 16}
RUN |= {"lora_targets": "all-linear", "precision_resolved": "fp32", "offload": "none"}


def _ckpt(root: Path, step: int, meta: dict[str, Any] | None = None, big: bool = False) -> Path:
    """A checkpoint folder as the worker leaves it: shards, then the marker with its manifest."""
    p = root / f"checkpoint-{step}"
    (p / f"global_step{step}").mkdir(parents=True)
    for r in (0, 1):
        (p / f"global_step{step}" / f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt").write_bytes(
            bytes([step % 256, r]) * (3 * 2**20 if big else 500)
        )
    (p / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    (p / "latest").write_text(f"global_step{step}")
    marker = {**RUN, **(meta or {}), "step": step, "files": manifest(p)}
    (p / MARKER).write_text(json.dumps(marker))
    return p


def _shard(ckpt: Path, rank: int = 1) -> Path:
    step = ckpt.name.split("-")[1]
    return ckpt / f"global_step{step}" / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt"


# ---- manifest and fallback -----------------------------------------------------------------


def test_manifest_records_every_file_but_the_marker(tmp_path: Path) -> None:
    c = _ckpt(tmp_path, 5)
    files = checkpoints.read_marker(c)["files"]
    assert set(files) == {
        "global_step5/zero_pp_rank_0_mp_rank_00_optim_states.pt",
        "global_step5/zero_pp_rank_1_mp_rank_00_optim_states.pt",
        "trainer_state.json",
        "latest",
    }
    assert files["latest"]["size"] == len("global_step5")
    assert files["latest"]["checksum"].startswith("sha256:")
    assert verify(c) == []


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda f: f.write_bytes(f.read_bytes()[:-7]), "has 993 bytes, 1000 were written"),
        (lambda f: f.write_bytes(b""), "has 0 bytes, 1000 were written"),
        (lambda f: f.unlink(), "is missing"),
        (lambda f: f.write_bytes(b"\xff" + f.read_bytes()[1:]), "checksum differs"),
    ],
)
def test_resume_falls_back_to_the_newest_intact_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: Any, why: str
) -> None:
    _ckpt(tmp_path, 5)
    ten = _ckpt(tmp_path, 10)
    broken = _ckpt(tmp_path, 15)
    damage(_shard(broken))
    choice = choose_resume(tmp_path, 2)
    assert choice.path == ten
    assert choice.skipped[0][0] == "checkpoint-15" and why in choice.skipped[0][1]
    assert resume_point(tmp_path, 2) == ten
    err = capsys.readouterr().err
    assert err.startswith(
        "warning: --resume: checkpoint-15 is damaged (global_step15/zero_pp_rank_1"
    )
    assert "resuming from checkpoint-10 instead" in err


def test_big_shards_checked_by_size_and_ends(tmp_path: Path) -> None:
    c = _ckpt(tmp_path, 5, big=True)
    shard = _shard(c, 0)
    assert checkpoints.read_marker(c)["files"][shard.relative_to(c).as_posix()][
        "checksum"
    ].startswith("sha256-ends:")
    data = bytearray(shard.read_bytes())
    data[-1] ^= 1  # the last MiB is hashed
    shard.write_bytes(bytes(data))
    assert "checksum differs" in verify(c)[0]


def test_every_checkpoint_damaged(tmp_path: Path) -> None:
    for step in (5, 10):
        _shard(_ckpt(tmp_path, step)).write_bytes(b"x")
    with pytest.raises(LaunchError, match="every checkpoint in --output-dir .* is damaged"):
        resume_point(tmp_path, 2)


def test_marker_without_manifest_still_resumes(tmp_path: Path) -> None:
    c = tmp_path / "checkpoint-3"
    c.mkdir()
    (c / MARKER).write_text(
        json.dumps({"world_size": 1, "step": 3})
    )  # a marker from before markers held settings
    assert resume_point(tmp_path, 1) == c


# ---- settings ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "phrase"),
    [
        ({"zero_stage": 3}, "trained with --zero 2, this run asks --zero 3"),
        ({"zero_stage": "none"}, "trained with --zero 2, this run asks --zero none"),
        ({"method": "full"}, "trained with --method lora, this run asks --method full"),
        ({"world_size": 4}, "trained with 2 processes, this run asks 4 processes"),
        ({"lora_r": 8}, "trained with --lora-r 16, this run asks --lora-r 8"),
        (
            {"lora_targets": "q_proj"},
            "--lora-targets all-linear, this run asks --lora-targets q_proj",
        ),
        ({"precision_resolved": "bf16"}, "--precision fp32, this run asks --precision bf16"),
        ({"offload": "cpu"}, "--offload none, this run asks --offload cpu"),
        ({"model": "org/other"}, "the bundled tiny model, this run asks --model org/other"),
    ],
)
def test_resume_mismatches_name_each_setting(change: dict[str, Any], phrase: str) -> None:
    (got,) = resume_mismatches(RUN, {**RUN, **change})
    assert got.startswith("trained with ") and got.endswith(phrase)
    assert checkpoint_meta_mismatch(RUN, {**RUN, **change}) == [got]


def test_resume_mismatches_only_what_matters() -> None:
    assert resume_mismatches(RUN, {**RUN, "lr": 1.0, "seq_len": 64, "micro_batch": 1}) == []
    assert resume_mismatches({"method": "full"}, {"zero_stage": 3, "method": "full"}) == []
    full = {**RUN, "method": "full"}
    assert resume_mismatches(full, {**full, "lora_r": 64}) == []  # no adapter in a full run
    assert resume_mismatches({"precision": "auto"}, {"precision_resolved": "bf16"}) == []
    assert resume_mismatches({"precision": "fp32"}, {"precision_resolved": "bf16"}) != []


def test_model_compared_as_the_folder_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tmp_path / "m"
    model.mkdir()
    saved = {"model": "./m", "model_kind": "local", "model_path": str(model)}
    monkeypatch.chdir(tmp_path)
    assert resume_mismatches(saved, {"model": "m"}) == []
    assert resume_mismatches(saved, {"model": str(model)}) == []
    assert resume_mismatches(saved, {"model": "org/m"}) != []


def test_refusal_before_anything_is_written(tmp_path: Path) -> None:
    _ckpt(tmp_path, 10)
    (tmp_path / "train.json").write_text(json.dumps(RUN))
    before = sorted((p, p.stat().st_mtime_ns) for p in tmp_path.rglob("*"))
    new = {**RUN, "zero_stage": 3, "method": "full", "world_size": 2, "precision_resolved": "fp32"}
    with pytest.raises(LaunchError) as e:
        resume_point(tmp_path, 2, new)
    assert e.value.message == (
        "--resume: checkpoint-10 was trained with --method lora --zero 2, "
        "this run asks --method full --zero 3"
    )
    assert e.value.hint == "rerun with --method lora --zero 2, or start a new --output-dir"
    assert sorted((p, p.stat().st_mtime_ns) for p in tmp_path.rglob("*")) == before
    assert resume_point(tmp_path, 2, dict(RUN)) == tmp_path / "checkpoint-10"


def test_marker_wins_over_a_rewritten_record(tmp_path: Path) -> None:
    """A record rewritten by a later (failed) launch must not hide what the checkpoint holds."""
    _ckpt(tmp_path, 10)
    (tmp_path / "train.json").write_text(json.dumps({**RUN, "zero_stage": 3, "lora_r": 8}))
    with pytest.raises(LaunchError, match="trained with --zero 2, this run asks --zero 3"):
        resume_point(tmp_path, 2, {**RUN, "zero_stage": 3})
    # keys only the record has (an older marker) are compared too
    c = tmp_path / "checkpoint-10"
    (c / MARKER).write_text(json.dumps({"world_size": 2, "step": 10}))
    (tmp_path / "train.json").write_text(json.dumps({**RUN, "lora_r": 8}))
    with pytest.raises(LaunchError, match="--lora-r 8, this run asks --lora-r 16"):
        resume_point(tmp_path, 2, dict(RUN))


def test_world_size_message_unchanged(tmp_path: Path) -> None:
    _ckpt(tmp_path, 10)
    with pytest.raises(LaunchError) as e:
        resume_point(tmp_path, 4, dict(RUN))
    assert e.value.message == "--resume: checkpoint-10 was written by 2 processes, this run has 4"


# ---- the worker's marker -------------------------------------------------------------------


def test_checkpoint_marker_writes_settings_and_manifest(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from dojo.train.worker.callbacks import CheckpointMarker

    (tmp_path / "train.json").write_text(
        json.dumps({**RUN, "model_kind": "tiny", "seq_len": 64, "lr": 1e-3})
    )
    c = _ckpt(tmp_path, 4)
    (c / MARKER).write_text(json.dumps({"world_size": 9}))  # stale, from an earlier run
    cb = CheckpointMarker({"world_size": 2, "zero_stage": 2, "method": "lora"})
    args, state = SimpleNamespace(output_dir=str(tmp_path)), SimpleNamespace(global_step=4)
    cb.on_step_end(args, state, SimpleNamespace(should_save=True))
    assert not (c / MARKER).exists()  # gone before the new shards are written
    _shard(c).write_bytes(b"new shard")
    cb.on_save(args, state, SimpleNamespace())
    marker = checkpoints.read_marker(c)
    assert {k: marker[k] for k in RUN} == RUN
    assert "seq_len" not in marker and marker["step"] == 4
    assert marker["files"][_shard(c).relative_to(c).as_posix()]["size"] == len(b"new shard")
    assert verify(c) == []


def test_preflight_compares_the_resolved_run(tmp_path: Path) -> None:
    """dojo train --resume: this run's Run against the checkpoint, before launch."""
    from dojo.train import preflight
    from tests.helpers.runs import run_of

    _ckpt(tmp_path, 10)
    (tmp_path / "train.json").write_text(json.dumps(RUN))
    asked = run_of(output_dir=str(tmp_path), resume=True, method="full", stage=3, gpus_per_node=2)
    with pytest.raises(LaunchError, match="this run asks --method full --zero 3"):
        preflight.check_resume(asked)
    same = run_of(output_dir=str(tmp_path), resume=True, method="lora", stage=2, gpus_per_node=2)
    assert preflight.check_resume(same) == str(tmp_path / "checkpoint-10")


def test_zero3_tile_change_is_refused(tmp_path: Path) -> None:
    """A ZeRO-3 checkpoint's fp32 optimizer state is sharded by sub_group_size: one trained with
    DeepSpeed's 1e9 cannot load with dojo's 1e8 default."""
    from dojo.train import preflight
    from tests.helpers.runs import run_of

    meta = {"method": "full", "zero_stage": 3, "world_size": 2, "precision_resolved": "fp32"}
    _ckpt(tmp_path, 10, meta)  # a marker without sub_group_size: the record beside it decides
    common: dict[str, Any] = {"output_dir": str(tmp_path), "resume": True, "method": "full"}
    common |= {"stage": 3, "gpus_per_node": 2}
    trained = run_of(**common, sub_group_size=1_000_000_000)
    (tmp_path / "train.json").write_text(json.dumps({"run": trained.to_dict()}))
    now = run_of(**common, sub_group_size=100_000_000)
    with pytest.raises(LaunchError, match="with --sub-group-size 1000000000, this run asks --sub"):
        preflight.check_resume(now)
    assert preflight.check_resume(run_of(**common, sub_group_size=1_000_000_000))


def test_a_stage_change_names_no_flag_without_a_value(tmp_path: Path) -> None:
    """--sub-group-size applies to ZeRO-3 only: a ZeRO-2 checkpoint has none, and the refusal
    never says `--sub-group-size None`."""
    from dojo.train import preflight
    from tests.helpers.runs import run_of

    common: dict[str, Any] = {"output_dir": str(tmp_path), "resume": True, "method": "full"}
    common |= {"gpus_per_node": 2}
    trained = run_of(**common, stage=2)
    _ckpt(tmp_path, 10, {"method": "full", "zero_stage": 2, "precision_resolved": "fp32"})
    (tmp_path / "train.json").write_text(json.dumps({"run": trained.to_dict()}))
    now = run_of(**common, stage=3)
    with pytest.raises(LaunchError) as e:
        preflight.check_resume(now)
    assert e.value.message == (
        "--resume: checkpoint-10 was trained with --zero 2, this run asks --zero 3 "
        f"--sub-group-size {now.zero.sub_group_size}"
    )
    assert e.value.hint == "rerun with --zero 2, or start a new --output-dir"
    # the other way round: the ZeRO-3 checkpoint's tile is part of what to rerun with
    (tmp_path / "train.json").write_text(json.dumps({"run": now.to_dict()}))
    _ckpt(tmp_path, 20, {"method": "full", "zero_stage": 3, "precision_resolved": "fp32"})
    with pytest.raises(LaunchError) as e:
        preflight.check_resume(trained)
    assert e.value.message.endswith("this run asks --zero 2")
    assert e.value.hint == (
        f"rerun with --zero 3 --sub-group-size {now.zero.sub_group_size}, or start a new "
        "--output-dir"
    )
    assert resume_mismatches({"sub_group_size": None}, {"sub_group_size": 5}) == [
        "trained with no --sub-group-size, this run asks --sub-group-size 5"
    ]


def test_a_change_of_objective_is_refused(tmp_path: Path) -> None:
    """A DPO checkpoint's optimizer state and weights followed another loss than SFT's or KTO's."""
    from dojo.train import preflight
    from tests.helpers.runs import run_of

    _ckpt(tmp_path, 10, {"objective": "dpo"})
    (tmp_path / "train.json").write_text(json.dumps(RUN))
    common: dict[str, Any] = {"output_dir": str(tmp_path), "resume": True, "method": "lora"}
    common |= {"stage": 2, "gpus_per_node": 2, "micro_batch": 2}
    with pytest.raises(LaunchError) as e:
        preflight.check_resume(run_of(**common, objective="kto"))
    assert "trained with --objective dpo, this run asks --objective kto" in e.value.message
    assert e.value.hint == "rerun with --objective dpo, or start a new --output-dir"
    assert preflight.check_resume(run_of(**common, objective="dpo")) == str(
        tmp_path / "checkpoint-10"
    )
    # A run record written before --objective existed trained SFT.
    _ckpt(tmp_path, 20)  # its marker predates the key too
    old = run_of(output_dir=str(tmp_path), method="lora", gpus_per_node=2).to_dict()
    del old["objective"]
    (tmp_path / "train.json").write_text(json.dumps({"run": old}))
    with pytest.raises(LaunchError, match="--objective sft, this run asks --objective dpo"):
        preflight.check_resume(run_of(**common, objective="dpo"))
