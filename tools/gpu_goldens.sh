#!/usr/bin/env bash
# The three golden fixtures through `deepinfer score` (exact precision) against their transformers logits at
# 1e-3, one line each. Used by the GPU check scripts; BACKEND=cpu runs the same check anywhere.
#   tools/gpu_goldens.sh BIN_DIR OUT_DIR   [BACKEND=cuda]
set -uo pipefail
bin=$1 out=$2
for fx in v4_tiny_fp32 v4_tiny_fp8 v4_tiny_bf16; do
  m=tests/data/$fx; g=$m/logits.npy; [ -f $m/logits_fp32.npy ] && g=$m/logits_fp32.npy
  "$bin/deepinfer" score --backend "${BACKEND:-cuda}" --model $m --tokens-file $m/prompt.txt --logits-out "$out/$fx.npy" \
    > /dev/null 2>&1
  python3 tools/compare_logits.py "$out/$fx.npy" $g --tol 1e-3 2>&1 | tail -1
done
