"""bench/speed.py, bench/steps.py and bench/workload.py on the CPU: the plan a GPU call runs, the
flags it passes, the rates it reads from a step log, the data every system trains on."""

import importlib
import json
import re
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture(scope="module")
def bench() -> Iterator[None]:
    sys.path.insert(0, str(BENCH))
    try:
        yield
    finally:
        sys.path.remove(str(BENCH))


def _args(**kw: object) -> SimpleNamespace:
    base = {"set": "peer", "only": None, "systems": None, "steps": 30, "repeats": 2,
            "warmup": True, "warmup_steps": 3, "spread": False, "gpu_ids": [0], "limit_s": 560.0}  # fmt: skip
    return SimpleNamespace(**{**base, **kw})


def test_variant_flags_are_dojo_train_flags(bench: None) -> None:
    rows = importlib.import_module("rows")
    memory = importlib.import_module("memory")
    train = memory.dojo_cli(["train", "--help"])
    for variant in rows.VARIANTS:
        flag = variant.split()[0]
        assert flag in train, variant
    for cases in rows.SPEED_SETS.values():
        for name, c in cases.items():
            ref = {"sft": "plain", "dpo": "trl-dpo", "kto": "trl-kto"}.get(c.objective, "trl-pref")
            assert c.systems[0] == ref, name  # every ratio is to it
            assert c.shape in rows.SHAPES, name
            data = {"plain": ("mix", "longtail", "fixed"), "trl-kto": ("kto-mix",)}
            assert c.data in data.get(ref, ("pref-mix",))


def test_a_variant_replaces_the_row_flag_it_names(bench: None) -> None:
    speed = importlib.import_module("speed")
    rows = importlib.import_module("rows")
    case = rows.SPEED_SETS["peer"]["1b-lora"]
    flags = speed.dojo_settings(case, "dojo --zero 0")
    assert flags.count("--zero") == 1 and flags[flags.index("--zero") + 1] == "0"
    assert speed.dojo_settings(case, "dojo --compile off")[-2:] == ["--compile", "off"]
    assert "--packing" in speed.dojo_settings(case, "dojo")


def test_variants_resolving_to_the_defaults_are_left_out(bench: None, tmp_path: Path) -> None:
    """A variant that resolves to dojo's own defaults is the same run, left out: on packed LoRA
    compile's auto is on (so --compile on, --liger loss and --attn sdpa are the defaults' run);
    on full fine-tuning it is off."""
    speed = importlib.import_module("speed")
    rows = importlib.import_module("rows")
    workload = importlib.import_module("workload")
    cases = rows.SPEED_SETS["peer-variants"]
    keep, skipped = speed.systems_of(cases["1b-lora"], workload.write_config("l1b", tmp_path))
    assert set(skipped) == {"dojo --compile on", "dojo --liger loss", "dojo --attn sdpa"}
    assert keep == ["plain", "dojo", "dojo --compile off", "dojo --liger off", "dojo --zero 0",
                    "dojo --zero none"]  # fmt: skip
    keep, skipped = speed.systems_of(cases["1b-full"], workload.write_config("l1b", tmp_path))
    assert set(skipped) == {"dojo --compile off"}
    keep, skipped = speed.systems_of(cases["8b-lora-ckpt"], workload.write_config("l8b", tmp_path))
    assert set(skipped) == {"dojo --compile off"}  # checkpointed: compile's auto is off


