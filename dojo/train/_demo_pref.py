"""Generate templates/data/demo_preference.jsonl: the bundled preference pairs of the tiny
default run (``dojo train --objective dpo`` with no --data).

    python -m dojo.train._demo_pref            # rewrite the bundled file (--check: compare only)

Deterministic, stdlib only. Each row asks one of the demo chats' tasks (dojo.train._demo_data)
in TRL's conversational preference format: the chosen answer is right, the rejected one answers
another question of the same kind (the right shape, the wrong content) or declines. A test
checks the committed file equals this script's output.
"""

import random
from pathlib import Path
from typing import Any

from dojo.train._demo_data import TASKS, render_jsonl, write_or_check

SEED = 4321
N_PAIRS = 256
"""One epoch is 32 steps at micro-batch 4 on 2 ranks."""
DECLINE = "I don't know."


def make(n: int = N_PAIRS, seed: int = SEED) -> list[dict[str, Any]]:
    """``n`` rows of {"prompt", "chosen", "rejected"}, each a list of messages."""
    r = random.Random(seed)
    out: list[dict[str, Any]] = []
    while len(out) < n:
        task = r.choice(TASKS)
        question, answer = task(r)
        wrong = DECLINE if r.random() < 0.3 else task(r)[1]
        if wrong == answer:
            continue
        out.append({
            "prompt": [{"role": "user", "content": question}],
            "chosen": [{"role": "assistant", "content": answer}],
            "rejected": [{"role": "assistant", "content": wrong}],
        })  # fmt: skip
    return out


def bundled_path() -> Path:
    from dojo.paths import templates_dir

    return templates_dir() / "data" / "demo_preference.jsonl"


def main(argv: list[str] | None = None) -> int:
    return write_or_check(render_jsonl(make()), bundled_path(), "preference pairs", argv)


if __name__ == "__main__":
    raise SystemExit(main())
