#!/usr/bin/env bash
# GPU time of every kernel of the V4-Flash-shaped model's decode steps under Nsight Compute, at the
# running clocks and without cache flushes (--clock-control none --cache-control none): the per-kernel
# breakdown of a step with no per-op synchronisation. Skips the prefill's launches, then records COUNT.
#   tools/gpu_ncu_step.sh [carried-dir]   (env SKIP, COUNT)
set -uo pipefail
dir=${1:-build-cuda-carry}
OUT=${OUT:-/tmp/gpu_ncu_out}
mkdir -p "$OUT"
[[ -d $dir ]] || tar xJf build-cuda-xz/carry.tar.xz
export LD_LIBRARY_PATH="$PWD/$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
"$dir/bin/model_bench" --preset flash --backend cuda --prompt 64 --decode 1 > "$OUT/step_warm.log" 2>&1  # writes the checkpoint
timeout 420 "$ncu" --metrics gpu__time_duration.sum --clock-control none --cache-control none \
  --launch-skip "${SKIP:-400}" --launch-count "${COUNT:-700}" --csv \
  "$dir/bin/model_bench" --preset flash --backend cuda --prompt 64 --decode 6 > "$OUT/step.csv" 2> "$OUT/step.err"
echo "ncu step exit $?"
python3 - "$OUT/step.csv" <<'PY'
import csv, sys, collections, re
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
h = rows[0]; ix = {k: i for i, k in enumerate(h)}
seq = [(re.sub(r"\(.*", "", r[ix["Kernel Name"]]).replace("(anonymous namespace)::", "").strip(),
        float(r[ix["Metric Value"]].replace(",", ""))) for r in rows[1:]]
print("kernels recorded", len(seq), "total us", sum(t for _, t in seq) / 1000)
tot = collections.Counter(); cnt = collections.Counter()
for k, t in seq: tot[k] += t / 1000; cnt[k] += 1
for k, t in tot.most_common(30): print(f"{t:10.1f} us {cnt[k]:5d} x  {k[:110]}")
PY