def test_plan_warms_each_system_once_then_alternates(bench: None, tmp_path: Path) -> None:
    speed = importlib.import_module("speed")
    (p,) = speed.plan_rows(_args(only=["1b-full"]), tmp_path)
    assert p.systems == ["plain", "trl", "trl-ds", "dojo"] and p.width == 1
    assert [[(r.system, r.rep, r.steps) for r in w] for w in p.waves] == [
        [("plain", -1, 3), ("trl", -1, 3), ("trl-ds", -1, 3), ("dojo", -1, 3)],
        [("plain", 0, 30), ("trl", 0, 30), ("trl-ds", 0, 30), ("dojo", 0, 30)],
        [("plain", 1, 30), ("trl", 1, 30), ("trl-ds", 1, 30), ("dojo", 1, 30)],
    ]
    (s,) = speed.plan_rows(_args(only=["1b-full"], spread=True, gpu_ids=[0, 1, 2, 3]), tmp_path)
    assert s.width == 4
    slots = [[slot for _, slot in s.assign(w)] for w in range(3)]
    assert slots == [[0, 1, 2, 3], [1, 2, 3, 0], [2, 3, 0, 1]]  # each round, another GPU
    assert s.cost_s() < p.cost_s()


def test_rows_that_do_not_fit_the_limit_are_dropped_in_order(bench: None, tmp_path: Path) -> None:
    speed = importlib.import_module("speed")
    plans = speed.plan_rows(_args(spread=True, gpu_ids=list(range(8))), tmp_path)
    span = speed.simulate(plans, list(range(8)), 560.0, setup_s=40.0)
    kept = [p.name for p in plans if not p.dropped]
    assert kept[:3] == ["1b-full", "1b-lora", "1b-qlora"]  # rows start in the set's order
    assert len(kept) < len(plans) and span <= 560.0
    for p in plans:  # each dropped row says its cost and the seconds that were left
        if p.dropped:
            m = re.fullmatch(r"its estimated (\d+) s do not fit the (\d+) s left", p.dropped)
            assert m and int(m[1]) == round(p.cost_s()) and int(m[1]) > int(m[2]), p.dropped
    one = speed.plan_rows(_args(), tmp_path)
    speed.simulate(one, [0], 560.0)
    dropped = [p.dropped for p in one]
    assert any(dropped)  # one GPU cannot hold every row in one call


def test_the_cost_model_holds_most_recorded_runs(bench: None) -> None:
    """The cost model against every run bench/results/speed-*.json records with its wall time
    (`python bench/speed.py --calibrate`): most runs end within their estimate, so a row is
    dropped only when it would not fit, and the estimate is not far above a typical run, so a
    row that would fit is not dropped. Failing on new results: refit the model's constants."""
    speed = importlib.import_module("speed")
    ratios = [r["wall_s"] / r["est_s"] for r in speed.recorded_runs()]
    assert len(ratios) >= 50
    assert sum(x <= 1.0 for x in ratios) >= 0.8 * len(ratios)  # fitted on about 9 in 10
    assert statistics.median(ratios) >= 0.8


def test_systems_run_in_the_order_given(bench: None, tmp_path: Path) -> None:
    """--systems picks the systems and orders each round (a call's time limit cuts the last
    run first, so the system to keep goes first)."""
    speed = importlib.import_module("speed")
    (p,) = speed.plan_rows(_args(only=["1b-full"], systems=["dojo", "plain", "trl"]), tmp_path)
    assert p.systems == ["dojo", "plain", "trl"]
    assert [r.system for r in p.waves[-1]] == ["dojo", "plain", "trl"]
    # a system the row does not have is left out where the plan shows it, not dropped unseen
    (q,) = speed.plan_rows(_args(only=["1b-full"], systems=["dojo", "dojo --zero 9"]), tmp_path)
    assert q.systems == ["dojo"] and q.skipped["dojo --zero 9"] == "not one of the row's systems"


def test_a_systems_first_run_of_a_row_is_cold(bench: None, tmp_path: Path) -> None:
    """The warm-up pays the cold caches; without a warm-up, each system's first round does."""
    speed = importlib.import_module("speed")
    (p,) = speed.plan_rows(_args(only=["1b-lora"], steps=3), tmp_path)
    warm, first, second = ([r.est_s for r in w] for w in p.waves)
    assert first == second
    assert [w - f for w, f in zip(warm, first, strict=True)] == pytest.approx([speed.COLD_S] * 3)
    (q,) = speed.plan_rows(_args(only=["1b-lora"], steps=3, warmup=False), tmp_path)
    assert [[r.est_s for r in w] for w in q.waves] == [warm, second]


