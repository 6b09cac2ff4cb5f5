#!/usr/bin/env bash
# One GPU call after a decode-kernel change: the op tests (but the slow 256-expert fallback cases), three golden
# fixtures through the CUDA backend, the V4-Flash-shaped decode step time and its per-kernel breakdown.
#   OUT=... tools/gpu_decode_check.sh   (on the GPU machine, with build-cuda-xz carried)
set -uo pipefail
OUT=${OUT:-/tmp/gpu_decode_check}; mkdir -p "$OUT"
d=build-cuda-carry; tar xJf build-cuda-xz/carry.tar.xz; export LD_LIBRARY_PATH=$PWD/$d/lib
(timeout 300 $d/bin/cuda_ops_test --gtest_filter='-*256_experts_per_pair*:*256_experts_grouped*:*batch_8_per_pair*:*batch_8_grouped*' > $OUT/tests.log 2>&1; echo "tests exit $?"; grep -E "^\[  FAILED|^\[==========\]|^\[  PASSED|Failure" $OUT/tests.log | head -20)
tools/gpu_goldens.sh $d/bin $OUT
timeout 120 $d/bin/model_bench --preset flash --backend cuda --prompt 512 --decode 32 > $OUT/model.log 2>&1; grep backend $OUT/model.log
SKIP=400 COUNT=700 timeout 200 tools/gpu_ncu_step.sh $d 2>&1 | tail -32
