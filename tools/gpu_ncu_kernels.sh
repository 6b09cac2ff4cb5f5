#!/usr/bin/env bash
# Per-kernel GPU time and memory throughput of the decode kernels under Nsight Compute (one replay pass
# per kernel: duration, DRAM bytes, achieved occupancy, registers), for the kernels whose benchmark time
# is far from their bytes.  tools/gpu_ncu_kernels.sh [carried-dir] [group: moe|attention|mhc|linear]
set -uo pipefail
dir=${1:-build-cuda-carry}
group=${2:-moe}
OUT=${OUT:-/tmp/gpu_ncu_out}
mkdir -p "$OUT"
[[ -d $dir ]] || tar xJf build-cuda-xz/carry.tar.xz
export LD_LIBRARY_PATH="$PWD/$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
metrics=gpu__time_duration.sum,dram__bytes_read.sum,launch__registers_per_thread,launch__grid_size,sm__warps_active.avg.pct_of_peak_sustained_active,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem
case $group in moe) re='moe|zero' ;; attention) re=attention ;; mhc) re=mhc ;; *) re='gemv|linear' ;; esac
timeout 300 "$ncu" --metrics "$metrics" -k "regex:$re" --launch-skip "${SKIP:-0}" --launch-count "${COUNT:-40}" --csv \
  "$dir/bin/cuda_kernel_bench" --quick --only "$group" > "$OUT/ncu_$group.csv" 2> "$OUT/ncu_$group.err"
echo "ncu $group exit $?"
python3 - "$OUT/ncu_$group.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows: print(open(sys.argv[1]).read()[-2000:]); sys.exit()
h = rows[0]; idx = {k: i for i, k in enumerate(h)}
agg = collections.OrderedDict()
for r in rows[1:]:
    key = (r[idx["Kernel Name"]][:90])
    agg.setdefault(key, {}).setdefault(r[idx["Metric Name"]], []).append(r[idx["Metric Value"]])
for k, m in agg.items():
    print(k)
    for name, vals in m.items(): print("   ", name, vals[:8])
PY
