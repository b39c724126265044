"""Data the launcher cannot read row by row itself, checked BEFORE launch (dojo.train.rows calls these).

Without these checks the failure came after launch, once per rank, as a traceback from
`datasets`: a text file named ``.parquet``, a Parquet file without a conversation column, a Hub
dataset id on a machine that cannot download it, a CSV file. Stdlib, plus huggingface_hub for
the Hub token; pyarrow is used when importable (it comes with `datasets`), and the Hub is asked
at most once (HTTP HEAD-like GET of the dataset's API page, with the token huggingface_hub would
send), never downloaded from. Nothing here writes a file.
"""

import json
import os
import re
from pathlib import Path
from typing import Any

from dojo import hub
from dojo.errors import DataError
from dojo.hub import DEFAULT_ENDPOINT

PARQUET_MAGIC = b"PAR1"
SAMPLE_ROWS = 64
"""Parquet rows validated before launch: enough to catch a wrong column layout, cheap to read."""
_HUB_TIMEOUT_S = 10.0
_FORMAT_COLUMNS = (
    ("messages",), ("conversations",), ("instruction", "output"), ("prompt", "completion"),
    ("text",), ("chosen", "rejected"),
)  # fmt: skip
_FORMATS_HINT = (
    "it needs a messages column (OpenAI), conversations (ShareGPT), instruction+output (Alpaca), "
    "prompt+completion or text (preference rows: chosen+rejected); map yours with "
    "--data-columns messages=COLUMN"
)
CSV_HINT = (
    'dojo reads JSON lines; convert it, e.g. python -c "import csv,json,sys; '
    '[print(json.dumps(r)) for r in csv.DictReader(open(sys.argv[1]))]" data.csv > data.jsonl '
    "(columns instruction,input,output make Alpaca rows)"
)


def looks_like_csv(first_line: str) -> bool:
    """A header line of comma/tab/semicolon separated names, not JSON."""
    s = first_line.strip()
    if not s or s[0] in '{["' or s[0].isdigit():
        return False
    for sep in (",", "\t", ";"):
        cells = [c.strip().strip('"') for c in s.split(sep)]
        if len(cells) >= 2 and all(re.fullmatch(r"[\w .-]{1,64}", c) for c in cells):
            return True
    return False


# ---- Parquet -------------------------------------------------------------------------------


