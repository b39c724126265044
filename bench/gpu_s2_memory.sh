# GPU session 2, call 2 (docs/benchmarks.md): QLoRA 1B, the held-out 1B rows (10-14, run after
# calibration), then the 7B ZeRO-3 full row.
source bench/gpu_setup.sh
timeout 330 python3 bench/memory_matrix.py --shape 1b --only 9 10 11 12 13 14 --out $OUT/mem_1b_c.json
timeout 240 python3 bench/memory_matrix.py --shape 7b --only 1 --out $OUT/mem_7b_b.json
mkdir -p $OUT/logs && cp /tmp/dojo-bench/*.log $OUT/logs/ 2>/dev/null
