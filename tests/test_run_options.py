"""The run schema (dojo.run.schema, dojo.run.field), default < file < flag (dojo.run.inputs) and
the one resolver (dojo.run.resolve)."""

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from dojo.errors import ConfigError, DojoError
from dojo.run import inputs, resolve
from dojo.run.run import Run
from dojo.run.schema import OPTIONS, RunOptions, command_options
from tests.helpers.runs import CPU, CUDA, run_of, values

PRESETS = Path(__file__).resolve().parents[1] / "templates" / "train"


def test_every_option_is_documented_and_its_default_parses() -> None:
    for opt in OPTIONS.values():
        assert opt.help and opt.flag.startswith("--"), opt.name
        if opt.default is not None and opt.kind not in ("list", "floats"):
            assert opt.parse(opt.default) == opt.default, opt.name


@pytest.mark.parametrize("raw", ["5e8", "500000000", "500_000_000", 5e8, 500000000])
def test_sizes_accept_every_spelling(raw: object) -> None:
    assert OPTIONS["bucket_size"].parse(raw) == 500_000_000
    assert OPTIONS["bucket_size"].parse("auto") == "auto"


@pytest.mark.parametrize(
    ("name", "raw", "needle"),
    [
        ("bucket_size", "inf", "--bucket-size 'inf': must be a whole number"),
        ("bucket_size", "nan", "must be a whole number"),
        ("bucket_size", "1e30", "out of range"),
        ("bucket_size", "0", "out of range"),
        ("bucket_size", "2.5", "must be a whole number"),
        ("stage", "4", "--zero '4': choose one of none, 0, 1, 2, 3"),
        ("stage", "²", "choose one of none, 0, 1, 2, 3"),
        ("micro_batch", "1" * 5000, "must be a whole number"),
        ("seq_len", "1e400", "must be a whole number"),
        ("lr", "nan", "--lr 'nan': must be a number"),
        ("lr", "2", "out of range"),
        ("method", "ful", "choose one of full, lora, qlora"),
        ("packing", "maybe", "must be true or false"),
        ("micro_batch", True, "must be a whole number"),
        ("model", "", "give a non-empty value"),
    ],
)
def test_bad_values_name_the_flag_and_value(name: str, raw: object, needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        OPTIONS[name].parse(raw)
    assert needle in e.value.message
    assert e.value.hint


def test_long_values_are_shortened_in_errors() -> None:
    with pytest.raises(ConfigError) as e:
        OPTIONS["method"].parse("x" * 10_000)
    assert len(e.value.message) < 200


def test_aliases_are_the_same_option() -> None:
    assert OPTIONS["stage"].flags[:2] == ("--zero", "--stage")
    assert "--attention" in OPTIONS["attn"].flags and "--lora-rank" in OPTIONS["lora_r"].flags
    for command in ("config", "estimate", "train"):
        assert {"stage", "bucket_size"} <= set(command_options(command))


def test_precedence_default_file_flag(tmp_path: Path) -> None:
    f = tmp_path / "run.yaml"
    f.write_text("method: lora\nzero_stage: 3\nlr: 2e-4\nbucket-size: 5e8\n")
    file_values = inputs.load_file(f)
    v = inputs.merge("train", file_values, {"stage": "1", "method": None})
    assert v.model.method == "lora" and v.zero.stage == 1 and v.loop.lr == 2e-4
    assert v.zero.bucket_size == 500_000_000 and v.data.seq_len == OPTIONS["seq_len"].default


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("metod: lora\n", "did you mean 'method'"),
        ("- a\n- b\n", "expected a mapping"),
        ("zero: 2\nstage: 3\n", "stage is given twice"),
        ("method: [1\n", "malformed YAML (line"),
        ("seq_len: big\n", "seq_len 'big': must be a whole number"),
    ],
)
def test_bad_files(tmp_path: Path, content: str, needle: str) -> None:
    f = tmp_path / "run.yaml"
    f.write_text(content)
    with pytest.raises(DojoError) as e:
        inputs.load_file(f)
    assert needle in e.value.message + " " + (e.value.hint or "")


