#!/usr/bin/env bash
# Packs what the GPU machine needs from a CUDA build into a small folder that the device tool can carry
# (the whole build directory is far over its 64 MiB limit): the gpu test and benchmark binaries plus the
# shared libraries they need that the GPU image lacks (libfmt, libedit, libcpp-httplib and what they link), and the same as one xz tarball
# (${out%-carry}-xz/carry.tar.xz, ~2 MB a binary: the tracked tree alone is ~59 MB of the 64 MiB a call may
# carry, so three binaries at most). On the GPU machine: tar xJf build-cuda-xz/carry.tar.xz
# (tools/gpu_decode_run.sh does it).
#   [BINS="deepinfer bench/model_bench ..."] tools/gpu_pack.sh [build-dir=build-cuda] [out=build-cuda-carry]
set -euo pipefail
build=${1:-build-cuda}
out=${2:-build-cuda-carry}
rm -rf "$out" && mkdir -p "$out/bin" "$out/lib"
# BINS: which binaries (the tracked tree and the carry share a call's 64 MiB, so a call may need fewer);
# cuda_ops_bench only when named there
bins=${BINS:-"tests/gpu/cuda_ops_test tests/gpu/cuda_model_test tests/gpu/nccl_test bench/cuda_kernel_bench deepinfer bench/model_bench"}
for b in $bins; do
  [ -x "$build/$b" ] && cp "$build/$b" "$out/bin/"
done
for f in "$out"/bin/*; do
  ldd "$f" | awk '/libfmt|libedit|libbsd|libmd|libcpp-httplib|libbrotli/ {print $3}' | sort -u | xargs -r -I{} cp -L {} "$out/lib/"
done
# the CUPTI kernel timeline (tools/gpu_timeline.sh) and the CUPTI it links, where the build has them
# (TRACE=0 leaves them out: ~1.5 MB of a call's 64 MiB)
if [ "${TRACE:-1}" != 0 ] && [ -f "$build/libkernel_trace.so" ]; then
  cp "$build/libkernel_trace.so" "$out/lib/"
  ldd "$build/libkernel_trace.so" | awk '/libcupti/ {print $3}' | xargs -r -I{} cp -L {} "$out/lib/"
fi
strip "$out"/bin/* 2>/dev/null || true
du -sh "$out"
for f in "$out"/bin/*; do echo "== $f"; ldd "$f" | awk '{print "   " $1}'; done
xz_dir=${out%-carry}-xz  # build-cuda-carry -> build-cuda-xz: a second pack beside the first keeps both
mkdir -p "$xz_dir"
tar cf - "$out" | xz -9 -T2 > "$xz_dir/carry.tar.xz"
ls -la build-cuda-xz/carry.tar.xz
