"""Dry check of a row file without a GPU: every row's Setup resolves, labels are unique, and the
estimate each row gets in bench/memory_parallel.py's scheduler (before the run: dojo's and the
plain JSON's defaults), with the scheduler's need (estimate x 1.1 + 2 GiB) summed.

    python bench/memory_dry.py --rows s4
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from memory_heldout import H200_GIB, HOST_GIB, spec_for  # noqa: E402
from memory_parallel import ROW_FILES, load_rows, setup_for  # noqa: E402

from dojo.estimate import estimate  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", choices=sorted(ROW_FILES), default="s4")
    ap.add_argument("--budget-gib", type=float, default=132.0)
    a = ap.parse_args()
    rows = load_rows(a.rows)
    labels = [r.label() for r in rows]
    dup = {x for x in labels if labels.count(x) > 1}
    if dup:
        raise SystemExit(f"duplicate labels: {sorted(dup)}")
    total = 0.0
    print("| row | estimate GiB | host GiB | verdict |\n|---|---|---|---|")
    for r in rows:
        spec = spec_for(r.shape)
        e = estimate(spec, setup_for(r, spec, None, H200_GIB, HOST_GIB))
        total += e.gpu_total_gib * 1.1 + 2
        print(f"| {r.label()} | {e.gpu_total_gib:.1f} | {e.cpu_total_gib:.1f} | {e.verdict} |")
    shapes = sorted({r.shape for r in rows})
    print(
        f"\n{len(rows)} rows, shapes {', '.join(shapes)}; scheduler need sum(est x 1.1 + 2) = "
        f"{total:.0f} GiB = {total / a.budget_gib:.1f} x the {a.budget_gib:.0f} GiB budget"
    )


if __name__ == "__main__":
    main()
