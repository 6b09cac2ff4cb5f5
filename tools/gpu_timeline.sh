#!/usr/bin/env bash
# The GPU timeline of decode steps (kernels inside CUDA graphs one by one, through CUPTI: the injection
# library tools/kernel_trace): for one step, its span, the sum of its kernels' times and the idle gaps between
# them, so that launch and dependency latency can be told apart from kernel time, and per kernel its exposed
# time (tools/timeline_report.py). The per-kernel list goes to $OUT/timeline_bB.txt.
#   OUT=... [LAYERS=4] [BATCH=1] [CONTEXT=0] [GRAPHS=on] tools/gpu_timeline.sh [carried-dir]
set -uo pipefail
dir=${1:-build-cuda-carry}
OUT=${OUT:-/tmp/gpu_timeline}; mkdir -p "$OUT"
[[ -d $dir ]] || tar xJf build-cuda-xz/carry.tar.xz
export LD_LIBRARY_PATH="$PWD/$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
[[ -f $dir/lib/libkernel_trace.so ]] || { echo "no libkernel_trace.so in $dir/lib"; exit 0; }
csv=$OUT/trace_b${BATCH:-1}.csv
CUDA_INJECTION64_PATH=$PWD/$dir/lib/libkernel_trace.so DEEPINFER_TRACE_OUT=$csv timeout "${TRACE_TIMEOUT:-240}" \
  "$dir/bin/model_bench" --preset flash --layers "${LAYERS:-4}" --backend cuda --batch "${BATCH:-1}" \
  --context "${CONTEXT:-0}" --graphs "${GRAPHS:-on}" --precision "${PRECISION:-exact}" --prompt 16 --decode 8 \
  --warmup 1 > "$OUT/trace_b${BATCH:-1}.log" 2>&1
echo "model_bench exit $? ($(grep -h "^backend" "$OUT/trace_b${BATCH:-1}.log"))"
python3 tools/timeline_report.py "$csv" "$OUT/timeline_b${BATCH:-1}.txt"
