"""Tokenize once per machine and data: local rank 0 builds, every rank and the next run reuse.

Before, every rank read, rendered and tokenized every row itself (200k rows: ~115 s and ~1.2 GiB
of Python lists per process on a 2-core box). Now:

1. every rank computes the same key: a SHA-256 of the data (each file's path, size and mtime; a
   Hub dataset's name, subset, split and cached revision), --data-columns, the mixing weights,
   the seed, the eval split/data, the tokenizer (its tokenizer.json text and special ids), the
   chat template (source and tokens), --seq-len, --overflow and packing;
2. ``CACHE/<key>/info.json`` exists: every rank memory-maps the Arrow files (no work, no copy);
3. otherwise local rank 0 reads the rows, mixes the sources (``datasets.interleave_datasets``,
   seeded, stopping strategy "first_exhausted": see MIX_STOP), holds out the eval split,
   tokenizes through ``datasets.Dataset.map(..., cache_file_name=...)`` (and packs in a second
   map), writes everything into ``CACHE/<key>.tmp-<pid>`` and renames it into place (atomic:
   a reader sees the whole cache or none); the other ranks poll for ``info.json`` (a file
   barrier: it needs no process group, and works per node). A rank-0 failure leaves
   ``RUN_DIR/.data-failed-<launcher pid>``, and the waiting ranks exit instead of waiting forever.

CACHE is $DOJO_DATA_CACHE, else ``<datasets' cache>/dojo-tokenized``.
"""

import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from dojo.train import sources

FORMAT = 1
"""Bump when the cached columns or their meaning change: old caches stop matching."""
MIX_STOP = "first_exhausted"
"""Mixing stops when the first source runs out: the mix keeps the given ratios and no row is
repeated within an epoch. "all_exhausted" would oversample every smaller source until the
largest is used up: a 0.9/0.1 mix of equal sizes would train the small source ~9 times per
epoch, silently. Use --epochs for more passes."""
_POLL_S = 0.5
FAILED = ".data-failed"


def cache_root() -> Path:
    if os.environ.get("DOJO_DATA_CACHE"):
        return Path(os.environ["DOJO_DATA_CACHE"]).expanduser()
    import datasets

    return Path(datasets.config.HF_DATASETS_CACHE) / "dojo-tokenized"


def _hub_revision(name: str) -> str:
    from dojo.train.data_check import cached_dataset

    where = cached_dataset(name)
    if where is None:
        return "uncached"
    ref = where.parent / "refs" / "main"
    if ref.is_file():
        return ref.read_text().strip()
    return ",".join(sorted(f"{p.name}:{p.stat().st_mtime_ns}" for p in where.iterdir()))


def _describe(src: sources.Source) -> list[Any]:
    if src.kind == "hub":
        return [src.name, src.subset, src.split, src.weight, _hub_revision(src.name)]
    files = []
    for f in src.files:
        st = Path(f).stat()
        files.append([str(Path(f).resolve()), st.st_size, st.st_mtime_ns])
    return [files, src.weight]


def fingerprint(job: Any, tokenizer: Any, template: Any, packed: bool) -> str:
    run = job.run
    tok = getattr(tokenizer, "backend_tokenizer", None)
    tok_text = tok.to_str() if tok is not None else repr(tokenizer)
    parts = {
        "format": FORMAT,
        "data": [_describe(s) for s in sources.parse_all(list(job.data), run.data.data_ratios)],
        "eval_data": [_describe(s) for s in sources.parse_all(list(run.data.eval_data), ())],
        "eval_split": run.data.eval_split,
        "seed": run.loop.seed,
        "columns": sorted(sources.parse_columns(run.data.data_columns).items()),
        "tokenizer": hashlib.sha256(tok_text.encode()).hexdigest(),
        "special": [tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id],
        "template": [template.source, template.bos_token, template.eos_token],
        "seq_len": run.data.seq_len,
        "overflow": run.data.overflow,
        "packed": packed,
        "objective": run.objective.objective,
    }
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:24]


