#!/usr/bin/env python3
"""The SASS lines with the most warp-state samples in an Nsight Compute source export.

usage: ncu --import R.ncu-rep --page source --print-source sass --csv > R.csv; ncu_top_lines.py R.csv [N]
Prints each of the N hottest lines' share of all samples and, per stall reason column, the five largest.
"""
import csv
import sys


def num(x):
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return 0.0


def main():
    rows = list(csv.reader(open(sys.argv[1], errors="replace")))
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    head = next((i for i, r in enumerate(rows) if any("Sampling" in c for c in r)), None)
    if head is None:
        print("no sampling columns:", rows[:3])
        return
    h = rows[head]
    alls = [i for i, c in enumerate(h) if "Sampling" in c and "All" in c]
    col = alls[0] if alls else next(i for i, c in enumerate(h) if "Sampling" in c)
    src = next((i for i, c in enumerate(h) if c.strip() == "Source"), 1)
    body = [r for r in rows[head + 1:] if len(r) > col]
    total = sum(num(r[col]) for r in body) or 1.0
    print(f"{h[col]}: {total:.0f} samples")
    for r in sorted(body, key=lambda r: -num(r[col]))[:n]:
        print(f"{100 * num(r[col]) / total:5.1f}%  {r[src][:110]}")
    # the stall reasons' totals, where the export has them (columns named "stall_*" or "Stall ...")
    reasons = [i for i, c in enumerate(h) if "stall" in c.lower() and i != col]
    sums = sorted(((sum(num(r[i]) for r in body), h[i]) for i in reasons), reverse=True)
    for s, name in sums[:12]:
        if s > 0:
            print(f"{100 * s / total:5.1f}%  {name}")


if __name__ == "__main__":
    main()
