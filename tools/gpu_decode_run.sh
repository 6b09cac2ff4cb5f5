#!/usr/bin/env bash
# One GPU call for the decode kernels: op tests (every linear/moe variant vs ref), the kernel benchmark
# (graph replay, copy bandwidth of the same run) and the V4-Flash-shaped model with the per-op profile.
#   tools/gpu_decode_run.sh [carried-dir=build-cuda-carry] [tests|bench|model|nsys|all]
set -uo pipefail
dir=${1:-build-cuda-carry}
what=${2:-all}
OUT=${OUT:-/tmp/gpu_decode_out}
mkdir -p "$OUT"
[[ -d $dir ]] || tar xJf build-cuda-xz/carry.tar.xz  # what tools/gpu_pack.sh packed
export LD_LIBRARY_PATH="$PWD/$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"
git log -1 --format='commit %h %s' 2>/dev/null | tee -a "$OUT/gpu.txt"
if [[ $what == all || $what == tests ]]; then
  timeout 240 "$dir/bin/cuda_ops_test" --gtest_filter="${GTEST_FILTER:-*}" > "$OUT/tests.log" 2>&1
  echo "cuda_ops_test exit $?"
  grep -E "^\[  FAILED|^\[==========\]|^\[  PASSED" "$OUT/tests.log" | head -30
fi
if [[ $what == all || $what == bench ]]; then
  timeout 200 "$dir/bin/cuda_kernel_bench" --out "$OUT/kernel_bench.md" > "$OUT/kernel_bench.log" 2>&1
  echo "cuda_kernel_bench exit $?"
  cat "$OUT/kernel_bench.md" 2>/dev/null || tail -5 "$OUT/kernel_bench.log"
fi
if [[ $what == all || $what == model ]]; then
  # unprofiled first (the step time), the host's issue time per op, then the per-op profile (every op synchronised)
  for prof in ${PROFILES:-0 host 1}; do
    timeout 300 "$dir/bin/model_bench" --preset flash --backend cuda --prompt 512 --decode 16 --profile $prof \
      > "$OUT/model_flash_b1_profile$prof.log" 2>&1
    echo "model_bench flash b1 profile $prof exit $?"
    if [[ $prof == 0 ]]; then grep -E "^backend" "$OUT/model_flash_b1_profile$prof.log"; else tail -40 "$OUT/model_flash_b1_profile$prof.log"; fi
  done
fi
if [[ $what == all || $what == nsys ]]; then
  # per-kernel GPU time of a short decode run (no per-op synchronisation), where Nsight Systems is installed
  if command -v nsys > /dev/null; then
    timeout 240 nsys profile -o "$OUT/decode" --force-overwrite true "$dir/bin/model_bench" --preset flash \
      --backend cuda --prompt 64 --decode 16 > "$OUT/nsys_run.log" 2>&1
    echo "nsys profile exit $?"
    nsys stats --report cuda_gpu_kern_sum --format csv --output "$OUT/kern" "$OUT/decode.nsys-rep" > /dev/null 2>&1
    rm -f "$OUT/decode.nsys-rep" "$OUT/decode.sqlite"
    head -40 "$OUT"/kern*.csv 2>/dev/null | cut -c1-220
  else
    echo "nsys not installed"; ls /usr/local/cuda/bin | head -50
  fi
fi
