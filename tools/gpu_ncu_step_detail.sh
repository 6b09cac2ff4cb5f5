#!/usr/bin/env bash
# Nsight Compute's throughput, occupancy and launch sections for the kernels matching KERNELS (a regex) in
# one batch-BATCH decode step of the V4-Flash-shaped model with LAYERS layers: why a kernel is where it is
# against the bandwidth (dram throughput, achieved occupancy, registers per thread, waves).
#   OUT=... [KERNELS='moe_mma|gemv_split'] [LAYERS=4] [BATCH=1] [COUNT=12] tools/gpu_ncu_step_detail.sh   (GPU machine)
set -uo pipefail
dir=${1:-build-cuda-carry}
OUT=${OUT:-/tmp/gpu_ncu_step_detail}; mkdir -p "$OUT"
[[ -d $dir ]] || tar xJf build-cuda-xz/carry.tar.xz
export LD_LIBRARY_PATH="$PWD/$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
timeout "${NCU_TIMEOUT:-180}" "$ncu" --clock-control none --kernel-name "regex:${KERNELS:-moe_mma|gemv_split}" \
  --launch-skip "${SKIP:-0}" --launch-count "${COUNT:-12}" --section SpeedOfLight --section Occupancy \
  --section LaunchStats --section MemoryWorkloadAnalysis "$dir/bin/model_bench" --preset flash \
  --layers "${LAYERS:-4}" --backend cuda --batch "${BATCH:-1}" --prompt 1 --decode 2 --warmup 0 --graphs off \
  > "$OUT/detail.txt" 2> "$OUT/detail.err"
echo "ncu exit $?"
grep -E "^  [a-z_]+.*\(|DRAM Throughput|Memory Throughput|Duration|Achieved Occupancy|Theoretical Occupancy|Registers Per|Waves Per SM|Block Limit Reg|Grid Size" \
  "$OUT/detail.txt" | head -"${LINES_MAX:-160}"
