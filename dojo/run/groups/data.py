"""What the model reads: training and held-out data, how rows become samples."""

from dataclasses import dataclass
from typing import Any, Literal

from dojo.run.field import PLAN, opt

MAX_SEQ_LEN = 1 << 20
"""1M tokens: beyond every released context window; a larger value is a typo'd extra digit."""


@dataclass(frozen=True)
class DataOptions:
    data: tuple[str, ...] = opt(
        (),
        "jsonl/json/parquet/csv file, folder, or Hub dataset OWNER/NAME[:SUBSET][@SPLIT]; repeat "
        "for several, =WEIGHT to mix (a.jsonl=0.7) [default: bundled demo chats; demo "
        "preference pairs for a preference --objective]",
        metavar="PATH",
    )
    data_columns: tuple[str, ...] = opt(
        (),
        "Rename a data column to the one dojo reads: TARGET=SOURCE (messages=conversation); "
        "repeat, or a YAML mapping",
        example="messages=conversation",
        metavar="TARGET=SOURCE",
    )
    data_ratios: tuple[float, ...] = opt(
        (),
        "Mixing ratios, one per --data in order (0.7,0.3); same as --data a=0.7 --data b=0.3",
        example="0.7,0.3",
        metavar="R1,R2,...",
    )
    seq_len: int = opt(
        2048,
        "Max tokens per sample (prompt + response)",
        "a common SFT context; rows are padded only to the longest in the batch",
        lo=8,
        hi=MAX_SEQ_LEN,
        example="4096",
        commands=PLAN,
    )
    overflow: Literal["truncate", "drop"] = opt(
        "truncate", "Samples over --seq-len: truncate | drop"
    )
    packing: bool = opt(
        False,
        "Pack short samples into full --seq-len rows (no cross-sample attention)",
        "samples stay apart; packing changes how many optimizer steps an epoch has",
        commands=PLAN,
    )
    eval_data: tuple[str, ...] = opt(
        (),
        "Held-out data for the eval loss, same formats as --data; repeat for several",
        metavar="PATH",
    )
    eval_split: float | None = opt(
        None,
        "Hold out this fraction of the training rows for the eval loss (seeded by --seed)",
        lo=1e-6,
        hi=0.5,
        example="0.05",
    )

    @property
    def evaluates(self) -> bool:
        return bool(self.eval_data) or self.eval_split is not None


def context_line(data: DataOptions, spec: Any) -> str | None:
    """--seq-len past the context the model was made for: trained as asked (extending a
    model's context is a fine-tune of its own), but said, since positions past it are new to
    the model unless its config.json scales RoPE to cover them."""
    made_for = getattr(spec, "max_positions", 0)
    if not made_for or data.seq_len <= made_for:
        return None
    return (f"seq len {data.seq_len}: past the model's max_position_embeddings {made_for} "
            "(config.json); trained as asked, positions beyond it are new to the model unless "
            "its rope_scaling covers them")  # fmt: skip
