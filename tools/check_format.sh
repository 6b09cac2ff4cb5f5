#!/usr/bin/env bash
# Every tracked C++/CUDA source against the repository's .clang-format (Debian's clang-format 14, which
# tools/setup.sh installs: other major versions format differently, so they skip with exit 77).
#   tools/check_format.sh [--fix]
set -euo pipefail
cd "$(dirname "$0")/.."
git rev-parse --is-inside-work-tree > /dev/null 2>&1 || { echo "check_format: not a git checkout: skipped"; exit 77; }
command -v clang-format > /dev/null || { echo "check_format: clang-format not found (tools/setup.sh installs it)"; exit 77; }
major=$(clang-format --version | sed -n 's/.*version \([0-9]*\).*/\1/p')
[[ $major == 14 ]] || { echo "check_format: clang-format $major, the tree is formatted with 14: skipped"; exit 77; }
mapfile -t files < <(git ls-files 'src/*.cpp' 'src/*.h' 'src/*.cu' 'src/*.cuh' 'tests/*.cpp' 'tests/*.h' \
                                  'bench/*.cpp' 'bench/*.h' 'include/*.h')
if [[ ${1:-} == --fix ]]; then clang-format -i "${files[@]}"; exit 0; fi
bad=()
for f in "${files[@]}"; do clang-format --dry-run -Werror "$f" > /dev/null 2>&1 || bad+=("$f"); done
if (( ${#bad[@]} )); then
  echo "check_format: ${#bad[@]} file(s) differ from .clang-format (tools/check_format.sh --fix):"
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "check_format: ${#files[@]} files formatted"
