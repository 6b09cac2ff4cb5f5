#!/usr/bin/env bash
# GPU time of every kernel of one decode step of the V4-Flash-shaped model with LAYERS layers (drawn in
# memory) at batch BATCH, under Nsight Compute at the running clocks without cache flushes: the step's
# kernels are those from the last `embed` group (every forward starts with one) to the end of the run.
# CONTEXT: a synthetic context of that many tokens before the prompt (model_bench --context).
#   OUT=... [LAYERS=16] [BATCH=1] [CONTEXT=0] tools/gpu_ncu_layers.sh [carried-dir]   (on the GPU machine)
set -uo pipefail
dir=${1:-build-cuda-carry}
OUT=${OUT:-/tmp/gpu_ncu_layers}; mkdir -p "$OUT"
[[ -d $dir ]] || tar xJf build-cuda-xz/carry.tar.xz
export LD_LIBRARY_PATH="$PWD/$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
csv=$OUT/layers_b${BATCH:-1}.csv
timeout "${NCU_TIMEOUT:-300}" "$ncu" --metrics gpu__time_duration.sum --clock-control none --cache-control none \
  --launch-count "${COUNT:-20000}" --csv "$dir/bin/model_bench" --preset flash --layers "${LAYERS:-16}" \
  --backend cuda --batch "${BATCH:-1}" --context "${CONTEXT:-0}" --prompt 16 --decode 2 --warmup 0 > "$csv" \
  2> "$OUT/ncu.err"
echo "ncu exit $?"
python3 - "$csv" <<'PY'
import csv, sys, collections, re
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows: sys.exit("no kernels recorded")
h = rows[0]; ix = {k: i for i, k in enumerate(h)}
seq = [(re.sub(r"\(.*", "", r[ix["Kernel Name"]]).replace("(anonymous namespace)::", "").strip(),
        float(r[ix["Metric Value"]].replace(",", ""))) for r in rows[1:]]
starts = [i for i, (k, _) in enumerate(seq) if "embed" in k and (i == 0 or "embed" not in seq[i - 1][0])]
step = seq[starts[-1]:]
print(f"kernels recorded {len(seq)}, forwards {len(starts)}; last step: {len(step)} kernels, "
      f"{sum(t for _, t in step) / 1000:.1f} us")
tot = collections.Counter(); cnt = collections.Counter()
for k, t in step: tot[k] += t / 1000; cnt[k] += 1
for k, t in tot.most_common(40): print(f"{t:9.1f} us {cnt[k]:5d} x {t / cnt[k]:7.2f}  {k[:100]}")
PY
