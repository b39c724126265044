"""QLoRA's k-bit preparation (dojo.train.worker.model.prepare_kbit), on a tiny 4-bit model on the
CPU (bitsandbytes quantizes there too): PEFT's fp32 upcast of the weights that are not 4-bit
stays without DeepSpeed and is left out under it, whose engine casts them back to bf16."""

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("bitsandbytes", reason="needs the train extra")

import torch  # noqa: E402

from dojo.train.worker.model import prepare_kbit  # noqa: E402
from tests.helpers.runs import run_of  # noqa: E402


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    from dojo.train.tiny import TINY_CONFIG

    path = tmp_path_factory.mktemp("tiny")
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(**json.loads(TINY_CONFIG.read_text()))).to(
        torch.bfloat16
    ).save_pretrained(path)
    return path


def _four_bit(folder: Path) -> Any:
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                           bnb_4bit_compute_dtype=torch.bfloat16)  # fmt: skip
    return AutoModelForCausalLM.from_pretrained(folder, quantization_config=q, dtype=torch.bfloat16)


def _rest_dtypes(model: Any) -> set[torch.dtype]:
    return {p.dtype for p in model.parameters() if type(p).__name__ != "Params4bit"}


@pytest.mark.parametrize(
    ("zero", "rest"), [(2, torch.bfloat16), (3, torch.bfloat16), ("none", torch.float32)]
)
def test_upcast_only_without_deepspeed(folder: Path, zero: Any, rest: torch.dtype) -> None:
    run = run_of(method="qlora", stage=zero, grad_ckpt=True)
    model = prepare_kbit(_four_bit(folder), run)
    assert _rest_dtypes(model) == {rest}
    assert not any(p.requires_grad for p in model.parameters())
    assert model.is_gradient_checkpointing
    ids = torch.tensor([[1, 2, 3]])
    assert model.get_input_embeddings()(ids).requires_grad  # reentrant checkpointing's input


def test_no_checkpointing_no_hook(folder: Path) -> None:
    model = prepare_kbit(_four_bit(folder), run_of(method="qlora", stage=2))
    assert not model.is_gradient_checkpointing
    assert not model.get_input_embeddings()(torch.tensor([[1, 2]])).requires_grad
