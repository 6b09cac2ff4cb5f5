#!/usr/bin/env python3
"""Encode throughput of Hugging Face `tokenizers` (one thread) on a text file, for comparison with
bench/tokenizer_bench. Usage: tokenizer_bench_hf.py TOKENIZER_JSON TEXT_FILE [REPEATS] [whole|lines]"""
import os
import sys
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
import tokenizers  # noqa: E402


def main():
    tok = tokenizers.Tokenizer.from_file(sys.argv[1])
    data = open(sys.argv[2], "rb").read()
    text = data.decode("utf-8", errors="replace")
    repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    lines = len(sys.argv) > 4 and sys.argv[4] == "lines"
    units = text.splitlines(keepends=True) if lines else [text]
    if lines:  # split on "\n" only, as bench/tokenizer_bench does
        units = [u + "\n" for u in text.split("\n")]
        units[-1] = units[-1][:-1]
        units = [u for u in units if u]
    best, n = 1e30, 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        n = sum(len(tok.encode(u).ids) for u in units)
        best = min(best, time.perf_counter() - t0)
    mode = "per line" if lines else "whole text"
    print(f"hf tokenizers {tokenizers.__version__} encode ({mode}): {sys.argv[2]} {len(data)} bytes -> {n} ids, "
          f"best of {repeats}: {best:.3f} s = {len(data) / best / 1e6:.2f} MB/s")


if __name__ == "__main__":
    main()
