#!/usr/bin/env bash
# One GPU call for the native precision (fp8 activation blocks, cuBLASLt FP8 GEMMs): the fp8 op tests,
# v4_tiny_fp8 per op against ref (compare mode) and whole against transformers' native golden, the
# V4-Flash-shaped model in both precisions, with BENCH=1 the FP8 GEMM benchmark too. With build-wheels/
# carried (accelerate and psutil wheels: the machine has no registry) it also regenerates transformers'
# native and bf16 goldens of v4_tiny_fp8 on the CPU cores meanwhile (tools/fixtures_native.py) into $OUT.
#   OUT=... [BENCH=1] [PROMPTS="512 4096"] tools/gpu_native_check.sh   (on the GPU machine, build-cuda-xz carried)
set -uo pipefail
OUT=${OUT:-/tmp/gpu_native_check}; mkdir -p "$OUT"
d=build-cuda-carry; tar xJf build-cuda-xz/carry.tar.xz; export LD_LIBRARY_PATH=$PWD/$d/lib
if [ -d build-wheels ]; then
  py=$PWD/build-pylib; mkdir -p "$py"; for w in build-wheels/*.whl; do python3 -m zipfile -e "$w" "$py"; done
  (PYTHONPATH=$py timeout 400 python3 tools/fixtures_native.py tests/data/v4_tiny_fp8 "$OUT" > /tmp/hf_native.log 2>&1) &
fi
timeout 240 $d/bin/cuda_ops_test --gtest_filter="${GTEST_FILTER:-*Fp8Act*:CudaActQuant*}" > $OUT/tests.log 2>&1
echo "cuda_ops_test exit $?"; grep -E "^\[  FAILED|^\[==========\]|^\[  PASSED|Failure" $OUT/tests.log | head -30
grep "relative L2" $OUT/tests.log | awk '{print $7}' | sort -g | tail -1 | sed 's/^/worst cuBLASLt relative L2: /'
if [ -n "${BENCH:-}" ]; then
  timeout 150 $d/bin/cuda_kernel_bench --only gemm --out /tmp/gemm.md > /tmp/gemm.log 2>&1; echo "gemm bench exit $?"; cat /tmp/gemm.md
fi
m=tests/data/v4_tiny_fp8
$d/bin/deepinfer score --backend cuda --precision native --compare-with ref --model $m --tokens-file $m/prompt.txt 2>&1 | tail -2
for be in cuda ref; do $d/bin/deepinfer score --backend $be --precision native --model $m --tokens-file $m/prompt.txt --logits-out /tmp/n_$be.npy > /dev/null 2>&1; done
for p in exact native; do for n in ${PROMPTS:-512 4096}; do
  timeout 150 $d/bin/model_bench --preset flash --backend cuda --precision $p --prompt $n --decode 8 ${PROFILE:+--profile $PROFILE} > $OUT/model.log 2>&1; grep -E "^backend|rror" $OUT/model.log
done; done
[ -n "${PROFILE:-}" ] && tail -45 $OUT/model.log
wait; [ -f /tmp/hf_native.log ] && grep -v Loading /tmp/hf_native.log | tail -3
golden=$OUT/logits_native.npy; [ -f $golden ] || golden=$m/logits_native.npy
for be in cuda ref; do python3 tools/compare_logits.py /tmp/n_$be.npy $golden --tol 1e-3 | tail -1; done
exit 0