def load_or_build(
    job: Any, tokenizer: Any, template: Any, packed: bool
) -> tuple[Any, Any, dict[str, Any]]:
    """(train Dataset, eval Dataset or None, data report dict), tokenized once (module doc)."""
    key = fingerprint(job, tokenizer, template, packed)
    final = cache_root() / key
    rank = os.environ.get("RANK", "0")
    # The local ranks of one launch share their parent (DeepSpeed's launch process): a marker
    # named after it cannot be mistaken for one left by an earlier launch into the same folder.
    failed = Path(job.run_dir) / f"{FAILED}-{os.getppid()}"
    t0, how, waited = time.monotonic(), "read the tokenized cache", ""
    if not (final / "info.json").is_file():
        if int(os.environ.get("LOCAL_RANK", "0")) == 0:
            try:
                _build(job, tokenizer, template, packed, final)
            except BaseException:
                failed.touch()  # the waiting ranks stop instead of waiting for ever
                raise
            how = "tokenized the data once into"
        else:
            _wait(final / "info.json", failed)
            waited = ", built by local rank 0"
    train, evals, info = _load(final)
    took = time.monotonic() - t0
    sys.stderr.write(f"data: rank {rank} {how} {final} ({took:.1f} s{waited})\n")
    sys.stderr.flush()
    return train, evals, info


def _wait(ready: Path, failed: Path) -> None:
    while not ready.is_file():
        if failed.exists():
            raise SystemExit(1)  # local rank 0 printed why
        time.sleep(_POLL_S)


def _load(final: Path) -> tuple[Any, Any, dict[str, Any]]:
    import datasets

    info: dict[str, Any] = json.loads((final / "info.json").read_text())
    train = datasets.Dataset.from_file(str(final / "train.arrow"))
    evals = None
    if (final / "eval.arrow").is_file():
        evals = datasets.Dataset.from_file(str(final / "eval.arrow"))
    return train, evals, info


def _build(job: Any, tokenizer: Any, template: Any, packed: bool, final: Path) -> None:
    from dojo.train.worker.data import split_rows
    from dojo.train.worker.examples import load_rows

    run = job.run
    columns = sources.parse_columns(run.data.data_columns)
    srcs = sources.parse_all(list(job.data), run.data.data_ratios)
    objective = run.objective.objective
    rows = _mix([(s, load_rows(_refs(s), columns, objective)) for s in srcs], run.loop.seed)
    eval_rows: Any = None
    if run.data.eval_split is not None:
        rows, eval_rows = split_rows(rows, run.data.eval_split, run.loop.seed)
    elif run.data.eval_data:
        eval_rows = load_rows(list(run.data.eval_data), columns, objective)
    tmp = final.parent / f"{final.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    info = _tokenize(rows, job, tokenizer, template, packed, tmp / "train.arrow")
    if eval_rows is not None:
        info["eval"] = _tokenize(eval_rows, job, tokenizer, template, packed, tmp / "eval.arrow")
    info["cache"] = str(final)
    (tmp / "info.json").write_text(json.dumps(info))  # last: its presence means "complete"
    try:
        tmp.rename(final)
    except OSError:  # another node's rank 0 on a shared disk finished first: same content
        shutil.rmtree(tmp, ignore_errors=True)


def _refs(src: sources.Source) -> list[str]:
    return list(src.files) if src.kind == "file" else [src.key()]


def _mix(parts: list[tuple[sources.Source, Any]], seed: int) -> Any:
    """One RowsReport: sources one after the other, or interleaved by their weights."""
    from dojo.errors import DataError
    from dojo.train.rows import RowsReport

    out = RowsReport()
    for _, rep in parts:
        out.bad.extend(rep.bad)
        out.passthrough.extend(rep.passthrough)
        for k, v in rep.format_counts.items():
            out.format_counts[k] = out.format_counts.get(k, 0) + v
    if parts[0][0].weight is None:
        for _, rep in parts:
            out.rows.extend(rep.rows)
        return out
    import datasets

    empty = [s.spec for s, rep in parts if not rep.rows]
    if empty:
        raise DataError(f"--data {empty[0]}: no valid row to mix", hint="check the source")
    index = [
        datasets.Dataset.from_dict({"s": [k] * len(rep.rows), "i": list(range(len(rep.rows)))})
        for k, (_, rep) in enumerate(parts)
    ]
    mixed = datasets.interleave_datasets(
        index,
        probabilities=[s.weight or 0.0 for s, _ in parts],
        seed=seed,
        stopping_strategy=MIX_STOP,
    )
    out.rows.extend(parts[s][1].rows[i] for s, i in zip(mixed["s"], mixed["i"], strict=True))
    return out


