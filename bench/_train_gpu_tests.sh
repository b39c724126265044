# GPU session 2, call 4: the GPU tests alone (docs/benchmarks.md "GPU tests").
source bench/gpu_setup.sh >/dev/null 2>&1
timeout 330 python3 -m pytest -q -rA --runslow -m gpu tests/train/test_train_gpu.py
