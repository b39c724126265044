"""A Hub model id (org/name) through ``huggingface_hub``: its token (``hf auth login`` or HF_TOKEN),
its local cache (HF_HOME / HF_HUB_CACHE), ``HF_HUB_OFFLINE=1`` and ``--revision``.

Only ``config.json`` is fetched here (a few KB): enough for ``estimate``, ``config --model`` and
``train``'s checks; the worker downloads the weights with ``from_pretrained``. huggingface_hub is
imported inside the functions (0.2 s): ``dojo --help`` and built-in names never pay for it.

Example: ``config_file("meta-llama/Llama-3.1-8B")`` -> the cached
``.../models--meta-llama--Llama-3.1-8B/snapshots/<commit>/config.json``.
"""

import os
import re
import socket
from pathlib import Path
from urllib.parse import urlsplit

from dojo.architectures import ARCHITECTURES
from dojo.errors import EstimateError

WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
"""What ``from_pretrained`` loads, in its order of preference (one is enough)."""
_TRUE = {"1", "on", "yes", "true"}
# Words Hub names add to a base architecture's name without changing its shape.
_VARIANT_WORDS = {"instruct", "chat", "hf", "it", "base"}
_VERSION = re.compile(r"v\d+(\.\d+)*")


class HubUnreachable(EstimateError):
    """The id is not in the local cache and the Hub cannot be asked (offline, no network)."""

    def __init__(self, message: str, hint: str, *, why: str) -> None:
        super().__init__(message, hint=hint)
        self.why = why


def offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) as huggingface_hub reads it, but read now: its
    own constant is fixed when it is imported."""
    return any(
        os.environ.get(k, "").strip().lower() in _TRUE
        for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def config_file(repo_id: str, revision: str | None = None, *, for_train: bool = False) -> Path:
    """config.json of ``repo_id`` at ``revision`` (default: main), from the cache or the Hub.

    Raises HubUnreachable when it is not cached and the Hub cannot be asked, EstimateError (one
    line and a hint) for a refused, missing or unknown repo, revision or file."""
    try:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import (
            EntryNotFoundError,
            GatedRepoError,
            HfHubHTTPError,
            HFValidationError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )
    except ImportError:
        raise EstimateError(
            f"--model {repo_id}: a Hub id needs huggingface_hub, not installed",
            hint="pip install 'huggingface_hub>=0.34' (a dependency of dojo), or give a local folder",
        ) from None
    at = f"{repo_id}@{revision}" if revision else repo_id
    get = _get_hint(repo_id, revision, for_train)
    endpoint = os.environ.get("HF_ENDPOINT") or None  # read now, as offline() is
    try:  # the cache lookup validates the id too (HFValidationError, below)
        if not offline() and not _cached(repo_id, "config.json", revision):
            reason = unreachable(endpoint or DEFAULT_ENDPOINT)
            if reason is not None:
                why = f"the Hub cannot be reached ({reason})"
                raise HubUnreachable(
                    f"--model {at}: not in the local Hugging Face cache and {why}",
                    get + "; without a network, HF_HUB_OFFLINE=1 skips the check",
                    why=why,
                )
        path = hf_hub_download(
            repo_id,
            "config.json",
            revision=revision,
            local_files_only=offline(),
            endpoint=endpoint,
        )
    # Most specific first: in huggingface_hub < 1.0 LocalEntryNotFoundError is an HTTP error.
    except LocalEntryNotFoundError:
        why = "HF_HUB_OFFLINE is set" if offline() else "the Hub cannot be reached"
        if not offline():  # huggingface_hub retried for ~20 s before saying so
            get += "; without a network, HF_HUB_OFFLINE=1 skips the wait"
        raise HubUnreachable(
            f"--model {at}: not in the local Hugging Face cache and {why}", get, why=why
        ) from None
    except GatedRepoError:
        raise EstimateError(
            f"--model {at}: gated model: the Hub refused config.json without access",
            hint=_login_hint(repo_id),
        ) from None
    except RepositoryNotFoundError:
        raise EstimateError(
            f"--model {at}: no such model on the Hub, or it is private",
            hint="check the id; for a private model: " + _login_hint(repo_id),
        ) from None
    except RevisionNotFoundError:
        raise EstimateError(
            f"--revision {revision}: no such branch, tag or commit in {repo_id}",
            hint=f"see the revisions on https://huggingface.co/{repo_id}/tree/main, or drop --revision",
        ) from None
    except EntryNotFoundError:
        raise EstimateError(
            f"--model {at}: the repo has no config.json (not a transformers model?)",
            hint="give a local folder holding the model's config.json",
        ) from None
    except HfHubHTTPError as e:
        status = getattr(getattr(e, "response", None), "status_code", None)
        if status in (401, 403):
            raise EstimateError(
                f"--model {at}: the Hub refused config.json (HTTP {status})",
                hint=_login_hint(repo_id),
            ) from None
        raise EstimateError(
            f"--model {at}: the Hub answered HTTP {status} for config.json", hint=get
        ) from None
    except HFValidationError:
        raise EstimateError(
            f"--model {at}: not a valid Hub id or revision",
            hint="a Hub id is org/name, e.g. meta-llama/Llama-3.1-8B",
        ) from None
    except OSError as e:  # a cache folder that cannot be written, a disk that is full
        raise EstimateError(
            f"--model {at}: cannot fetch config.json into the Hugging Face cache ({e})", hint=get
        ) from None
    return Path(path)


PROBE_TIMEOUT_S = 3.0
DEFAULT_ENDPOINT = "https://huggingface.co"
"""The Hub when HF_ENDPOINT is unset (huggingface_hub's own default)."""
_PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


def unreachable(endpoint: str) -> str | None:
    """Why the Hub's host cannot be reached (one TCP connect, at most PROBE_TIMEOUT_S), or None.

    Asked only for a config that is not cached: huggingface_hub then retries a network error five
    times with backoff (file_download.py, ``retry_on_errors=True``: 1 + 2 + 4 + 8 + 8 s), so on a
    machine without a network ``dojo estimate`` waited 23 s behind ten warning lines before it
    fell back to the built-in shape. Behind a proxy nothing is probed: the proxy may reach what
    this machine cannot."""
    if any(os.environ.get(k) for k in _PROXY_VARS):
        return None
    url = urlsplit(endpoint)
    host = url.hostname or ""
    port = url.port or (80 if url.scheme == "http" else 443)
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S):
            return None
    except socket.gaierror:
        return f"{host} does not resolve"
    except TimeoutError:
        return f"no answer from {host}:{port} in {PROBE_TIMEOUT_S:.0f} s"
    except OSError as e:
        return f"{host}:{port}: {e.strerror or e}"


