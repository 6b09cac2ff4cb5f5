#!/usr/bin/env bash
# A/B of environment switches on the decode step (the V4-Flash-shaped model, LAYERS layers, random weights
# in device memory): for each batch of BATCHES, ROUNDS rounds that run model_bench once under each setting
# of SETTINGS (';'-separated, each a space-separated list of VAR=value, "-" for none), interleaved so that
# drift hits every setting alike; prints ms/step per run.
#   OUT=... SETTINGS="-;DEEPINFER_MHC_SIDE=0" [LAYERS=16] [BATCHES="1 16"] [ROUNDS=2] [CONTEXT=0] tools/gpu_ab_env.sh
set -uo pipefail
OUT=${OUT:-/tmp/gpu_ab}; mkdir -p "$OUT"
d=build-cuda-carry; [ -d "$d" ] || tar xJf build-cuda-xz/carry.tar.xz; export LD_LIBRARY_PATH=$PWD/$d/lib
IFS=';' read -r -a settings <<< "${SETTINGS:--}"
for b in ${BATCHES:-1 16}; do for r in $(seq "${ROUNDS:-2}"); do for s in "${settings[@]}"; do
  envs=(); [[ $s == "-" ]] || read -r -a envs <<< "$s"
  line=$(env "${envs[@]}" timeout 300 $d/bin/model_bench --preset flash --layers "${LAYERS:-16}" --backend cuda \
    --precision "${PRECISION:-exact}" --batch "$b" --context "${CONTEXT:-0}" --prompt "${PROMPT:-128}" \
    --decode "${DECODE:-32}" 2>&1 | grep -E "^backend|rror" | tail -1)
  echo "batch $b round $r [$s]: $(grep -oE "[0-9.]+ ms/step|[0-9.]+ tokens/s$|rror.*" <<< "$line" | tr '\n' ' ')"
done; done; done