def _encode(example: Any) -> str:
    import dataclasses

    from dojo.chat.conversation import PlainText
    from dojo.train.preference import Pair

    if isinstance(example, PlainText):
        return json.dumps({"p": [example.prompt, example.completion]})
    if dataclasses.is_dataclass(example):  # a preference row
        kind = "pair" if isinstance(example, Pair) else "unpaired"
        return json.dumps({kind: dataclasses.asdict(example)})  # type: ignore[arg-type]
    return json.dumps({"m": example})


def _decode(text: str) -> Any:
    from dojo.chat.conversation import PlainText
    from dojo.train.preference import Pair, Unpaired

    d = json.loads(text)
    if "pair" in d:
        return Pair(**d["pair"])
    if "unpaired" in d:
        return Unpaired(**d["unpaired"])
    return PlainText(*d["p"]) if "p" in d else d["m"]


def _tokenize(
    rows: Any, job: Any, tokenizer: Any, template: Any, packed: bool, path: Path
) -> dict[str, Any]:
    import datasets

    from dojo.train.worker import examples as ex_mod
    from dojo.train.worker import packing

    run = job.run
    report = ex_mod.DataReport()
    pairs = rows.rows if hasattr(rows, "rows") else rows  # held-out rows come as a plain list
    for source, reason in getattr(rows, "bad", []):
        report.skip(source, reason)
    report.rows = report.bad

    def tokenize(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        pairs = [(s, _decode(r)) for s, r in zip(batch["source"], batch["row"], strict=True)]
        if run.objective.preference:
            from dojo.train.worker import preference

            exs, rep = preference.build(
                pairs, tokenizer, template, seq_len=run.data.seq_len, overflow=run.data.overflow,
                objective=run.objective.objective,
            )  # fmt: skip
            _merge(report, rep)
            return {k: [e[k] for e in exs] for k in preference.columns(run.objective.objective)}
        exs, rep = ex_mod.build_examples(
            pairs, tokenizer, template, seq_len=run.data.seq_len, overflow=run.data.overflow
        )
        _merge(report, rep)
        return {"input_ids": [e["input_ids"] for e in exs], "labels": [e["labels"] for e in exs]}

    raw = datasets.Dataset.from_dict(
        {"source": [s for s, _ in pairs], "row": [_encode(m) for _, m in pairs]}
    )
    target = path.with_name(path.stem + "-unpacked.arrow") if packed else path
    ds = raw.map(
        tokenize, batched=True, batch_size=2048, remove_columns=["source", "row"],
        cache_file_name=str(target), new_fingerprint=path.stem, load_from_cache_file=False,
        desc="tokenizing",
    )  # fmt: skip
    if packed and len(ds):

        def pack(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
            pairs = zip(batch["input_ids"], batch["labels"], strict=True)
            exs = [{"input_ids": a, "labels": b} for a, b in pairs]
            rows_ = packing.pack(exs, run.data.seq_len)
            return {k: [r[k] for r in rows_] for k in ("input_ids", "labels", "position_ids")}

        ds.map(
            pack, batched=True, batch_size=None, cache_file_name=str(path),
            new_fingerprint=path.stem + "-packed", load_from_cache_file=False,
            remove_columns=["input_ids", "labels"],
        )  # fmt: skip
        target.unlink()
    elif packed:
        target.rename(path)  # nothing to pack: the run stops on "no trainable example"
    return report.to_dict()


def _merge(total: Any, part: Any) -> None:
    for name in ("rows", "used", "truncated", "dropped", "tokens", "trained_tokens"):
        setattr(total, name, getattr(total, name) + getattr(part, name))
    total.bad += part.bad
    total.bad_rows.extend(part.bad_rows[: max(0, 20 - len(total.bad_rows))])
