#!/usr/bin/env bash
# Three GPU calls for the prefill work (issue 11), each within a call's 10-minute limit.
# Part 1 (~4 min): mHC's and the fused ops' cases and the golden fixtures (deepinfer score), the prefill MoE
# variants on V4-Flash's expert shape against the reference, the MoE kernels' rates, the instruction shape's
# own rate (wgmma_probe), the dense cuBLASLt rates.
# Part 2 (~8 min): Nsight Compute's view of the moe `wgmma` kernel and of mHC's split and finish kernels
# (speed of light, stall reasons), the 4-layer V4-Flash-shaped model's 4,096-token prefill in both precisions,
# profiled and not, its kernel timeline, transformers bf16 eager beside it, and the 256-expert wgmma cases
# last (drawing their experts takes ~40 s).
# Part 3 (~6 min): the options off by default (DEEPINFER_ATTN_WGMMA, mma64's queries on the warpgroup tensor
# cores; DEEPINFER_W4A8_WS, the warp-specialised w4a8 kernel; DEEPINFER_W4A8_UNITS, its token copies by 32-bit
# unit offsets; DEEPINFER_W4A8_N64, 64-row tiles where an expert averages <= 64 pairs): their tests, the model
# at 4K and 1K prefill chunks with each in OPTS (default "none DEEPINFER_ATTN_WGMMA=1"), for none and
# w4a8's the MoE kernel's rate, and attention prefill's TFLOP/s (cuda_kernel_bench --only attention_prefill).
#   OUT=... tools/gpu_prefill_check.sh 1|2   (on the GPU machine, device tool carry ["build-cuda-xz"], packed with
#   part 1: BINS="tests/gpu/cuda_ops_test bench/cuda_kernel_bench deepinfer bench/wgmma_probe"
#   parts 2 and 3: BINS="tests/gpu/cuda_ops_test bench/cuda_kernel_bench bench/model_bench"; the 64 MiB a call carries
#   hold the tracked tree and three or four binaries)
set -uo pipefail
part=${1:-1}
OUT=${OUT:-/tmp/gpu_prefill_check}; mkdir -p "$OUT"
d=build-cuda-carry; [[ -d $d ]] || tar xJf build-cuda-xz/carry.tar.xz; export LD_LIBRARY_PATH=$PWD/$d/lib
summary() { grep -E "^\[  FAILED|^\[==========\] [0-9]+ tests|^\[  PASSED|Failure" "$1" | head -12; }
if [[ $part == 1 ]]; then
timeout 150 $d/bin/cuda_ops_test --gtest_filter='*CudaMhc*:*CudaFused*:*CudaAttention*:*CudaIndexer*' \
  > "$OUT/mhc.log" 2>&1
echo "mhc, fused, attention, indexer rc $?"; summary "$OUT/mhc.log"
timeout 40 tools/gpu_goldens.sh $d/bin "$OUT"
timeout 240 $d/bin/cuda_ops_test --gtest_filter='*CudaMoe*w4a8*:*CudaMoe*wgmma*:*CudaMoe*native*:-*flash*' > "$OUT/moe.log" 2>&1
echo "moe rc $?"; summary "$OUT/moe.log"
timeout 200 $d/bin/cuda_kernel_bench --only moe_prefill > "$OUT/kb_moe.log" 2>&1; echo "kernel bench moe rc $?"
grep -E "^\| moe fp4 n=(2730|4096)" "$OUT/kb_moe.log"
# the instruction shape's own ceiling (no memory traffic), with and without the fp4 conversion
[ -x $d/bin/wgmma_probe ] && timeout 60 $d/bin/wgmma_probe | tee "$OUT/wgmma_probe.txt"
timeout 120 $d/bin/cuda_kernel_bench --quick --only gemm > "$OUT/kb_gemm.log" 2>&1; echo "kernel bench gemm rc $?"
grep -E "dense|cuBLASLt|n=4096" "$OUT/kb_gemm.log" | head -12
exit 0
fi
if [[ $part == 3 ]]; then
# the options written without a GPU (off by default): their tests (top_candidates and argmax too; with the case table's row-wise, route and
# mHC cases), then the model (4K and 1K chunks) with each, its attention kernels' times, and the MoE kernel's
# rate with w4a8's
timeout 240 $d/bin/cuda_ops_test --gtest_filter='*CudaAttention*:*CudaSmallOps*:*CudaRoute*:*CudaLinearsFp8Act*:*CudaMoeW4a8*:*native_fp4*_w4a8:*CudaMhc*:*CudaFused*:*CudaTopCandidates*:*CudaArgmax*' \
  > "$OUT/new.log" 2>&1
