#!/usr/bin/env bash
# One GPU call for expert parallelism (docs/parallel.md) on whatever GPUs the machine has (~3 min):
# - nccl_test: the NCCL group on every GPU (one rank on a one-GPU machine), all_to_all included;
# - cuda_model_test: graph replay, the 1,100-token golden of v4_tiny_fp8 on cuda (exact, and native with
#   the W4A8 MoE), the expert-parallel model with several ranks on GPU 0 (a device-copy
#   group), and with 2 and 4 GPUs where present (skipped otherwise), each against one rank bit for bit;
# - the golden fixtures through `deepinfer score`; greedy continuations against transformers' (first divergence);
# - `deepinfer run --backend cuda --temperature 0` on the demo model with --gpus 1 and every GPU count up to
#   what is present (at most 4): the same text (one md5 line per count).
#   BINS="tests/gpu/cuda_model_test tests/gpu/nccl_test deepinfer" tools/gpu_pack.sh   (here; then the
#   device tool with carry ["build-cuda-xz"]):   OUT=$OUT tools/gpu_parallel_check.sh
set -uo pipefail
OUT=${OUT:-/tmp/gpu_parallel_check}; mkdir -p "$OUT"
d=build-cuda-carry; [[ -d $d ]] || tar xJf build-cuda-xz/carry.tar.xz; export LD_LIBRARY_PATH=$PWD/$d/lib
export DEEPINFER_TEST_DATA=$PWD/tests/data
summary() { grep -E "^\[  FAILED|^\[==========\] [0-9]+ tests|^\[  PASSED|^\[  SKIPPED|Failure" "$1" | head -12; }
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
echo "GPUs: $gpus"
timeout 120 $d/bin/nccl_test > "$OUT/nccl.log" 2>&1
echo "nccl_test rc $?"; summary "$OUT/nccl.log"
timeout 300 $d/bin/cuda_model_test > "$OUT/model.log" 2>&1
echo "cuda_model_test rc $?"; summary "$OUT/model.log"
timeout 60 tools/gpu_goldens.sh $d/bin "$OUT"
# greedy continuations of both precisions on cuda against transformers' (fp32, bf16, fp8 activations)
timeout 120 python3 tools/greedy_divergence.py $d/bin/deepinfer cuda 2>/dev/null | tee "$OUT/greedy.txt"
for n in $(seq 1 $((gpus < 4 ? gpus : 4))); do
  timeout 120 $d/bin/deepinfer run --backend cuda --gpus $n --prompt "Hello" --temperature 0 --max-new-tokens 16 \
    > "$OUT/run_$n.txt" 2> "$OUT/run_$n.err"
  echo "run --gpus $n rc $? $(md5sum < "$OUT/run_$n.txt")"
done
exit 0