def test_rates_from_a_step_log(bench: None) -> None:
    steps = importlib.import_module("steps")
    marks = [{"step": 1, "t": 10.0, "tokens": 8000}, {"step": 10, "t": 11.8, "tokens": 80000},
             {"step": 20, "t": 13.8, "tokens": 160000}, {"step": 30, "t": 16.8, "tokens": 240000}]  # fmt: skip
    r = steps.rates({"marks": marks})
    assert r["tokens_per_s"] == round(232000 / 6.8) and r["tokens_per_step"] == 8000
    assert r["windows"] == {"2-10": 40000, "11-20": 40000, "21-30": round(80000 / 3.0)}
    assert steps.rates({"marks": marks[:1]})["tokens_per_s"] is None


def test_datasets_are_made_the_same_every_time(bench: None, tmp_path: Path) -> None:
    workload = importlib.import_module("workload")
    a, b = workload.speed_data(tmp_path / "a"), workload.speed_data(tmp_path / "b")
    for name in ("fixed", "mix", "longtail"):
        assert a[name].read_bytes() == b[name].read_bytes(), name
    chats = [json.loads(line) for line in a["mix"].read_text().splitlines()]
    assert len(chats) == 3000 and [m["role"] for m in chats[0]["messages"]] == ["user", "assistant"]
    words = [sum(len(m["content"].split()) for m in json.loads(x)["messages"])
             for x in a["longtail"].read_text().splitlines()]  # fmt: skip
    long = [w * workload.TOKENS_PER_WORD for w in words if w > 1000]
    assert len(long) == 30 and min(long) > 8000 and max(long) < 16384


def test_long_tail_lengths_with_the_bundled_tokenizer(bench: None, tmp_path: Path) -> None:
    """TOKENS_PER_WORD holds for the tokenizer every benchmark model carries."""
    pytest.importorskip("tokenizers")
    workload = importlib.import_module("workload")
    speed = importlib.import_module("speed")
    from dojo.train.tiny import build_tiny_tokenizer

    tok = build_tiny_tokenizer(tmp_path / "tok")
    data = workload.longtail_data(tmp_path)
    t = speed.attention_length(data, 16384, tok)  # token-weighted: the long half of the tokens
    assert 4000 < t < 16384
    from tokenizers import Tokenizer

    enc = Tokenizer.from_file(str(tok / "tokenizer.json"))
    lens = []
    for line in data.read_text().splitlines():
        msgs = json.loads(line)["messages"]
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in msgs)
        lens.append(len(enc.encode(text).ids))
    long = [n for n in lens if n > 4096]
    assert len(long) == 30 and min(long) >= 8192 and max(long) <= 16384


