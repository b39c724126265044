"""The worker's ZeRO-3 leaf check (dojo.train.worker.args.fit_z3_leaf): the class the resolver
named from config.json's model_type must be in the loaded model, else transformers' own
_no_split_modules replaces it in the live DeepSpeed config, else the leaf entry goes. And the
TrainingArguments of a run without DeepSpeed (training_kwargs)."""

from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("transformers", reason="needs the train extra")
nn = pytest.importorskip("torch.nn", reason="needs the train extra")

from dojo.run.groups.zero import ZeroOptions  # noqa: E402
from dojo.train.worker.args import fit_z3_leaf  # noqa: E402
from dojo.train.worker.callbacks import z3_leaf_count  # noqa: E402
from dojo.zero.build import DS_LEAF_DEFAULTS  # noqa: E402


class OddBlock(nn.Module):  # a decoder layer whose name is not {ModelType}DecoderLayer
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)


class Model(nn.Module):
    _no_split_modules = ["OddBlock"]

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([OddBlock(), OddBlock()])


def _args(classes: list[str]) -> Any:
    zero = {"stage": 3, "leaf_module": {"classes": classes}}
    return SimpleNamespace(hf_deepspeed_config=SimpleNamespace(config={"zero_optimization": zero}))


def test_named_class_present_is_kept(capsys: pytest.CaptureFixture[str]) -> None:
    args = _args(["OddBlock", *DS_LEAF_DEFAULTS])
    fit_z3_leaf(Model(), args, SimpleNamespace(zero=ZeroOptions(stage=3, z3_leaf="OddBlock")))
    assert (
        args.hf_deepspeed_config.config["zero_optimization"]["leaf_module"]["classes"][0]
        == "OddBlock"
    )
    assert capsys.readouterr().err == ""


def test_missing_class_falls_back_to_no_split_modules(capsys: pytest.CaptureFixture[str]) -> None:
    args = _args(["OddDecoderLayer", *DS_LEAF_DEFAULTS])
    fit_z3_leaf(
        Model(), args, SimpleNamespace(zero=ZeroOptions(stage=3, z3_leaf="OddDecoderLayer"))
    )
    classes = args.hf_deepspeed_config.config["zero_optimization"]["leaf_module"]["classes"]
    assert classes == ["OddBlock", *DS_LEAF_DEFAULTS]
    err = capsys.readouterr().err
    assert err.startswith("warning: ZeRO-3: no OddDecoderLayer in this model; its decoder layer ")
    assert "its decoder layer OddBlock is the leaf instead" in err


def test_no_layer_class_at_all_drops_the_leaf(capsys: pytest.CaptureFixture[str]) -> None:
    model = Model()
    model._no_split_modules = []  # type: ignore[misc]
    args = _args(["OddDecoderLayer"])
    fit_z3_leaf(model, args, SimpleNamespace(zero=ZeroOptions(stage=3, z3_leaf="OddDecoderLayer")))
    assert "leaf_module" not in args.hf_deepspeed_config.config["zero_optimization"]
    assert "per-module hooks stay" in capsys.readouterr().err


def test_count_reads_deepspeeds_flag() -> None:
    model = Model()
    assert z3_leaf_count(model) == {}
    for layer in model.layers:
        layer._z3_leaf = True  # what deepspeed.utils.set_z3_leaf_module sets
    assert z3_leaf_count(model) == {"OddBlock": 2}


def test_no_deepspeed_trains_with_the_trainers_own_loop(tmp_path: Any) -> None:
    from transformers import TrainingArguments

    from dojo.run import resolve
    from dojo.run.machine import Machine
    from dojo.run.schema import RunOptions
    from dojo.train.worker.args import training_kwargs

    opts = RunOptions(zero=ZeroOptions(stage="none"))
    run = resolve.resolve(opts, machine=Machine(cuda=False, gpu_ids=()), gpus_per_node=2)
    kw = training_kwargs(SimpleNamespace(run=run, run_dir=str(tmp_path), ds_config=None))
    assert kw["deepspeed"] is None and kw["ddp_find_unused_parameters"] is False
    args = TrainingArguments(**{**kw, "use_cpu": True})
    assert args.deepspeed is None and not hasattr(args, "hf_deepspeed_config")
