#!/usr/bin/env bash
# Nsight Compute detail (speed of light, warp stall reasons, occupancy, the source lines that stall most)
# for one launch of each named kernel in the kernel benchmark.
#   tools/gpu_ncu_detail.sh [carried-dir] group kernel-regex
set -uo pipefail
dir=${1:-build-cuda-carry}
group=$2
re=$3
OUT=${OUT:-/tmp/gpu_ncu_out}
mkdir -p "$OUT"
[[ -d $dir ]] || tar xJf build-cuda-xz/carry.tar.xz
export LD_LIBRARY_PATH="$PWD/$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
timeout 200 "$ncu" -k "regex:$re" --launch-count 1 --section SpeedOfLight --section WarpStateStats \
  --section Occupancy --section LaunchStats --section SourceCounters --print-summary none \
  "$dir/bin/cuda_kernel_bench" --quick --only "$group" > "$OUT/detail_$group.txt" 2>&1
echo "ncu detail $group exit $?"
grep -vE "^\s*$|^==PROF==|----" "$OUT/detail_$group.txt" | grep -vi "warning\|OPT\|INF " | cut -c1-160 | head -${LINES_MAX:-90}
