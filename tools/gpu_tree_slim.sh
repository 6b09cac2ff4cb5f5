#!/usr/bin/env bash
# A device call carries the tracked tree with the pack, 64 MiB in all, and the tree alone is ~62 MB: this moves
# the test data no GPU test or benchmark reads (the tokenizer's vectors and the two fp32 fixtures, ~33 MB; the
# GPU tests read v4_tiny_fp8 and v4_tiny_bf16) out of the tree before a call and back after it.
#   tools/gpu_tree_slim.sh out    (before the call)
#   tools/gpu_tree_slim.sh back   (after it; git status must then be clean of them)
set -euo pipefail
cd "$(dirname "$0")/.."
hold=${DEEPINFER_SLIM_HOLD:-/tmp/deepinfer_slim_hold}
dirs=(tests/data/tokenizer tests/data/v4_tiny_fp32 tests/data/v4_tiny_fp32_nested)
case ${1:-} in
  out)
    mkdir -p "$hold"
    for d in "${dirs[@]}"; do
      [[ -e $hold/$(basename "$d") ]] && { echo "gpu_tree_slim: $hold already holds $(basename "$d")"; exit 1; }
      mv "$d" "$hold/"
    done
    echo "gpu_tree_slim: moved ${dirs[*]} to $hold" ;;
  back)
    for d in "${dirs[@]}"; do
      [[ -e $hold/$(basename "$d") ]] && mv "$hold/$(basename "$d")" "$(dirname "$d")/"
    done
    git status --short -- tests/data | grep -q . && { echo "gpu_tree_slim: tests/data differs from git"; exit 1; }
    echo "gpu_tree_slim: tests/data back" ;;
  *) echo "usage: tools/gpu_tree_slim.sh out|back"; exit 2 ;;
esac
