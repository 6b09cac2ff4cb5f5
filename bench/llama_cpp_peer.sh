#!/usr/bin/env bash
# Peer benchmark on the CPU: deepinfer's cpu backend against llama.cpp on the same checkpoint, the same
# machine and thread counts, runs interleaved. llama.cpp comes from PyPI's llama-cpp-python source
# distribution (which bundles it; fetched at run time into the work folder, never committed): its
# llama-bench is built for this CPU and its own converter (run in a venv with its pinned requirements)
# turns the checkpoint into GGUF (FP4 experts -> MXFP4, FP8 -> Q8_0, BF16 kept). A random bench checkpoint
# (no tokenizer) borrows the demo model's, so its vocabulary must be the tokenizer's 129,280 (`--preset
# mid-fullvocab`): the converter takes only tokenizers it recognises.
#   bench/llama_cpp_peer.sh [--model DIR | --preset demo|mid-fullvocab] [--threads "1 2"] [--prompt 64] [--decode 16]
#                           [--reps 3] [--work build-peer] [--deepinfer build-cpu] [--precision exact|native|both]
# --precision: deepinfer's (native: FP8 linears on e4m3 activation blocks, as DeepSeek's inference code and as
# llama.cpp's Q8_0 x Q8 activations quantise theirs; both: a column each).
set -euo pipefail
model="" preset=demo threads="1 2" prompt=64 decode=16 reps=3 work=build-peer bin=build-cpu precision=exact
while [[ $# -gt 0 ]]; do
  case $1 in
    --model) model=$2 ;; --preset) preset=$2 ;; --threads) threads=$2 ;; --prompt) prompt=$2 ;;
    --decode) decode=$2 ;; --reps) reps=$2 ;; --work) work=$2 ;; --deepinfer) bin=$2 ;; --precision) precision=$2 ;;
    *) echo "llama_cpp_peer.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
version=0.3.36
mkdir -p "$work"
work=$(cd "$work" && pwd)
src="$work/llama_cpp_python-$version/vendor/llama.cpp"

# 1. llama.cpp from the registry, llama-bench built for this machine
if [[ ! -x $src/build/bin/llama-bench ]]; then
  [[ -d $src ]] || { pip download --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$work" &&
                     tar xzf "$work/llama_cpp_python-$version.tar.gz" -C "$work"; }
  cmake -S "$src" -B "$src/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF > "$work/cmake.log"
  cmake --build "$src/build" --target llama-bench -j"$(nproc)" > "$work/build.log"
fi
# 2. the converter's environment (its own requirements pins)
if [[ ! -x $work/venv/bin/python ]]; then
  python3 -m venv "$work/venv"
  "$work/venv/bin/pip" install -q 'torch==2.11.0' 'numpy~=2.2.6' sentencepiece 'transformers==4.57.6' \
    'protobuf>=4.21,<5' safetensors "$src/gguf-py"
fi
# 3. the checkpoint: a given one, or the bench preset deepinfer's model_bench writes
if [[ -z $model ]]; then
  if [[ $preset == demo ]]; then
    "$bin/deepinfer" run --prompt Hi --max-new-tokens 1 > /dev/null 2>&1  # creates the demo model in the cache
    model=$(ls -d "${DEEPINFER_CACHE:-$HOME/.cache/deepinfer}"/demo-v4-* | tail -1)
  else
    "$bin/bench/model_bench" --preset "$preset" --backend cpu --prompt 1 --decode 1 > /dev/null
    model=${TMPDIR:-/tmp}/deepinfer-bench-$preset
  fi
