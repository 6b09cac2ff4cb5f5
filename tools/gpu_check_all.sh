#!/usr/bin/env bash
# One GPU call that checks what a session changed and measures the decode step (about 5 minutes): the op
# tests but the slow 256-expert fallback MoE cases (the MoE suite last, it is the slowest), graph replay,
# the NCCL group, the golden fixtures, the 16-layer V4-Flash-shaped decode at batch 1-64 and the per-kernel
# time of one batch-1 step.
#   OUT=... tools/gpu_check_all.sh   (on the GPU machine, device tool carry ["build-cuda-xz"])
set -uo pipefail
OUT=${OUT:-/tmp/gpu_check_all}; mkdir -p "$OUT"
d=build-cuda-carry; tar xJf build-cuda-xz/carry.tar.xz; export LD_LIBRARY_PATH=$PWD/$d/lib
summary() { grep -E "^\[  FAILED|^\[==========\] [0-9]+ tests|^\[  PASSED|^\[  SKIPPED \] [0-9]|Failure" "$1" | head -20; }
timeout 150 $d/bin/cuda_ops_test --gtest_filter='*-*CudaMoe*' > "$OUT/ops.log" 2>&1; echo "ops rc $?"; summary "$OUT/ops.log"
DEEPINFER_TEST_DATA=$PWD/tests/data timeout 100 $d/bin/cuda_model_test > "$OUT/model.log" 2>&1; echo "model rc $?"
summary "$OUT/model.log"
[ -x $d/bin/nccl_test ] && { timeout 60 $d/bin/nccl_test > "$OUT/nccl.log" 2>&1; echo "nccl rc $?"; summary "$OUT/nccl.log"; }
timeout 40 tools/gpu_goldens.sh $d/bin /tmp
OUT=$OUT/layers LAYERS=16 BATCHES="1 4 16 64" GRAPHS=on PROMPT=128 DECODE=16 timeout 150 tools/gpu_decode_layers.sh
OUT=$OUT/ncu NCU_TIMEOUT=90 timeout 100 tools/gpu_ncu_layers.sh > "$OUT/ncu.txt" 2>&1; head -20 "$OUT/ncu.txt"
timeout "${MOE_TIMEOUT:-120}" $d/bin/cuda_ops_test --gtest_filter='*CudaMoe*-*per_pair*:*grouped*' > "$OUT/moe.log" 2>&1
echo "moe rc $? (124: its time limit)"; summary "$OUT/moe.log"
exit 0
