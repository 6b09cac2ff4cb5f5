#!/usr/bin/env bash
# One GPU call for the native precision (fp8 activation blocks, cuBLASLt FP8 GEMMs): the op tests of the fp8
# paths and the linear regressions, the FP8 GEMM benchmark, v4_tiny_fp8 scored on cuda and ref in both
# precisions, the V4-Flash-shaped model in both precisions, and (on the CPU cores meanwhile) transformers'
# native and bf16 goldens of v4_tiny_fp8 (tools/fixtures_native.py; the accelerate/psutil wheels it needs are
# carried in build-wheels/, the machine has no registry).
#   OUT=... tools/gpu_native_check.sh   (on the GPU machine, with build-cuda-xz and build-wheels carried)
set -uo pipefail
OUT=${OUT:-/tmp/gpu_native_check}; mkdir -p "$OUT"
d=build-cuda-carry; tar xJf build-cuda-xz/carry.tar.xz; export LD_LIBRARY_PATH=$PWD/$d/lib
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
py=$PWD/build-pylib; mkdir -p "$py"; for w in build-wheels/*.whl; do python3 -m zipfile -e "$w" "$py" 2>/dev/null; done
(PYTHONPATH=$py timeout 400 python3 tools/fixtures_native.py tests/data/v4_tiny_fp8 "$OUT/native" > "$OUT/hf_native.log" 2>&1; echo "fixtures_native exit $?" >> "$OUT/hf_native.log") &
hf=$!
timeout 240 $d/bin/cuda_ops_test --gtest_filter="${GTEST_FILTER:-*Fp8Act*:CudaActQuant*:*CudaLinear*}" > $OUT/tests.log 2>&1
echo "cuda_ops_test exit $?"; grep -E "^\[  FAILED|^\[==========\]|^\[  PASSED|Failure|relative L2" $OUT/tests.log | head -40
timeout 150 $d/bin/cuda_kernel_bench --only gemm --out $OUT/gemm.md > $OUT/gemm.log 2>&1; echo "gemm bench exit $?"; cat $OUT/gemm.md
m=tests/data/v4_tiny_fp8
for be in cuda ref; do for p in exact native; do
  $d/bin/deepinfer score --backend $be --precision $p --model $m --tokens-file $m/prompt.txt --logits-out $OUT/fp8_${be}_$p.npy > $OUT/score_${be}_$p.log 2>&1 || tail -2 $OUT/score_${be}_$p.log
done; done
python3 tools/compare_logits.py $OUT/fp8_cuda_exact.npy $m/logits.npy --tol 1e-3 | tail -1
python3 tools/compare_logits.py $OUT/fp8_cuda_native.npy $OUT/fp8_ref_native.npy --tol 1e-3 | tail -1
# per op, the same inputs on both backends (no drift through quantisation boundaries): must agree
$d/bin/deepinfer score --backend cuda --precision native --compare-with ref --model $m --tokens-file $m/prompt.txt 2>&1 | tail -2
for p in exact native; do for n in 512 4096; do
  timeout 150 $d/bin/model_bench --preset flash --backend cuda --precision $p --prompt $n --decode 8 > $OUT/model_${p}_$n.log 2>&1; grep -E "^backend|rror" $OUT/model_${p}_$n.log
done; done
wait $hf; cat $OUT/hf_native.log
for be in ref cuda; do [ -f $OUT/native/logits_native.npy ] && python3 tools/compare_logits.py $OUT/fp8_${be}_native.npy $OUT/native/logits_native.npy --tol 1e-3 | tail -1; done
[ -f $OUT/native/logits_bf16.npy ] && python3 tools/compare_logits.py $OUT/native/logits_bf16.npy $m/logits.npy --tol 1 | tail -1
exit 0
