source bench/gpu_setup.sh >/dev/null 2>&1 || echo "setup failed"
python3 -c "import pytest" 2>/dev/null && HAVE_PYTEST=1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
run() { name=$1; shift; o=/tmp/r_$name; rm -rf $o; s=$(date +%s)
  timeout 300 python3 -m dojo train --gpus 0 --output-dir $o --seq-len 512 --micro-batch 8 --max-steps 20 --seed 7 "$@" > $OUT/$name.log 2>&1; rc=$?
  echo "== $name rc=$rc $(( $(date +%s)-s ))s"; cat $o/dojo_summary.json 2>/dev/null | tr -d '\n' | head -c 900; echo; ls $o | tr '\n' ' '; echo
  [ $rc -ne 0 ] && tail -25 $OUT/$name.log; }
run lora_z2 --zero 2 --lr 2e-3
run qlora_z2 --method qlora --zero 2 --lr 2e-3 --merge
run qlora_z3 --method qlora --zero 3 --lr 2e-3
run full_z3 --method full --zero 3 --lr 1e-3
echo pytest=$HAVE_PYTEST
