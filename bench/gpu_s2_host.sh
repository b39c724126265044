# GPU session 2, call 3 (docs/benchmarks.md): 7B QLoRA ZeRO-3, the 7B ZeRO-2 CPU-offload row that
# needs more host RAM than the machine has, then the GPU tests.
source bench/gpu_setup.sh
timeout 300 python3 bench/memory_matrix.py --shape 7b --only 3 4 --out $OUT/mem_7b_c.json
grep MemTotal /proc/meminfo
timeout 200 python3 -m pytest -q --runslow -m gpu tests/train/test_train_gpu.py 2>&1 | tail -15
mkdir -p $OUT/logs && cp /tmp/dojo-bench/*.log $OUT/logs/ 2>/dev/null
