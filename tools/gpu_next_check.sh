#!/usr/bin/env bash
# The device checks that wait for a GPU call, and the reusable measurements of issue 11 (prefill and batched
# decode on the tensor cores), one part a call: PART=NAME OUT=$OUT tools/gpu_next_check.sh on the device machine.
# Pack here first (a call carries at most 64 MiB with the tracked tree: `tools/gpu_tree_slim.sh out` before the
# call, `back` after), e.g.
#   BINS="tests/gpu/cuda_ops_test tests/gpu/cuda_model_test bench/model_bench" tools/gpu_pack.sh
# (TRACE=1, the default, adds the CUPTI tracer that PART=tracemain and s7 use), then call with carry
# ["build-cuda-xz"]. Each part's comment names its pack. The results go to docs/benchmarks.md.
# Parts that ran on branches since merged or dropped (ofp8, rewind, decwgp, ssprobe, sspairs, the W4A8
# probes, ...; docs/benchmarks.md names them where it reports their runs) are in this file's history: git
# show 8b6dd44:tools/gpu_next_check.sh.
#
# Ran 2026-12-08 (tenth session, H100; docs/benchmarks.md): PART=s10 (with a build whose token copies were cut
#   to narrow tiles' rows: no faster, not kept); then no machine was lent: s10b (Nsight Compute on the
#   converting kernel, batch-256 and -64 decode profiles) and s11 (the TMA form, the bf16 sums, fence_probe)
#   wait for a call.
# Ran 2026-12-07 (ninth session, H100; docs/benchmarks.md): PART=s9 then now, attnncu (twice: the second on
#   the warm machine), s9q with MODEL_TESTS='CudaGraphs.NativePrecisionReplayEqualsEager:CudaGoldenLong.*:
#   CudaExpertParallel.ThreeRanksOnOneGpuEqualOneNative' REPS=1 BATCHES=1 (the device budget's last 330 s);
#   s9q's linear case (CudaLinearsFp8Act.Bf16OutputIsTheF32Rounded) was corrected after it ran.
# Ran 2026-12-07 (eighth session, H100; docs/benchmarks.md): PART=s7q (git show
#   5464d95:tools/gpu_next_check.sh), the seventh session's four options and two one-object builds of the
#   converting W4A8 kernel: the bf16x3 share and four loads a lane in tile_rows are the defaults since, the
#   rest not kept (slower or no change). PART=s7 is the options' A/B; s7b times one-object builds where a pack
#   holds them (make one by editing moe_w4a8_bulk_ss.cu, `make -C build-cuda model_bench`, copying the binary
#   to model_bench_<name>, restoring the file and rebuilding).
set -uo pipefail
OUT=${OUT:-/tmp/gpu_next_check}; mkdir -p "$OUT"
d=build-cuda-carry; [[ -d $d ]] || tar xJf build-cuda-xz/carry.tar.xz; export LD_LIBRARY_PATH=$PWD/$d/lib
summary() { grep -E "^\[  FAILED|^\[==========\] [0-9]+ tests|^\[  PASSED|Failure" "$1" | head -40; }
# Nsight Compute on one launch of kernel $1 (launch-skip $2) of a 4K native prefill of $3 V4-Flash layers, saved
# under name $4: speed of light, warp states, the hottest SASS lines and their stalls
ncu_launch() {
  local ncu k=$1 skip=$2 layers=$3 name=$4
  ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  timeout 240 "$ncu" --kernel-name regex:"${k}_kernel" --launch-skip "$skip" --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SourceCounters --section LaunchStats \
    --section ComputeWorkloadAnalysis --section InstructionStats -f -o "$OUT/$name" \
    $d/bin/${NCU_BIN:-model_bench} --preset flash --layers "$layers" \
    --backend cuda --precision native --prompt 4096 --decode 1 --warmup 0 --graphs off > "$OUT/$name.log" 2>&1
  echo "== ncu $name rc $?"
  "$ncu" --import "$OUT/$name.ncu-rep" --page details 2>/dev/null > "$OUT/$name.txt"
  grep -E "Executed Instructions|Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Executed Ipc A|Warp Cycles Per Issued|Stall|Registers Per|Block Size|Theoretical Occ" "$OUT/$name.txt" | head -30
  "$ncu" --import "$OUT/$name.ncu-rep" --page source --print-source sass --csv > "$OUT/$name.csv" 2>&1
  python3 tools/ncu_top_lines.py "$OUT/$name.csv" 40
  rm -f "$OUT/$name.ncu-rep" "$OUT/$name.log"  # (a call brings back only so many files)
}
case ${PART:-s7} in
  s7)  # (pack: BINS="tests/gpu/cuda_ops_test tests/gpu/cuda_model_test bench/model_bench", TRACE=1; ~7 min)
        # the prefill options' A/B, each flipped from its default (ran as s7q in the eighth session: the bf16x3
        # share and four loads a lane the defaults since; the L2 prefetch and up's SwiGLU in the converting
        # kernel off): their cases with all flipped, cuda_model_test likewise, the 4K prefill with none, each
        # and all (twice), the trace and the 32K prefill with all flipped and none, transformers
    on=(DEEPINFER_BF16X3_SHARE=0 DEEPINFER_ATTN_PREFETCH=1 DEEPINFER_W4A8_SS_SWIGLU=1)
    env "${on[@]}" timeout 240 $d/bin/cuda_ops_test --gtest_filter='CudaLinears.*:Cases/CudaLinear.*bf16x3*:Cases/CudaAttention.*:CudaAttentions.*:CudaMoeW4a8.*:Cases/CudaMoe.MatchesRef/native*' \
      > "$OUT/s7_tests.log" 2>&1
    echo "op tests rc $?"; summary "$OUT/s7_tests.log"
    env "${on[@]}" DEEPINFER_TEST_DATA=$PWD/tests/data timeout 150 $d/bin/cuda_model_test > "$OUT/s7_model.log" 2>&1
    echo "cuda_model_test rc $?"; summary "$OUT/s7_model.log"
    rate() { env "$@" timeout 60 $d/bin/model_bench --preset flash --layers 4 --backend cuda --precision native \
      --prompt "${P:-4096}" --decode 2 2>&1 | grep -oE 'prefill [0-9]+ tokens in [^;]*|out of.*'; }
    for rep in 1 2; do
      echo "none: $(rate X=0)"
      for e in "${on[@]}"; do echo "$e: $(rate "$e")"; done
      echo "all: $(rate "${on[@]}")"
    done
    if [[ -f $d/lib/libkernel_trace.so ]]; then
      env "${on[@]}" CUDA_INJECTION64_PATH=$PWD/$d/lib/libkernel_trace.so DEEPINFER_TRACE_OUT=$OUT/trace_4096.csv \
        timeout 60 $d/bin/model_bench --preset flash --layers 4 --backend cuda --precision native --prompt 4096 \
        --decode 1 --warmup 0 > "$OUT/trace_4096.log" 2>&1
      echo "== trace rc $?"; python3 tools/trace_totals.py "$OUT/trace_4096.csv" 40 | cut -c1-160
      xz -9 "$OUT/trace_4096.csv"
    fi
    echo "32K none: $(P=32768 rate X=0)"; echo "32K all: $(P=32768 rate "${on[@]}")"
    timeout 150 python3 tools/hf_baseline.py --preset flash --dtype bf16 --prompt 4096 --decode 2 2>&1 | tail -3
    ;;
  s7b)  # (pack: BINS="bench/model_bench bench/model_bench_<name> ..." [tests/gpu/cuda_ops_test_<name>], one-object
         # builds as the header says; ~1.5 min a build) each build against main: its W4A8 and native MoE cases
         # where its cuda_ops_test is packed, then the 4K MoE profile row and the 4K prefill, alternating
    for t in $d/bin/cuda_ops_test_*; do
      [[ -x $t ]] || continue
      timeout 90 $t --gtest_filter='CudaMoeW4a8.*:Cases/CudaMoe.MatchesRef/native*' > "$OUT/${t##*/}.log" 2>&1
      echo "${t##*/} rc $?"; summary "$OUT/${t##*/}.log"
    done
    for rep in 1 2; do
      for b in $d/bin/model_bench $d/bin/model_bench_*; do
        [[ -x $b ]] || continue
        echo "${b##*/} moe: $(timeout 60 $b --preset flash --layers 4 --backend cuda --precision native \
          --prompt 4096 --decode 1 --profile 1 2>&1 | grep -E '^\| (moe|total) ' | awk -F'|' '{printf "%s %s ms; ", $2, $4}')"
        echo "${b##*/} prefill: $(timeout 60 $b --preset flash --layers 4 --backend cuda --precision native \
          --prompt 4096 --decode 2 2>&1 | grep -oE 'prefill [0-9]+ tokens in [^;]*|out of.*')"
      done
    done
    ;;
  now)  # (a TRACE=1 pack: BINS="bench/model_bench bench/cuda_kernel_bench") where a 4-layer 4K prefill's time
        # goes now, with the rates it is judged by in the same call: its kernels (CUPTI), its ops by shape, the
        # FP8 GEMM table with the dense cuBLASLt rates, the whole prefill and transformers (~4 min)
    CUDA_INJECTION64_PATH=$PWD/$d/lib/libkernel_trace.so DEEPINFER_TRACE_OUT=$OUT/trace_4096.csv \
      timeout 90 $d/bin/model_bench --preset flash --layers 4 --backend cuda --precision native --prompt 4096 \
      --decode 1 --warmup 0 > "$OUT/trace_4096.log" 2>&1
    echo "== trace rc $?"; python3 tools/trace_totals.py "$OUT/trace_4096.csv" 45 | cut -c1-170
    xz -9 "$OUT/trace_4096.csv"
    timeout 120 $d/bin/model_bench --preset flash --layers 4 --backend cuda --precision native --prompt 4096 \
      --decode 1 --profile shapes > "$OUT/shapes_4096.log" 2>&1
    echo "profile shapes rc $?"; sed -n '/profile of the prefill/,/^| total/p' "$OUT/shapes_4096.log"
    timeout 120 $d/bin/cuda_kernel_bench --only gemm --quick > "$OUT/gemm.log" 2>&1
    echo "gemm rc $?"; grep -E "dense|n=4096|rate" "$OUT/gemm.log" | head -30
    for rep in 1 2; do
      echo "prefill 4096: $(timeout 60 $d/bin/model_bench --preset flash --layers 4 --backend cuda --precision native \
        --prompt 4096 --decode 2 2>&1 | grep -oE 'prefill [0-9]+ tokens in [^;]*')"
    done
    timeout 150 python3 tools/hf_baseline.py --preset flash --dtype bf16 --prompt 4096 --decode 2 2>&1 | tail -3
    ;;
  s9)  # (pack: BINS="bench/model_bench bench/model_bench_prev tests/gpu/cuda_ops_test") an attention change
        # against the build before it (model_bench_prev): the attention, act_quant and fused cases, then the 4K
        # prefill, alternating, and the attention's profile rows. Ran 2026-12-07 (ninth session, H100) for the
        # picks deduplicated by each entry's smallest pick index and q read once, then for the producer's rows
        # found once a lane and the output's codes converted two at a time
    timeout 150 $d/bin/cuda_ops_test \
      --gtest_filter='Cases/CudaAttention.*:CudaAttentions.*:CudaDeterminism.*:CudaActQuant.*:CudaFused.*' \
      > "$OUT/s9_tests.log" 2>&1
    echo "attention tests rc $?"; summary "$OUT/s9_tests.log"
    for rep in 1 2 3; do
      for b in model_bench_prev model_bench; do
        echo "$b prefill: $(timeout 60 $d/bin/$b --preset flash --layers 4 --backend cuda --precision native \
          --prompt 4096 --decode 2 2>&1 | grep -oE 'prefill [0-9]+ tokens in [^;]*|out of.*')"
      done
    done
    for b in model_bench_prev model_bench; do
      echo "$b: $(timeout 60 $d/bin/$b --preset flash --layers 4 --backend cuda --precision native --prompt 4096 \
        --decode 1 --profile shapes 2>&1 | grep -E '^\| (attention|total)' | awk -F'|' '{printf "%s %s ms; ", $2, $4}')"
    done
    ;;
  s9q)  # (pack: BINS="bench/model_bench bench/model_bench_prev tests/gpu/cuda_ops_test tests/gpu/cuda_model_test")
         # the attention producer's rows found once a lane, the output's codes two at a time, and the native q
         # in bf16 (DEEPINFER_BF16_QUERIES=0: f32): their cases, cuda_model_test, then the 4K prefill against
         # model_bench_prev (the build before), alternating, the profile's rows, decode at batch 1 and 64
    timeout 200 $d/bin/cuda_ops_test --gtest_filter='Cases/CudaAttention.MatchesRef/prefill*:CudaAttentions.*:CudaActQuant.*:CudaLinearsFp8Act.*' \
      > "$OUT/s9q_tests.log" 2>&1
    echo "op tests rc $?"; summary "$OUT/s9q_tests.log"; grep -E "^linear bf16 y" "$OUT/s9q_tests.log"
    DEEPINFER_TEST_DATA=$PWD/tests/data timeout 150 $d/bin/cuda_model_test \
      --gtest_filter="${MODEL_TESTS:-*}" > "$OUT/s9q_model.log" 2>&1
    echo "cuda_model_test rc $?"; summary "$OUT/s9q_model.log"
    rate() { env "$@" timeout 60 $d/bin/${B:-model_bench} --preset flash --layers 4 --backend cuda --precision native \
      --prompt 4096 --decode 2 2>&1 | grep -oE 'prefill [0-9]+ tokens in [^;]*|out of.*'; }
    for rep in $(seq ${REPS:-2}); do
      echo "prev: $(B=model_bench_prev rate X=0)"
      echo "new, f32 q: $(rate DEEPINFER_BF16_QUERIES=0)"
      echo "new, bf16 q: $(rate X=0)"
    done
    echo "new: $(timeout 60 $d/bin/model_bench --preset flash --layers 4 --backend cuda --precision native --prompt 4096 \
      --decode 1 --profile shapes 2>&1 | grep -E '^\| (attention|linear fp8 1024->32768|total)' | awk -F'|' '{printf "%s %s ms; ", $2, $4}')"
    for b in ${BATCHES:-1 64}; do
      for v in 0 1; do
        echo "decode batch $b, DEEPINFER_BF16_QUERIES=$v: $(DEEPINFER_BF16_QUERIES=$v timeout 90 $d/bin/model_bench --preset flash \
          --layers 4 --backend cuda --precision native --batch $b --prompt 16 --context 4096 --decode 8 2>&1 |
          grep -oE 'decode [0-9]+ steps in [0-9.]+ s = [0-9.]+ tokens/s, [0-9.]+ ms/step')"
      done
    done
    ;;
  s10)  # (a TRACE=1 pack: BINS="bench/model_bench bench/model_bench_prev bench/cuda_kernel_bench
         # tests/gpu/cuda_ops_test") what the ninth session left unrun: the corrected bf16-output linear case,
         # the 32K prefill, decode at batch 64 and 256 with f32 and bf16 q; a MoE change against
         # model_bench_prev (its cases, the MoE row, the 4K prefill, alternating); then PART=now's baseline
    timeout 150 $d/bin/cuda_ops_test --gtest_filter='CudaLinearsFp8Act.*:CudaLinears.*:CudaMoeW4a8.*:Cases/CudaMoe.MatchesRef/native*' \
      > "$OUT/s10_tests.log" 2>&1
    echo "linear and moe tests rc $?"; summary "$OUT/s10_tests.log"; grep -E "^linear bf16 y" "$OUT/s10_tests.log"
    for rep in 1 2; do
      for b in model_bench_prev model_bench; do
        echo "$b: $(timeout 60 $d/bin/$b --preset flash --layers 4 --backend cuda --precision native --prompt 4096 \
          --decode 1 --profile 1 2>&1 | grep -E '^\| (moe|total) ' | awk -F'|' '{printf "%s %s ms; ", $2, $4}')"
        echo "$b prefill: $(timeout 60 $d/bin/$b --preset flash --layers 4 --backend cuda --precision native \
          --prompt 4096 --decode 2 2>&1 | grep -oE 'prefill [0-9]+ tokens in [^;]*|out of.*')"
      done
    done
    echo "prefill 32768: $(timeout 90 $d/bin/model_bench --preset flash --layers 4 --backend cuda --precision native \
      --prompt 32768 --decode 2 2>&1 | grep -oE 'prefill [0-9]+ tokens in [^;]*|out of.*')"
    for b in 64 256; do
      for v in 0 1; do
        echo "decode batch $b, DEEPINFER_BF16_QUERIES=$v: $(DEEPINFER_BF16_QUERIES=$v timeout 90 $d/bin/model_bench \
          --preset flash --layers 4 --backend cuda --precision native --batch $b --prompt 16 --context 4096 \
          --decode 8 2>&1 | grep -oE 'decode [0-9]+ steps in [0-9.]+ s = [0-9.]+ tokens/s, [0-9.]+ ms/step|out of.*')"
      done
    done
    PART=now bash "$0"
    ;;
  s10b)  # (pack: TRACE=0 BINS="bench/model_bench") Nsight Compute on the converting W4A8 kernel's first up
          # and down launch of a 2-layer 4K prefill (PART=ssncu's), then where a batch-256 and a batch-64 decode
          # step's time goes by op (4 layers, context 4,096)
    NCU_KERNELS=moe_w4a8_bulk_ss NCU_SKIPS="0 1" PART=ssncu bash "$0"
    for b in 256 64; do
      timeout 90 $d/bin/model_bench --preset flash --layers 4 --backend cuda --precision native --batch $b \
        --prompt 16 --context 4096 --decode 8 --profile shapes > "$OUT/shapes_b$b.log" 2>&1
      echo "profile shapes batch $b rc $?"; sed -n '/decode steps/,/^| total/p' "$OUT/shapes_b$b.log"
    done
    ;;
  s11)  # (pack: TRACE=0 BINS="bench/fence_probe bench/model_bench tests/gpu/cuda_ops_test
         # tests/gpu/cuda_model_test") the converting W4A8 kernel's two options written 2026-12-08 with no GPU
         # lent: the fp4 rows by TMA (DEEPINFER_W4A8_SS_TMA=1) and the expert sums stored as bf16
         # (DEEPINFER_W4A8_BF16_MID=1). Whether the proxy fence waits for a thread's cp.async copies
         # (fence_probe, the reason for the TMA form); their cases (OptionsMatchTheReference: TMA the default's
         # bits, bf16 sums within kMoeW4a8Bf16Cuda, both counted; the native MoE cases and the whole-model tests
         # with both on), then the MoE row and the 4K prefill of none / each / both, alternating, the 32K
         # prefill, and Nsight Compute on the TMA form's first up launch (~8 min)
    timeout 60 $d/bin/fence_probe 2>&1 | tee "$OUT/fence_probe.log"
    # (a new form that hangs, say on a barrier's phase, must not take the call: a short limit first, and the
    # options' timings only where their cases passed)
    timeout 120 $d/bin/cuda_ops_test --gtest_filter='CudaMoeW4a8.*' > "$OUT/s11_tests.log" 2>&1
    rc=$?; echo "w4a8 tests rc $rc"; summary "$OUT/s11_tests.log"; grep -E "^moe bf16 sums" "$OUT/s11_tests.log"
    ((rc == 0)) || { echo "the options' cases did not pass: no timings"; exit 1; }
    both=(DEEPINFER_W4A8_SS_TMA=1 DEEPINFER_W4A8_BF16_MID=1)
    env "${both[@]}" timeout 120 $d/bin/cuda_ops_test --gtest_filter='Cases/CudaMoe.MatchesRef/native*' \
      > "$OUT/s11_cases.log" 2>&1
    echo "native moe cases with both rc $?"; summary "$OUT/s11_cases.log"
    env "${both[@]}" DEEPINFER_TEST_DATA=$PWD/tests/data timeout 150 $d/bin/cuda_model_test \
      --gtest_filter='CudaGraphs.*:CudaGoldenLong.*' > "$OUT/s11_model.log" 2>&1
    echo "model tests with both rc $?"; summary "$OUT/s11_model.log"
    for rep in 1 2; do
      for v in X=0 DEEPINFER_W4A8_SS_TMA=1 DEEPINFER_W4A8_BF16_MID=1 "${both[*]}"; do
        read -ra e <<< "$v"
        echo "$v: $(env "${e[@]}" timeout 60 $d/bin/model_bench --preset flash --layers 4 --backend cuda \
          --precision native --prompt 4096 --decode 1 --profile 1 2>&1 | grep -E '^\| (moe|total) ' |
          awk -F'|' '{printf "%s %s ms; ", $2, $4}')"
        echo "$v prefill: $(env "${e[@]}" timeout 60 $d/bin/model_bench --preset flash --layers 4 --backend cuda \
          --precision native --prompt 4096 --decode 2 2>&1 | grep -oE 'prefill [0-9]+ tokens in [^;]*|out of.*')"
      done
    done
    for v in X=0 "${both[*]}"; do
      read -ra e <<< "$v"
      echo "$v prefill 32768: $(env "${e[@]}" timeout 90 $d/bin/model_bench --preset flash --layers 4 --backend cuda \
        --precision native --prompt 32768 --decode 2 2>&1 | grep -oE 'prefill [0-9]+ tokens in [^;]*|out of.*')"
    done
    DEEPINFER_W4A8_SS_TMA=1 NCU_KERNELS=moe_w4a8_bulk_ss NCU_SKIPS=0 PART=ssncu bash "$0"
    ;;
  attnncu)  # (pack: TRACE=0 BINS="bench/model_bench") Nsight Compute on the 4K prefill's attention launches of
            # layer 0 (sliding window) and layer 2 (CSA, 512 picks): speed of light, warp states, the hottest
            # SASS lines and their stalls
    for skip in 2 0; do ncu_launch attention_wgp $skip 4 ncu_attn$skip; done
    ;;
  tracemain)  # (a TRACE=1 pack: BINS="bench/model_bench") each kernel's time in a 4-layer 4K and 32K prefill
              # (CUPTI), all kernels of the step: where the time outside the W4A8 launches goes
    for n in 4096 32768; do
      CUDA_INJECTION64_PATH=$PWD/$d/lib/libkernel_trace.so DEEPINFER_TRACE_OUT=$OUT/trace_$n.csv \
        timeout 90 $d/bin/model_bench --preset flash --layers 4 --backend cuda --precision native --prompt $n \
        --decode 1 --warmup 0 > "$OUT/trace_$n.log" 2>&1
      echo "== trace [$n] rc $?"; python3 tools/trace_totals.py "$OUT/trace_$n.csv" 40 | cut -c1-160
      rm -f "$OUT/trace_$n.log"
    done
    ;;
  shapes)  # (pack: TRACE=0 BINS="bench/model_bench bench/cuda_kernel_bench tests/gpu/cuda_ops_test") where the
           # prefill's time goes by linear shape and attention kind (the tests take what is left of 600 s)
    SECONDS=0
    for n in 4096 32768; do
      timeout 120 $d/bin/model_bench --preset flash --layers 4 --backend cuda --precision native --prompt $n \
        --decode 1 --profile shapes > "$OUT/shapes_$n.log" 2>&1
      echo "profile shapes $n rc $?"; sed -n '/profile of the prefill/,/^| total/p' "$OUT/shapes_$n.log"
    done
    # batch-256 decode (20.9 ms a 4-layer step on the H200, 2026-12-03: ~10x what its bytes and flops take)
    timeout 120 $d/bin/model_bench --preset flash --layers 4 --backend cuda --precision native --batch 256 \
      --prompt 16 --context 4096 --decode 8 --profile shapes > "$OUT/shapes_b256.log" 2>&1
    echo "profile shapes batch 256 rc $?"; sed -n '/decode steps/,/^| total/p' "$OUT/shapes_b256.log"
    timeout 90 $d/bin/cuda_kernel_bench --only gemm > "$OUT/gemm.log" 2>&1
    echo "gemm rc $?"; grep -E "dense cuBLASLt|n=4096" "$OUT/gemm.log" | head -20
    left=$((570 - SECONDS)); ((left > 10)) || left=10  # (timeout 0 would mean none)
    timeout $left $d/bin/cuda_ops_test \
      --gtest_filter='CudaMoeW4a8.*:Cases/CudaMoe.MatchesRef/*:CudaMhc.*:CudaFused.*' \
      > "$OUT/moe.log" 2>&1
    echo "moe and mhc tests rc $?"; summary "$OUT/moe.log"
    ;;
  chunks)  # (pack: TRACE=0 BINS="bench/model_bench") the serving step's prefill budget (issue 11, item 5): a
           # 16K prompt prefilled in chunks of 2,048, 4,096 (cuda's default --prefill-chunk), 8,192 and 16,384
           # tokens; the MoE takes W4A8 from 20 pairs an expert (DEEPINFER_W4A8_MIN_PAIRS), wgmma below
    for c in 2048 4096 8192 16384 2048 4096; do
      echo "prefill 16384 chunk $c: $(timeout 90 $d/bin/model_bench --preset flash --layers 4 --backend cuda \
        --precision native --prompt 16384 --prefill-chunk $c --decode 2 2>&1 |
        grep -oE 'prefill [0-9]+ tokens[^;]*|activation workspace[^;]*|out of.*' | tr '\n' ' ')"
    done
    ;;
  ssncu)  # (pack: TRACE=0 BINS="bench/model_bench") Nsight Compute on one up launch of the converting W4A8
          # kernel and one launch of the pipelined attention: speed of light, warp states, the hottest SASS
          # lines and their stalls
    # (NCU_SKIPS: which launches of each, 0 a 2-layer prefill's first up, 1 its first down)
    for k in ${NCU_KERNELS:-moe_w4a8_bulk_ss attention_wgp}; do
      for skip in ${NCU_SKIPS:-1}; do ncu_launch $k $skip 2 ncu_${k}_$skip; done
    done
    ;;
  final)  # (pack: TRACE=0 BINS="bench/model_bench tests/gpu/cuda_ops_test tests/gpu/cuda_model_test") after a
           # merge: the whole-model GPU tests, the attention, determinism, state and fused cases, the 4K prefill
           # and decode at batch 8 and 64 on the defaults
    DEEPINFER_TEST_DATA=$PWD/tests/data timeout 200 $d/bin/cuda_model_test > "$OUT/final_model.log" 2>&1
    echo "cuda_model_test rc $?"; summary "$OUT/final_model.log"
    timeout 200 $d/bin/cuda_ops_test \
      --gtest_filter='CudaAttentions.*:Cases/CudaAttention.*:CudaDeterminism.*:CudaBatchedState.*:CudaFused.*:CudaActQuant.*' \
      > "$OUT/final_ops.log" 2>&1
    echo "cuda_ops_test rc $?"; summary "$OUT/final_ops.log"
    echo "prefill 4096: $(timeout 60 $d/bin/model_bench --preset flash --layers 4 --backend cuda --precision native \
      --prompt 4096 --decode 2 2>&1 | grep -oE 'prefill [0-9]+ tokens in [^;]*')"
    for b in 8 64; do
      echo "decode batch $b: $(timeout 90 $d/bin/model_bench --preset flash --layers 4 --backend cuda --precision native \
        --batch $b --prompt 16 --context 4096 --decode 8 2>&1 | grep -oE 'decode [0-9]+ steps in [0-9.]+ s = [0-9.]+ tokens/s, [0-9.]+ ms/step')"
    done
    ;;
  mhctf32)  # (pack: TRACE=0 BINS="bench/model_bench tests/gpu/cuda_ops_test") the native precision's prefill
            # mixes on the TF32 tensor cores (mhc_mix_tf32.cu): their cases against the reference (the measured
            # errors printed), determinism, then the 4K / 32K prefill against DEEPINFER_MHC_TF32=0 (the FP64
            # form) alternating, then the 4K and 32K prefill's ops by shape
    timeout 120 $d/bin/cuda_ops_test --gtest_filter='CudaFused.*:CudaMhc.*:CudaDeterminism.*:CudaBatchedState.*' \
      > "$OUT/mhc_tests.log" 2>&1
    echo "mhc tests rc $?"; summary "$OUT/mhc_tests.log"; grep -E '^mhc_pre_norm tf32' "$OUT/mhc_tests.log"
    [[ ${LITE:-0} == 1 ]] && n32="" || n32='"32768 0" "32768 1"'
    for v in "4096 0" "4096 1" "4096 0" "4096 1" ${n32:+"32768 0" "32768 1"}; do
      read -r n t <<< "$v"
      echo "4 layers, $n [DEEPINFER_MHC_TF32=$t]: $(DEEPINFER_MHC_TF32=$t timeout 60 $d/bin/model_bench --preset flash \
        --layers 4 --backend cuda --precision native --prompt $n --decode 1 --profile 1 2>&1 | \
        grep -E '^\| (mhc_pre_norm|total) ' | awk -F'|' '{printf "%s %s ms; ", $2, $4}')"
    done
    for t in 0 1 0 1; do
      echo "prefill 4096 [DEEPINFER_MHC_TF32=$t]: $(DEEPINFER_MHC_TF32=$t timeout 60 $d/bin/model_bench --preset flash \
        --layers 4 --backend cuda --precision native --prompt 4096 --decode 2 2>&1 | grep -oE 'prefill [0-9]+ tokens in [^;]*')"
    done
    for n in $([[ ${LITE:-0} == 1 ]] || echo 4096 32768); do  # where the prefill's time goes now, by shape
      timeout 90 $d/bin/model_bench --preset flash --layers 4 --backend cuda --precision native --prompt $n \
        --decode 1 --profile shapes > "$OUT/shapes_$n.log" 2>&1
      echo "== shapes $n rc $?"; grep -E '^\|' "$OUT/shapes_$n.log" | head -32
    done
    ;;
  fused)  # (pack: TRACE=0 BINS="tests/gpu/cuda_ops_test tests/gpu/cuda_model_test bench/model_bench") the fused
          # norm + rope launch and attention tail: their cases, cuda_model_test, their A/B (tools/gpu_ab_env.sh)
    timeout 120 $d/bin/cuda_ops_test --gtest_filter='CudaFused.*:CudaBatchedState.*:CudaAttentions.*:CudaSmallOps.*' \
      > "$OUT/fused.log" 2>&1
    echo "fused tests rc $?"; summary "$OUT/fused.log"
    timeout 150 $d/bin/cuda_model_test > "$OUT/model.log" 2>&1
    echo "model tests rc $?"; summary "$OUT/model.log"
    OUT=$OUT/ab PRECISION=native \
      SETTINGS="-;DEEPINFER_NORM_ROPES_ONE_LAUNCH=0;DEEPINFER_ATTN_TAIL_FUSED=0;-" \
      ROUNDS=2 timeout 300 tools/gpu_ab_env.sh
    ;;
  fp8)  # (pack: TRACE=0 BINS="tests/gpu/cuda_ops_test bench/cuda_kernel_bench bench/grid_sync_probe") the FP8
        # linears' cases and GEMM table at 1 and 16 rows, then fp8_mma with its K split one wave
    timeout 150 $d/bin/cuda_ops_test --gtest_filter='*CudaLinearFp8Act*:*CudaLinearsFp8Act*' > "$OUT/fp8.log" 2>&1
    echo "fp8 tests rc $?"; summary "$OUT/fp8.log"; grep -E "^bound.*relative" "$OUT/fp8.log"
    timeout 120 $d/bin/cuda_kernel_bench --only gemm --quick > "$OUT/gemm.log" 2>&1
    echo "fp8 gemm rc $?"; grep -E "n=(1|16) \|" "$OUT/gemm.log"
    DEEPINFER_FP8_MMA_ONE_WAVE=1 timeout 60 $d/bin/cuda_ops_test --gtest_filter='*CudaLinearFp8Act*fp8_mma*' \
      > "$OUT/fp8_one_wave.log" 2>&1
    echo "fp8_mma one wave tests rc $?"; summary "$OUT/fp8_one_wave.log"
    DEEPINFER_FP8_MMA_ONE_WAVE=1 timeout 120 $d/bin/cuda_kernel_bench --only gemm --quick > "$OUT/gemm_1w.log" 2>&1
    echo "fp8 gemm one wave rc $?"; grep -E "n=16 \|.*fp8_mma" "$OUT/gemm_1w.log"
    [[ -x $d/bin/grid_sync_probe ]] && timeout 30 $d/bin/grid_sync_probe
    ;;
  roofline)  # (pack: TRACE=0 BINS="bench/model_bench") the 16-layer decode step against the roofline, both
             # precisions, batch 1, 4, 16 and 64, the copy bandwidth measured in the same call
    for p in native exact; do
      OUT=$OUT/$p PRECISION=$p BATCHES="1 4 16" GRAPHS=on DECODE=16 timeout 170 tools/gpu_decode_layers.sh
      OUT=$OUT/$p PRECISION=$p BATCHES=64 PROMPT=128 GRAPHS=on DECODE=16 timeout 90 tools/gpu_decode_layers.sh |
        tail -1
    done
    ;;
  spec)  # (pack: TRACE=0 BINS="tests/model/speculative_test bench/spec_bench") speculative decoding with the MTP
         # block on cuda: its tests, then spec_bench on 4 V4-Flash layers at forced acceptance, both precisions
    timeout 150 $d/bin/speculative_test > "$OUT/spec.log" 2>&1
    echo "speculative tests rc $?"; summary "$OUT/spec.log"
    for p in exact native; do
      timeout 150 $d/bin/spec_bench --backend cuda --preset flash --layers 4 --precision $p --prompt 128 \
        --decode 48 --accept "0 0.5 0.85" 2>&1 | tail -6
    done
    ;;
  moecopy)  # (pack: TRACE=0 BINS="bench/cuda_kernel_bench") the W4A8 MoE against dequantising to an FP8 copy
            # and cuBLASLt's block-scaled GEMM per expert, at 2,730 and 4,096 tokens
    timeout 240 $d/bin/cuda_kernel_bench --only moe_prefill > "$OUT/moe_prefill.log" 2>&1
    echo "moe_prefill rc $?"; grep -E "^\| moe fp4 n=(2730|4096)" "$OUT/moe_prefill.log"
    ;;
  timeline)  # (a TRACE=1 pack: BINS="bench/model_bench") the native batch-1 step's kernels and exposed times
    OUT=$OUT/tl PRECISION=native BATCH=1 LAYERS=16 TRACE_TIMEOUT=50 timeout 60 tools/gpu_timeline.sh 2>/dev/null |
      head -14
    ;;
  ncu)  # (pack: TRACE=0 BINS="bench/model_bench") the stall reasons of the batch-1 step's slow kernels and of a
        # 4K prefill's MoE, attention and indexer kernels (tools/gpu_ncu_stalls.sh)
    OUT=$OUT/ncu BATCH=1 LAYERS=4 NCU_TIMEOUT=280 timeout 290 tools/gpu_ncu_stalls.sh
    OUT=$OUT/ncu LAYERS=4 PROMPT=4096 DECODE=1 SKIP=0 COUNT=8 NCU_TIMEOUT=280 \
      KERNELS='moe_w4a8_kernel|attention_mma64|indexer_mma' timeout 290 tools/gpu_ncu_stalls.sh
    ;;
  probe)  # (pack: TRACE=0 BINS="bench/grid_sync_probe bench/persistent_layer_probe") a dependent launch against
          # a grid barrier, a V4-Flash layer's batch-1 phases as one cooperative grid
    [[ -x $d/bin/grid_sync_probe ]] && timeout 30 $d/bin/grid_sync_probe
    timeout 60 $d/bin/persistent_layer_probe 8 5 1 0.5 0.25 0
    ;;
  *) echo "PART: s7 | s7b | now | s9 | s9q | attnncu | tracemain | shapes | chunks | ssncu | final | mhctf32 | fused | fp8 | roofline | spec | moecopy | timeline | ncu | probe"; exit 2 ;;
esac
exit 0
