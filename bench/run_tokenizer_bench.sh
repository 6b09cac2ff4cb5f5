#!/usr/bin/env bash
# Encode throughput, deepinfer vs Hugging Face tokenizers, same texts, same machine, one thread each.
# Usage: bench/run_tokenizer_bench.sh BUILD_DIR [PYTHON]   (PYTHON needs `tokenizers`; default /opt/refenv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-cpu}
py=${2:-/opt/refenv/bin/python}
dir=$($py tools/tokenizer_bench_texts.py /tmp/tokbench)
echo "machine: $(uname -m) $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); commit $(git rev-parse --short HEAD)"
for f in "$dir"/prose_code.txt "$dir"/mixed.txt; do
    for mode in lines whole; do
        taskset -c 0 "$build"/bench/tokenizer_bench assets/tokenizer "$f" 3 $mode
        taskset -c 0 "$py" tools/tokenizer_bench_hf.py assets/tokenizer/tokenizer.json "$f" 3 $mode
    done
done