@pytest.mark.parametrize("name", ["full", "lora", "qlora"])
def test_presets_by_name_resolve(name: str) -> None:
    v = inputs.merge("train", inputs.load_file(name), {})
    header = (PRESETS / f"{name}.yaml").read_text().splitlines()[0]
    assert header.startswith("# dojo train")
    run = resolve.resolve(v, machine=CUDA, given=set())
    assert run.model.method == v.model.method


def test_print_config_round_trips(tmp_path: Path) -> None:
    v = inputs.merge("train", {}, {"method": "lora", "bucket_size": "5e8", "data": ["a.jsonl"],
                                   "overlap_comm": False, "data_ratios": "1"})  # fmt: skip
    f = tmp_path / "again.yaml"
    f.write_text(inputs.to_yaml(v))
    assert inputs.merge("train", inputs.load_file(f), {}) == v


def test_auto_is_resolved_once() -> None:
    cpu, gpu = run_of(), run_of(CUDA)
    assert (cpu.kernels.precision, cpu.loop.optim, cpu.kernels.liger, cpu.kernels.compile) == (
        "fp32",
        "adamw_torch",
        "off",
        "off",
    )
    assert (gpu.kernels.precision, gpu.loop.optim) == ("bf16", "adamw_torch_fused")
    assert run_of(CUDA, method="lora").loop.lr == 2e-4 and run_of(CUDA).loop.lr == 2e-5
    assert run_of(CUDA, optimizer="ds").loop.optim == "adamw_torch"  # never built: the JSON's
    z3 = run_of(CUDA, stage=3, max_steps=10, report_to="none")
    for group in ("model", "data", "zero", "kernels", "lora", "loop", "output"):
        assert "auto" not in vars(getattr(z3, group)).values(), group


def test_offload_rules_in_one_place() -> None:
    assert run_of(stage=3, offload="cpu").zero.offload_param == "cpu"  # config and train agree
    assert run_of(stage=2, offload="cpu").zero.offload_param == "none"
    assert run_of(stage=3, offload="cpu", offload_param="none").zero.offload_param == "none"
    with pytest.raises(ConfigError, match="needs ZeRO stage 1, 2 or 3"):
        run_of(stage=0, offload="cpu")
    with pytest.raises(ConfigError, match="--offload-param cpu needs --zero 3"):
        run_of(stage=2, offload_param="cpu")
    with pytest.raises(ConfigError, match="needs --nvme-path"):
        run_of(stage=3, offload="nvme")
    with pytest.raises(ConfigError, match="applies to --optimizer hf"):
        run_of(optimizer="ds", optim="adamw_torch")
    with pytest.raises(ConfigError, match="--liger on needs CUDA"):
        run_of(liger="on")


