#!/usr/bin/env python3
"""One decode step's kernels from a CUPTI kernel trace (tools/kernel_trace's CSV): the step's span, kernel time
and idle gaps, then per kernel name its launches, its kernel time and its exposed time, how far it moves the
step's end past every kernel before it. Early-launched kernels start before their predecessor ends and wait
inside, so their kernel time overstates their cost; idle time before a kernel counts to it, so the exposed
times add up to the span.
  tools/timeline_report.py TRACE.csv [PER_KERNEL_LIST.txt] [--top N]"""
import argparse
import collections
import csv
import re
import sys


def load(path):
    def name(n):
        n = n.replace("(anonymous namespace)::", "").replace("di::cuda::", "")
        return re.sub(r"\(.*", "", n)
    return sorted((int(r["start_ns"]), int(r["end_ns"]), name(r["name"])) for r in csv.DictReader(open(path)))


def one_step(ks):
    """The second-to-last step (the last ends with the run's tail); a step starts with its embed kernels."""
    starts = [i for i, k in enumerate(ks) if "embed" in k[2] and (i == 0 or "embed" not in ks[i - 1][2])]
    if len(starts) < 3:
        sys.exit(f"{len(ks)} kernels, too few step boundaries")
    return ks[starts[-2]:starts[-1]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("listing", nargs="?")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    step = one_step(load(a.trace))
    t0 = step[0][0]
    gaps = [max(0, step[i + 1][0] - step[i][1]) for i in range(len(step) - 1)]
    busy = sum(e - s for s, e, _ in step)
    exposed, kernel, count = collections.Counter(), collections.Counter(), collections.Counter()
    end = t0
    for s, e, n in step:
        exposed[n] += max(0, e - end) / 1e3
        end = max(end, e)
        kernel[n] += (e - s) / 1e3
        count[n] += 1
    span = (end - t0) / 1e3
    print(f"one step: {len(step)} kernels, span {span:.1f} us, kernel time {busy / 1e3:.1f} us, "
          f"idle {sum(gaps) / 1e3:.1f} us (median gap {sorted(gaps)[len(gaps) // 2] / 1e3:.2f} us, "
          f"gaps > 5 us: {sum(g > 5000 for g in gaps)} totalling {sum(g for g in gaps if g > 5000) / 1e3:.1f} us)")
    print(f"{'exposed us':>10} {'share':>6} {'launches':>8} {'kernel us':>10}  kernel")
    for n, t in exposed.most_common(a.top):
        print(f"{t:10.1f} {100 * t / span:5.1f}% {count[n]:8d} {kernel[n]:10.1f}  {n[:90]}")
    if a.listing:
        with open(a.listing, "w") as f:
            for (s, e, n), g in zip(step, gaps + [0]):
                f.write(f"{(s - t0) / 1e3:9.2f} {(e - s) / 1e3:8.2f} gap {g / 1e3:6.2f}  {n[:110]}\n")


if __name__ == "__main__":
    main()
