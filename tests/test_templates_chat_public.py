"""Every bundled chat template against the public expected renderings, and every sidecar checked."""

import hashlib
import json

import pytest

from dojo.chat.template import bundled_names, load_template, render
from dojo.errors import TemplateError
from tests.helpers.chat_cases import CASES, CHAT, SIDECAR_KEYS


def _bundled_cases() -> list:
    names = set(bundled_names())
    return [
        pytest.param(c, id=f"{c['template']}:{c['case']}") for c in CASES if c["template"] in names
    ]


@pytest.mark.parametrize("case", _bundled_cases())
def test_public_case_renders_exactly(case: dict) -> None:
    kwargs = dict(case.get("extra_kwargs") or {})
    tpl = load_template(case["template"])
    # The sidecar's tokens are the ones the reference rendering used.
    assert (tpl.bos_token, tpl.eos_token) == (case["bos_token"], case["eos_token"])
    if "error" in case:
        with pytest.raises(TemplateError) as info:
            render(
                case["template"],
                case["messages"],
                add_generation_prompt=case["add_generation_prompt"],
                **kwargs,
            )
        kind, _, message = case["error"].partition(": ")
        cause = info.value.__cause__
        assert type(cause).__name__ == kind
        assert str(cause) == message
        assert message in info.value.message
        return
    out = render(
        case["template"],
        case["messages"],
        add_generation_prompt=case["add_generation_prompt"],
        bos_token=case["bos_token"],
        eos_token=case["eos_token"],
        **kwargs,
    )
    assert out == case["rendered"]
    # Defaults from the sidecar give the same text as the explicit tokens.
    assert (
        render(
            case["template"],
            case["messages"],
            add_generation_prompt=case["add_generation_prompt"],
            **kwargs,
        )
        == out
    )


@pytest.mark.parametrize("name", sorted({c["template"] for c in CASES}))
def test_every_public_template_is_bundled_and_official_flag_is_true(name: str) -> None:
    if name not in bundled_names():
        pytest.skip(f"{name} not bundled yet")
    expected = next(c["template_sha256"] for c in CASES if c["template"] == name)
    digest = hashlib.sha256((CHAT / f"{name}.jinja").read_bytes()).hexdigest()
    meta = json.loads((CHAT / f"{name}.json").read_text(encoding="utf-8"))
    # official: true is a claim that the file is the reference text byte-for-byte.
    assert meta["official"] == (digest == expected), f"{name}: official flag disagrees with sha256"


@pytest.mark.parametrize("name", bundled_names())
def test_sidecar_is_valid(name: str) -> None:
    meta = json.loads((CHAT / f"{name}.json").read_text(encoding="utf-8"))
    assert set(meta) == SIDECAR_KEYS, f"{name}.json keys: {sorted(set(meta) ^ SIDECAR_KEYS)}"
    for key in ("family", "model", "revision_note"):
        assert isinstance(meta[key], str) and meta[key], key
    assert meta["family"] == meta["family"].lower()
    assert isinstance(meta["official"], bool)
    for key in ("bos_token", "eos_token", "stop_token"):
        assert meta[key] is None or (isinstance(meta[key], str) and meta[key]), key
    assert isinstance(meta["variables"], dict)
    assert set(meta["supports"]) == {"system", "tools", "thinking"}
    assert all(isinstance(v, bool) for v in meta["supports"].values())
    # The template compiles and renders a plain exchange with its own defaults.
    text = render(name, [{"role": "user", "content": "ping"}], add_generation_prompt=True)
    assert "ping" in text
    if meta["stop_token"]:
        convo = [{"role": "user", "content": "ping"}, {"role": "assistant", "content": "pong"}]
        assert meta["stop_token"] in render(name, convo)


def test_every_jinja_has_a_sidecar_and_vice_versa() -> None:
    jinja = {p.stem for p in CHAT.glob("*.jinja")}
    sidecars = {p.stem for p in CHAT.glob("*.json")}
    assert jinja == sidecars
