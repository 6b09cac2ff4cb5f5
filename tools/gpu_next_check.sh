#!/usr/bin/env bash
# One GPU call for what was written after the device time of 2026-12-04 was spent (or lent no machine), and the prefill chunk's measurement
# the scheduler's CUDA defaults wait for (~5 min):
# - the in-kernel quantisation (DEEPINFER_QUANT_IN_KERNELS, off): its bit-for-bit tests against the quantiser's
#   copy (stream_gemv; the one-token moe mma through CudaMoe's token-alone check), with the quantiser's own,
#   the one-token MoE and the linear cases (5a81f9b rewrote their shared chunking and round trip after the
#   device time was spent);
# - the one-token moe mma with its weights staged in shared memory (DEEPINFER_MOE_MMA_STAGES=4|8, off): its
#   bit-for-bit check (CudaMoe's token-alone runs of the mma cases) and the kernel bench's one-token moe under
#   each setting;
# - the 16-layer native decode step at batch 1 and 16 with and without each (tools/gpu_ab_env.sh) and the
#   timeline with both (tools/timeline_report.py's exposed times);
# - the 4-layer native prefill of a 8,192-token prompt in chunks of 1,024, 2,048, 4,096 and 8,192 tokens: the
#   prefill rate a chunk size gives (kDefaultPrefillChunkCuda, kDefaultStepTokenBudgetCuda: a larger chunk
#   prefills faster and stalls the decoding sequences that share its steps for longer).
#   BINS="tests/gpu/cuda_ops_test bench/model_bench bench/cuda_kernel_bench" tools/gpu_pack.sh   (here; device tool carry ["build-cuda-xz"])
#   OUT=$OUT tools/gpu_next_check.sh
set -uo pipefail
OUT=${OUT:-/tmp/gpu_next_check}; mkdir -p "$OUT"
d=build-cuda-carry; [[ -d $d ]] || tar xJf build-cuda-xz/carry.tar.xz; export LD_LIBRARY_PATH=$PWD/$d/lib
summary() { grep -E "^\[  FAILED|^\[==========\] [0-9]+ tests|^\[  PASSED|Failure" "$1" | head -12; }
timeout 150 $d/bin/cuda_ops_test \
  --gtest_filter='*GemvsQuantise*:*CudaLinearFp8Act*:*CudaMoe.MatchesRef/*mma*:*MatchesRef/*one_token*:*CudaActQuant*:*CudaLinear.*' \
  > "$OUT/ops.log" 2>&1
echo "in-kernel quantisation and staged moe tests rc $?"; summary "$OUT/ops.log"
for st in 0 4 8; do
  DEEPINFER_MOE_MMA_STAGES=$st timeout 60 $d/bin/cuda_kernel_bench --only moe --quick > "$OUT/moe_$st.log" 2>&1
  echo "moe stages $st: $(grep -E "n=1,.*\| mma" "$OUT/moe_$st.log" | head -1)"
done
OUT=$OUT/ab PRECISION=native BATCHES="1 16" ROUNDS=1 DECODE=16 \
  SETTINGS="-;DEEPINFER_QUANT_IN_KERNELS=1;DEEPINFER_MOE_MMA_STAGES=8;DEEPINFER_QUANT_IN_KERNELS=1 DEEPINFER_MOE_MMA_STAGES=8" \
  timeout 240 tools/gpu_ab_env.sh
DEEPINFER_QUANT_IN_KERNELS=1 DEEPINFER_MOE_MMA_STAGES=8 OUT=$OUT/tl PRECISION=native BATCH=1 LAYERS=16 \
  TRACE_TIMEOUT=60 timeout 70 tools/gpu_timeline.sh 2>/dev/null | head -14
for chunk in 1024 2048 4096 8192; do
  timeout 60 $d/bin/model_bench --preset flash --layers 4 --backend cuda --precision native --prompt 8192 \
    --prefill-chunk $chunk --decode 2 > "$OUT/chunk_$chunk.log" 2>&1
  echo "prefill chunk $chunk rc $? $(grep -oE "prefill [0-9]+ tokens.*tokens/s" "$OUT/chunk_$chunk.log")"
done
exit 0