fi
name=$(basename "$model")
stage="$work/hf-$name"
mkdir -p "$stage"
for f in "$model"/*; do ln -sf "$(realpath "$f")" "$stage/$(basename "$f")"; done
if [[ ! -e $model/tokenizer.json ]]; then  # a random bench model: the demo's tokenizer, if the vocabularies agree
  demo=$(ls -d "${DEEPINFER_CACHE:-$HOME/.cache/deepinfer}"/demo-v4-* 2>/dev/null | tail -1)
  [[ -n $demo ]] || { "$bin/deepinfer" run --prompt Hi --max-new-tokens 1 > /dev/null 2>&1;
                      demo=$(ls -d "${DEEPINFER_CACHE:-$HOME/.cache/deepinfer}"/demo-v4-* | tail -1); }
  want=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$model/config.json")
  if [[ $want != 129280 ]]; then
    echo "llama_cpp_peer.sh: $model has no tokenizer and vocab_size $want; llama.cpp's converter needs a tokenizer" \
         "it recognises (use --preset mid-fullvocab: the mid model with the tokenizer's 129,280 tokens)" >&2
    exit 1
  fi
  ln -sf "$demo/tokenizer.json" "$stage/tokenizer.json"
  ln -sf "$demo/tokenizer_config.json" "$stage/tokenizer_config.json"
fi
gguf="$work/$name.gguf"
[[ -s $gguf ]] || "$work/venv/bin/python" "$src/convert_hf_to_gguf.py" "$stage" --outfile "$gguf" > "$work/convert-$name.log" 2>&1 ||
  { tail -20 "$work/convert-$name.log"; exit 1; }

# 4. both engines, interleaved, warm-up included (llama-bench warms up itself; model_bench runs the same prompt
#    untimed first).
# Bytes per decode step as ../shared/tools/v4_decode_bytes.py counts them for this config (where that tool
# is present; the same count for both engines: the checkpoint's formats), against the read bandwidth of a
# parallel sum measured before each thread count's runs.
bytes_tool=${DEEPINFER_BYTES_TOOL:-$(dirname "$0")/../../shared/tools/v4_decode_bytes.py}
mb=""
if [[ -f $bytes_tool ]]; then
  mb=$(python3 "$bytes_tool" --config "$model/config.json" --batch 1 --context $((prompt + decode / 2)) |
       sed -n 's/ *total: *\([0-9.]*\) MB.*/\1/p')
fi
echo "model $model ($(du -shL "$model" | cut -f1)), gguf $(du -sh "$gguf" | cut -f1); prompt $prompt, decode $decode;" \
     "bytes per decode step ${mb:-?} MB"
# llama.cpp's weight repacking (its AVX-512 layouts) aborts on this model family in 0c1e57098
# (GGML_ASSERT(*cur_backend_id != -1)); where it does, both thread counts run with --repack 0, said below.
repack=""
"$src/build/bin/llama-bench" -m "$gguf" -t 1 -p 8 -n 1 -r 1 -o csv > /dev/null 2>&1 || {
  repack="--repack 0"; echo "llama-bench aborts with its default weight repacking here: runs with --repack 0"; }
precs=$precision; [[ $precision == both ]] && precs="exact native"
printf "| threads | read GB/s | rep | deepinfer precision | deepinfer decode tok/s | %% of read BW | llama.cpp decode tok/s | %% of read BW | deepinfer prefill tok/s | llama.cpp prefill tok/s |\n"
printf "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|\n"
pct() { [[ -n $mb ]] && python3 -c "print(f'{100 * $1 * $mb / 1e3 / $2:.0f}%')" || echo "?"; }
for t in $threads; do
  bw=$("$bin/bench/cpu_ops_bench" --read-bandwidth --threads "$t")
  for r in $(seq "$reps"); do for p in $precs; do
    di=$(DEEPINFER_THREADS=$t "$bin/bench/model_bench" --model "$model" --backend cpu --precision "$p" --prompt "$prompt" \
         --decode "$decode" | sed -n 's/.*= \([0-9.]*\) tokens\/s; decode .* = \([0-9.]*\) tokens\/s.*/\1 \2/p')
    lc=$("$src/build/bin/llama-bench" -m "$gguf" -t "$t" -p "$prompt" -n "$decode" -r 1 $repack -o csv 2>/dev/null |
         python3 -c 'import csv,sys; rows=[r for r in csv.DictReader(sys.stdin) if r.get("n_prompt")]; d={("pp" if int(r["n_prompt"]) else "tg"): float(r["avg_ts"]) for r in rows}; print(d.get("pp",0), d.get("tg",0))')
    read -r di_pp di_tg <<< "$di"
    read -r lc_pp lc_tg <<< "$lc"
    printf "| %s | %s | %s | %s | %s | %s | %.2f | %s | %s | %.1f |\n" "$t" "$bw" "$r" "$p" "$di_tg" "$(pct "$di_tg" "$bw")" \
      "$lc_tg" "$(pct "$lc_tg" "$bw")" "$di_pp" "$lc_pp"
  done; done
done