def test_buckets_follow_the_model() -> None:
    from dojo.modelspec import resolve_model

    spec = resolve_model("7b")
    assert run_of(CUDA, spec).zero.bucket_size == 500_000_000  # full ZeRO-2: 5e8
    lora = run_of(CUDA, spec, method="lora")  # ZeRO-2 adapters: one bucket, no overlap
    assert lora.zero.bucket_size == spec.lora_params(16) and not lora.zero.overlap_comm
    assert run_of(CUDA, spec, method="lora", lora_targets="q_proj,v_proj").zero.bucket_size == (
        spec.lora_params(16, ("q_proj", "v_proj"))
    )
    assert run_of(CUDA, spec, gpus_per_node=2).zero.overlap_comm  # full, 2 GPUs: overlapped
    assert not run_of(CUDA, spec).zero.overlap_comm  # one GPU: nothing to communicate
    assert run_of(CUDA, spec, overlap_comm=True).zero.overlap_comm  # asked for: kept
    assert run_of(CUDA, spec, gpus_per_node=2, method="lora").zero.overlap_comm is False
    full_head = run_of(CUDA, spec, gpus_per_node=2, method="lora", modules_to_save=("lm_head",))
    assert (
        full_head.zero.bucket_size == spec.hidden_size**2 and full_head.zero.overlap_comm
    )  # HF auto
    z3 = run_of(CUDA, spec, stage=3)
    assert z3.zero.bucket_size == z3.zero.prefetch_bucket_size == 500_000_000
    assert z3.zero.leaf_classes == ("LlamaDecoderLayer",)
    assert run_of(CUDA, spec, stage=3, method="lora").zero.bucket_size == spec.hidden_size**2
    assert run_of(CUDA, spec, stage=3, method="lora").zero.overlap_comm  # ZeRO-3: as before
    assert run_of(CUDA, spec, stage=2).zero.prefetch_bucket_size == "auto"  # ZeRO-3 only
    assert run_of(CUDA, spec, stage=2).zero.leaf_classes == ()
    assert run_of(CUDA).zero.bucket_size == 500_000_000  # no model known: 5e8 uncapped
    assert run_of(CUDA, stage=3).zero.leaf_classes == ()  # no model, no layer class
    tiny = resolve_model("qwen2.5-0.5b")
    assert (
        run_of(CUDA, tiny, stage=3).zero.prefetch_bucket_size == 494_032_768
    )  # capped at the model
    assert run_of(CUDA, tiny, stage=3).zero.leaf_classes == ("Qwen2DecoderLayer",)
    assert run_of(CUDA, spec, stage=3, z3_leaf="off").zero.leaf_classes == ()
    named = run_of(CUDA, spec, stage=3, z3_leaf="LlamaMLP").zero.leaf_classes
    assert named == ("LlamaMLP",)  # another class of the model's, as given
    remote = run_of(CUDA, spec, stage=3, z3_leaf="MyLayer", trust_remote_code=True)
    assert remote.zero.leaf_classes == ("MyLayer",)  # the model's own code: its own names


def test_liger_auto_follows_the_machine_and_compile() -> None:
    rich = dataclasses.replace(CUDA, liger=True)
    plain = run_of(rich)
    k = plain.kernels
    assert k.fused_loss and k.liger_kernels and not k.compiled
    both = run_of(rich, compile="on")  # compile asked for: Liger's layer kernels step aside
    assert both.kernels.compiled and both.kernels.liger == "loss"
    assert any(a.startswith("liger loss: compile on") for a in both.assumed)
    with pytest.raises(ConfigError, match="--compile on with --liger on") as err:
        run_of(rich, compile="on", liger="on")
    assert "--liger loss" in (err.value.hint or "")
    asked = run_of(rich, compile="off", liger="loss")  # the fused loss alone, asked for
    assert asked.kernels.liger == "loss" and not asked.kernels.compiled
    assert run_of(rich, liger="off").kernels.liger == "off"
    assert run_of(CPU).kernels.liger == "off"
    with pytest.raises(ConfigError, match="--liger loss needs CUDA"):
        run_of(liger="loss")


