#!/usr/bin/env bash
# Written 2026-12-07 (seventh session), not run (no device machine could be started in that session):
#   PART=s7: DEEPINFER_BF16X3_SHARE (y's bf16 projections split once), DEEPINFER_ATTN_PREFETCH (the next wave's
#   queries into the L2), DEEPINFER_TILE_ROWS_LOADS=4, DEEPINFER_W4A8_SS_SWIGLU (up's SwiGLU in the converting
#   kernel's epilogue), all off by default: turn on what passes and is faster. Also worth a binary of its own:
#   moe_w4a8_bulk_ss.cu with kStages 4 and ring(2) 4 (ptxas: no wgmma serialised in the default form).
# Ran 2026-12-07 (fourth session, H100; docs/benchmarks.md): PART=ofp8 (wip/o-fp8: the attention's output
#   quantised for wo_a, the queries' row scales once; the cases pass, 4K prefill +2.6%, but 32K ran out of
#   memory) and PART=rewind (with the step arena rewound after each layer: cuda_model_test passes, 32K -2.3%,
#   16 layers at batch 16 fits); both merged into main. Then PART=tracemain (each kernel's time on main) and
#   PART=sublayer (the arena rewound after each sub-layer: cuda_model_test passes; decode at batch 64 and 256),
#   and the batch-256 decode profile: the decode batch's attention is 36% of the step (split_kv on CUDA-core
#   FMAs at ~5 TFLOP/s).
#   Then PART=decwgp and PART=decsmall (wip/decode-wgp: a decode batch's attention on attention_wgp from 8
#   decode jobs a call; the cases pass, batch 256 16.9 -> 11.8 ms a step, 64 6.7 -> 5.4; merged).
# Ran 2026-12-07 (sixth session, H100; docs/benchmarks.md): PART=s6 on branch wip/next (the bf16 streams' and
#   decode picks' cases passed: both on main, bf16 streams the default; the W4A8 branches wip/ss-width-arrays
#   and wip/ss-ahead2 kept the bits but were slower, not taken), PART=chunks (a 16K prompt: 2,048-token chunks
#   83.7K tokens/s, 4,096 123.3K: cuda's default chunk and step budget now 4,096).
#   Then PART=ssprobe (the converting W4A8 kernel with parts left out, wip/ss-probe; FINAL6_QUICK=1
#   PART=final6 on main: cuda_model_test with bf16 streams by default passed; W4A8 ahead of wgmma at 24 and 48
#   pairs an expert: its threshold now 20).
# Next (written 2026-12-07, sixth session): the converting W4A8 kernel's wgmmas and barriers alone take ~54% of
#   its time (PART=ssprobe): the multiplying side's chain, not the converters, is the first thing to shorten;
#   the fp4 copies and their conversion add ~0.67 of ~2.55 ms a layer. A warpgroup cannot promote one part set
#   while its next wgmmas run (ptxas serialises them, C7514: other instructions reading a wgmma's registers
#   inside a pipeline stage), so branch wip/ss-pairs (on wip/ss-width-arrays) gives the n64 / n96 tiles two
#   chunks a wgmma group instead, each into a part set of its own (its kConv = 2 forms spill 44-52 bytes, none
#   serialised; with pairs for n64 alone they spill nothing). PART=sspairs: build model_bench and
#   cuda_ops_test from it (model_bench as model_bench_pairs), pack them with main's model_bench, run
#   CudaMoeW4a8.* and the native MoE cases, then the 4K MoE profile row and the 4K prefill of both, twice.
# Written 2026-12-07, fifth session (ran in the sixth, above): the native precision's bf16 residual streams (main: the CUDA kernels take them, the model
#   uses them on cuda only with DEEPINFER_BF16_STREAMS=1) together with wip/decode-picks below. Merge
#   wip/decode-picks into a branch off main, build model_bench, cuda_ops_test and cuda_model_test, pack
#   TRACE=0 BINS="bench/model_bench tests/gpu/cuda_ops_test tests/gpu/cuda_model_test" (built and packed at
#   the end of that session from wip/bf16-decpicks, main with wip/decode-picks merged: build-cuda-xz), run
#   tools/gpu_tree_slim.sh out (the carry limit; `back` after the call), then PART=short (~5 min): the mHC / fused /
#   small-op cases on bf16 streams, the attention cases, cuda_model_test with bf16 streams, the 4K prefill and
#   batch-256 decode with DEEPINFER_BF16_STREAMS=0 against 1, decpicks' A/B at 16K. If the bf16 cases pass,
#   make CudaBackend::bf16_streams true by default (cuda_ops.cpp) and update README / docs/cuda.md; merge
#   decode-picks if its cases pass and it is no slower at 4K.
# Then (written 2026-12-07, fourth session, after the device budget was spent): branch
#   wip/decode-picks, the decode batch converting only the entries a CSA job reads (picks_compact_kernel lists
#   them as query_keys does, F16Rows::picked maps entry slot c to row c), so the batch takes every decode job
#   at any context (main keeps split_kv for CSA jobs past 4 x 512 entries). `git checkout wip/decode-picks`,
#   build model_bench and cuda_ops_test, pack TRACE=0 BINS="bench/model_bench tests/gpu/cuda_ops_test", then
#   PART=decpicks (~3 min; ptxas: no spills, the attention kernels' registers unchanged). Merge if the cases
#   pass and it is no slower at 4K and faster at 16K and 64K. Then: the batch-256 step's routed experts (6.7 of
#   14.0 ms profiled, 48%) and the head in three BF16 pieces (1.7 ms). Then:
#   the W4A8 kernel's multiplying side: on main's Nsight Compute samples (layer 0's up, 2026-12-07) its warps
#   wait for the chunk's wgmmas 14% of the time (wait<0> before the promotion, whose part registers the next
#   chunk reuses) and for full stages 11%, the promotion's scale loads ~6%; two part sets for the tiles of
#   <= 96 pairs (48 + 48 + 48 of the 168 registers) would let chunk c + 1's wgmmas run under chunk c's
#   promotion. Written into this kernel for n64 tiles (2026-12-07, second session), it made ptxas serialise the
#   default form's wgmmas (C7511, C7517) and spill 196-204 bytes: it needs a kernel of its own whose acc and
#   part arrays are sized to the narrow tiles.
# Ran 2026-12-07 (third session, H100; docs/benchmarks.md): PART=qprep (wip/attn-qprep on wip/mhc-tf32: the
#   TF32 mixes and the attention's prepared queries, 24 cases passed, the 4K prefill +3.0%; merged, the
#   defaults).
# Ran 2026-12-07 (second session, H100; docs/benchmarks.md): PART=ssconv2 (the converter-ahead branch and a
#   form with deferred publishes against main: 8-10% slower, the multiplying loop over the widths is the bound
#   again; not taken).
# Ran 2026-12-07 (H100; docs/benchmarks.md): PART=attnlite and PART=ssncu (the pipelined attention's base-2
#   form with a keyless last tile skipped: -15% sliding, -6% HCA, -24% CSA, now the default; Nsight Compute
#   on the W4A8 kernel: its multiplying loop issue-bound), PART=ssloop (the multiplying loop a tile width:
#   the MoE -7.2% at 4K, -5.9% at 32K; the 4K prefill 120,178 tokens/s, 6.51x transformers).
# Then (written 2026-12-06, ninth session): PART=attnlite (~2 min; pack: TRACE=0 BINS="bench/model_bench
#   tests/gpu/cuda_ops_test bench/cuda_kernel_bench" tools/gpu_pack.sh): the pipelined warpgroup attention
#   (attention_wgp.cu, DEEPINFER_ATTN_WGMMA=2) in its base-2 form, written after the calls (one ex2 a score,
#   a column's scale as one multiply, rescales skipped where a warp's factors are 1, consumer 1's
#   probabilities published as its A fragments' words): its cases against the
#   reference, its kernel times against mma64. Its first form ran 2026-12-06 (ninth session, H200;
#   docs/benchmarks.md): correct, -8% sliding, -11% CSA, +8% HCA, +1.0% on the 4K prefill; Nsight Compute:
#   bound by each consumer warp's scalar chain (an issue every 3.3 cycles, 0.4 eligible warps a scheduler).
#   PART=attnwgp adds the 32K profile and the MoE rows.
# Then (written 2026-12-06, eighth session): PART=ssdefault (~1.5 min; the persist pack: TRACE=0
#   BINS="bench/model_bench tests/gpu/cuda_ops_test" tools/gpu_pack.sh): the w4a8 cases with the converting
#   kernel as the default (its bits were checked as an option before the switch), and the 4K MoE against
#   moe_w4a8_kernel. Then the converting kernel's multiplying side, now its bound (narrow tiles, a quarter
#   fewer tensor cycles on most 4K tiles, made it faster): the promotion's share (the probe's SS rows: 1,283
#   TFLOP/s promoted against ~1,970), tiles sized to the pairs at 8-column steps, the tile-ordered rows'
#   pass (~165 us a layer) folded into the quantiser. Its multiplying side is at ptxas's register edge:
#   clock probes written into the kernel made ptxas serialise the default form's wgmmas (C7511), a form with
#   8-column widths its own; both were taken out; build such forms as kernels of their own (or free registers first) and
#   check `-Xptxas -v` for C7511 on the kConv = 2 instantiations. moe_w4a8_kernel's switches below (PERSIST, UNITS,
#   SWIGLU_OUT, the PROBE clocks) need DEEPINFER_W4A8_BULK_SS=0 since.
# Ran 2026-12-06 (eighth session, H100; docs/benchmarks.md): PART=conv2 (two converting warpgroups and the
#   narrow tiles: the default's bits; both together -4.3% at 4K, -2.7% at 32K, now the default; up's SwiGLU
#   in the persistent epilogue 26% slower, off), the prefill against transformers (6.18x).
# Then (written 2026-12-06, seventh session): the W4A8 chunk loop (~1,480 cycles a chunk against the
#   chain's ~920 and the tensor cores' ~512, latency-bound at two warps a scheduler): candidates are the next
#   item's first copies issued before this item's stores (the persistent form still waits one round trip an
#   item), the stores staged through shared memory (2,700 cycles a block), up's SwiGLU in its epilogue (W1
#   and W3 rows in one block: half of g's 403 MB written and read back a layer). Build them with the clocks
#   probe (DEEPINFER_W4A8_PROBE=256) in the persistent form, then PART=persist's A/B.
# Ran 2026-12-06 (seventh session, H100; docs/benchmarks.md): PART=skeleton (the blocks' phases in cycles,
#   the stall reasons, the wgmma probe's accumulating rows, the quantiser's 16-byte form: 29.95 us), then
#   PART=persist (the persistent form with a counter: the default's bits, MoE -2.2% at 4K, -1.7% at 32K; now
#   the default).
# Ran 2026-12-06 (sixth session, H100; docs/benchmarks.md): PART=one (the inner loop's rates, the L2's rate,
#   the converting-warpgroup kernel, the bulk kernel's probes, transformers: 5.80x), PART=trace (each MoE
#   kernel's time), PART=w4probe (the default kernel with parts left out), PART=prologue (the prologue's round
#   trips: -4%); the indexer's walking blocks are the default since.
# Then (written 2026-12-06, fifth session): PART=bulkprobe (~6 min; pack: TRACE=0 BINS="bench/model_bench
#   bench/cuda_kernel_bench tests/gpu/cuda_ops_test bench/wgmma_fp8_probe" tools/gpu_pack.sh): where the w4a8
#   kernels' time goes: their inner loop alone (wgmma_fp8_probe: no memory traffic), the converting-warpgroup
#   kernel (moe_w4a8_bulk_ss.cu: its bits, its prefill), the bulk kernel with parts left out; then PART=w4a8ncu
#   (~5 min): Nsight Compute on one up launch of the bulk kernel and of the default.
#   With it, PART=indexer (~2 min, the same pack): the indexer's walking blocks (q fragments made once a block
#   of 4 queries instead of once a tile), their test and the 32K / 4K prefill's indexer row (the default if
#   they pass and win), then the batch-256 decode profile with batched calls timed whole.
# Ran 2026-12-06 (fifth session, H100): PART=bulk: the bulk-copy w4a8 kernel gives the default's bits but is no
#   faster (docs/benchmarks.md).
# Ran 2026-12-06 (fifth session, H100): PART=shapes (the profile by shape; docs/benchmarks.md) and PART=mma (8
#   tokens a pass and 2,047 pairs a pass: the same bits, batch 256 22.2 -> 17.1 ms a step; now the default).
# Ran 2026-12-06 (fourth session, H100): PART=once (w4a8's scales copied once: the same bits, 12.8% faster,
#   now the default; docs/benchmarks.md) and PART=spec; the w4a8 cases needed more than 150 s (the reference's
#   MoE took 15-22 s a case on the GPU machine's CPU; since then it dequantises each expert once, ~8x faster
#   on the same bits). PART=once now compares the default against
#   DEEPINFER_W4A8_SCALES_IN_STAGES=1. Pack (4.8 MB; with the 61.4 MB tree just under a call's 64 MiB):
#   TRACE=0 BINS="tests/gpu/cuda_ops_test bench/model_bench bench/cuda_kernel_bench bench/spec_bench
#   tests/model/speculative_test" tools/gpu_pack.sh
# Ran 2026-12-06 (second session, H100): PART=next (the TMA-ring probe: 33.3% of the layer bound against the
#   graph's 45.1%; speculative decoding's speed), Nsight Compute on w4a8.
# PART=all (~9 min): the most valuable of the parts below in one call: speculative_test, the fp8 cases,
#   moecopy, the probe, native batch 1 and 16 against the roofline (for a session that may get one call).
#   Ran on an H100 on 2026-12-05 (third session, docs/benchmarks.md) but for the probe and batch 16 (no room).
# The GPU checks the code waits for (2026-12-05), a call each, in this order. PART=probe and PART=fused ran on
# 2026-12-05 (docs/benchmarks.md, "what a dependency costs"); what is left of them: PART=probe again for the
# graph with its latency kernels prefetching the next stream into the L2 (written after that run).
# PART=probe (~1 min): what a dependent launch costs against a grid barrier (bench/grid_sync_probe.cu), and
#   a V4-Flash layer's batch-1 phases as a graph of kernels against one cooperative grid, with the next
#   stream's weights fetched early (bench/persistent_layer_probe.cu).
# PART=fused (~4 min, passed 2026-12-05): q's and kv's norm + rope in one launch, the attention tail's window
#   store and inverse rope in split_kv's merge kernel, copy_many, cuda_model_test, and their A/B.
#   One pack serves PART=fused, fp8 and roofline (5.0 MB, 63.2 of the 64 MiB with the tree; deepinfer does not
#   fit beside them): TRACE=0 BINS="tests/gpu/cuda_ops_test tests/gpu/cuda_model_test bench/model_bench
#   bench/cuda_kernel_bench bench/grid_sync_probe" tools/gpu_pack.sh; call them back to back (the machine
#   goes back 30 s after a call).
# PART=fp8 (~2 min): CudaLinearFp8Act / CudaLinearsFp8Act with the cases on the bound scales (the f32 rows of
#   cuBLASLt's stride the model binds, Backend::fp8_block_scales) and the default dispatch's fp8_mma (2-16
#   rows on <= 2,048 output rows) held to 1e-3; then the fp8 GEMM table at 1 and 16 rows, and what a
#   dependent launch costs against a barrier in one persistent grid (bench/grid_sync_probe.cu); then fp8_mma's
#   cases and table again with DEEPINFER_FP8_MMA_ONE_WAVE=1 (its K split rounded down so the grid is one wave:
#   if it passes and beats cuBLASLt at 16 rows on 4,096+ rows too, make it the default and lift the 2,048-row
#   cap of linear_fp8mma_dispatched).
# PART=roofline (~6 min): the 16-layer decode step against the roofline, both precisions, batch 1, 4, 16 and
#   64 (batch 64 on a 128-token prompt: 64 x 512 prompt tokens in one step do not fit the prefill workspace),
#   the copy bandwidth measured in the same call (tools/gpu_decode_layers.sh).
# PART=spec (~3 min; its own pack, 3.7 MB: TRACE=0 BINS="tests/model/speculative_test bench/spec_bench"
#   tools/gpu_pack.sh):
#   speculative decoding with the MTP block on cuda (docs/speculative.md): kept and taken-back drafts
#   against one-token steps (Speculative.*, the cuda case), then spec_bench on 4 layers of V4-Flash (its
#   weights are drawn in host memory first: 16 layers would take ~55 GB and minutes) at
#   forced acceptance, both precisions (the drafter's cost and the verify step's against a plain step).
# PART=moecopy (~2 min; a pack with bench/cuda_kernel_bench): issue 11's baseline for the W4A8 MoE, the fp4
#   experts dequantised into an FP8 copy and cuBLASLt's block-scaled GEMM per expert (bench/moe_fp8_copy.h),
#   beside w4a8 at 2,730 and 4,096 tokens.
# PART=timeline (~1 min): the native batch-1 step's kernels and their exposed times (tools/gpu_timeline.sh).
# PART=ncu (~8 min, where time is left): why the batch-1 step's slow kernels take their time
#   (tools/gpu_ncu_stalls.sh: mHC's finish, route, the MoE and the GEMVs; stall reasons, occupancy), and a
#   4,096-token prefill's W4A8 MoE, attention and indexer kernels.
# Pack here as above (a call carries at most 64 MiB with the tracked tree: CUPTI only for PART=timeline, with
# fewer binaries), then on the GPU machine (carry ["build-cuda-xz"]): PART=fused OUT=$OUT tools/gpu_next_check.sh
set -uo pipefail
OUT=${OUT:-/tmp/gpu_next_check}; mkdir -p "$OUT"
d=build-cuda-carry; [[ -d $d ]] || tar xJf build-cuda-xz/carry.tar.xz; export LD_LIBRARY_PATH=$PWD/$d/lib
summary() { grep -E "^\[  FAILED|^\[==========\] [0-9]+ tests|^\[  PASSED|Failure" "$1" | head -40; }
# The attention cases into $OUT/$1_tests.log, then decode steps (4 layers, native) at each "batch context" of
# the rest with the decode batch off (split_kv) and on its default threshold.
decode_ab() {
  local name=$1; shift
  timeout 150 $d/bin/cuda_ops_test --gtest_filter='CudaAttentions.*:Cases/CudaAttention.*' > "$OUT/${name}_tests.log" 2>&1
  echo "tests rc $?"; summary "$OUT/${name}_tests.log"; grep -E '^decode batch of' "$OUT/${name}_tests.log"
  for v in "$@"; do
    read -r b c <<< "$v"
    for m in 1000000000 8; do
      echo "decode batch $b context $c min $m: $(DEEPINFER_ATTN_DECODE_WGP_MIN=$m timeout 120 $d/bin/model_bench \
        --preset flash --layers 4 --backend cuda --precision native --batch $b --prompt 16 --context $c --decode 8 2>&1 |
        grep -oE 'decode [0-9]+ steps in [0-9.]+ s = [0-9.]+ tokens/s, [0-9.]+ ms/step|out of.*')"
    done
  done
}
# stream_cases NAME FILTER: cuda_ops_test's FILTER into $OUT/NAME_tests.log, then cuda_model_test with the
# native model's bf16 streams (DEEPINFER_BF16_STREAMS=1) into $OUT/NAME_model.log.
stream_cases() {
  timeout 200 $d/bin/cuda_ops_test --gtest_filter="$2" > "$OUT/$1_tests.log" 2>&1
  echo "op tests rc $?"; summary "$OUT/$1_tests.log"; grep -E '^mhc_pre_norm tf32' "$OUT/$1_tests.log"
  DEEPINFER_BF16_STREAMS=1 DEEPINFER_TEST_DATA=$PWD/tests/data timeout 200 $d/bin/cuda_model_test \
    > "$OUT/$1_model.log" 2>&1
  echo "cuda_model_test rc $?"; summary "$OUT/$1_model.log"
}
# streams_ab WHAT ARGS...: model_bench (4 V4-Flash layers, native) with ARGS, f32 streams then bf16.
streams_ab() {
  local what=$1 rates='prefill [0-9]+ tokens in [^;]*|decode [0-9]+ steps in [^;]*|activation workspace[^;]*|out of.*'
  shift
  for s in 0 1; do
    echo "bf16 streams $s, $what: $(DEEPINFER_BF16_STREAMS=$s timeout 120 $d/bin/model_bench --preset flash \
      --layers 4 --backend cuda --precision native "$@" 2>&1 | grep -oE "$rates" | tr '\n' ' ')"
  done
}
# moe_rows PROMPT V: the 4-layer prefill's moe and total rows with V set ("-": the defaults; else "NAME=VALUE
# ...")
moe_rows() {
  local envs=(DEEPINFER_W4A8_BULK=0); [[ $2 == - ]] || read -ra envs <<< "$2"
  echo "4 layers, $1 [$2]: $(env "${envs[@]}" timeout 60 $d/bin/model_bench --preset flash --layers 4 \
    --backend cuda --precision native --prompt $1 --decode 1 --profile 1 2>&1 |
    grep -E '^\| (moe|total) ' | head -2 | tr '\n' ' ')"
}
# w4a8_clocks V: layer 0's moe_w4a8_kernel phases in cycles (DEEPINFER_W4A8_PROBE=256; that kernel's only, so
# DEEPINFER_W4A8_BULK_SS=0) with V set
w4a8_clocks() {
  echo "clocks [$1]: $(env DEEPINFER_W4A8_BULK_SS=0 DEEPINFER_W4A8_PROBE=256 $1 timeout 40 $d/bin/model_bench --preset flash --layers 1 \
    --backend cuda --precision native --prompt 4096 --decode 1 --warmup 0 2>&1 | grep -E '^w4a8 probe clocks' |
    head -2 | tr '\n' ' ')"
}
case ${PART:-fp8} in
  fused)
    timeout 120 $d/bin/cuda_ops_test --gtest_filter='CudaFused.*:CudaBatchedState.*:CudaAttentions.*:CudaSmallOps.*' \
      > "$OUT/fused.log" 2>&1
    echo "fused tests rc $?"; summary "$OUT/fused.log"
    timeout 150 $d/bin/cuda_model_test > "$OUT/model.log" 2>&1
    echo "model tests rc $?"; summary "$OUT/model.log"
    OUT=$OUT/ab PRECISION=native \
      SETTINGS="-;DEEPINFER_NORM_ROPES_ONE_LAUNCH=0;DEEPINFER_ATTN_TAIL_FUSED=0;-" \
      ROUNDS=2 timeout 300 tools/gpu_ab_env.sh
    ;;
  fp8)
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
  roofline)
    for p in native exact; do
      OUT=$OUT/$p PRECISION=$p BATCHES="1 4 16" GRAPHS=on DECODE=16 timeout 170 tools/gpu_decode_layers.sh
      OUT=$OUT/$p PRECISION=$p BATCHES=64 PROMPT=128 GRAPHS=on DECODE=16 timeout 90 tools/gpu_decode_layers.sh |
        tail -1
    done
    ;;
  spec)
    timeout 150 $d/bin/speculative_test > "$OUT/spec.log" 2>&1
    echo "speculative tests rc $?"; summary "$OUT/spec.log"
    for p in exact native; do
      timeout 150 $d/bin/spec_bench --backend cuda --preset flash --layers 4 --precision $p --prompt 128 \
        --decode 48 --accept "0 0.5 0.85" 2>&1 | tail -6
    done
    ;;
  all)  # what waits, most valuable first, in one call of <= 600 s (its own pack, 4.2 MB: TRACE=0
        # BINS="tests/gpu/cuda_ops_test tests/model/speculative_test bench/cuda_kernel_bench
        # bench/persistent_layer_probe bench/model_bench" tools/gpu_pack.sh)
    timeout 100 $d/bin/speculative_test > "$OUT/spec.log" 2>&1
    echo "speculative tests rc $?"; summary "$OUT/spec.log"
    timeout 150 $d/bin/cuda_ops_test --gtest_filter='*CudaLinearFp8Act*:*CudaLinearsFp8Act*' > "$OUT/fp8.log" 2>&1
    echo "fp8 tests rc $?"; summary "$OUT/fp8.log"
    timeout 130 $d/bin/cuda_kernel_bench --only moe_prefill > "$OUT/moe_prefill.log" 2>&1
    echo "moe_prefill rc $?"; grep -E "^\| moe fp4 n=(2730|4096)|dense cuBLASLt rates" "$OUT/moe_prefill.log"
    timeout 45 $d/bin/persistent_layer_probe 8 5 1 0.5 0
    OUT=$OUT/native PRECISION=native BATCHES="1 16" GRAPHS=on DECODE=16 timeout 120 tools/gpu_decode_layers.sh
    ;;
  shapes)  # where the prefill's time goes by linear shape and attention kind (pack above; the tests take
            # what is left of a call's 600 s)
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
  bulk)  # the bulk-copy w4a8 kernel (moe_w4a8_bulk.cu, off by default): its bit test against the default kernel,
         # then the kernel bench and the 4-layer prefill with each cluster size against the default (0)
    SECONDS=0
    timeout 60 $d/bin/cuda_ops_test --gtest_filter='CudaMoeW4a8.*' > "$OUT/bulk_test.log" 2>&1
    echo "w4a8 tests rc $?"; summary "$OUT/bulk_test.log"; grep -E "bulk|Which is|Expected" "$OUT/bulk_test.log" | head -20
    for cs in 0 2 4 1 0; do
      echo "prefill 4096, cluster $cs: $(DEEPINFER_W4A8_BULK=$cs timeout 40 $d/bin/model_bench --preset flash --layers 4 \
        --backend cuda --precision native --prompt 4096 --decode 1 2>&1 | grep -oE 'prefill [0-9]+ tokens in [^;]*')"
    done
    for cs in 0 2; do
      DEEPINFER_W4A8_BULK=$cs timeout 40 $d/bin/model_bench --preset flash --layers 4 --backend cuda --precision native \
        --prompt 4096 --decode 1 --profile 1 > "$OUT/profile_bulk$cs.log" 2>&1
      echo "profile, cluster $cs: $(grep -E '^\| moe ' "$OUT/profile_bulk$cs.log" | head -1)"
    done
    for cs in 0 2; do
      ((SECONDS > ${BULK_BENCH_S:-300})) && break
      echo "moe_prefill, cluster $cs: $(DEEPINFER_W4A8_BULK=$cs timeout 150 $d/bin/cuda_kernel_bench --only moe_prefill 2>&1 |
        grep -E '^\| moe fp4 n=(2730|4096).*w4a8' | tr '\n' ' ')"
    done
    ;;
  indexer)  # the indexer's walking blocks (DEEPINFER_INDEXER_MMA_WALK, off): their test (the default's picks),
            # then the 32K and 4K prefill's indexer_topk row with and without them (the shapes pack)
    timeout 120 $d/bin/cuda_ops_test --gtest_filter='CudaIndexerNative.*:*CudaIndexer.*' > "$OUT/indexer.log" 2>&1
    echo "indexer tests rc $?"; summary "$OUT/indexer.log"
    for n in 32768 4096; do for w in - DEEPINFER_INDEXER_MMA_WALK=1 - DEEPINFER_INDEXER_MMA_WALK=1; do
      envs=(); [[ $w == - ]] || envs=("$w")
      echo "prefill $n [$w]: $(env "${envs[@]}" timeout 60 $d/bin/model_bench --preset flash --layers 4 --backend cuda \
        --precision native --prompt $n --decode 1 --profile 1 2>&1 | grep -E '^\| (indexer_topk|total) ' | tr '\n' ' ')"
    done; done
    # the batch-256 decode step's profile, batched calls timed whole since 2026-12-06 (fifth session)
    timeout 120 $d/bin/model_bench --preset flash --layers 4 --backend cuda --precision native --batch 256 \
      --prompt 16 --context 4096 --decode 8 --profile shapes > "$OUT/shapes_b256.log" 2>&1
    echo "profile shapes batch 256 rc $?"; sed -n '/decode steps/,/^| total/p' "$OUT/shapes_b256.log" | head -24
    ;;
  one)  # the session's one call where the device is scarce (the shapes pack, ~9 min): the refactored default
        # w4a8 kernel's and the converting-warpgroup kernel's bits, the inner loop's rates and the L2's read rate,
        # the converting-warpgroup kernel's prefill against the default, the bulk kernel with parts left out,
        # the indexer's walking blocks (test, 32K A/B); each step skipped once its time is gone
    SECONDS=0
    timeout 60 $d/bin/cuda_ops_test --gtest_filter='CudaMoeW4a8.*:CudaIndexerNative.*:*CudaIndexer.*' \
      > "$OUT/one_tests.log" 2>&1
    echo "w4a8 and indexer tests rc $? (${SECONDS}s)"; summary "$OUT/one_tests.log"
    [[ -x $d/bin/wgmma_fp8_probe ]] && timeout 60 $d/bin/wgmma_fp8_probe
    prefill() {  # prefill() ENV... : the 4-layer 4K prefill's moe, indexer_topk and total rows
      env "$@" timeout 40 $d/bin/model_bench --preset flash --layers 4 --backend cuda --precision native \
        --prompt ${N:-4096} --decode 1 --profile 1 2>&1 | grep -E '^\| (moe|indexer_topk|total) ' | tr '\n' ' '
    }
    for ss in 0 1 0 1; do
      envs=(DEEPINFER_W4A8_BULK=0); ((ss)) && envs=(DEEPINFER_W4A8_BULK_SS=1)
      echo "prefill 4096 [${envs[*]}] (${SECONDS}s): $(prefill "${envs[@]}")"
    done
    # transformers bf16 eager on the same shapes, for the prefill's ratio in this call
    ((SECONDS < 330)) && timeout 200 python3 tools/hf_baseline.py --preset flash --dtype bf16 --prompt 4096 \
      --decode 2 > "$OUT/hf.log" 2>&1
    echo "transformers rc $? (${SECONDS}s)"; tail -2 "$OUT/hf.log"
    echo "prefill 4096 unprofiled (${SECONDS}s): $(timeout 40 $d/bin/model_bench --preset flash --layers 4 --backend cuda \
      --precision native --prompt 4096 --decode 2 2>&1 | grep -E '^backend')"
    for w in DEEPINFER_W4A8_BULK=0 DEEPINFER_INDEXER_MMA_WALK=1; do  # (the walk: any value turns it on)
      ((SECONDS > 430)) && break
      echo "prefill 32768 [$w] (${SECONDS}s): $(N=32768 prefill "$w")"
    done
    for pr in 0 1 2 4 8 16 31; do
      ((SECONDS > 540)) && break
      echo "bulk probe $pr (${SECONDS}s): $(prefill DEEPINFER_W4A8_BULK=1 DEEPINFER_W4A8_BULK_PROBE=$pr)"
    done
    ;;
  ssdefault)  # (the persist pack) the converting kernel with two converters and narrow tiles as the default:
              # the w4a8 cases with it, the 4K MoE against moe_w4a8_kernel (DEEPINFER_W4A8_BULK_SS=0)
    [[ -x $d/bin/cuda_ops_test ]] && timeout 100 $d/bin/cuda_ops_test \
      --gtest_filter='CudaMoeW4a8.*:Cases/CudaMoe.MatchesRef/native*' > "$OUT/w4a8_tests.log" 2>&1
    echo "w4a8 tests rc $?"; summary "$OUT/w4a8_tests.log"
    for v in - DEEPINFER_W4A8_BULK_SS=0; do
      moe_rows 4096 "$v"
    done
    ;;
  attnlite)  # (PART=attnwgp's pack) its essentials when little device time is left: the attention cases and
             # kernel times, the w4a8 cases, the 4K profile with and without the pipelined attention, the 4K
             # prefill
    timeout 150 $d/bin/cuda_ops_test --gtest_filter='Cases/CudaAttention.*:CudaAttentions.*' \
      > "$OUT/attn_tests.log" 2>&1
    echo "attention tests rc $?"; summary "$OUT/attn_tests.log"
    timeout 120 $d/bin/cuda_kernel_bench --only attention_prefill > "$OUT/attn_bench.log" 2>&1
    echo "attention bench rc $?"; grep -E 'mma|TFLOP|BF16' "$OUT/attn_bench.log" | head -20
    timeout 100 $d/bin/cuda_ops_test --gtest_filter='CudaMoeW4a8.*:Cases/CudaMoe.MatchesRef/native*' \
      > "$OUT/w4a8_tests.log" 2>&1
    echo "w4a8 tests rc $?"; summary "$OUT/w4a8_tests.log"
    for v in 0 2; do
      DEEPINFER_ATTN_WGMMA=$v timeout 120 $d/bin/model_bench --preset flash --layers 4 --backend cuda \
        --precision native --prompt 4096 --decode 1 --profile shapes > "$OUT/shapes_4096_$v.log" 2>&1
      echo "profile shapes 4096, DEEPINFER_ATTN_WGMMA=$v rc $?"
      sed -n '/profile of the prefill/,/^| total/p' "$OUT/shapes_4096_$v.log"
    done
    for v in 0 2 0 2; do
      echo "prefill 4096, DEEPINFER_ATTN_WGMMA=$v: $(DEEPINFER_ATTN_WGMMA=$v timeout 60 $d/bin/model_bench --preset \
        flash --layers 4 --backend cuda --precision native --prompt 4096 --decode 2 2>&1 | grep -oE 'prefill [0-9]+ tokens in [^;]*')"
    done
    ;;
  ssconv2)  # (pack: TRACE=0 BINS="bench/model_bench bench/model_bench_prev bench/model_bench_v2
            # tests/gpu/cuda_ops_test"; model_bench and cuda_ops_test the converter-ahead branch, model_bench_prev
            # main's build, model_bench_v2 the branch with each chunk published after the next chunk's waits and
            # the stages counted by addition) the w4a8 cases (the branch), then the three builds' 4K / 32K MoE
            # and 4K prefill in turn, then Nsight Compute on the branch's and v2's kernel
    timeout 110 $d/bin/cuda_ops_test --gtest_filter='CudaMoeW4a8.*:Cases/CudaMoe.MatchesRef/native*' \
      > "$OUT/w4a8_tests.log" 2>&1
    echo "w4a8 tests rc $?"; summary "$OUT/w4a8_tests.log"
    for v in "4096 model_bench_prev" "4096 model_bench" "4096 model_bench_v2" "4096 model_bench_prev" \
      "4096 model_bench" "4096 model_bench_v2" "32768 model_bench_prev" "32768 model_bench" "32768 model_bench_v2"; do
      read -r n b <<< "$v"
      echo "$b 4 layers, $n: $(timeout 60 $d/bin/$b --preset flash --layers 4 --backend cuda --precision native \
        --prompt $n --decode 1 --profile 1 2>&1 | grep -E '^\| (moe|total) ' | awk -F'|' '{printf "%s %s ms; ", $2, $4}')"
    done
    for b in model_bench_prev model_bench model_bench_v2 model_bench_prev model_bench model_bench_v2; do
      echo "prefill 4096 [$b]: $(timeout 60 $d/bin/$b --preset flash --layers 4 --backend cuda --precision native \
        --prompt 4096 --decode 2 2>&1 | grep -oE 'prefill [0-9]+ tokens in [^;]*')"
    done
    for b in model_bench model_bench_v2; do
      echo "== ncu $b"
      NCU_BIN=$b NCU_KERNELS=moe_w4a8_bulk_ss PART=ssncu OUT=$OUT "$0" 2>&1 | grep -vE '^ +[0-9.]+%  +[A-Z@]' | head -30
      mv "$OUT/ncu_moe_w4a8_bulk_ss.csv" "$OUT/ncu_$b.csv" 2>/dev/null; rm -f "$OUT/ncu_moe_w4a8_bulk_ss.txt"
    done
    ;;
  ssloop)  # (pack: TRACE=0 BINS="bench/model_bench bench/model_bench_prev tests/gpu/cuda_ops_test", model_bench_prev
           # built before the change) the converting W4A8 kernel's multiplying loop with one loop a tile width and
           # the stages' descriptors by addition, its converters' stage arithmetic in 32 bits; the pipelined
           # attention as the default: their cases, then the 4K / 32K MoE and the 4K prefill against the build
           # before, alternating, and Nsight Compute's instruction counts on one launch
    timeout 60 $d/bin/cuda_ops_test --gtest_filter='Cases/CudaAttention.*:CudaAttentions.*' > "$OUT/attn_tests.log" 2>&1
    echo "attention tests rc $?"; summary "$OUT/attn_tests.log"
    timeout 110 $d/bin/cuda_ops_test --gtest_filter='CudaMoeW4a8.*:Cases/CudaMoe.MatchesRef/native*' \
      > "$OUT/w4a8_tests.log" 2>&1
    echo "w4a8 tests rc $?"; summary "$OUT/w4a8_tests.log"
    runs=("4096 model_bench_prev" "4096 model_bench")
    [[ ${LITE:-0} == 2 ]] || runs+=("4096 model_bench_prev" "4096 model_bench")
    [[ ${LITE:-0} != 0 ]] || runs+=("32768 model_bench_prev" "32768 model_bench")
    for v in "${runs[@]}"; do
      read -r n b <<< "$v"
      echo "$b 4 layers, $n: $(DEEPINFER_ATTN_WGMMA=2 timeout 60 $d/bin/$b --preset flash --layers 4 --backend cuda \
        --precision native --prompt $n --decode 1 --profile 1 2>&1 | grep -E '^\| (moe|attention|total) ' | \
        awk -F'|' '{printf "%s %s ms; ", $2, $4}')"
    done
    for v in "model_bench_prev 0" "model_bench_prev 2" "model_bench 2" "model_bench_prev 0" "model_bench_prev 2" "model_bench 2"; do
      read -r b a <<< "$v"
      echo "prefill 4096 [$b, DEEPINFER_ATTN_WGMMA=$a]: $(DEEPINFER_ATTN_WGMMA=$a timeout 60 $d/bin/$b --preset flash \
        --layers 4 --backend cuda --precision native --prompt 4096 --decode 2 2>&1 | grep -oE 'prefill [0-9]+ tokens in [^;]*')"
    done
    NCU_KERNELS=moe_w4a8_bulk_ss PART=ssncu OUT=$OUT "$0" 2>&1 | grep -vE '^ +[0-9.]+%  +[A-Z@]' | head -30
    ;;
  ssncu)  # (PART=attnwgp's pack) Nsight Compute on one up launch of the converting W4A8 kernel and one launch
           # of the pipelined attention: speed of light, warp states, the hottest SASS lines and their stalls
    ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
    for k in ${NCU_KERNELS:-moe_w4a8_bulk_ss attention_wgp}; do
      timeout 200 "$ncu" --kernel-name regex:"${k}_kernel" --launch-skip 1 --launch-count 1 \
        --section SpeedOfLight --section WarpStateStats --section SourceCounters --section LaunchStats \
        --section ComputeWorkloadAnalysis --section InstructionStats -f -o "$OUT/ncu_$k" \
        $d/bin/${NCU_BIN:-model_bench} --preset flash --layers 2 \
        --backend cuda --precision native --prompt 4096 --decode 1 --warmup 0 --graphs off > "$OUT/ncu_$k.log" 2>&1
      echo "== ncu $k rc $?"
      "$ncu" --import "$OUT/ncu_$k.ncu-rep" --page details 2>/dev/null > "$OUT/ncu_$k.txt"
      grep -E "Executed Instructions|Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Executed Ipc A|Warp Cycles Per Issued|Stall|Registers Per|Block Size|Theoretical Occ" "$OUT/ncu_$k.txt" | head -30
      "$ncu" --import "$OUT/ncu_$k.ncu-rep" --page source --print-source sass --csv > "$OUT/ncu_$k.csv" 2>&1
      python3 tools/ncu_top_lines.py "$OUT/ncu_$k.csv" 30
      rm -f "$OUT/ncu_$k.ncu-rep" "$OUT/ncu_$k.log"  # (a call brings back only so many files)
    done
    ;;
  attnwgp)  # (pack: TRACE=0 BINS="bench/model_bench tests/gpu/cuda_ops_test bench/cuda_kernel_bench") the
            # pipelined warpgroup attention (attention_wgp.cu, DEEPINFER_ATTN_WGMMA=2): its cases against the
            # reference, its kernel times against mma64's, then where a 4K and a 32K prefill's time goes now by
            # shape with and without it; PART=ssdefault first
    PART=ssdefault OUT=$OUT "$0"
    timeout 150 $d/bin/cuda_ops_test --gtest_filter='Cases/CudaAttention.*:CudaAttentions.*' \
      > "$OUT/attn_tests.log" 2>&1
    echo "attention tests rc $?"; summary "$OUT/attn_tests.log"
    timeout 120 $d/bin/cuda_kernel_bench --only attention_prefill > "$OUT/attn_bench.log" 2>&1
    echo "attention bench rc $?"; grep -E 'mma|TFLOP|BF16' "$OUT/attn_bench.log" | head -20
    for n in 4096 32768; do
      for v in 0 2; do
        DEEPINFER_ATTN_WGMMA=$v timeout 120 $d/bin/model_bench --preset flash --layers 4 --backend cuda \
          --precision native --prompt $n --decode 1 --profile shapes > "$OUT/shapes_${n}_$v.log" 2>&1
        echo "profile shapes $n, DEEPINFER_ATTN_WGMMA=$v rc $?"
        if [[ $v == 0 ]]; then sed -n '/profile of the prefill/,/^| total/p' "$OUT/shapes_${n}_$v.log"
        else grep -E '^\| (attention|total)' "$OUT/shapes_${n}_$v.log"; fi
      done
    done
    for v in 0 2 0 2; do  # the whole prefill, graphs on
      echo "prefill 4096, DEEPINFER_ATTN_WGMMA=$v: $(DEEPINFER_ATTN_WGMMA=$v timeout 60 $d/bin/model_bench --preset \
        flash --layers 4 --backend cuda --precision native --prompt 4096 --decode 2 2>&1 | grep -oE 'prefill [0-9]+ tokens in [^;]*')"
    done
    ;;
  conv2)  # (the persist pack) PART=swiglu's checks with the two-converter form of the converting-warpgroup
          # kernel (DEEPINFER_W4A8_BULK_SS=2) and its narrow tiles (DEEPINFER_W4A8_SS_NARROW): bits first,
          # then the 4K / 32K MoE A/B, the clocks last
    [[ -x $d/bin/cuda_ops_test ]] && timeout 150 $d/bin/cuda_ops_test \
      --gtest_filter='CudaMoeW4a8.*:Cases/CudaMoe.MatchesRef/native*_w4a8' > "$OUT/w4a8_tests.log" 2>&1
    echo "w4a8 tests rc $?"; summary "$OUT/w4a8_tests.log"
    grep -E 'max abs err|launches' "$OUT/w4a8_tests.log" | head -20
    for prompt in 4096 32768; do
      n2="DEEPINFER_W4A8_BULK_SS=2 DEEPINFER_W4A8_SS_NARROW=1"
      vs=(- DEEPINFER_W4A8_BULK_SS=2 "$n2" DEEPINFER_W4A8_SWIGLU_OUT=1 - DEEPINFER_W4A8_BULK_SS=2)
      [[ $prompt == 4096 ]] || vs=(- DEEPINFER_W4A8_BULK_SS=2 DEEPINFER_W4A8_SWIGLU_OUT=1)
      for v in "${vs[@]}"; do
        moe_rows $prompt "$v"
      done
    done
    w4a8_clocks DEEPINFER_W4A8_PERSIST=1
    ;;
  swiglu)  # (the persist pack) up's SwiGLU in the persistent form's epilogue: bits, then the MoE A/B
    [[ -x $d/bin/cuda_ops_test ]] && timeout 120 $d/bin/cuda_ops_test \
      --gtest_filter='CudaMoeW4a8.*:Cases/CudaMoe.MatchesRef/native*' > "$OUT/w4a8_tests.log" 2>&1
    echo "w4a8 tests rc $?"; summary "$OUT/w4a8_tests.log"
    # an item's phases in the persistent form (the clocks now per item, from the last item's end) and in a
    # block an item
    w4a8_clocks DEEPINFER_W4A8_PERSIST=1
    for prompt in 4096 32768; do
      for v in - DEEPINFER_W4A8_SWIGLU_OUT=1 - DEEPINFER_W4A8_SWIGLU_OUT=1; do
        moe_rows $prompt "$v"
      done
    done
    ;;
  persist)  # (the skeleton pack) the persistent w4a8 form taking items from a counter: its bits (with and
             # without unit offsets), then the 4-layer 4K and 32K MoE against the default, each twice
    [[ -x $d/bin/cuda_ops_test ]] && timeout 90 $d/bin/cuda_ops_test \
      --gtest_filter='CudaMoeW4a8.*:Cases/CudaMoe.MatchesRef/native*_w4a8' > "$OUT/w4a8_tests.log" 2>&1
    echo "w4a8 tests rc $?"; summary "$OUT/w4a8_tests.log"
    for prompt in 4096 32768; do
      vs=(- DEEPINFER_W4A8_PERSIST=1 "DEEPINFER_W4A8_PERSIST=1 DEEPINFER_W4A8_UNITS=1" DEEPINFER_W4A8_UNITS=1 -)
      [[ $prompt == 4096 ]] || vs=(- DEEPINFER_W4A8_PERSIST=1 "DEEPINFER_W4A8_PERSIST=1 DEEPINFER_W4A8_UNITS=1")
      for v in "${vs[@]}"; do
        moe_rows $prompt "$v"
      done
    done
    ;;
  skeleton)  # (a TRACE=0 pack of model_bench) what the w4a8 kernel's skeleton costs: Nsight Compute's stall
             # sampling per SASS instruction on layer 0's up launch, with every part left out (probe 127) and
             # whole; the 25 instructions with the most samples and the stall reasons of each launch
    # first the bits of the default kernel's stores through the tile's pair ids in shared memory (written
    # after the sixth session's device time; needs cuda_ops_test in the pack too)
    [[ -x $d/bin/cuda_ops_test ]] && timeout 60 $d/bin/cuda_ops_test \
      --gtest_filter='CudaActQuant.*:CudaMoeW4a8.*:Cases/CudaMoe.MatchesRef/native*_w4a8' > "$OUT/w4a8_tests.log" 2>&1
    echo "w4a8 tests rc $?"; summary "$OUT/w4a8_tests.log"
    # the MoE with one warpgroup a block (two blocks an SM: one's prologue beside the other's chunks, now that
    # the prologue is shorter) and on the converting-warpgroup kernel (its tile_rows_kernel rewritten)
    for v in - DEEPINFER_W4A8_PERSIST=1 DEEPINFER_W4A8_WG1=1 DEEPINFER_W4A8_BULK_SS=1 DEEPINFER_W4A8_PERSIST=1 -; do
      moe_rows 4096 "$v"
    done
    # each block's first tile's phases in cycles (probe bit 256), whole (256) and the skeleton alone (383)
    for v in 256 383; do
      echo "clocks [$v]: $(DEEPINFER_W4A8_PROBE=$v timeout 40 $d/bin/model_bench --preset flash --layers 1 --backend cuda \
        --precision native --prompt 4096 --decode 1 --warmup 0 2>&1 | grep -E '^w4a8 probe clocks' | head -2 | tr '\n' ' ')"
    done
    [[ -x $d/bin/wgmma_fp8_probe ]] && timeout 60 $d/bin/wgmma_fp8_probe  # (its unpromoted rows fixed)
    # the quantiser with four 128-column blocks a warp by 16-byte loads (was 31.1 us at 4,096 x 4,096)
    [[ -x $d/bin/cuda_kernel_bench ]] && timeout 90 $d/bin/cuda_kernel_bench --only gemm --quick 2>&1 |
      grep -E "act_quant alone|cublaslt_fp8" | head -24
    ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
    for v in 127 default; do
      envs=(DEEPINFER_W4A8_BULK=0); [[ $v == default ]] || envs=(DEEPINFER_W4A8_PROBE=$v)
      env "${envs[@]}" timeout 150 "$ncu" --kernel-name regex:moe_w4a8_kernel --launch-skip 0 --launch-count 1 \
        --section SourceCounters --section WarpStateStats --section LaunchStats -f -o "$OUT/skel_$v" \
        $d/bin/model_bench --preset flash --layers 1 --backend cuda --precision native --prompt 4096 --decode 1 \
        --warmup 0 --graphs off > "$OUT/skel_$v.log" 2>&1
      echo "== ncu [$v] rc $?"
      "$ncu" --import "$OUT/skel_$v.ncu-rep" --page details 2>/dev/null | grep -E "Duration|Stall|Warp Cycles|Issued" | head -20
      "$ncu" --import "$OUT/skel_$v.ncu-rep" --page source --print-source sass --csv > "$OUT/skel_$v.csv" 2>&1
      python3 tools/ncu_top_lines.py "$OUT/skel_$v.csv" 25
    done
    ;;
  prologue)  # (a TRACE=1 pack of model_bench and cuda_ops_test) the w4a8 kernel's prologue without its chain of
             # round trips (token scales by cp.async, a row's scale loads together): its bits, layer 0's up and
             # down launches, the 4-layer prefill at 4K and 32K
    timeout 80 $d/bin/cuda_ops_test --gtest_filter='CudaMoeW4a8.*:CudaIndexerNative.*' > "$OUT/tests.log" 2>&1
    echo "w4a8 and indexer native tests rc $?"; summary "$OUT/tests.log"
    CUDA_INJECTION64_PATH=$PWD/$d/lib/libkernel_trace.so DEEPINFER_TRACE_OUT=$OUT/tr.csv timeout 40 $d/bin/model_bench \
      --preset flash --layers 1 --backend cuda --precision native --prompt 4096 --decode 1 > "$OUT/tr.log" 2>&1
    echo "layer 0 rc $? $(python3 tools/trace_totals.py "$OUT/tr.csv" 40 --calls 4 | grep -A1 -E 'moe_w4a8' | tr -s ' ' | tr '\n' ' ' | cut -c1-200)"
    for n in 4096 4096 32768; do
      echo "prefill $n: $(timeout 60 $d/bin/model_bench --preset flash --layers 4 --backend cuda --precision native \
        --prompt $n --decode 2 2>&1 | grep -oE 'prefill [0-9]+ tokens in [^;]*')"
    done
    timeout 40 $d/bin/model_bench --preset flash --layers 4 --backend cuda --precision native --prompt 4096 \
      --decode 1 --profile 1 2>&1 | grep -E '^\| (moe|attention|linear|indexer_topk|total) ' | head -6
    ;;
  w4probe)  # (a TRACE=1 pack of model_bench and cuda_ops_test) where the default w4a8 kernel's time goes: its up
            # and down launches in layer 0 (hash-routed: the same pairs whatever the outputs) with parts left
            # out (DEEPINFER_W4A8_PROBE: 1 conversion, 2 promotion, 4 wgmmas, 8 weight copies, 16 token copies,
            # 32 stores, 64 the block barrier a chunk; 128 none, the probe form's own cost)
    timeout 60 $d/bin/cuda_ops_test --gtest_filter='CudaMoeW4a8.*:CudaIndexerNative.*' > "$OUT/tests.log" 2>&1
    echo "w4a8 and indexer native tests rc $?"; summary "$OUT/tests.log"
    for v in default 128 1 2 4 8 16 32 64 3 24 5 6 31 63 127 ss; do
      envs=(DEEPINFER_W4A8_BULK=0)
      [[ $v == ss ]] && envs=(DEEPINFER_W4A8_BULK_SS=1)
      [[ $v =~ ^[0-9]+$ ]] && envs=(DEEPINFER_W4A8_PROBE=$v)
      env "${envs[@]}" CUDA_INJECTION64_PATH=$PWD/$d/lib/libkernel_trace.so DEEPINFER_TRACE_OUT=$OUT/tr_$v.csv \
        timeout 40 $d/bin/model_bench --preset flash --layers 1 --backend cuda --precision native --prompt 4096 \
        --decode 1 > "$OUT/tr_$v.log" 2>&1
      echo "[$v] rc $? $(python3 tools/trace_totals.py "$OUT/tr_$v.csv" 40 --calls 4 | grep -A1 -E 'moe_w4a8' | tr -s ' ' | tr '\n' ' ' | cut -c1-240)"
    done
    ;;
  bf16s)  # (PART=short's pack) the mHC, embed, cast and fused cases on both stream types and the determinism
          # and batched-state cases, the model tests with bf16 streams, then the 4-layer prefill at 4K (twice)
          # and 32K, the mHC rows of its 4K profile and decode at batch 256, each with f32 streams against bf16
    stream_cases bf16s 'CudaMhc.*:CudaFused.*:CudaSmallOps.*:CudaDeterminism.*:CudaBatchedState.*'
    for n in 4096 4096 32768; do streams_ab "prefill $n" --prompt $n --decode 2; done
    for s in 0 1; do
      echo "bf16 streams $s, 4K profile: $(DEEPINFER_BF16_STREAMS=$s timeout 60 $d/bin/model_bench --preset flash \
        --layers 4 --backend cuda --precision native --prompt 4096 --decode 1 --profile 1 2>&1 |
        grep -E '^\| (mhc[a-z_]*|hc_head[a-z_]*|add_mhc_post|total) ' | tr -s ' ' | tr '\n' ' ')"
    done
    streams_ab "decode batch 256" --batch 256 --prompt 16 --context 4096 --decode 8
    ;;
  both)  # (PART=short's pack) PART=bf16s, then PART=decpicks's cases and its decode A/B at the contexts where
         # it changes the most
    PART=bf16s bash "$0"
    decode_ab decpicks "256 4096" "64 16384" "256 16384" "64 65536"
    ;;
  sspairs)  # (pack: TRACE=0 BINS="bench/model_bench bench/model_bench_pairs tests/gpu/cuda_ops_test"; model_bench
            # from main, model_bench_pairs and cuda_ops_test from wip/ss-pairs) the n64 / n96 tiles' chunks two to
            # a wgmma group: the W4A8 cases (the default's bits), then the 4K MoE and prefill of both, twice
    timeout 200 $d/bin/cuda_ops_test --gtest_filter='CudaMoeW4a8.*:Cases/CudaMoe.MatchesRef/native*' \
      > "$OUT/sspairs_tests.log" 2>&1
    echo "tests rc $?"; summary "$OUT/sspairs_tests.log"
    for b in model_bench model_bench_pairs model_bench model_bench_pairs; do
      echo "$b 4K: $(timeout 60 $d/bin/$b --preset flash --layers 4 --backend cuda --precision native --prompt 4096 \
        --decode 1 --profile 1 2>&1 | grep -E '^\| (moe|total) ' | head -2 | tr '\n' ' ') $(timeout 60 $d/bin/$b \
        --preset flash --layers 4 --backend cuda --precision native --prompt 4096 --decode 2 2>&1 |
        grep -oE 'prefill [0-9]+ tokens[^;]*')"
    done
    ;;
  ssprobe)  # (pack: TRACE=0 BINS="bench/model_bench bench/model_bench_probe tests/gpu/cuda_model_test", main
            # and model_bench_probe from wip/ss-probe) what bounds the converting W4A8 kernel: one layer's 4K
            # MoE profile row (one layer: parts left out change the next layers' routing) with parts left out
            # (DEEPINFER_W4A8_BULK_PROBE: 1 the conversion, 2 the promotion, 8 the weight copies, 16 the token
            # copies, 32 the stores), then PART=final6's quick form
    for v in 0 1 2 8 16 32 9 27 59 0; do
      echo "probe $v: $(DEEPINFER_W4A8_BULK_PROBE=$v timeout 60 $d/bin/model_bench_probe --preset flash --layers 1 \
        --backend cuda --precision native --prompt 4096 --decode 1 --profile 1 2>&1 | grep -E '^\| moe ' | head -1)"
    done
    FINAL6_QUICK=1 PART=final6 bash "$0"
    ;;
  final6)  # (pack: TRACE=0 BINS="bench/model_bench tests/gpu/cuda_model_test", main with bf16 streams on by
           # default; ~3 min) the whole-model tests, the 4K and 32K prefill, a 16K prompt in chunks with the W4A8
           # MoE's threshold (pairs an expert, DEEPINFER_W4A8_MIN_PAIRS) lowered
    DEEPINFER_TEST_DATA=$PWD/tests/data timeout 150 $d/bin/cuda_model_test > "$OUT/final6_model.log" 2>&1
    echo "cuda_model_test rc $?"; summary "$OUT/final6_model.log"
    prompts=(4096 4096 32768) chunks=("2048 64" "2048 40" "2048 32" "1024 20" "4096 64")
    [[ ${FINAL6_QUICK:-0} == 1 ]] && prompts=(4096) chunks=("2048 64" "2048 40" "2048 32")
    for p in "${prompts[@]}"; do
      echo "prefill $p: $(timeout 100 $d/bin/model_bench --preset flash --layers 4 --backend cuda --precision native \
        --prompt $p --decode 2 2>&1 | grep -oE 'prefill [0-9]+ tokens[^;]*|activation workspace[^;]*|out of.*' | tr '\n' ' ')"
    done
    for v in "${chunks[@]}"; do
      read -r c m <<< "$v"
      echo "16K chunk $c min pairs $m: $(DEEPINFER_W4A8_MIN_PAIRS=$m timeout 90 $d/bin/model_bench --preset flash \
        --layers 4 --backend cuda --precision native --prompt 16384 --prefill-chunk $c --decode 2 2>&1 |
        grep -oE 'prefill [0-9]+ tokens[^;]*' | tr '\n' ' ')"
    done
    ;;
  chunks)  # (PART=short's pack) the serving step's prefill budget (issue 11, item 5): a 16K prompt prefilled
           # in chunks of 2,048 (cuda's default --prefill-chunk), 4,096, 8,192 and 16,384 tokens, twice each;
           # the MoE takes W4A8 from 2,731 tokens a chunk (64 pairs an expert), wgmma below
    for c in 2048 4096 8192 16384 2048 4096; do
      echo "prefill 16384 chunk $c: $(timeout 90 $d/bin/model_bench --preset flash --layers 4 --backend cuda \
        --precision native --prompt 16384 --prefill-chunk $c --decode 2 2>&1 |
        grep -oE 'prefill [0-9]+ tokens[^;]*|activation workspace[^;]*|out of.*' | tr '\n' ' ')"
    done
    ;;
  short)  # (pack: TRACE=0 BINS="bench/model_bench tests/gpu/cuda_ops_test tests/gpu/cuda_model_test", main with
          # wip/decode-picks merged) for a call of ~5 min: the mHC / fused / small-op cases (bf16 streams too)
          # and the attention cases, cuda_model_test with bf16 streams, the 4K prefill with f32 streams against
          # bf16 twice (DEEPINFER_BF16_STREAMS), decode at batch 256 with each, and decpicks's A/B at 16K
    stream_cases short 'CudaMhc.*:CudaFused.*:CudaSmallOps.*:CudaAttentions.*:Cases/CudaAttention.*'
    grep -E '^decode batch of' "$OUT/short_tests.log"
    for n in 1 2; do streams_ab "prefill 4096" --prompt 4096 --decode 2; done
    streams_ab "decode batch 256" --batch 256 --prompt 16 --context 4096 --decode 8
    for m in 1000000000 8; do
      echo "decpicks decode batch 64 context 16384 min $m: $(DEEPINFER_ATTN_DECODE_WGP_MIN=$m timeout 60 \
        $d/bin/model_bench --preset flash --layers 4 --backend cuda --precision native --batch 64 --prompt 16 \
        --context 16384 --decode 8 2>&1 | grep -oE '[0-9.]+ ms/step|out of.*')"
    done
    ;;
  decpicks)  # (pack: TRACE=0 BINS="bench/model_bench tests/gpu/cuda_ops_test", branch wip/decode-picks) the
              # decode batch converting only a CSA job's picked entries: the attention cases (the long-context
              # job now in the batch, its bits equal to its own mma64 launch), then decode at batch 64 and 256
              # at contexts 4,096, 16,384 and 65,536 with the batch off and on its defaults
    decode_ab decpicks "64 4096" "256 4096" "64 16384" "256 16384" "64 65536"
    ;;
  decwgp2)  # (PART=decwgp's pack, main with the entries' rule) the attention cases, then decode at batch 64 and
             # 256 at contexts 4,096 and 16,384 with the batch off and on its defaults
    decode_ab decwgp2 "64 4096" "64 16384" "256 16384"
    ;;
  final4)  # (pack: TRACE=0 BINS="bench/model_bench tests/gpu/cuda_ops_test tests/gpu/cuda_model_test", main) the
            # merged session: the whole-model GPU tests, the attention, determinism, state and fused cases, the
            # 4K prefill and decode at batch 8 and 64 on the defaults
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
  decsmall)  # (PART=decwgp's pack) the decode batch on attention_wgp at small batches, alternating with split_kv
    for b in 1 2 4 8 1 2 4 8; do
      for m in 1000000000 1; do
        echo "decode batch $b min $m: $(DEEPINFER_ATTN_DECODE_WGP_MIN=$m timeout 60 $d/bin/model_bench --preset flash \
          --layers 4 --backend cuda --precision native --batch $b --prompt 16 --context 4096 --decode 16 2>&1 |
          grep -oE 'decode [0-9]+ steps in [0-9.]+ s = [0-9.]+ tokens/s, [0-9.]+ ms/step|out of.*')"
      done
    done
    ;;
  decwgp)  # (pack: TRACE=0 BINS="bench/model_bench tests/gpu/cuda_ops_test", branch wip/decode-wgp) a decode
            # batch's attention on attention_wgp (attention_decode.h): the attention cases, then decode steps
            # with the batch off (DEEPINFER_ATTN_DECODE_WGP_MIN huge: split_kv), at threshold 32 and at 1,
            # batches 8 to 256, and the batch-256 profile with it
    timeout 150 $d/bin/cuda_ops_test --gtest_filter='CudaAttentions.*:Cases/CudaAttention.*' \
      > "$OUT/decwgp_tests.log" 2>&1
    echo "tests rc $?"; summary "$OUT/decwgp_tests.log"; grep -E '^decode batch of' "$OUT/decwgp_tests.log"
    for b in 256 64 32 16 8; do
      for m in 1000000000 32 1; do
        [[ $b -ge 32 && $m == 1 ]] && continue
        echo "decode batch $b min $m: $(DEEPINFER_ATTN_DECODE_WGP_MIN=$m timeout 120 $d/bin/model_bench --preset flash \
          --layers 4 --backend cuda --precision native --batch $b --prompt 16 --context 4096 --decode 8 2>&1 |
          grep -oE 'decode [0-9]+ steps in [0-9.]+ s = [0-9.]+ tokens/s, [0-9.]+ ms/step|out of.*')"
      done
    done
    DEEPINFER_ATTN_DECODE_WGP_MIN=32 timeout 150 $d/bin/model_bench --preset flash --layers 4 --backend cuda \
      --precision native --batch 256 --prompt 16 --context 4096 --decode 8 --profile shapes > "$OUT/dec256.log" 2>&1
    echo "== batch-256 profile rc $?"; awk '/profile of 8 decode/{f=1} f' "$OUT/dec256.log" | grep -E '^\|' | head -12
    ;;
  sublayer)  # (pack: TRACE=0 BINS="bench/model_bench tests/gpu/cuda_model_test", main with the arena rewound after
              # each sub-layer) graph replay against eager and the goldens, the 4K and 32K prefills' workspace,
              # then decode at batch 64 and 256 (4 layers, synthetic context 4,096) and at batch 64 on 16 layers
    DEEPINFER_TEST_DATA=$PWD/tests/data timeout 200 $d/bin/cuda_model_test > "$OUT/sublayer_model.log" 2>&1
    echo "cuda_model_test rc $?"; summary "$OUT/sublayer_model.log"
    for n in 4096 32768 4096; do
      echo "prefill $n: $(timeout 120 $d/bin/model_bench --preset flash --layers 4 --backend cuda --precision native \
        --prompt $n --decode 2 2>&1 | grep -oE 'prefill [0-9]+ tokens in [^;]*|^activation.*|out of.*' | tr '\n' ' ')"
    done
    for v in "4 64" "4 256" "16 64"; do
      read -r L b <<< "$v"
      echo "decode $L layers batch $b: $(timeout 150 $d/bin/model_bench --preset flash --layers $L --backend cuda \
        --precision native --batch $b --prompt 16 --context 4096 --decode 8 2>&1 |
        grep -oE 'decode [0-9]+ steps in [0-9.]+ s = [0-9.]+ tokens/s, [0-9.]+ ms/step|^activation.*|out of.*' | tr '\n' ' ')"
    done
    ;;
  rewind)  # (pack: TRACE=0 BINS="bench/model_bench bench/model_bench_prev tests/gpu/cuda_model_test"; model_bench
            # and cuda_model_test wip/o-fp8 with wip/ws-rewind, model_bench_prev main's build at 0758e20) the step
            # arena rewound after each layer: graph replay against eager and the goldens on the GPU, then the
            # workspace and the 4K and 32K rows (32K did not fit the H100 on the o-fp8 build alone), the 4K
            # prefill alternating, and the 16-layer batch-16 step that did not fit the H100 before
    DEEPINFER_TEST_DATA=$PWD/tests/data timeout 200 $d/bin/cuda_model_test > "$OUT/rewind_model.log" 2>&1
    echo "cuda_model_test rc $?"; summary "$OUT/rewind_model.log"
    for v in "4096 model_bench_prev" "4096 model_bench" "32768 model_bench_prev" "32768 model_bench"; do
      read -r n b <<< "$v"
      timeout 120 $d/bin/$b --preset flash --layers 4 --backend cuda --precision native --prompt $n --decode 1 \
        --profile 1 > "$OUT/rows_${n}_$b.log" 2>&1
      echo "$b 4 layers, $n rc $?: $(grep -E '^\| (attention|linear|act_quant|total) ' "$OUT/rows_${n}_$b.log" |
        head -4 | awk -F'|' '{printf "%s %s ms; ", $2, $4}') $(grep -E '^activation|out of' "$OUT/rows_${n}_$b.log")"
    done
    for b in model_bench_prev model_bench model_bench_prev model_bench; do
      echo "prefill 4096 [$b]: $(timeout 60 $d/bin/$b --preset flash --layers 4 --backend cuda --precision native \
        --prompt 4096 --decode 2 2>&1 | grep -oE 'prefill [0-9]+ tokens in [^;]*|^activation.*|out of.*' | tr '\n' ' ')"
    done
    for b in model_bench_prev model_bench; do
      echo "16 layers batch 16 [$b]: $(timeout 120 $d/bin/$b --preset flash --layers 16 --backend cuda \
        --precision native --batch 16 --prompt 512 --decode 16 2>&1 |
        grep -oE 'prefill [0-9]+ tokens in [^;]*|decode .*step|^activation.*|out of.*' | tr '\n' ' ')"
    done
    ;;
  ofp8)  # (pack: TRACE=0 BINS="bench/model_bench bench/model_bench_prev tests/gpu/cuda_ops_test"; model_bench and
          # cuda_ops_test branch wip/o-fp8, model_bench_prev main's build at 0758e20) the attention's output
          # quantised where attention_wgp stores it and read by wo_a's groups as codes, and the prepared queries'
          # row scales computed once: the cases (bits against the parts, the pre-quantised linears' bits), then
          # the two builds' 4K and 32K rows, the 4K prefill alternating
    # LITE=1 (~3 min): the new cases only, the 4K rows and prefill; LITE=2 (~1.5 min): the tail's and the
    # quantiser's cases, one 4K profile and two prefills each
    f='CudaAttentions.*:CudaActQuant.*:CudaLinearsFp8Act.*:Cases/CudaAttention.*:CudaDeterminism.*'
    [[ ${LITE:-0} == 2 ]] && f='CudaAttentions.StoredTail*:CudaActQuant.*'
    [[ ${LITE:-0} != 0 ]] || f="$f:CudaFused.*:Cases/CudaLinearFp8Act.*"
    timeout 200 $d/bin/cuda_ops_test --gtest_filter="$f" > "$OUT/ofp8_tests.log" 2>&1
    echo "tests rc $?"; summary "$OUT/ofp8_tests.log"; grep -E '^attentions_stored q_prep' "$OUT/ofp8_tests.log"
    for v in "4096 model_bench_prev" "4096 model_bench" "4096 model_bench_prev" "4096 model_bench" \
      "32768 model_bench_prev" "32768 model_bench"; do
      read -r n b <<< "$v"
      echo "$b 4 layers, $n: $(timeout 90 $d/bin/$b --preset flash --layers 4 --backend cuda --precision native \
        --prompt $n --decode 1 --profile 1 2>&1 | grep -E '^\| (attention|linear|act_quant|total) ' |
        awk -F'|' '{printf "%s %s ms; ", $2, $4}')"
    done
    for b in model_bench_prev model_bench model_bench_prev model_bench; do
      echo "prefill 4096 [$b]: $(timeout 60 $d/bin/$b --preset flash --layers 4 --backend cuda --precision native \
        --prompt 4096 --decode 2 2>&1 | grep -oE 'prefill [0-9]+ tokens in [^;]*')"
    done
    [[ ${LITE:-0} != 0 ]] && exit 0
    timeout 90 $d/bin/model_bench --preset flash --layers 4 --backend cuda --precision native --prompt 4096 \
      --decode 1 --profile shapes > "$OUT/shapes_4096.log" 2>&1
    echo "== shapes 4096 rc $?"; grep -E '^\|' "$OUT/shapes_4096.log" | head -24
    ;;
  qprep)  # (pack: TRACE=0 BINS="bench/model_bench tests/gpu/cuda_ops_test", branch wip/attn-qprep, which holds
           # wip/mhc-tf32) the TF32 mixes and attention_wgp's prepared queries: their cases (the measured errors
           # printed), then the 4K prefill's rows and tokens/s with each off and on, 32K once each way
    timeout 150 $d/bin/cuda_ops_test \
      --gtest_filter='CudaFused.*:CudaMhc.*:CudaDeterminism.*:CudaBatchedState.*:CudaAttentions.*:Cases/CudaAttention.*' \
      > "$OUT/qprep_tests.log" 2>&1
    echo "tests rc $?"; summary "$OUT/qprep_tests.log"
    grep -E '^mhc_pre_norm tf32|^attentions_stored q_prep' "$OUT/qprep_tests.log"
    runs=("4096 0 0" "4096 1 0" "4096 1 1" "4096 0 0" "4096 1 0" "4096 1 1")
    [[ ${LITE:-0} == 1 ]] || runs+=("32768 0 0" "32768 1 1")
    for v in "${runs[@]}"; do
      read -r n t qp <<< "$v"
      echo "4 layers, $n [TF32=$t QPREP=$qp]: $(DEEPINFER_MHC_TF32=$t DEEPINFER_ATTN_QPREP=$qp timeout 90 \
        $d/bin/model_bench --preset flash --layers 4 --backend cuda --precision native --prompt $n --decode 1 \
        --profile 1 2>&1 | grep -E '^\| (mhc_pre_norm|attention|rms_norm_rope|total) ' |
        awk -F'|' '{printf "%s %s ms; ", $2, $4}')"
    done
    for v in "0 0" "1 1" "0 0" "1 1"; do
      read -r t qp <<< "$v"
      echo "prefill 4096 [TF32=$t QPREP=$qp]: $(DEEPINFER_MHC_TF32=$t DEEPINFER_ATTN_QPREP=$qp timeout 60 \
        $d/bin/model_bench --preset flash --layers 4 --backend cuda --precision native --prompt 4096 \
        --decode 2 2>&1 | grep -oE 'prefill [0-9]+ tokens in [^;]*')"
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
  s7)  # (pack: BINS="tests/gpu/cuda_ops_test tests/gpu/cuda_model_test bench/model_bench", TRACE=1; ~7 min)
        # the four options written in the seventh session and not yet run, each off by default: their cases
        # with all on, cuda_model_test with all on, the 4K prefill with none, each and all (twice), the trace
        # and the 32K prefill with all on and none, transformers at 4K
    on=(DEEPINFER_BF16X3_SHARE=1 DEEPINFER_ATTN_PREFETCH=1 DEEPINFER_TILE_ROWS_LOADS=4 DEEPINFER_W4A8_SS_SWIGLU=1)
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
  s7q)  # (pack: s7's binaries and bench/model_bench_ring4; ~5 min) s7 and s7b trimmed for a short budget:
         # the cases with all four on, cuda_model_test with all on, the 4K prefill with none, each and all once,
         # then main's W4A8 kernel against four stages / four raw slots once
    on=(DEEPINFER_BF16X3_SHARE=1 DEEPINFER_ATTN_PREFETCH=1 DEEPINFER_TILE_ROWS_LOADS=4 DEEPINFER_W4A8_SS_SWIGLU=1)
    env "${on[@]}" timeout 170 $d/bin/cuda_ops_test --gtest_filter='CudaLinears.*:Cases/CudaLinear.*bf16x3*:Cases/CudaAttention.*:CudaAttentions.*:CudaMoeW4a8.*:Cases/CudaMoe.MatchesRef/native*' \
      > "$OUT/s7_tests.log" 2>&1
    echo "op tests rc $?"; summary "$OUT/s7_tests.log"
    env "${on[@]}" DEEPINFER_TEST_DATA=$PWD/tests/data timeout 110 $d/bin/cuda_model_test > "$OUT/s7_model.log" 2>&1
    echo "cuda_model_test rc $?"; summary "$OUT/s7_model.log"
    rate() { b=${B:-model_bench}; env "$@" timeout 40 $d/bin/$b --preset flash --layers 4 --backend cuda \
      --precision native --prompt 4096 --decode 2 2>&1 | grep -oE 'prefill [0-9]+ tokens in [^;]*|out of.*'; }
    echo "none: $(rate X=0)"
    for e in "${on[@]}"; do echo "$e: $(rate "$e")"; done
    echo "all: $(rate "${on[@]}")"
    echo "ring4: $(B=model_bench_ring4 rate X=0)"; echo "none: $(rate X=0)"; echo "ring4: $(B=model_bench_ring4 rate X=0)"
    echo "all: $(rate "${on[@]}")"; echo "ring4 + the first three (its SwiGLU form serialised, C7511): $(B=model_bench_ring4 rate "${on[@]:0:3}")"
    ;;
  s7b)  # (pack: BINS="bench/model_bench bench/model_bench_ring4", the second built with moe_w4a8_bulk_ss.cu's
         # kStages 4 and ring(2) 4; ~2 min) the converting W4A8 kernel with four stages and four raw slots a
         # converter against main's five and three: the 4K MoE profile row and the 4K prefill, alternating
    for rep in 1 2; do
      for b in model_bench model_bench_ring4; do
        echo "$b moe: $(timeout 60 $d/bin/$b --preset flash --layers 4 --backend cuda --precision native \
          --prompt 4096 --decode 1 --profile 1 2>&1 | grep -E '^\| (moe|total) ' | awk -F'|' '{printf "%s %s ms; ", $2, $4}')"
        echo "$b prefill: $(timeout 60 $d/bin/$b --preset flash --layers 4 --backend cuda --precision native \
          --prompt 4096 --decode 2 2>&1 | grep -oE 'prefill [0-9]+ tokens in [^;]*|out of.*')"
      done
    done
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
  trace)  # (a TRACE=1 pack of model_bench and cuda_ops_test) the indexer's fixed test and the 4K A/B of its walking
          # blocks, then each MoE kernel's time in a 4-layer 4K prefill (CUPTI): the default, the bulk kernel
          # whole and with every part left out (31) and the stores too (63)
    timeout 60 $d/bin/cuda_ops_test --gtest_filter='CudaIndexerNative.*' > "$OUT/indexer.log" 2>&1
    echo "indexer native tests rc $?"; summary "$OUT/indexer.log"
    for w in - DEEPINFER_INDEXER_MMA_WALK=1 - DEEPINFER_INDEXER_MMA_WALK=1; do
      envs=(); [[ $w == - ]] || envs=("$w")
      echo "prefill 4096 [$w]: $(env "${envs[@]}" timeout 40 $d/bin/model_bench --preset flash --layers 4 --backend cuda \
        --precision native --prompt 4096 --decode 1 --profile 1 2>&1 | grep -E '^\| (indexer_topk|total) ' | head -2 | tr '\n' ' ')"
    done
    for v in default 0 31 63; do
      envs=(DEEPINFER_W4A8_BULK=0); [[ $v == default ]] || envs=(DEEPINFER_W4A8_BULK=1 DEEPINFER_W4A8_BULK_PROBE=$v)
      env "${envs[@]}" CUDA_INJECTION64_PATH=$PWD/$d/lib/libkernel_trace.so DEEPINFER_TRACE_OUT=$OUT/trace_$v.csv \
        timeout 60 $d/bin/model_bench --preset flash --layers 4 --backend cuda --precision native --prompt 4096 \
        --decode 1 --warmup 0 > "$OUT/trace_$v.log" 2>&1
      echo "== trace [$v] rc $?"; python3 tools/trace_totals.py "$OUT/trace_$v.csv" 12 | cut -c1-150
    done
    ;;
  bulkprobe)  # where the w4a8 kernels' time goes (the shapes pack): the inner loop alone, the converting-warpgroup
              # kernel, the bulk kernel (no copy instruction in its multiplying warps) with parts left out
              # (DEEPINFER_W4A8_BULK_PROBE, timing only: 1 conversion, 2 promotion, 4 wgmmas, 8 weight copies,
              # 16 token copies), the MoE's profile row each
    [[ -x $d/bin/wgmma_fp8_probe ]] && timeout 60 $d/bin/wgmma_fp8_probe
    # the converting-warpgroup kernel (DEEPINFER_W4A8_BULK_SS): its bit test, then the prefill against the default
    timeout 60 $d/bin/cuda_ops_test --gtest_filter='CudaMoeW4a8.*' > "$OUT/bulk_ss_test.log" 2>&1
    echo "w4a8 tests rc $?"; summary "$OUT/bulk_ss_test.log"
    for ss in 0 1 0 1; do
      envs=(DEEPINFER_W4A8_BULK=0); ((ss)) && envs=(DEEPINFER_W4A8_BULK_SS=1)
      echo "prefill 4096 [${envs[*]}]: $(env "${envs[@]}" timeout 40 $d/bin/model_bench --preset flash --layers 4 \
        --backend cuda --precision native --prompt 4096 --decode 1 --profile 1 2>&1 | grep -E '^\| (moe|total) ' | tr '\n' ' ')"
    done
    for pr in 0 1 2 4 3 7 8 16 24 31; do
      echo "bulk probe $pr: $(DEEPINFER_W4A8_BULK=1 DEEPINFER_W4A8_BULK_PROBE=$pr timeout 40 $d/bin/model_bench --preset flash \
        --layers 4 --backend cuda --precision native --prompt 4096 --decode 1 --profile 1 2>&1 | grep -E '^\| moe ' | head -1)"
    done
    ;;
  w4a8ncu)  # Nsight Compute's stall reasons and pipe use on one up launch of the bulk kernel and the default
    ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
    for k in bulk default; do
      [[ $k == bulk ]] && envs=(DEEPINFER_W4A8_BULK=1) || envs=(DEEPINFER_W4A8_BULK=0)
      env "${envs[@]}" timeout 250 "$ncu" --kernel-name regex:'moe_w4a8_(bulk_)?kernel' --launch-skip 2 --launch-count 1 \
        --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy \
        --section InstructionStats $d/bin/model_bench --preset flash --layers 2 --backend cuda --precision native \
        --prompt 4096 --decode 1 --warmup 0 --graphs off > "$OUT/ncu_$k.txt" 2>&1
      echo "ncu $k rc $?"; grep -E "Duration|Executed Ipc|Issue Slots Busy|Tensor|Stall|Warp Cycles Per Issued|Achieved Occupancy|Registers Per" "$OUT/ncu_$k.txt" | head -24
    done
    ;;
  mma)  # mma's 8-token passes and wider passes for the native precision's batches (the shapes pack)
    timeout 150 $d/bin/cuda_ops_test --gtest_filter='CudaMoeMma.*:Cases/CudaMoe.MatchesRef/native*_mma' \
      > "$OUT/mma.log" 2>&1
    echo "mma tests rc $?"; summary "$OUT/mma.log"
    for b in 128 256; do for s in - DEEPINFER_MOE_MMA_TOK8=1 DEEPINFER_MOE_MMA_PAIRS=2047 both; do
      envs=(); [[ $s == - ]] || envs=("$s"); [[ $s == both ]] && envs=(DEEPINFER_MOE_MMA_TOK8=1 DEEPINFER_MOE_MMA_PAIRS=2047)
      echo "batch $b [$s] $(env "${envs[@]}" timeout 60 $d/bin/model_bench --preset flash --layers 4 --backend cuda \
        --precision native --batch $b --prompt 16 --context 4096 --decode 8 2>&1 | grep -oE "decode [0-9]+ steps.*")"
    done; done
    ;;
  next)  # the ring probe, then speculative decoding's speed (one pack, above)
    timeout 90 $d/bin/persistent_layer_probe 8 5 1 0.5 0
    for p in native exact; do
      timeout 110 $d/bin/spec_bench --backend cuda --preset flash --layers 4 --precision $p --prompt 128 \
        --decode 48 --accept "0 0.85" 2>&1 | tail -5
    done
    ;;
  probe)
    [[ -x $d/bin/grid_sync_probe ]] && timeout 30 $d/bin/grid_sync_probe
    timeout 60 $d/bin/persistent_layer_probe 8 5 1 0.5 0.25 0
    ;;
  once)  # w4a8's scales in the stages against the default, copied once (pack above)
    timeout 240 $d/bin/cuda_ops_test --gtest_filter='CudaMoeW4a8.*:Cases/CudaMoe.MatchesRef/*_w4a8' \
      > "$OUT/once.log" 2>&1
    echo "w4a8 tests rc $?"; summary "$OUT/once.log"
    for r in 1 2; do for s in - DEEPINFER_W4A8_SCALES_IN_STAGES=1; do
      envs=(); [[ $s == - ]] || envs=("$s")
      echo "round $r [$s] $(env "${envs[@]}" timeout 120 $d/bin/model_bench --preset flash --layers 4 --backend cuda \
        --precision native --prompt 4096 --decode 1 2>&1 | grep -oE "prefill [0-9]+ tokens in [0-9.]+ s = [0-9.]+ tokens/s")"
    done; done
    for s in - DEEPINFER_W4A8_SCALES_IN_STAGES=1; do
      envs=(); [[ $s == - ]] || envs=("$s")
      env "${envs[@]}" timeout 150 $d/bin/cuda_kernel_bench --only moe_prefill > "$OUT/moe_prefill_$s.log" 2>&1
      echo "[$s] rc $?"; grep -E "^\| moe fp4 n=(2730|4096)" "$OUT/moe_prefill_$s.log" | grep w4a8
    done
    # the hypothesis itself: shared-memory wavefronts and time of layer 1's up launch, without and with it
    ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
    for s in - DEEPINFER_W4A8_SCALES_IN_STAGES=1; do
      envs=(); [[ $s == - ]] || envs=("$s")
      env "${envs[@]}" timeout 90 "$ncu" --kernel-name regex:moe_w4a8_kernel --launch-skip 2 --launch-count 1 \
        --metrics gpu__time_duration.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__inst_executed.sum,l1tex__throughput.avg.pct_of_peak_sustained_active \
        $d/bin/model_bench --preset flash --layers 2 --backend cuda --precision native --prompt 4096 --decode 1 \
        --warmup 0 --graphs off 2>/dev/null | grep -E "gpu__time|wavefronts|inst_executed|l1tex__throughput" | sed "s/^/[$s] /"
    done
    [[ -x $d/bin/spec_bench ]] && PART=spec OUT=$OUT "$0"
    ;;
  moecopy)
    timeout 240 $d/bin/cuda_kernel_bench --only moe_prefill > "$OUT/moe_prefill.log" 2>&1
    echo "moe_prefill rc $?"; grep -E "^\| moe fp4 n=(2730|4096)" "$OUT/moe_prefill.log"
    ;;
  timeline)
    OUT=$OUT/tl PRECISION=native BATCH=1 LAYERS=16 TRACE_TIMEOUT=50 timeout 60 tools/gpu_timeline.sh 2>/dev/null |
      head -14
    ;;
  ncu)
    OUT=$OUT/ncu BATCH=1 LAYERS=4 NCU_TIMEOUT=280 timeout 290 tools/gpu_ncu_stalls.sh
    OUT=$OUT/ncu LAYERS=4 PROMPT=4096 DECODE=1 SKIP=0 COUNT=8 NCU_TIMEOUT=280 \
      KERNELS='moe_w4a8_kernel|attention_mma64|indexer_mma' timeout 290 tools/gpu_ncu_stalls.sh
    ;;
  *) echo "PART: s7 | ssconv2 | tracemain | ssloop | attnlite | ssncu | attnwgp | ssdefault | indexer | bulkprobe | w4a8ncu | bulk | shapes | mma | once | next | all | probe | fused | fp8 | roofline | spec | moecopy | timeline | ncu"; exit 2 ;;
esac
exit 0
