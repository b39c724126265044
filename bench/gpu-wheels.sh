#!/bin/bash
# Copied from the project's reference folder (tools/gpu-wheels.sh) on 2026-12-01; .whl/ is in
# .gitignore, so the original's write to .git/info/exclude (a file, not a folder, in a worktree) is gone.
# Puts into ./.whl (git-ignored) the wheels that the GPU machine's image lacks: deepspeed, bitsandbytes, liger-kernel,
# datasets, trl (bench/trl_sft.py) and their few missing needs. Run it from the project root, with torch installed here.
# On the GPU machine, carry .whl and start the command with:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
# That machine's python3 is 3.12 with torch 2.11 (CUDA 13), transformers 5.17, peft 0.21, accelerate, typer, rich.
# It has no `deepspeed` script on PATH: launch with `python3 -m deepspeed.launcher.runner`.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
mkdir -p .whl
plat="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $plat -d .whl \
  bitsandbytes==0.50.2 datasets==5.2.0 trl==1.16.0 dill==0.4.1 multiprocess==0.70.19 hjson==3.1.0 \
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 liger-kernel==0.8.5
# deepspeed ships as source only; a pure-Python wheel (ops compile on first use there, nvcc and ninja are present).
ls .whl/deepspeed-*.whl >/dev/null 2>&1 || DS_BUILD_OPS=0 python3 -m pip wheel -q --no-deps --no-build-isolation deepspeed==0.19.8 -w .whl
du -sh .whl
