#!/usr/bin/env python3
"""Per-kernel totals of a kernel trace (the CSV that tools/kernel_trace writes under CUDA_INJECTION64_PATH):
total time, launches and time per launch of each kernel name, largest first. On the GPU machine:
  CUDA_INJECTION64_PATH=$PWD/build-cuda-carry/lib/libkernel_trace.so DEEPINFER_TRACE_OUT=$OUT/tr.csv \\
      build-cuda-carry/bin/cuda_kernel_bench --only moe_prefill
  python3 tools/trace_totals.py $OUT/tr.csv [top=30]"""
import collections
import csv
import re
import sys

total = collections.Counter()
count = collections.Counter()
for row in csv.DictReader(open(sys.argv[1])):
    name = re.sub(r"\(.*", "", row["name"].replace("(anonymous namespace)::", "").replace("di::cuda::", ""))
    total[name] += (int(row["end_ns"]) - int(row["start_ns"])) / 1e3
    count[name] += 1
for name, us in total.most_common(int(sys.argv[2]) if len(sys.argv) > 2 else 30):
    print(f"{us:12.1f} us {count[name]:6d} x {us / count[name]:10.2f} us  {name[:100]}")