def token() -> str | None:
    """The token huggingface_hub itself sends: HF_TOKEN, else the one ``hf auth login`` saved
    (``$HF_HOME/token``), or None. For the requests dojo makes without huggingface_hub."""
    from huggingface_hub import get_token

    return get_token()


def _cached(repo_id: str, filename: str, revision: str | None) -> bool:
    """Whether the local cache holds ``filename`` of ``repo_id`` at ``revision``."""
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(repo_id, filename, revision=revision), str)


def weights_cached(repo_id: str, revision: str | None = None) -> bool:
    """Whether the cache holds the model's weights (so a run can start offline)."""
    return any(_cached(repo_id, name, revision) for name in WEIGHT_FILES)


def builtin_for(repo_id: str) -> str | None:
    """The built-in architecture a Hub name is a release of, by name only, or None.

    meta-llama/Llama-3.1-8B-Instruct -> llama-3.1-8b, Qwen/Qwen2.5-7B-Instruct -> qwen2.5-7b,
    mistralai/Mistral-7B-Instruct-v0.2 -> mistral-7b. Only words that leave the shape unchanged
    (instruct, chat, hf, it, base, and a trailing version when the versioned name is unknown) are
    dropped: Qwen2.5-Coder-7B or a community fine-tune with its own suffix match nothing."""
    name = repo_id.rsplit("/", 1)[-1].lower().replace("_", "-")
    name = name.removeprefix("meta-")  # meta-llama/Meta-Llama-3.1-8B, the older spelling
    words = [w for w in name.split("-") if w not in _VARIANT_WORDS]
    for cand in ("-".join(words), "-".join(w for w in words if not _VERSION.fullmatch(w))):
        if cand in ARCHITECTURES:
            return cand
    return None


def _login_hint(repo_id: str) -> str:
    return (
        "run `hf auth login` with a token that can read it (or set HF_TOKEN), and accept the "
        f"license on https://huggingface.co/{repo_id}"
    )


def _get_hint(repo_id: str, revision: str | None, for_train: bool) -> str:
    rev = f" --revision {revision}" if revision else ""
    if for_train:  # training needs the weights too, and --model takes a folder, not a file
        return f"`hf download {repo_id}{rev}` while online, or --model a local model folder"
    return (
        f"`hf download {repo_id} config.json{rev}` while online, or --model a local folder "
        "or config.json"
    )
