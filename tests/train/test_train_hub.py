"""`dojo train --model org/name` offline: the cache or one clear refusal whose
hint train itself accepts; a dry run may plan with a built-in of the same name; --revision reaches
train.json and the worker's from_pretrained. HF_HUB_OFFLINE=1 comes from tests/train/conftest.py."""

import importlib.util
import json
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest

from dojo.architectures import ARCHITECTURES
from dojo.errors import LaunchError
from dojo.run.run import Run
from dojo.train import preflight
from tests.helpers.hub import MAIN_SHA, V1_SHA, cache_model


@pytest.fixture
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "hf" / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    return cache


@pytest.fixture(autouse=True)
def no_gpus() -> Any:
    with patch("dojo.gpus.list_gpus", return_value=[]):
        yield


def test_uncached_id_is_refused_with_a_hint_train_takes(hf_cache: Path, cli: Any, tmp_path: Path) -> None:  # fmt: skip
    out = tmp_path / "o"
    r = cli("train", "--model", "meta-llama/Llama-3.1-8B", "--nproc", "1", "-o", str(out))
    assert r.exit_code == 1, r.stderr
    error, hint = r.stderr.splitlines()[-2:]
    assert error == (
        "error: --model meta-llama/Llama-3.1-8B: not in the local Hugging Face cache and "
        "HF_HUB_OFFLINE is set"
    )
    # The old hint pointed at a config.json file, which train refuses ("needs the model folder").
    assert hint.startswith("hint: `hf download meta-llama/Llama-3.1-8B` while online")
    assert "config.json" not in hint and "local model folder" in hint
    assert not out.exists()


def test_dry_run_plans_with_the_builtin_and_says_so(hf_cache: Path, cli: Any, tmp_path: Path) -> None:  # fmt: skip
    out = tmp_path / "o"
    r = cli("train", "--model", "Qwen/Qwen2.5-7B-Instruct", "--gpus", "0", "--method", "lora",
            "--revision", "v1", "-o", str(out), "--dry-run")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    assert "built-in qwen2.5-7b" in r.stderr and "Qwen/Qwen2.5-7B-Instruct@v1" in r.stderr
    rec = json.loads((out / "train.json").read_text())
    assert rec["run"]["model"]["model"] == "Qwen/Qwen2.5-7B-Instruct"
    assert rec["run"]["model"]["revision"] == "v1"
    assert rec["model_kind"] == "hub"


def test_cached_config_without_weights_is_refused_offline(hf_cache: Path) -> None:
    cache_model(hf_cache, "org/model", ARCHITECTURES["llama-3.2-1b"])
    with pytest.raises(
        LaunchError, match="its weights are not in the local Hugging Face cache"
    ) as e:
        preflight.resolve_model("org/model")
    assert "hf download org/model" in (e.value.hint or "")
    kind, spec = preflight.resolve_model("org/model", dry_run=True)  # plans need no weights
    assert (kind, spec.params) == ("hub", 1_235_814_400)


def test_cached_model_resolves_at_its_revision(hf_cache: Path) -> None:
    cache_model(hf_cache, "org/model", ARCHITECTURES["llama-3.2-1b"], files=("model.safetensors",))
    cache_model(hf_cache, "org/model", ARCHITECTURES["qwen2.5-0.5b"], ref="v1", sha=V1_SHA,
                files=("model.safetensors.index.json",))  # fmt: skip
    assert preflight.resolve_model("org/model")[1].params == 1_235_814_400
    assert preflight.resolve_model("org/model", "v1")[1].params == 494_032_768
    assert preflight.resolve_model("org/model", MAIN_SHA)[1].params == 1_235_814_400


def test_revision_needs_a_hub_model(cli: Any, tmp_path: Path) -> None:
    r = cli("train", "--revision", "v1", "--nproc", "1", "-o", str(tmp_path / "o"), "--dry-run")
    assert r.exit_code == 1 and "--revision v1 applies to a Hub --model" in r.stderr
    with pytest.raises(LaunchError, match="not to the local folder"):
        preflight.resolve_model(str(tmp_path), "v1")


def _with(run: dict[str, Any], **model: Any) -> dict[str, Any]:
    return {**run, "model": {**run["model"], **model}}


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs the train extra")
def test_worker_loads_the_revision(tmp_path: Path) -> None:
    from dojo.train.worker import model

    run = Run.from_dict(_with(_run_dict(), revision="v1", method="lora"))
    assert model.hub_revision(run, "org/model") == {"revision": "v1"}
    assert model.hub_revision(run, str(tmp_path)) == {}  # a local folder has no revisions
    with patch.object(model.AutoModelForCausalLM, "from_pretrained") as load:
        model.load_model(run, "org/model")
    assert load.call_args.args == ("org/model",)
    assert load.call_args.kwargs["revision"] == "v1"


def _run_dict() -> dict[str, Any]:
    from dojo.run import inputs, machine, resolve

    values = inputs.merge("train", {}, {"model": "org/model"})
    return resolve.resolve(values, machine=machine.for_plan()).to_dict()