def test_a_preference_row_runs_trl_dpo_script_with_dojo_settings(
    bench: None, tmp_path: Path
) -> None:
    """TRL's DPO script gets dojo's settings of the row under its own argument names (TRL's
    parser, with no unknown argument), the DeepSpeed JSON dojo train writes for it, the data as
    a folder of train.jsonl, and the hook's step record and token count; dojo trains the
    objective without packing."""
    pytest.importorskip("trl")
    speed = importlib.import_module("speed")
    rows = importlib.import_module("rows")
    workload = importlib.import_module("workload")
    from trl.scripts.dpo import make_parser

    case = rows.SPEED_SETS["preference"]["1b-dpo-lora-z2"]
    settings = speed.dojo_settings(case, "dojo")
    assert "--packing" not in settings
    assert settings[settings.index("--objective") + 1] == "dpo"
    model = workload.write_config("l1b", tmp_path)
    data = workload.preference_mix_data(tmp_path)
    ds = speed.dojo_ds_config(case, tmp_path)
    ds.write_text(json.dumps({"zero_optimization": {"stage": 2}, "bf16": {"enabled": "auto"}}))
    argv, env = speed.command(case, "trl-dpo", model, data, tmp_path / "out", 30, 3, tmp_path)
    assert argv[argv.index("--include") + 1] == "localhost:3"
    assert argv[argv.index("--module") + 1] == "trl.scripts.dpo"
    assert env["BENCH_COUNT_TOKENS"] == "1" and "hook" in env["PYTHONPATH"]
    script = argv[argv.index("--module") + 2 :]
    cpu = ["--bf16", "false", "--optim", "adamw_torch"]  # later flags win; no CUDA here
    _, train, model_args, _ = make_parser().parse_args_and_config(
        args=script + cpu, fail_with_unknown_args=True
    )
    assert (train.per_device_train_batch_size, train.max_length, train.max_steps) == (4, 2048, 30)
    assert train.gradient_checkpointing is False and train.learning_rate == 5e-6
    assert train.deepspeed == str(ds) and train.loss_type == ["sigmoid"] and train.beta == 0.1
    assert model_args.use_peft and model_args.lora_r == 16 and model_args.lora_alpha == 32
    assert model_args.lora_target_modules == "all-linear"
    folder = Path(script[script.index("--dataset_name") + 1])
    assert (folder / "train.jsonl").read_text() == data.read_text()


def test_a_kto_row_runs_trls_kto_script_with_dojo_settings(bench: None, tmp_path: Path) -> None:
    """TRL's KTO script parses the same settings under its own names (KTOConfig), with KTO's
    own loss and beta left at TRL's defaults, which are dojo's."""
    pytest.importorskip("trl")
    speed = importlib.import_module("speed")
    rows = importlib.import_module("rows")
    from trl.scripts.kto import make_parser

    case = rows.SPEED_SETS["kto"]["1b-kto-lora-z2"]
    assert case.objective == "kto" and case.systems[0] == "trl-kto"
    ds = speed.dojo_ds_config(case, tmp_path)
    ds.write_text(json.dumps({"zero_optimization": {"stage": 2}, "bf16": {"enabled": "auto"}}))
    (tmp_path / "d.jsonl").write_text('{"prompt": "p", "chosen": "a", "rejected": "b"}\n')
    argv, env = speed.command(case, "trl-kto", tmp_path / "model", tmp_path / "d.jsonl",
                              tmp_path / "out", 30, 1, tmp_path)  # fmt: skip
    assert argv[argv.index("--module") + 1] == "trl.scripts.kto"
    assert env["BENCH_COUNT_TOKENS"] == "1"
    script = argv[argv.index("--module") + 2 :]
    _, train, model_args, _ = make_parser().parse_args_and_config(
        args=[*script, "--bf16", "false", "--optim", "adamw_torch"], fail_with_unknown_args=True
    )
    assert type(train).__name__ == "KTOConfig" and train.loss_type == "kto" and train.beta == 0.1
    assert (train.per_device_train_batch_size, train.max_length, train.max_steps) == (4, 2048, 30)
    assert train.deepspeed == str(ds) and model_args.use_peft and model_args.lora_r == 16


