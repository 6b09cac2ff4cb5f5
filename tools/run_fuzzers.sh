#!/usr/bin/env bash
# Builds the libFuzzer targets with clang into build-fuzz/ and runs each for SECONDS (default 20) on a
# scratch copy of its seed corpus: the safetensors header parser, config.json, the admission arithmetic
# with the scheduler, the OpenAI / Anthropic request parsers, tokenizer.json, the DSML output parser and
# the V4 tokenizer's encode / decode round trip. A crash, sanitizer report or leak fails
# (exit 1, the reproducer is named in the log).
# Exit 77 (ctest: skipped) where clang or its libFuzzer runtime is missing.
#   [FUZZ_SEED=N] tools/run_fuzzers.sh [SECONDS]
set -uo pipefail
secs=${1:-20}
# A fixed seed: the suite's run is the start of one sequence, so a failure in CI reproduces here and a longer
# run here covers what CI will try. FUZZ_SEED=0 (libFuzzer's "random") to hunt instead.
seed=${FUZZ_SEED:-1}
cd "$(dirname "$0")/.."
root=$PWD
if ! command -v clang++ >/dev/null; then echo "SKIP: clang++ not found"; exit 77; fi
probe=$(mktemp -d)
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' > "$probe/p.cpp"
if ! clang++ -fsanitize=fuzzer "$probe/p.cpp" -o "$probe/p" 2>/dev/null; then
  echo "SKIP: clang++ has no libFuzzer runtime (Debian: libclang-rt-dev)"; rm -rf "$probe"; exit 77
fi
rm -rf "$probe"
if ! { cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang -DDEEPINFER_FUZZ=ON \
         -DDEEPINFER_CUDA=OFF -DDEEPINFER_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >build-fuzz.log 2>&1 &&
       cmake --build build-fuzz -j"$(nproc)" --target fuzz_safetensors fuzz_config fuzz_admission fuzz_requests \
         fuzz_tokenizer_json fuzz_dsml_parser fuzz_tokenizer_encode \
         >>build-fuzz.log 2>&1; }; then
  tail -20 build-fuzz.log; echo "run_fuzzers: the build failed (build-fuzz.log)"; exit 1
fi
rc=0
for t in fuzz_safetensors:tests/fuzz/corpus fuzz_config:tests/fuzz/corpus_config fuzz_admission: \
         fuzz_requests:tests/fuzz/corpus_requests fuzz_tokenizer_json:tests/fuzz/corpus_tokenizer_json \
         fuzz_dsml_parser:tests/fuzz/corpus_dsml fuzz_tokenizer_encode:tests/fuzz/corpus_encode; do
  name=${t%%:*} seeds=${t#*:}
  work=$(mktemp -d)
  [[ -n $seeds ]] && cp -r "$root/$seeds/." "$work/"
  if (cd "$work" && "$root/build-fuzz/tests/fuzz/$name" -seed="$seed" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 . >"$work.log" 2>&1); then
    echo "$name: $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work.log" | grep -o '[0-9]*$') runs in ${secs} s, no failure"
  else
    echo "$name FAILED:"; tail -30 "$work.log"; rc=1
  fi
  rm -rf "$work" "$work.log"
done
exit $rc
