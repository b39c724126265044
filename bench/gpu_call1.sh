# GPU call 1 (docs/benchmarks.md): throughput on the 1B shape, then the 1B memory matrix.
source bench/gpu_setup.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
timeout 250 python3 bench/throughput.py --out $OUT/throughput.json --steps 30
timeout 330 python3 bench/memory_matrix.py --shape 1b --out $OUT/mem_1b.json
ls /tmp/dojo-bench/*.log | head -20