@pytest.mark.parametrize("objective", ["orpo", "simpo"])
def test_an_orpo_or_simpo_row_runs_trls_trainer_with_dojo_settings(
    bench: None, tmp_path: Path, objective: str
) -> None:
    """bench/trl_pref.py gets the row's settings and the DeepSpeed JSON dojo train writes for
    it, and builds TRL's ORPOConfig, or CPOConfig with SimPO's loss and no NLL term, from them;
    the hook counts its tokens."""
    pytest.importorskip("trl")
    speed = importlib.import_module("speed")
    rows = importlib.import_module("rows")
    trl_pref = importlib.import_module("trl_pref")
    case = rows.SPEED_SETS["orpo-simpo"][f"1b-{objective}-lora-z2"]
    assert case.objective == objective and case.systems[0] == "trl-pref"
    ds = speed.dojo_ds_config(case, tmp_path)
    ds.write_text(json.dumps({"zero_optimization": {"stage": 2}, "bf16": {"enabled": "auto"}}))
    argv, env = speed.command(case, "trl-pref", tmp_path / "model", tmp_path / "d.jsonl",
                              tmp_path / "out", 30, 2, tmp_path)  # fmt: skip
    assert argv[argv.index("--include") + 1] == "localhost:2"
    assert env["BENCH_COUNT_TOKENS"] == "1" and "hook" in env["PYTHONPATH"]
    script = argv[[i for i, a in enumerate(argv) if a.endswith("trl_pref.py")][0] + 1 :]
    a = trl_pref.parser().parse_args([*script, "--cpu"])
    cfg = trl_pref.config(a)
    assert (cfg.per_device_train_batch_size, cfg.max_length, cfg.max_steps) == (4, 2048, 30)
    assert cfg.learning_rate == 5e-6 and cfg.beta == 0.1 and cfg.deepspeed == str(ds)
    assert cfg.gradient_checkpointing is False and a.method == "lora" and cfg.logging_steps == 10
    if objective == "simpo":
        assert (cfg.loss_type, cfg.cpo_alpha, cfg.simpo_gamma) == ("simpo", 0.0, 0.5)
    else:
        assert type(cfg).__name__ == "ORPOConfig"


def test_preference_data_lengths(bench: None, tmp_path: Path) -> None:
    """Memory pairs: every sequence (prompt + either answer) runs past seq-len, so dojo cuts each
    to exactly seq-len; the speed mix: prompt + longer answer within the max length, so (almost)
    nothing is cut, by the bundled tokenizer."""
    pytest.importorskip("tokenizers")  # the train extra's
    from tokenizers import Tokenizer

    from dojo.train.tiny import build_tiny_tokenizer

    workload = importlib.import_module("workload")
    tok = Tokenizer.from_file(str(build_tiny_tokenizer(tmp_path / "tok") / "tokenizer.json"))

    def n(msgs: list[dict[str, str]]) -> int:
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in msgs)
        return len(tok.encode(text).ids)

    fixed = workload.preference_fixed_data(tmp_path, 2048)
    for line in fixed.read_text().splitlines():
        pair = json.loads(line)
        assert n(pair["prompt"]) < 400
        assert min(n(pair["prompt"] + pair[s]) for s in ("chosen", "rejected")) > 2048
    mix = workload.preference_mix_data(tmp_path)
    longest = [max(n(p["prompt"] + p[s]) for s in ("chosen", "rejected"))
               for p in map(json.loads, mix.read_text().splitlines())]  # fmt: skip
    assert len(longest) == 2000 and sum(x > 2048 for x in longest) <= 10
    assert 300 < sorted(longest)[1000] < 900  # a realistic median pair, not the cap


def test_kto_unpaired_rows_give_one_sequence_each(bench: None, tmp_path: Path) -> None:
    """KTO's unpaired rows (prompt, completion, label): one sequence a row, the same sequences as
    the pairs they come from, so the same attention length."""
    pytest.importorskip("tokenizers")
    workload = importlib.import_module("workload")
    speed = importlib.import_module("speed")
    from dojo.train.tiny import build_tiny_tokenizer

    pairs = workload.preference_fixed_data(tmp_path, 64, n=3)
    rows = workload.unpaired(pairs, tmp_path / "kto.jsonl")
    row = json.loads(rows.read_text().splitlines()[0])
    assert set(row) == {"prompt", "completion", "label"}
    assert speed.sequences(row) == [row["prompt"] + row["completion"]]
    tok = build_tiny_tokenizer(tmp_path / "tok")
    assert speed.attention_length(rows, 64, tok) == speed.attention_length(pairs, 64, tok)
