# Source this on the lent GPU machine (see docs/benchmarks.md): installs the carried wheels from .whl
# (made by bench/gpu-wheels.sh, liger-kernel included) into /tmp/site and puts dojo on PYTHONPATH.
# A warm machine that already installed the same wheels skips the install.
stamp=$(ls -l .whl | md5sum)
if [ "$(cat /tmp/site/.wheels 2>/dev/null)" != "$stamp" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || return 1
  echo "$stamp" > /tmp/site/.wheels
fi
export PYTHONPATH=/tmp/site:$PWD
export PYTHONUNBUFFERED=1
# keep NVLink multicast off (shared host, KINDS.md)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
