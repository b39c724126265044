# GPU session 3, call 2 (docs/benchmarks-new.md): the memory rows call 1 did not reach, then
# baseline vs dojo, one repeat of T1-T5 (bench/throughput.py CASES), alternating.
source bench/gpu_setup.sh || exit 1
timeout 250 python3 bench/memory_parallel.py --out $OUT/mem_s3_b.json --only plain_q15_Z2_full_b2x4096_ckpt plain_q15_Z3_lora_b4x2048_nockpt dojo_g2b_Z2_full_b1x2048_nockpt_liger_pack dojo_g2b_Z2_full_b1x2048_nockpt_noliger_pack plain_g2b_Z2_lora_b4x2048_ckpt plain_g2b_Z3_full_b2x2048_ckpt dojo_q3_Z2_full_b4x2048_nockpt_liger_pack dojo_q3_Z1_full_b2x4096_ckpt_noliger_pack dojo_q3_Z3_full_b1x16384_ckpt_liger_pack plain_q3_Z2_full_b4x2048_ckpt plain_l8b_Z2_lora_b2x2048_ckpt dojo_l8b_Z1_full_b1x2048_ckpt_liger_pack
timeout 300 python3 bench/throughput.py --out $OUT/tp_s3_b.json --steps 12 --plan \
  T1:baseline T1:dojo T2:baseline T2:dojo T4:baseline T4:dojo T3:baseline T3:dojo T5:baseline T5:dojo
(cd /tmp/dojo-bench && tar czf $OUT/logs_b.tgz *.log)  # the logs (call 1-3 ran a --wildcards form that saved none)
true
