#!/usr/bin/env bash
# Where a V4-Flash-shaped decode step's time goes, and the baseline beside it, in one GPU call: the copy
# bandwidth; the per-op profile of 16-layer decode steps at batch 1 and 64 (exact); 16-layer decode in native
# precision at batch 1, 4, 16 and 64; the 4-layer model against transformers bf16 eager on the same shapes.
#   OUT=... tools/gpu_step_report.sh   (on the GPU machine, with build-cuda-xz carried)
set -uo pipefail
OUT=${OUT:-/tmp/gpu_step_report}; mkdir -p "$OUT"
d=build-cuda-carry; [ -d "$d" ] || tar xJf build-cuda-xz/carry.tar.xz; export LD_LIBRARY_PATH=$PWD/$d/lib
mb="timeout 240 $d/bin/model_bench --preset flash --backend cuda"
$d/bin/cuda_kernel_bench --quick --only mhc > "$OUT/roofline.log" 2>&1; grep -m1 "Copy bandwidth" "$OUT/roofline.log"
for b in 1 64; do
  $mb --layers 16 --batch $b --prompt 128 --decode 8 --profile 1 > "$OUT/profile_b$b.log" 2>&1; echo "profile batch $b rc $?"
done
for b in 1 4 16 64; do
  $mb --layers 16 --precision native --batch $b --prompt 128 --decode 32 > /tmp/mb.log 2>&1; grep -hE "^backend|rror" /tmp/mb.log
done
$mb --prompt 512 --decode 32 > /tmp/mb.log 2>&1; grep -hE "^backend|rror" /tmp/mb.log
timeout 300 python3 tools/hf_baseline.py --preset flash --dtype bf16 --prompt 512 --decode 32 2>&1 | tail -1
exit 0
