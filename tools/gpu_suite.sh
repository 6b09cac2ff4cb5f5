#!/usr/bin/env bash
# Runs the GPU test and benchmark suite on the GPU machine, from the repo root, with the folder made by
# tools/gpu_pack.sh carried along (device tool: carry ["build-cuda-carry"]). Results go under $OUT.
#   tools/gpu_suite.sh [carried-dir=build-cuda-carry] [tests|bench|all]
set -uo pipefail
dir=${1:-build-cuda-carry}
what=${2:-all}
OUT=${OUT:-/tmp/gpu_suite_out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
rc=0
if [ "$what" != bench ]; then
  "$dir/bin/cuda_ops_test" --gtest_output="xml:$OUT/cuda_ops_test.xml" 2>&1 | tee "$OUT/tests.log" | \
    grep -E "^\[  (FAILED|PASSED) |^\[==========\]|Failure|error|expected|Which is|max abs" | head -80
  rc=${PIPESTATUS[0]}
  echo "cuda_ops_test exit $rc"
fi
if [ "$what" != tests ] && [ -x "$dir/bin/cuda_ops_bench" ]; then
  "$dir/bin/cuda_ops_bench" --out "$OUT/bench.md" 2>&1 | tee "$OUT/bench.log" | tail -60
  brc=${PIPESTATUS[0]}
  echo "cuda_ops_bench exit $brc"
  [ "$brc" != 0 ] && rc=$brc
fi
exit $rc
