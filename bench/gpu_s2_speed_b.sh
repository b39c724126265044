# GPU session 2, call 5 (docs/benchmarks.md): fixed-length dojo with 5e8 buckets, with and without
# --compile on (what became dojo train's defaults for full ZeRO-1/2).
source bench/gpu_setup.sh >/dev/null 2>&1
timeout 215 python3 bench/throughput.py --out $OUT/tp_fixed_b.json --steps 40 --datasets fixed \
  --no-baseline --variant "dojo-compile-b5e8=--compile on --bucket-size 5e8" \
  --variant "dojo-b5e8=--bucket-size 5e8"
