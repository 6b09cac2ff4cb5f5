#!/usr/bin/env bash
# Why chosen kernels of a decode step take the time they do: Nsight Compute's speed-of-light, occupancy, launch
# and warp-state sections for the kernels whose names match KERNELS (a regex), in a V4-Flash-shaped decode
# step at batch BATCH (LAYERS layers drawn in memory), printed a kernel a line: duration, DRAM and compute
# throughput (% of peak), achieved occupancy, registers, grid, and the warps' four largest stall reasons
# (cycles a warp waits per issued instruction). Under ncu every kernel runs alone (no early start), so the
# durations are each kernel's own, without the overlap of the running engine. Extra environment settings
# (the options under test) pass through, e.g. DEEPINFER_FP8_MMA=2. PROMPT=4096 DECODE=1 profiles a prefill's
# kernels instead (e.g. KERNELS='moe_w4a8_kernel|attention_mma64').
#   OUT=... [KERNELS='mhc_split_finish|route_kernel'] [BATCH=1] [LAYERS=4] [PRECISION=native] [PROMPT=16]
#     tools/gpu_ncu_stalls.sh [carried-dir]   (on the GPU machine)
set -uo pipefail
dir=${1:-build-cuda-carry}
OUT=${OUT:-/tmp/gpu_ncu_stalls}; mkdir -p "$OUT"
[[ -d $dir ]] || tar xJf build-cuda-xz/carry.tar.xz
export LD_LIBRARY_PATH="$PWD/$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
csv=$OUT/kernels_b${BATCH:-1}_p${PROMPT:-16}.csv
kernels=${KERNELS:-mhc_split_finish|route_kernel|moe_mma_kernel|gemv_split_kernel|gemv_kernel|linear_fp8mma_kernel|attention_split|rms_norm_rope_warp|mhc_split_kernel}
timeout "${NCU_TIMEOUT:-300}" "$ncu" --kernel-name "regex:$kernels" --launch-skip "${SKIP:-60}" \
  --launch-count "${COUNT:-40}" --section SpeedOfLight --section Occupancy --section LaunchStats \
  --section WarpStateStats --page raw --csv "$dir/bin/model_bench" --preset flash --layers "${LAYERS:-4}" \
  --backend cuda --precision "${PRECISION:-native}" --batch "${BATCH:-1}" --prompt "${PROMPT:-16}" --decode "${DECODE:-4}" --warmup 0 \
  --graphs off > "$csv" 2> "$OUT/ncu.err"
echo "ncu exit $?"
python3 - "$csv" <<'PY'
import csv, re, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if len(rows) < 3: sys.exit("no kernels recorded (see ncu.err)")
h, data = rows[0], rows[2:]  # the second row holds the units
ix = {k: i for i, k in enumerate(h)}
def val(r, name):
    i = ix.get(name)
    try: return float(r[i].replace(",", "")) if i is not None else float("nan")
    except ValueError: return float("nan")
stall = [k for k in h if re.match(r"smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$", k)]
for r in data:
    name = re.sub(r"\(.*", "", r[ix["Kernel Name"]]).replace("(anonymous namespace)::", "").strip()
    top = sorted(((val(r, k), k) for k in stall), reverse=True)[:4]
    st = " ".join(f"{re.sub(r'smsp__average_warps_issue_stalled_|_per_issue_active.ratio', '', k)} {v:.1f}"
                  for v, k in top if v == v)
    print(f"{name[:44]:44s} {val(r, 'gpu__time_duration.sum') / 1e3:7.2f} us"
          f" dram {val(r, 'gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed'):5.1f}%"
          f" sm {val(r, 'sm__throughput.avg.pct_of_peak_sustained_elapsed'):5.1f}%"
          f" occ {val(r, 'sm__warps_active.avg.pct_of_peak_sustained_active'):5.1f}%"
          f" regs {val(r, 'launch__registers_per_thread'):4.0f} grid {val(r, 'launch__grid_size'):6.0f}"
          f" | {st}")
PY
