# GPU session 3, call 1 (docs/benchmarks-new.md): the held-out memory matrix (bench/matrix_rows.py),
# several rows at once, per-process nvidia-smi.
source bench/gpu_setup.sh || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, transformers, deepspeed, peft; print(torch.__version__, transformers.__version__, deepspeed.__version__, peft.__version__)"
grep MemTotal /proc/meminfo
timeout 520 python3 bench/memory_parallel.py --out $OUT/mem_s3.json
(cd /tmp/dojo-bench && tar czf $OUT/logs_a.tgz *.log)  # the logs (call 1-3 ran a --wildcards form that saved none)
