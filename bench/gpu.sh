#!/usr/bin/env bash
# The one entry point for a GPU call (on the lent machine, from the repo root, with .whl carried:
# see docs/benchmarks.md). Each plan writes its results under $OUT.
#
#   bash bench/gpu.sh memory [ROW ...]      held-out memory matrix (bench/matrix_rows.py), all rows or some
#   bash bench/gpu.sh speed PLAN...         dojo vs the plain script, e.g. T1:baseline T1:dojo (bench/throughput.py);
#                                           REPEATS=R STEPS=N LIMIT_S=S WARMUP=W in the environment
#   bash bench/gpu.sh tests [PATH ...]      the GPU tests (pytest -m gpu), all or those under PATH
#
# Earlier sessions ran the same plans from per-call scripts (gpu_call1/2.sh, gpu_s2_*.sh,
# gpu_s3_*.sh); docs/benchmarks*.md give each call's exact arguments and git history keeps them.
set -uo pipefail
source bench/gpu_setup.sh || exit 1
# DOJO_BENCH_MEMSNAP=DIR (e.g. $OUT/snap): the allocator's history of each dojo row, summarized
# by bench/memsnap.py (bench/hook/sitecustomize.py); the hook goes first on PYTHONPATH.
[ -n "${DOJO_BENCH_MEMSNAP:-}" ] && export PYTHONPATH="$PWD/bench/hook:$PYTHONPATH"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, transformers, deepspeed, peft; print(torch.__version__, transformers.__version__, deepspeed.__version__, peft.__version__)"
plan=${1:-}; shift || true
case "$plan" in
  memory)
    only=(); [ $# -gt 0 ] && only=(--only "$@")
    # MEM_ARGS: e.g. "--rows s4 --parallel 6" (bench/memory_parallel.py options)
    timeout "${LIMIT_S:-520}" python3 bench/memory_parallel.py --out "$OUT/mem.json" ${MEM_ARGS:-} "${only[@]}" ;;
  speed)
    # REPEATS=R runs the whole plan R times, alternating (bench/speed_table.py --median)
    timeout "${LIMIT_S:-520}" python3 bench/throughput.py --out "$OUT/tp.json" --steps "${STEPS:-12}" \
      --repeats "${REPEATS:-1}" --warmup "${WARMUP:-0}" --plan "$@" ;;
  tests)
    timeout "${LIMIT_S:-520}" python3 -m pytest -q -rA --runslow -m gpu "${@:-tests/}" ;;
  *)
    echo "usage: bash bench/gpu.sh memory|speed|tests [...]" >&2; exit 2 ;;
esac
rc=$?
(cd /tmp/dojo-bench 2>/dev/null && tar czf "$OUT/logs.tgz" ./*.log 2>/dev/null)  # run logs, if any
exit $rc