def check_csv(
    path: Path, ref: str, validate: Any = None, cols: Any = None, count: Any = None
) -> list[str]:
    """Header names a format's columns; >= 1 valid row among the first SAMPLE_ROWS. Without
    ``count`` it reads only those rows (the worker reads the file with `datasets`' csv
    builder); ``count(source, record)`` is then called for every row, streamed (the
    preflight's tally, so "valid rows" counts a CSV file's rows too). Returns the header."""
    import csv
    import itertools

    _refuse_wide(path, ref)
    try:
        with path.open(newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            rows = ((reader.line_num, dict(r)) for r in reader)
            sample = list(itertools.islice(rows, SAMPLE_ROWS))
            names = list(reader.fieldnames or [])
            _check_table(ref, "CSV", names, [r for _, r in sample], validate, cols)
            if count is not None:
                for line, record in itertools.chain(sample, rows):
                    count(f"{ref}:{line}", record)
    except (UnicodeDecodeError, csv.Error) as e:
        raise DataError(
            f"--data {ref}: cannot read the CSV file ({e})",
            hint="save it as UTF-8 CSV with a header",
        ) from None
    return names


def _refuse_wide(path: Path, ref: str) -> None:
    """UTF-16 is what Excel's "Unicode text" writes: say so, not "cannot decode byte 0xff"."""
    from dojo.safe_load import wide_encoding, wide_hint

    with path.open("rb") as f:
        wide = wide_encoding(f.read(4096))
    if wide is not None:
        raise DataError(f"--data {ref} is {wide} text, not UTF-8", hint=wide_hint(wide))


def _check_table(
    ref: str, what: str, names: list[str], records: list[Any], validate: Any, cols: Any = None
) -> None:
    mapped = [(cols or {}).get(n, n) for n in names]
    if not any(all(c in mapped for c in need) for need in _FORMAT_COLUMNS):
        raise DataError(
            f"--data {ref}: {what} columns {', '.join(names) or '(none)'} hold no known format",
            hint=_FORMATS_HINT,
        )
    if not records:
        raise DataError(f"--data {ref}: the {what} file has no rows")
    if validate is not None:
        _first_valid(records, ref, validate)


def check_parquet(
    path: Path, ref: str, validate: Any = None, cols: Any = None, count: Any = None
) -> list[str]:
    """PAR1 at both ends; with pyarrow: a format's columns (after ``cols`` {source: target}
    renames) and >= 1 valid row among the first SAMPLE_ROWS (``validate(record)`` raises
    DojoError for a bad one); ``count(source, record)`` as in check_csv, batch by batch.
    Returns the column names (every name ``cols`` maps when pyarrow is missing: unchecked)."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(4)
        f.seek(max(0, size - 4))
        tail = f.read(4)
    if head != PARQUET_MAGIC:
        what = _sniff_text(path)
        raise DataError(
            f"--data {ref} is not a Parquet file (no PAR1 magic at its start{what})",
            hint="rename it to what it holds (.jsonl for JSON lines), or export the Parquet again",
        )
    if size < 12 or tail != PARQUET_MAGIC:
        raise DataError(
            f"--data {ref}: the Parquet file is truncated ({size} bytes, no PAR1 footer at its end)",
            hint="the copy or download stopped early: fetch or export it again",
        )
    try:
        import pyarrow.parquet as pq  # type: ignore[import-untyped]
    except ImportError:  # the worker reads it with `datasets`, which needs pyarrow anyway
        return list(cols or {})
    try:
        pf = pq.ParquetFile(path)
        names = list(pf.schema_arrow.names)
        batch = next(pf.iter_batches(batch_size=SAMPLE_ROWS), None)
        records = [] if batch is None else batch.to_pylist()
    except Exception as e:  # pyarrow raises ArrowInvalid, OSError, ... for a corrupt file
        raise DataError(
            f"--data {ref}: cannot read the Parquet file ({type(e).__name__}: {e})",
            hint="the file is damaged: export it again",
        ) from None
    _check_table(ref, "Parquet", names, records, validate, cols)
    if count is None:
        return names
    try:
        i = 0
        for batch in pf.iter_batches(batch_size=1024):
            for record in batch.to_pylist():
                count(f"{ref}[{i}]", record)
                i += 1
    except Exception as e:  # a damaged page past the first batch
        raise DataError(
            f"--data {ref}: cannot read the Parquet file ({type(e).__name__}: {e})",
            hint="the file is damaged: export it again",
        ) from None
    return names


def _first_valid(records: list[Any], ref: str, validate: Any) -> None:
    from dojo.errors import DojoError

    first_error = ""
    for i, record in enumerate(records):
        try:
            validate(record)
            return
        except DojoError as e:
            first_error = first_error or f"{ref}[{i}]: {e.message}"
    raise DataError(
        f"--data {ref}: none of the first {len(records)} rows is a usable conversation; "
        f"first problem: {first_error}",
        hint=_FORMATS_HINT,
    )


def _sniff_text(path: Path) -> str:
    """': it looks like JSON lines' and the like, for the refusal."""
    with path.open("rb") as f:
        raw = f.read(4096)
    if not raw.strip():
        return ": the file is empty"
    if b"\x00" in raw:
        return ""
    text = raw.decode("utf-8", errors="replace").lstrip("\ufeff")
    first = text.lstrip().split("\n", 1)[0]
    if first.startswith(("{", "[")):
        return ": it looks like JSON"
    if looks_like_csv(first):
        return ": it looks like CSV"
    return ": it looks like text"


# ---- Hub datasets --------------------------------------------------------------------------


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def hf_home() -> Path:
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "huggingface"


def cached_dataset(repo_id: str) -> Path | None:
    """Where `datasets` / huggingface_hub keep ``repo_id`` on this machine, or None.

    datasets' Arrow cache is ``$HF_DATASETS_CACHE/<owner>___<name>/``; the Hub download cache
    is ``$HF_HUB_CACHE/datasets--<owner>--<name>/snapshots/<rev>/``. Either lets
    ``load_dataset(id)`` work offline (with HF_DATASETS_OFFLINE=1 / HF_HUB_OFFLINE=1).
    """
    owner, name = repo_id.split("/", 1)
    ds_cache = Path(os.environ.get("HF_DATASETS_CACHE") or hf_home() / "datasets").expanduser()
    arrow = ds_cache / f"{owner}___{name}"
    if arrow.is_dir() and any(arrow.rglob("*.arrow")):
        return arrow
    hub_cache = Path(
        os.environ.get("HF_HUB_CACHE")
        or os.environ.get("HUGGINGFACE_HUB_CACHE")
        or hf_home() / "hub"
    ).expanduser()
    snaps = hub_cache / f"datasets--{owner}--{name}" / "snapshots"
    if snaps.is_dir() and any(p.is_file() for p in snaps.rglob("*")):
        return snaps
    return None


def check_hub_dataset(repo_id: str) -> str:
    """'cache' | 'hub' where the worker will find ``repo_id``; DataError when it cannot."""
    if cached_dataset(repo_id) is not None:
        return "cache"
    local = (
        f"download it where the Hub is reachable (`hf download {repo_id} --repo-type dataset`) "
        "or export it to a .jsonl file and pass that path"
    )
    offline = [v for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE") if _truthy(v)]
    if offline:
        raise DataError(
            f"--data {repo_id}: Hub dataset not in the local cache ({hf_home()}) and "
            f"{offline[0]}=1: the ranks could not download it",
            hint=local,
        )
    status, reason = _probe_hub(repo_id)
    if status == 200:
        return "hub"
    if status in (401, 403):
        raise DataError(
            f"--data {repo_id}: the Hub refused the dataset (HTTP {status}: gated or private)",
            hint=(
                "run `hf auth login` with a token that can read it (or set HF_TOKEN) and accept "
                f"its terms on https://huggingface.co/datasets/{repo_id}, or {local}"
            ),
        )
    if status is not None:
        raise DataError(
            f"--data {repo_id}: no such file, and no such dataset on the Hub (HTTP {status})",
            hint="check the path or the dataset id (owner/name)",
        )
    raise DataError(
        f"--data {repo_id}: Hub dataset not in the local cache and the Hub is unreachable ({reason})",
        hint=local,
    )


def _probe_hub(repo_id: str) -> tuple[int | None, str]:
    """(HTTP status, '') or (None, why unreachable) for GET <endpoint>/api/datasets/<id>."""
    import urllib.error  # here: urllib.request pulls in ssl/http
    import urllib.request

    endpoint = os.environ.get("HF_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/")
    req = urllib.request.Request(
        f"{endpoint}/api/datasets/{repo_id}", headers={"User-Agent": "dojo-train"}
    )
    token = hub.token()  # HF_TOKEN or `hf auth login`, as huggingface_hub and the ranks see it
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=_HUB_TIMEOUT_S) as resp:  # noqa: S310
            json.loads(resp.read() or b"{}")
            return int(resp.status), ""
    except urllib.error.HTTPError as e:
        return int(e.code), ""
    except (urllib.error.URLError, TimeoutError, OSError, ValueError) as e:
        return None, str(getattr(e, "reason", e))
