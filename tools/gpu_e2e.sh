#!/usr/bin/env bash
# Whole-model checks of the CUDA backend on the GPU machine, from a carried folder made by
# tools/gpu_pack.sh (bin/deepinfer, bin/model_bench), reading the golden fixtures from tests/data:
# golden logits, greedy continuation vs transformers, compare mode vs ref, determinism, and throughput.
#   tools/gpu_e2e.sh [carry-dir=build-cuda-carry]      (results under $OUT, default ./gpu-e2e-out)
set -uo pipefail
dir=${1:-build-cuda-carry}
out=${OUT:-gpu-e2e-out}
mkdir -p "$out"
export LD_LIBRARY_PATH="$dir/lib:${LD_LIBRARY_PATH:-}"
di="$dir/bin/deepinfer"
status=0
for fx in v4_tiny_fp32 v4_tiny_fp32_nested v4_tiny_fp8 v4_tiny_bf16; do
  m="tests/data/$fx"
  golden="$m/logits.npy"; [ -f "$m/logits_fp32.npy" ] && golden="$m/logits_fp32.npy"
  "$di" score --backend cuda --model "$m" --tokens-file "$m/prompt.txt" --logits-out "$out/$fx.cuda.npy" || status=1
  "$di" score --backend cuda --model "$m" --tokens-file "$m/prompt.txt" --logits-out "$out/$fx.cuda2.npy" || status=1
  python3 tools/compare_logits.py "$out/$fx.cuda.npy" "$golden" --tol 1e-3 || status=1
  if cmp -s "$out/$fx.cuda.npy" "$out/$fx.cuda2.npy"; then echo "$fx: two runs bit-identical"; else echo "$fx: runs differ"; status=1; fi
  "$di" score --backend cuda --model "$m" --tokens-file "$m/prompt.txt" --chunk 1 --logits-out "$out/$fx.decode.npy" >/dev/null || status=1
  python3 tools/compare_logits.py "$out/$fx.decode.npy" "$golden" --tol 1e-3 || status=1
  "$di" score --backend cuda --model "$m" --tokens-file "$m/prompt.txt" --compare-with ref --compare-tol 1e-3 | tail -3
done
for fx in v4_tiny_fp32 v4_tiny_fp32_nested; do
  g="tests/data/$fx/greedy.json"
  prompt=$(python3 -c "import json;print(','.join(map(str,json.load(open('$g'))['prompt'])))")
  want=$(python3 -c "import json;print(json.load(open('$g'))['continuation'])" | tr -d ' ')
  got=$("$di" generate --backend cuda --model "tests/data/$fx" --tokens "$prompt" --temperature 0 \
        --max-new-tokens 130 --min-new-tokens 130 --output ids | tr -d ' ')
  if [ "$got" == "$want" ]; then echo "$fx: greedy 130 tokens equal transformers"; else echo "$fx: greedy differs"; status=1; fi
done
"$dir/bin/model_bench" --backend cuda --preset mid --prompt 512 --decode 32 2>&1 | tee -a "$out/bench.txt"
"$dir/bin/model_bench" --backend cuda --preset mid --prompt 64 --decode 8 2>&1 | tee -a "$out/bench.txt"
"$dir/bin/model_bench" --backend cpu --preset mid --prompt 64 --decode 8 2>&1 | tee -a "$out/bench.txt"
exit $status
