#!/usr/bin/env bash
# One GPU call after a change to the mma kernels: their op tests against ref (TESTS, a gtest filter), the three
# golden fixtures on cuda, the linear kernel benchmark and the 16-layer V4-Flash-shaped decode at batch 1-64.
#   OUT=... [TESTS='*CudaLinear*'] [PRECISIONS="exact"] tools/gpu_mma_check.sh   (on the GPU machine)
set -uo pipefail
OUT=${OUT:-/tmp/gpu_mma}; mkdir -p "$OUT"
d=build-cuda-carry; tar xJf build-cuda-xz/carry.tar.xz; export LD_LIBRARY_PATH=$PWD/$d/lib
timeout 200 $d/bin/cuda_ops_test --gtest_filter="${TESTS:-*CudaLinear*}" > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "^\[  FAILED|^\[==========\]|^\[  PASSED|Failure" $OUT/tests.log | head -20
tools/gpu_goldens.sh $d/bin /tmp
timeout 100 $d/bin/cuda_kernel_bench --only linear > $OUT/kb.log 2>&1; grep -E "fp8|Copy" $OUT/kb.log | grep -v "f32)\|cublas"
for p in ${PRECISIONS:-exact}; do
  OUT=$OUT/$p PRECISION=$p LAYERS=16 BATCHES="1 4 16 64" GRAPHS=on PROMPT=128 DECODE=32 timeout 280 tools/gpu_decode_layers.sh
done
exit 0
