#!/usr/bin/env bash
# Two GPU calls for the options written without a GPU (each off until these pass and measure faster), and the
# prefill chunk's measurement the scheduler's CUDA defaults wait for:
#   DEEPINFER_QUANT_IN_KERNELS=1  stream_gemv and the one-token moe mma quantise the native precision's x (and
#                                 h) where they stage it: the quantiser's copy's bits without its launch
#   DEEPINFER_MOE_MMA_STAGES=4|8  the one-token moe mma with its weights staged in shared memory (cp.async),
#                                 4 or 8 chunks ahead a warp: the same sums
#   DEEPINFER_FP8_MMA=2 (or 1)    the native precision's linears at 2 (1) to 16 rows on the FP8 tensor cores
#                                 (linear_fp8mma.cu) instead of cuBLASLt's 128x128 tiles, the f32 kernels on
#                                 the dequantised copy (and split_rows at one row)
#   DEEPINFER_SPLIT_FEW_ROWS=512  matrices of <= 512 rows (the router's gate) on split_rows instead of
#                                 stream_gemv's warp a row (both verified kernels: a dispatch choice)
# PART=tests (~6 min): the bit-for-bit and reference tests of all three (CudaLinearFp8Act's fp8_mma runs,
#   GemvsQuantiseInTheKernelBitForBit, CudaMoe's token-alone runs of the mma cases at 4 and 8 stages and
#   quantised in the kernel), the kernel bench's one-token moe under each stage count and its fp8 GEMM table
#   at 1 and 16 rows (cuBLASLt, fp8_mma), and the 4-layer native prefill of an 8,192-token prompt in chunks
#   of 1,024 to 8,192 tokens (kDefaultPrefillChunkCuda, kDefaultStepTokenBudgetCuda: a larger chunk prefills
#   faster and stalls the decoding sequences that share its steps for longer).
# PART=moe (~2 min): the moe mma cases (staged and quantised in the kernel) and the stage counts' bench.
# PART=model (~9 min): the 16-layer native decode step at batch 1 and 16 under each option and all together
#   (tools/gpu_ab_env.sh), and the batch-1 timeline with all (tools/timeline_report.py).
# PART=ncu (~8 min, where time is left): why the batch-1 step's slow kernels take their time
#   (tools/gpu_ncu_stalls.sh: mHC's finish, route, the MoE and the GEMVs; stall reasons, occupancy), with all,
#   and a 4,096-token prefill's W4A8 MoE, attention and indexer kernels.
# PART=tests also runs CudaPrefixCache (the prefix cache's state copies on the device, bit for bit; prompt
# logprobs from every prefill row's logits against transformers').
# Pack here: BINS="tests/gpu/cuda_ops_test tests/gpu/cuda_model_test bench/model_bench bench/cuda_kernel_bench"
#   tools/gpu_pack.sh (carry ["build-cuda-xz"]), then on the GPU machine: PART=tests OUT=$OUT
#   tools/gpu_next_check.sh, and PART=model.
set -uo pipefail
OUT=${OUT:-/tmp/gpu_next_check}; mkdir -p "$OUT"
d=build-cuda-carry; [[ -d $d ]] || tar xJf build-cuda-xz/carry.tar.xz; export LD_LIBRARY_PATH=$PWD/$d/lib
summary() { grep -E "^\[  FAILED|^\[==========\] [0-9]+ tests|^\[  PASSED|Failure|relative L2" "$1" | head -40; }
all="DEEPINFER_QUANT_IN_KERNELS=1 DEEPINFER_MOE_MMA_STAGES=8 DEEPINFER_FP8_MMA=2 DEEPINFER_SPLIT_FEW_ROWS=512"
if [[ ${PART:-tests} == tests ]]; then
  timeout 200 $d/bin/cuda_ops_test \
    --gtest_filter='*GemvsQuantise*:*CudaLinearFp8Act*:*CudaLinearsFp8Act*:*CudaMoe.MatchesRef/*mma*:*MatchesRef/*one_token*:*CudaActQuant*:*CudaLinear.*' \
    > "$OUT/ops.log" 2>&1
  echo "tests rc $?"; summary "$OUT/ops.log" | grep -v "^fp8\|cuBLASLt FP8" ; grep "fp8_mma relative" "$OUT/ops.log"
  DEEPINFER_TEST_DATA=$PWD/tests/data timeout 90 $d/bin/cuda_model_test --gtest_filter='CudaPrefixCache.*' \
    > "$OUT/prefix_cache.log" 2>&1
  echo "prefix cache rc $?"; summary "$OUT/prefix_cache.log"
  for st in 0 4 8; do
    DEEPINFER_MOE_MMA_STAGES=$st timeout 60 $d/bin/cuda_kernel_bench --only moe --quick > "$OUT/moe_$st.log" 2>&1
    echo "moe stages $st: $(grep -E "n=1,.*\| mma" "$OUT/moe_$st.log" | head -1)"
  done
  timeout 120 $d/bin/cuda_kernel_bench --only gemm --quick > "$OUT/gemm.log" 2>&1
  echo "fp8 gemm rc $?"; grep -E "n=(1|16) \|" "$OUT/gemm.log"
  for chunk in 1024 2048 4096 8192; do
    timeout 60 $d/bin/model_bench --preset flash --layers 4 --backend cuda --precision native --prompt 8192 \
      --prefill-chunk $chunk --decode 2 > "$OUT/chunk_$chunk.log" 2>&1
    echo "prefill chunk $chunk rc $? $(grep -oE "prefill [0-9]+ tokens.*tokens/s" "$OUT/chunk_$chunk.log")"
  done
elif [[ $PART == moe ]]; then
  timeout 150 $d/bin/cuda_ops_test --gtest_filter='*CudaMoe.MatchesRef/*mma*:*MatchesRef/*one_token*' \
    > "$OUT/moe_tests.log" 2>&1
  echo "moe mma tests rc $?"; summary "$OUT/moe_tests.log"
  for st in 0 4 8; do
    DEEPINFER_MOE_MMA_STAGES=$st timeout 60 $d/bin/cuda_kernel_bench --only moe --quick > "$OUT/moe_$st.log" 2>&1
    echo "moe stages $st: $(grep -E "n=1,.*\| mma" "$OUT/moe_$st.log" | head -1)"
  done
elif [[ $PART == ncu ]]; then
  env $all OUT=$OUT/ncu BATCH=1 LAYERS=4 NCU_TIMEOUT=280 timeout 290 tools/gpu_ncu_stalls.sh
  OUT=$OUT/ncu LAYERS=4 PROMPT=4096 DECODE=1 SKIP=0 COUNT=8 NCU_TIMEOUT=280 \
    KERNELS='moe_w4a8_kernel|attention_mma64|indexer_mma' timeout 290 tools/gpu_ncu_stalls.sh
else
  OUT=$OUT/ab PRECISION=native BATCHES="1 16" ROUNDS=1 DECODE=16 \
    SETTINGS="-;DEEPINFER_QUANT_IN_KERNELS=1;DEEPINFER_MOE_MMA_STAGES=8;DEEPINFER_FP8_MMA=2;DEEPINFER_FP8_MMA=1;DEEPINFER_SPLIT_FEW_ROWS=512;$all" \
    timeout 470 tools/gpu_ab_env.sh
  env $all OUT=$OUT/tl PRECISION=native BATCH=1 LAYERS=16 TRACE_TIMEOUT=50 timeout 60 tools/gpu_timeline.sh \
    2>/dev/null | head -14
fi
exit 0
