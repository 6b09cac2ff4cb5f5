#!/usr/bin/env python3
"""Per-kernel totals of a kernel trace (the CSV that tools/kernel_trace writes under CUDA_INJECTION64_PATH):
total time, launches and time per launch of each kernel name, largest first; with --calls N, also each
kernel's N longest launches (a prefill's big calls apart from the same kernel's decode-sized ones). On the GPU
machine:
  CUDA_INJECTION64_PATH=$PWD/build-cuda-carry/lib/libkernel_trace.so DEEPINFER_TRACE_OUT=$OUT/tr.csv \\
      build-cuda-carry/bin/cuda_kernel_bench --only moe_prefill
  python3 tools/trace_totals.py $OUT/tr.csv [top=30] [--calls N]"""
import argparse
import collections
import csv
import re

ap = argparse.ArgumentParser()
ap.add_argument("csv")
ap.add_argument("top", nargs="?", type=int, default=30)
ap.add_argument("--calls", type=int, default=0, help="also list each kernel's N longest launches (us)")
a = ap.parse_args()

launches = collections.defaultdict(list)
for row in csv.DictReader(open(a.csv)):
    name = re.sub(r"\(.*", "", row["name"].replace("(anonymous namespace)::", "").replace("di::cuda::", ""))
    launches[name].append((int(row["end_ns"]) - int(row["start_ns"])) / 1e3)
ranked = sorted(launches.items(), key=lambda kv: -sum(kv[1]))[: a.top]
for name, us in ranked:
    line = f"{sum(us):12.1f} us {len(us):6d} x {sum(us) / len(us):10.2f} us  {name[:100]}"
    if a.calls:
        line += "\n" + " " * 14 + "longest: " + ", ".join(f"{x:.1f}" for x in sorted(us, reverse=True)[: a.calls])
    print(line)
