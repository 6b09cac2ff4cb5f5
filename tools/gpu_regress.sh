#!/usr/bin/env bash
# One GPU call after a kernel change: every CUDA op test (but the slow 256-expert fallback cases), the golden
# fixtures on cuda in exact precision, v4_tiny_fp8 native on cuda against ref (whole run and per op), and the
# V4-Flash-shaped decode step in both precisions.
#   OUT=... tools/gpu_regress.sh   (on the GPU machine, with build-cuda-xz carried)
set -uo pipefail
OUT=${OUT:-/tmp/gpu_regress}; mkdir -p "$OUT"
d=build-cuda-carry; tar xJf build-cuda-xz/carry.tar.xz; export LD_LIBRARY_PATH=$PWD/$d/lib
timeout 300 $d/bin/cuda_ops_test --gtest_filter='-*256_experts_per_pair*:*256_experts_grouped*:*batch_8_per_pair*:*batch_8_grouped*' > $OUT/tests.log 2>&1
echo "cuda_ops_test exit $?"; grep -E "^\[  FAILED|^\[==========\]|^\[  PASSED|Failure" $OUT/tests.log | head -20
tools/gpu_goldens.sh $d/bin /tmp
m=tests/data/v4_tiny_fp8
for be in cuda ref; do $d/bin/deepinfer score --backend $be --precision native --model $m --tokens-file $m/prompt.txt --logits-out $OUT/native_$be.npy > /dev/null 2>&1; done
python3 tools/compare_logits.py $OUT/native_cuda.npy $OUT/native_ref.npy --tol 1 | tail -1
$d/bin/deepinfer score --backend cuda --precision native --compare-with ref --model $m --tokens-file $m/prompt.txt 2>&1 | tail -2
for p in exact native; do timeout 120 $d/bin/model_bench --preset flash --backend cuda --precision $p --prompt 512 --decode 32 > /tmp/mb.log 2>&1; grep -E "^backend|rror" /tmp/mb.log; done
exit 0
