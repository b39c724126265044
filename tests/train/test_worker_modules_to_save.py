"""--modules-to-save names checked against the loaded model (dojo.train.worker.model): PEFT passes
over a name that matches no module, so a typo would train nothing beside the adapters."""

import pytest

pytest.importorskip("peft", reason="needs the train extra")

from dojo.errors import DojoError  # noqa: E402
from dojo.train.worker.model import check_modules_to_save  # noqa: E402


def _tiny() -> object:
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=4,
                                        vocab_size=100))  # fmt: skip


def test_names_are_ends_of_module_names() -> None:
    model = _tiny()
    check_modules_to_save(model, ("embed_tokens", "lm_head", "norm", "model.norm"))
    with pytest.raises(DojoError) as e:
        check_modules_to_save(model, ("lm_head", "embed", "nosuch"))
    assert e.value.message == "--modules-to-save embed,nosuch: matches no module of this model"
    assert "embed_tokens" in (e.value.hint or "") and "lm_head" in (e.value.hint or "")
