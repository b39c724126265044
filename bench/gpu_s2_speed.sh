# GPU session 2, call 1 (docs/benchmarks.md): fixed-length throughput (baseline, dojo, dojo with
# --compile on), then the realistic mix with --compile on and with flex_attention.
source bench/gpu_setup.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
grep MemTotal /proc/meminfo
python3 -c "import torch, transformers, deepspeed; print(torch.__version__, transformers.__version__, deepspeed.__version__)"
timeout 330 python3 bench/throughput.py --out $OUT/tp_fixed.json --steps 40 --datasets fixed \
  --variant "dojo=" --variant "dojo-compile=--compile on"
timeout 200 python3 bench/throughput.py --out $OUT/tp_mix.json --steps 40 --datasets mix --no-baseline \
  --variant "dojo-compile=--compile on" --variant "dojo-flex=--attn flex_attention"
mkdir -p $OUT/logs && cp /tmp/dojo-bench/*.log $OUT/logs/ 2>/dev/null
