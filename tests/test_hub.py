"""dojo.hub: Hub ids through huggingface_hub: the local cache, HF_HUB_OFFLINE=1,
--revision, the built-in fallback and the refused (gated/private) answers. No network: every test
gets its own Hugging Face cache laid out as huggingface_hub writes it, and offline mode."""

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dojo import hub
from dojo.architectures import ARCHITECTURES
from dojo.errors import EstimateError
from dojo.modelspec import resolve_model
from tests.helpers.hub import MAIN_SHA, V1_SHA, cache_model

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "hf" / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    # huggingface_hub reads HF_HUB_CACHE when first imported; this process may have done so.
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    return cache


@pytest.fixture(autouse=True)
def no_local_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("dojo.gpus.list_gpus", lambda: [])


def test_cached_id_is_read_offline(hf_cache: Path, cli: Any) -> None:
    # The cached config is not Llama-3.1-8B's: the count proves it came from the cache.
    cache_model(hf_cache, "meta-llama/Llama-3.1-8B", ARCHITECTURES["llama-3.2-1b"])
    r = cli("estimate", "--model", "meta-llama/Llama-3.1-8B", "--gpu-memory", "80", "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["model"]["params"] == 1_235_814_400
    assert "note:" not in r.stderr
    r = cli("config", "--model", "meta-llama/Llama-3.1-8B", "--zero", "3")
    assert r.exit_code == 0, r.stderr
    zero = json.loads(r.stdout)["zero_optimization"]
    assert zero["reduce_bucket_size"] == 500_000_000  # full ZeRO-3: 5e8 (the 1B model is larger)
    assert zero["leaf_module"]["classes"][0] == "LlamaDecoderLayer"  # the cached config's type


def test_revision_picks_the_snapshot(hf_cache: Path, cli: Any) -> None:
    cache_model(hf_cache, "org/model", ARCHITECTURES["llama-3.2-1b"])
    cache_model(hf_cache, "org/model", ARCHITECTURES["qwen2.5-0.5b"], ref="v1", sha=V1_SHA)
    assert resolve_model("org/model").params == 1_235_814_400
    assert resolve_model("org/model", revision="v1").params == 494_032_768
    assert resolve_model("org/model", revision=V1_SHA).params == 494_032_768  # a commit
    r = cli("estimate", "--model", "org/model", "--revision", "v1", "--json", "--gpu-memory", "80")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["model"]["params"] == 494_032_768 and doc["runs"][0]["model"]["revision"] == "v1"
    r = cli("estimate", "--model", "org/model", "--revision", "v2", "--gpu-memory", "80")
    assert r.exit_code == 1
    assert "error: --model org/model@v2: not in the local Hugging Face cache" in r.stderr
    assert "hf download org/model config.json --revision v2" in r.stderr


def test_revision_needs_a_hub_id(hf_cache: Path, cli: Any) -> None:
    r = cli("estimate", "--model", "7b", "--revision", "v1", "--gpu-memory", "80")
    assert r.exit_code == 1 and "--revision v1 applies to a Hub id" in r.stderr
    r = cli("config", "--zero", "2", "--revision", "v1")
    assert r.exit_code == 1 and "--revision v1 applies to a Hub --model" in r.stderr


@pytest.mark.parametrize(
    "repo_id, builtin",
    [
        ("meta-llama/Llama-3.1-8B", "llama-3.1-8b"),
        ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
        ("meta-llama/Meta-Llama-3.1-70B-Instruct", "llama-3.1-70b"),
        ("meta-llama/Llama-2-7b-chat-hf", "llama-2-7b"),
        ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"),
        ("Qwen/Qwen3-8B-Base", "qwen3-8b"),
        ("google/gemma-2-9b-it", "gemma-2-9b"),
        ("mistralai/Mistral-7B-Instruct-v0.3", "mistral-7b-v0.3"),
        ("mistralai/Mistral-7B-Instruct-v0.2", "mistral-7b"),
        ("TinyLlama/TinyLlama-1.1B-Chat-v1.0", "tinyllama-1.1b"),
        ("Qwen/Qwen2.5-Coder-7B-Instruct", None),
        ("someone/Llama-3.1-8B-abliterated", None),
        ("meta-llama/Meta-Llama-3-8B", None),
        ("org/mystery", None),
    ],
)
def test_builtin_for(repo_id: str, builtin: str | None) -> None:
    assert hub.builtin_for(repo_id) == builtin


def test_uncached_known_name_falls_back_and_says_so(hf_cache: Path, cli: Any) -> None:
    r = cli("estimate", "--model", "Qwen/Qwen2.5-7B-Instruct", "--gpu-memory", "80", "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["model"] == {
        "name": "qwen2.5-7b",
        "params": 7_615_616_512,
        "trainable_params": 7_615_616_512,
    }
    note = [line for line in r.stderr.splitlines() if line.startswith("note:")]
    assert len(note) == 1, r.stderr
    assert "Qwen/Qwen2.5-7B-Instruct is not in the local Hugging Face cache" in note[0]
    assert "HF_HUB_OFFLINE is set" in note[0] and "built-in qwen2.5-7b" in note[0]


def test_uncached_unknown_is_one_error(hf_cache: Path, cli: Any) -> None:
    r = cli("estimate", "--model", "org/mystery", "--gpu-memory", "80")
    assert r.exit_code == 1 and r.stdout == ""
    lines = r.stderr.splitlines()
    assert lines[0] == (
        "error: --model org/mystery: not in the local Hugging Face cache and HF_HUB_OFFLINE is set"
    )
    assert lines[1].startswith("hint: `hf download org/mystery config.json` while online")
    assert "local folder" in lines[1] and len(lines) == 2


def test_no_fallback_when_asked(hf_cache: Path) -> None:
    with pytest.raises(hub.HubUnreachable, match="not in the local Hugging Face cache"):
        resolve_model("meta-llama/Llama-3.1-8B", fallback=False)
    with pytest.raises(hub.HubUnreachable) as e:
        resolve_model("org/mystery", for_train=True)
    assert e.value.hint is not None and "config.json" not in e.value.hint  # train wants a folder
    assert "hf download org/mystery" in e.value.hint


def _http_error(cls: type[Exception], status: int) -> Exception:
    """The error huggingface_hub raises for an HTTP status, built without its constructor (whose
    signature and HTTP client changed between huggingface_hub 0.x and 1.x)."""
    err = cls.__new__(cls)
    Exception.__init__(err, f"{status} Client Error")
    err.response = SimpleNamespace(status_code=status, headers={})  # type: ignore[attr-defined]
    return err


@pytest.mark.parametrize("kind, status", [("GatedRepoError", 403), ("HfHubHTTPError", 401),
                                          ("HfHubHTTPError", 403)])  # fmt: skip
def test_refused_says_login_and_license(
    hf_cache: Path, cli: Any, monkeypatch: pytest.MonkeyPatch, kind: str, status: int
) -> None:
    import huggingface_hub
    import huggingface_hub.errors

    def refuse(*_a: Any, **_k: Any) -> str:
        raise _http_error(getattr(huggingface_hub.errors, kind), status)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", refuse)
    r = cli("estimate", "--model", "meta-llama/Llama-3.1-8B", "--gpu-memory", "80")
    assert r.exit_code == 1 and "Traceback" not in r.stderr
    error, hint = r.stderr.splitlines()
    assert error.startswith("error: --model meta-llama/Llama-3.1-8B: ")
    assert "refused" in error
    assert "hf auth login" in hint
    assert "accept the license on https://huggingface.co/meta-llama/Llama-3.1-8B" in hint


def test_other_hub_answers(hf_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub
    import huggingface_hub.errors as u

    cases = [
        (_http_error(u.RepositoryNotFoundError, 401), "no such model on the Hub, or it is private"),
        (_http_error(u.RevisionNotFoundError, 404), "--revision v9: no such branch, tag or commit"),
        (u.EntryNotFoundError("404"), "the repo has no config.json"),
        (_http_error(u.HfHubHTTPError, 500), "the Hub answered HTTP 500"),
        (PermissionError(13, "Permission denied"), "cannot fetch config.json into the Hugging"),
    ]
    for err, text in cases:

        def fail(*_a: Any, _err: Exception = err, **_k: Any) -> str:
            raise _err

        monkeypatch.setattr(huggingface_hub, "hf_hub_download", fail)
        with pytest.raises(EstimateError, match=text) as e:
            resolve_model("org/model", revision="v9")
        assert not isinstance(e.value, hub.HubUnreachable)


def test_download_is_asked_for_the_revision(
    hf_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Online (HF_HUB_OFFLINE unset): huggingface_hub is asked, with the revision, the endpoint
    from the environment, and no token of ours (its own lookup: `hf auth login`, HF_TOKEN)."""
    import huggingface_hub

    snap = cache_model(hf_cache, "org/model", ARCHITECTURES["llama-3.2-1b"])
    seen: dict[str, Any] = {}

    def download(repo_id: str, filename: str, **kw: Any) -> str:
        seen.update(kw, repo_id=repo_id, filename=filename)
        return str(snap / "config.json")

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", "https://mirror.example")
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    monkeypatch.setattr(hub, "unreachable", lambda endpoint: None)  # as if online
    assert resolve_model("org/model", revision="v1").params == 1_235_814_400
    assert seen == {
        "repo_id": "org/model",
        "filename": "config.json",
        "revision": "v1",
        "local_files_only": False,
        "endpoint": "https://mirror.example",
    }


def test_fresh_process_reads_the_cache_from_the_environment(tmp_path: Path) -> None:
    """No monkeypatching: HF_HUB_CACHE and HF_HUB_OFFLINE as a user sets them."""
    cache = tmp_path / "hub"
    cache_model(cache, "meta-llama/Llama-3.1-8B", ARCHITECTURES["llama-3.1-8b"])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))
    out = subprocess.run(
        [sys.executable, "-m", "dojo", "estimate", "--model", "meta-llama/Llama-3.1-8B",
         "--gpu-memory", "80", "--json"],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    model = json.loads(out.stdout)["model"]
    assert model["name"] == "meta-llama/Llama-3.1-8B" and model["params"] == 8_030_261_248
    assert "note:" not in out.stderr


def test_unreachable_hub_is_not_called_offline(hf_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """No network, HF_HUB_OFFLINE unset: huggingface_hub says LocalEntryNotFoundError; the error
    says the Hub cannot be reached (not that offline mode is on) and how to skip the wait."""
    import huggingface_hub
    import huggingface_hub.errors

    def unreachable(*_a: Any, **kw: Any) -> str:
        assert kw["local_files_only"] is False
        raise huggingface_hub.errors.LocalEntryNotFoundError("connection refused, not cached")

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", unreachable)
    monkeypatch.setattr(hub, "unreachable", lambda endpoint: None)  # e.g. behind a proxy
    with pytest.raises(hub.HubUnreachable, match="the Hub cannot be reached") as e:
        resolve_model("org/mystery")
    assert "HF_HUB_OFFLINE=1 skips the wait" in (e.value.hint or "")


def test_no_network_is_said_at_once(hf_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not cached, no route to the Hub: one connect says so, before huggingface_hub's retries
    (23 s of backoff on a machine without a network)."""
    import socket

    import huggingface_hub

    def no_dns(address: tuple[str, int], timeout: float) -> None:
        assert address == ("mirror.example", 8443) and timeout == hub.PROBE_TIMEOUT_S
        raise socket.gaierror(-2, "Name or service not known")

    def never(*_a: Any, **_k: Any) -> str:
        raise AssertionError("huggingface_hub asked")

    monkeypatch.delenv("HF_HUB_OFFLINE")
    for var in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "https://mirror.example:8443")
    monkeypatch.setattr(socket, "create_connection", no_dns)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", never)
    with pytest.raises(hub.HubUnreachable) as e:
        resolve_model("org/mystery")
    assert "the Hub cannot be reached (mirror.example does not resolve)" in e.value.message
    assert e.value.why == "the Hub cannot be reached (mirror.example does not resolve)"
    assert "HF_HUB_OFFLINE=1 skips the check" in (e.value.hint or "")
    # A cached config is read without asking the network; behind a proxy nothing is probed.
    cache_model(hf_cache, "org/mystery", ARCHITECTURES["llama-3.2-1b"])
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda *a, **k: str(
        hf_cache / "models--org--mystery" / "snapshots" / MAIN_SHA / "config.json"))  # fmt: skip
    assert resolve_model("org/mystery").params == 1_235_814_400
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    assert hub.unreachable("https://mirror.example:8443") is None
    # An id the Hub would refuse is still one line (the cache lookup validates it first).
    with pytest.raises(EstimateError, match="not a valid Hub id"):
        resolve_model("org/na--me")
