# GPU session 2, call 3 (docs/benchmarks.md): 7B QLoRA ZeRO-3, the 7B ZeRO-2 CPU-offload row that
# needs more host RAM than the machine has, the held-out 1B offload row, then the GPU tests (they
# were cut by the timeout here and re-run alone: `bash bench/_train_gpu_tests.sh`).
source bench/gpu_setup.sh
timeout 270 python3 bench/memory_matrix.py --shape 7b --only 3 4 --out $OUT/mem_7b_c.json
grep MemTotal /proc/meminfo
timeout 110 python3 bench/memory_matrix.py --shape 1b --only 14 --out $OUT/mem_1b_d.json
timeout 170 python3 -m pytest -q --runslow -m gpu tests/train/test_train_gpu.py 2>&1 | tail -8
