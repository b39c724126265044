#!/usr/bin/env bash
# The one entry point on the lent GPU machine (from the repo root, .whl carried: bench/README.md).
# Each benchmark writes its result file under $OUT; copy it to bench/results/ and run
# `python bench/report.py > docs/benchmarks.md` on the CPU.
#
#   bash bench/gpu.sh memory SET [ROW ...]     a memory set of bench/rows.py, all rows or some
#                                              -> $OUT/memory-SET.json (bench/memory.py)
#   bash bench/gpu.sh speed SET [ARGS ...]     a speed set -> $OUT/speed-SET.json (bench/speed.py);
#                                              ARGS go to speed.py, e.g. --only 1b-full 1b-lora
#   bash bench/gpu.sh tests [PATH ...]         the GPU tests (pytest -m gpu), all or those under PATH
#                                              -> $OUT/gpu-tests.log
#   bash bench/gpu.sh pack                     everything under $OUT into $OUT/out.tgz, the rest
#                                              removed: end a command with it (few files come back)
#
# Environment: LIMIT_S (the command's time limit, default 560 s; speed.py drops the rows that
# would end later, last in the set's order first), for speed REPEATS (2), STEPS (30), WARMUP
# (warm-up steps of each system before the rounds, 3; 0 = no warm-up) and GPUS (the GPU ids to
# use, default all; with more than one, a round's systems run at once on several GPUs: --spread),
# for memory MEM_ARGS (more bench/memory.py options, e.g. "--parallel 4"),
# DOJO_BENCH_MEMSNAP=DIR (the allocator's history of each dojo row, bench/memsnap.py),
# BENCH_KEEP_GRAD_PARTITION=FILE (an experiment: DeepSpeed keeps its gradient partition between
# steps, bench/hook/sitecustomize.py).
# BENCH_STEPDETAIL=1 (speed: a per-step record in each run, bench/steps.py).
# BENCH_COMMIT=SHA (the commit the carried tree is at, recorded in the result's call: the lent
# machine's copy of .git can be older; without it a tree that differs from that copy's HEAD is
# recorded as HEAD+changes, bench/provenance.py).
set -uo pipefail
if [ "${1:-}" = pack ]; then  # before the set-up: it needs none, and runs last
  tar czf /tmp/out.tgz -C "$OUT" . && find "$OUT" -mindepth 1 -delete && mv /tmp/out.tgz "$OUT/"
  exit
fi
source bench/gpu_setup.sh || exit 1
[ -n "${DOJO_BENCH_MEMSNAP:-}${BENCH_KEEP_GRAD_PARTITION:-}" ] && export PYTHONPATH="$PWD/bench/hook:$PYTHONPATH"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, transformers, deepspeed, peft; print(torch.__version__, transformers.__version__, deepspeed.__version__, peft.__version__)"
limit=${LIMIT_S:-560}
stamp=$(mktemp)  # this call's run logs are newer: a warm machine's /tmp/dojo-bench keeps earlier calls'
plan=${1:-}; shift || true
case "$plan" in
  memory)
    set_name=${1:?usage: bash bench/gpu.sh memory SET [ROW ...]}; shift
    only=(); [ $# -gt 0 ] && only=(--only "$@")
    timeout "$limit" python3 bench/memory.py --set "$set_name" --out "$OUT/memory-$set_name.json" \
      ${MEM_ARGS:-} "${only[@]}" ;;
  speed)
    set_name=${1:?usage: bash bench/gpu.sh speed SET [speed.py args]}; shift
    gpus=${GPUS:-$(nvidia-smi --query-gpu=index --format=csv,noheader | paste -sd, -)}
    spread=(); [[ "$gpus" == *,* ]] && spread=(--spread)
    warm=(); [ "${WARMUP:-3}" != 0 ] && warm=(--warmup --warmup-steps "${WARMUP:-3}")
    # the scheduler's own limit leaves 40 s for the last runs to write their results
    timeout "$limit" python3 bench/speed.py --set "$set_name" --out "$OUT/speed-$set_name.json" \
      --gpus "$gpus" "${spread[@]}" --repeats "${REPEATS:-2}" --steps "${STEPS:-30}" "${warm[@]}" \
      --limit-s "$((limit - 40))" "$@" ;;
  tests)  # the report also comes back as $OUT/gpu-tests.log, whatever else the call prints
    timeout "$limit" python3 -m pytest -q -rA --runslow -m gpu "${@:-tests/}" 2>&1 \
      | tee "$OUT/gpu-tests.log" ;;
  *)
    echo "usage: bash bench/gpu.sh memory|speed|tests|pack [...]" >&2; exit 2 ;;
esac
rc=$?
(cd /tmp/dojo-bench 2>/dev/null && find . -maxdepth 1 -name '*.log' -newer "$stamp" -print0 \
  | tar czf "$OUT/logs-$plan-${set_name:-}.tgz" --null -T -)  # this call's run logs, if any
exit $rc