def test_compile_auto_is_on_only_where_it_was_measured_to_pay() -> None:
    """Packed LoRA and QLoRA of a Llama-type model on CUDA compile by default (one width a row:
    the layers compile once); every run outside what was measured stays uncompiled, and an
    explicit --compile is kept."""
    from dojo.modelspec import resolve_model

    rich = dataclasses.replace(CUDA, liger=True)
    llama = resolve_model("llama-3.2-1b")
    lora = {"method": "lora", "packing": True}
    on = run_of(rich, llama, **lora)
    assert on.kernels.compiled and on.kernels.liger == "loss" and on.kernels.attn == "sdpa"
    assert any(a.startswith("compile on: packed 1B LoRA") for a in on.assumed)
    assert run_of(rich, llama, **{**lora, "method": "qlora"}).kernels.compiled
    assert run_of(CUDA, resolve_model("qwen2.5-1.5b"), **lora).kernels.compiled  # no Liger
    for stage in (0, 1, "none"):
        assert run_of(rich, llama, stage=stage, **lora).kernels.compiled, stage
    for machine, spec, other in (
        (CPU, llama, lora),
        (rich, llama, {**lora, "packing": False}),  # padded rows change shape every batch
        (rich, llama, {**lora, "grad_ckpt": True}),
        (rich, llama, {**lora, "stage": 3}),
        (rich, llama, {**lora, "offload": "cpu", "optimizer": "ds"}),
        (rich, llama, {**lora, "liger": "on"}),  # refused together when asked
        (rich, llama, {**lora, "attn": "sdpa_varlen"}),  # would split every compiled layer
        (rich, llama, {**lora, "precision": "fp16"}),
        (rich, llama, {"method": "lora", "objective": "dpo"}),  # never packed
        (rich, llama, {"packing": True}),  # full fine-tuning
        (rich, resolve_model("mistral-7b-v0.3"), lora),
        (rich, None, lora),  # a model dojo does not know
    ):
        run = run_of(machine, spec, **other)
        assert not run.kernels.compiled, other
        assert not any(a.startswith("compile on") for a in run.assumed), other
    assert not run_of(rich, llama, compile="off", **lora).kernels.compiled  # asked: kept
    assert run_of(rich, llama, method="full", compile="on").kernels.compiled
    with pytest.raises(ConfigError, match="--compile on needs CUDA"):
        run_of(CPU, compile="on")


def test_compile_keeps_the_liger_memory_of_the_run() -> None:
    """Compile keeps Liger's fused loss: its estimate is no larger than the run with all of
    Liger, so a card the Liger run fits fits the compiled one."""
    from dojo.estimate.model import estimate
    from dojo.modelspec import resolve_model
    from dojo.run import render

    rich = dataclasses.replace(CUDA, liger=True)
    spec = resolve_model("llama-3.2-1b")
    lora = {"method": "lora", "packing": True, "micro_batch": 4, "seq_len": 2048, "attn": "sdpa"}
    compiled = resolve.resolve(values(**lora, compile="on"), machine=rich, spec=spec)
    liger = resolve.resolve(values(**lora, compile="off"), machine=rich, spec=spec)
    bare = resolve.resolve(values(**lora, liger="off", compile="on"), machine=rich, spec=spec)
    assert compiled.kernels.compiled and not liger.kernels.compiled and bare.kernels.compiled

    def gib(run: Run) -> float:
        return estimate(spec, render.estimate_setup(run, 24.0, None)).gpu_total_gib

    assert gib(compiled) <= gib(liger) < gib(bare) - 5  # the fp32 logits: many GiB at 128k vocab


def test_attn_auto_is_sdpa_varlen_where_it_was_measured() -> None:
    """Packed bf16 rows of a known Llama/Qwen model on CUDA go through the FlashAttention kernel
    by their offsets; auto picks it only on those terms."""
    from dojo.modelspec import resolve_model

    llama, qwen = resolve_model("llama-3.2-1b"), resolve_model("qwen2.5-1.5b")
    packed = {"packing": True}
    run = run_of(CUDA, llama, **packed)
    assert run.kernels.attn == "sdpa_varlen"
    assert any(a.startswith("attn sdpa_varlen: packed samples") for a in run.assumed)
    lora = {"method": "lora", "compile": "off", **packed}  # compile's auto would take sdpa
    assert run_of(CUDA, qwen, **lora).kernels.attn == "sdpa_varlen"
    for machine, spec, other in (
        (CUDA, llama, {"packing": False}),  # padded rows: nothing to keep apart
        (CPU, llama, packed),
        (CUDA, llama, {**packed, "precision": "fp16"}),  # pre-Ampere GPUs train in fp16
        (CUDA, llama, {**packed, "compile": "on"}),  # would split every compiled layer
        (CUDA, resolve_model("mistral-7b-v0.3"), packed),  # windows not run on the GPU
        (CUDA, None, packed),  # a model dojo does not know
    ):
        assert run_of(machine, spec, **other).kernels.attn == "sdpa", other
    assert run_of(CUDA, llama, attn="sdpa", **packed).kernels.attn == "sdpa"  # asked for: kept
    assert not any(
        a.startswith("attn ") for a in run_of(CUDA, llama, attn="sdpa", **packed).assumed
    )


