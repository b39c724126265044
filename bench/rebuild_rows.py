"""Rebuild a memory call's result file from its printed row lines, for a call whose result file
did not come back (bench/memory.py prints each finished row without its params and ran).

    python bench/rebuild_rows.py --set SET --log a.log --command "bash bench/gpu.sh memory SET ..." \
        --commit f317cc5 --device "NVIDIA H200" --gpu-gib 140.4 --out memory-SET.json

The measured fields and the estimate come from the log. ``params`` is the row in bench/rows.py;
``ran`` is what ``dojo train --dry-run`` of the row's own command writes (its DeepSpeed
zero_optimization) with the attention kernel the printed estimate resolved. A row is kept only
where the estimate with that ``ran`` pinned is the one the GPU run printed; the script stops
otherwise.
"""

import argparse
import dataclasses
import json
import tempfile
from pathlib import Path
from typing import Any
from unittest.mock import patch

import memory
import rows


def printed_rows(log: Path) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in log.read_text().splitlines() if ln.startswith('{"row"')]


def ran_of(row: rows.Row, work: Path, gpu_gib: float, attn: str | None) -> dict[str, Any]:
    """The zero_optimization `dojo train --dry-run` writes for the row (dojo's resolution is the
    same on any machine that lists the same GPU)."""
    from dojo.gpus import Gpu

    run_dir = Path(tempfile.mkdtemp(dir=work)) / "run"
    argv = memory.command(row, memory.model_dir(row.shape, work), memory.data_for(row, work),
                          run_dir)[3:] + ["--dry-run", "--init", "random"]  # fmt: skip
    with patch("dojo.gpus.list_gpus", return_value=[Gpu(0, "GPU", gpu_gib, 0.0)]):
        memory.dojo_cli(argv)
    zo = json.loads((run_dir / "ds_config.json").read_text()).get("zero_optimization", {})
    return {"zero_optimization": zo, "attn": attn}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--set", required=True)
    ap.add_argument("--log", type=Path, required=True, help="the call's memory.py output")
    ap.add_argument("--command", required=True, help="the call's command line")
    ap.add_argument("--commit", required=True)
    ap.add_argument("--device", required=True)
    ap.add_argument("--gpu-gib", type=float, required=True)
    ap.add_argument("--host-gib", type=float, default=128.0)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "dojo-rebuild")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    known = {r.label(): r for r in rows.MEMORY_SETS[a.set].rows}
    out = []
    for printed in printed_rows(a.log):
        row = known[printed["row"]]
        ran = ran_of(row, a.work, a.gpu_gib, printed["estimate"].get("resolved", {}).get("attn"))
        again = memory.estimate_row(row, a.work, a.gpu_gib, a.host_gib, ran)
        if any(abs(again[k] - printed["estimate"][k]) > 1e-3 for k in ("gpu_gib", "alloc_gib")):
            raise SystemExit(f"{row.label()}: the rebuilt ran gives {again['gpu_gib']} GiB, the "
                             f"run printed {printed['estimate']['gpu_gib']}")  # fmt: skip
        out.append({**printed, "params": dataclasses.asdict(row), "ran": ran, "tail": ""})
    call = {"command": a.command, "commit": a.commit, "gpu_gib": a.gpu_gib,
            "host_gib": a.host_gib, "device": a.device,
            "via": "rows rebuilt from the call's printed lines by bench/rebuild_rows.py"}  # fmt: skip
    doc = {"benchmark": "memory", "set": a.set, "command": f"bash bench/gpu.sh memory {a.set}",
           "calls": [call], "rows": out}  # fmt: skip
    a.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{a.out}: {len(out)} rows")


if __name__ == "__main__":
    main()
