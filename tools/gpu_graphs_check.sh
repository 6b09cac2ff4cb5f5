#!/usr/bin/env bash
# One GPU call for the CUDA graph segments: replay against eager on the fixtures (cuda_model_test), then the
# V4-Flash-shaped decode step with graphs off and on, both precisions, batch 1 and larger batches.
#   OUT=... tools/gpu_graphs_check.sh   (on the GPU machine, with build-cuda-xz carried; env BATCHES)
set -uo pipefail
OUT=${OUT:-/tmp/gpu_graphs}; mkdir -p "$OUT"
d=build-cuda-carry; tar xJf build-cuda-xz/carry.tar.xz; export LD_LIBRARY_PATH=$PWD/$d/lib
DEEPINFER_TEST_DATA=$PWD/tests/data timeout 240 $d/bin/cuda_model_test > "$OUT/graphs.log" 2>&1
echo "cuda_model_test exit $?"; grep -E "^\[  FAILED|^\[==========\]|^\[  PASSED|Failure|differs|Expected|Which" "$OUT/graphs.log" | head -20
for p in exact native; do for g in off on; do
  timeout 120 $d/bin/model_bench --preset flash --backend cuda --precision $p --graphs $g --prompt 512 --decode 64 > /tmp/mb.log 2>&1
  grep -E "^backend|rror" /tmp/mb.log; done; done
for b in ${BATCHES:-4 16 64}; do for g in off on; do
  timeout 120 $d/bin/model_bench --preset flash --backend cuda --graphs $g --batch $b --prompt 128 --decode 32 > /tmp/mb.log 2>&1
  grep -E "^backend|rror" /tmp/mb.log; done; done
exit 0
