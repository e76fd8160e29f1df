#!/usr/bin/env bash
# One prepared GPU check for the device tool's machine (one GPU, the image's python3 / torch, no network):
#   run(command="bash benchmarks/gpu_check.sh", carry=[".devwheels"])
# .devwheels/ holds what the image lacks (git-ignored; made here with `pip download --only-binary=:all:
# --python-version 3.12 --platform manylinux2014_x86_64 pydantic pydantic-core annotated-types typing-inspection hjson`
# and `pip wheel --no-deps deepspeed==0.19.8`). Results in $OUT (copied every 10 s, so a run cut by the limit still
# returns what finished): env.txt, gpu_runs.json (compare anywhere: bench_gpu_plan_vs_real.py compare), log.txt,
# calibrate's microbench.json / hardware_profile.yaml. ~4 min of runs + ~1 min calibrate on an H200.
set -u
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/gpu_out}; mkdir -p "$OUT" /tmp/gpu
{ nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit,driver_version --format=csv
  python3 -c "import sys,torch,transformers;print(sys.version.split()[0],torch.__version__,torch.version.cuda,transformers.__version__)"
} > "$OUT/env.txt" 2>&1
timeout 60 python3 -m pip install -q --no-deps --no-index --target /tmp/extra .devwheels/*.whl > "$OUT/pip.txt" 2>&1
export PYTHONPATH=${SRC:-$PWD/src}:/tmp/extra
( while sleep 10; do cp /tmp/gpu/gpu_runs.json "$OUT/" 2>/dev/null; done ) &
timeout "${RUNS_S:-420}" python3 benchmarks/bench_gpu_plan_vs_real.py run --out /tmp/gpu --gpu h200 --timeout-s 110 \
  2>&1 | tee "$OUT/log.txt"
cp /tmp/gpu/gpu_runs.json "$OUT/" 2>/dev/null
timeout "${CAL_S:-60}" python3 -m scalestudy calibrate --nproc 1 --base h200 --name h200-measured --output /tmp/cal \
  > "$OUT/cal.txt" 2>&1
cp /tmp/cal/microbench.json /tmp/cal/hardware_profile.yaml "$OUT/" 2>/dev/null
echo "gpu check finished"
