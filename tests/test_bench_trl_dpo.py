"""The preference speed sets' systems on the CPU, on a tiny random Llama: TRL's own DPO script
(trl/scripts/dpo.py, launched by the DeepSpeed launcher with the DeepSpeed JSON `dojo train`
writes for the row) and `dojo train --objective dpo`, TRL's ORPO and CPO trainers
(bench/trl_pref.py) and `dojo train --objective orpo|simpo`, each with the argv bench/speed.py builds,
train 3 steps and write bench/steps.py's record; on pairs cut to exactly seq-len a sequence both
count the same real tokens a step. Only what has no CPU form is changed: bf16, the fused AdamW
(TRL's side) and --gpus (dojo's: --nproc 1).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.examples import save_bench_llama

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"

pytestmark = pytest.mark.slow

MB, SEQ, STEPS = 2, 256, 3
CPU_TRL = ["--bf16", "false", "--optim", "adamw_torch", "--dtype", "float32"]
"""Later flags win in TRL's parser: what the GPU run's argv says, as the CPU can run it."""


@pytest.fixture(scope="module")
def bench_modules() -> object:
    sys.path.insert(0, str(BENCH))
    try:
        import rows
        import speed
        import workload

        yield rows, speed, workload
    finally:
        sys.path.remove(str(BENCH))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory, bench_modules: object) -> dict[str, Path]:
    """A 2-layer Llama (hidden 64) with random weights, dojo's tiny tokenizer, the bench data:
    pairs longer than SEQ (each sequence truncated to SEQ), the preference mix's first 64, and
    those as KTO's unpaired rows."""
    pytest.importorskip("torch")
    pytest.importorskip("trl")
    pytest.importorskip("deepspeed")
    _, _, workload = bench_modules  # type: ignore[misc]
    root = tmp_path_factory.mktemp("bench-trl-dpo")
    save_bench_llama(root / "model-l1b")
    fixed = workload.preference_fixed_data(root / "data", SEQ)
    mix = root / "data" / "pref-mix-64.jsonl"
    full = workload.preference_mix_data(root / "data")
    mix.write_text("".join(full.read_text().splitlines(keepends=True)[:64]))
    kto = workload.unpaired(mix, root / "data" / "kto-mix-128.jsonl")
    return {"root": root, "model": root / "model-l1b", "fixed": fixed, "mix": mix, "kto": kto}


def _tokens(bench_modules: object, tiny: dict[str, Path], method: str, zero: int,
            data: str, seq: int = SEQ, objective: str = "dpo") -> dict[str, list[int]]:  # fmt: skip
    rows, speed, _ = bench_modules  # type: ignore[misc]
    root = tiny["root"]
    ref = {"dpo": "trl-dpo", "kto": "trl-kto"}.get(objective, "trl-pref")
    case = rows.Case("l1b", method, zero, MB, seq, False, "pref-mix", (ref, "dojo"), objective)
    speed.write_dojo_ds_configs([case], {"l1b": tiny["model"]}, {"pref-mix": tiny[data]}, root)
    counts = {}
    for system in case.systems:
        out = root / f"run-{system}-{objective}-{method}-{data}"
        argv, env = speed.command(case, system, tiny["model"], tiny[data], out, STEPS, 0, root)
        if system in ("trl-dpo", "trl-kto"):
            argv += CPU_TRL
        elif system == "trl-pref":
            argv.append("--cpu")
        else:
            i = argv.index("--gpus")
            argv[i : i + 2] = ["--nproc", "1"]
        log = root / f"steps-{system}-{objective}-{method}-{data}.json"
        env = {**os.environ, **env, "BENCH_STEPLOG": str(log), "DS_ACCELERATOR": "cpu",
               "LOCAL_SIZE": "1", "OMP_NUM_THREADS": "1"}  # fmt: skip
        env["PYTHONPATH"] = f"{env['PYTHONPATH']}:{REPO}"
        env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"  # DS's CPU op
        p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900, cwd=REPO)
        assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
        marks = json.loads(log.read_text())["marks"]
        assert [m["step"] for m in marks] == [1, STEPS]
        counts[system] = [m["tokens"] for m in marks]
    return counts


def test_trl_dpo_script_and_dojo_count_the_same_tokens_lora_zero2(
    bench_modules: object, tiny: dict[str, Path]
) -> None:
    """Every sequence (prompt + chosen, prompt + rejected) cut to SEQ: 2 x MB x SEQ a step."""
    counts = _tokens(bench_modules, tiny, "lora", 2, "fixed")
    assert counts["trl-dpo"] == counts["dojo"] == [2 * MB * SEQ, STEPS * 2 * MB * SEQ]


def test_trl_dpo_script_full_zero3_on_the_mix(bench_modules: object, tiny: dict[str, Path]) -> None:
    """Full fine-tuning at ZeRO-3 (TRL loads its own reference copy, dojo hands it one) on the
    mix at the set's max length (no pair truncated): the same pairs in the same order; TRL's
    template keeps the newline after each answer's <|im_end|>, one token a sequence more than
    dojo's."""
    counts = _tokens(bench_modules, tiny, "full", 3, "mix", seq=2048)
    per_step = 2 * MB
    assert counts["trl-dpo"][0] == counts["dojo"][0] + per_step
    assert counts["trl-dpo"][1] == counts["dojo"][1] + STEPS * per_step


@pytest.mark.parametrize("objective", ["orpo", "simpo"])
def test_trl_orpo_and_cpo_trainers_and_dojo_count_the_same_tokens(
    bench_modules: object, tiny: dict[str, Path], objective: str
) -> None:
    """bench/trl_pref.py (TRL's ORPOTrainer / CPOTrainer as its example scripts run them) and
    dojo on the preference mix at the set's max length: both train, and count the same pairs'
    tokens but for three TRL adds to each sequence: the newline its template keeps after each
    answer's <|im_end|>, and the tokenizer's BOS and EOS, which its tokenize_row adds
    (add_bos_token_if_needed, add_eos_token_if_needed) where dojo's ChatML has neither."""
    counts = _tokens(bench_modules, tiny, "lora", 2, "mix", seq=2048, objective=objective)
    per_step = 3 * 2 * MB
    assert counts["trl-pref"][0] == counts["dojo"][0] + per_step, counts
    assert counts["trl-pref"][1] == counts["dojo"][1] + STEPS * per_step, counts


def test_trl_kto_script_and_dojo_count_the_same_rows(
    bench_modules: object, tiny: dict[str, Path]
) -> None:
    """TRL's KTO script (trl/scripts/kto.py) and dojo on the same unpaired rows, in order (both
    read them sequentially: TRL's KTOTrainer's sampler): the same rows' tokens a step (TRL's
    counted by the hook from its rows' masks, the KL term's mismatched pairs left out), but for
    the newline TRL's template keeps after each answer's <|im_end|>, one token a row."""
    counts = _tokens(bench_modules, tiny, "lora", 2, "kto", seq=2048, objective="kto")
    assert counts["trl-kto"] == [counts["dojo"][0] + MB, counts["dojo"][1] + STEPS * MB], counts