echo "attention, w4a8 options and mHC tests rc $?"; summary "$OUT/new.log"
for opt in ${OPTS:-none DEEPINFER_ATTN_WGMMA=1}; do
  for chunk in 4096 1024; do
    env $([[ $opt != none ]] && echo $opt) timeout 60 $d/bin/model_bench --preset flash --layers 4 --backend cuda \
      --precision native --prompt 4096 --prefill-chunk $chunk --decode 2 > "$OUT/model_${opt%%=*}_$chunk.log" 2>&1
    echo "model, $opt, chunk $chunk rc $?"; grep -E "^backend" "$OUT/model_${opt%%=*}_$chunk.log"
  done
  # the attention kernels' times in the 4K prefill (the CUPTI trace, where the pack has it)
  if [[ -f $d/lib/libkernel_trace.so ]]; then
    env $([[ $opt != none ]] && echo $opt) CUDA_INJECTION64_PATH=$PWD/$d/lib/libkernel_trace.so \
      DEEPINFER_TRACE_OUT="$OUT/trace_${opt%%=*}.csv" timeout 60 $d/bin/model_bench --preset flash --layers 4 \
      --backend cuda --precision native --prompt 4096 --decode 2 > /dev/null 2>&1
    python3 tools/trace_totals.py "$OUT/trace_${opt%%=*}.csv" 40 --calls 4 | grep -A1 -E "attention|key_rows"
  fi
  [[ $opt == none || $opt == DEEPINFER_W4A8_* ]] || continue
  env $([[ $opt != none ]] && echo $opt) timeout 150 $d/bin/cuda_kernel_bench --only moe_prefill \
    > "$OUT/kb_moe_${opt%%=*}.log" 2>&1
  echo "kernel bench moe, $opt rc $?"; grep -E "n=(2730|4096).*native" "$OUT/kb_moe_${opt%%=*}.log"
done
# attention prefill in TFLOP/s: mma64 with and without the warpgroup kernel, and mma
timeout 120 $d/bin/cuda_kernel_bench --only attention_prefill > "$OUT/kb_attn.log" 2>&1
echo "kernel bench attention prefill rc $?"; grep -E "^\| 4,096|BF16 cuBLASLt" "$OUT/kb_attn.log"
exit 0
fi
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
timeout 150 "$ncu" -k "regex:moe_wgmma_kernel" --launch-skip 2 --launch-count 1 --section SpeedOfLight \
  --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section WarpStateStats \
  --section Occupancy --print-summary none $d/bin/cuda_kernel_bench --only moe_prefill > "$OUT/ncu.txt" 2>&1
echo "ncu rc $?"; grep -vE "^\s*$|^==PROF==|----" "$OUT/ncu.txt" | grep -vi "OPT \|INF " | cut -c1-150 | head -70
# mHC's pre at a prefill's size (the warm-up prefill's first split and finish launches): ~430 and ~300 us a
# call where the bytes take ~70 and ~100
timeout 120 "$ncu" -k "regex:mhc_split" --launch-count 2 --section SpeedOfLight --section WarpStateStats \
  --section Occupancy --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio \
  --print-summary none $d/bin/model_bench --preset flash --layers 4 --backend cuda --precision native \
  --prompt 4096 --decode 1 > "$OUT/ncu_mhc.txt" 2>&1
echo "ncu mhc rc $?"; grep -E "mhc_split|Duration|Throughput|Issued|stalled|Registers|Achieved" "$OUT/ncu_mhc.txt" \
  | awk '$NF != "0" && $NF != "0.00"' | cut -c1-130 | head -50
for pr in native exact; do
  for prof in 0 1; do
    timeout 120 $d/bin/model_bench --preset flash --layers 4 --backend cuda --precision $pr --prompt 4096 \
      --decode 2 --profile $prof > "$OUT/model_${pr}_p$prof.log" 2>&1
    echo "model $pr profile $prof rc $?"; grep -E "^backend" "$OUT/model_${pr}_p$prof.log"
    [[ $prof == 1 ]] && grep -E "^\| (moe|attention|linear|mhc_pre_norm|total) " "$OUT/model_${pr}_p$prof.log" | head -6
  done
done
# each kernel's share of the native prefill (CUPTI timeline; --decode 0 keeps the decode steps out)
CUDA_INJECTION64_PATH=$PWD/$d/lib/libkernel_trace.so DEEPINFER_TRACE_OUT=$OUT/trace_native.csv timeout 120 \
  $d/bin/model_bench --preset flash --layers 4 --backend cuda --precision native --prompt 4096 --decode 1 \
  > "$OUT/model_trace.log" 2>&1
echo "traced model rc $?"; python3 tools/trace_totals.py "$OUT/trace_native.csv" 25
timeout 200 python3 tools/hf_baseline.py --preset flash --dtype bf16 --prompt 4096 --decode 4 > "$OUT/hf.log" 2>&1
echo "transformers rc $?"; tail -3 "$OUT/hf.log"
timeout 200 $d/bin/cuda_ops_test --gtest_filter='*CudaMoe*flash*wgmma*' > "$OUT/moe_flash.log" 2>&1
echo "moe flash rc $? (124: its time limit)"; summary "$OUT/moe_flash.log"
exit 0