@pytest.mark.parametrize("machine", [CUDA, CPU])
def test_attn_auto_is_eager_for_soft_capping_models(machine: Any) -> None:
    """transformers 5.24 refuses SDPA for Gemma-2 (_supports_sdpa = False: SDPA cannot soft-cap
    the attention logits): auto picks eager, as transformers does, and says why."""
    from dojo.modelspec import resolve_model

    run = run_of(machine, resolve_model("gemma-2-2b"), packing=True)
    assert run.kernels.attn == "eager"
    assert any(a.startswith("attn eager: gemma2 soft-caps") for a in run.assumed)


@pytest.mark.parametrize("attn", ["sdpa", "sdpa_varlen"])
def test_kernels_without_soft_capping_are_refused_for_gemma2(attn: str) -> None:
    from dojo.modelspec import resolve_model

    with pytest.raises(ConfigError, match=f"--attn {attn}: gemma2 caps its attention logits"):
        run_of(CUDA, resolve_model("gemma-2-2b"), packing=True, attn=attn)


def test_round_trip_through_json() -> None:
    import json

    run = run_of(CUDA, method="lora", data=("a.jsonl",), modules_to_save=("lm_head",))
    again = Run.from_dict(json.loads(json.dumps(run.to_dict())))
    assert again == run
    with pytest.raises(ValueError, match="format"):
        Run.from_dict({**run.to_dict(), "format": 99})


def test_values_helper_matches_merge() -> None:
    assert values() == inputs.merge("train", {}, {}) == RunOptions()


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("method: " + "[" * 100_000 + "]" * 100_000 + "\n", "nests deeper than 64 levels"),
        (
            "a: &a [x, x, x, x, x, x, x, x, x]\n"
            + "".join(
                f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n"
                for p, n in zip("abcdefg", "bcdefgh", strict=True)
            ),
            "(a YAML bomb?)",
        ),
    ],
    ids=["deep", "alias-bomb"],
)
def test_hostile_config_files_refused_fast(tmp_path: Path, content: str, needle: str) -> None:
    """--config: a 100,000-deep list and a billion-laughs file, each one short line, no hang."""
    import time

    f = tmp_path / "run.yaml"
    f.write_text(content)
    start = time.monotonic()
    with pytest.raises(DojoError) as e:
        inputs.load_file(f)
    assert time.monotonic() - start < 5
    assert needle in e.value.message and e.value.hint
    assert len(e.value.message) < 300  # never the value in full


def test_deeply_nested_data_rows_are_refused(tmp_path: Path) -> None:
    """--data: a row nested 100,000 deep is one clear error, not a RecursionError; one nested
    past 64 levels inside a valid-looking conversation is a bad row with its reason."""
    from dojo.errors import DataError
    from dojo.train.rows import read_rows

    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"messages": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    with pytest.raises(DataError, match="nested too deeply to be a conversation") as e:
        read_rows([str(deep)])
    assert e.value.hint
    inner = tmp_path / "inner.jsonl"
    reply = "[" * 100 + "]" * 100
    inner.write_text(
        '{"messages": [{"role": "user", "content": "hi"}, '
        f'{{"role": "assistant", "content": {reply}}}]}}\n'
    )
    report = read_rows([str(inner)])
    assert not report.rows and "nested deeper than 64 levels" in report.bad[0][1]


def test_expandable_segments_auto_is_on_with_cuda_unless_the_environment_says() -> None:
    on = run_of(CUDA)
    assert on.kernels.expandable
    assert any(a.startswith("expandable segments on: ") for a in on.assumed)
    assert not run_of(CPU).kernels.expandable  # a CUDA allocator setting
    assert not run_of(CUDA, expandable_segments="off").kernels.expandable
    for conf, want in (("expandable_segments:False", False), ("max_split_size_mb:256", True),
                       ("garbage_collection_threshold:0.6,expandable_segments:True", True)):  # fmt: skip
        run = run_of(dataclasses.replace(CUDA, alloc_conf=conf))
        assert run.kernels.expandable is want, conf
    said = run_of(dataclasses.replace(CUDA, alloc_conf="expandable_segments:False")).assumed
    assert "expandable segments off: PYTORCH_CUDA_ALLOC_CONF says so" in said


