# GPU call 2 (docs/benchmarks.md): fixed-length throughput, the rest of the 1B matrix, two 7B rows.
source bench/gpu_setup.sh
timeout 120 python3 bench/throughput.py --out $OUT/throughput_fixed.json --steps 30 --datasets fixed
timeout 170 python3 bench/memory_matrix.py --shape 1b --only 7 8 9 --out $OUT/mem_1b_b.json
timeout 230 python3 bench/memory_matrix.py --shape 7b --only 0 2 --out $OUT/mem_7b.json
