# GPU session 3, call 3 (docs/benchmarks-new.md): the realistic mix, ZeRO-3 variants (Liger off,
# larger stage-3 buckets / persistence through bench/hook), the second repeat of T1-T4, profiles.
source bench/gpu_setup.sh || exit 1
timeout 420 python3 bench/throughput.py --out $OUT/tp_s3_c.json --steps 12 --plan \
  T6:baseline T6:dojo T2:dojo-liger-off T2:dojo-z3-big T4:dojo-z3-big T2:dojo-profile \
  T1:baseline T1:dojo T2:baseline T2:dojo T4:baseline T4:dojo T3:baseline T3:dojo \
  T4:dojo-profile T2:dojo-z3-persist1e7 T3:dojo-compile T5:baseline T5:dojo T1:dojo-log100
(cd /tmp/dojo-bench && tar czf $OUT/logs_c.tgz *.log)  # the logs (call 1-3 ran a --wildcards form that saved none)
true