def test_expandable_segments_contradictions_are_refused() -> None:
    with pytest.raises(ConfigError, match="--expandable-segments on needs CUDA") as e:
        run_of(CPU, expandable_segments="on")
    assert "auto or off" in (e.value.hint or "")
    no = dataclasses.replace(CUDA, alloc_conf="expandable_segments:False")
    with pytest.raises(ConfigError, match="says expandable_segments:False"):
        run_of(no, expandable_segments="on")
    yes = dataclasses.replace(CUDA, alloc_conf="expandable_segments:True")
    with pytest.raises(ConfigError, match="--expandable-segments off but PYTORCH_CUDA_ALLOC_CONF"):
        run_of(yes, expandable_segments="off")
    assert run_of(yes, expandable_segments="on").kernels.expandable  # the two agree


def test_alloc_conf_parsing() -> None:
    from dojo.run.machine import conf_expandable, with_expandable

    assert conf_expandable(None) is None and conf_expandable("") is None
    assert conf_expandable("expandable_segments:True") is True
    assert conf_expandable("max_split_size_mb:128, expandable_segments:False") is False
    assert with_expandable(None) == "expandable_segments:True"
    assert (
        with_expandable("max_split_size_mb:128") == "max_split_size_mb:128,expandable_segments:True"
    )
    assert with_expandable("expandable_segments:False") == "expandable_segments:False"  # theirs


def test_attention_kernels_the_workers_cannot_run_are_refused_before_launch() -> None:
    for attn in ("flex_attention", "flash_attention_2"):
        with pytest.raises(ConfigError, match=f"--attn {attn} needs CUDA GPUs") as e:
            run_of(CPU, attn=attn)
        assert "--attn sdpa" in (e.value.hint or "")
    with pytest.raises(ConfigError, match="needs the flash-attn package"):
        run_of(CUDA, attn="flash_attention_2")  # CUDA here has no flash_attn
    assert run_of(
        dataclasses.replace(CUDA, flash_attn=True), attn="flash_attention_2"
    ).kernels.attn == ("flash_attention_2")
    assert run_of(CUDA, attn="flex_attention").kernels.attn == "flex_attention"
    from dojo.run.machine import assumed_cuda

    assumed = run_of(assumed_cuda(), attn="flash_attention_2")  # estimate / dry run elsewhere
    assert assumed.kernels.attn == "flash_attention_2"


def test_flex_attention_is_estimated_without_a_dense_mask() -> None:
    from dojo.run import render

    flex = render.estimate_setup(run_of(CUDA, attn="flex_attention", packing=True))
    sdpa = render.estimate_setup(run_of(CUDA, attn="sdpa", packing=True))
    assert (flex.attention, sdpa.attention) == ("flash_attention_2", "sdpa")


def test_sdpa_varlen_needs_packing_and_no_soft_capping() -> None:
    """Offsets exist only in packed rows; Gemma-2's capped logits are not in the kernel. The CPU
    takes it (one causal SDPA call per sample), and the estimate has no mask for it."""
    from dojo.modelspec import resolve_model
    from dojo.run import render

    with pytest.raises(ConfigError, match="--attn sdpa_varlen keeps samples apart") as e:
        run_of(CUDA, attn="sdpa_varlen", packing=False)
    assert "--packing" in (e.value.hint or "")
    assert run_of(CPU, attn="sdpa_varlen", packing=True).kernels.attn == "sdpa_varlen"
    gemma = resolve_model("gemma-2-2b")
    with pytest.raises(ConfigError, match="soft-capping") as e:
        resolve.resolve(values(attn="sdpa_varlen", packing=True), machine=CUDA, spec=gemma)
    assert "--attn eager" in (e.value.hint or "")
    run = resolve.resolve(
        values(attn="sdpa_varlen", packing=True), machine=CUDA, spec=resolve_model("llama-3.2-1b")
    )
    assert render.estimate_setup(run).attention == "flash_attention_2"


