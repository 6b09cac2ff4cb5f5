#!/usr/bin/env bash
# Issue 10's long-context yardstick on the GPU machine: the V4-Flash-shaped model with LAYERS layers decoding
# at each of BATCHES after a synthetic context of each of CONTEXTS tokens (model_bench --context: random
# state contents, no prefill of them), CUDA graphs on, and the copy bandwidth of the same call. Bytes per
# step: ../shared/tools/v4_decode_bytes.py --preset flash --layers L --context C --batch B.
# 1048448: the largest multiple of 128 that leaves V4-Flash's 1,048,576 positions room for the prompt and
# the decode steps.
#   OUT=... [LAYERS=16] [BATCHES="1 16"] [CONTEXTS="65536 1048448"] [DECODE=16] tools/gpu_long_context.sh
set -uo pipefail
OUT=${OUT:-/tmp/gpu_long_context}; mkdir -p "$OUT"
d=build-cuda-carry; [ -d "$d" ] || tar xJf build-cuda-xz/carry.tar.xz; export LD_LIBRARY_PATH=$PWD/$d/lib
$d/bin/cuda_kernel_bench --quick --only mhc > "$OUT/roofline.log" 2>&1
grep -m1 "Copy bandwidth" "$OUT/roofline.log"
for c in ${CONTEXTS:-65536 1048448}; do for b in ${BATCHES:-1 16}; do
  timeout 300 $d/bin/model_bench --preset flash --layers "${LAYERS:-16}" --backend cuda --precision "${PRECISION:-exact}" \
    --batch "$b" --context "$c" --prompt 16 --decode "${DECODE:-16}" > "$OUT/ctx_${c}_b$b.log" 2>&1
  echo "rc $? $(grep -hE "^backend|rror" "$OUT/ctx_${c}_b$b.log")"
done; done
exit 0
