"""Generate templates/data/demo_chat.jsonl: the bundled chat dataset of the tiny default run.

    python -m dojo.train._demo_data            # rewrite the bundled file (--check: compare only)

Deterministic (``random.Random(SEED)``), stdlib only. The tasks are small and rule-based
(arithmetic, sorting, string edits, counting, a few fixed facts) so that a tiny random model
learns them visibly within a couple of hundred CPU steps: first the chat format and the reply
shapes (the loss drops fast), then the easy tasks themselves (it keeps falling). A test checks
the committed file equals this script's output.
"""

import json
import random
import sys
from pathlib import Path
from typing import Any

SEED = 1234
N_CONVERSATIONS = 400
"""A few hundred: one epoch is ~100 steps at micro-batch 2 on 2 ranks."""
SYSTEM = "You are a helpful assistant. Answer briefly."
WORDS = [
    "apple",
    "banana",
    "cherry",
    "grape",
    "lemon",
    "mango",
    "melon",
    "peach",
    "pear",
    "plum",
    "river",
    "mountain",
    "forest",
    "desert",
    "ocean",
    "island",
    "valley",
    "canyon",
    "meadow",
    "glacier",
    "red",
    "blue",
    "green",
    "yellow",
    "purple",
    "orange",
    "black",
    "white",
    "silver",
    "golden",
]
COLOURS = {"sky": "blue", "grass": "green", "snow": "white", "coal": "black", "sun": "yellow"}


def _arith(r: random.Random) -> tuple[str, str]:
    a, b = r.randint(0, 99), r.randint(0, 99)
    if r.random() < 0.5:
        return f"What is {a} + {b}?", f"{a} + {b} = {a + b}."
    a, b = max(a, b), min(a, b)
    return f"What is {a} - {b}?", f"{a} - {b} = {a - b}."


def _sort(r: random.Random) -> tuple[str, str]:
    nums = [r.randint(0, 50) for _ in range(r.randint(3, 6))]
    order = r.choice(("ascending", "descending"))
    done = sorted(nums, reverse=order == "descending")
    return (
        f"Sort in {order} order: {' '.join(map(str, nums))}",
        " ".join(map(str, done)),
    )


def _upper(r: random.Random) -> tuple[str, str]:
    words = r.sample(WORDS, r.randint(2, 4))
    return f"Write in capital letters: {' '.join(words)}", " ".join(words).upper()


def _count(r: random.Random) -> tuple[str, str]:
    words = r.sample(WORDS, r.randint(1, 7))
    n = len(words)
    return f"How many words are in: {' '.join(words)}", f"There are {n} words."


def _first_last(r: random.Random) -> tuple[str, str]:
    words = r.sample(WORDS, r.randint(3, 6))
    which = r.choice(("first", "last"))
    return (
        f"What is the {which} word of: {' '.join(words)}",
        f"The {which} word is {words[0] if which == 'first' else words[-1]}.",
    )


def _colour(r: random.Random) -> tuple[str, str]:
    thing = r.choice(sorted(COLOURS))
    return f"What colour is the {thing}?", f"The {thing} is {COLOURS[thing]}."


TASKS = (_arith, _sort, _upper, _count, _first_last, _colour)


def make(n: int = N_CONVERSATIONS, seed: int = SEED) -> list[dict[str, Any]]:
    """``n`` conversations in OpenAI messages format; 1 to 3 turns, a system prompt in some."""
    r = random.Random(seed)
    out = []
    for _ in range(n):
        messages: list[dict[str, str]] = []
        if r.random() < 0.3:
            messages.append({"role": "system", "content": SYSTEM})
        for _turn in range(r.choice((1, 1, 2, 3))):
            question, answer = r.choice(TASKS)(r)
            messages += [
                {"role": "user", "content": question},
                {"role": "assistant", "content": answer},
            ]
        out.append({"messages": messages})
    return out


def render_jsonl(records: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(rec, ensure_ascii=False) + "\n" for rec in records)


def bundled_path() -> Path:
    from dojo.paths import templates_dir

    return templates_dir() / "data" / "demo_chat.jsonl"


def write_or_check(text: str, path: Path, what: str, argv: list[str] | None) -> int:
    """A bundled generator's command line: rewrite ``path`` with ``text``, or with --check only
    say whether it differs (exit 1)."""
    args = sys.argv[1:] if argv is None else argv
    if "--check" in args:
        same = path.is_file() and path.read_text(encoding="utf-8") == text
        print(f"{path}: {'up to date' if same else 'differs from the generator'}", file=sys.stderr)
        return 0 if same else 1
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")  # the repo's own bundled file: always regenerated
    print(f"wrote {len(text.splitlines())} {what} to {path}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    return write_or_check(render_jsonl(make()), bundled_path(), "conversations", argv)


if __name__ == "__main__":
    raise SystemExit(main())