def test_lora_options_a_full_run_would_drop_are_refused() -> None:
    for name, value, flag in (("lora_r", 8, "--lora-r 8"), ("lora_alpha", 8, "--lora-alpha 8"),
                              ("lora_dropout", 0.5, "--lora-dropout 0.5"),
                              ("lora_targets", "zzz", "--lora-targets zzz")):  # fmt: skip
        with pytest.raises(ConfigError) as e:
            run_of(method="full", **{name: value})
        assert e.value.message == f"{flag} applies to --method lora or qlora only"
        assert e.value.hint == f"drop {flag.split()[0]}, or use --method lora"
        assert run_of(method="lora", **{name: value}).model.method == "lora"
    # A default is no request: a file listing every option (--print-config, a preset) still
    # runs with --method full, and so does a default typed out.
    assert run_of(method="full", lora_r=16, lora_alpha=32).model.method == "full"
    assert run_of(method="full", lora_dropout=0.0).model.method == "full"  # no dropout: as full
    listed = inputs.merge("train", inputs.load_file("lora"), {"method": "full"})
    run = resolve.resolve(listed, machine=CPU, given=set(inputs.load_file("lora")) | {"method"})
    assert run.model.method == "full"


def test_zero3_options_below_zero3_are_refused() -> None:
    for name, value, flag in (("z3_leaf", "Foo", "--z3-leaf Foo"),
                              ("prefetch_bucket_size", 500_000_000,
                               "--prefetch-bucket-size 500000000"),
                              ("sub_group_size", 100_000_000, "--sub-group-size 100000000")):  # fmt: skip
        for stage in ("none", 0, 1, 2):
            with pytest.raises(ConfigError) as e:
                run_of(stage=stage, **{name: value})
            assert e.value.message == f"{flag} applies to ZeRO-3 only (got --zero {stage})"
            assert e.value.hint == f"use --zero 3, or drop {flag.split()[0]}"
        assert run_of(stage=3, **{name: value}).zero.stage == 3
    # Their defaults ask nothing, and neither does --z3-leaf off; a --print-config file of a
    # ZeRO-2 run lists them so.
    assert run_of(stage=2, z3_leaf="off", prefetch_bucket_size="auto").zero.stage == 2
    z2 = run_of(stage=2)
    again = inputs.merge("train", {}, {k: v for k, v in z2.values().items() if k in OPTIONS})
    assert resolve.resolve(again, machine=CPU, given=set(OPTIONS)).zero.stage == 2


def test_z3_leaf_class_must_be_the_models_own() -> None:
    from dojo.modelspec import resolve_model

    llama = resolve_model("8b")
    with pytest.raises(ConfigError) as e:
        run_of(spec=llama, stage=3, z3_leaf="Foo")
    assert e.value.message == "--z3-leaf Foo: a llama model has no class Foo"
    assert e.value.hint == "use auto, off, or one of its classes: LlamaDecoderLayer"
    with pytest.raises(ConfigError, match="has no class Foo"):
        run_of(spec=llama, stage=3, z3_leaf="LlamaDecoderLayer,Foo")
    for own in ("LlamaDecoderLayer", "LlamaMLP",
                "transformers.models.llama.modeling_llama.LlamaDecoderLayer"):  # fmt: skip
        assert run_of(spec=llama, stage=3, z3_leaf=own).zero.z3_leaf == own
    assert run_of(stage=3, z3_leaf="Foo").zero.z3_leaf == "Foo"  # no model: kept as given
    moe = resolve_model(str(Path(__file__).parent / "data/moe/qwen3-30b-a3b.config.json"))
    with pytest.raises(ConfigError) as e:
        run_of(spec=moe, stage=3, z3_leaf="MixtralSparseMoeBlock")
    assert e.value.hint == (
        "use auto, off, or one of its classes: Qwen3MoeDecoderLayer, Qwen3MoeSparseMoeBlock"
    )
    assert run_of(spec=moe, stage=3, z3_leaf="Qwen3MoeSparseMoeBlock").zero.stage == 3


