#!/usr/bin/env bash
# Issue 10's yardstick on the GPU machine: the V4-Flash-shaped model with LAYERS layers (random weights drawn
# in memory, no file), decode at each of BATCHES with CUDA graphs off and on, and the copy bandwidth measured
# in the same call (the roofline's denominator; bytes per step from ../shared/tools/v4_decode_bytes.py).
#   OUT=... [LAYERS=16] [BATCHES="1 4 16 64"] [GRAPHS="off on"] [PROMPT=512] [DECODE=32] tools/gpu_decode_layers.sh
set -uo pipefail
OUT=${OUT:-/tmp/gpu_layers}; mkdir -p "$OUT"
d=build-cuda-carry; [ -d "$d" ] || tar xJf build-cuda-xz/carry.tar.xz; export LD_LIBRARY_PATH=$PWD/$d/lib
$d/bin/cuda_kernel_bench --quick --only mhc > "$OUT/roofline.log" 2>&1
grep -m1 "Copy bandwidth" "$OUT/roofline.log"
for b in ${BATCHES:-1 4 16 64}; do for g in ${GRAPHS:-off on}; do
  timeout 300 $d/bin/model_bench --preset flash --layers "${LAYERS:-16}" --backend cuda --precision "${PRECISION:-exact}" \
    --graphs "$g" --batch "$b" --prompt "${PROMPT:-512}" --decode "${DECODE:-32}" > "$OUT/mb_${b}_$g.log" 2>&1
  echo "rc $? $(grep -hE "^backend|rror" "$OUT/mb_${b}_$g.log")"
done; done
exit 0
