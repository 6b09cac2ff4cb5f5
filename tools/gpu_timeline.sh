#!/usr/bin/env bash
# The GPU timeline of decode steps (kernels inside CUDA graphs one by one, through CUPTI: the injection
# library tools/kernel_trace): for one step, its span, the sum of its kernels' times and the idle gaps between
# them, so that launch and dependency latency can be told apart from kernel time. The per-kernel list goes to
# $OUT/timeline_bB.txt.
#   OUT=... [LAYERS=4] [BATCH=1] [CONTEXT=0] [GRAPHS=on] tools/gpu_timeline.sh [carried-dir]
set -uo pipefail
dir=${1:-build-cuda-carry}
OUT=${OUT:-/tmp/gpu_timeline}; mkdir -p "$OUT"
[[ -d $dir ]] || tar xJf build-cuda-xz/carry.tar.xz
export LD_LIBRARY_PATH="$PWD/$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
[[ -f $dir/lib/libkernel_trace.so ]] || { echo "no libkernel_trace.so in $dir/lib"; exit 0; }
csv=$OUT/trace_b${BATCH:-1}.csv
CUDA_INJECTION64_PATH=$PWD/$dir/lib/libkernel_trace.so DEEPINFER_TRACE_OUT=$csv timeout "${TRACE_TIMEOUT:-240}" \
  "$dir/bin/model_bench" --preset flash --layers "${LAYERS:-4}" --backend cuda --batch "${BATCH:-1}" \
  --context "${CONTEXT:-0}" --graphs "${GRAPHS:-on}" --precision "${PRECISION:-exact}" --prompt 16 --decode 8 \
  --warmup 1 > "$OUT/trace_b${BATCH:-1}.log" 2>&1
echo "model_bench exit $? ($(grep -h "^backend" "$OUT/trace_b${BATCH:-1}.log"))"
python3 - "$csv" "$OUT/timeline_b${BATCH:-1}.txt" <<'PY'
import csv, sys, re, collections
ks = sorted((int(r["start_ns"]), int(r["end_ns"]), re.sub(r"\(.*", "", r["name"].replace("(anonymous namespace)::", "").replace("di::cuda::", "")))
            for r in csv.DictReader(open(sys.argv[1])))
starts = [i for i, k in enumerate(ks) if "embed" in k[2] and (i == 0 or "embed" not in ks[i - 1][2])]
if len(starts) < 3: sys.exit(f"{len(ks)} kernels, too few step boundaries")
a, b = starts[-2], starts[-1]  # the second-to-last step (the last ends with the run's tail)
step = ks[a:b]
span = step[-1][1] - step[0][0]
busy = sum(e - s for s, e, _ in step)
gaps = [max(0, step[i + 1][0] - step[i][1]) for i in range(len(step) - 1)]
print(f"one step: {len(step)} kernels, span {span/1e3:.1f} us, kernel time {busy/1e3:.1f} us, idle {sum(gaps)/1e3:.1f} us "
      f"(median gap {sorted(gaps)[len(gaps)//2]/1e3:.2f} us, gaps > 5 us: {sum(g > 5000 for g in gaps)} totalling "
      f"{sum(g for g in gaps if g > 5000)/1e3:.1f} us)")
tot = collections.Counter(); cnt = collections.Counter(); gap_after = collections.Counter()
for (s, e, n), g in zip(step, gaps + [0]):
    tot[n] += (e - s) / 1e3; cnt[n] += 1; gap_after[n] += g / 1e3
for n, t in tot.most_common(25):
    print(f"{t:9.1f} us {cnt[n]:4d} x {t / cnt[n]:7.2f}  idle after {gap_after[n]:7.1f}  {n[:90]}")
with open(sys.argv[2], "w") as f:
    for (s, e, n), g in zip(step, gaps + [0]):
        f.write(f"{(s - step[0][0])/1e3:9.2f} {(e - s)/1e3:8.2f} gap {g/1e3:6.2f}  {n[:110]}\n")
PY