def test_master_addr_is_a_host_and_needs_several_machines() -> None:
    for bad in ("bad host!", "-oProxyCommand=x", "10.0.0.1; reboot", "a@b"):
        with pytest.raises(ConfigError) as e:
            run_of(hostfile="hosts", num_nodes=2, master_addr=bad)
        assert e.value.message.startswith(f"--master-addr {bad!r}: not a host name or address")
    for good in ("10.0.0.1", "worker-1", "node_7.cluster.local", "fe80::1%eth0", "[::1]"):
        assert run_of(hostfile="hosts", num_nodes=2, master_addr=good).devices.master_addr == good
    with pytest.raises(ConfigError) as e:
        run_of(master_addr="10.0.0.1", nproc=1)
    assert (
        e.value.message
        == "--master-addr 10.0.0.1 applies to a run on several machines (--hostfile)"
    )
    assert e.value.hint and e.value.hint.startswith("drop --master-addr")


def test_nvme_path_is_checked_for_a_run_on_this_machine(tmp_path: Path) -> None:
    def nvme(path: Path, **where: Any) -> Run:
        o = values(stage=3, offload="nvme", nvme_path=str(path), **where)
        return resolve.resolve(o, machine=CPU, gpus=(0,), given={"nvme_path"})

    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(ConfigError, match=f"--nvme-path {afile}: is a file, not a folder"):
        nvme(afile)
    with pytest.raises(ConfigError, match=f"{afile} is a file, so the folder cannot be made"):
        nvme(afile / "swap")
    assert nvme(tmp_path).zero.nvme_path == str(tmp_path)
    missing = tmp_path / "new" / "swap"
    assumed = nvme(missing).assumed
    assert f"nvme path: {missing} does not exist; DeepSpeed makes it (mkdir -p) when the run " \
        "starts" in assumed  # fmt: skip
    assert not missing.exists()  # said, not made
    # Another machine's path: several nodes, or a plan (config, estimate, an assumed machine).
    assert nvme(afile, hostfile="hosts", num_nodes=2).zero.nvme_path == str(afile)
    assert run_of(stage=3, offload="nvme", nvme_path=str(afile)).zero.offload == "nvme"
    o = values(stage=3, offload="nvme", nvme_path=str(afile))
    assert resolve.resolve(o, machine=CUDA_ASSUMED, gpus=(0,)).zero.offload == "nvme"
    # No nvme offload: the path is not read.
    assert (
        run_of(stage=3, offload="cpu", nvme_path=str(afile), gpus_per_node=1).zero.offload == "cpu"
    )


CUDA_ASSUMED = dataclasses.replace(CUDA, assumed=True)


def test_seq_len_past_the_models_context_is_said_not_refused() -> None:
    from dojo.modelspec import from_hf_config, resolve_model

    config = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
              "vocab_size": 256, "intermediate_size": 128, "max_position_embeddings": 2048}  # fmt: skip
    spec = from_hf_config(config, "m")
    line = ("seq len 4096: past the model's max_position_embeddings 2048 (config.json); trained "
            "as asked, positions beyond it are new to the model unless its rope_scaling covers "
            "them")  # fmt: skip
    assert line in run_of(spec=spec, seq_len=4096).assumed
    assert not any("max_position" in a for a in run_of(spec=spec, seq_len=2048).assumed)
    assert not any(
        "max_position" in a for a in run_of(spec=resolve_model("7b"), seq_len=8192).assumed
    )
    for odd in (None, "2048", True, -1, 2048.5):  # not said: nothing to compare with
        assert from_hf_config({**config, "max_position_embeddings": odd}, "m").max_positions == 0
